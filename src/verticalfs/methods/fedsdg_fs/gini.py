"""Gini impurity of a party's features (fedsdg-fs.md section IV-C, Algorithm 1), in the clear and
under Paillier.

A continuous feature is binned first (equal-frequency bins of
:func:`verticalfs.selection.discretize.discretize`, ``n_bins`` = 10; a column with fewer distinct
values gets fewer bins). With ``n_{ik}`` training rows of class ``k`` in bin ``i`` and
``n_i = sum_k n_{ik}``, the feature's Gini score is

    G(f) = sum_i (n_i / N) (1 - sum_k (n_{ik} / n_i)^2) = 1 - (1 / N) sum_i (sum_k n_{ik}^2) / n_i.

The paper squares the class fractions ``p_{ik} = n_{ik} / n_i`` under encryption; we square the
integer counts ``n_{ik}`` and divide by ``n_i`` afterwards (a plaintext scalar the party knows):
the same quantity with exact integers under encryption instead of fixed-point fractions. The
secure protocol (Algorithm 1 with the squaring protocol of Erkin et al. [33]) is split into the
pure functions below (the binning, counting, packing and masking on the shared histogram module,
:mod:`verticalfs.histogram`); :mod:`.role` and :mod:`.method` send their inputs and outputs as messages.

Slot packing (issue 40 item 5). A row's ``c`` classes sit in ``w``-bit slots of one plaintext
(:class:`LabelLayout`: ``w = mask_bits + 1``, ``S = (bits(n // 3) - 1) // w`` slots, 31 for a
2048-bit key and 64-bit masks), so the label matrix costs ``N * ceil(c / S)`` encryptions instead
of ``N * c`` (one per row up to ``S`` classes; 64-bit masks and a 1024-bit key hold 15). The sums
per bin add slot-wise, and a masked count ``n + r < 2**mask_bits + N <= 2**w`` never carries into
its neighbour.

1. label holder: ``[[A]]``, the one-hot label matrix packed, ``(N, ceil(c / S))``
   (:func:`encrypt_labels`);
2. party: ``[[n_{ji.}]]`` by summing ciphertexts per (feature, bin) (:func:`encrypted_counts`,
   slot-wise), adds packed masks ``r_{jik}`` (uniform ``mask_bits``-bit integers, one per slot)
   and returns ``[[u]] = [[n + r]]`` re-randomised, ``(d, bins, ceil(c / S))`` ciphertexts;
3. label holder: decrypts and unpacks ``u`` (:func:`squares_of_masked`), returns
   ``[[q]] = [[sum_k u_k^2]]`` per (feature, bin);
4. party: ``[[sum_k n^2]] = [[q]] - 2 sum_k r_k [[u_k]] + sum_k r_k^2`` and ``[[G_j]] = 1 - sum_i
   [[sum_k n_{jik}^2]] / (N n_{ji})`` (:func:`encrypted_gini`), sent back re-randomised;
5. label holder: decrypts ``G_j`` and returns it to the party (Algorithm 1 lines 12-13).

The cross term of step 4. ``sum_k r_k u_k`` needs one scalar per class, and one Paillier exponent
multiplies every slot of a ciphertext alike: a packed ciphertext cannot give it, so the party needs
``c - 1`` ciphertexts per (feature, bin) with one class each (the last class follows from
``sum_k n_k = n_{ji}``). Two sources; the label holder takes the one that costs it fewer
encryptions (:func:`cross_term_source`): ``rows``, ``[[A_{row,k}]]`` for ``k < c - 1`` sent with
step 1 (``N (c - 1)`` encryptions once; the party sums them per bin like the packed counts), when
the rows are no more than the parties' (feature, bin) cells together; else ``cells``, ``[[u_k]]``
sent with step 3 (``D_p (c - 1)`` per party). So the packed label matrix alone, one ciphertext per
row, is all Algorithm 1 sends of the labels only on tall tables (``cells``); on a wide table the
label holder sends ``N (ceil(c / S) + c - 1)`` label ciphertexts and the saving is elsewhere.

Could the cross term come packed? (evaluated for issue 40 item 5; not built.) Polynomial packing:
with the bin sums packed as ``[[sum_k n_k B**k]]`` (``B = 2**w``), the party's exponent ``R = sum_j
r_j B**(g-1-j)`` gives ``[[sum_m C_m B**m]]`` whose coefficient ``g - 1`` is ``sum_k r_k n_k``. The
other ``2g - 2`` coefficients, ``C_m = sum_k n_k r_{k-m+g-1}``, must not reach the label holder in
the clear: it knows ``r_k = u_k - n_k`` up to the small counts, so each is a knapsack in the
counts with 64-bit known weights that it can solve; each needs a fresh statistical mask of its own.
The label holder only ever decrypts ``[[G_j]]`` (never a bin's sum), so the coefficients go through
the weighting ``sum_i f_i [[.]]`` with ``f_i = 2**60 / (N n_i)`` first: ``|2 f_i C_m|`` summed over
the bins is at most ``2 bins 2**(60 + mask_bits) / N`` (``sum_k n_{ik} = n_i``), plus one bit of
offset (the cross term is subtracted), 40 mask bits and a carry: ``w`` = 160 bits at the default
64-bit masks (N = 1,820; 147 at the 51-bit masks the floor allows there). A 2048-bit plaintext
(2,046 bits) holds 12 such coefficients, so ``2g - 1 <= 12``: ``g <= 6`` classes a ciphertext (7 with
51-bit masks). One ciphertext a row for ``c`` classes needs ``(2c - 1) w`` bits: 3,040 for 10
classes, 6,240 for 20, 9,440 for 30 -- it does not fit. The group-wise version (``ceil(c / g)``
ciphertexts a row, wide slots, beside the 65-bit label matrix) cuts the label holder's cross-term
encryptions and the party's group sums by ``(c - 1) / ceil(c / g)`` = 4.5x, 4.8x, 5.8x for 10, 20,
30 classes, but each cell then takes ``ceil(c / g)`` exponents of ``(g - 1) w + mask_bits`` bits
instead of ``c - 1`` of ``mask_bits``: about 1,920 / 3,840 / 4,800 squarings instead of 576 / 1,216 /
1,856 (2.6-3.3x). On the 30-class set (1,050 rows, 167 features and 1,670 cells a party, rows source) that
is, per party, 0.9 M multiplications mod ``n**2`` in group sums instead of 5.1 M but 7.8 M in the
exponents (squarings and multiplications) instead of 3.8 M: 8.7 M against 8.9 M, about equal; the
label holder's 30,450 cross-term encryptions (fixed-base CRT mod ``p**2`` and ``q**2``, its cheapest
operation, about 1.9 M multiplications mod ``n**2`` in equivalent) fall to 5,250. About 6 % less work
in all, by these counts (not measured), bought with ``2g - 2`` more masked values per feature in
what the label holder decrypts: too little for a new masking argument, so the ``c - 1``
single-class ciphertexts stay.

Operation counts (``N`` rows, ``D = d * bins`` cells of a party, ``P = ceil(c / S)``): the
dearest operation, a full ``r**n`` under another's key, the party does ``D P + d`` times
(re-randomisations); the label holder decrypts ``D P + d`` per party and encrypts ``N P`` once, plus
``min(N, sum_p D_p) (c - 1)`` for the cross term and ``D`` squares per party (its own key: the CRT).
Before packing: ``N c`` encryptions, ``D c + d`` re-randomisations and ``D c + d`` decryptions
(the 20-class run of issue 40 did not finish an epoch in 9 minutes).

The label holder learns the masked counts (``mask_bits`` = 64 bits of mask on counts below ``N``:
statistical distance ``N / 2**64``, i.e. ``mask_bits - bits(N)`` hiding bits, at least 40 by
:func:`hiding_bits`'s check on both sides) and the Gini scores, as in the paper; the party learns
only ciphertexts under the label holder's key and its scores. No label and no bin membership
crosses in the clear.
"""

