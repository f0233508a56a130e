"""Big-integer primitives: gmpy2 when it is importable, Python's builtins otherwise.

gmpy2 (LGPL-3.0-or-later, dynamically linked) makes modular exponentiation about ten times faster
than ``pow``; every result is the same integer either way. Randomness for keys, obfuscators and
masks comes from :mod:`secrets` (the operating system's CSPRNG), never from a seeded generator.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np

try:  # pragma: no branch - which branch runs depends on the environment
    import gmpy2 as _gmpy2

    HAVE_GMPY2 = True
    mpz = _gmpy2.mpz

    def powmod(base: Any, exp: Any, mod: Any) -> int:
        """``base ** exp % mod`` (a negative ``exp`` inverts ``base`` first); an ``mpz``, which
        behaves as an ``int``."""
        return cast(int, _gmpy2.powmod(base, exp, mod))

    def invert(a: Any, mod: Any) -> int:
        """The inverse of ``a`` modulo ``mod`` (an ``mpz``)."""
        return cast(int, _gmpy2.invert(a, mod))

    def _next_prime(x: int) -> int:
        return int(_gmpy2.next_prime(x))

    def _mr(n: int, rounds: int) -> bool:
        return bool(_gmpy2.is_prime(n, rounds))

    @contextlib.contextmanager
    def released_gil() -> Iterator[None]:
        """gmpy2 releases the GIL inside its operations in this block (this thread only), so a
        background thread's exponentiations run beside the main thread's Python code."""
        with _gmpy2.context(_gmpy2.get_context(), allow_release_gil=True):
            yield

except ImportError:  # pragma: no cover - gmpy2 is installed in the development environment
    _gmpy2 = None
    HAVE_GMPY2 = False
    mpz = int

    def powmod(base: Any, exp: Any, mod: Any) -> int:
        """``base ** exp % mod`` (a negative ``exp`` inverts ``base`` first)."""
        return int(pow(base, exp, mod))

    def invert(a: Any, mod: Any) -> int:
        """The inverse of ``a`` modulo ``mod``."""
        return int(pow(a, -1, mod))

    def _next_prime(x: int) -> int:
        x = x + 1 if x % 2 == 0 else x + 2
        while not is_probable_prime(x):
            x += 2
        return x

    _mr = None  # type: ignore[assignment]

    @contextlib.contextmanager
    def released_gil() -> Iterator[None]:
        """Python's ``pow`` holds the GIL; nothing to release."""
        yield


_SMALL_PRIMES = [p for p in range(3, 2000, 2) if all(p % d for d in range(3, int(p**0.5) + 1, 2))]


def is_probable_prime(n: int, rounds: int = 40) -> bool:
    """Miller-Rabin with ``rounds`` random bases after trial division (error <= 4**-rounds)."""
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    for p in _SMALL_PRIMES:
        if n % p == 0:
            return n == p
    if _mr is not None:  # gmpy2: the same test (random bases after trial division), in C
        return _mr(n, rounds)
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for _ in range(rounds):
        a = 2 + secrets.randbelow(n - 3)
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def random_prime(bits: int) -> int:
    """A random prime of exactly ``bits`` bits whose two top bits are set.

    With both top bits set, the product of primes of ``a`` and ``b`` bits has exactly ``a + b``
    bits, so a key asked for with ``bits`` bits gets a modulus of exactly that length.
    """
    while True:
        x = secrets.randbits(bits) | (3 << (bits - 2)) | 1
        p = _next_prime(x - 2)
        if p.bit_length() == bits and (p >> (bits - 2)) == 3:
            return p


def random_below(n: int) -> int:
    """Uniform in ``[1, n)``."""
    return 1 + secrets.randbelow(n - 1)


