"""Encrypted histograms: the ciphertext side, in the order a protocol uses it.

1. **encrypt** (key holder): :func:`encrypt_plaintexts`, the packed plaintexts of
   :mod:`.packing` (one ciphertext a row, or fewer);
2. **sum** (party): :class:`BinSums` / :func:`bin_sums`, the ciphertexts of the rows summed per
   (feature, bin) of the party's own bin codes, a block of rows at a time (one
   :meth:`~verticalfs.crypto.EncryptedArray.group_sum` per block, the blocks' sums multiplied);
   :func:`existing_bins` keeps the bins a feature has;
3. **compress** (party, optional): :func:`compress`, several bins' sums in one ciphertext (FATE's
   ``CipherCompressor``: Horner, ``acc <- acc**(2**slot_bits) * c``);
4. **mask** (party, optional): :func:`mask_counts`, statistical masks added slot-wise
   (:data:`~verticalfs.crypto.HIDING_FLOOR` bits of hiding at least, checked by the caller);
5. **seal** (party): :func:`seal`, every ciphertext re-randomised before it goes back to the key
   holder, who made every input obfuscator and would otherwise read the members of a bin out of
   the product of their obfuscators;
6. **decrypt** (key holder): the key's ``decrypt_mantissas`` and the layout's ``unpack``.
"""

from __future__ import annotations

import numpy as np

from verticalfs.crypto import EncryptedArray, PrivateKey
from verticalfs.histogram.packing import LabelLayout, random_masks


# ------------------------------------------------------------------------------- 1. encrypt
def encrypt_plaintexts(private_key: PrivateKey, plain: np.ndarray) -> EncryptedArray:
    """Packed integer plaintexts ``plain`` (any shape, int64 or object) encrypted by the key holder
    (exponent 0: the layout, not the fixed-point encoding, says what the integers mean)."""
    return EncryptedArray.encrypt(private_key, plain, precision=0)


# ---------------------------------------------------------------------------------- 2. sum
class BinSums:
    """The sums of the rows of ``enc`` per (feature, bin), accumulated over blocks of rows.

    ``add(first, last, codes)`` adds the rows ``first:last`` of ``enc`` under their codes
    ``(last - first, d)``; :meth:`result` is ``(d, n_bins, *enc.shape[1:])`` (an empty bin holds the
    trivial encryption of 0)."""

    def __init__(self, enc: EncryptedArray, n_bins: int, n_features: int) -> None:
        self.enc = enc
        self.n_bins = int(n_bins)
        self.n_features = int(n_features)
        self.sums: EncryptedArray | None = None

    def add(self, first: int, last: int, codes: np.ndarray) -> None:
        part = self.enc[first:last].group_sum(np.asarray(codes, dtype=np.int64), self.n_bins)
        self.sums = part if self.sums is None else self.sums + part

    def result(self) -> EncryptedArray:
        if self.sums is None:  # no rows
            return self.enc.group_sum(np.zeros((self.enc.shape[0], self.n_features), dtype=np.int64), self.n_bins)
        return self.sums


def bin_sums(enc: EncryptedArray, blocks, n_bins: int, n_features: int) -> EncryptedArray:
    """:class:`BinSums` of ``enc`` over the ``(first, last, codes)`` of ``blocks``."""
    acc = BinSums(enc, n_bins, n_features)
    for s, e, codes in blocks:
        acc.add(s, e, codes)
    return acc.result()


def existing_bins(sums: EncryptedArray, bin_nums: np.ndarray) -> EncryptedArray:
    """The sums ``(d, n_bins[, k])`` of the bins each feature has, flat in (feature, bin) order."""
    keep = np.arange(sums.shape[1])[None, :] < np.asarray(bin_nums)[:, None]
    return sums[keep] if sums.ndim == 2 else sums[keep, :]


# ------------------------------------------------------------------------------ 3. compress
def package_sizes(bin_nums: np.ndarray, capacity: int) -> np.ndarray:
    """Bins per cipher package: each feature's bins in runs of at most ``capacity``."""
    out = []
    for b in np.asarray(bin_nums, dtype=np.int64):
        full, rest = divmod(int(b), int(capacity))
        out += [int(capacity)] * full + ([rest] if rest else [])
    return np.asarray(out, dtype=np.int64)


def compress(sums: EncryptedArray, bin_nums: np.ndarray, capacity: int, slot_bits: int) -> EncryptedArray:
    """Each feature's bin sums (a vector in (feature, bin) order) packed ``capacity`` to a
    ciphertext of ``slot_bits``-bit slots (:meth:`~verticalfs.crypto.EncryptedArray.pack`; read
    back with :func:`~verticalfs.crypto.unpack_slots` and :func:`package_sizes`)."""
    return sums.pack(package_sizes(bin_nums, int(capacity)), int(slot_bits))


# ---------------------------------------------------------------------------------- 4. mask
def mask_counts(counts: EncryptedArray, bits: int, layout: LabelLayout,
                plain_bits: int | None = None) -> tuple[EncryptedArray, np.ndarray]:
    """``([[n + r]], r)``: packed counts ``(..., per_row)`` with fresh masks ``r`` ``(..., classes)``,
    uniform ``bits``-bit integers, one per class slot (Algorithm 1, step 2).

    The whole plaintext is masked, not only the class slots (issue 50): the unused slots of the last
    plaintext get masks of their own and, with ``plain_bits`` (the key's plaintext bits), the bits
    above the last slot (up to ``plain_bits - 2``: the plaintext stays a positive mantissa) a
    uniform value, so whatever a label holder places outside the class slots comes back hidden. The
    label holder reads the class slots only (:meth:`LabelLayout.unpack` ignores the rest)."""
    lead = counts.shape[:-1]
    r = random_masks(lead + (layout.classes,), bits)
    spare = layout.per_row * layout.slots - layout.classes
    full = r if not spare else np.concatenate([r, random_masks(lead + (spare,), bits)], axis=-1)
    full = np.asarray(full, dtype=object).reshape(lead + (layout.per_row, layout.slots))
    packed = np.zeros(lead + (layout.per_row,), dtype=object)
    for s in range(layout.slots):  # every slot, not only the classes
        packed = packed + (full[..., s] << (layout.slot_bits * s))
    top = layout.slot_bits * layout.slots
    if plain_bits is not None and int(plain_bits) - 1 > top:
        packed = packed + (random_masks(packed.shape, int(plain_bits) - 1 - top) << top)
    return counts.add_mantissas(packed), r


# ---------------------------------------------------------------------------------- 5. seal
def seal(values: EncryptedArray) -> EncryptedArray:
    """``values`` re-randomised: the same plaintexts under fresh obfuscators, what a party returns
    to the key holder (see the module docstring)."""
    return values.rerandomize()