from __future__ import annotations

import numpy as np

from verticalfs.crypto import EncryptedArray, PrivateKey
from verticalfs.exceptions import CryptoError
from verticalfs.histogram import (
    LabelLayout,
    bin_counts,
    bin_sizes,
    class_counts,
    encrypt_plaintexts,
    equal_frequency_edges,
    mask_counts,
    random_masks,
)
from verticalfs.histogram.binning import equal_frequency_blocks

#: fractional bits of the plaintext factors 1 / (N n_i) in step 4
FACTOR_PRECISION = 60

__all__ = ["FACTOR_PRECISION", "LabelLayout", "bin_codes", "bin_counts", "bin_sizes", "class_codes", "class_counts",
           "cross_term_source", "encrypt_class_rows", "encrypt_labels", "encrypted_counts", "encrypted_gini",
           "floor_message", "gini_clear", "gini_from_counts", "hiding_bits", "mask_counts", "random_masks",
           "squares_of_masked"]


def bin_codes(X: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-frequency bin codes ``(n, d)`` (int64, dense ``0..b_j - 1`` per column)."""
    X = np.asarray(X)
    out = np.zeros(X.shape, dtype=np.int64)
    if X.shape[1] == 0:
        return out
    for s, e, codes in equal_frequency_blocks(X, equal_frequency_edges(X, int(n_bins))):
        out[s:e] = codes
    return out


def gini_from_counts(counts: np.ndarray) -> np.ndarray:
    """``G(f_j) = 1 - (1 / N) sum_i (sum_k n_{jik}^2) / n_{ji}`` from ``(d, bins, classes)`` counts."""
    counts = np.asarray(counts, dtype=np.float64)
    n_i = counts.sum(2)
    N = n_i.sum(1)
    sq = (counts ** 2).sum(2)
    frac = np.divide(sq, n_i, out=np.zeros_like(sq), where=n_i > 0)
    return 1.0 - frac.sum(1) / np.where(N > 0, N, 1.0)


def gini_clear(X: np.ndarray, y: np.ndarray, n_classes: int, n_bins: int = 10) -> np.ndarray:
    """The Gini score of every column of ``X`` with labels ``y`` (the plaintext path)."""
    codes = bin_codes(X, n_bins)
    return gini_from_counts(class_counts(codes, y, n_classes, n_bins))


def class_codes(y, task: str, n_classes: int | None, target_bins: int = 2) -> tuple[np.ndarray, int]:
    """Class codes of the training labels and their number; a regression target is cut into
    ``target_bins`` equal-frequency classes (fedsdg-fs.md Table I lists FRIEDMAN, a regression task,
    with 2 classes: the Gini impurity and the F statistic need classes; ours, documented)."""
    y = np.asarray(y)
    if task != "regression":
        return y.astype(np.int64), int(n_classes)
    edges = np.quantile(y.astype(np.float64), np.linspace(0, 1, int(target_bins) + 1)[1:-1])
    codes = np.searchsorted(np.unique(edges), y, side="right").astype(np.int64)
    return codes, int(codes.max()) + 1 if codes.size else 1


# ------------------------------------------------------------------------- secure steps
def hiding_bits(mask_bits: int, n_rows: int) -> int:
    """Hiding bits of ``mask_bits``-bit masks on class counts of at most ``n_rows``."""
    return int(mask_bits) - max(1, int(n_rows)).bit_length()


def floor_message(mask_bits: int, n_rows: int) -> str:
    need = 40 + max(1, int(n_rows)).bit_length()
    return (f"mask_bits {mask_bits} hides the class counts of {n_rows} training rows by "
            f"{hiding_bits(mask_bits, n_rows)} bits, below the floor of 40; raise mask_bits to {need} or more")


def encrypt_labels(private_key: PrivateKey, y: np.ndarray, layout: LabelLayout) -> EncryptedArray:
    """Step 1: ``[[A]]``, the one-hot labels packed, ``(N, layout.per_row)`` ciphertexts."""
    return encrypt_plaintexts(private_key, layout.onehot(y))


def encrypted_counts(enc_labels: EncryptedArray, codes: np.ndarray, n_bins: int) -> EncryptedArray:
    """Step 2: packed ``[[n_{ji.}]]`` ``(d, n_bins, per_row)`` from ``[[A]]`` ``(N, per_row)`` and the
    party's bin codes."""
    return enc_labels.group_sum(codes, int(n_bins))


def encrypt_class_rows(private_key: PrivateKey, y: np.ndarray, n_classes: int) -> EncryptedArray:
    """Step 1, rows source of the cross term: ``[[A_{row,k}]]`` for ``k < c - 1``, one per ciphertext,
    ``(N, c - 1)`` (the last class is ``1 - sum_k A_{row,k}``, which the party need not see)."""
    y = np.asarray(y, dtype=np.int64)
    return EncryptedArray.encrypt(private_key, np.eye(int(n_classes), dtype=np.int64)[y][:, :-1], precision=0)


def squares_of_masked(private_key: PrivateKey, masked: EncryptedArray, layout: LabelLayout,
                      per_class: bool) -> tuple[EncryptedArray, EncryptedArray | None]:
    """Step 3 (label holder): decrypt ``u`` ``(d, bins, classes)`` from the packed ``[[u]]``; return
    ``[[sum_k u^2]]`` ``(d, bins)`` and, when ``per_class`` (the cells source of the cross term),
    ``[[u_k]]`` ``(d, bins, classes - 1)``; fresh encryptions."""
    u = layout.unpack(masked.decrypt_mantissas(private_key))
    q = (u * u).sum(axis=-1)
    if not per_class:
        return EncryptedArray.encrypt(private_key, q, precision=0), None
    both = EncryptedArray.encrypt(private_key, np.concatenate([q[..., None], u[..., :-1]], axis=-1), precision=0)
    return both[..., 0], both[..., 1:]


def encrypted_gini(squares: EncryptedArray, r: np.ndarray, sizes: np.ndarray, *,
                   masked_classes: EncryptedArray | None = None,
                   class_counts: EncryptedArray | None = None) -> EncryptedArray:
    """Step 4 (party): ``[[G_j]]`` ``(d,)`` from ``[[sum_k u^2]]``, its masks ``r`` ``(d, bins, c)``, bin
    sizes ``n_{ji}`` and one source of the cross term ``sum_k r_k u_k``: ``masked_classes`` =
    ``[[u_k]]`` from the label holder or ``class_counts`` = ``[[n_k]]`` summed from the rows'
    ``[[A_{row,k}]]`` (``k < c - 1`` both; the last class follows from ``sum_k n_k = n_{ji}``):

    ``sum_k r_k n_k = sum_{k<c-1} (r_k - r_{c-1}) n_k + r_{c-1} n_{ji}`` and
    ``sum_k r_k u_k = sum_k r_k n_k + sum_k r_k^2``, so
    ``[[sum_k n^2]] = [[sum_k u^2]] - 2 sum_k r_k [[u_k]] + sum_k r_k^2`` exactly; then
    ``[[G_j]] = 1 - sum_i [[sum_k n^2]] * (1 / (N n_{ji}))`` (empty bins weigh 0).
    """
    if (masked_classes is None) == (class_counts is None):
        raise CryptoError("encrypted_gini: give exactly one of masked_classes and class_counts")
    r = np.asarray(r, dtype=object)
    last = r[..., -1]
    n_i = np.asarray(sizes, dtype=np.int64).astype(object)
    r2 = (r * r).sum(axis=-1)
    source = masked_classes if masked_classes is not None else class_counts
    cross = source.mul(r[..., :-1] - last[..., None], precision=0).sum(axis=-1)  # (d, bins)
    if masked_classes is not None:  # sum_k r_k u_k = cross + r_{c-1} sum_k u_k, sum_k u_k = n_i + sum_k r_k
        known = last * (n_i + r.sum(axis=-1))
        sq = (squares + cross.mul(-2, precision=0)).add_mantissas(r2 - 2 * known)
    else:  # sum_k r_k u_k = cross + r_{c-1} n_i + sum_k r_k^2
        sq = (squares + cross.mul(-2, precision=0)).add_mantissas(-2 * last * n_i - r2)
    sizes = np.asarray(sizes, dtype=np.float64)
    N = sizes.sum(1, keepdims=True)
    factor = np.divide(1.0, N * sizes, out=np.zeros_like(sizes), where=sizes > 0)
    return 1 - sq.mul(factor, precision=FACTOR_PRECISION).sum(axis=1)


def cross_term_source(n_rows: int, cells: int) -> str:
    """Where the party's cross term comes from, the cheaper in the label holder's encryptions:
    ``rows`` (``[[A_{row,k}]]``, ``N (c - 1)`` once for every party) when ``n_rows`` <= ``cells``
    (the parties' feature-bin cells together), else ``cells`` (``[[u_k]]``, ``D_p (c - 1)`` per party)."""
    return "rows" if int(n_rows) <= int(cells) else "cells"
