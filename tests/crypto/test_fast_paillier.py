"""The key holder's fast paths and the background obfuscator pool (crypto/keys.py, crypto/_bigint.py).

- fixed-base tables (:class:`FixedBase`) give exactly ``pow``;
- safe-prime keys: the key holder's obfuscators ``CRT(h_p**a, h_q**b)`` are ``n``-th residues drawn
  from the whole group ``r**n`` lives in (both Legendre symbols take both values: a base that
  generated only a subgroup would show);
- CRT encryption and decryption agree with the plain formulas (``(1 + m n) r**n``,
  ``L(c**lambda) mu``) and with python-paillier for random values, negative numbers and packed slots;
- the background pool is bounded, hands out each value once across threads, and is what
  ``encrypt`` and ``rerandomize`` consume first;
- the same works without gmpy2 (the base install), in a subprocess that cannot import it.
"""

from __future__ import annotations

import math
import secrets
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from verticalfs.crypto import EncryptedArray, PublicKey, available_backends, generate_keypair
from verticalfs.crypto._bigint import FixedBase, is_safe_prime, random_safe_prime
from verticalfs.crypto.packing import PackedEncryptedArray, SlotPacking


@pytest.fixture(scope="module")
def keys():
    return generate_keypair(768, backend="python", insecure=True)


