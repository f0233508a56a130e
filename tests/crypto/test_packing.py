"""Slot packing (crypto/packing.py): exact round trips with negative values, packed and unpacked
paths decrypt identically, homomorphic sums and masks slot-wise, and overflow is an error."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verticalfs.crypto import EncryptedArray, generate_keypair
from verticalfs.crypto.packing import PackedEncryptedArray, SlotPacking
from verticalfs.exceptions import CryptoError


@pytest.fixture(scope="module")
def keys():
    return generate_keypair(1024, backend="python", insecure=True)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=8), st.integers(min_value=1, max_value=40), st.integers(0, 2**31 - 1))
def test_pack_unpack_round_trip_at_the_slot_limits(width, count, seed):
    p = SlotPacking(8 * width, 5, 0)
    rng = np.random.default_rng(seed)
    m = rng.integers(-p.limit, p.limit, size=count, endpoint=True, dtype=np.int64)
    m[: min(2, count)] = [p.limit, -p.limit][: min(2, count)]  # the extremes of the range
    packed = p.pack(m)
    assert len(packed) == -(-count // 5)
    # the packed integer is exactly sum_j m_j 2**(b j) per plaintext
    first = m[:5].tolist()
    assert packed[0] == sum(v << (8 * width * j) for j, v in enumerate(first))
    np.testing.assert_array_equal(p.unpack(packed, count), m)


def test_packed_and_unpacked_encryption_decrypt_identically(keys):
    pub, priv = keys
    rng = np.random.default_rng(0)
    v = rng.normal(scale=3.0, size=(7, 9))
    v[0, 0], v[0, 1] = -8.0, 8.0
    p = SlotPacking.for_key(pub, value_bound=8.0, precision=16, headroom=4)
    assert p.slots > 1
    packed = PackedEncryptedArray.encrypt(pub, v, p)
    plain = EncryptedArray.encrypt(pub, v, precision=16)
    np.testing.assert_array_equal(packed.decrypt(priv), plain.decrypt(priv))
    np.testing.assert_array_equal(packed.decrypt_mantissas(priv), np.asarray(plain.decrypt_mantissas(priv), dtype=np.int64))
    assert packed.ciphertexts.size == -(-v.size // p.slots) < v.size
    assert packed.nbytes == packed.ciphertexts.size * pub.ciphertext_bytes
    assert plain.nbytes == v.size * pub.ciphertext_bytes


def test_sums_and_masks_are_slot_wise(keys):
    pub, priv = keys
    rng = np.random.default_rng(1)
    p = SlotPacking.for_key(pub, value_bound=4.0, precision=12, headroom=4)
    a, b, mask = (rng.uniform(-4, 4, size=23) for _ in range(3))
    A, B = PackedEncryptedArray.encrypt(pub, a, p), PackedEncryptedArray.encrypt(priv, b, p)
    s = A + B + mask  # an encrypted sum, then a plaintext mask added under encryption
    q = lambda x: np.ldexp(np.rint(np.ldexp(x, 12)), -12)  # noqa: E731  the same fixed point
    np.testing.assert_array_equal(s.decrypt(priv), q(a) + q(b) + q(mask))
    unpacked = EncryptedArray.encrypt(pub, a, precision=12) + EncryptedArray.encrypt(pub, b, precision=12) + q(mask)
    np.testing.assert_array_equal(s.decrypt(priv), unpacked.decrypt(priv))
    assert s.bound <= 3 * 4 * 2**12


def test_overflow_is_an_error_never_a_wrap(keys):
    pub, priv = keys
    p = SlotPacking.for_key(pub, value_bound=1.0, precision=8, headroom=1)  # room for |v| <= 1 only once
    with pytest.raises(CryptoError, match="does not fit"):
        PackedEncryptedArray.encrypt(pub, np.array([1.0, 2 ** (p.slot_bits - 1 - 8) + 1.0]), p)
    x = np.full(10, p.limit / 2**8)  # the slots' largest value
    X = PackedEncryptedArray.encrypt(pub, x, p)
    with pytest.raises(CryptoError, match="headroom"):
        X + X  # would overflow a slot: refused before it runs
    with pytest.raises(CryptoError, match="headroom"):
        X + np.full(10, 1.0)
    # a ciphertext whose slot overflowed behind the bound's back (e.g. tampered) is detected
    Y = PackedEncryptedArray(p, X.ciphertexts + X.ciphertexts, X.shape, X.bound)
    with pytest.raises(CryptoError):
        Y.decrypt(priv)
    with pytest.raises(CryptoError, match="64"):
        SlotPacking.for_key(pub, value_bound=2.0**60, precision=16)
    with pytest.raises(CryptoError, match="plaintexts cannot hold"):
        p.unpack([0, 0], 1)


# ------------------------------------------------------------------ wide slots and their masks
def full_slots(packing: SlotPacking, packed, count: int) -> list[int]:
    """Every slot's signed value at full width, by Python integers (independent of the library)."""
    b, k = packing.slot_bits, packing.slots
    out = []
    for i, x in enumerate(packed):
        fill = min(k, count - i * k)
        U = int(x) + sum(1 << (b - 1 + b * j) for j in range(fill))
        out += [((U >> (b * j)) & ((1 << b) - 1)) - (1 << (b - 1)) for j in range(fill)]
    return out


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([72, 88, 128, 256]), st.integers(min_value=1, max_value=30), st.integers(0, 2**31 - 1))
def test_wide_slots_round_trip_int64_values(bits, count, seed):
    p = SlotPacking(bits, 4, 0)
    m = np.random.default_rng(seed).integers(-2**63, 2**63 - 1, size=count, endpoint=True, dtype=np.int64)
    packed = p.pack(m)
    assert full_slots(p, packed, count) == m.tolist()
    np.testing.assert_array_equal(p.unpack(packed, count), m)


@pytest.mark.parametrize("bits, mask_bits", [(16, 14), (64, 62), (88, 86), (128, 126), (128, 70)])
def test_random_masks_are_uniform_wide_and_their_residues_unmask_exactly(keys, bits, mask_bits):
    pub, priv = keys
    p = SlotPacking(bits, (pub.max_int.bit_length() - 1) // bits, 0)
    count = 3 * p.slots - 1
    plain, low = p.random_masks(count, mask_bits)
    r = full_slots(p, plain, count)
    assert all(-(1 << mask_bits) <= v < (1 << mask_bits) for v in r)
    assert max(abs(v) for v in r).bit_length() >= mask_bits - 6  # as wide as asked (chance 2**-6 per draw)
    assert sum(v < 0 for v in r) not in (0, count)  # both signs
    assert [(v % 2**64) for v in r] == [int(x) for x in low.view(np.uint64)]
    # under encryption: value + mask read modulo 2**64, minus the mask's residue, is the value
    v = np.random.default_rng(1).integers(-2**(min(mask_bits, 62) - 1), 2**(min(mask_bits, 62) - 1), size=count)
    ct = EncryptedArray.encrypt(priv, p.pack(v), precision=0).add_mantissas(plain)
    got = p.unpack(ct.decrypt_mantissas(priv).ravel().tolist(), count, wrap=True)
    np.testing.assert_array_equal(got - low, v)
    if bits > 64:  # the shares are beyond int64: reading them without wrap is an error, never a wrap
        with pytest.raises(CryptoError, match="beyond int64"):
            p.unpack(ct.decrypt_mantissas(priv).ravel().tolist(), count)
    with pytest.raises(CryptoError, match="do not fit"):
        p.random_masks(4, bits - 1)
