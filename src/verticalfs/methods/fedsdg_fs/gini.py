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
pure functions below; :mod:`.role` and :mod:`.method` send their inputs and outputs as messages.

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

import os

import numpy as np

from verticalfs.crypto import EncryptedArray, PrivateKey, PublicKey
from verticalfs.exceptions import CryptoError
from verticalfs.selection.discretize import coded_blocks, discretize, fit_bins_blocked

#: fractional bits of the plaintext factors 1 / (N n_i) in step 4
FACTOR_PRECISION = 60


def bin_codes(X: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-frequency bin codes ``(n, d)`` (int64, dense ``0..b_j - 1`` per column)."""
    if X.shape[1] == 0:
        return np.zeros(X.shape, dtype=np.int64)
    return np.asarray(discretize(X, "equal-frequency", int(n_bins)), dtype=np.int64)


def bin_sizes(codes: np.ndarray, n_bins: int) -> np.ndarray:
    """``n_{ji}``: rows per (feature, bin), ``(d, n_bins)``."""
    n, d = codes.shape
    flat = (np.arange(d, dtype=np.int64)[None, :] * n_bins + codes).ravel()
    return np.bincount(flat, minlength=d * n_bins).reshape(d, n_bins)


def class_counts(codes: np.ndarray, y: np.ndarray, n_classes: int, n_bins: int) -> np.ndarray:
    """``n_{jik}``: rows of class ``k`` per (feature, bin), ``(d, n_bins, n_classes)``, in the clear."""
    n, d = codes.shape
    flat = ((np.arange(d, dtype=np.int64)[None, :] * n_bins + codes) * n_classes + np.asarray(y, np.int64)[:, None])
    return np.bincount(flat.ravel(), minlength=d * n_bins * n_classes).reshape(d, n_bins, n_classes)


def bin_counts(X, n_bins: int, y=None, n_classes: int = 0, encrypted=(), size: int | None = None
               ) -> tuple[np.ndarray, np.ndarray | None, list]:
    """Everything a party counts per (feature, bin), in one pass over row blocks of ``X`` (issue 39:
    a memory-mapped table is never copied whole, nor its code matrix built):

    - ``n_{ji}`` (:func:`bin_sizes`) of the equal-frequency bins of :func:`bin_codes`;
    - with labels ``y``: ``n_{jik}`` (:func:`class_counts`), summed exactly (integers);
    - for each encrypted array in ``encrypted`` (rows first): its :func:`encrypted_counts`, the
      blocks' sums multiplied together mod ``n**2``, which is the same ciphertext as one sum over
      every row.
    """
    X = np.asarray(X)
    n, d = X.shape
    n_bins = int(n_bins)
    edges = fit_bins_blocked(X, "equal-frequency", n_bins) if d else np.zeros((0, 0))
    sizes = np.zeros((d, n_bins), dtype=np.int64)
    counts = None if y is None else np.zeros((d, n_bins, int(n_classes)), dtype=np.int64)
    y = None if y is None else np.asarray(y, dtype=np.int64)
    sums: list = [None] * len(encrypted)
    cols = (np.arange(d, dtype=np.int64) * n_bins)[None, :]
    for s, e, block in coded_blocks(X, edges, size=size):
        for i, A in enumerate(encrypted):
            part = encrypted_counts(A[s:e], block.astype(np.int64), n_bins)
            sums[i] = part if sums[i] is None else sums[i] + part
        cell = block + cols  # (feature, bin) of every value: bin_sizes' and class_counts' cells, in place
        sizes += np.bincount(cell.ravel(), minlength=d * n_bins).reshape(d, n_bins)
        if counts is not None:
            cell *= int(n_classes)
            cell += y[s:e, None]
            counts += np.bincount(cell.ravel(), minlength=counts.size).reshape(counts.shape)
    for i, A in enumerate(encrypted):
        if sums[i] is None:  # no rows
            sums[i] = encrypted_counts(A, np.zeros((n, d), dtype=np.int64), n_bins)
    return sizes, counts, sums


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


def random_masks(shape, bits: int) -> np.ndarray:
    """Uniform integers in ``[0, 2**bits)`` from the operating system's CSPRNG (object array)."""
    count = int(np.prod(shape, dtype=np.int64))
    words = -(-int(bits) // 64)
    raw = np.frombuffer(os.urandom(8 * words * count), dtype="<u8").reshape(count, words)
    out = np.zeros(count, dtype=object)
    for w in range(words):
        out = out + raw[:, w].astype(object) * (1 << (64 * w))
    if bits % 64:
        out = out % (1 << int(bits))
    return out.reshape(shape)


class LabelLayout:
    """Unsigned ``slot_bits``-wide slots, ``slots`` per plaintext, for Algorithm 1's packed counts:
    ``slot_bits = mask_bits + 1`` holds ``n + r`` for a count ``n <= N < 2**mask_bits`` and a mask
    ``r < 2**mask_bits``."""

    def __init__(self, plain_bits: int, mask_bits: int, n_classes: int) -> None:
        self.slot_bits = int(mask_bits) + 1
        self.slots = (int(plain_bits) - 1) // self.slot_bits
        self.classes = int(n_classes)
        if self.slots < 1:
            raise CryptoError(f"Algorithm 1: a plaintext of {plain_bits} bits holds no slot of {self.slot_bits} "
                              f"bits (mask_bits {mask_bits}); use a longer key or fewer mask_bits")
        #: ciphertexts per row (and per bin): ceil(classes / slots)
        self.per_row = -(-self.classes // self.slots)

    @classmethod
    def for_key(cls, pub: PublicKey, mask_bits: int, n_classes: int) -> LabelLayout:
        return cls(pub.max_int.bit_length(), mask_bits, n_classes)

    def pack(self, values: np.ndarray) -> np.ndarray:
        """Non-negative integers ``(..., classes)`` (int64 or object) -> packed ``(..., per_row)``
        (object): class ``k`` in plaintext ``k // slots``, slot ``k % slots``."""
        v = np.asarray(values, dtype=object)
        lead = v.shape[:-1]
        full = np.zeros(lead + (self.per_row * self.slots,), dtype=object)
        full[..., : self.classes] = v
        full = full.reshape(lead + (self.per_row, self.slots))
        out = np.zeros(lead + (self.per_row,), dtype=object)
        for s in range(self.slots):  # a short loop over slots, each a whole-array operation
            out = out + (full[..., s] << (self.slot_bits * s))
        return out

    def unpack(self, packed: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`pack` on decrypted plaintexts ``(..., per_row)``: exact non-negative
        integers ``(..., classes)`` (object); a plaintext beyond its slots is a :class:`CryptoError`."""
        packed = np.asarray(packed, dtype=object)
        lead = packed.shape[:-1]
        flat = packed.reshape(-1).tolist()
        w, S = self.slot_bits, self.slots
        nbytes = -(-w * S // 8)
        try:  # one big-integer conversion per plaintext
            raw = np.frombuffer(b"".join(int(x).to_bytes(nbytes, "little") for x in flat), dtype=np.uint8)
        except OverflowError:
            raise CryptoError("Algorithm 1: a masked count lies outside its slots (negative or too wide)") from None
        bits = np.unpackbits(raw.reshape(len(flat), nbytes), axis=1, bitorder="little")[:, : w * S]
        words = -(-w // 64)
        wide = np.zeros((len(flat) * S, 64 * words), dtype=np.uint8)
        wide[:, :w] = bits.reshape(len(flat) * S, w)
        limbs = np.packbits(wide, axis=1, bitorder="little").view("<u8")  # (values, words)
        out = np.zeros(len(flat) * S, dtype=object)
        for i in range(words - 1, -1, -1):
            out = (out << 64) + limbs[:, i].astype(object)
        out = out.reshape(lead + (self.per_row * S,))
        return out[..., : self.classes]


def encrypt_labels(private_key: PrivateKey, y: np.ndarray, layout: LabelLayout) -> EncryptedArray:
    """Step 1: ``[[A]]``, the one-hot labels packed, ``(N, layout.per_row)`` ciphertexts."""
    y = np.asarray(y, dtype=np.int64)
    plain = np.zeros((len(y), layout.per_row), dtype=object)
    shift = (layout.slot_bits * (y % layout.slots)).astype(object)
    plain[np.arange(len(y)), y // layout.slots] = np.ones(len(y), dtype=object) << shift
    return EncryptedArray.encrypt(private_key, plain, precision=0)


def encrypted_counts(enc_labels: EncryptedArray, codes: np.ndarray, n_bins: int) -> EncryptedArray:
    """Step 2: packed ``[[n_{ji.}]]`` ``(d, n_bins, per_row)`` from ``[[A]]`` ``(N, per_row)`` and the
    party's bin codes."""
    return enc_labels.group_sum(codes, int(n_bins))


def mask_counts(counts: EncryptedArray, bits: int, layout: LabelLayout) -> tuple[EncryptedArray, np.ndarray]:
    """Step 2: ``([[n + r]], r)`` with fresh masks ``r`` ``(d, bins, classes)``, one per slot."""
    r = random_masks(counts.shape[:-1] + (layout.classes,), bits)
    return counts.add_mantissas(layout.pack(r)), r


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