def random_safe_prime(bits: int) -> int:
    """A random *safe* prime ``p = 2 p' + 1`` (``p'`` prime) of exactly ``bits`` bits, two top bits set.

    ``p - 1 = 2 p'`` is then fully factored, so the key holder can check that a base generates the
    whole group of order ``p - 1`` (:class:`~verticalfs.crypto.keys.PrivateKey` uses that for its
    fixed-base obfuscators). Candidates ``p'`` are sieved jointly (neither ``p'`` nor ``2 p' + 1``
    divisible by a prime below 2**16) over blocks of offsets, filtered by Fermat tests to base 2
    (cheap), then confirmed with Miller-Rabin (:func:`is_probable_prime`). A 1024-bit safe prime
    takes about a second with gmpy2 (a geometric number of candidates: sometimes several).
    """
    if bits < 16:
        raise ValueError(f"random_safe_prime: {bits} bits is too short")
    block = 1 << 14
    two = mpz(2)
    sieve = _sieve_primes(max(2048, min(1 << 16, 64 * bits)))
    while True:
        x = secrets.randbits(bits - 1) | (3 << (bits - 3)) | 1  # p' with bits - 1 bits; p = 2p' + 1
        bad = bytearray(block)
        for s in sieve:
            r = x % s
            k0 = (-r * ((s + 1) // 2)) % s  # p' = x + 2k = 0 (mod s)
            k1 = (-(2 * r + 1) * pow(4, -1, s)) % s  # p = 2x + 4k + 1 = 0 (mod s)
            for k in (k0, k1):
                bad[k::s] = b"\x01" * len(range(k, block, s))
        X = mpz(x)
        for k in (i for i, v in enumerate(bad) if not v):
            q = X + 2 * k
            p = 2 * q + 1
            if p.bit_length() != bits or (p >> (bits - 2)) != 3:
                break
            if powmod(two, q - 1, q) != 1 or powmod(two, p - 1, p) != 1:
                continue
            if is_probable_prime(int(q)) and is_probable_prime(int(p)):
                return int(p)


@functools.lru_cache(maxsize=8)
def _sieve_primes(limit: int) -> list[int]:
    """Odd primes below ``limit`` (sieve of Eratosthenes)."""
    flags = bytearray([1]) * limit
    flags[:2] = b"\x00\x00"
    for i in range(2, int(limit**0.5) + 1):
        if flags[i]:
            flags[i * i :: i] = bytearray(len(range(i * i, limit, i)))
    return [i for i in range(3, limit) if flags[i]]


def is_safe_prime(p: int) -> bool:
    """True if ``p`` and ``(p - 1) / 2`` are both (probable) primes."""
    return p > 5 and p % 2 == 1 and is_probable_prime(p) and is_probable_prime((p - 1) // 2)


class FixedBase:
    """``base ** e mod modulus`` for many exponents ``e < 2**exp_bits``, with a table per window.

    Fixed-base windowing (Brickell, Gordon, McCurley and Wilson, "Fast exponentiation with
    precomputation", EUROCRYPT 1992; the simple fixed-window form, Menezes, van Oorschot and
    Vanstone, *Handbook of Applied Cryptography*, 1996, section 14.6.3): with ``T = ceil(exp_bits /
    w)`` windows of ``w`` bits, the table holds ``base ** (d * 2**(w i))`` for every window ``i``
    and digit ``d < 2**w``; then ``base ** e`` is the product of one entry per window: ``T - 1``
    modular multiplications and no squaring, against about ``exp_bits`` squarings plus
    ``exp_bits / (w + 1)`` multiplications for a sliding-window ``powmod``. At ``exp_bits = 1024``
    and ``w = 8``: 127 multiplications instead of about 1,150, for a table of ``128 * 256`` residues
    (8 MB at a 2048-bit modulus), built once with as many multiplications.

    This needs a *fixed base* and varying exponents. Paillier's ``r ** n`` is the opposite (a fixed
    exponent and a fresh base each time), so a party without the private key cannot use it; the
    key holder can, because it knows a generator of the group ``r ** n`` is uniform in
    (:class:`~verticalfs.crypto.keys.PrivateKey`).

    :meth:`pow` works on a batch: the digits of all exponents come from their bytes with numpy, and
    each window is one vectorised multiplication over the batch (one C-level loop of big-integer
    products), so Python's overhead is per window, not per value.
    """

    def __init__(self, base: Any, modulus: Any, exp_bits: int, window: int = 8) -> None:
        if not 1 <= window <= 12:
            raise ValueError(f"FixedBase: window must be in [1, 12], got {window}")
        self.modulus = mpz(modulus)
        self.exp_bits = int(exp_bits)
        self.window = int(window)
        self.windows = -(-self.exp_bits // self.window)
        m, size = self.modulus, 1 << self.window
        rows = []
        b = mpz(base) % m
        for _ in range(self.windows):
            row = np.empty(size, dtype=object)
            acc = mpz(1)
            for d in range(size):
                row[d] = acc
                acc = acc * b % m
            rows.append(row)
            b = acc  # base ** (2**w) for the next window
        self._rows = rows
        self._mulmod = np.frompyfunc(lambda a, c: a * c % m, 2, 1)

    def digits(self, exps: Sequence[int]) -> np.ndarray:
        """``(len(exps), windows)`` int64: the ``w``-bit digits of each exponent, lowest first."""
        nbytes = -(-self.windows * self.window // 8)
        raw = b"".join(int(e).to_bytes(nbytes, "little") for e in exps)
        bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8).reshape(len(exps), nbytes), axis=1,
                             bitorder="little")[:, : self.windows * self.window]
        weights = (1 << np.arange(self.window, dtype=np.int64))
        out: np.ndarray = bits.reshape(len(exps), self.windows, self.window).astype(np.int64) @ weights
        return out

    def pow(self, exps: Sequence[int]) -> np.ndarray:
        """Object array of ``base ** e mod modulus`` for each ``e`` in ``exps`` (``0 <= e < 2**exp_bits``)."""
        exps = [int(e) for e in exps]
        if not exps:
            return np.empty(0, dtype=object)
        if min(exps) < 0 or max(exps).bit_length() > self.exp_bits:
            raise ValueError(f"FixedBase.pow: exponents must lie in [0, 2**{self.exp_bits})")
        D = self.digits(exps)
        acc = self._rows[0][D[:, 0]]
        for i in range(1, self.windows):
            acc = self._mulmod(acc, self._rows[i][D[:, i]])
        out: np.ndarray = np.asarray(acc, dtype=object)
        return out
