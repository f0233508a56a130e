"""Where the plaintexts of encrypted histograms are packed and masked (the label holder's and the
party's plaintext side; :mod:`.encrypted` is the ciphertext side).

- :class:`LabelLayout`: FedSDG-FS's Algorithm 1 packs a row's one-hot class vector into
  ``mask_bits + 1``-bit slots of one plaintext, so that a count plus its mask never carries into its
  neighbour (:mod:`verticalfs.methods.fedsdg_fs.gini`).
- :func:`random_masks`: uniform statistical masks of any width from the operating system's CSPRNG.
- FATE-IV's label code ``y * 2**bits_n + (1 - y)`` (:func:`label_codes`): one plaintext a row
  holding the event and the non-event count of a bin's sum side by side.
"""

from __future__ import annotations

import os

import numpy as np

from verticalfs.crypto import PublicKey
from verticalfs.exceptions import CryptoError


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


def label_codes(y: np.ndarray, packing: str, bits_n: int) -> np.ndarray:
    """FATE-IV's plaintexts of the binary labels ``y``: ``y * 2**bits_n + (1 - y)`` per row
    (``packed``: FATE's ``GuestIntegerPacker``, the event count above the non-event count) or the
    pair ``(y, 1 - y)`` (``pair``, two plaintexts a row)."""
    y = np.asarray(y).astype(np.int64)
    return (y << bits_n) + (1 - y) if packing == "packed" else np.stack([y, 1 - y], axis=1)


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
        integers ``(..., classes)`` (object); the bits above the slots are ignored (the party's mask:
        :func:`~verticalfs.histogram.encrypted.mask_counts`), a negative plaintext is a :class:`CryptoError`."""
        packed = np.asarray(packed, dtype=object)
        lead = packed.shape[:-1]
        flat = packed.reshape(-1).tolist()
        w, S = self.slot_bits, self.slots
        nbytes = -(-w * S // 8)
        low = (1 << (w * S)) - 1
        try:  # one big-integer conversion per plaintext
            if any(int(x) < 0 for x in flat):
                raise OverflowError
            raw = np.frombuffer(b"".join((int(x) & low).to_bytes(nbytes, "little") for x in flat), dtype=np.uint8)
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

    def onehot(self, y: np.ndarray) -> np.ndarray:
        """The packed one-hot plaintexts ``(N, per_row)`` (object) of class codes ``y``: class ``k``
        is a 1 in plaintext ``k // slots``, slot ``k % slots``."""
        y = np.asarray(y, dtype=np.int64)
        plain = np.zeros((len(y), self.per_row), dtype=object)
        shift = (self.slot_bits * (y % self.slots)).astype(object)
        plain[np.arange(len(y)), y // self.slots] = np.ones(len(y), dtype=object) << shift
        return plain
