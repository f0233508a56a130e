"""Discretisation of a party's prepared columns into integer bin codes (feast.md section 4.1).

FEAST computes (conditional) mutual information on discrete variables, so each party bins its own
columns first, with at most ``B`` bins per column. Four methods (García et al. 2013, the survey
feast.md cites):

- ``equal-frequency`` (the paper's default, B = 8): cut points at the ``k/B`` quantiles;
- ``equal-width``: ``B`` intervals of equal width between the column's minimum and maximum;
- ``mdlp``: Fayyad & Irani's entropy-based recursive splitting with the minimum-description-length
  stopping rule (supervised);
- ``chimerge``: Kerber's bottom-up merging of adjacent intervals by the chi-square statistic
  (supervised).

**Supervised methods need labels.** Only the party holding the labels may fit ``mdlp`` or
``chimerge`` on its own columns; a party without labels asking for them gets a
:class:`~verticalfs.exceptions.ConfigError` naming the party and the fix (:func:`check_discretizer`).
In verticalfs the label holder (``"active"``) has no feature columns, so a federated method can
only offer the supervised methods to passive parties that have been *given* labels by the
protocol (FEAST's sampled labels), and only when the method says so explicitly.

Every column is coded by the number of its cut points strictly below the value
(``code = #{edges e : x > e}``), so a value equal to a cut point falls into the lower bin. Cut
points are stored as an ``(d, K)`` float array padded with NaN (``x > NaN`` is False), duplicate
cut points are dropped, so codes are dense ``0 .. n_bins - 1`` on the rows the bins were fitted on.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from verticalfs.exceptions import ConfigError, DataError
from verticalfs.selection.blocks import column_groups, row_blocks

DISCRETIZERS: tuple[str, ...] = ("equal-frequency", "equal-width", "mdlp", "chimerge")
SUPERVISED: tuple[str, ...] = ("mdlp", "chimerge")
_ALIASES = {"equal_frequency": "equal-frequency", "equalfrequency": "equal-frequency", "quantile": "equal-frequency",
            "equal_width": "equal-width", "equalwidth": "equal-width", "uniform": "equal-width"}
#: ChiMerge starts from at most this many intervals (equal-frequency) instead of one per distinct value
CHIMERGE_MAX_INITIAL = 256


def canonical_discretizer(method: str) -> str:
    """The canonical name of a discretiser; :class:`ConfigError` for an unknown one."""
    key = str(method).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in DISCRETIZERS:
        raise ConfigError(f"unknown discretizer {method!r}; use one of {DISCRETIZERS}")
    return key


def check_discretizer(method: str, *, has_labels: bool, party: str | None = None) -> str:
    """Validate ``method`` for a party; refuse a supervised method where there are no labels.

    Returns the canonical name.
    """
    key = canonical_discretizer(method)
    if key in SUPERVISED and not has_labels:
        who = f"party {party!r}" if party else "this party"
        raise ConfigError(
            f"{who} holds no labels, so it cannot fit the supervised discretizer {key!r}: only the label "
            "holder can run a supervised method (mdlp, chimerge) on its own columns. Use "
            "discretizer='equal-frequency' or 'equal-width' at feature-holding parties"
        )
    return key


def _check_bins(bins: int) -> int:
    if int(bins) < 2:
        raise ConfigError(f"bins (B) must be at least 2, got {bins}")
    return int(bins)


def _as_2d(X) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise DataError(f"expected a 2-D array (rows, columns) to discretize, got shape {X.shape}")
    if np.isnan(X).any():
        raise DataError("cannot discretize NaN values; impute them first (prepare(impute='median'))")
    return X


def _dedupe(E: np.ndarray) -> np.ndarray:
    """Sort each row of cut points, turn duplicates (and NaN) into NaN padding at the end."""
    E = np.sort(E, axis=1)  # NaN last
    dup = np.zeros_like(E, dtype=bool)
    dup[:, 1:] = E[:, 1:] == E[:, :-1]
    E = np.where(dup, np.nan, E)
    return np.sort(E, axis=1)


def _pad(edge_lists: list[np.ndarray]) -> np.ndarray:
    k = max([len(e) for e in edge_lists] + [0])
    E = np.full((len(edge_lists), k), np.nan)
    for j, e in enumerate(edge_lists):  # one row per column: building the result, not a data loop
        E[j, : len(e)] = e
    return _dedupe(E)


# --------------------------------------------------------------------------- public API
def fit_bins(X, method: str = "equal-frequency", bins: int = 8, y=None, *, party: str | None = None,
             overwrite: bool = False) -> np.ndarray:
    """Cut points of every column, ``(d, K)`` with NaN padding (at most ``bins - 1`` per column).

    Parameters
    ----------
    X : array (n, d)
        The columns to bin (a party's own prepared columns).
    method : str
        One of :data:`DISCRETIZERS`.
    bins : int
        ``B``, the maximum number of bins per column (feast.md: B = 8).
    y : array (n,), optional
        Integer labels; required by the supervised methods ``mdlp`` and ``chimerge``.
    party : str, optional
        Named in the error if a supervised method is asked for without labels.
    overwrite : bool
        ``X`` (float64) is a scratch copy the quantiles may reorder in place (saves a copy).
    """
    B = _check_bins(bins)
    key = check_discretizer(method, has_labels=y is not None, party=party)
    X = _as_2d(X)
    n, d = X.shape
    if n == 0:
        return np.full((d, 0), np.nan)
    if key == "equal-frequency":
        q = np.arange(1, B) / B
        E = np.quantile(X, q, axis=0, overwrite_input=overwrite).T  # (d, B-1)
        return _dedupe(E)
    if key == "equal-width":
        lo, hi = X.min(0), X.max(0)
        E = lo[:, None] + (hi - lo)[:, None] * (np.arange(1, B) / B)[None, :]
        return _dedupe(E)
    y = np.asarray(y)
    if y.shape != (n,):
        raise DataError(f"labels for {key} must have shape ({n},), got {y.shape}")
    _, y = np.unique(y, return_inverse=True)
    fit_col = _mdlp_column if key == "mdlp" else _chimerge_column
    return _pad([fit_col(X[:, j], y, B) for j in range(d)])


def _check_block(X: np.ndarray) -> None:
    if np.isnan(X).any():
        raise DataError("cannot discretize NaN values; impute them first (prepare(impute='median'))")


def _as_2d_view(X) -> np.ndarray:
    """``X`` as a 2-D array without a copy (a memory-mapped party stays mapped)."""
    X = np.asarray(X)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise DataError(f"expected a 2-D array (rows, columns) to discretize, got shape {X.shape}")
    return X


def code_block(X: np.ndarray, E: np.ndarray) -> np.ndarray:
    """Codes ``(n, d)`` int32 of a float64 block ``X`` under cut points ``E`` ``(d, K)``: one
    comparison of the block per cut point (a loop over at most ``B - 1`` cut points, not rows;
    ``x > NaN`` is False, so padding counts nothing)."""
    n, d = X.shape
    out = np.zeros((n, d), dtype=np.int32)
    for i in range(E.shape[1]):
        out += X > E[None, :, i]
    return out


def coded_blocks(X, edges: np.ndarray, rows: np.ndarray | None = None, size: int | None = None):
    """``(first, last, codes)`` over row blocks of ``X`` (all rows, or the sorted indices ``rows``):
    the codes of :func:`apply_bins`, a block at a time (:func:`verticalfs.selection.blocks.row_blocks`)."""
    X = _as_2d_view(X)
    E = np.asarray(edges, dtype=np.float64)
    if E.ndim != 2 or E.shape[0] != X.shape[1]:
        raise DataError(f"cut points of shape {E.shape} do not match {X.shape[1]} columns")
    for s, e, B in row_blocks(X, rows, size=size):
        _check_block(B)
        yield s, e, code_block(B, E)


def fit_bins_blocked(X, method: str = "equal-frequency", bins: int = 8, y=None, *, party: str | None = None,
                     rows: np.ndarray | None = None, size: int | None = None) -> np.ndarray:
    """:func:`fit_bins` of ``X`` (all rows, or the sorted indices ``rows``; ``y`` then holds their
    labels) without a copy of ``X``: the same cut points, to the bit.

    Every method fits each column on its own, so the columns are fitted a group at a time
    (:func:`verticalfs.selection.blocks.column_groups`: a group about as large as a block of rows);
    ``equal-width`` needs only each column's minimum and maximum, taken over row blocks.
    """
    B = _check_bins(bins)
    key = check_discretizer(method, has_labels=y is not None, party=party)
    X = _as_2d_view(X)
    n = X.shape[0] if rows is None else len(rows)
    d = X.shape[1]
    if n == 0 or d == 0:
        return fit_bins(np.empty((n, d)), key, B, y, party=party)
    if key == "equal-width":
        lo = hi = None
        for _, _, blk in row_blocks(X, rows, size=size):
            _check_block(blk)
            bl, bh = blk.min(0), blk.max(0)
            lo, hi = (bl, bh) if lo is None else (np.minimum(lo, bl), np.maximum(hi, bh))
        E = lo[:, None] + (hi - lo)[:, None] * (np.arange(1, B) / B)[None, :]
        return _dedupe(E)
    parts = [fit_bins(G, key, B, y, party=party, overwrite=True) for _, G in column_groups(X, rows, size=size)]
    k = max(p.shape[1] for p in parts)
    return np.concatenate([np.pad(p, ((0, 0), (0, k - p.shape[1])), constant_values=np.nan) for p in parts], 0)


def apply_bins(X, edges: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Integer codes ``(n, d)`` (int32): the number of cut points strictly below each value.

    ``rows`` (sorted indices): code only those rows of ``X``. ``X`` is read in row blocks (a
    memory-mapped party's table is never copied whole)."""
    X = _as_2d_view(X)
    n = X.shape[0] if rows is None else len(rows)
    out = np.empty((n, X.shape[1]), dtype=np.int32)
    for s, e, codes in coded_blocks(X, edges, rows):
        out[s:e] = codes
    return out


def discretize(X, method: str = "equal-frequency", bins: int = 8, y=None, *, party: str | None = None) -> np.ndarray:
    """Fit the bins on ``X`` and code ``X``: integer codes ``(n, d)``, int32, dense per column."""
    return apply_bins(X, fit_bins_blocked(X, method, bins, y, party=party))


# --------------------------------------------------------------------------- supervised methods
def _entropy_rows(counts: np.ndarray) -> np.ndarray:
    """Entropy (bits) of each row of a class-count matrix."""
    counts = np.asarray(counts, dtype=np.float64)
    tot = counts.sum(-1, keepdims=True)
    p = np.divide(counts, tot, out=np.zeros_like(counts), where=tot > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.where(p > 0, np.log2(np.where(p > 0, p, 1.0)), 0.0)
    return -(p * lg).sum(-1)


def _mdlp_column(x: np.ndarray, y: np.ndarray, B: int) -> np.ndarray:
    """Fayyad & Irani (1993) MDLP cut points of one column, at most ``B - 1``.

    Intervals are split breadth-first (so with the cap of ``B - 1`` cut points the coarsest,
    earliest accepted splits are kept; feast.md uses B as the maximum number of bins). Each split
    evaluates every boundary between distinct values of the interval at once from cumulative class
    counts.
    """
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    n = len(xs)
    C = int(y.max()) + 1
    cum = np.zeros((n + 1, C))
    cum[1:] = np.cumsum(np.eye(C)[ys], axis=0)
    cuts: list[float] = []
    queue = deque([(0, n)])
    while queue and len(cuts) < B - 1:
        lo, hi = queue.popleft()
        N = hi - lo
        if N < 2:
            continue
        pos = np.arange(lo + 1, hi)
        pos = pos[xs[pos - 1] < xs[pos]]  # boundaries between distinct values
        if pos.size == 0:
            continue
        tot = cum[hi] - cum[lo]
        left = cum[pos] - cum[lo]
        right = tot[None, :] - left
        nl = (pos - lo).astype(np.float64)
        e_l, e_r = _entropy_rows(left), _entropy_rows(right)
        e = (nl * e_l + (N - nl) * e_r) / N
        b = int(np.argmin(e))
        ent = float(_entropy_rows(tot[None])[0])
        gain = ent - e[b]
        k = int((tot > 0).sum())
        k1, k2 = int((left[b] > 0).sum()), int((right[b] > 0).sum())
        delta = np.log2(3.0 ** k - 2) - (k * ent - k1 * e_l[b] - k2 * e_r[b])
        if gain <= (np.log2(N - 1) + delta) / N:
            continue
        p = int(pos[b])
        cuts.append(0.5 * (xs[p - 1] + xs[p]))
        queue.append((lo, p))
        queue.append((p, hi))
    return np.sort(np.asarray(cuts, dtype=np.float64))


def _chimerge_column(x: np.ndarray, y: np.ndarray, B: int, significance: float = 0.05) -> np.ndarray:
    """Kerber's (1992) ChiMerge cut points of one column, at most ``B - 1``.

    Starts from one interval per distinct value (or :data:`CHIMERGE_MAX_INITIAL` equal-frequency
    intervals when there are more distinct values), then repeatedly merges the adjacent pair with
    the smallest chi-square statistic while it is below the ``1 - significance`` quantile of
    chi-square with ``C - 1`` degrees of freedom, or while there are more than ``B`` intervals.
    """
    from scipy.stats import chi2

    C = int(y.max()) + 1
    uniq = np.unique(x)
    if len(uniq) <= CHIMERGE_MAX_INITIAL:
        edges = uniq[:-1]
    else:
        edges = np.unique(np.quantile(x, np.arange(1, CHIMERGE_MAX_INITIAL) / CHIMERGE_MAX_INITIAL))
    codes = np.searchsorted(edges, x, side="left")  # = #{edges < x}
    K = len(edges) + 1
    counts = np.bincount(codes * C + y, minlength=K * C).reshape(K, C).astype(np.float64)
    keep = counts.sum(1) > 0  # drop empty initial intervals: cut at the upper edge of each kept one
    edges = np.r_[edges, np.inf][keep][:-1]
    counts = counts[keep]
    threshold = float(chi2.ppf(1.0 - significance, df=max(C - 1, 1)))
    while len(counts) > 1:
        A, Bc = counts[:-1], counts[1:]
        R1, R2 = A.sum(1, keepdims=True), Bc.sum(1, keepdims=True)
        Cj = A + Bc
        Ntot = R1 + R2
        E1, E2 = R1 * Cj / Ntot, R2 * Cj / Ntot
        E1 = np.where(E1 == 0, 0.1, E1)  # Kerber: expected 0 -> 0.1
        E2 = np.where(E2 == 0, 0.1, E2)
        stat = ((A - E1) ** 2 / E1 + (Bc - E2) ** 2 / E2).sum(1)
        i = int(np.argmin(stat))
        if stat[i] >= threshold and len(counts) <= B:
            break
        counts = np.vstack([counts[:i], counts[i:i + 1] + counts[i + 1:i + 2], counts[i + 2:]])
        edges = np.delete(edges, i)
    return edges
