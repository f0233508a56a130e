"""The FATE baselines: ``fate-iv`` equals information value computed in the clear, ``fate-lasso``
equals the same proximal SGD in the clear and reaches N non-zeros, the ledger counts ciphertexts
at their exact width, and labels cross only encrypted.

Runs use 512-bit keys (``insecure=True``) to stay fast; the contract test runs the defaults.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import verticalfs
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.fate import information_values, quantile_bins, woe_iv
from verticalfs.names import LABEL_HOLDER as ACTIVE
from verticalfs.training.batches import BatchPlan
from verticalfs.training.history import derive_seed

FAST = {"key_bits": 512, "insecure": True}
W = 128  # ciphertext width of a 512-bit key: ceil(1024 / 8)


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


def pooled_train(data) -> np.ndarray:
    return np.concatenate([p.X["train"] for p in data.parties], 1).astype(np.float64)


def fit(name, data, trace=False, **params):
    fed = Federation.in_process(data, trace=trace)
    m = create(name, seed=0, **{**FAST, "n_select": 10, **params})  # the paper's N (the default chooses it)
    m.fit(fed)
    return m, fed


# ------------------------------------------------------------------------- binning / IV
class TestBinningInTheClear:
    def test_quantile_bins_follow_fate(self):
        col = np.arange(1, 11, dtype=float)  # rates .25 .5 .75 1 -> split points 3, 5, 8, 10
        codes, nb = quantile_bins(col[:, None], 4)
        assert nb.tolist() == [4]
        assert codes[:, 0].tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]
        dup = np.array([0, 0, 0, 0, 0, 0, 0, 1, 1, 2], dtype=float)  # duplicated split points dropped
        codes, nb = quantile_bins(dup[:, None], 10)
        assert nb.tolist() == [3] and codes[:, 0].tolist() == [0] * 7 + [1, 1, 2]

    def test_woe_iv_with_fate_adjustment(self):
        ev, ne = np.array([0, 6, 4]), np.array([5, 3, 2])
        woe, iv = woe_iv(ev, ne, 0.5)
        er = np.array([0.5 / 10, 0.6, 0.4])  # bin 0 has no event: (0 + 0.5) / 10, (5 + 0.5) / 10
        ner = np.array([5.5 / 10, 0.3, 0.2])
        np.testing.assert_allclose(woe, np.log(er / ner))
        assert iv == pytest.approx(float(np.sum((er - ner) * np.log(er / ner))))


class TestFateIV:
    @pytest.mark.parametrize("packing", ["packed", "pair"])
    def test_equals_iv_in_the_clear(self, data, packing):
        m, fed = fit("fate-iv", data, packing=packing)
        ref = information_values(pooled_train(data), data.labels.y["train"])
        names = [f"{p.name}:{n}" for p in data.parties for n in p.feature_names]
        got = np.array([m.info_["iv"][k] for k in names])
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)  # counts are exact integers
        top = np.argsort(-ref, kind="stable")[:10]
        assert m.info_["selected"] == [names[i] for i in top]
        assert m.support_ and sum(int(s.sum()) for s in m.support_.values()) == 10

    def test_ledger_counts_ciphertexts(self, data):
        m, fed = fit("fate-iv", data)
        n = len(data.labels.y["train"])
        recs = [r for r in fed.ledger.records() if r.phase == "selection"]
        kinds = sorted({r.kind for r in recs})
        assert kinds == ["IVBinSums", "IVLabels"]
        for r in recs:
            if r.kind == "IVLabels":  # n ciphertexts + the 64-byte modulus; the rest is metadata
                assert r.payload == n * W + 64 and r.overhead < 100
            else:
                d = len(next(p for p in data.parties if p.name == r.sender).feature_names)
                # one cipher package per feature (10 bins x 16-bit slots fit one plaintext) and
                # the int64 bin counts
                assert r.payload == d * W + 8 * d and r.overhead < 60
        assert m.info_["selection_bytes"] == sum(r.bytes for r in recs)

    def test_no_plaintext_label_crosses(self, data):
        _, fed = fit("fate-iv", data, trace=True, packing="pair")
        assert_no_labels(fed, data)

    def test_randomness_is_explicit(self, data):
        """``full`` (the default) and ``short`` randomness give the same information values (the
        randomness never changes a decryption); the choice is reported."""
        full, _ = fit("fate-iv", data)
        short, _ = fit("fate-iv", data, randomness="short")
        assert full.info_["randomness"] == "full" and short.info_["randomness"] == "short"
        assert full.info_["backend"] == "python"  # auto with full randomness: never heu/pypaillier
        assert short.info_["iv"] == full.info_["iv"]
        with pytest.raises(ConfigError, match="randomness"):
            create("fate-iv", randomness="tiny", **FAST).fit(Federation.in_process(data))
        if "phe" in verticalfs.crypto.available_backends():
            with pytest.raises(ConfigError, match="randomness='full'"):
                create("fate-iv", backend="phe", randomness="short", **FAST).fit(Federation.in_process(data))

    def test_bad_params(self, data):
        with pytest.raises(ConfigError, match="insecure") as err:
            create("fate-iv", key_bits=1024).fit(Federation.in_process(data))
        assert str(err.value).startswith("fate-iv: key_bits: ")  # once: "fate-iv: fate-iv: ..." (issue 53)
        with pytest.raises(ConfigError, match="packing"):
            create("fate-iv", packing="zip", **FAST).fit(Federation.in_process(data))
        reg = verticalfs.build_data("wine", parties=2, seed=0)  # multiclass
        with pytest.raises(ConfigError, match="binary"):
            create("fate-iv", **FAST).fit(Federation.in_process(reg))


# ------------------------------------------------------------------------------- lasso
def lasso_in_the_clear(data, alpha, epochs, batch_size=256, lr=0.5, seed=0, fprec=16, dprec=32):
    """The same proximal SGD on pooled columns, with the protocol's fixed-point rounding."""
    X = np.rint(pooled_train(data) * 2.0**fprec) / 2.0**fprec
    ys = 2.0 * data.labels.y["train"] - 1.0
    plan = BatchPlan(len(ys), batch_size, derive_seed(seed, "fate-lasso", "batches"))
    w, b = np.zeros(X.shape[1]), 0.0
    for e in range(epochs):
        for k in range(plan.n_batches):
            r = plan.rows(e, k)
            d = 0.25 * (X[r] @ w + b) - 0.5 * ys[r]
            b -= lr * d.mean()
            dq = np.rint(d * 2.0**dprec) / 2.0**dprec
            v = w - lr * (X[r].T @ dq) / len(r)
            w = np.sign(v) * np.maximum(np.abs(v) - lr * alpha, 0.0)
    return w, b


