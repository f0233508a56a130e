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
(``slot_bits`` is a multiple of 8, at most 64), one big-integer conversion per plaintext, no Python
loop over values.

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


@dataclass(frozen=True)
class SlotPacking:
    """``slots`` signed values of ``slot_bits`` bits each per plaintext, fixed point with
    ``precision`` fractional bits."""

    slot_bits: int
    slots: int
    precision: int

    def __post_init__(self) -> None:
        if self.slot_bits % 8 or not 8 <= self.slot_bits <= 64:
            raise CryptoError(f"SlotPacking: slot_bits must be a multiple of 8 in [8, 64], got {self.slot_bits}")
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
        if top >= float(1 << (self.slot_bits - 1)):  # strict in float: limit + 1 rounds to 2**(b-1) for b = 64
            raise CryptoError(f"SlotPacking: a value of magnitude {top / 2 ** self.precision:g} does not fit a "
                              f"{self.slot_bits}-bit slot at precision {self.precision} (largest "
                              f"{self.limit / 2 ** self.precision:g})")
        return m.astype(np.int64)

    def _offset(self, k: int) -> int:
        """``C_k = sum_{j<k} 2**(slot_bits - 1) * 2**(slot_bits * j)``."""
        b = self.slot_bits
        return ((1 << (b * k)) - 1) // ((1 << b) - 1) << (b - 1)

    def pack(self, m: np.ndarray) -> np.ndarray:
        """Signed int64 mantissas (1-D) -> object array of packed signed Python ints."""
        m = np.asarray(m, dtype=np.int64).ravel()
        if m.size and int(np.max(np.abs(m))) > self.limit:
            raise CryptoError(f"SlotPacking.pack: a mantissa exceeds the {self.slot_bits}-bit slot range")
        k, w = self.slots, self.slot_bits // 8
        count = m.size
        P = self.n_plaintexts(count)
        u = np.zeros(P * k, dtype="<u8")  # unsigned digits m + 2**(b-1), little-endian; unused slots 0
        # two's complement plus the offset, modulo 2**64: exact for 64-bit slots too
        u[:count] = m.view(np.uint64) + np.uint64(1 << (self.slot_bits - 1))
        raw = u.view(np.uint8).reshape(P, k, 8)[:, :, :w].reshape(P, k * w)
        fills = np.full(P, k, dtype=np.int64)
        if P:
            fills[-1] = count - (P - 1) * k
        out = np.empty(P, dtype=object)
        for i in range(P):  # one big-integer conversion per plaintext
            out[i] = int.from_bytes(raw[i, : fills[i] * w].tobytes(), "little") - self._offset(int(fills[i]))
        return out

    def unpack(self, packed: Any, count: int, bound: int | None = None) -> np.ndarray:
        """Packed signed ints -> the ``count`` signed mantissas (int64). ``bound``: every value must
        be at most this in magnitude (the caller's tracked bound), else :class:`CryptoError`."""
        packed = list(packed)
        count = int(count)
        k, b, w = self.slots, self.slot_bits, self.slot_bits // 8
        if len(packed) != self.n_plaintexts(count):
            raise CryptoError(f"SlotPacking.unpack: {len(packed)} plaintexts cannot hold {count} values in "
                              f"{k} slots each")
        raw = np.zeros((len(packed), k, 8), dtype=np.uint8)
        for i, x in enumerate(packed):
            fill = min(k, count - i * k)
            U = int(x) + self._offset(fill)
            if U < 0 or U >> (b * fill):
                raise CryptoError("SlotPacking.unpack: a packed plaintext lies outside its slots' range "
                                  "(an overflow, or not packed with this layout)")
            raw[i, :fill, :w] = np.frombuffer(U.to_bytes(fill * w, "little"), dtype=np.uint8).reshape(fill, w)
        digits = raw.reshape(-1).view("<u8")[:count]
        m = (digits - np.uint64(1 << (b - 1))).view(np.int64)  # modulo 2**64, then signed
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
    return (raw >> np.uint64(64 - int(bits))).astype(np.int64) - (1 << (int(bits) - 1))


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
