"""SparseVFL (sparsevfl.md) and its baselines: masked gradients, bytes on the ledger, L1 sparsity,
baseline byte ratios, best-validation checkpoint and the wall-time figures."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import verticalfs
from verticalfs.codecs import rle
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.sparsevfl import CodedVFLTrainer, Coding
from verticalfs.methods.sparsevfl.messages import (
    CodedEmbeddings,
    CodedGradients,
    SparseBottom,
    xavier_init,
)
from verticalfs.methods.sparsevfl.method import SparseVFLParams
from verticalfs.nn.models import make_optimizer
from verticalfs.transport.serde import HEADER_SIZE

# a message whose only field is ``bytes``: header + tag u8 + length u32
BYTES_MSG_OVERHEAD = HEADER_SIZE + 1 + 4
SMALL = {"epochs": 2, "batch_size": 64}


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, seed=0)


def fit(name: str, data, trace: bool = False, seed: int = 0, **params):
    method = create(name, seed=seed, **{**SMALL, **params})
    fed = Federation(data, trace=trace)
    method.fit(fed)
    return method, fed


def payload(fed, kind: str, phase: str = "train") -> int:
    return fed.ledger.payload_where(phase=phase, kind=kind)


def messages(fed, kind: str, phase: str = "train"):
    """(ledger record, decoded message) pairs of one kind, in order (needs ``trace=True``)."""
    out = []
    for rec, (_, _, msg) in zip(fed.ledger.records(), fed.channel.messages, strict=True):
        assert rec.kind == type(msg).__name__
        if rec.kind == kind and rec.phase == phase:
            out.append((rec, msg))
    return out


class TestMaskedGradients:
    """Section 4.2: the masked gradient gives exactly the dense gradient's parameter update."""

    @pytest.mark.parametrize("optimizer", ["sgd", "adam"])
    @pytest.mark.parametrize("order", ["vertical", "horizontal"])
    @pytest.mark.parametrize("hidden", [(), (6,)])
    def test_same_update_as_dense(self, optimizer, order, hidden):
        gen = torch.Generator().manual_seed(1)
        X = torch.rand(50, 7, generator=gen) - 0.3
        model = SparseBottom(7, 4, hidden=hidden, bias=False, last_activation="relu")
        xavier_init(model)
        init = copy.deepcopy(model)
        models = [model, copy.deepcopy(model)]
        opts = [make_optimizer(m.parameters(), optimizer, 0.05) for m in models]
        coding = Coding(forward="rle", backward="masked", bits=32, order=order)
        outs = [m(X) for m in models]
        h = outs[0].detach().numpy()
        assert 0.1 < (h == 0).mean() < 0.9  # the mask matters
        data, kept_mask = coding.encode_embeddings_keep_mask(h)
        _, decoded_mask = coding.decode_embeddings(data, *h.shape)
        np.testing.assert_array_equal(kept_mask, decoded_mask)
        G = torch.randn(h.shape, generator=gen).numpy()  # non-zero everywhere, also where h = 0
        Gm = coding.decode_gradients(coding.encode_gradients(G, decoded_mask), *h.shape, kept_mask)
        assert np.count_nonzero(Gm) == kept_mask.sum() < G.size
        for out, g, opt in zip(outs, (G, Gm), opts, strict=True):
            opt.zero_grad()
            out.backward(torch.from_numpy(np.ascontiguousarray(g)))
            opt.step()
        for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
            assert torch.equal(a, b)
        # and the step changed every parameter tensor
        assert not any(torch.equal(a, b) for a, b in zip(init.parameters(), models[0].parameters(), strict=True))

    def test_masked_gradient_in_wrong_places_differs(self):
        """Control: the same values written at other positions change the update."""
        X = torch.rand(40, 5, generator=torch.Generator().manual_seed(2)) - 0.3
        model = SparseBottom(5, 3)
        xavier_init(model)
        h = model(X).detach().numpy()
        coding = Coding(forward="rle", backward="masked", order="vertical")
        _, mask = coding.encode_embeddings_keep_mask(h)
        G = np.random.default_rng(0).normal(size=h.shape).astype(np.float32)
        data = coding.encode_gradients(G, mask)
        wrong = Coding(forward="rle", backward="masked", order="horizontal").decode_gradients(data, *h.shape, mask)
        right = coding.decode_gradients(data, *h.shape, mask)
        np.testing.assert_array_equal(right[mask], G[mask])
        assert not np.array_equal(wrong, right)


