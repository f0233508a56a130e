"""Paillier keys: generation (2048 bits unless explicitly insecure), serialisation, CRT decryption
and the pool of precomputed obfuscators.

A :class:`PublicKey` is the modulus ``n`` (generator ``g = n + 1``) plus the local choice of back
end; on the wire it is ``n`` big-endian (:meth:`PublicKey.to_bytes`). A :class:`PrivateKey` holds
the primes ``p, q`` and decrypts with the Chinese remainder theorem.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

from verticalfs.crypto import parallel
from verticalfs.crypto._bigint import invert, mpz, powmod
from verticalfs.crypto.backends import Backend, check_randomness, resolve_backend
from verticalfs.crypto.encoding import from_residues
from verticalfs.exceptions import CryptoError

#: shortest modulus accepted without ``insecure=True`` (NIST SP 800-57: 112-bit security)
MIN_SECURE_BITS = 2048
#: shortest modulus accepted at all (tests use 512 or 1024 bits with ``insecure=True``)
MIN_BITS = 256


def check_bits(bits: int, insecure: bool, what: str = "key") -> int:
    """Validate a key length: CryptoError below 2048 bits unless ``insecure``."""
    bits = int(bits)
    if bits < MIN_BITS:
        raise CryptoError(f"{what}: {bits}-bit Paillier keys are not supported (minimum {MIN_BITS})")
    if bits < MIN_SECURE_BITS and not insecure:
        raise CryptoError(
            f"{what}: a {bits}-bit Paillier modulus is insecure (it can be factored); use at least "
            f"{MIN_SECURE_BITS} bits, or pass insecure=True to allow short keys in tests only")
    return bits


class PublicKey:
    """A Paillier public key: modulus ``n``, generator ``g = n + 1``.

    Parameters
    ----------
    n : int
        The modulus.
    backend : str or Backend
        Back end for encryption under this key (``auto``, ``python``, ``phe``, ``pypaillier``,
        ``heu``); a local choice, not part of the key.
    randomness : str
        ``full`` (default: ``r**n`` with ``r`` uniform, Paillier 1999) or ``short`` (``h_s**a``
        with a ``ceil(bits / 2)``-bit exponent, Damgård-Jurik-Nielsen 2010: faster, but resting on
        an additional assumption); see :mod:`verticalfs.crypto.backends`. A local choice of the
        encrypting party; the ciphertexts decrypt the same way.
    insecure : bool
        Accept a modulus shorter than 2048 bits (tests only).
    """

    def __init__(self, n: int, *, backend: str | Backend = "auto", randomness: str = "full",
                 insecure: bool = False, _native: dict[str, Any] | None = None) -> None:
        n = int(n)
        if n <= 0 or n % 2 == 0:
            raise CryptoError("Paillier public key: the modulus n must be a positive odd integer")
        self.n = n
        self.bits = n.bit_length()
        check_bits(self.bits, insecure, "Paillier public key")
        self.insecure = bool(insecure)
        self.nsquare = n * n
        #: largest |mantissa| that encodes (python-paillier's n // 3)
        self.max_int = n // 3
        #: bytes of one serialised ciphertext: ceil(bits(n**2) / 8)
        self.ciphertext_bytes = (self.nsquare.bit_length() + 7) // 8
        self._n_big = mpz(n)
        self._n2_big = mpz(self.nsquare)
        self._native: dict[str, Any] = dict(_native or {})
        self._pool: list[int] = []
        self._mulmod: Any = None  # crypto.array's vectorised operations, made at first use
        self.randomness = check_randomness(randomness)
        self.backend = resolve_backend(backend, self.bits, self, self.randomness)

    @property
    def g(self) -> int:
        return self.n + 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and other.n == self.n

    def __hash__(self) -> int:
        return hash(self.n)

    def __repr__(self) -> str:
        return f"PublicKey({self.bits} bits, backend={self.backend.name!r}, randomness={self.randomness!r})"

    def using(self, backend: str | Backend, randomness: str | None = None) -> PublicKey:
        """The same key with another back end (and, given, another randomness; the obfuscator
        pool is shared only when the randomness stays the same)."""
        other = copy.copy(self)
        if randomness is not None and check_randomness(randomness) != self.randomness:
            other.randomness = check_randomness(randomness)
            other._pool = []
        other.backend = resolve_backend(backend, self.bits, other, other.randomness)
        if not other.backend.can_encrypt(other):
            raise CryptoError(f"back end {other.backend.name!r} cannot encrypt under this key "
                              f"({self.bits} bits, randomness {other.randomness!r}); choose another back end")
        return other

    # ------------------------------------------------------------ serialisation
    def to_bytes(self) -> bytes:
        """``n`` big-endian, ``ceil(bits / 8)`` bytes."""
        from verticalfs.codecs.integers import pack_uints

        return pack_uints([self.n], (self.bits + 7) // 8)

    @classmethod
    def from_bytes(cls, data: bytes, *, backend: str | Backend = "auto", randomness: str = "full",
                   insecure: bool = False) -> PublicKey:
        """Inverse of :meth:`to_bytes` (validates the length unless ``insecure``)."""
        if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) == 0:
            raise CryptoError("Paillier public key: expected the modulus as non-empty bytes")
        return cls(int.from_bytes(bytes(data), "big"), backend=backend, randomness=randomness, insecure=insecure)

    # ----------------------------------------------------------- obfuscator pool
    def precompute(self, k: int, private_key: PrivateKey | None = None) -> None:
        """Precompute ``k`` obfuscators ``r**n mod n**2``; later encryptions consume them first.

        With ``private_key`` (the key holder precomputing for its own encryptions) the ``python``
        back end uses the CRT.
        """
        if k < 0:
            raise CryptoError(f"precompute: k must be >= 0, got {k}")
        self._pool.extend(self.backend.random_rn(self, int(k), private_key))

    @property
    def pool_size(self) -> int:
        """Obfuscators left in the pool."""
        return len(self._pool)

    def obfuscators(self, k: int, private_key: PrivateKey | None = None) -> list[int]:
        """``k`` obfuscators: from the pool first, fresh ones for the rest."""
        take = min(k, len(self._pool))
        out = self._pool[:take]
        del self._pool[:take]
        if k > take:
            out += self.backend.random_rn(self, k - take, private_key)
        return out


class PrivateKey:
    """A Paillier private key (``p``, ``q``) for ``public_key``; decrypts with the CRT."""

    def __init__(self, public_key: PublicKey, p: int, q: int, *, _native: dict[str, Any] | None = None) -> None:
        p, q = int(p), int(q)
        if p * q != public_key.n or p == q:
            raise CryptoError("Paillier private key: p * q must equal the public modulus n with p != q")
        if p > q:
            p, q = q, p
        self.public_key = public_key
        self.p, self.q = p, q
        self._native: dict[str, Any] = dict(_native or {})
        P, Q = mpz(p), mpz(q)
        self._p2, self._q2 = P * P, Q * Q
        g = mpz(public_key.n + 1)
        self._hp = invert((powmod(g, P - 1, self._p2) - 1) // P, P)
        self._hq = invert((powmod(g, Q - 1, self._q2) - 1) // Q, Q)
        self._P, self._Q = P, Q
        self._pinv_q = invert(P, Q)
        n = mpz(public_key.n)
        # Obfuscators r^n mod n^2 by the CRT. r^n mod p^2 = (s_p)^p mod p^2 with s_p = r^q mod p
        # (x^p mod p^2 depends on x mod p only), and r -> r^q is a bijection of Z_p* when
        # gcd(q, p - 1) = 1; so with s_p, s_q uniform in Z_p*, Z_q* the obfuscator s_p^p (mod p^2)
        # and s_q^q (mod q^2), joined by the CRT, has exactly the distribution of r^n for r uniform
        # in Z_n*, with half-length exponents (about twice as fast). Keys with gcd(n, phi(n)) != 1
        # (never ours: equal-length primes) keep r^n with the exponents reduced mod phi(p^2), phi(q^2).
        if math.gcd(public_key.n, (p - 1) * (q - 1)) == 1:
            self._rn_crt = (self._p2, self._q2, invert(self._q2, self._p2), (p, P), (q, Q))
        else:  # pragma: no cover - only for foreign keys with gcd(n, phi(n)) > 1
            self._rn_crt = (self._p2, self._q2, invert(self._q2, self._p2), (public_key.n, n % (P * (P - 1))),
                            (public_key.n, n % (Q * (Q - 1))))

    def __repr__(self) -> str:
        return f"PrivateKey({self.public_key.bits} bits)"

    def precompute(self, k: int) -> None:
        """:meth:`PublicKey.precompute` with this key's CRT speed-up."""
        self.public_key.precompute(k, self)

    def decrypt_residues(self, cts: Sequence[int]) -> list[int]:
        """Plaintexts in ``[0, n)`` of ciphertext integers ``cts``."""
        native = self.public_key.backend.decrypt(self, cts)
        if native is not None:
            return native
        return parallel.decrypt((self._P, self._Q, self._p2, self._q2, self._hp, self._hq, self._pinv_q), cts)

    def decrypt_mantissas(self, cts: Sequence[int]) -> list[int]:
        """Signed mantissas (see :mod:`verticalfs.crypto.encoding`); overflow -> CryptoError."""
        pub = self.public_key
        return from_residues(self.decrypt_residues(cts), pub.n, pub.max_int)


def generate_keypair(bits: int = MIN_SECURE_BITS, *, backend: str | Backend = "auto", randomness: str = "full",
                     insecure: bool = False) -> tuple[PublicKey, PrivateKey]:
    """A fresh Paillier key pair.

    Parameters
    ----------
    bits : int
        Length of the modulus ``n`` (default 2048; shorter only with ``insecure=True``).
    backend : str
        ``auto`` (the fastest available back end that supports ``bits`` and ``randomness``),
        ``python``, ``phe``, ``pypaillier`` or ``heu``.
    randomness : str
        ``full`` (default, ``r**n``) or ``short`` (``h_s**a``, Damgård-Jurik-Nielsen); see
        :mod:`verticalfs.crypto.backends`. ``pypaillier`` and ``heu`` draw only ``short``.
    insecure : bool
        Allow ``bits < 2048`` (tests only).
    """
    bits = check_bits(bits, insecure, "generate_keypair")
    b = resolve_backend(backend, bits, None, randomness)
    p, q, native = b.generate(bits)
    natives = {b.name: native} if native is not None else None
    pub = PublicKey(p * q, backend=b, randomness=randomness, insecure=insecure, _native=natives)
    return pub, PrivateKey(pub, p, q)
