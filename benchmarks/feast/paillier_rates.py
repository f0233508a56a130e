"""Throughput of the Paillier back ends: encryptions and decryptions per second, through the public
``verticalfs.crypto`` API (moved here from the library: measuring is the benchmarks' business).

Used by ``paillier_speed.py`` and ``speed.py`` beside it (``from paillier_rates import rates``, with
this folder on ``sys.path``).
"""

from __future__ import annotations

import time

import numpy as np

from verticalfs.crypto import EncryptedArray, generate_keypair


def rates(backend: str = "auto", bits: int = 2048, n: int = 200, *, pool: bool = False,
          randomness: str = "full", insecure: bool = False, seed: int = 0) -> dict:
    """Measure one back end.

    Parameters
    ----------
    backend : str
        Back-end name or ``auto``.
    bits : int
        Key length (below 2048 needs ``insecure=True``).
    n : int
        Values encrypted and decrypted (float64 in [-1, 1), 32 fractional bits).
    pool : bool
        Also time :meth:`~verticalfs.crypto.PublicKey.precompute` of ``n`` obfuscators and the
        online encryptions that consume them.
    randomness : str
        ``full`` or ``short`` (see :mod:`verticalfs.crypto.backends`).
    seed : int
        Seed of the plaintext values (the encryption randomness is always fresh).

    Returns
    -------
    dict
        ``backend`` (the resolved name), ``randomness``, ``bits``, ``n``, ``keygen_seconds``,
        ``encrypt_per_s`` (with the public key only, as a party that does not hold the key),
        ``encrypt_holder_per_s`` (with the private key: the ``python`` back end then uses the CRT),
        ``decrypt_per_s`` and, with ``pool``, ``precompute_per_s`` and ``encrypt_pooled_per_s``.
    """
    x = np.random.default_rng(seed).uniform(-1, 1, int(n))
    t0 = time.perf_counter()
    pub, priv = generate_keypair(bits, backend=backend, randomness=randomness, insecure=insecure)
    out: dict = {"backend": pub.backend.name, "randomness": pub.randomness, "bits": pub.bits, "n": int(n),
                 "keygen_seconds": time.perf_counter() - t0}

    def per_s(fn) -> tuple[float, object]:
        t = time.perf_counter()
        r = fn()
        return int(n) / max(time.perf_counter() - t, 1e-12), r

    EncryptedArray.encrypt(pub, x[:8])  # warm-up (thread pools, native key objects), not timed
    out["encrypt_per_s"], enc = per_s(lambda: EncryptedArray.encrypt(pub, x))
    out["encrypt_holder_per_s"], _ = per_s(lambda: EncryptedArray.encrypt(priv, x))
    out["decrypt_per_s"], dec = per_s(lambda: enc.decrypt(priv))
    if not np.allclose(dec, x, atol=1e-9):
        raise AssertionError(f"back end {pub.backend.name}: decryption does not round-trip")
    if pool:
        out["precompute_per_s"], _ = per_s(lambda: priv.precompute(int(n)))
        out["encrypt_pooled_per_s"], enc2 = per_s(lambda: EncryptedArray.encrypt(pub, x))
        if pub.pool_size != 0 or not np.allclose(enc2.decrypt(priv), x, atol=1e-9):
            raise AssertionError(f"back end {pub.backend.name}: pooled encryption is wrong")
    return out


def phe_rates(bits: int = 2048, n: int = 200, *, seed: int = 0) -> dict:
    """python-paillier through its own API (``PaillierPublicKey.encrypt`` of floats,
    ``PaillierPrivateKey.decrypt``), the reference the back ends are compared with. Needs ``phe``
    (GPL-3.0, imported here only)."""
    import phe  # noqa: PLC0415 - optional, GPL: imported only when this reference is measured

    x = np.random.default_rng(seed).uniform(-1, 1, int(n)).tolist()
    t0 = time.perf_counter()
    pk, sk = phe.generate_paillier_keypair(n_length=bits)
    out: dict = {"backend": "phe (own API)", "randomness": "full", "bits": bits, "n": int(n),
                 "keygen_seconds": time.perf_counter() - t0}
    pk.encrypt(0.5)
    t = time.perf_counter()
    enc = [pk.encrypt(v) for v in x]
    out["encrypt_per_s"] = int(n) / max(time.perf_counter() - t, 1e-12)
    t = time.perf_counter()
    dec = [sk.decrypt(c) for c in enc]
    out["decrypt_per_s"] = int(n) / max(time.perf_counter() - t, 1e-12)
    if not np.allclose(dec, x, atol=1e-9):
        raise AssertionError("phe: decryption does not round-trip")
    return out