class TestBytes:
    def test_sparsevfl_smaller_than_original(self, data):
        orig, fo = fit("original", data)
        sp, fs = fit("sparsevfl", data, lam=0.01)
        for kind in ("CodedEmbeddings", "CodedGradients"):
            assert payload(fs, kind) < payload(fo, kind)
        assert sp.history_[-1]["bytes"] < orig.history_[-1]["bytes"]
        # original: 4 bytes per value, both ways
        n_values = data.n_samples("train") * 8 * 3 * SMALL["epochs"]
        assert payload(fo, "CodedEmbeddings") == payload(fo, "CodedGradients") == 4 * n_values

    @pytest.mark.parametrize("name,bits", [("sparsevfl", 32), ("sparsevfl-16", 16)])
    def test_ledger_equals_encoded_sizes(self, data, name, bits):
        _, fed = fit(name, data, trace=True, lam=0.05)
        ups = messages(fed, "CodedEmbeddings")
        downs = messages(fed, "CodedGradients")
        assert len(ups) == len(downs) == 3 * SMALL["epochs"] * -(-data.n_samples("train") // 64)
        for (ru, mu), (rd, md) in zip(ups, downs, strict=True):
            assert isinstance(mu, CodedEmbeddings) and isinstance(md, CodedGradients)
            assert ru.sender == rd.receiver and ru.step == rd.step
            assert ru.payload == len(mu.data) and ru.overhead == BYTES_MSG_OVERHEAD
            values, mask = rle.rle_decode(mu.data)
            assert ru.payload == rle.rle_size_bytes(mask, bits=bits, order="vertical")
            # the masked gradient: Q bits per transmitted embedding entry, nothing else
            assert rd.payload == len(md.data) == int(mask.sum()) * bits // 8
            assert rd.overhead == BYTES_MSG_OVERHEAD

    def test_baselines_relate(self, data):
        orig, fo = fit("original", data)
        runs = {n: fit(n, data) for n in ("q16", "q8")}
        dim2 = fit("dim", data, embedding_dim=2)
        kinds = ("CodedEmbeddings", "CodedGradients")
        base = {k: payload(fo, k) for k in kinds}
        for k in kinds:
            assert payload(runs["q16"][1], k) * 2 == base[k]
            n_msgs = len([r for r in fo.ledger.records() if r.kind == k and r.phase == "train"])
            assert payload(runs["q8"][1], k) == base[k] // 4 + 4 * n_msgs  # + a float32 scale each
            assert payload(dim2[1], k) * 8 == base[k] * 2  # 2/e of ORIGINAL with the same batches
        # the same number of messages, so the totals relate the same way up to the fixed overheads
        ratio = runs["q16"][0].history_[-1]["bytes"] / orig.history_[-1]["bytes"]
        assert 0.5 < ratio < 0.55

    @pytest.mark.parametrize("name", ["pca", "autoencoder"])
    def test_reduction_is_one_upload(self, data, name):
        method, fed = fit(name, data, epochs=3)
        recs = [r for r in fed.ledger.records() if r.phase not in ("eval", "report")]
        assert sorted(r.kind for r in recs) == ["ReduceRequest"] * 3 + ["ReducedFeatures"] * 3
        n_rows = sum(data.n_samples(s) for s in ("train", "val", "test"))
        dims = method.info_["embedding_dims"]
        assert payload(fed, "ReducedFeatures") == sum(4 * n_rows * d for d in dims.values())
        byts = [e["bytes"] for e in method.history_]
        assert len(byts) == 3 and len(set(byts)) == 1 and byts[0] == fed.ledger.bytes_where(phase="train")
        assert fed.ledger.bytes_where(phase="eval") == 0  # evaluation is local to the active party

    def test_top_w_gradient_size(self, data):
        W = 100
        _, fed = fit("top-w", data, trace=True, top_w=W)
        for rec, msg in messages(fed, "CodedGradients"):
            n = min(64, data.n_samples("train") - 64 * rec.step)
            size = n * 8
            assert len(msg.data) == rec.payload
            if W < size:
                assert rec.payload == -(-W * rle.index_bits(size) // 8) + 2 * W
            else:
                assert rec.payload == 2 * size


def test_top_w_keeps_largest():
    coding = Coding(forward="rle", backward="topw", bits=32, top_w=5)
    g = np.random.default_rng(3).normal(size=(12, 3)).astype(np.float32)
    out = coding.decode_gradients(coding.encode_gradients(g, None), 12, 3, None)
    keep = np.argsort(-np.abs(g).ravel())[:5]
    np.testing.assert_array_equal(np.flatnonzero(out.ravel()), np.sort(keep))
    np.testing.assert_array_equal(out.ravel()[keep], g.ravel()[keep])


def test_l1_makes_embeddings_sparser(data):
    zeros = {}
    for lam in (0.0, 0.1):
        m, _ = fit("sparsevfl", data, lam=lam, epochs=8, batch_size=32)
        zeros[lam] = m.history_[-1]["embedding_zeros"]
    assert zeros[0.1] > zeros[0.0] + 0.1


def test_penalty_is_eq5_with_m_parties():
    """lambda / (M N) sum ||h||_1 with M the number of passive parties (not a fixed 3)."""
    for k in (2, 4):
        d = verticalfs.build_data("breast_cancer", parties=k, seed=0)
        fed = Federation(d)
        params = SparseVFLParams(lam=0.3, embedding_dim=3)
        tr = CodedVFLTrainer(fed.server, fed.channel, fed.party_names, params,
                             Coding(forward="rle", backward="masked"), lam=0.3)
        tr.setup()
        H = torch.rand(10, 3 * k)
        assert float(tr.penalty(H, 10)) == pytest.approx(0.3 / (k * 10) * float(H.sum()), rel=1e-6)


def test_best_validation_checkpoint(data):
    m, fed = fit("sparsevfl-16", data, epochs=6, batch_size=32)
    h = m.history_
    assert all("roc_auc" in e and "accuracy" in e and "val_roc_auc" in e for e in h)
    best = max(range(len(h)), key=lambda i: (h[i]["val_roc_auc"], -i))
    assert m.info_["best_epoch"] == h[best]["epoch"]
    for k in ("roc_auc", "accuracy"):
        assert m.metrics_[k] == h[best][k]  # the restored checkpoint reproduces that epoch


def test_wall_time_info(data):
    m, fed = fit("sparsevfl-16", data)
    wt = m.info_["wall_time"]
    assert wt["T_0"] > 0 and set(wt["T_m"]) == set(data.party_names)
    assert all(t > 0 for t in wt["T_m"].values())
    for p in data.party_names:
        assert wt["S_m"][p] == sum(r.bytes for r in fed.ledger.records()
                                   if r.phase == "train" and p in (r.sender, r.receiver))
    assert set(wt["tau"]) == {"10", "100"} and wt["tau"]["10"] > wt["tau"]["100"] > wt["T_0"]
    slow = wt["slowest"]["10"]
    assert wt["tau"]["10"] == pytest.approx(wt["T_0"] + wt["T_m"][slow] + 8 * wt["S_m"][slow] / 1e7)
    assert wt["tau_per_round"]["10"] >= wt["tau"]["10"] - 1e-9


@pytest.mark.parametrize("name,bad", [
    ("sparsevfl", {"lam": -1.0}), ("sparsevfl", {"order": "diagonal"}), ("sparsevfl", {"bits": 8}),
    ("sparsevfl", {"norm": "l3"}), ("top-w", {"top_w": 0}), ("original", {"last_activation": "tanh"}),
    ("dim", {"embedding_dim": 0}),
])
def test_bad_params(name, bad):
    key = next(iter(bad))
    with pytest.raises(ConfigError, match=key):
        create(name, **bad)