def legendre(a: int, p: int) -> int:
    return 1 if pow(a % p, (p - 1) // 2, p) == 1 else -1


def plain_decrypt(priv, c: int) -> int:
    """Paillier 1999, section 3: ``m = L(c**lambda mod n**2) * mu mod n``, ``L(x) = (x - 1) / n``."""
    n = priv.public_key.n
    lam = (priv.p - 1) * (priv.q - 1) // math.gcd(priv.p - 1, priv.q - 1)
    mu = pow((pow(n + 1, lam, n * n) - 1) // n, -1, n)
    return (pow(int(c), lam, n * n) - 1) // n * mu % n


def plain_encrypt(pub, m: int) -> int:
    n = pub.n
    while True:
        r = 1 + secrets.randbelow(n - 1)
        if math.gcd(r, n) == 1:
            return (1 + (m % n) * n) * pow(r, n, n * n) % (n * n)


class TestFixedBase:
    @pytest.mark.parametrize("window", [1, 5, 8])
    def test_matches_pow(self, window):
        rng = np.random.default_rng(window)
        m = int(rng.integers(2**62)) * 2**70 + 1
        base = int(rng.integers(2, 2**62))
        fb = FixedBase(base, m, 130, window=window)
        exps = [0, 1, 2**130 - 1, 2**129] + [secrets.randbits(130) for _ in range(20)]
        assert [int(v) for v in fb.pow(exps)] == [pow(base, e, m) for e in exps]
        assert fb.pow([]).size == 0
        with pytest.raises(ValueError, match="exponents"):
            fb.pow([2**130])

    def test_safe_primes(self):
        p = random_safe_prime(128)
        assert p.bit_length() == 128 and p >> 126 == 3 and is_safe_prime(p)
        assert not is_safe_prime(2 * 11 * 13 + 1) and not is_safe_prime(13)


class TestHolderObfuscators:
    def test_keys_have_safe_primes_and_tables(self, keys):
        pub, priv = keys
        assert is_safe_prime(priv.p) and is_safe_prime(priv.q) and pub.bits == 768
        assert priv.fixed_base_tables()
        other = generate_keypair(512, backend="python", insecure=True, safe_primes=False)[1]
        assert not other.fixed_base_tables()

    def test_values_are_the_fixed_base_powers(self, keys, monkeypatch):
        import verticalfs.crypto.keys as K

        pub, priv = keys
        p, q, n = priv.p, priv.q, pub.n
        drawn = []
        real = K.secrets.randbelow
        monkeypatch.setattr(K.secrets, "randbelow", lambda k: drawn.append((k, real(k))) or drawn[-1][1])
        rn = priv.holder_obfuscators(6)
        assert [k for k, _ in drawn] == [p - 1] * 6 + [q - 1] * 6  # exponents uniform below the group order
        hp, hq = priv._order_p_minus_1_generator(p), priv._order_p_minus_1_generator(q)
        for v, (_, a), (_, b) in zip(rn, drawn[:6], drawn[6:], strict=True):
            assert int(v) % (p * p) == pow(int(hp), a, p * p) and int(v) % (q * q) == pow(int(hq), b, q * q)
            assert 0 < int(v) < n * n
        # h_p generates the whole subgroup of order p - 1 (p - 1 = 2 p', p' prime)
        for h, r in ((int(hp), p), (int(hq), q)):
            assert pow(h, r - 1, r * r) == 1 and pow(h, 2, r * r) != 1 and pow(h, (r - 1) // 2, r * r) != 1

    def test_distribution_covers_the_group(self, keys):
        """``r**n mod p`` is a non-residue half the time; so must the key holder's obfuscators be
        (a base that was a quadratic residue would give +1 always: checked by breaking the code)."""
        pub, priv = keys
        rn = [int(v) for v in priv.holder_obfuscators(64)]
        assert len(set(rn)) == 64
        assert priv.decrypt_residues(rn) == [0] * 64  # n-th residues: encryptions of 0
        for r in (priv.p, priv.q):
            assert {legendre(v, r) for v in rn} == {1, -1}


class TestAgainstThePlainFormulas:
    def test_random_and_negative_values(self, keys):
        pub, priv = keys
        rng = np.random.default_rng(3)
        m = [int(v) for v in rng.integers(-(2**62), 2**62, size=12)] + [0, 1, -1, pub.max_int, -pub.max_int]
        e = EncryptedArray.encrypt(priv, np.array(m, dtype=object))  # CRT, fixed-base obfuscators
        for c, v in zip(e.ciphertexts(), m, strict=True):
            assert plain_decrypt(priv, c) == v % pub.n
        assert e.decrypt_mantissas(priv).tolist() == m
        # the other way: the textbook encryption, read by the CRT decryption
        cts = [plain_encrypt(pub, v) for v in m]
        assert priv.decrypt_mantissas(cts) == m

    def test_packed_slots(self, keys):
        pub, priv = keys
        rng = np.random.default_rng(4)
        v = rng.uniform(-8, 8, size=37)
        packing = SlotPacking.for_key(pub, value_bound=8.0, precision=16, headroom=4)
        assert packing.slots > 1
        packed = PackedEncryptedArray.encrypt(priv, v, packing)
        want = packing.pack(packing.mantissas(v))
        cts = packed.ciphertexts.ciphertexts()
        assert [plain_decrypt(priv, c) for c in cts] == [int(w) % pub.n for w in want]
        np.testing.assert_allclose(packed.decrypt(priv), v, atol=2**-16)

    def test_against_python_paillier(self, keys):
        if "phe" not in available_backends():
            pytest.skip("python-paillier (phe) is not installed")
        import phe

        pub, priv = keys
        ppub = phe.PaillierPublicKey(pub.n)
        ppriv = phe.PaillierPrivateKey(ppub, priv.p, priv.q)
        m = [secrets.randbelow(2**200) - 2**199 for _ in range(10)] + [-5, 0, 7]
        e = EncryptedArray.encrypt(priv, np.array(m, dtype=object))
        assert [ppriv.raw_decrypt(c) for c in e.ciphertexts()] == [v % pub.n for v in m]
        theirs = [ppub.raw_encrypt(v % pub.n) for v in m]
        assert priv.decrypt_mantissas(theirs) == m


class TestBackgroundPool:
    def test_fills_to_its_bound_and_feeds_encryption(self, keys):
        pub0, priv = keys
        pub = PublicKey(pub0.n, backend="python", insecure=True)  # a non-holder's copy of the key
        pool = pub.start_pool(12, chunk=5)
        try:
            assert pub.start_pool(99) is pool  # one pool per key
            assert pool.wait_full(timeout=60)
            assert pool.size == 12 and pub.pool_size == 12 and pool.drawn <= 12
            held = [int(v) for v in pool._items]
            x = np.array([3, -4, 5, 6, 7])
            e = EncryptedArray.encrypt(pub, x)
            for c, m, rn in zip(e.ciphertexts(), x.tolist(), held[:5], strict=True):
                assert c == (1 + (m % pub.n) * pub.n) * rn % pub.nsquare  # the pool's values, in order
            assert e.decrypt_mantissas(priv).tolist() == x.tolist()
            assert pool.wait_full(timeout=60)  # refilled
            r = e.rerandomize()  # also from the pool
            assert pool.taken == 10 and r.decrypt_mantissas(priv).tolist() == x.tolist()
            assert all(a != b for a, b in zip(r.ciphertexts(), e.ciphertexts(), strict=True))
        finally:
            pub.stop_pool()
        assert pub.pool_size == 0 and not pool.running

    def test_never_hands_out_a_value_twice(self, keys):
        pub, priv = keys
        pool = pub.start_pool(16, private_key=priv, chunk=3)  # the holder's pool: cheap values
        got: list[list[int]] = [[] for _ in range(4)]

        def taker(i: int) -> None:
            while len(got[i]) < 40:
                got[i] += [int(v) for v in pub.obfuscators(3)]

        try:
            threads = [threading.Thread(target=taker, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            every = [v for g in got for v in g]
            assert len(every) == len(set(every)) >= 160
            assert pool.taken > 0 and pool.drawn - pool.taken <= 16  # bounded
            assert pool.error is None
            assert priv.decrypt_residues(every[:8]) == [0] * 8
        finally:
            pub.stop_pool()


def test_a_pool_without_refill_fills_once_then_only_gives():
    """refill=False: the thread makes ``size`` values in the idle time and ends; taking does not
    start it again (no thread competes with the round that consumes them)."""
    pub, priv = generate_keypair(512, backend="python", insecure=True)
    pool = pub.start_pool(6, private_key=priv, chunk=4, refill=False)
    try:
        assert pool.wait_full(timeout=60) and pool.size == 6
        pool._thread.join(timeout=30)
        assert not pool._thread.is_alive() and pool.drawn == 6
        assert pub.start_pool(99) is pool  # still holds values: the same pool
        x = np.array([2, -3, 4, 5])
        e = EncryptedArray.encrypt(priv, x)
        assert e.decrypt_mantissas(priv).tolist() == x.tolist()
        assert pool.taken == 4 and pool.size == 2 and pool.drawn == 6  # taken, not refilled
        assert pool.wait_full(timeout=1) is False  # never full again, and the wait does not hang
        e.rerandomize()
        assert pool.size == 0 and pool.drawn == 6  # 2 from the pool, 2 fresh
    finally:
        pub.stop_pool()


def test_pool_stops_when_its_key_is_collected():
    import gc

    pub, priv = generate_keypair(512, backend="python", insecure=True)
    pool = pub.start_pool(4)
    assert pool.wait_full(timeout=60) and pool.running
    thread = pool._thread
    del pub, priv
    gc.collect()
    thread.join(timeout=30)
    assert not thread.is_alive() and not pool.running and pool.size == 0 and pool.public_key is None


def test_without_gmpy2():
    """The base install's arithmetic (Python integers): keys, fixed-base tables, pool, round trip."""
    code = textwrap.dedent("""
        import sys
        sys.modules["gmpy2"] = None  # import gmpy2 -> ImportError
        import numpy as np
        from verticalfs.crypto import EncryptedArray, generate_keypair
        from verticalfs.crypto import _bigint
        assert not _bigint.HAVE_GMPY2
        pub, priv = generate_keypair(512, insecure=True)
        assert priv.fixed_base_tables()
        x = np.array([1.5, -2.25, 3.0, 0.0])
        e = EncryptedArray.encrypt(priv, x)
        assert np.allclose(e.decrypt(priv), x)
        pool = pub.start_pool(4)
        assert pool.wait_full(timeout=120)
        assert np.allclose(EncryptedArray.encrypt(pub, x).rerandomize().decrypt(priv), x)
        pub.stop_pool()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
