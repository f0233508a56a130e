"""Slot packing: many signed fixed-point values in one Paillier plaintext.

A Paillier plaintext of a 2048-bit key holds about 2,045 bits, while a fixed-point embedding value
needs a few dozen. :class:`SlotPacking` lays ``slots`` values side by side in one plaintext, each in
a ``slot_bits``-wide slot, so a party encrypts (and the key holder decrypts) one ciphertext per
``slots`` values instead of one per value (the FedSDG-FS issue, item 4; FATE's baselines can use it
too). The homomorphic sum of two packed ciphertexts is the slot-wise sum, and adding a packed
plaintext (a mask) adds slot-wise, as long as no slot leaves its range.

Encoding. Slot ``j`` holds the signed mantissa ``m_j = round(v_j * 2**precision)``; the plaintext is
``x = sum_j m_j * 2**(slot_bits * j)``, exactly (Python integers; a negative ``x`` is stored as
``n - |x|`` like every other mantissa of the crypto layer). Decoding adds the constant
``C = sum_j 2**(slot_bits - 1) * 2**(slot_bits * j)``, reads the unsigned digits and subtracts
``2**(slot_bits - 1)`` from each: exact whenever every slot's value lies in
``[-2**(slot_bits - 1), 2**(slot_bits - 1))``. Digits are read and written through bytes and numpy
(``slot_bits`` is a multiple of 8), one big-integer conversion per plaintext, no Python loop over
values.

Wide slots (``slot_bits`` > 64, up to :data:`MAX_SLOT_BITS`). The values packed are int64, but a
slot can be wider than 64 bits so that a statistical mask much larger than the values fits beside
them (FedSDG-FS's secure training: a mask must hide its value by at least 40 bits,
:mod:`verticalfs.methods.fedsdg_fs.secure`). :meth:`SlotPacking.random_masks` draws such masks
straight into packed plaintexts, and :meth:`SlotPacking.unpack` with ``wrap=True`` reads each slot
modulo ``2**64`` (the low 64 bits of its signed value, as int64): the masked value's residue, which
is all a party needs to return an additive share over the ring ``Z / 2**64``; the mask's owner
subtracts its own residue and gets the value exactly whenever the value fits in int64.

Overflow is an error, never a silent wrap: a slot that overflowed would decode as a plausible
value of its neighbours, so it cannot be detected afterwards. Instead every
:class:`PackedEncryptedArray` carries a ``bound`` on the absolute mantissa of every slot (from the
values at encryption, then summed by each addition) and an operation whose bound would exceed
``2**(slot_bits - 1) - 1`` raises :class:`~verticalfs.exceptions.CryptoError` before it runs.
:meth:`SlotPacking.for_key` sizes the slots from the largest value and the number of additions
the caller will do (``headroom``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from verticalfs.crypto.array import EncryptedArray
from verticalfs.crypto.keys import PrivateKey, PublicKey
from verticalfs.exceptions import CryptoError

#: the widest slot :class:`SlotPacking` lays out
MAX_SLOT_BITS = 1024
#: every additive mask of the library hides its value by at least this many bits: with masks
#: uniform over ``2**mask_bits`` values and a value below ``2**b``, the hiding bits are
#: ``mask_bits - b`` and the statistical distance between ``value + mask`` and ``mask`` at most
#: ``2**-(mask_bits - b)`` (docs/security.md, "Masks with a floor")
HIDING_FLOOR = 40


@dataclass(frozen=True)
class SlotPacking:
    """``slots`` signed values of ``slot_bits`` bits each per plaintext, fixed point with
    ``precision`` fractional bits."""

    slot_bits: int
    slots: int
    precision: int

    def __post_init__(self) -> None:
        if self.slot_bits % 8 or not 8 <= self.slot_bits <= MAX_SLOT_BITS:
            raise CryptoError(f"SlotPacking: slot_bits must be a multiple of 8 in [8, {MAX_SLOT_BITS}], got "
                              f"{self.slot_bits}")
        if self.slots < 1 or self.precision < 0:
            raise CryptoError(f"SlotPacking: need slots >= 1 and precision >= 0, got {self.slots}, {self.precision}")

    @classmethod
    def for_key(cls, public_key: PublicKey, *, value_bound: float, precision: int = 16,
                headroom: int = 1) -> SlotPacking:
        """Slots for values with ``|v| <= value_bound`` that will go through up to ``headroom``
        terms of homomorphic addition (e.g. a sum over ``headroom - 1`` more arrays, or one array
        plus a mask of the same size: 2), as many per plaintext as the key's range holds."""
        if not value_bound > 0 or not math.isfinite(value_bound) or int(headroom) < 1:
            raise CryptoError(f"SlotPacking.for_key: need a finite value_bound > 0 and headroom >= 1, got "
                              f"{value_bound}, {headroom}")
        top = int(math.ceil(value_bound * 2.0 ** precision)) * int(headroom)
        bits = 8 * math.ceil((top.bit_length() + 1) / 8)  # + sign
        if bits > 64:
            raise CryptoError(f"SlotPacking.for_key: {top.bit_length() + 1}-bit slots needed (value bound "
                              f"{value_bound}, precision {precision}, headroom {headroom}); at most 64: lower "
                              "the precision or the headroom")
        slots = (public_key.max_int.bit_length() - 1) // bits
        if slots < 1:
            raise CryptoError("SlotPacking.for_key: the key's plaintext range holds no slot of "
                              f"{bits} bits")
        return cls(bits, slots, int(precision))

    @property
    def limit(self) -> int:
        """The largest absolute mantissa a slot holds."""
        return (1 << (self.slot_bits - 1)) - 1

    def n_plaintexts(self, count: int) -> int:
        return -(-int(count) // self.slots)

    # ------------------------------------------------------------ plaintexts
    def mantissas(self, values: Any) -> np.ndarray:
        """``round(values * 2**precision)`` as int64 (1-D), checked against the slot range."""
        v = np.asarray(values, dtype=np.float64).ravel()
        if not np.all(np.isfinite(v)):
            raise CryptoError("SlotPacking: cannot pack NaN or infinite values")
        m = np.rint(np.ldexp(v, self.precision))
        top = float(np.max(np.abs(m))) if m.size else 0.0
        if top >= float(1 << (min(self.slot_bits, 64) - 1)):  # strict in float: limit + 1 rounds to 2**(b-1) for b = 64
            raise CryptoError(f"SlotPacking: a value of magnitude {top / 2 ** self.precision:g} does not fit a "
                              f"{self.slot_bits}-bit slot at precision {self.precision} (largest "
                              f"{self.limit / 2 ** self.precision:g})")
        return m.astype(np.int64)

    def _offset(self, k: int) -> int:
        """``C_k = sum_{j<k} 2**(slot_bits - 1) * 2**(slot_bits * j)``."""
        b = self.slot_bits
        return ((1 << (b * k)) - 1) // ((1 << b) - 1) << (b - 1)

    def _digit_bytes(self, m: np.ndarray) -> np.ndarray:
        """int64 mantissas -> their unsigned digits ``m + 2**(slot_bits - 1)``, ``(count, slot_bits / 8)``
        little-endian bytes (two's complement plus the offset, i.e. the sign bit flipped)."""
        w = self.slot_bits // 8
        low = m.view(np.uint64).astype("<u8").view(np.uint8).reshape(-1, 8)
        if w <= 8:
            u = (m.view(np.uint64) + np.uint64(1 << (self.slot_bits - 1))).astype("<u8")  # modulo 2**64
            digits: np.ndarray = u.view(np.uint8).reshape(-1, 8)[:, :w]
            return digits
        out = np.empty((m.size, w), dtype=np.uint8)
        out[:, :8] = low
        out[:, 8:] = np.where(m < 0, 0xFF, 0x00).astype(np.uint8)[:, None]  # sign extension
        out[:, w - 1] ^= 0x80
        return out

    def _join(self, raw: np.ndarray, count: int) -> np.ndarray:
        """Digit bytes ``(P * slots, w)`` (unused slots all zero) -> ``P`` packed signed ints."""
        k, w = self.slots, self.slot_bits // 8
        P = self.n_plaintexts(count)
        raw = raw.reshape(P, k * w)
        fills = np.full(P, k, dtype=np.int64)
        if P:
            fills[-1] = count - (P - 1) * k
        out = np.empty(P, dtype=object)
        for i in range(P):  # one big-integer conversion per plaintext
            out[i] = int.from_bytes(raw[i, : fills[i] * w].tobytes(), "little") - self._offset(int(fills[i]))
        return out

    def pack(self, m: np.ndarray) -> np.ndarray:
        """Signed int64 mantissas (1-D) -> object array of packed signed Python ints."""
        m = np.asarray(m, dtype=np.int64).ravel()
        if m.size and int(np.max(np.abs(m))) > self.limit:
            raise CryptoError(f"SlotPacking.pack: a mantissa exceeds the {self.slot_bits}-bit slot range")
        count = m.size
        raw = np.zeros((self.n_plaintexts(count) * self.slots, self.slot_bits // 8), dtype=np.uint8)
        raw[:count] = self._digit_bytes(m)
        return self._join(raw, count)

    def random_masks(self, count: int, bits: int) -> tuple[np.ndarray, np.ndarray]:
        """``count`` masks uniform in ``[-2**bits, 2**bits)`` from the operating system's CSPRNG,
        packed: returns the packed plaintexts (object array, ``n_plaintexts(count)``) and every
        mask modulo ``2**64`` (int64, ``(count,)``: what the masks' owner subtracts from a share
        read with ``unpack(..., wrap=True)``). A slot must hold ``2**bits`` beside its value: the
        caller checks the value's bound (``bits`` <= ``slot_bits - 2``)."""
        bits, count = int(bits), int(count)
        if not 1 <= bits <= self.slot_bits - 2:
            raise CryptoError(f"SlotPacking.random_masks: {bits}-bit masks do not fit {self.slot_bits}-bit slots "
                              f"(at most {self.slot_bits - 2})")
        nb = (bits + 8) // 8  # bytes of a digit d in [0, 2**(bits + 1))
        d = np.frombuffer(os.urandom(count * nb), dtype=np.uint8).reshape(count, nb).copy()
        d[:, nb - 1] &= (1 << ((bits + 1) - 8 * (nb - 1))) - 1
        # mask r = d - 2**bits; its slot digit r + 2**(slot_bits - 1) = d + (2**(slot_bits - 1) - 2**bits) >= 0
        lo = np.zeros((count, 8), dtype=np.uint8)
        lo[:, :min(8, nb)] = d[:, :8]
        low = (lo.view("<u8").ravel() - np.uint64((1 << bits) % (1 << 64))).view(np.int64)  # modulo 2**64
        raw = np.zeros((self.n_plaintexts(count) * self.slots, self.slot_bits // 8), dtype=np.uint8)
        raw[:count, :nb] = d
        packed = self._join(raw, count)  # sum_j (d_j - 2**(b-1)) 2**(b j): shift each slot by 2**(b-1) - 2**bits
        k = self.slots
        for i in range(len(packed)):  # one big-integer operation per plaintext
            fill = min(k, count - i * k)
            packed[i] += self._offset(fill) - (self._offset(fill) >> (self.slot_bits - 1 - bits))
        return packed, np.ascontiguousarray(low)

    def unpack(self, packed: Any, count: int, bound: int | None = None, wrap: bool = False) -> np.ndarray:
        """Packed signed ints -> the ``count`` signed mantissas (int64). ``bound``: every value must
        be at most this in magnitude (the caller's tracked bound), else :class:`CryptoError`.

        A value of a wide slot that does not fit int64 is a :class:`CryptoError`, unless ``wrap``:
        then every value is returned modulo ``2**64`` (its low 64 bits as int64; a masked share)."""
        packed = list(packed)
        count = int(count)
        k, b, w = self.slots, self.slot_bits, self.slot_bits // 8
        if len(packed) != self.n_plaintexts(count):
            raise CryptoError(f"SlotPacking.unpack: {len(packed)} plaintexts cannot hold {count} values in "
                              f"{k} slots each")
        raw = np.zeros((len(packed), k, max(w, 8)), dtype=np.uint8)
        for i, x in enumerate(packed):
            fill = min(k, count - i * k)
            U = int(x) + self._offset(fill)
            if U < 0 or U >> (b * fill):
                raise CryptoError("SlotPacking.unpack: a packed plaintext lies outside its slots' range "
                                  "(an overflow, or not packed with this layout)")
            raw[i, :fill, :w] = np.frombuffer(U.to_bytes(fill * w, "little"), dtype=np.uint8).reshape(fill, w)
        raw = raw.reshape(-1, max(w, 8))[:count]
        digits = np.ascontiguousarray(raw[:, :8]).view("<u8").ravel()
        if w <= 8:
            m: np.ndarray = (digits - np.uint64(1 << (b - 1))).view(np.int64)  # modulo 2**64, then signed
        else:
            m = digits.view(np.int64).copy()  # the offset 2**(b-1) is 0 modulo 2**64
            if not wrap:  # the bytes above the low 8 (sign bit flipped back) must extend m's sign
                hi = raw[:, 8:].copy()
                hi[:, -1] ^= 0x80
                ext = np.where(m < 0, 0xFF, 0x00).astype(np.uint8)[:, None]
                if (hi != ext).any():
                    raise CryptoError(f"SlotPacking.unpack: a {b}-bit slot holds a value beyond int64 (a masked "
                                      "share: read it with wrap=True)")
        if bound is not None and m.size and int(np.max(np.abs(m))) > int(bound):
            raise CryptoError("SlotPacking.unpack: a slot decoded beyond its tracked bound (overflow or "
                              "corrupted ciphertext)")
        return m


class PackedEncryptedArray:
    """Values of one shape, packed ``packing.slots`` per ciphertext, with a tracked slot bound."""

    def __init__(self, packing: SlotPacking, ciphertexts: EncryptedArray, shape: tuple[int, ...], bound: int) -> None:
        self.packing = packing
        self.ciphertexts = ciphertexts
        self.shape = tuple(int(s) for s in shape)
        self.count = int(np.prod(self.shape, dtype=np.int64))
        self.bound = int(bound)
        if ciphertexts.size != packing.n_plaintexts(self.count):
            raise CryptoError(f"PackedEncryptedArray: {ciphertexts.size} ciphertexts for {self.count} values in "
                              f"{packing.slots} slots each")

    @classmethod
    def encrypt(cls, key: PublicKey | PrivateKey, values: Any, packing: SlotPacking) -> PackedEncryptedArray:
        """Encrypt ``values`` (any shape), ``packing.slots`` per ciphertext (the public key's r^n pool
        is used when it has been filled, as for every encryption)."""
        a = np.asarray(values, dtype=np.float64)
        m = packing.mantissas(a)
        ct = EncryptedArray.encrypt(key, packing.pack(m), precision=0)
        return cls(packing, ct, a.shape, int(np.max(np.abs(m))) if m.size else 0)

    @property
    def nbytes(self) -> int:
        return self.ciphertexts.nbytes

    def _check(self, bound: int, what: str) -> None:
        if bound > self.packing.limit:
            raise CryptoError(f"{what}: the result could reach {bound} in a slot, beyond the "
                              f"{self.packing.slot_bits}-bit slots' {self.packing.limit}; size the packing "
                              "with more headroom (SlotPacking.for_key(..., headroom=))")

    def __add__(self, other: Any) -> PackedEncryptedArray:
        """Slot-wise sum with another packed array of the same layout and shape, or with plaintext
        values of that shape (packed here, e.g. a mask)."""
        if isinstance(other, PackedEncryptedArray):
            if other.packing != self.packing or other.shape != self.shape:
                raise CryptoError(f"add: packed arrays of different layouts or shapes ({self.shape}, {other.shape})")
            bound = self.bound + other.bound
            self._check(bound, "add")
            return PackedEncryptedArray(self.packing, self.ciphertexts + other.ciphertexts, self.shape, bound)
        a = np.asarray(other, dtype=np.float64)
        if a.shape != self.shape:
            raise CryptoError(f"add: plaintext of shape {a.shape} to packed values of shape {self.shape}")
        m = self.packing.mantissas(a)
        bound = self.bound + (int(np.max(np.abs(m))) if m.size else 0)
        self._check(bound, "add")
        return PackedEncryptedArray(self.packing, self.ciphertexts + self.packing.pack(m), self.shape, bound)

    def decrypt_mantissas(self, private_key: PrivateKey) -> np.ndarray:
        packed = self.ciphertexts.decrypt_mantissas(private_key).ravel().tolist()
        return self.packing.unpack(packed, self.count, self.bound).reshape(self.shape)

    def decrypt(self, private_key: PrivateKey) -> np.ndarray:
        return np.ldexp(self.decrypt_mantissas(private_key).astype(np.float64), -self.packing.precision)


# ------------------------------------------------------------ linear maps on packed ciphertexts
def slot_masks(count: int, bits: int) -> np.ndarray:
    """``count`` uniform signed integers in ``[-2**(bits-1), 2**(bits-1))`` (int64) from the
    operating system's CSPRNG: statistical masks for packed slots (``bits`` <= 63)."""
    if not 1 <= int(bits) <= 63:
        raise CryptoError(f"slot_masks: bits must lie in [1, 63], got {bits}")
    raw = np.frombuffer(os.urandom(8 * int(count)), dtype="<u8")
    masks: np.ndarray = (raw >> np.uint64(64 - int(bits))).astype(np.int64) - (1 << (int(bits) - 1))
    return masks


def combination_bound(K: np.ndarray, bound: int) -> int:
    """The largest slot magnitude of ``cts @ K`` when every input slot is at most ``bound``."""
    K = np.asarray(K, dtype=np.int64)
    col = np.abs(K).sum(axis=0) if K.size else np.zeros(K.shape[1:], dtype=np.int64)
    return int(col.max()) * int(bound) if col.size else 0


def packed_combination(cts: EncryptedArray, K: Any, bound: int, packing: SlotPacking) -> tuple[EncryptedArray, int]:
    """``cts @ K`` on packed ciphertexts: output ``l`` is ``prod_j cts[j] ** K[j, l]``, i.e. every
    slot of the result is the same integer combination of the inputs' slots (one scalar per input
    ciphertext, so slot-wise linear). ``cts`` is ``(m,)``, ``K`` an ``(m, k)`` integer matrix; every
    input slot is at most ``bound`` in magnitude. Returns the ``(k,)`` ciphertexts and their bound;
    a result that could leave the slot range is a :class:`CryptoError` before any work."""
    K = np.asarray(K)
    if K.dtype.kind not in "iu" or K.ndim != 2 or K.shape[0] != cts.size:
        raise CryptoError(f"packed_combination: need an integer matrix with {cts.size} rows, got "
                          f"{K.dtype} {K.shape}")
    out_bound = combination_bound(K, bound)
    if out_bound > packing.limit:
        raise CryptoError(f"packed_combination: a slot could reach {out_bound}, beyond the "
                          f"{packing.slot_bits}-bit slots' {packing.limit}; lower the precision")
    return cts.ravel().dot(K.astype(np.int64), precision=0), out_bound
