"""Big-integer primitives: gmpy2 when it is importable, Python's builtins otherwise.

gmpy2 (LGPL-3.0-or-later, dynamically linked) makes modular exponentiation about ten times faster
than ``pow``; every result is the same integer either way. Randomness for keys, obfuscators and
masks comes from :mod:`secrets` (the operating system's CSPRNG), never from a seeded generator.
"""

from __future__ import annotations

import secrets
from typing import Any, cast

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
