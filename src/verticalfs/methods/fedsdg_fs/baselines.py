"""FedSDG-FS's baselines (fedsdg-fs.md section V-C) besides ``original-gate`` and ``vflfs``:

- ``all-features``: plain VFL on every feature, with FedSDG-FS's training settings (Adam 0.03,
  batch 128, the same bottom and top models), the paper's "allFeatures";
- ``ms-gini``: the Gini filter of Li, Dowsley and De Cock (ICML 2021, the paper's [14], "MS-GINI"),
  here with the features' Gini scores computed by Algorithm 1's protocol (:func:`~.method.ask_gini`)
  instead of their secret-sharing MPC; the lowest ``ratio`` = half of the features are kept;
- ``sffs``: the F-statistic filter of Pan et al. 2020 (the paper's [17], "SFFS"); the top half by
  the one-way ANOVA F statistic.

Both filters select, then (as every filter method here, :mod:`verticalfs.methods.filter`) train
their evaluation classifier on the gathered columns; Table III's numbers, a VFL network trained on
the selected features, are the pipelines ``ms-gini+all-features`` and ``sffs+all-features``.

SFFS under Paillier (ours; Pan et al. use secret sharing with a third party, which this library
does not have). The F statistic of column ``x`` is ``F = (eta / (c - 1)) / ((1 - eta) / (N - c))``
with the correlation ratio ``eta = (B - T^2 / N) / (Q - T^2 / N)``, ``T = sum x``, ``Q = sum x^2``
(the party's own) and ``B = sum_k S_k^2 / n_k``, ``S_k`` the sum of ``x`` over class ``k``:

1. label holder -> party: ``[[A]]`` (one-hot labels) and the class sizes ``n_k`` (disclosed: the
   class counts, not which row is which);
2. party: ``[[S_k]] = [[A_k]] . x`` (fixed point), masks ``r``, sends ``[[S + r]]``;
3. label holder: decrypts ``u``, returns ``[[sum_k (M / n_k) u_k^2]]`` with ``M = prod_k n_k``
   (integers: exact);
4. party: ``[[M B]] = [[...]] - sum_k (M / n_k) (2 r_k [[S_k]] + r_k^2)``, then ``[[eta]] = [[M B]]
   * (a / M) - b`` with its own ``a = 1 / (Q - T^2 / N)``, ``b = a T^2 / N``; sends ``[[eta]]``;
5. label holder: decrypts ``eta`` and computes ``F``.

The masks ``r`` are centred, ``bits(N) + mask_bits + 40`` bits wide; before any work the party
checks that they hide its class sums (at most ``sum_i |x_ij|`` in mantissas) by at least 40 bits
(the library's floor, docs/security.md), refuses otherwise naming ``mask_bits``, and reports the
hiding bits with its masked sums (``info_["mask_hiding_bits"]``).

So the label holder learns each feature's F (and the masked class sums), the party nothing. With
``secure=False`` the labels go to the parties in the clear and each computes ``F`` with
scikit-learn's ``f_classif`` (same selection, declared as a disclosure; for fast benchmarks).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from verticalfs.crypto import HIDING_FLOOR, EncryptedArray, PublicKey, generate_keypair
from verticalfs.dispatch import class_bounds
from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.methods import labels_proof
from verticalfs.methods.baselines.vfl import SMALL_SPLIT, VFL, VFLParams
from verticalfs.methods.fedsdg_fs import gini as G
from verticalfs.methods.fedsdg_fs.method import SecureScoreParams, ask_gini, check_secure_scores
from verticalfs.methods.fedsdg_fs.role import MAX_BINS, GiniParty
from verticalfs.methods.filter import AUTO, SELECTION, FilterMethod, FilterParams, FilterRole, resolve_n_select
from verticalfs.methods.labels_proof import LabelChecks
from verticalfs.methods.registry import register
from verticalfs.params import Constraints, Interval, Options
from verticalfs.party import Context, handles
from verticalfs.selection.blocks import row_blocks
from verticalfs.transport.messages import message
from verticalfs.utils.progress import Ticker

#: fractional bits of the parties' columns in SFFS's encrypted class sums
SFFS_PRECISION = 24


# ------------------------------------------------------------------------------ all-features
@dataclass
class AllFeaturesParams(VFLParams):
    """Plain VFL on every feature with FedSDG-FS's settings (the paper's allFeatures).

    Parameters
    ----------
    batch_size : int
        Mini-batch size (section V-A: 128).
    lr : float
        Adam's learning rate (section V-A: 0.03).
    top_hidden : tuple of int
        Hidden widths of the top model (16, as FedSDG-FS's).
    top_per_class : float
        Each hidden layer of the top model is at least ``top_per_class`` x classes wide (2; 0 =
        ``top_hidden`` as given). Ours (issue 40): the 16 units were sized for binary data; on
        30 classes, at lr 0.003, 16 units reached .21 and 64 units .455 (benchmarks/fedsdg_fs/README.md,
        "Defaults on many classes").
        Binary and regression tasks keep ``top_hidden``.
    lr_classes : float
        With more than ``lr_classes`` classes the learning rate is ``lr x lr_classes / classes``
        (3; 0 = ``lr`` as given). Ours (issue 40): Adam at 0.03 left 30 classes at the loss ln 30
        from the second epoch on, whatever the width. Binary tasks (every set of the paper's we
        have) keep section V-A's 0.03.
    """

    batch_size: int = 128
    lr: float = 0.03
    top_hidden: tuple[int, ...] = (16,)
    top_per_class: float = 2.0  # issue 40: top width >= 2 x classes (binary data: unchanged)
    lr_classes: float = 3.0  # issue 40: lr x 3 / classes beyond 3 classes (binary data: unchanged)
    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "top_per_class": [Interval(float, 0, None)],
        "lr_classes": [Interval(float, 0, None)],
    }


@register
class AllFeatures(VFL):
    name = "all-features"
    summary = "Plain VFL on every feature with FedSDG-FS's training settings (its allFeatures baseline)."
    paper = "fedsdg-fs.md section V-C (allFeatures)"
    Params = AllFeaturesParams
    test_params = SMALL_SPLIT

    def class_scaling(self) -> tuple[float, float]:
        return float(self.params.top_per_class), float(self.params.lr_classes)


# ---------------------------------------------------------------------------- the filters
@dataclass
class HalfFilterParams(FilterParams, SecureScoreParams):
    """A filter keeping a share of the features (fedsdg-fs.md Table III: half), its scores computed
    under Paillier by default.

    Parameters
    ----------
    n_select : int or "auto"
        Features to keep over all parties: ``"auto"`` (default, issue 53) = chosen on the label
        holder's validation split (:meth:`~verticalfs.methods.filter.FilterMethod.select_auto`);
        0 = ``ratio`` of them; N = N.
    ratio : float or None
        Share of the features kept (the paper's Table III keeps half: ``ratio=0.5``): given, it
        sets N as before issue 53 (with ``n_select`` left at ``"auto"`` or 0); None (default) =
        ``n_select`` decides, 0.5 with ``n_select=0``.
    """

    n_select: int | str = "auto"
    ratio: float | None = None

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "n_select": [Interval(int, 0, None), Options(AUTO)],
        "ratio": [Interval(float, 0, 1, closed="right"), None],
    }


class _HalfFilter(FilterMethod):
    Params = HalfFilterParams

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        if not self.params.secure:
            self.disclosures = {**self.disclosures, "labels_to_parties": self.plain_kinds}

    plain_kinds: tuple[str, ...] = ()
    #: the filter masks class counts of the training rows with mask_bits-bit masks (Algorithm 1)
    gini_masks = False

    def check_params(self, fed) -> None:
        p = self.params
        check_secure_scores(self.name, p, len(fed.labels.y["train"]) if self.gini_masks else None)
        if p.ratio is not None and not 0 < p.ratio <= 1:
            raise ConfigError(f"{self.name}: ratio must lie in (0, 1], got {p.ratio}")
        total = sum(len(v) for v in self.feature_names(fed).values())
        p.n_select = resolve_n_select(self.name, p.n_select, allow_zero=True)
        if p.ratio is not None and p.n_select not in (AUTO, 0):
            raise ConfigError(f"{self.name}: give n_select={p.n_select} or ratio={p.ratio}, not both")
        if p.ratio is not None and p.n_select == AUTO:
            p.n_select = 0  # the ratio sets N, as before issue 53
        self._ratio_keep = max(1, int(round((0.5 if p.ratio is None else float(p.ratio)) * total)))
        if p.n_select != 0:  # "auto" or N: the filters' checks
            super().check_params(fed)
            return
        p.n_select = self._ratio_keep  # 0 = ratio: checked as that N
        try:
            super().check_params(fed)
        finally:
            p.n_select = 0

    @property
    def n_keep(self) -> int:
        """The features this selection keeps: ``n_select`` (a number: given, or set by
        ``select_auto`` for each N of its grid), or ``ratio`` of them with 0."""
        n = self.params.n_select
        return int(n) if isinstance(n, int) and n > 0 else self._ratio_keep

    def rank(self, scores: dict[str, np.ndarray], lower_is_better: bool) -> list[tuple[str, int]]:
        rows = []
        for k, party in enumerate(scores):
            s = np.asarray(scores[party], dtype=np.float64)
            self.record_scores(party, np.arange(len(s)), s)
            key = s if lower_is_better else -s
            rows += [(float(key[j]), k, j, party) for j in range(len(s))]
        rows.sort()
        return [(party, j) for _, _, j, party in rows[: self.n_keep]]


@dataclass
class MSGiniParams(HalfFilterParams):
    """MS-GINI: the half of the features with the lowest Gini impurity.

    Parameters
    ----------
    n_bins : int
        Equal-frequency bins per feature (10, as FedSDG-FS's initialisation).
    """

    n_bins: int = 10
    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "n_bins": [Interval(int, 2, MAX_BINS)],
    }


class MSGiniRole(GiniParty, FilterRole):
    """A party of ``ms-gini``: Algorithm 1's party side, then the filter's gathering."""


@register
class MSGini(_HalfFilter):
    name = "ms-gini"
    summary = "MS-GINI: the half of the features with the lowest Gini impurity (Algorithm 1's protocol)."
    paper = "fedsdg-fs.md section V-C (MS-GINI, Li et al. ICML 2021)"
    Params = MSGiniParams
    Role = MSGiniRole
    plain_kinds = ("PlainGiniLabels",)
    gini_masks = True
    test_params = {"key_bits": 512, "insecure": True}

    def check_params(self, fed) -> None:
        super().check_params(fed)
        if not 2 <= int(self.params.n_bins) <= MAX_BINS:
            raise ConfigError(f"{self.name}: n_bins must lie in [2, {MAX_BINS}], got {self.params.n_bins}")

    def select(self, fed) -> list[tuple[str, int]]:
        scores, info = ask_gini(fed, list(fed.party_names), self.params, at=SELECTION)
        self.info_.update(info)
        self.info_["gini"] = {q: v.tolist() for q, v in scores.items()}
        return self.rank(scores, lower_is_better=True)


# ----------------------------------------------------------------------------------- SFFS
@message("fedsdg_fs.FLabels")
class FLabels:
    """Active -> party (SFFS): the key, ``[[A]]`` ``(N, c)``, the class sizes and the mask width."""

    public_key: bytes
    labels: bytes
    shape: tuple
    class_sizes: np.ndarray
    mask_bits: int
    insecure: bool = False


@message("fedsdg_fs.MaskedClassSums")
class MaskedClassSums:
    """Party -> active: ``[[S_kj + r_kj]]`` ``(d, c)`` at exponent ``-SFFS_PRECISION``, and the
    hiding bits of its masks on its class sums (>= 40, checked on both sides)."""

    data: bytes
    shape: tuple
    hiding_bits: int = 0


@message("fedsdg_fs.WeightedSquares")
class WeightedSquares:
    """Active -> party: ``[[sum_k (M / n_k) u_kj^2]]`` ``(d,)``."""

    data: bytes


@message("fedsdg_fs.EncryptedEta")
class EncryptedEta:
    """Party -> active: ``[[eta_j]]``, the correlation ratio of each feature, at ``exponent``."""

    data: bytes
    exponent: int


@message("fedsdg_fs.PlainFLabels")
class PlainFLabels:
    """Active -> party (``secure=False`` only): the training labels in the clear."""

    labels: np.ndarray


@message("fedsdg_fs.FScores")
class FScores:
    """Party -> active (``secure=False``): the F statistic of each feature."""

    scores: np.ndarray


def _weights(sizes: np.ndarray) -> tuple[int, list[int]]:
    M = math.prod(int(v) for v in sizes)
    return M, [M // int(v) for v in sizes]


def _running_sum(acc: np.ndarray | None, rows: np.ndarray) -> np.ndarray | None:
    """``acc + rows[0] + rows[1] + ...`` in that order (``rows``: a float64 block, modified): numpy
    sums a C-ordered matrix over axis 0 row after row, so a sum carried over row blocks this way is
    the whole matrix's ``sum(axis=0)`` to the bit (for two columns or more; a single column numpy
    sums pairwise, which the carried sum matches to about 1e-16 relative)."""
    if rows.shape[0] == 0:
        return acc
    if acc is not None:
        rows[0] += acc
    return rows.sum(axis=0)


def column_sums(X, size: int | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """``(sum x, sum x^2, max_j sum_i |rint(x_ij 2**SFFS_PRECISION)|)`` over the rows of ``X``, in row
    blocks (issue 39: a memory-mapped table is never copied whole); the first two as
    ``X.sum(0)`` and ``(X * X).sum(0)`` of the float64 matrix."""
    X = np.asarray(X)
    T = Q = M = None
    for _, _, B in row_blocks(X, size=size):
        M = _running_sum(M, np.abs(np.rint(np.ldexp(B, SFFS_PRECISION))))
        Q = _running_sum(Q, B * B)
        T = _running_sum(T, B)
    d = X.shape[1]
    zero = np.zeros(d)
    top = float(M.max()) if M is not None and M.size else 0.0
    return (zero if T is None else T), (zero.copy() if Q is None else Q), top


def f_classif_blocked(X, y, size: int | None = None) -> np.ndarray:
    """scikit-learn's ``f_classif(X, y)[0]`` (one-way ANOVA F per column) from its sufficient
    statistics, per-class sums and sums of squares carried over row blocks (issue 39: no copy of
    the table, nor of each class's rows); the arithmetic after the sums is ``f_oneway``'s, line by
    line, so the result is the same to the bit wherever the sums are (see :func:`_running_sum`)."""
    X = np.asarray(X)
    y = np.asarray(y).reshape(-1)
    classes, inv = np.unique(y, return_inverse=True)
    c = len(classes)
    S: list = [None] * c
    Q: list = [None] * c
    for s, e, B in row_blocks(X, size=size):
        lab = inv[s:e]
        for k in range(c):  # a loop over classes; each a whole-block operation
            part = B[lab == k]
            Q[k] = _running_sum(Q[k], part * part)
            S[k] = _running_sum(S[k], part)
    d = X.shape[1]
    sums_args = [np.zeros(d) if v is None else v for v in S]
    sq_args = [np.zeros(d) if v is None else v for v in Q]
    n_samples_per_class = np.bincount(inv, minlength=c)
    n_samples = np.sum(n_samples_per_class)
    ss_alldata = sum(sq_args)
    square_of_sums_alldata = sum(sums_args) ** 2
    square_of_sums_args = [v ** 2 for v in sums_args]
    sstot = ss_alldata - square_of_sums_alldata / float(n_samples)
    ssbn = 0.0
    for k in range(c):
        ssbn += square_of_sums_args[k] / n_samples_per_class[k]
    ssbn -= square_of_sums_alldata / float(n_samples)
    sswn = sstot - ssbn
    msb = ssbn / float(c - 1)
    msw = sswn / float(n_samples - c)
    return np.asarray(msb / msw, dtype=np.float64).ravel()


class SFFSRole(LabelChecks, FilterRole):
    """A party of ``sffs``: encrypted class sums of its columns, the squaring step, its ``[[eta]]``."""

    state: dict | None = None

    def _X(self) -> np.ndarray:
        """The training columns, a view (a memory-mapped table stays mapped; read in row blocks)."""
        return self.columns("train")

    @handles(PlainFLabels, policy=("require_secure", "accept_labels"))
    def on_plain(self, msg: PlainFLabels, ctx: Context) -> FScores:
        X = self._X()
        y = np.asarray(msg.labels).reshape(-1)
        if y.shape != (X.shape[0],):
            raise ProtocolError(f"party {self.name!r}: PlainFLabels must hold {X.shape[0]} labels")
        with np.errstate(all="ignore"):
            F = f_classif_blocked(X, y) if X.shape[1] else np.zeros(0)
        return FScores(scores=np.nan_to_num(np.asarray(F, dtype=np.float64), nan=0.0, posinf=np.finfo(float).max))

    @handles(FLabels)
    def on_labels(self, msg: FLabels, ctx: Context) -> MaskedClassSums:
        pub = PublicKey.from_bytes(msg.public_key, insecure=msg.insecure)
        X = self._X()
        shape = tuple(int(s) for s in msg.shape)
        sizes = np.asarray(msg.class_sizes, dtype=np.int64).reshape(-1)
        if len(shape) != 2 or shape[0] != X.shape[0] or sizes.shape != (shape[1],) or (sizes < 1).any() \
                or int(sizes.sum()) != X.shape[0]:
            raise ProtocolError(f"party {self.name!r}: FLabels of shape {shape} with class sizes "
                                f"{sizes.tolist()} do not fit its {X.shape[0]} training rows")
        bits = int(msg.mask_bits) + int(np.ceil(np.log2(X.shape[0] + 1))) + 40
        # the floor, before any work: |S_kj| <= sum_i |x_ij| (mantissas), masks |r| < 2**(bits - 1)
        top = column_sums(X)[2] if X.size else 0.0
        hiding = (bits - 1) - max(1, int(np.ceil(top * (1 + 1e-12)))).bit_length()
        if hiding < HIDING_FLOOR:
            raise ProtocolError(f"party {self.name!r}: SFFS masks of {bits - 1} bits would hide its class sums "
                                f"(up to {top / 2 ** SFFS_PRECISION:g}) by {hiding} bits, below the floor of "
                                f"{HIDING_FLOOR}; raise mask_bits (now {msg.mask_bits}) or scale the columns down")
        class_bounds(ctx.policy, self.name, shape[1], "SFFS")
        A = EncryptedArray.from_bytes(pub, msg.labels, shape)
        # the label holder's proof that A is one-hot with these class sizes (issue 50: else a row marker
        # in A reads the party's column out of the masked class sums)
        proven = self.checked_labels(ctx, "onehot", pub, msg.labels, A)
        if proven is not None and not np.array_equal(proven, sizes):
            raise ProtocolError(f"party {self.name!r}: FLabels' class sizes {sizes.tolist()} are not the proven "
                                f"{proven.tolist()}")
        # [[S_k]] = [[A_k]] . x per row block, the blocks' products multiplied mod n**2: the same
        # ciphertexts as one dot product over every row, without a float64 copy of the table
        sums: list = [None] * shape[1]
        # a line every few seconds: on 1,536 columns this step printed nothing for 20 minutes (issue 53)
        ticker = Ticker(f"party {self.name!r}: SFFS class sums of its {X.shape[1]} columns under encryption",
                        X.shape[0] * shape[1], "row x class products")
        for s, e, B in row_blocks(X):
            for k in range(shape[1]):
                part = A[s:e, k].dot(B, precision=SFFS_PRECISION)
                sums[k] = part if sums[k] is None else sums[k] + part
                ticker(s * shape[1] + (k + 1) * (e - s))
        ticker.end()
        S = EncryptedArray.from_bytes(pub, b"".join((A[:, k].dot(np.zeros((X.shape[0], X.shape[1])),
                                                                precision=SFFS_PRECISION) if v is None else v
                                                     ).to_bytes() for k, v in enumerate(sums)),
                                      (shape[1], X.shape[1]), -SFFS_PRECISION)
        r = G.random_masks(S.shape, bits) - (1 << (bits - 1))  # centred: |r| < 2**(bits - 1)
        masked = S.add_mantissas(r)
        self.state = {"pub": pub, "S": S, "r": r, "sizes": sizes}
        out = masked.ravel()
        return MaskedClassSums(data=out.rerandomize().to_bytes(), shape=(shape[1], X.shape[1]),  # fresh randomness
                               hiding_bits=hiding)

    @handles(WeightedSquares)
    def on_squares(self, msg: WeightedSquares, ctx: Context) -> EncryptedEta:
        st = self.state
        if st is None:
            raise ProtocolError(f"party {self.name!r} received WeightedSquares before FLabels")
        S, r, sizes = st["S"], st["r"], st["sizes"]
        c, d = S.shape
        P = SFFS_PRECISION
        Q = EncryptedArray.from_bytes(st["pub"], msg.data, (d,), -2 * P)
        M, w = _weights(sizes)
        wcol = np.array(w, dtype=object)[:, None]
        # sum_k (M / n_k) (2 r_k S_k + r_k^2), at exponent -2P (mantissa products)
        cross = S.mul(2 * r * wcol, precision=0).with_exponent(-2 * P).sum(axis=0)
        MB = (Q - cross).add_mantissas(-(r * r * wcol).sum(axis=0))
        X = self._X()
        N = X.shape[0]
        T, XX, _ = column_sums(X)  # X.sum(0), (X * X).sum(0) over row blocks
        tot = XX - T * T / N
        ok = tot > 1e-12 * np.maximum(1.0, XX)
        a = np.divide(1.0, tot, out=np.zeros_like(tot), where=ok)
        b = a * T * T / N
        eta = MB.mul(a / M, precision=G.FACTOR_PRECISION + int(math.log2(M)) + 1) - b
        self.state = None
        return EncryptedEta(data=eta.rerandomize().to_bytes(), exponent=int(eta.exponent))


@register
class SFFS(_HalfFilter):
    name = "sffs"
    summary = "SFFS: the half of the features with the largest F statistic (Pan et al. 2020), under Paillier."
    paper = "fedsdg-fs.md section V-C (SFFS, Pan et al. 2020)"
    Params = HalfFilterParams
    Role = SFFSRole
    plain_kinds = ("PlainFLabels",)
    test_params = {"key_bits": 512, "insecure": True}

    def select(self, fed) -> list[tuple[str, int]]:
        p = self.params
        y, c = G.class_codes(fed.labels.y["train"], fed.task, fed.labels.n_classes, int(p.target_bins))
        names = fed.feature_names()
        scores: dict[str, np.ndarray] = {}
        if not p.secure:
            for party in fed.party_names:
                rep = fed.proxy(party).request(PlainFLabels(labels=y), SELECTION, expect=FScores)
                scores[party] = self._check(party, rep.scores, len(names[party]))
            return self.rank(scores, lower_is_better=False)
        sizes = np.bincount(y, minlength=c).astype(np.int64)
        if (sizes < 1).any():
            raise ConfigError(f"{self.name}: every class needs a training row; class sizes {sizes.tolist()}")
        pub, priv = generate_keypair(int(p.key_bits), backend=p.backend, randomness=p.randomness,
                                     insecure=p.insecure)
        onehot = np.eye(c, dtype=np.int64)[y]
        A = EncryptedArray.encrypt(priv, onehot, precision=0)
        proof = None
        if labels_proof.wanted(fed, fed.party_names):  # a party's verify_labels (issue 50)
            t0 = time.perf_counter()
            proof = labels_proof.prove_labels(priv, "onehot", A, onehot, sizes)
            self.info_.update(label_proof_seconds=time.perf_counter() - t0, label_proof_bytes=len(proof.proof))
        msg = FLabels(public_key=pub.to_bytes(), labels=A.to_bytes(), shape=tuple(A.shape), class_sizes=sizes,
                      mask_bits=int(p.mask_bits), insecure=bool(p.insecure))
        M, w = _weights(sizes)
        N = len(y)
        hiding: list[int] = []
        for party in fed.party_names:
            proxy = fed.proxy(party)
            d = len(names[party])
            labels_proof.send_proof(fed, [party], proof, SELECTION)
            rep = proxy.request(msg, SELECTION, expect=MaskedClassSums)
            if tuple(int(s) for s in rep.shape) != (c, d):
                raise ProtocolError(f"party {party!r}: MaskedClassSums of shape {rep.shape}, expected {(c, d)}")
            if not HIDING_FLOOR <= int(rep.hiding_bits) <= 1024:
                raise ProtocolError(f"party {party!r}: MaskedClassSums reports {rep.hiding_bits} hiding bits, "
                                    f"expected {HIDING_FLOOR} or more")
            hiding.append(int(rep.hiding_bits))
            enc = EncryptedArray.from_bytes(pub, rep.data, (c, d))
            u = np.empty((c, d), dtype=object)
            ticker = Ticker(f"SFFS: decrypting party {party!r}'s masked class sums", c * d, "values")
            step = max(1, 4096 // max(1, c))  # columns at a time: a line every few seconds
            for a in range(0, d, step):
                u[:, a:a + step] = enc[:, a:a + step].decrypt_mantissas(priv)
                ticker(c * min(d, a + step))
            ticker.end()
            q = (u * u * np.array(w, dtype=object)[:, None]).sum(axis=0)
            sq = EncryptedArray.encrypt(priv, np.asarray(q, dtype=object), precision=0)
            rep2 = proxy.request(WeightedSquares(data=sq.to_bytes()), SELECTION, expect=EncryptedEta)
            eta = EncryptedArray.from_bytes(pub, rep2.data, (d,), int(rep2.exponent)).decrypt(priv)
            eta = np.clip(eta, 0.0, 1.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                F = eta * (N - c) / ((1.0 - eta) * (c - 1))
            scores[party] = self._check(party, np.nan_to_num(F, nan=0.0, posinf=np.finfo(float).max), d)
        self.info_.update(key_bits=pub.bits, backend=pub.backend.name, randomness=pub.randomness,
                          mask_hiding_bits=min(hiding, default=None),
                          mask_hiding_bits_by_step={"class_sums": min(hiding, default=None)})
        return self.rank(scores, lower_is_better=False)

    @staticmethod
    def _check(party: str, scores, d: int) -> np.ndarray:
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        if s.shape != (d,) or np.isnan(s).any() or (s < 0).any():
            raise ProtocolError(f"party {party!r}: expected {d} F statistics >= 0, got shape {s.shape}")
        return s


__all__ = ["SFFS", "AllFeatures", "MSGini"]
