"""Zero-knowledge proofs that Paillier ciphertexts encrypt one of a few allowed plaintexts.

A party that sums the label holder's ciphertexts (``fate-iv``'s bin sums, FedSDG-FS's Algorithm 1,
SFFS's class sums) cannot see what they encrypt: a label holder that encrypts ``2**k`` for row
``k`` instead of a label reads every row's bin out of the decrypted sums (issue 50). With these
proofs the key holder shows, for each ciphertext ``c``, that it encrypts one of a public set
``{m_1, ..., m_K}`` (e.g. ``{0, 1}``), without saying which; the party verifies before it computes.

The proof (a 1-out-of-K OR-composition of Σ-protocols for n-th residuosity: Cramer, Damgård and
Schoenmakers, CRYPTO 1994; for Paillier: Baudron, Fouque, Pointcheval, Poupard and Stern, PODC
2001, and Damgård and Jurik, PKC 2001, section 5): ``c`` encrypts ``m_t`` exactly when
``u_t = c g**-m_t mod n**2`` is an n-th residue ``r**n``. For each branch ``j`` the prover gives a
commitment ``a_j``, a challenge ``e_j`` and a response ``z_j`` with ``z_j**n = a_j u_j**e_j mod
n**2``; the branches other than the true one are simulated (``e_j``, ``z_j`` chosen first), the
true one answered with the n-th root ``r`` of ``u_t`` (the key holder computes it from the primes:
``r = c**(n**-1 mod phi(n)) mod n``), and the challenges must add up to the Fiat-Shamir hash
``e = SHA-256(domain, context, n, c, allowed, a_1..a_K) mod 2**128``. A verifier learns nothing
about which branch is true (the simulated and the real transcripts have the same distribution:
``z_j`` uniform in ``Z_n*``), and a prover whose ``c`` encrypts no allowed value passes with
probability about ``2**-128`` per ciphertext, for a modulus without prime factors below ``2**128``.

Verification is batched (the small-exponents test of Bellare, Garay and Rabin, EUROCRYPT 1998):
with fresh 64-bit ``lambda_ij`` from the operating system's entropy, the verifier checks one
equation for all ciphertexts,

    (prod z_ij**lambda_ij)**n = prod a_ij**lambda_ij * prod_i c_i**(sum_j e_ij lambda_ij)
                                * g**(-sum m_ij e_ij lambda_ij)      (mod n**2),

with multi-exponentiations (the bucket method of Pippenger, ``prod b_i**x_i`` in about
``len(b) * bits / window`` multiplications, each window one vectorised product per digit) and a
single full exponentiation by ``n``. A false branch that slips into a batch makes the equation hold
with probability at most ``2**-64`` (its discrepancy lies in the order-``n`` part of ``Z_{n**2}*``;
``lambda`` is secret and drawn after the proof arrived). A failing batch is re-checked one
ciphertext at a time to name the first one that fails.

Soundness needs a modulus without small prime factors (the key holder makes the key): the verifier
refuses a modulus with a prime factor below ``2**16`` (trial division) or one that is a perfect
power; a key holder that built ``n`` with a prime factor ``p`` between ``2**16`` and ``2**128`` could
slip, with about ``p`` hash evaluations per ciphertext, a ciphertext whose plaintext differs from an
allowed one by a multiple of ``n / p``. docs/security.md says so.

Sizes: a proof is ``K`` commitments (``ciphertext_bytes`` each), ``K`` challenges (16 bytes) and
``K`` responses (``ceil(bits(n) / 8)`` bytes) per ciphertext; for ``{0, 1}`` at 2048 bits, 1,568
bytes per ciphertext (three times the ciphertext). Costs are measured in
``benchmarks/crypto/proofs.py``.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from verticalfs.crypto._bigint import FixedBase, invert, is_safe_prime, mpz, powmod
from verticalfs.crypto.keys import PrivateKey, PublicKey
from verticalfs.exceptions import CryptoError

#: challenge length in bits (the Fiat-Shamir hash is reduced modulo 2**CHALLENGE_BITS)
CHALLENGE_BITS = 128
#: bits of the batching exponents lambda
LAMBDA_BITS = 64
DOMAIN = b"verticalfs/proofs/paillier-membership/v1\x00"
_CB = CHALLENGE_BITS // 8
_MASK = (1 << CHALLENGE_BITS) - 1
#: product of the odd primes below 2**16 (trial division of a modulus in one gcd)
_SMALL: int | None = None


def _small_primes_product() -> int:
    global _SMALL
    if _SMALL is None:
        limit = 1 << 16
        sieve = np.ones(limit, dtype=bool)
        sieve[:2] = False
        for q in range(2, int(limit ** 0.5) + 1):
            if sieve[q]:
                sieve[q * q::q] = False
        prod = mpz(1)
        for p in np.flatnonzero(sieve).tolist():
            prod *= int(p)
        _SMALL = int(prod)
    return _SMALL


def check_modulus(pub: PublicKey) -> None:
    """Refuse a modulus a proof cannot be sound for: a prime factor below ``2**16``, or a perfect power."""
    n = int(pub.n)
    if math.gcd(n, _small_primes_product()) != 1 or n % 2 == 0:
        raise CryptoError("the Paillier modulus has a small prime factor: proofs over it are not sound; the key "
                          "holder must use a key of two large primes")
    for k in range(2, 64):
        r = _iroot(n, k)
        if r > 1 and r ** k == n:
            raise CryptoError("the Paillier modulus is a perfect power: proofs over it are not sound")


def _iroot(n: int, k: int) -> int:
    """The integer ``k``-th root of ``n`` (rounded down)."""
    lo, hi = 1, 1 << (n.bit_length() // k + 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if mid ** k <= n:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _allowed_matrix(allowed: Any, count: int) -> list[list[int]]:
    """``allowed`` as one list of plaintexts per ciphertext: one shared list, or one list each."""
    if len(allowed) and isinstance(allowed[0], (list, tuple, np.ndarray)):
        rows = [[int(v) for v in row] for row in allowed]
        if len(rows) != count:
            raise CryptoError(f"proofs: {len(rows)} allowed sets for {count} ciphertexts")
    else:
        rows = [[int(v) for v in allowed]] * count
    if any(not row for row in rows):
        raise CryptoError("proofs: an empty set of allowed plaintexts")
    k = len(rows[0])
    if any(len(row) != k for row in rows):
        raise CryptoError("proofs: every ciphertext needs the same number of allowed plaintexts")
    return rows


def _hash(pub: PublicKey, context: bytes, c: int, allowed: Sequence[int], commits: Sequence[int]) -> int:
    w = pub.ciphertext_bytes
    h = hashlib.sha256(DOMAIN)
    h.update(len(context).to_bytes(4, "big") + context)
    h.update(int(pub.n).to_bytes((pub.bits + 7) // 8, "big"))
    h.update(int(c).to_bytes(w, "big"))
    for m in allowed:
        v = int(m) % int(pub.n)
        h.update(v.to_bytes((pub.bits + 7) // 8, "big"))
    for a in commits:
        h.update(int(a).to_bytes(w, "big"))
    return int.from_bytes(h.digest()[:_CB], "big")


def proof_bytes(pub: PublicKey, count: int, k: int) -> int:
    """The size of a proof for ``count`` ciphertexts with ``k`` allowed plaintexts each."""
    return int(count) * int(k) * (pub.ciphertext_bytes + _CB + (pub.bits + 7) // 8)


# ------------------------------------------------------------------------------------- prover
class _Sampler:
    """Pairs ``(z, z**n mod n**2)`` with ``z`` uniform in ``Z_n*``, by the key holder: with safe
    primes, ``z = CRT(g_p**a mod p, g_q**b mod q)`` for generators ``g_p``, ``g_q`` and uniform
    ``a``, ``b``, and ``z**n mod p**2 = (g_p**a)**n mod p**2`` from fixed-base tables (``x**n mod
    p**2`` depends on ``x mod p`` only); else plain exponentiations."""

    def __init__(self, priv: PrivateKey) -> None:
        self.priv = priv
        self.pub = priv.public_key
        self.n, self.n2 = mpz(self.pub.n), mpz(self.pub.nsquare)
        p, q = priv.p, priv.q
        self.fast = is_safe_prime(p) and is_safe_prime(q)
        if self.fast:
            self.sides = []
            for pr in (p, q):
                g = self._generator(pr)
                P = mpz(pr)
                self.sides.append((pr, FixedBase(g, P, pr.bit_length()),
                                   FixedBase(powmod(mpz(g), self.n, P * P), P * P, pr.bit_length())))
            P, Q = mpz(p), mpz(q)
            self._q_inv_p, self._q2_inv_p2 = invert(Q, P), invert(Q * Q, P * P)
            self._P, self._Q = P, Q

    @staticmethod
    def _generator(p: int) -> int:
        half = (p - 1) // 2
        g = 2
        while pow(g, 2, p) == 1 or pow(g, half, p) == 1:
            g += 1
        return g

    def pairs(self, k: int) -> tuple[list[Any], list[Any]]:
        if k <= 0:
            return [], []
        if not self.fast:
            n, n2 = self.n, self.n2
            zs: list[Any] = []
            while len(zs) < k:
                z = mpz(secrets.randbelow(int(n) - 2) + 2)
                if math.gcd(int(z), int(n)) == 1:
                    zs.append(z)
            return zs, [powmod(z, n, n2) for z in zs]
        (p, tp, tpn), (q, tq, tqn) = self.sides
        a = [secrets.randbelow(p - 1) for _ in range(k)]
        b = [secrets.randbelow(q - 1) for _ in range(k)]
        zp, zq = tp.pow(a), tq.pow(b)
        np_, nq = tpn.pow(a), tqn.pow(b)
        P, Q = self._P, self._Q
        P2, Q2 = P * P, Q * Q
        z = [v + Q * ((u - v) * self._q_inv_p % P) for u, v in zip(zp, zq, strict=True)]
        zn = [v + Q2 * ((u - v) * self._q2_inv_p2 % P2) for u, v in zip(np_, nq, strict=True)]
        return z, zn


def _roots(priv: PrivateKey, cts: Sequence[int]) -> list[Any]:
    """The n-th root mod ``n`` of each ``c mod n`` (its encryption randomness), by the CRT."""
    p, q = priv.p, priv.q
    n = priv.public_key.n
    dp, dq = pow(n, -1, p - 1), pow(n, -1, q - 1)
    P, Q = mpz(p), mpz(q)
    qinv = invert(Q, P)
    out = []
    for c in cts:
        c = mpz(c)
        rp, rq = powmod(c % P, dp, P), powmod(c % Q, dq, Q)
        out.append(rq + Q * ((rp - rq) * qinv % P))
    return out


def prove(priv: PrivateKey, ciphertexts: Sequence[int], plaintexts: Sequence[int], allowed: Any, *,
          context: bytes = b"") -> bytes:
    """A proof that each of ``ciphertexts`` encrypts an element of its set in ``allowed`` (one list
    for all, or one per ciphertext), by the key holder; ``plaintexts`` are what they encrypt (each
    must be in its set: the key holder cannot prove a false statement). ``context`` binds the proof
    to its use (e.g. a digest of the message)."""
    pub = priv.public_key
    cts = [mpz(c) for c in ciphertexts]
    rows = _allowed_matrix(allowed, len(cts))
    n, n2 = mpz(pub.n), mpz(pub.nsquare)
    k = len(rows[0]) if rows else 0
    true = []
    for i, (m, row) in enumerate(zip(plaintexts, rows, strict=True)):
        hits = [j for j, v in enumerate(row) if (int(v) - int(m)) % int(n) == 0]
        if not hits:
            raise CryptoError(f"proofs: ciphertext {i} encrypts a value outside its allowed set; no proof exists")
        true.append(hits[0])
    sampler = _Sampler(priv)
    z_all, zn_all = sampler.pairs(len(cts) * k)
    roots = _roots(priv, cts)
    w, wz = pub.ciphertext_bytes, (pub.bits + 7) // 8
    out = bytearray()
    for i, c in enumerate(cts):
        row, t = rows[i], true[i]
        cinv = invert(c, n2)
        commits: list[Any] = [None] * k
        zs: list[Any] = [None] * k
        es = [0] * k
        for j in range(k):
            z, zn = z_all[i * k + j], zn_all[i * k + j]
            if j == t:  # rho = z, a = rho**n
                commits[j], zs[j] = zn, z
                continue
            e = secrets.randbits(CHALLENGE_BITS)
            # u_j**-e = c**-e g**(m_j e); g**x = 1 + x n (mod n**2)
            ue = powmod(cinv, e, n2) * (1 + (int(row[j]) * e % int(n)) * n) % n2
            commits[j], es[j], zs[j] = zn * ue % n2, e, z
        e_all = _hash(pub, context, int(c), row, commits)
        es[t] = (e_all - sum(es)) & _MASK
        zs[t] = zs[t] * powmod(roots[i], es[t], n) % n
        for j in range(k):
            out += int(commits[j]).to_bytes(w, "big") + int(es[j]).to_bytes(_CB, "big") + int(zs[j]).to_bytes(wz, "big")
    return bytes(out)


# ----------------------------------------------------------------------------------- verifier
def _parse(pub: PublicKey, proof: bytes, count: int, k: int) -> tuple[list[Any], list[int], list[Any]]:
    w, wz = pub.ciphertext_bytes, (pub.bits + 7) // 8
    step = w + _CB + wz
    if not isinstance(proof, (bytes, bytearray)) or len(proof) != count * k * step:
        raise CryptoError(f"the proof has {len(proof) if isinstance(proof, (bytes, bytearray)) else '?'} bytes, "
                          f"expected {count * k * step} for {count} ciphertexts with {k} allowed values each")
    a, e, z = [], [], []
    n, n2 = int(pub.n), int(pub.nsquare)
    mv = memoryview(proof)
    for s in range(0, len(proof), step):
        av = int.from_bytes(mv[s:s + w], "big")
        ev = int.from_bytes(mv[s + w:s + w + _CB], "big")
        zv = int.from_bytes(mv[s + w + _CB:s + step], "big")
        if not (0 < av < n2 and 0 < zv < n):
            raise CryptoError("the proof holds a value outside its group")
        a.append(mpz(av))
        e.append(ev)
        z.append(mpz(zv))
    return a, e, z


def _multi_exp(bases: Sequence[Any], exps: Sequence[int], mod: Any, bits: int) -> Any:
    """``prod bases[i] ** exps[i] mod mod`` (``0 <= exps[i] < 2**bits``) by the bucket method, one
    vectorised product per digit value and window."""
    count = len(bases)
    if count == 0:
        return mpz(1)
    window = max(4, min(16, int(math.log2(count)) - 2))
    windows = -(-int(bits) // window)
    nbytes = -(-windows * window // 8) + 1
    raw = np.frombuffer(b"".join(int(x).to_bytes(nbytes, "little") for x in exps), dtype=np.uint8)
    bitsarr = np.unpackbits(raw.reshape(count, nbytes), axis=1, bitorder="little")[:, :windows * window]
    weights = (1 << np.arange(window, dtype=np.int64))
    digits = bitsarr.reshape(count, windows, window).astype(np.int64) @ weights  # (count, windows)
    base_arr = np.empty(count, dtype=object)
    base_arr[:] = list(bases)
    m = mpz(mod)
    mulmod = np.frompyfunc(lambda x, y: x * y % m, 2, 1)
    acc = mpz(1)
    for wi in range(windows - 1, -1, -1):
        for _ in range(window):
            acc = acc * acc % m
        d = digits[:, wi]
        order = np.argsort(d, kind="stable")
        ds = d[order]
        keep = ds > 0
        if not keep.any():
            continue
        sb = base_arr[order][keep]
        ds = ds[keep]
        starts = np.flatnonzero(np.r_[True, ds[1:] != ds[:-1]])
        prods = mulmod.reduceat(sb, starts) if len(sb) > 1 else sb
        vals = ds[starts]
        # sum_d d * bucket_d as a product: running products from the largest digit down
        running, total = mpz(1), mpz(1)
        pos = len(vals) - 1
        for dv in range(int(vals[-1]), 0, -1):
            if pos >= 0 and vals[pos] == dv:
                running = running * prods[pos] % m
                pos -= 1
            total = total * running % m
        acc = acc * total % m
    return acc


def _check_units(pub: PublicKey, values: Sequence[Any]) -> None:
    n = mpz(pub.n)
    prod = mpz(1)
    for v in values:
        prod = prod * v % n
    if math.gcd(int(prod), int(n)) != 1:
        raise CryptoError("the proof or a ciphertext holds a value that is not a unit modulo n")


def verify(pub: PublicKey, ciphertexts: Sequence[int], allowed: Any, proof: bytes, *, context: bytes = b"") -> None:
    """Check ``proof`` (:func:`prove`'s) that each of ``ciphertexts`` encrypts an element of its set
    in ``allowed``; a :class:`~verticalfs.exceptions.CryptoError` naming the first ciphertext whose
    proof fails otherwise. Batched (see the module docstring)."""
    check_modulus(pub)
    cts = [mpz(c) for c in ciphertexts]
    rows = _allowed_matrix(allowed, len(cts))
    if not cts:
        if proof:
            raise CryptoError("a proof for no ciphertexts must be empty")
        return
    k = len(rows[0])
    a, e, z = _parse(pub, proof, len(cts), k)
    n2 = mpz(pub.nsquare)
    for c in cts:
        if not 0 < c < n2:
            raise CryptoError("a ciphertext lies outside [1, n**2)")
    _check_units(pub, cts + a + z)
    for i, c in enumerate(cts):  # the Fiat-Shamir challenges
        if sum(e[i * k:(i + 1) * k]) & _MASK != _hash(pub, context, int(c), rows[i], a[i * k:(i + 1) * k]):
            raise CryptoError(f"the proof of ciphertext {i} fails: its challenges do not add up to its hash")
    lam = [secrets.randbits(LAMBDA_BITS) | 1 for _ in range(len(a))]
    if _batch_holds(pub, cts, rows, a, e, z, lam, k):
        return
    for i in range(len(cts)):  # name the first ciphertext whose proof fails
        s = slice(i * k, (i + 1) * k)
        if not _batch_holds(pub, cts[i:i + 1], rows[i:i + 1], a[s], e[s], z[s], [1] * k, k):
            raise CryptoError(f"the proof of ciphertext {i} fails: it does not encrypt an allowed value")
    raise CryptoError("the proof fails")  # pragma: no cover - a batch fails only if an item does


def _batch_holds(pub: PublicKey, cts: Sequence[Any], rows: Sequence[Sequence[int]], a: Sequence[Any],
                 e: Sequence[int], z: Sequence[Any], lam: Sequence[int], k: int) -> bool:
    n, n2 = mpz(pub.n), mpz(pub.nsquare)
    left = powmod(_multi_exp(z, lam, n, LAMBDA_BITS), n, n2)
    E = [sum(e[i * k + j] * lam[i * k + j] for j in range(k)) for i in range(len(cts))]
    gx = sum(int(rows[i][j]) * e[i * k + j] * lam[i * k + j] for i in range(len(cts)) for j in range(k)) % int(n)
    right = _multi_exp(a, lam, n2, LAMBDA_BITS) * _multi_exp(cts, E, n2, CHALLENGE_BITS + LAMBDA_BITS + k.bit_length())
    right = right % n2 * ((1 - gx * n) % n2) % n2  # g**-x = 1 - x n
    return bool(left == right)


def product(pub: PublicKey, ciphertexts: Sequence[int]) -> int:
    """The product of ``ciphertexts`` mod ``n**2``: the encryption of their plaintexts' sum."""
    n2 = mpz(pub.nsquare)
    acc = mpz(1)
    for c in ciphertexts:
        acc = acc * mpz(c) % n2
    return int(acc)


__all__ = ["CHALLENGE_BITS", "check_modulus", "product", "proof_bytes", "prove", "verify"]
