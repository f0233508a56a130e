"""Every ciphertext that goes back to its key holder carries fresh randomness.

The key holder made every obfuscator ``r**n`` of the ciphertexts it sent. A party that computes
on them homomorphically (sums, products with its plaintexts, added masks) and returns the result
without fresh randomness returns ``c = (1 + m n) * prod r_i**a_i``: after decrypting ``m`` the key
holder strips the plaintext, ``c * (1 + m n)**-1 mod n**2``, and reads the party's multipliers
``a_i`` (which rows sit in a bin, a feature's value, the server's weights) out of the randomness.

Two kinds of tests:

- ``TestFreshRandomness``: with the key holder's obfuscators all set to 1 (a test-only patch), a
  returned ciphertext stripped of its plaintext is exactly 1 when the party adds no randomness
  (the old return path) and never 1 when it re-randomises. One check per protocol: FedSDG-FS's
  Algorithm 1 (masked counts, encrypted Gini), SFFS (masked class sums, encrypted eta),
  ``fate-iv`` (bin sums), ``fate-lasso`` (masked gradients), FedSDG-FS's secure training (masked
  products, weight and embedding gradients).
- ``TestAttacks``: the three attacks of the party-trust issue, written out. Each recovers the
  secret against a copy of the old return path (``EncryptedArray.rerandomize`` replaced by the
  identity, exactly what the code did before) and recovers nothing against the code as it is.
"""

from __future__ import annotations

import numpy as np
import pytest

import verticalfs
from verticalfs.crypto import EncryptedArray
from verticalfs.crypto._bigint import invert
from verticalfs.crypto.keys import PrivateKey, PublicKey
from verticalfs.federation import Federation
from verticalfs.methods import get


@pytest.fixture
def private_keys(monkeypatch):
    """Every private key made during the test (the key holders' views)."""
    keys: list[PrivateKey] = []
    init = PrivateKey.__init__

    def recording(self, *a, **kw):
        init(self, *a, **kw)
        keys.append(self)

    monkeypatch.setattr(PrivateKey, "__init__", recording)
    return keys


@pytest.fixture
def old_return_path(monkeypatch):
    """The return path before re-randomisation: ciphertexts left as the homomorphic result."""
    monkeypatch.setattr(EncryptedArray, "rerandomize", lambda self: self)


@pytest.fixture
def holder_obfuscators_one(monkeypatch):
    """The key holder's own encryptions get obfuscator 1 (``1 + m n``); others' are unchanged."""
    orig = PublicKey.obfuscators

    def obf(self, k, private_key=None):
        return [1] * int(k) if private_key is not None else orig(self, k, private_key)

    monkeypatch.setattr(PublicKey, "obfuscators", obf)


def stripped(priv: PrivateKey, c: int) -> int:
    """The key holder's view of ``c``'s randomness: ``c * (1 + m n)**-1 mod n**2``."""
    n = priv.public_key.n
    n2 = n * n
    c = int(c) % n2
    m = int(priv.decrypt_residues([c])[0])
    return int(c * int(invert((1 + m * n) % n2, n2)) % n2)


def ciphertexts(priv: PrivateKey, data: bytes) -> list[int]:
    w = priv.public_key.ciphertext_bytes
    return [int.from_bytes(data[i:i + w], "big") for i in range(0, len(data), w)]


#: (method, params, {message class name: bytes field}) of every protocol that sends ciphertexts
#: back to their key holder
PROTOCOLS = [
    ("ms-gini", {"secure": True, "key_bits": 512, "insecure": True},
     {"MaskedCounts": "data", "EncryptedGini": "data"}),
    ("sffs", {"secure": True, "key_bits": 512, "insecure": True},
     {"MaskedClassSums": "data", "EncryptedEta": "data"}),
    ("fate-iv", {"n_select": 5, "key_bits": 512, "insecure": True}, {"IVBinSums": "sums"}),
    ("fate-lasso", {"n_select": 5, "key_bits": 512, "insecure": True, "epochs": 1, "rounds": 1},
     {"MaskedGradient": "data"}),
    # 512-bit keys hold 5 packed slots of 88 bits: embedding_dim 4 fits (two thirds of 768 bits' CPU time)
    ("fedsdg-fs", {"secure": True, "key_bits": 512, "insecure": True, "epochs": 1, "batch_size": 64,
                   "hidden": (16, 4), "embedding_dim": 4},
     {"MaskedProducts": "data", "MaskedWeightGradient": "data", "EncryptedEmbeddingGradient": "data"}),
]


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=2, seed=0)


