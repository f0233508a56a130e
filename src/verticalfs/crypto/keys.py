"""Paillier keys: generation (2048 bits unless explicitly insecure), serialisation, CRT decryption
and the pools of precomputed obfuscators.

A :class:`PublicKey` is the modulus ``n`` (generator ``g = n + 1``, so ``g**m = 1 + m n mod n**2``
costs one multiplication) plus the local choice of back end; on the wire it is ``n`` big-endian
(:meth:`PublicKey.to_bytes`). A :class:`PrivateKey` holds the primes ``p, q`` and decrypts with the
Chinese remainder theorem.

Where the time goes, per ciphertext, at 2048 bits (``benchmarks/crypto/paillier_bench.py`` measures it):

- **decryption** (key holder): ``c**(p-1) mod p**2`` and ``c**(q-1) mod q**2`` (Paillier 1999,
  section 7, with ``h_p``, ``h_q`` precomputed): two exponentiations with 1024-bit exponents modulo
  2048-bit moduli. The base changes with every ciphertext and the exponent is fixed, so no table
  helps; this is the floor of decryption (gmpy2's ``powmod``, GMP's sliding window).
- **encryption by the key holder**: the obfuscator ``r**n mod n**2`` is drawn mod ``p**2`` and
  ``q**2`` and joined by the CRT. With safe primes (:func:`generate_keypair`'s default for the
  ``python`` back end) the key holder knows a generator ``h_p`` of the cyclic group of order
  ``p - 1`` in which ``r**n mod p**2`` is uniform, so it draws ``h_p**a`` with ``a`` uniform in
  ``[0, p - 1)``: the *same* distribution as ``r**n`` (full randomness, no extra assumption), with a
  fixed base, hence a fixed-base table (:class:`~verticalfs.crypto._bigint.FixedBase`): 127
  multiplications mod ``p**2`` instead of an exponentiation. For other keys, ``s_p**p mod p**2``
  with ``s_p`` uniform (half-length exponent, exact too; see :class:`PrivateKey`).
- **encryption without the private key, and re-randomisation**: ``r**n mod n**2`` with a fresh
  ``r``: a 2048-bit exponent modulo a 4096-bit modulus. The exponent is fixed and the base varies,
  so no fixed-base table applies, and reducing the exponent would need ``phi(n)``. That cost can
  only be moved: :meth:`PublicKey.start_pool` fills a bounded pool in a background thread (with
  gmpy2 releasing the GIL), which :meth:`EncryptedArray.encrypt
  <verticalfs.crypto.EncryptedArray.encrypt>` and :meth:`~verticalfs.crypto.EncryptedArray.rerandomize`
  consume first.
"""

from __future__ import annotations

