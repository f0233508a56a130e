"""The set-membership proofs of :mod:`verticalfs.crypto.proofs`: complete, sound, bound to their
context, and hiding which allowed value a ciphertext encrypts."""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from verticalfs.crypto import EncryptedArray, generate_keypair, proofs
from verticalfs.crypto._bigint import invert, mpz, powmod
from verticalfs.exceptions import CryptoError


@pytest.fixture(scope="module")
def keys():
    return generate_keypair(512, insecure=True)


def _enc(priv, values):
    return EncryptedArray.encrypt(priv, np.asarray(values, dtype=object), precision=0).ciphertexts()


def test_honest_proofs_verify(keys):
    pub, priv = keys
    y = np.random.default_rng(0).integers(0, 2, 60).tolist()
    cts = _enc(priv, y)
    pr = proofs.prove(priv, cts, y, [0, 1], context=b"ctx")
    assert len(pr) == proofs.proof_bytes(pub, 60, 2)
    proofs.verify(pub, cts, [0, 1], pr, context=b"ctx")
    # per-ciphertext sets (equality proofs: one allowed value each), and larger sets
    proofs.verify(pub, cts, [[v] for v in y], proofs.prove(priv, cts, y, [[v] for v in y]))
    big = [1 << (9 * s) for s in range(5)]
    vals = [big[i % 5] for i in range(12)]
    c2 = _enc(priv, vals)
    proofs.verify(pub, c2, big, proofs.prove(priv, c2, vals, big))


@pytest.mark.parametrize("value", [2, 1 << 7, 1 << 300, -1])
def test_a_ciphertext_of_another_value_is_rejected(keys, value):
    """Soundness: a key holder that encrypts 2 or 2**k (the row markers of the attack) cannot prove
    {0, 1}: the honest prover refuses, and a cheating one (all branches simulated, the last
    challenge forced to the hash) fails the batched check, which names the ciphertext."""
    pub, priv = keys
    y = [0, 1, 1, 0]
    cts = _enc(priv, y) + _enc(priv, [value])
    with pytest.raises(CryptoError, match="outside its allowed set"):
        proofs.prove(priv, cts, y + [value], [0, 1])
    honest = proofs.prove(priv, cts[:4], y, [0, 1])
    forged = honest + _cheat(pub, cts[4], [0, 1])
    with pytest.raises(CryptoError, match="ciphertext 4 fails: it does not encrypt an allowed value"):
        proofs.verify(pub, cts, [0, 1], forged)
    with pytest.raises(CryptoError, match="ciphertext 0"):
        proofs.verify(pub, cts[4:], [0, 1], _cheat(pub, cts[4], [0, 1]))


def _cheat(pub, c, allowed) -> bytes:
    """A cheating prover's best without a true branch: every branch simulated with a guessed
    challenge, the last challenge set so that the challenges add up to the hash."""
    n, n2 = mpz(pub.n), mpz(pub.nsquare)
    cinv = invert(mpz(c), n2)
    k = len(allowed)
    commits, es, zs = [], [], []
    for m in allowed:
        z = mpz(secrets.randbelow(int(n) - 2) + 2)
        e = secrets.randbits(proofs.CHALLENGE_BITS)
        ue = powmod(cinv, e, n2) * (1 + (m * e % n) * n) % n2
        commits.append(powmod(z, n, n2) * ue % n2)
        es.append(e)
        zs.append(z)
    es[-1] = (proofs._hash(pub, b"", int(c), allowed, commits) - sum(es[:-1])) % (1 << proofs.CHALLENGE_BITS)
    w, wz = pub.ciphertext_bytes, (pub.bits + 7) // 8
    return b"".join(int(commits[j]).to_bytes(w, "big") + int(es[j]).to_bytes(16, "big")
                    + int(zs[j]).to_bytes(wz, "big") for j in range(k))


def test_proofs_are_bound_to_their_context_and_ciphertexts(keys):
    pub, priv = keys
    cts = _enc(priv, [1, 0, 1])
    pr = proofs.prove(priv, cts, [1, 0, 1], [0, 1], context=b"labels of run 1")
    with pytest.raises(CryptoError, match="challenges do not add up"):
        proofs.verify(pub, cts, [0, 1], pr, context=b"labels of run 2")
    with pytest.raises(CryptoError, match="challenges do not add up"):
        proofs.verify(pub, cts[::-1], [0, 1], pr, context=b"labels of run 1")
    with pytest.raises(CryptoError, match="bytes, expected"):
        proofs.verify(pub, cts, [0, 1], pr[:-1], context=b"labels of run 1")


def test_a_modulus_with_a_small_factor_is_refused():
    from verticalfs.crypto.keys import PublicKey

    _, priv = generate_keypair(512, insecure=True)
    bad = PublicKey(3 * 5 * priv.q, insecure=True)
    with pytest.raises(CryptoError, match="small prime factor"):
        proofs.verify(bad, [2], [0, 1], b"")
    sq = PublicKey(priv.q * priv.q, insecure=True)
    with pytest.raises(CryptoError, match="perfect power"):
        proofs.verify(sq, [2], [0, 1], b"")


def test_the_true_branch_does_not_show(keys):
    """Zero knowledge, as a check of the distributions: the responses of the true and of the
    simulated branch are both uniform in Z_n* (same mean and spread of z / n over many proofs, and
    the challenge of the true branch is as uniform as the simulated one's)."""
    pub, priv = keys
    y = [0] * 200 + [1] * 200
    cts = _enc(priv, y)
    pr = proofs.prove(priv, cts, y, [0, 1])
    a, e, z = proofs._parse(pub, pr, len(cts), 2)
    n = float(int(pub.n))
    first_z = np.array([float(int(z[2 * i])) / n for i in range(len(cts))])
    first_e = np.array([e[2 * i] / 2.0 ** 128 for i in range(len(cts))])
    # branch 0 is true for the first 200 ciphertexts, simulated for the last 200
    for v in (first_z, first_e):
        t, s = v[:200], v[200:]
        assert abs(t.mean() - s.mean()) < 0.1 and abs(t.std() - s.std()) < 0.06
