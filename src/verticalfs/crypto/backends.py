"""Paillier back ends behind one interface.

Every back end works on the same keys (modulus ``n``, generator ``g = n + 1``) and the same
ciphertexts (integers modulo ``n**2``), so a ciphertext made by one back end is decrypted or
summed by any other (tested). What a back end contributes is *where the expensive part runs*:

- key generation (:meth:`Backend.generate`), and
- the obfuscators ``r**n mod n**2`` that make encryption probabilistic
  (:meth:`Backend.random_rn`): encryption is ``(1 + m n) * r**n mod n**2`` and the product with
  ``1 + m n`` is done by the shared layer (:mod:`verticalfs.crypto.array`), so every back end
  accepts every plaintext in ``[0, n)`` and a pool of precomputed obfuscators works with all;
- decryption, where a back end has its own (``phe``); the others use the shared CRT decryption
  (:meth:`~verticalfs.crypto.keys.PrivateKey.decrypt_residues`).

Homomorphic arithmetic (products and powers modulo ``n**2``) is the same integer arithmetic for
every back end and runs in the shared layer (gmpy2 when installed).

Back ends (``backend=`` names):

``python``
    Pure Python (``pow``, or ``gmpy2.powmod`` when gmpy2 is installed); keys of safe primes
    (:func:`~verticalfs.crypto._bigint.random_safe_prime`, :func:`generate_safe_primes`). The key
    holder makes its obfuscators mod ``p**2`` and ``q**2`` and joins them by the CRT: with safe
    primes ``h_p**a`` by fixed-base tables (a generator ``h_p`` of the group ``r**n mod p**2`` is
    uniform in, ``a`` uniform), otherwise ``s_p**p mod p**2`` with ``s_p`` uniform below ``p``;
    both exactly the distribution of ``r**n`` (see
    :meth:`~verticalfs.crypto.keys.PrivateKey.holder_obfuscators`; the rates are in
    ``benchmarks/crypto/RESULTS.md``). Dependency-free fallback.
``phe``
    python-paillier (GPL-3.0; imported only when this back end is asked for): its key generation,
    ``raw_encrypt(0)`` for obfuscators and ``raw_decrypt``. The reference implementation.
``pypaillier``
    The ``paillier`` module of the pypaillier wheel (Rust on GMP; (MIT OR Apache-2.0) AND
    LGPL-3.0): obfuscators are its encryptions of zero, computed on all cores. It refuses moduli
    under 2048 bits. It cannot export or import a secret key, so keys are generated here (random
    primes, as python-paillier does) and decryption is the shared CRT decryption; its public key
    is rebuilt from ``n`` with ``PublicKey.from_n``. Its encryptions of zero are ``hs**a`` with a
    short random exponent ``a`` (the Damgård-Jurik-Nielsen variant), still n-th residues, so the
    ciphertexts are ordinary Paillier ciphertexts under ``g = n + 1``.
``heu``
    SecretFlow HEU's ZPaillier (Apache-2.0; import name ``heu``): its own key generation and
    encryptions of zero (the same short-exponent variant). HEU keeps ciphertexts in Montgomery
    form; they are converted to plain integers with a factor calibrated at key generation and
    checked by decrypting a known value. HEU cannot build a key from ``n`` alone, so it encrypts
    only under keys it generated itself (:meth:`Backend.can_encrypt`).

Randomness (``randomness=`` on keys, a local choice of the encrypting party like the back end):

``full`` (default)
    Paillier's own encryption (Paillier 1999): ``r`` uniform in ``Z_n*`` and the obfuscator
    ``r**n mod n**2``, an exponentiation with a full-size (``bits(n)``-bit) exponent. Semantic
    security rests on the decisional composite residuosity assumption alone. ``python`` and ``phe``.
``short``
    The variant of Damgård, Jurik and Nielsen ("A generalization of Paillier's public-key system
    with applications to electronic voting", Int. J. Inf. Secur. 9, 2010, section 4.2 of the
    journal version; also Damgård-Jurik, PKC 2001): a fixed ``h_s = (-x**2)**n mod n**2`` and
    obfuscators ``h_s**a`` with a *short* random exponent ``a`` of ``ceil(bits(n) / 2)`` bits, so
    about half the work per obfuscator, with no precomputation. The ciphertexts are ordinary
    Paillier ciphertexts (every back end decrypts them), but indistinguishability now also rests
    on the assumption that ``h_s**a`` for short ``a`` looks like a uniform ``n``-th residue, a
    different (stronger) assumption than DCRA. ``pypaillier`` and ``heu`` draw *only* this kind of
    randomness, and that, not native code alone, is much of their speed-up; ``python`` offers it
    too, so the two can be compared on the same arithmetic (``benchmarks/feast/paillier_speed.py``).

Decryption is the same method everywhere: the CRT decryption (mod ``p**2`` and ``q**2``) of
:meth:`~verticalfs.crypto.keys.PrivateKey.decrypt_residues` for ``python``, ``pypaillier`` and
``heu``, and python-paillier's own CRT ``raw_decrypt`` for ``phe``; decryption rates are therefore
close for all back ends (0.78-1.0x python-paillier's own ``decrypt`` in the run of
``benchmarks/feast/paillier_speed.py`` quoted in the README).

``auto`` is the fastest back end available for the key that draws the requested randomness
(:data:`AUTO_ORDER`, from the measured rates of ``benchmarks/feast/paillier_speed.py``): with
``full``, that is ``python`` (``phe`` is GPL and never chosen automatically). HEU's schemas that
draw full randomness (``FPaillier``; ``IPCL``) are not faster than ``python`` at it: with the
primes, ``python``'s fixed-base obfuscators are several times faster than any of HEU's
encryptions, and HEU's decryption is no faster than the CRT decryption with gmpy2 (the same two
exponentiations); ``benchmarks/crypto/paillier_bench.py`` measures them in one run. So the secure paths
keep ``python`` with full randomness, and ``heu`` stays the choice for ``short`` randomness.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from verticalfs.crypto._bigint import HAVE_GMPY2, invert, mpz, powmod, random_below, random_prime, random_safe_prime
from verticalfs.exceptions import CryptoError


class PublicKey(Protocol):
    """What a back end uses of a :class:`~verticalfs.crypto.keys.PublicKey` (the keys import this
    module, so it names them by what they offer)."""

    n: int
    bits: int
    randomness: str
    _n_big: Any
    _n2_big: Any
    _native: dict[str, Any]


class PrivateKey(Protocol):
    """What a back end uses of a :class:`~verticalfs.crypto.keys.PrivateKey`."""

    p: int
    q: int
    _native: dict[str, Any]
    _rn_crt: Any

    @property
    def public_key(self) -> PublicKey: ...

    def holder_obfuscators(self, k: int, *, in_process: bool = False) -> list[Any]: ...

#: fastest first (measured with benchmarks/feast/paillier_speed.py; see the back ends' rates there)
AUTO_ORDER: tuple[str, ...] = ("heu", "pypaillier", "python")
#: the kinds of encryption randomness (see the module docstring)
RANDOMNESS: tuple[str, ...] = ("full", "short")


def check_randomness(randomness: str) -> str:
    """``randomness`` validated (CryptoError naming the choices)."""
    r = str(randomness).lower()
    if r not in RANDOMNESS:
        raise CryptoError(f"Paillier randomness must be one of {RANDOMNESS}, got {randomness!r}: 'full' is "
                          f"r**n with r uniform (Paillier 1999), 'short' is h_s**a with a short exponent "
                          f"(Damgard-Jurik-Nielsen 2010)")
    return r


class Backend:
    """One implementation of key generation, obfuscators and (optionally) decryption."""

    name: ClassVar[str] = ""
    licence: ClassVar[str] = ""
    #: the import that must succeed (None: always available)
    module: ClassVar[str | None] = None
    #: the pip package providing ``module``
    package: ClassVar[str] = ""
    #: shortest modulus the back end accepts
    min_bits: ClassVar[int] = 256
    #: the kinds of randomness the back end can draw (:data:`RANDOMNESS`)
    randomness: ClassVar[tuple[str, ...]] = ("full",)

    def __init__(self) -> None:
        self._mod: Any = None
        self._error: str | None = None

    # ------------------------------------------------------------ availability
    def _import(self) -> bool:
        """Try the back end's import once; True if it succeeded (never raises)."""
        if self.module is None:
            return True
        if self._mod is None and self._error is None:
            try:
                self._mod = importlib.import_module(self.module)
            except Exception as exc:  # ImportError, or a broken binary wheel
                self._error = f"{type(exc).__name__}: {exc}"
        return self._mod is not None

    def load(self) -> Any:
        """Import the back end's module (once); CryptoError if it is not installed."""
        if not self._import():
            # the names are found with _import, which never raises: building this message must not
            # call load() again (it recursed without end when two optional back ends were missing)
            names = [name for name, b in BACKENDS.items() if b._import()]
            raise CryptoError(f"Paillier back end {self.name!r} is not available ({self._error}); "
                              f"install it with `pip install {self.package}` or choose another back end "
                              f"({', '.join(names) or 'python'})")
        return self._mod

    def available(self) -> bool:
        return self._import()

    def supports_bits(self, bits: int) -> bool:
        return bits >= self.min_bits

    def supports_randomness(self, randomness: str) -> bool:
        return randomness in self.randomness

    def can_encrypt(self, pub: PublicKey) -> bool:
        """True if this back end can make obfuscators for ``pub``."""
        return self.available() and self.supports_bits(pub.bits) and self.supports_randomness(pub.randomness)

    # -------------------------------------------------------------- operations
    def generate(self, bits: int) -> tuple[int, int, Any]:
        """``(p, q, native)``: primes with ``p * q`` of exactly ``bits`` bits and the back end's
        own key objects (or None)."""
        p = random_prime(bits // 2)
        while True:
            q = random_prime(bits - bits // 2)
            if q != p:
                return p, q, None

    def random_rn(self, pub: PublicKey, k: int, priv: PrivateKey | None = None) -> list[int]:
        """``k`` fresh obfuscators (``n``-th residues mod ``n**2``) of the kind ``pub.randomness``
        (``priv``, when given, may speed this up)."""
        raise NotImplementedError

    def decrypt(self, priv: PrivateKey, cts: Sequence[int]) -> list[int] | None:
        """Plaintexts in ``[0, n)``; None = use the shared CRT decryption."""
        return None


def generate_safe_primes(bits: int) -> tuple[int, int, None]:
    """``(p, q, None)``: distinct safe primes with ``p * q`` of exactly ``bits`` bits."""
    p = random_safe_prime(bits // 2)
    while True:
        q = random_safe_prime(bits - bits // 2)
        if q != p:
            return p, q, None


class PythonBackend(Backend):
    name = "python"
    licence = "built in (uses gmpy2, LGPL-3.0-or-later, when installed)"
    randomness = ("full", "short")

    @staticmethod
    def _short_base(pub: PublicKey) -> Any:
        """``h_s = (-x**2)**n mod n**2`` for a random ``x`` (DJN 2010), drawn once per key object."""
        hs = pub._native.get("python-short")
        if hs is None:
            n = pub.n
            while True:
                x = random_below(n)
                if x > 1 and math.gcd(x, n) == 1:
                    break
            h = mpz((-x * x) % n)
            hs = pub._native["python-short"] = powmod(h, pub._n_big, pub._n2_big)
        return hs

    def random_rn(self, pub: PublicKey, k: int, priv: PrivateKey | None = None) -> list[int]:
        n = pub.n
        if pub.randomness == "short":
            hs, N2 = self._short_base(pub), pub._n2_big
            top = 1 << ((pub.bits + 1) // 2)  # exponents of ceil(bits / 2) bits (DJN 2010)
            if priv is not None:  # the key holder: mod p^2 and q^2, then the CRT
                p2, q2, q2inv = priv._rn_crt[:3]
                hp, hq = hs % p2, hs % q2
                out: list[int] = []
                for _ in range(k):
                    a = mpz(random_below(top))
                    u, v = powmod(hp, a, p2), powmod(hq, a, q2)
                    out.append(v + q2 * ((u - v) * q2inv % p2))
                return out
            return [powmod(hs, mpz(random_below(top)), N2) for _ in range(k)]
        if priv is not None:  # the key holder: mod p^2 and q^2 (fixed-base tables or s^p), then the CRT
            return priv.holder_obfuscators(k)  # see PrivateKey.holder_obfuscators
        N, N2 = pub._n_big, pub._n2_big
        return [powmod(mpz(random_below(n)), N, N2) for _ in range(k)]


class PheBackend(Backend):
    name = "phe"
    licence = "GPL-3.0 (python-paillier); imported only when asked for"
    module = "phe"
    package = "phe"

    def _phe_pub(self, pub: PublicKey) -> Any:
        nat = pub._native.get(self.name)
        if nat is None:
            nat = pub._native[self.name] = self.load().PaillierPublicKey(pub.n)
        return nat

    def generate(self, bits: int) -> tuple[int, int, Any]:
        phe = self.load()
        pk, sk = phe.generate_paillier_keypair(n_length=bits)
        return int(sk.p), int(sk.q), pk

    def random_rn(self, pub: PublicKey, k: int, priv: PrivateKey | None = None) -> list[int]:
        ppk = self._phe_pub(pub)
        return [mpz(ppk.raw_encrypt(0)) for _ in range(k)]  # (1 + 0 n) r^n = r^n

    def decrypt(self, priv: PrivateKey, cts: Sequence[int]) -> list[int]:
        nat = priv._native.get(self.name)
        if nat is None:
            nat = priv._native[self.name] = self.load().PaillierPrivateKey(self._phe_pub(priv.public_key),
                                                                           priv.p, priv.q)
        return [int(nat.raw_decrypt(int(c))) for c in cts]


class PyPaillierBackend(Backend):
    name = "pypaillier"
    licence = "(MIT OR Apache-2.0) AND LGPL-3.0-or-later"
    module = "paillier"
    package = "pypaillier"
    min_bits = 2048  # the library refuses shorter moduli
    randomness = ("short",)  # its encryptions of zero are h_s**a with a short a (DJN)

    def _pk(self, pub: PublicKey) -> Any:
        nat = pub._native.get(self.name)
        if nat is None:
            mod = self.load()
            try:
                nat = mod.PublicKey.from_n(pub.n.to_bytes((pub.bits + 7) // 8, "big"))
            except ValueError as exc:
                raise CryptoError(f"pypaillier refused the public key: {exc}") from None
            pub._native[self.name] = nat
        return nat

    def random_rn(self, pub: PublicKey, k: int, priv: PrivateKey | None = None) -> list[int]:
        if k == 0:
            return []
        blobs = self.load().encrypt_integers(self._pk(pub), [0] * k)
        # blob = one scale byte (0 here) + the ciphertext, big-endian, minimal length
        return [mpz(int.from_bytes(b[1:], "big")) for b in blobs]


class HeuBackend(Backend):
    name = "heu"
    licence = "Apache-2.0 (SecretFlow HEU, package sf-heu)"
    module = "heu"
    package = "sf-heu"
    randomness = ("short",)  # ZPaillier: h_s**a with a short a (DJN)

    def can_encrypt(self, pub: PublicKey) -> bool:
        return self.name in pub._native and self.available() and self.supports_randomness(pub.randomness)

    def generate(self, bits: int) -> tuple[int, int, Any]:
        heu = self.load()
        hphe = heu.phe
        kit = hphe.setup(hphe.SchemaType.ZPaillier, bits)

        def hexfield(text: str, key: str) -> int:
            m = re.search(rf"\b{key}=([0-9A-Fa-f]+)", text)
            if m is None:
                raise CryptoError(f"heu: cannot read {key!r} from its key description; this heu version "
                                  f"is not supported, use backend 'pypaillier' or 'python'")
            return int(m.group(1), 16)

        n = hexfield(str(kit.public_key()), "n")
        sk = str(kit.secret_key())
        p, q = hexfield(sk, "p"), hexfield(sk, "q")
        if p * q != n:
            raise CryptoError("heu: the primes read from its secret key do not multiply to n; "
                              "use backend 'pypaillier' or 'python'")
        n2 = n * n
        enc, ev = kit.encryptor(), kit.evaluator()
        c1, c2 = enc.encrypt_raw(1), enc.encrypt_raw(2)
        a1, a2, a3 = (self._raw(c) for c in (c1, c2, ev.add(c1, c2)))
        # HEU multiplies Montgomery forms: mont(c1 + c2) = a1 a2 R^-1, so R = a1 a2 / a3
        r_inv = mpz(a3) * invert(mpz(a1) * a2 % n2, mpz(n2)) % n2
        native = {"kit": kit, "encryptor": enc, "r_inv": mpz(r_inv), "n2": mpz(n2)}
        # check: the converted ciphertext of 12345 decrypts to 12345 with the standard formula
        c = mpz(self._raw(enc.encrypt_raw(12345))) * native["r_inv"] % native["n2"]
        lam = (p - 1) * (q - 1)
        m = (int(powmod(c, lam, n2)) - 1) // n * int(invert(lam, n)) % n
        if m != 12345:
            raise CryptoError("heu: its ciphertexts could not be converted to plain Paillier integers; "
                              "use backend 'pypaillier' or 'python'")
        return p, q, native

    @staticmethod
    def _raw(c: Any) -> int:
        """The integer inside a serialised HEU ciphertext (msgpack: [bin/str little-endian])."""
        b = c.serialize()
        if b[0] != 0x91:
            return int(str(c))
        t = b[1]
        if t in (0xC4, 0xD9):
            ln, off = b[2], 3
        elif t in (0xC5, 0xDA):
            ln, off = int.from_bytes(b[2:4], "big"), 4
        elif t in (0xC6, 0xDB):
            ln, off = int.from_bytes(b[2:6], "big"), 6
        else:
            return int(str(c))
        return int.from_bytes(b[off : off + ln], "little")

    def random_rn(self, pub: PublicKey, k: int, priv: PrivateKey | None = None) -> list[int]:
        nat = pub._native.get(self.name)
        if nat is None:
            raise CryptoError("heu can only encrypt under keys it generated; for a key received as bytes "
                              "use backend 'pypaillier' or 'python'")
        enc, r_inv, n2 = nat["encryptor"], nat["r_inv"], nat["n2"]
        return [mpz(self._raw(enc.encrypt_raw(0))) * r_inv % n2 for _ in range(k)]


BACKENDS: dict[str, Backend] = {
    b.name: b for b in (PythonBackend(), PheBackend(), PyPaillierBackend(), HeuBackend())
}


def available_backends() -> list[str]:
    """Names of the back ends that import here (``python`` always)."""
    return [name for name, b in BACKENDS.items() if b.available()]


def get_backend(name: str | Backend) -> Backend:
    """The back end called ``name`` (CryptoError naming the choices if unknown or not installed)."""
    if isinstance(name, Backend):
        return name
    b = BACKENDS.get(str(name).lower())
    if b is None:
        raise CryptoError(f"unknown Paillier back end {name!r}; choose one of 'auto', "
                          f"{', '.join(map(repr, BACKENDS))}")
    b.load()
    return b


def resolve_backend(name: str | Backend, bits: int, pub: PublicKey | None = None,
                    randomness: str = "full") -> Backend:
    """``name`` as a back end; ``auto`` = the first of :data:`AUTO_ORDER` that can serve a key of
    ``bits`` bits with ``randomness`` (and, given ``pub``, can encrypt under that key)."""
    randomness = check_randomness(randomness)
    if isinstance(name, Backend):
        b = name
    elif str(name).lower() != "auto":
        b = get_backend(name)
        if not b.supports_bits(bits):
            raise CryptoError(f"Paillier back end {b.name!r} refuses {bits}-bit keys (minimum {b.min_bits}); "
                              f"use a longer key or backend 'python'")
    else:
        for cand in AUTO_ORDER:
            b = BACKENDS[cand]
            if not b.available() or not b.supports_bits(bits) or not b.supports_randomness(randomness):
                continue
            if pub is not None and not b.can_encrypt(pub):
                continue
            return b
        return BACKENDS["python"]
    if not b.supports_randomness(randomness):
        other = "short" if randomness == "full" else "full"
        raise CryptoError(f"Paillier back end {b.name!r} draws only {other!r} randomness, not {randomness!r}; "
                          f"pass randomness={other!r} to use it, or backend 'python' (both kinds)")
    return b


def backend_info() -> dict[str, dict[str, Any]]:
    """Name -> availability, licence, minimum key size and randomness kinds (for reports)."""
    return {name: {"available": b.available(), "licence": b.licence, "min_bits": b.min_bits,
                   "randomness": list(b.randomness), "gmpy2": HAVE_GMPY2 if name == "python" else None} for name, b in BACKENDS.items()}
