"""The key holder's Paillier exponentiations on several cores.

Decryption and the key holder's obfuscators are two modular exponentiations per ciphertext
(modulo ``p**2`` and ``q**2``, :class:`~verticalfs.crypto.keys.PrivateKey`), 3 ms each at 2048 bits,
and gmpy2 holds the GIL while it exponentiates, so threads do not help (measured 0.90x with two).
:func:`set_workers` starts a pool of worker *processes* (``spawn``: no state is forked, which is
safe beside torch's and gRPC's threads) that share a batch of ciphertexts between them; the result
is the same list of integers, in the same order, as the one-core loop (tested).

The default is one worker: nothing is started unless asked for (``set_workers``, or the
``VERTICALFS_CRYPTO_WORKERS`` environment variable read at the first call). A party runs its own
pool in its own process; the secret primes go to its workers with each batch, over a local pipe
of that process, and are not kept there. Batches under :data:`MIN_PER_WORKER` values per worker
stay in the calling process, where a pool's round trip (about a millisecond) would cost more than
it saves.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from verticalfs.crypto._bigint import mpz, powmod, random_below
from verticalfs.exceptions import CryptoError

#: a batch is shared only when every worker gets at least this many values
MIN_PER_WORKER = 4
ENV = "VERTICALFS_CRYPTO_WORKERS"

_lock = threading.Lock()
_workers: int | None = None
_pool: cf.ProcessPoolExecutor | None = None


def _check(n: Any, what: str) -> int:
    try:
        k = int(n)
    except (TypeError, ValueError):
        k = -1
    if k < 0 or (isinstance(n, float) and n != k):
        raise CryptoError(f"{what}: the number of crypto workers must be an integer >= 0 (0 = one per core), "
                          f"got {n!r}")
    return k or (os.cpu_count() or 1)


def set_workers(n: int | None) -> int:
    """Use ``n`` worker processes for the key holder's decryptions and obfuscators (``0``: one per
    core; ``1`` or ``None``: none, everything in the calling process). Returns the number in use."""
    global _workers, _pool
    k = 1 if n is None else _check(n, "set_workers")
    with _lock:
        if _pool is not None and k != _workers:
            _pool.shutdown(wait=True, cancel_futures=True)
            _pool = None
        _workers = k
    return k


def workers() -> int:
    """The number of worker processes in use (1: none)."""
    global _workers
    if _workers is None:
        env = os.environ.get(ENV, "").strip()
        _workers = _check(env, f"environment variable {ENV}") if env else 1
    return _workers


def _executor() -> cf.ProcessPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = cf.ProcessPoolExecutor(max_workers=workers(), mp_context=multiprocessing.get_context("spawn"))
        return _pool


@atexit.register
def _shutdown() -> None:  # pragma: no cover - runs at interpreter exit
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)


def _shares(total: int) -> list[int] | None:
    """How many values each worker takes, or None to stay in the calling process."""
    w = workers()
    if w <= 1 or total < w * MIN_PER_WORKER:
        return None
    base, extra = divmod(total, w)
    return [base + (i < extra) for i in range(w)]


def _run(fn: Callable[..., list[int]], args_per_share: list[tuple[Any, ...]]) -> list[int]:
    try:
        parts = list(_executor().map(fn, *zip(*args_per_share, strict=True)))
    except cf.process.BrokenProcessPool as exc:
        set_workers(1)
        raise CryptoError(f"a crypto worker process died ({exc}); the pool was stopped, call "
                          "verticalfs.crypto.set_workers(n) to start a new one (or 1 to use none)") from None
    return [v for part in parts for v in part]


# ---------------------------------------------------------------- the work itself
def crt_decrypt(key: tuple[int, ...], cts: Sequence[int]) -> list[int]:
    """Plaintexts in ``[0, n)`` of ``cts`` by the CRT; ``key`` = ``(P, Q, P**2, Q**2, hp, hq,
    P**-1 mod Q)``."""
    P, Q, p2, q2, hp, hq, pinv = key
    out: list[int] = []
    for c in cts:
        mp = (powmod(c, P - 1, p2) - 1) // P * hp % P
        mq = (powmod(c, Q - 1, q2) - 1) // Q * hq % Q
        out.append(int(mp + P * ((mq - mp) * pinv % Q)))
    return out


def crt_obfuscators(key: tuple[Any, ...], k: int) -> list[int]:
    """``k`` obfuscators ``b_p**e_p mod p**2`` and ``b_q**e_q mod q**2`` joined by the CRT, with
    ``b_p``, ``b_q`` uniform in ``[1, bound)`` (never 0, which is not a unit); ``key`` = ``(p**2, q**2, (q**2)**-1 mod p**2,
    (bound_p, e_p), (bound_q, e_q))`` (:class:`~verticalfs.crypto.keys.PrivateKey` says why)."""
    p2, q2, q2inv, (bp, ep), (bq, eq) = key
    out: list[int] = []
    for _ in range(int(k)):
        a = powmod(mpz(1 + random_below(bp - 1)), ep, p2)
        b = powmod(mpz(1 + random_below(bq - 1)), eq, q2)
        out.append(b + q2 * ((a - b) * q2inv % p2))
    return out


def decrypt(key: tuple[int, ...], cts: Sequence[int]) -> list[int]:
    """:func:`crt_decrypt`, shared between the workers when there are several."""
    shares = _shares(len(cts))
    if shares is None:
        return crt_decrypt(key, cts)
    values, args, start = list(cts), [], 0
    for s in shares:
        args.append((key, values[start:start + s]))
        start += s
    return _run(crt_decrypt, args)


def obfuscators(key: tuple[Any, ...], k: int) -> list[int]:
    """:func:`crt_obfuscators`, shared between the workers when there are several (each worker
    draws its own randomness from the operating system's CSPRNG)."""
    shares = _shares(int(k))
    if shares is None:
        return crt_obfuscators(key, k)
    return _run(crt_obfuscators, [(key, s) for s in shares])