import collections
import copy
import math
import secrets
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from verticalfs.crypto import parallel
from verticalfs.crypto._bigint import FixedBase, invert, is_safe_prime, mpz, powmod, released_gil
from verticalfs.crypto.backends import Backend, check_randomness, generate_safe_primes, resolve_backend
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
        self._pool_lock = threading.Lock()
        self._background: ObfuscatorPool | None = None
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
            other._pool_lock = threading.Lock()
            other._background = None
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
        fresh = self.backend.random_rn(self, int(k), private_key)
        with self._pool_lock:
            self._pool.extend(fresh)

    @property
    def pool_size(self) -> int:
        """Obfuscators left in the pools (:meth:`precompute`'s and the background one's)."""
        bg = self._background
        return len(self._pool) + (bg.size if bg is not None else 0)

    def obfuscators(self, k: int, private_key: PrivateKey | None = None) -> list[int]:
        """``k`` obfuscators: from :meth:`precompute`'s pool first, then from the background pool
        (:meth:`start_pool`), fresh ones for the rest. Each value is handed out once."""
        k = int(k)
        with self._pool_lock:
            take = min(k, len(self._pool))
            out = self._pool[:take]
            del self._pool[:take]
        bg = self._background
        if k > len(out) and bg is not None:
            out += bg.take(k - len(out))
        if k > len(out):
            out += self.backend.random_rn(self, k - len(out), private_key)
        return out

    def start_pool(self, size: int = 1024, *, private_key: PrivateKey | None = None,
                   chunk: int = 4, refill: bool = True) -> ObfuscatorPool:
        """Start (or return the running) background pool of at most ``size`` obfuscators.

        A daemon thread draws obfuscators with this key's back end (the key holder's CRT and
        fixed-base tables when ``private_key`` is given) ``chunk`` at a time whenever the pool is
        below ``size``, and waits when it is full. With gmpy2 the thread releases the GIL inside
        each exponentiation, so it fills the pool while this process waits on the network or
        computes elsewhere; on a busy core it competes for the CPU, so start it where the party
        idles (before a round, while a message is in flight). :meth:`obfuscators` (hence
        encryption and :meth:`~verticalfs.crypto.EncryptedArray.rerandomize`) takes from it first.
        Stop it with :meth:`stop_pool` (a stopped pool's values are discarded); it also stops when
        this key object is collected (the thread holds only weak references to the keys).

        With ``refill=False`` the thread fills the pool once and ends: the values are made in the idle
        time before a round and the round then runs without a thread competing for the CPU (what
        ``benchmarks/fedsdg_fs/secure_speed.py`` measures). Such a pool is returned by later calls
        while it still holds values; an empty one is replaced.
        """
        with self._pool_lock:
            bg = self._background
            if bg is not None and (bg.running or (not bg.refill and bg.size and bg.error is None)):
                return bg
            bg = self._background = ObfuscatorPool(self, size, private_key=private_key, chunk=chunk,
                                                   refill=refill)
        bg.start()
        return bg

    def stop_pool(self) -> None:
        """Stop the background pool (if any) and discard what it holds."""
        with self._pool_lock:
            bg, self._background = self._background, None
        if bg is not None:
            bg.stop()