class TestFateLasso:
    @pytest.fixture(scope="class")
    @classmethod
    def run10(cls, data):
        return fit("fate-lasso", data, trace=True, n_select=10, epochs=3, rounds=8)

    def test_reaches_n_nonzeros(self, run10):
        m, fed = run10
        runs = m.info_["runs"]
        assert runs[-1]["nonzero"] == 10 and m.info_["nonzero"] == 10
        assert len(runs) >= 2  # the bisection moved
        # the selected features are exactly the non-zero coefficients of the chosen run
        nz = {p: np.flatnonzero(fed.local_runtime(p).role.state["w"]) for p in fed.party_names}
        sel = {p: np.flatnonzero(s) for p, s in m.support_.items()}
        for p in fed.party_names:
            np.testing.assert_array_equal(nz[p], sel[p])

    def test_equals_training_in_the_clear(self, run10, data):
        m, fed = run10
        alpha = m.info_["alpha"]
        w_ref, b_ref = lasso_in_the_clear(data, alpha, epochs=3)
        w = np.concatenate([fed.local_runtime(p).role.state["w"] for p in fed.party_names])
        np.testing.assert_allclose(w, w_ref, rtol=0, atol=1e-9)
        assert m.info_["runs"][-1]["intercept"] == pytest.approx(b_ref, abs=1e-9)
        assert np.count_nonzero(w_ref) == 10

    def test_ledger_counts_ciphertexts(self, run10, data):
        m, fed = run10
        n_feat = {p.name: p.n_features for p in data.parties}
        counts = {}
        for r in fed.ledger.records():
            if r.phase != "selection":
                continue
            counts[r.kind] = counts.get(r.kind, 0) + 1
            if r.kind == "EncryptedResidual":  # one ciphertext per batch row
                # overhead: the header and the small fields (bound_bits: the floor check's input)
                assert r.payload % W == 0 and r.payload // W in (256, 398 - 256) and r.overhead < 80
            elif r.kind == "MaskedGradient":  # one per feature of the sender, and its hiding bits
                assert r.payload == n_feat[r.sender] * W and r.overhead < 60
            elif r.kind == "GradientResult":  # decrypted masked values, ceil(512 / 8) bytes each
                assert r.payload == n_feat[r.receiver] * 64 and r.overhead < 60
        steps = 3 * 2 * len(m.info_["runs"])  # epochs x batches x runs
        assert counts["EncryptedResidual"] == counts["MaskedGradient"] == 3 * steps
        assert counts["GradientResult"] == 3 * steps
        assert counts["LassoStart"] == counts["CoefficientsRequest"] == 3 * len(m.info_["runs"])
        assert sum(r["bytes"] for r in m.info_["runs"]) == m.info_["selection_bytes"]

    def test_no_plaintext_label_crosses(self, run10, data):
        assert_no_labels(run10[1], data)

    def test_bad_params(self, data):
        with pytest.raises(ConfigError, match="insecure"):
            create("fate-lasso", key_bits=1024).fit(Federation.in_process(data))
        with pytest.raises(ConfigError, match="alpha_range"):
            create("fate-lasso", alpha_range=(1.0, 0.1), **FAST).fit(Federation.in_process(data))


# ----------------------------------------------------------------------------- privacy
def arrays_of(msg):
    for f in dataclasses.fields(msg):
        v = getattr(msg, f.name)
        if isinstance(v, np.ndarray) and v.dtype.kind in "fiub":
            yield v
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) for x in v):
            yield np.asarray(v, dtype=float)


def assert_no_labels(fed, data):
    """No message to a passive party carries the labels, or any batch of them, in the clear:
    the only per-row content sent to the parties is ciphertext bytes."""
    y = np.asarray(data.labels.y["train"], dtype=np.float64)
    to_parties = [m for s, r, m in fed.channel.decoded() if s == ACTIVE and r != ACTIVE]
    assert to_parties
    for msg in to_parties:
        for a in arrays_of(msg):
            a = a.ravel().astype(np.float64)
            assert a.size < 30, f"{type(msg).__name__} carries a per-row array"
            assert not (a.size == y.size and (np.allclose(a, y) or np.allclose(a, 2 * y - 1)))
        for f in dataclasses.fields(msg):
            v = getattr(msg, f.name)
            if isinstance(v, bytes) and len(v) >= y.size:  # a ciphertext stream, not label bytes
                assert v != y.astype(np.uint8).tobytes() and v != y.astype(np.float64).tobytes()