@pytest.fixture(scope="module")
def small():
    """Fewer training rows (113): every protocol here costs Paillier work per row."""
    return verticalfs.build_data("breast_cancer", parties=2, seed=0, test_size=0.7)


def returned(method: str, params: dict, fields: dict, data) -> list[tuple[str, list[int]]]:
    fed = Federation.in_process(data, trace=True)
    get(method)(seed=0, **params).fit(fed)
    out = []
    for _, _, msg in fed.channel.decoded():
        name = type(msg).__name__
        if name in fields:
            out.append((name, getattr(msg, fields[name])))
    return out


def _views(keys: list[PrivateKey], data: bytes) -> list[bool]:
    """For each ciphertext in ``data``: does some key holder see randomness exactly 1?"""
    views = []
    for priv in keys:
        w = priv.public_key.ciphertext_bytes
        if len(data) % w:
            continue
        views.append([stripped(priv, c) == 1 for c in ciphertexts(priv, data)])
    return [any(col) for col in zip(*views, strict=True)] if views else []


@pytest.mark.slow
class TestFreshRandomness:
    @pytest.mark.parametrize("method,params,fields", PROTOCOLS, ids=[p[0] for p in PROTOCOLS])
    def test_returned_ciphertexts_are_rerandomised(self, method, params, fields, small, private_keys,
                                                   holder_obfuscators_one):
        msgs = returned(method, params, fields, small)
        assert {name for name, _ in msgs} == set(fields), "every return path was exercised"
        for name, blob in msgs:
            seen = _views(private_keys, blob)
            assert seen and not any(seen), f"{method}: a {name} ciphertext carries only the key holder's randomness"

    @pytest.mark.parametrize("method,params,fields", PROTOCOLS[:1] + PROTOCOLS[3:4],
                             ids=[PROTOCOLS[0][0], PROTOCOLS[3][0]])
    def test_the_check_detects_the_old_return_path(self, method, params, fields, small, private_keys,
                                                   holder_obfuscators_one, old_return_path):
        msgs = returned(method, params, fields, small)
        assert msgs
        for name, blob in msgs:
            assert all(_views(private_keys, blob)), f"{method}: {name} without re-randomisation"


# ----------------------------------------------------------------------------------- attacks
def bsgs(base: int, target: int, mod: int, lo: int, hi: int) -> int | None:
    """The exponent ``e`` in ``[lo, hi)`` with ``base**e == target (mod mod)``, or None (baby-step
    giant-step: about ``2 sqrt(hi - lo)`` multiplications)."""
    span = hi - lo
    m = int(np.ceil(np.sqrt(span))) + 1
    start = pow(base, lo, mod) if lo >= 0 else pow(int(invert(base, mod)), -lo, mod)
    table, cur = {}, start
    for j in range(m):  # base**(lo + j)
        table.setdefault(cur, j)
        cur = cur * base % mod
    step = int(invert(pow(base, m, mod), mod))
    t = target % mod
    for i in range(m + 1):
        if t in table:
            e = lo + i * m + table[t]
            return e if e < hi else None
        t = t * step % mod
    return None