class ObfuscatorPool:
    """A bounded pool of obfuscators ``r**n mod n**2`` filled by a background thread.

    Values come from the back end's draws (fresh randomness from the operating system's CSPRNG,
    :mod:`secrets`), enter a deque once and leave it once, under a lock: no value is handed out
    twice, to one thread or to several (tested). ``drawn`` counts the values made, ``taken`` those
    handed out.

    Parameters
    ----------
    public_key : PublicKey
        The key (its back end and randomness make the values).
    size : int
        At most this many values are held; the thread sleeps while the pool is full.
    private_key : PrivateKey, optional
        The key holder's own pool (CRT and fixed-base tables: much cheaper values).
    chunk : int
        Values drawn per step of the thread (the lock is not held while drawing).
    refill : bool
        True: the thread tops the pool up whenever values are taken, until stopped. False: it fills
        the pool once to ``size`` and ends (values are then only taken).
    """

    def __init__(self, public_key: PublicKey, size: int, *, private_key: PrivateKey | None = None,
                 chunk: int = 4, refill: bool = True) -> None:
        if int(size) < 1 or int(chunk) < 1:
            raise CryptoError(f"ObfuscatorPool: size and chunk must be >= 1, got size={size}, chunk={chunk}")
        # weak references: a running thread must not keep the keys alive; when the key that
        # started the pool is collected, the thread stops (weakref.finalize below)
        self._pub = weakref.ref(public_key)
        self._priv = weakref.ref(private_key) if private_key is not None else None
        self.capacity = int(size)
        self.chunk = int(chunk)
        self.refill = bool(refill)
        self._items: collections.deque[Any] = collections.deque()
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.drawn = 0
        self.taken = 0
        self.error: BaseException | None = None
        # set when the key is collected; the finalizer holds this list, the condition and the deque,
        # not the pool (which would keep the pool alive)
        self._flag: list[bool] = [False]
        weakref.finalize(public_key, ObfuscatorPool._halt, self._cond, self._items, self._flag)

    @staticmethod
    def _halt(cond: threading.Condition, items: collections.deque[Any], flag: list[bool]) -> None:
        with cond:
            flag[0] = True
            items.clear()
            cond.notify_all()

    @property
    def public_key(self) -> PublicKey | None:
        """The key (None once it has been collected)."""
        return self._pub()

    @property
    def private_key(self) -> PrivateKey | None:
        return self._priv() if self._priv is not None else None

    @property
    def size(self) -> int:
        """Values ready now."""
        return len(self._items)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not (self._stop or self._flag[0])

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._fill, name="verticalfs-paillier-pool", daemon=True)
            self._thread.start()

    def _fill(self) -> None:
        flag = self._flag
        try:
            with released_gil():
                while True:
                    with self._cond:
                        if not self.refill and self.drawn >= self.capacity:
                            return  # filled once: done
                        while not (self._stop or flag[0]) and len(self._items) >= self.capacity:
                            self._cond.wait()
                        if self._stop or flag[0]:
                            return
                        k = min(self.chunk, self.capacity - (len(self._items) if self.refill else self.drawn))
                    pub, priv = self.public_key, self.private_key
                    if pub is None or (self._priv is not None and priv is None):
                        return
                    if priv is not None and pub.randomness == "full" and pub.backend.name == "python":
                        fresh = priv.holder_obfuscators(k, in_process=True)
                    else:
                        fresh = pub.backend.random_rn(pub, k, priv)
                    del pub, priv  # no strong reference while waiting
                    with self._cond:
                        if self._stop or flag[0]:
                            return
                        self._items.extend(fresh)
                        self.drawn += len(fresh)
                        self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - kept for the owner to see; takers fall back to fresh draws
            self.error = exc
            with self._cond:
                self._cond.notify_all()

    def take(self, k: int) -> list[Any]:
        """Up to ``k`` values (fewer if the pool holds fewer; never waits)."""
        with self._cond:
            m = min(int(k), len(self._items))
            out = [self._items.popleft() for _ in range(m)]
            self.taken += m
            self._cond.notify_all()
        return out

    def wait_full(self, timeout: float | None = None) -> bool:
        """Block until the pool holds ``size`` values (or ``timeout`` seconds); True if full."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._items) >= self.capacity or self._stop or self._flag[0]
                                       or (not self.refill and self.drawn >= self.capacity) or self.error is not None,
                                       timeout) and len(self._items) >= self.capacity

    def stop(self) -> None:
        """Stop the thread and discard the values."""
        with self._cond:
            self._stop = True
            self._items.clear()
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


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

        self._fixed_lock = threading.Lock()
        self._fixed: tuple[Any, ...] | None = None
        self._fixed_checked = False

    def __repr__(self) -> str:
        return f"PrivateKey({self.public_key.bits} bits)"

    # ----------------------------------------------- the key holder's obfuscators
    @staticmethod
    def _order_p_minus_1_generator(p: int) -> Any:
        """``h = g**p mod p**2`` for the least generator ``g`` of ``Z_p*`` (``p`` a safe prime): ``h``
        generates the cyclic subgroup of order ``p - 1`` of ``Z_{p**2}*``, which holds ``r**n mod
        p**2`` for every unit ``r``."""
        half = (p - 1) // 2  # prime: g generates Z_p* iff g**2 != 1 and g**half != 1 (mod p)
        g = 2
        while g * g % p == 1 or pow(g, half, p) == 1:
            g += 1
        P = mpz(p)
        return powmod(mpz(g), P, P * P)

    def fixed_base_tables(self) -> bool:
        """Build (once) the fixed-base tables of the key holder's obfuscators; False if this key's
        primes are not both safe primes (then obfuscators use ``s**p`` exponentiations)."""
        if self._fixed_checked:
            return self._fixed is not None
        with self._fixed_lock:
            if not self._fixed_checked:
                p, q = self.p, self.q
                if is_safe_prime(p) and is_safe_prime(q):
                    hp, hq = self._order_p_minus_1_generator(p), self._order_p_minus_1_generator(q)
                    tp = FixedBase(hp, self._p2, (p - 1).bit_length())
                    tq = FixedBase(hq, self._q2, (q - 1).bit_length())
                    p2, q2, q2inv = self._p2, self._q2, invert(self._q2, self._p2)
                    join = np.frompyfunc(lambda u, v: v + q2 * ((u - v) * q2inv % p2), 2, 1)
                    self._fixed = (tp, tq, join)
                self._fixed_checked = True
        return self._fixed is not None

    def holder_obfuscators(self, k: int, *, in_process: bool = False) -> list[Any]:
        """``k`` fresh obfuscators with exactly the distribution of ``r**n mod n**2``, ``r`` uniform
        in ``Z_n*`` (full randomness), made with the primes.

        With safe primes: ``h_p**a mod p**2`` and ``h_q**b mod q**2`` with ``a``, ``b`` uniform in
        ``[0, p - 1)``, ``[0, q - 1)`` (:mod:`secrets`), by fixed-base tables, joined by the CRT.
        ``r**n mod p**2`` is uniform on the cyclic subgroup of order ``p - 1`` (``r -> r**n`` maps
        ``Z_p*`` onto it bijectively when ``gcd(q, p - 1) = 1``, true for distinct safe primes) and
        ``h_p`` generates it, so ``h_p**a`` is uniform on it too; ``p`` and ``q`` independently, as
        ``r mod p`` and ``r mod q`` are. Otherwise ``s_p**p mod p**2`` and ``s_q**q mod q**2`` with
        uniform ``s`` (see ``__init__``), on the worker processes of :func:`~verticalfs.crypto.set_workers`
        unless ``in_process``.
        """
        k = int(k)
        if k <= 0:
            return []
        if self.fixed_base_tables():
            tp, tq, join = self._fixed  # type: ignore[misc]
            pm1, qm1 = self.p - 1, self.q - 1
            u = tp.pow([secrets.randbelow(pm1) for _ in range(k)])
            v = tq.pow([secrets.randbelow(qm1) for _ in range(k)])
            out: list[Any] = join(u, v).tolist()
            return out
        if in_process:
            return parallel.crt_obfuscators(self._rn_crt, k)
        return parallel.obfuscators(self._rn_crt, k)

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
                     insecure: bool = False, safe_primes: bool | None = None) -> tuple[PublicKey, PrivateKey]:
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
    safe_primes : bool, optional
        Draw ``p`` and ``q`` as safe primes (``p = 2 p' + 1``), so that the key holder encrypts
        with fixed-base tables at full randomness (:meth:`PrivateKey.holder_obfuscators`; several
        times faster). Default: True for the ``python`` back end (about a second more to generate a
        2048-bit key with gmpy2); the other back ends generate their own primes. Safe primes are
        not weaker for Paillier: ``n`` is as hard to factor, and ``p - 1`` has a large prime
        factor (no Pollard ``p - 1`` shortcut).
    """
    bits = check_bits(bits, insecure, "generate_keypair")
    b = resolve_backend(backend, bits, None, randomness)
    if safe_primes is None:
        safe_primes = b.name == "python"
    if safe_primes and b.name != "python":
        raise CryptoError(f"generate_keypair: safe_primes=True needs backend 'python' (back end {b.name!r} "
                          f"generates its own primes)")
    if safe_primes:
        p, q, native = generate_safe_primes(bits)
    else:
        p, q, native = b.generate(bits)
    natives = {b.name: native} if native is not None else None
    pub = PublicKey(p * q, backend=b, randomness=randomness, insecure=insecure, _native=natives)
    return pub, PrivateKey(pub, p, q)
