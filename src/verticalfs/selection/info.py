"""Entropy, mutual information and their conditional forms from integer codes (feast.md section 3.1).

All quantities are in bits (log base 2, feast.md equation 1) and use empirical probabilities.
Several code columns are combined into one joint code (:func:`joint_codes`: mixed radix, compressed
with :func:`numpy.unique` after each step so the radix never overflows) and counted with
:func:`numpy.bincount`; nothing loops over rows.

The ``column_*`` functions evaluate the same quantity for every column of a code matrix at once
(one :func:`numpy.bincount` over ``column * R + joint code``), which is how a FEAST party scores all
of its candidate features against one statistical variable in one pass.
"""

from __future__ import annotations

import numpy as np

from verticalfs.exceptions import DataError

#: bincount cells handled at once by the column functions (bounds memory)
_MAX_CELLS = 1 << 24


def _codes(a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in "iub":
        if a.dtype.kind == "f" and np.all(np.isfinite(a)) and np.all(a == np.round(a)):
            a = a.astype(np.int64)
        else:
            raise DataError(f"expected integer codes, got dtype {a.dtype}; discretize the column first")
    a = a.astype(np.int64, copy=False)
    if a.size and a.min() < 0:
        raise DataError("integer codes must be non-negative")
    return a


def dense(codes) -> np.ndarray:
    """Relabel codes to ``0 .. k-1`` (sorted order), int64."""
    return np.unique(_codes(codes), return_inverse=True)[1].reshape(-1).astype(np.int64)


def joint_codes(*codes) -> np.ndarray:
    """One dense code per row for the combination of several code arrays (same length)."""
    if not codes:
        raise DataError("joint_codes needs at least one code array")
    out = dense(codes[0])
    for c in codes[1:]:
        c = dense(c)
        if len(c) != len(out):
            raise DataError(f"code arrays of different lengths: {len(out)} and {len(c)}")
        k = int(c.max()) + 1 if c.size else 1
        out = dense(out * k + c)
    return out


def _entropy_from_counts(counts: np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """Entropy (bits) along the last axis of a count array with totals ``n``."""
    counts = np.asarray(counts, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    p = counts / np.where(n > 0, n, 1.0)[..., None] if counts.ndim > 1 else counts / max(float(n), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    return -t.sum(-1)


def entropy(*codes) -> float:
    """(Joint) entropy ``H(X1, ..., Xk)`` in bits (feast.md equation 1)."""
    j = joint_codes(*codes)
    if j.size == 0:
        return 0.0
    return float(_entropy_from_counts(np.bincount(j), len(j)))


def conditional_entropy(x, z) -> float:
    """``H(X | Z) = H(X, Z) - H(Z)`` (feast.md equation 2)."""
    return entropy(x, z) - entropy(z)


def mutual_info(x, y) -> float:
    """``I(X; Y) = H(X) + H(Y) - H(X, Y)`` (feast.md equation 3)."""
    return max(0.0, entropy(x) + entropy(y) - entropy(x, y))


def conditional_mutual_info(x, y, z) -> float:
    """``I(X; Y | Z) = H(X, Z) + H(Y, Z) - H(Z) - H(X, Y, Z)`` (feast.md equations 4 and 11)."""
    return max(0.0, entropy(x, z) + entropy(y, z) - entropy(z) - entropy(x, y, z))


def symmetric_uncertainty(x, y) -> float:
    """``SU(X, Y) = 2 I(X; Y) / (H(X) + H(Y))`` in [0, 1]; 0 when both are constant."""
    hx, hy = entropy(x), entropy(y)
    if hx + hy <= 0:
        return 0.0
    return 2.0 * mutual_info(x, y) / (hx + hy)


# ------------------------------------------------------------------ one quantity per column
def column_counts(C, base=None) -> tuple[np.ndarray, int]:
    """Counts of the joint values ``(base, C[:, i])`` for every column ``i``.

    Parameters
    ----------
    C : int array (n, d)
        Code matrix (codes ``< C.max() + 1``).
    base : int array (n,), optional
        A (joint) code shared by all columns; ``None`` = no conditioning variable.

    Returns
    -------
    counts : array (d, R) of int64
        ``counts[i, b * K + c]`` = number of rows with ``base = b`` and ``C[:, i] = c``.
    n : int
        Number of rows.
    """
    C = np.asarray(C)
    if C.ndim != 2:
        raise DataError(f"expected a 2-D code matrix, got shape {C.shape}")
    n, d = C.shape
    C = C.astype(np.int64, copy=False)
    K = int(C.max()) + 1 if C.size else 1
    b = np.zeros(n, dtype=np.int64) if base is None else dense(base)
    if len(b) != n:
        raise DataError(f"conditioning codes have {len(b)} rows, the code matrix {n}")
    nb = int(b.max()) + 1 if n else 1
    R = nb * K
    out = np.empty((d, R), dtype=np.int64)
    step = max(1, _MAX_CELLS // max(1, R, n))
    bk = (b * K)[:, None]
    for s in range(0, d, step):  # chunks of columns, each one bincount
        e = min(d, s + step)
        flat = (bk + C[:, s:e]) + (np.arange(e - s, dtype=np.int64) * R)[None, :]
        out[s:e] = np.bincount(flat.ravel(), minlength=(e - s) * R).reshape(e - s, R)
    return out, n


def column_entropy(C, base=None) -> np.ndarray:
    """``H(base, C[:, i])`` for every column (``H(C[:, i])`` without ``base``), bits."""
    counts, n = column_counts(C, base)
    return _entropy_from_counts(counts, np.full(counts.shape[0], n))


def column_mutual_info(C, y) -> np.ndarray:
    """``I(Y; C[:, i])`` for every column, bits (feast.md equation 3)."""
    hy = entropy(y)
    return np.maximum(0.0, column_entropy(C) + hy - column_entropy(C, y))


def column_cmi_terms(C, y, v) -> dict[str, np.ndarray]:
    """The entropies of feast.md equations 11-12 for every column ``F_i = C[:, i]`` given ``V_j = v``.

    Returns ``cmi`` = ``I(Y; F_i | V_j)``, ``norm`` = ``H(Y, V_j) + H(V_j, F_i) - H(V_j)`` and
    ``support`` = ``|Y, F_i, V_j|``, the number of distinct observed ``(y, f_i, v_j)`` triples,
    ``h_yvf`` = ``H(Y, F_i, V_j)``.
    """
    h_yv = entropy(y, v)
    h_v = entropy(v)
    h_vf = column_entropy(C, v)
    counts, n = column_counts(C, joint_codes(y, v))
    h_yvf = _entropy_from_counts(counts, np.full(counts.shape[0], n))
    support = (counts > 0).sum(1)
    norm = h_yv + h_vf - h_v
    cmi = np.maximum(0.0, norm - h_yvf)
    return {"cmi": cmi, "norm": norm, "support": support, "h_yvf": h_yvf}


#: the estimators of ``I(Y; F)`` and ``I(Y; F | V)`` (:func:`column_mutual_info`, :func:`normalised_cmi`):
#: ``plugin`` = empirical probabilities (feast.md equations 1-4, the paper's); ``adjusted`` = the
#: plug-in value minus its mean under a permutation null (:func:`null_joint_entropy`)
ESTIMATORS: tuple[str, ...] = ("plugin", "adjusted")
#: permutations of the labels whose mean makes the ``adjusted`` estimator's chance baseline
NULL_DRAWS = 8


def check_estimator(estimator: str) -> str:
    """``estimator`` if it is one of :data:`ESTIMATORS`, else :class:`DataError` naming them."""
    if estimator not in ESTIMATORS:
        raise DataError(f"unknown mutual-information estimator {estimator!r}; use one of {ESTIMATORS}")
    return estimator


def permute_within(y, v, rng: np.random.Generator) -> np.ndarray:
    """``y`` shuffled within each stratum of ``v`` (all rows one stratum when ``v`` is None): every
    stratum keeps its multiset of labels, so ``H(Y, V)`` is unchanged and ``Y`` is independent of
    any column given ``V``. No loop over rows: one lexsort by (stratum, random key)."""
    y = np.asarray(y)
    n = len(y)
    s = np.zeros(n, dtype=np.int64) if v is None else dense(v)
    by_stratum = np.lexsort((np.arange(n), s))  # rows stratum by stratum, in row order
    shuffled = np.lexsort((rng.random(n), s))  # the same strata, rows in random order
    out = np.empty_like(y)
    out[by_stratum] = y[shuffled]
    return out


def null_joint_entropy(C, y, v, draws: int, rng: np.random.Generator) -> np.ndarray:
    """The mean over ``draws`` label permutations within the strata of ``v`` (:func:`permute_within`)
    of ``H(Y*, V, C[:, i])`` for every column, bits.

    Of the entropies of ``I(Y; F | V) = H(Y, V) + H(V, F) - H(V) - H(Y, F, V)`` only the last changes
    under such a permutation, so ``plug-in - mean null = mean H(Y*, F, V) - H(Y, F, V)``: the
    plug-in estimate with its expected value under conditional independence taken off (the
    permutation model of Romano et al. 2016, feast.md's reference [49], sampled instead of summed).
    A column independent of ``Y`` given ``V`` scores about 0 however many bins it fills; one that
    determines ``Y`` keeps nearly all of its plug-in value. ``v`` None: ``I(Y; F)``."""
    total = np.zeros(np.asarray(C).shape[1])
    for _ in range(int(draws)):  # a handful of draws, each one bincount over every column
        yp = permute_within(y, v, rng)
        counts, n = column_counts(C, yp if v is None else joint_codes(yp, v))
        total += _entropy_from_counts(counts, np.full(counts.shape[0], n))
    out: np.ndarray = total / max(int(draws), 1)
    return out


def adjusted_mutual_info(C, y, rng: np.random.Generator, draws: int = NULL_DRAWS) -> np.ndarray:
    """``I(Y; C[:, i])`` minus its mean under label permutation, bits (may be slightly negative for a
    column independent of ``Y``; see :func:`null_joint_entropy`)."""
    counts, n = column_counts(C, y)
    h_yf = _entropy_from_counts(counts, np.full(counts.shape[0], n))
    out: np.ndarray = null_joint_entropy(C, y, None, draws, rng) - h_yf
    return out


def normalised_cmi(C, y, v, score: str = "su", estimator: str = "plugin", rng: np.random.Generator | None = None,
                   draws: int = NULL_DRAWS) -> np.ndarray:
    """feast.md equation 12 for every column: ``I(Y; F_i | V_j) / (alpha [H(Y,V_j) + H(V_j,F_i) - H(V_j)])``.

    ``alpha = sqrt(|Y, F_i, V_j|)``, read as the number of distinct ``(y, f_i, v_j)`` combinations
    observed (the public FEAST implementation counts the non-empty cells of the contingency table).
    ``score="su-noalpha"`` drops alpha, ``score="cmi"`` returns the raw CMI (equation 4): the two
    ablations of feast.md section 5.4.2. A zero normaliser (Y and F_i determined by V_j) gives 0.
    ``estimator="adjusted"``: the CMI of the numerator less its mean under conditional independence
    (:func:`null_joint_entropy`, ``draws`` permutations from ``rng``), not clipped at 0 (a mean over
    several ``V_j`` of clipped values would keep a positive bias); the normaliser is the paper's.
    """
    return normalised_cmi_pair(C, y, v, score, estimator, rng, draws)[0]


def normalised_cmi_pair(C, y, v, score: str = "su", estimator: str = "plugin",
                        rng: np.random.Generator | None = None, draws: int = NULL_DRAWS
                        ) -> tuple[np.ndarray, np.ndarray]:
    """``(normalised_cmi with estimator, the same with the plug-in estimator)`` from one count:
    FEAST ranks by the first and deletes overlapping features by the second (the paper's test of
    an identical or similar feature, section 4.3, is about plug-in values of exactly or nearly 0)."""
    t = column_cmi_terms(C, y, v)
    den = t["norm"] * (np.sqrt(t["support"]) if score == "su" else 1.0) if score != "cmi" else None

    def norm(cmi: np.ndarray) -> np.ndarray:
        if den is None:
            return cmi
        return np.divide(cmi, den, out=np.zeros_like(cmi), where=den > 0)

    plugin = norm(t["cmi"])
    if check_estimator(estimator) == "plugin":
        return plugin, plugin
    null = null_joint_entropy(C, y, v, draws, rng if rng is not None else np.random.default_rng(0))
    return norm(null - t["h_yvf"]), plugin


def binned_mutual_info(X, edges: np.ndarray, y, rows: np.ndarray | None = None, estimator: str = "plugin",
                       rng: np.random.Generator | None = None, draws: int = NULL_DRAWS) -> np.ndarray:
    """``column_mutual_info(apply_bins(X, edges, rows), y)`` without the code matrix: the counts of
    every (column, label, code) are summed over row blocks of ``X`` (issue 39; a memory-mapped
    table is never copied whole), then laid out exactly as :func:`column_counts` lays them out, so
    the entropies are those of :func:`column_mutual_info` to the bit.

    ``X`` (n, d) float, ``edges`` its cut points ``(d, K)``, ``y`` the labels of the rows (all rows
    of ``X``, or ``rows``). ``estimator="adjusted"``: :func:`adjusted_mutual_info`'s value (the
    counts of ``draws`` permutations of ``y`` from ``rng`` summed in the same pass)."""
    from verticalfs.selection.discretize import coded_blocks

    X = np.asarray(X)
    d = X.shape[1]
    E = np.asarray(edges, dtype=np.float64)
    b = dense(y)
    n = len(b)
    if n != (X.shape[0] if rows is None else len(rows)):
        raise DataError(f"{n} labels for {X.shape[0] if rows is None else len(rows)} rows")
    hy = entropy(y)
    if d == 0:
        return np.zeros(0)
    nb = int(b.max()) + 1 if n else 1
    width = E.shape[1] + 1  # codes lie in 0 .. K
    # the labels, then (estimator "adjusted") each permutation of them: one count table each
    labelings = [b]
    if check_estimator(estimator) == "adjusted":
        g = rng if rng is not None else np.random.default_rng(0)
        labelings += [permute_within(b, None, g) for _ in range(int(draws))]
    counts = [np.zeros(d * nb * width, dtype=np.int64) for _ in labelings]
    top = 0
    cols = (np.arange(d, dtype=np.int64) * nb * width)[None, :]
    for s, e, codes in coded_blocks(X, E, rows):
        if codes.size:
            top = max(top, int(codes.max()))
        for lab, cnt in zip(labelings, counts, strict=True):
            flat = lab[s:e, None] * width + cols  # cell (column, label, code), one int64 block
            flat += codes
            cnt += np.bincount(flat.ravel(), minlength=cnt.size)
    K = top + 1
    h = []
    for cnt in counts:
        by_label = cnt.reshape(d, nb, width)[:, :, :K]
        h.append(_entropy_from_counts(by_label.reshape(d, nb * K), np.full(d, n)))
    if len(h) > 1:  # adjusted: mean H(Y*, F) over the permutations less H(Y, F)
        out: np.ndarray = np.mean(h[1:], axis=0) - h[0]
        return out
    h_c = _entropy_from_counts(counts[0].reshape(d, nb, width)[:, :, :K].sum(1), np.full(d, n))
    return np.maximum(0.0, h_c + hy - h[0])