@pytest.mark.slow
class TestAttacks:
    def _gini_attack(self, data, keys) -> dict[int, int]:
        """The label holder recovers the rows of one-row bins from FedSDG-FS's Algorithm 1."""
        fed = Federation.in_process(data, trace=True)
        get("ms-gini")(seed=0, secure=True, key_bits=512, insecure=True).fit(fed)
        msgs = [m for _, _, m in fed.channel.decoded()]
        labels = next(m for m in msgs if type(m).__name__ == "GiniLabels")
        priv = next(k for k in keys if k.public_key.n == PublicKey.from_bytes(labels.public_key, insecure=True).n)
        mine = {stripped(priv, c): i // labels.shape[1] for i, c in enumerate(ciphertexts(priv, labels.labels))}
        found = {}
        for m in msgs:
            if type(m).__name__ == "MaskedCounts":
                for j, c in enumerate(ciphertexts(priv, m.data)):
                    row = mine.get(stripped(priv, c))
                    if row is not None:
                        found[j] = row
        return found

    @pytest.fixture
    def rare_level(self, data):
        """The telecom-like party's first column becomes a rare one-hot level: one row has it."""
        X = data.parties[1].X["train"]
        saved = X[:, 0].copy()
        X[:, 0] = 0.0
        X[17, 0] = 1.0
        yield 17
        X[:, 0] = saved

    def test_gini_bins_attack_against_the_old_return_path(self, data, private_keys, rare_level,
                                                          old_return_path):
        found = self._gini_attack(data, private_keys)
        assert rare_level in found.values()  # the label holder learnt who has the rare level

    def test_gini_bins_attack_fails(self, data, private_keys, rare_level):
        assert self._gini_attack(data, private_keys) == {}

    def _lasso_attack(self, data, keys) -> tuple[int, int]:
        """With one-row batches, the label holder reads a party's feature values out of the
        randomness of the masked gradient: stripped ``c_j = rho**x_j``, ``x_j`` by baby-step
        giant-step over the fixed-point range of a min-max-scaled feature."""
        fed = Federation.in_process(data, trace=True)
        params = {"n_select": 5, "key_bits": 512, "insecure": True, "epochs": 1, "rounds": 1,
                  "batch_size": 1, "feature_precision": 12}
        get("fate-lasso")(seed=0, **params).fit(fed)
        msgs = [(s, r, m) for s, r, m in fed.channel.decoded()]
        n_tried = n_hit = 0
        for i, (_, _, m) in enumerate(msgs):
            if type(m).__name__ != "EncryptedResidual" or n_tried >= 3:
                continue
            reply = next(r for _, _, r in msgs[i + 1:] if type(r).__name__ == "MaskedGradient")
            assert len(keys) == 1  # fate-lasso's one key pair, the label holder's
            priv = keys[0]
            n2 = priv.public_key.nsquare
            rho = stripped(priv, int.from_bytes(m.data, "big"))
            for c in ciphertexts(priv, reply.data)[:2]:
                n_tried += 1
                if bsgs(rho, stripped(priv, c), n2, -(1 << 13), 1 << 13) is not None:
                    n_hit += 1
        return n_tried, n_hit

    def test_lasso_one_row_attack_against_the_old_return_path(self, small, private_keys, old_return_path):
        tried, hit = self._lasso_attack(small, private_keys)
        assert tried > 0 and hit == tried

    def test_lasso_one_row_attack_fails(self, small, private_keys):
        tried, hit = self._lasso_attack(small, private_keys)
        assert tried > 0 and hit == 0

    def _forward_attack(self) -> tuple[np.ndarray, list[int | None]]:
        """A party with one open embedding component reads the server's ``w + eps_acc`` out of
        the randomness of FedSDG-FS's masked products (Algorithm 2 lines 11-14)."""
        from verticalfs.methods.fedsdg_fs.secure import ClientCrypto, ServerCrypto

        P = 12
        client = ClientCrypto(k=3, e=1, key_bits=512, insecure=True, backend="python", randomness="full",
                              precision=P, noise_scale=0.1, rng=np.random.default_rng(0))
        W = np.random.default_rng(1).normal(0, 1, (3, 1))
        server = ServerCrypto(client.pub, W, P)
        g = np.random.default_rng(2).uniform(0, 1, (5, 1))
        cols, _, bound = client.encrypt_embeddings(g, np.array([0]), train=True)
        out = server.masked_products(cols, np.array([0]), len(g), bound)
        priv, n2 = client.priv, client.pub.nsquare
        rho = stripped(priv, ciphertexts(priv, cols)[0])  # the party's own obfuscator
        found = [bsgs(rho, stripped(priv, c), n2, -(1 << 16), 1 << 16) for c in ciphertexts(priv, out)]
        return np.rint(np.ldexp(W[:, 0], P)).astype(np.int64), found

    def test_forward_attack_against_the_old_return_path(self, old_return_path):
        w, found = self._forward_attack()
        assert found == w.tolist()  # the party learnt the server's weights exactly

    def test_forward_attack_fails(self):
        _, found = self._forward_attack()
        assert found == [None] * len(found)
