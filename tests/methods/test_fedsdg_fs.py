"""FedSDG-FS (fedsdg-fs.md): the dual gates against a hand computation, the Gini initialisation
(Algorithm 1) under Paillier against the clear computation, and what crosses in a run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import verticalfs
from verticalfs.crypto import EncryptedArray, generate_keypair
from verticalfs.exceptions import CryptoError
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.fedsdg_fs import gini as G
from verticalfs.methods.fedsdg_fs.gates import GatedMLP, gate_probability, gini_init
from verticalfs.nn.models import MLP

SMALL = {"epochs": 3, "batch_size": 64, "hidden": (16, 8), "key_bits": 768, "insecure": True}


# ----------------------------------------------------------------------------------- gates
def _linear_gated(d=5, e=3, mu=None, omega=None, seed=0):
    torch.manual_seed(seed)
    mlp = MLP(d, (), e)  # h = x W^T + b: the chain rule by hand stays short
    mu = torch.tensor([0.3, -0.2, 0.9, 1.4, 0.5]) if mu is None else mu
    omega = torch.tensor([0.6, -0.4, 1.2]) if omega is None else omega
    return GatedMLP(mlp, mu, omega, 0.5, torch.Generator().manual_seed(seed))


def test_gates_forward_and_monte_carlo_gradient_by_hand():
    model = _linear_gated()
    model.train()
    state = model.generator.get_state()
    rho = torch.randn(5, generator=torch.Generator().set_state(state)) * 0.5
    gen2 = torch.Generator().set_state(state)
    torch.randn(5, generator=gen2)
    gamma = torch.randn(3, generator=gen2) * 0.5
    x = torch.randn(4, 5)
    c = torch.randn(4, 3)
    out = model(x)
    mu, om = model.mu.detach(), model.omega.detach()
    s = torch.clamp(mu + rho, 0, 1)
    q = torch.clamp(om + gamma, 0, 1)
    W, b = model.mlp.input_layer.weight.detach(), model.mlp.input_layer.bias.detach()
    h = (x * s) @ W.T + b
    torch.testing.assert_close(out, h * q)
    (out * c).sum().backward()
    # equation (5) with one sample: dL/dmu_i = sum_n sum_j c_nj q_j W_ji x_ni where 0 < mu + rho < 1
    inside_s = ((mu + rho) > 0) & ((mu + rho) < 1)
    g_mu = ((c * q) @ W * x).sum(0) * inside_s
    inside_q = ((om + gamma) > 0) & ((om + gamma) < 1)
    g_om = (c * h).sum(0) * inside_q
    torch.testing.assert_close(model.mu.grad, g_mu)
    torch.testing.assert_close(model.omega.grad, g_om)


def test_clipped_gates_have_zero_gradient_outside_the_interval():
    model = _linear_gated(mu=torch.tensor([-5.0, 5.0, 0.5, 0.5, 0.5]), omega=torch.tensor([-5.0, 5.0, 0.5]))
    model.train()
    out = model(torch.randn(6, 5))
    out.sum().backward()
    assert model.mu.grad[0] == 0 and model.mu.grad[1] == 0  # closed (s = 0) and saturated (s = 1)
    assert model.omega.grad[0] == 0 and model.omega.grad[1] == 0
    assert torch.all(out[:, 0] == 0)  # a closed component is exactly 0 for the whole batch


def test_deterministic_gates_at_inference():
    model = _linear_gated()
    model.eval()
    x = torch.randn(3, 5)
    W, b = model.mlp.input_layer.weight.detach(), model.mlp.input_layer.bias.detach()
    s = torch.clamp(model.mu.detach(), 0, 1)
    q = torch.clamp(model.omega.detach(), 0, 1)
    torch.testing.assert_close(model(x).detach(), ((x * s) @ W.T + b) * q)
    torch.testing.assert_close(model(x).detach(), model(x).detach())  # no noise


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_regularizer_and_its_gradient_by_hand(reduce):
    model = _linear_gated()
    r = model.regularizer(reduce)
    Phi = lambda t: 0.5 * (1 + math.erf(t / math.sqrt(2)))  # noqa: E731
    mu, om = model.mu.detach().tolist(), model.omega.detach().tolist()
    k_mu = k_om = 1 if reduce == "sum" else len(mu) + len(om)  # one mean over both kinds of gate
    want = sum(Phi(m / 0.5) for m in mu) / k_mu + sum(Phi(w / 0.5) for w in om) / k_om
    assert r.item() == pytest.approx(want, rel=1e-6)
    r.backward()
    pdf = lambda t: math.exp(-t * t / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    np.testing.assert_allclose(model.mu.grad.numpy(), [pdf(m / 0.5) / 0.5 / k_mu for m in mu], rtol=1e-5)
    np.testing.assert_allclose(model.omega.grad.numpy(), [pdf(w / 0.5) / 0.5 / k_om for w in om], rtol=1e-5)
    assert gate_probability(torch.tensor(0.0), 0.5).item() == 0.5


def test_keep_inputs_shrinks_layer_and_gate_together():
    model = _linear_gated()
    mu = model.mu.detach().clone()
    model.keep_inputs([0, 2, 4])
    assert model.input_layer.in_features == 3 and torch.equal(model.mu.detach(), mu[[0, 2, 4]])
    model.keep_outputs([1])
    assert model.n_outputs == 1 and model.omega.shape == (1,)


def test_gini_init_is_proportional_to_inverse_gini():
    g = np.array([0.2, 0.4, 0.5, 0.25])
    mu = gini_init(g, 1.0)
    np.testing.assert_allclose(mu * g, np.full(4, 0.2))  # mu_j * G_j constant
    assert mu.max() == 1.0 and mu.argmax() == 0
    assert gini_init(np.array([0.0, 0.5]), 2.0).tolist() == [2.0, 2.0]


# ------------------------------------------------------------------------------------ Gini
def test_gini_by_hand():
    y = np.array([0, 0, 1, 1, 0, 1])
    X = np.stack([y.astype(float), np.zeros(6), np.arange(6.0)], 1)
    g = G.gini_clear(X, y, 2, n_bins=2)
    assert g[0] == pytest.approx(0.0)  # separates the classes
    assert g[1] == pytest.approx(0.5)  # constant: one bin, 1 - (1/4 + 1/4)
    # third column, two bins {0,1,2} {3,4,5}: classes (0,0,1) and (1,0,1): G = 2 * 1/2 * (1 - 5/9)
    assert g[2] == pytest.approx(4 / 9)


@pytest.mark.parametrize("c, source", [(2, "rows"), (3, "cells"), (12, "rows"), (12, "cells")])
def test_algorithm_1_under_paillier_equals_the_clear_computation(c, source):
    """Packed: a row's classes share a ciphertext (7 slots of 65 bits in a 512-bit key: 12
    classes take two), and the result is the clear Gini score exactly, with the cross term from
    either source."""
    rng = np.random.default_rng(3)
    n, d, B = 240, 6, 10
    y = rng.integers(0, c, n)
    X = rng.normal(size=(n, d))
    X[:, 0] += 2 * y
    X[:, 4] = rng.integers(0, 3, n)  # fewer distinct values than bins: empty bins weigh 0
    pub, priv = generate_keypair(512, insecure=True)
    layout = G.LabelLayout.for_key(pub, 64, c)
    assert layout.slot_bits == 65 and layout.slots == 7 and layout.per_row == -(-c // 7)
    A = G.encrypt_labels(priv, y, layout)
    assert A.shape == (n, layout.per_row)
    codes = G.bin_codes(X, B)
    masked, r = G.mask_counts(G.encrypted_counts(A, codes, B), 64, layout)
    assert masked.shape == (d, B, layout.per_row)
    # the label holder sees only masked counts: none equals a true count
    true = G.class_counts(codes, y, c, B)
    u = layout.unpack(masked.decrypt_mantissas(priv))
    assert u.shape == (d, B, c)
    assert np.all(u - true.astype(object) == r) and not np.any(u == true.astype(object))
    sq, cls = G.squares_of_masked(priv, masked, layout, per_class=source == "cells")
    assert sq.shape == (d, B)
    sizes = G.bin_sizes(codes, B)
    if source == "cells":
        assert cls.shape == (d, B, c - 1)
        enc = G.encrypted_gini(sq, r, sizes, masked_classes=cls)
    else:
        assert cls is None
        counts = G.encrypted_counts(G.encrypt_class_rows(priv, y, c), codes, B)
        enc = G.encrypted_gini(sq, r, sizes, class_counts=counts)
    g = enc.decrypt(priv)
    np.testing.assert_allclose(g, G.gini_clear(X, y, c, B), atol=1e-12)
    assert g.argmin() == 0


def test_cross_term_source_is_the_cheaper():
    assert G.cross_term_source(1000, 5000) == "rows" and G.cross_term_source(5000, 1000) == "cells"


def test_label_layout_packs_and_unpacks_wide_slots_exactly():
    layout = G.LabelLayout(1021, 64, 20)  # 15 slots of 65 bits, two plaintexts per row
    rng = np.random.default_rng(0)
    v = G.random_masks((7, 3, 20), 65)  # every bit of a slot used
    v[0, 0, :] = (1 << 65) - 1
    packed = layout.pack(v)
    assert packed.shape == (7, 3, 2) and all(int(x).bit_length() <= 15 * 65 for x in packed.ravel())
    assert np.array_equal(layout.unpack(packed), v)
    small = rng.integers(0, 100, (4, 20))
    assert np.array_equal(layout.unpack(layout.pack(small)), small.astype(object))
    with pytest.raises(CryptoError, match="outside its slots"):
        layout.unpack(np.array([[-1, 0]], dtype=object))


# ------------------------------------------------------------------------------------- runs
@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=2, noise=0.5, seed=0)


def _run(data, name="fedsdg-fs", **kw):
    fed = Federation.in_process(data)
    m = create(name, seed=0, **{**SMALL, **kw} if name == "fedsdg-fs" else {**{k: SMALL[k] for k in ("epochs", "batch_size", "hidden")}, **kw})
    m.fit(fed)
    return m, fed


def test_secure_and_clear_initialisation_agree_and_set_mu(data):
    sec, fed_s = _run(data, epochs=0)
    clr, fed_c = _run(data, epochs=0, secure=False)
    for p in data.party_names:
        np.testing.assert_allclose(sec.gini_[p], clr.gini_[p], atol=1e-12)
        X = np.asarray(data.party(p).X["train"], dtype=np.float64)
        np.testing.assert_allclose(sec.gini_[p], G.gini_clear(X, data.labels.y["train"], 2), atol=1e-12)
    kinds = {r.kind for r in fed_s.ledger.records() if r.phase == "pretrain"}
    assert kinds == {"GiniLabels", "MaskedCounts", "SquaredCounts", "EncryptedGini", "GiniScores"}
    assert "PlainGiniLabels" in {r.kind for r in fed_c.ledger.records()}
    assert clr.disclosures == {"labels_to_parties": ("PlainGiniLabels",)} and sec.disclosures == {}
    # mu at each party: proportional to 1 / G, the lowest impurity at init_scale
    for p in data.party_names:
        role = fed_s.local_runtime(p).role
        mu = role.model.mu.detach().numpy()
        np.testing.assert_allclose(mu, gini_init(sec.gini_[p], 0.5), rtol=1e-6)


def many_classes(c: int, d: int):
    """``c`` classes, 240 rows, ``d`` features over 2 parties (seeded make_classification)."""
    import pandas as pd
    from sklearn.datasets import make_classification

    from verticalfs.data.table import Table

    X, y = make_classification(n_samples=240, n_features=d, n_informative=5, n_redundant=2, n_classes=c,
                               n_clusters_per_class=1, random_state=0)
    t = Table(name=f"{c}-classes", X=pd.DataFrame(X, columns=[f"x{j}" for j in range(d)]), y=y.astype(np.int64),
              task="multiclass", class_names=[str(k) for k in range(c)])
    return verticalfs.build_data(t, parties=2, seed=0)


@pytest.mark.parametrize("c, d, per_row, source", [(2, 8, 1, "cells"), (7, 8, 1, "cells"), (12, 8, 2, "cells"),
                                                    (7, 24, 1, "rows")])
def test_algorithm_1_sends_one_packed_ciphertext_per_row_whatever_the_classes(c, d, per_row, source):
    """The ledger: the packed label matrix is ceil(c / 7) ciphertexts a row (7 slots of 65 bits in a
    512-bit key; 31 in a 2048-bit one), not c, and the masked counts one per (feature, bin), not c.
    On a wide table (more cells than rows) the cross term's c - 1 per row join the labels, cheaper
    than c - 1 per cell afterwards. The scores are the clear ones."""
    data = many_classes(c, d)
    fed = Federation.in_process(data)
    sec = create("ms-gini", seed=0, key_bits=512, insecure=True).fit(fed)
    clr = create("ms-gini", seed=0, secure=False).fit(Federation.in_process(data))
    n = len(data.labels.y["train"])
    assert (n <= d * 10) == (source == "rows")
    width = 2 * 512 // 8  # bytes of one ciphertext
    labels = [r for r in fed.ledger.records() if r.kind == "GiniLabels"]
    assert len(labels) == len(data.party_names)
    for r in labels:  # the payload: the ciphertexts and the public key (half a ciphertext)
        assert r.payload // width == n * per_row + (n * (c - 1) if source == "rows" else 0)
    squares = sum(r.payload for r in fed.ledger.records() if r.kind == "SquaredCounts")
    assert squares // width == d * 10 * (1 if source == "rows" else c)
    masked = [r for r in fed.ledger.records() if r.kind == "MaskedCounts"]
    for r, p in zip(masked, data.party_names, strict=True):  # one ciphertext per (feature, bin), not per class
        assert r.payload // width == data.party(p).n_features * 10 * per_row
    for p in data.party_names:
        np.testing.assert_allclose(sec.info_["gini"][p], clr.info_["gini"][p], atol=1e-12)


def test_only_open_components_cross_and_closed_features_leave(data):
    m, fed = _run(data, epochs=4, secure=False, lam=3.0, omega_init=0.2)
    for p in data.party_names:
        role = fed.local_runtime(p).role
        mu = role.model.mu.detach().numpy()
        assert role.model.input_layer.in_features == len(role.data.kept) == int(m.support_[p].sum())
        assert np.all(mu > 0)  # CloseGates removed every feature whose deterministic gate is 0
    assert sum(m.support_[p].sum() for p in data.party_names) < sum(len(m.support_[p]) for p in data.party_names)
    # every embedding message carries exactly its open components (4 bytes each) per row
    n_test = len(data.labels.y["test"])
    open_total = sum(m.info_["components_open"].values())
    assert open_total < 2 * 8
    recs = [r for r in fed.ledger.records() if r.kind == "GatedEmbeddings" and r.phase == "eval"]
    last = max(r.round for r in recs)
    test_payloads = sorted(r.payload for r in recs if r.round == last)
    assert sum(test_payloads) >= n_test * open_total * 4
    dense = create("vfl", seed=0, epochs=1, batch_size=64, hidden=(16, 8))
    fed2 = Federation.in_process(data)
    dense.fit(fed2)
    assert fed.ledger.bytes_where(phase="eval") / (m.history_[-1]["epoch"] + 1) < fed2.ledger.bytes_where(phase="eval") / 2


def test_original_gate_has_no_embedding_gate_and_no_gini(data):
    m, fed = _run(data, name="original-gate")
    kinds = {r.kind for r in fed.ledger.records()}
    assert not kinds & {"GiniLabels", "PlainGiniLabels"}
    for p in data.party_names:
        role = fed.local_runtime(p).role
        assert role.model.omega is None and role.model.mu is not None


# -------------------------------------------------------------------------------- baselines
@pytest.fixture(scope="module")
def wine():
    return verticalfs.build_data("wine", parties=2, seed=0)


def test_sffs_under_paillier_computes_the_f_statistic(wine):
    from sklearn.feature_selection import f_classif

    sec = create("sffs", seed=0, key_bits=512, insecure=True, ratio=0.5)
    fed = Federation.in_process(wine)
    sec.fit(fed)
    clr = create("sffs", seed=0, secure=False, ratio=0.5)
    clr.fit(Federation.in_process(wine))
    for p in wine.party_names:
        F = f_classif(np.asarray(wine.party(p).X["train"], float), wine.labels.y["train"])[0]
        np.testing.assert_allclose(sec.feature_scores_[p], F, rtol=1e-5)
        np.testing.assert_allclose(clr.feature_scores_[p], F, rtol=1e-12)
    assert sec.selected_ == clr.selected_
    total = sum(len(v) for v in sec.support_.values())
    assert len(sec.selected_) == round(total / 2)
    allF = np.concatenate([sec.feature_scores_[p] for p in wine.party_names])
    chosen = np.concatenate([sec.support_[p] for p in wine.party_names])
    assert allF[chosen].min() >= allF[~chosen].max()  # the top half by F
    kinds = {r.kind for r in fed.ledger.records() if r.phase == "selection"}
    assert kinds == {"FLabels", "MaskedClassSums", "WeightedSquares", "EncryptedEta"}
    assert sec.disclosures.get("labels_to_parties") is None and clr.disclosures["labels_to_parties"] == ("PlainFLabels",)


def test_ms_gini_keeps_the_lowest_impurity_half(wine):
    m = create("ms-gini", seed=0, key_bits=512, insecure=True, ratio=0.25)
    m.fit(Federation.in_process(wine))
    g = np.concatenate([np.asarray(m.info_["gini"][p]) for p in wine.party_names])
    chosen = np.concatenate([m.support_[p] for p in wine.party_names])
    assert chosen.sum() == round(0.25 * len(g))
    assert g[chosen].max() <= g[~chosen].min()
    for p in wine.party_names:
        X = np.asarray(wine.party(p).X["train"], float)
        np.testing.assert_allclose(m.info_["gini"][p], G.gini_clear(X, wine.labels.y["train"], 3), atol=1e-12)


def test_all_features_keeps_every_feature_with_fedsdg_settings(wine):
    m = create("all-features", seed=0, epochs=1)
    assert (m.params.lr, m.params.batch_size, m.params.top_hidden) == (0.03, 128, (16,))
    m.fit(Federation.in_process(wine))
    assert all(v.all() for v in m.support_.values())


# --------------------------------------------------------------------- secure training (Alg. 2-3)
def test_row_blocks_minimise_the_backwards_ciphertexts():
    from verticalfs.methods.fedsdg_fs.secure import row_blocks

    def cost(R, n=128, k=16):
        return k * R + -(-n // R)

    assert row_blocks(23, 8, 128, 16) == 2  # at most 2 blocks of 8 in 23 slots
    assert row_blocks(23, 1, 128, 16) == 3 and cost(3) == 91 < cost(23) == 374  # not the 23 that fit
    assert row_blocks(23, 12, 128, 16) == 1
    for e in range(1, 24):
        R = row_blocks(23, e, 100, 7)
        assert R <= max(1, 23 // e) and cost(R, 100, 7) == min(cost(r, 100, 7) for r in range(1, max(1, 23 // e) + 1))


def test_packed_combination_is_slot_wise_and_refuses_overflow():
    from verticalfs.crypto import SlotPacking, packed_combination
    from verticalfs.exceptions import CryptoError

    pub, priv = generate_keypair(512, insecure=True)
    pk = SlotPacking(64, 7, 0)
    rng = np.random.default_rng(0)
    V = rng.integers(-1000, 1000, size=(3, 7))  # 3 ciphertexts of 7 signed slots
    cts = EncryptedArray.encrypt(priv, pk.pack(V.ravel()), precision=0)
    K = rng.integers(-50, 50, size=(3, 4))
    out, bound = packed_combination(cts, K, 1000, pk)
    got = pk.unpack(out.decrypt_mantissas(priv).ravel().tolist(), 4 * 7).reshape(4, 7)
    np.testing.assert_array_equal(got, K.T @ V)  # every slot: the same combination of the inputs' slots
    assert bound == int(np.abs(K).sum(0).max()) * 1000
    with pytest.raises(CryptoError, match="slot"):
        packed_combination(cts, np.full((3, 1), 2**40), 2**30, pk)


# the tests of `secure_and_plain` (a module fixture) form one xdist group: a second worker running some of them
# would repeat its run
SHARED_SECURE_AND_PLAIN = pytest.mark.xdist_group("fedsdg-secure-and-plain")


@pytest.fixture(scope="module")
def secure_and_plain(data):
    kw = dict(epochs=2, batch_size=64, hidden=(16, 8), key_bits=768, insecure=True, precision=18, value_bits=10,
              prune=False)  # 88-bit slots: 8 per 768-bit key, masks hiding >= 40 bits
    runs = {}
    for secure in (False, True):
        fed = Federation.in_process(data, trace=True)
        m = create("fedsdg-fs", seed=0, secure=secure, **kw)
        m.fit(fed)
        runs[secure] = (m, fed)
    return runs


@SHARED_SECURE_AND_PLAIN
def test_secure_training_computes_the_plaintext_model(secure_and_plain, data):
    (mp, fp), (ms, fs) = secure_and_plain[False], secure_and_plain[True]
    for p in data.party_names:  # every parameter of every party: bottom model and both gates
        a, b = fp.local_runtime(p).role.model.state_dict(), fs.local_runtime(p).role.model.state_dict()
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=1e-4, rtol=1e-4, msg=f"{p} {k}")
    tp, ts = mp.trainer_, ms.trainer_
    start = 0
    for p in data.party_names:  # w = W~ - eps_acc, which nobody in the protocol can compute
        e = tp.embedding_dims[p]
        w_plain = tp.top.input_layer.weight.detach().numpy()[:, start:start + e]
        eps = fs.local_runtime(p).role.crypto.eps / 2.0 ** 18
        np.testing.assert_allclose(ts.true_weights(p, eps), w_plain, atol=1e-4)
        assert np.abs(ts.server[p].W - w_plain).max() > 0.1  # the server's W~ is not w
        start += e
    for k, v in tp.top.state_dict().items():
        if k != "net.0.weight":
            torch.testing.assert_close(v, ts.top.state_dict()[k], atol=1e-4, rtol=1e-4)
    assert [round(h["train_loss"], 4) for h in mp.history_ if "train_loss" in h] == \
        [round(h["train_loss"], 4) for h in ms.history_ if "train_loss" in h]


@SHARED_SECURE_AND_PLAIN
def test_secure_mode_sends_no_label_feature_or_plain_embedding(secure_and_plain, data):
    """The message audit: every message of the secure run decoded; no label reaches a party, no
    raw column and no plaintext embedding (the parties' g in any split) reaches the label holder,
    whose only plaintext views are masked (z + eps_s) or the interactive outputs."""
    from tests.test_privacy import Reference, arrays_in, batch_plans
    from verticalfs.names import LABEL_HOLDER
    from verticalfs.transport.serde import decode

    ms, fs = secure_and_plain[True]
    kinds = {(r.sender == LABEL_HOLDER, r.kind) for r in fs.ledger.records()}
    assert (False, "SecureEmbeddings") in kinds and (False, "GatedEmbeddings") not in kinds
    assert (False, "Embeddings") not in kinds and (True, "Gradients") not in kinds
    decoded = [(s, r, decode(raw)) for s, r, raw in fs.channel.messages]
    # the privacy audit's detectors: raw, permuted, scaled or binned columns and labels in any coding
    ref = Reference(data, batch_plans(decoded, len(data.labels.y["train"])))
    n_checked = 0
    for _sender, receiver, d in decoded:
        for a in arrays_in(d.msg):
            n_checked += 1
            if receiver != LABEL_HOLDER:
                assert not ref.label_findings(a), type(d.msg).__name__
            else:
                assert not ref.column_findings(a), type(d.msg).__name__  # whole splits, as before
    assert n_checked > 0
    # the label holder never receives a plaintext float array from a party in secure mode
    for _sender, receiver, msg in fs.channel.decoded():
        if receiver == LABEL_HOLDER and type(msg).__name__ in ("ForwardShares", "NoisyWeightGradient"):
            assert np.asarray(msg.values).dtype == np.int64  # masked integers
            assert np.abs(np.asarray(msg.values)).max() > 2 ** 40  # dominated by the masks


def test_vflfs_keeps_each_partys_top_half_by_group_norm(data):
    m = create("vflfs", seed=0, epochs=4, batch_size=64, hidden=(16, 8))
    fed = Federation.in_process(data)
    m.fit(fed)
    for p in data.party_names:
        d = len(m.support_[p])
        assert m.support_[p].sum() == round(0.5 * d)
        role = fed.local_runtime(p).role
        assert role.decoder is None and role.model.input_layer.in_features == round(0.5 * d)
        norms = role.scores  # at the selection: the kept features have the largest norms
        kept = np.zeros(d, dtype=bool)
        kept[np.argsort(-norms, kind="stable")[: round(0.5 * d)]] = True
        np.testing.assert_array_equal(m.support_[p], kept)
    assert m.info_["select_epoch"] == 2


def test_unpacked_secure_mode_computes_the_same_model_and_costs_more_bytes():
    data = verticalfs.build_data("wine", parties=2, seed=0)
    kw = dict(epochs=1, batch_size=64, hidden=(8,), key_bits=512, insecure=True, precision=18, value_bits=10,
              prune=False, gini_init=False, embedding_dim=4)  # 88-bit slots: a row's 4 components in one 512-bit key
    runs = {}
    for packed in (True, False):
        fed = Federation.in_process(data)
        m = create("fedsdg-fs", seed=0, packed=packed, **kw)
        m.fit(fed)
        runs[packed] = (m, fed)
    (mp, fp), (_, fu) = runs[True], runs[False]
    for p in data.party_names:
        a, b = fp.local_runtime(p).role.model.state_dict(), fu.local_runtime(p).role.model.state_dict()
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=1e-4, rtol=1e-4)
    assert fu.ledger.bytes_where(phase="train") > 3 * fp.ledger.bytes_where(phase="train")
    # a securely trained model predicts through the protocol, and refuses to be saved as a plain model
    proba = mp.predict_proba(fp, "test")
    assert proba.shape == (len(data.labels.y["test"]), 3) and np.allclose(proba.sum(1), 1)
    from verticalfs.exceptions import ConfigError
    assert mp.cannot_save() is not None
    with pytest.raises(ConfigError, match="secure=true cannot be saved"):
        mp.export_holder()


@pytest.mark.parametrize("prune_steps, pruned", [(1, True), (20, False)])
def test_an_input_leaves_only_after_enough_consecutive_closed_draws(wine, prune_steps, pruned):
    """One batch per epoch and no penalty: every gate stays near its start 0.5, closed in about 16 %
    of the draws. One closed draw is not evidence enough (prune_steps = 20 keeps every feature);
    with prune_steps = 1 features leave at random."""
    m = create("original-gate", seed=0, epochs=6, batch_size=512, hidden=(8,), lam=0.0, prune_steps=prune_steps)
    fed = Federation.in_process(wine)
    m.fit(fed)
    kept = sum(int(v.sum()) for v in m.support_.values())
    total = sum(len(v) for v in m.support_.values())
    assert (kept < total) == pruned


def test_secure_run_refuses_to_save_before_training(wine, tmp_path):
    from verticalfs.exceptions import ConfigError

    with pytest.raises(ConfigError, match="cannot be saved"):
        verticalfs.run("fedsdg-fs", wine, seed=0, params={"epochs": 1, "key_bits": 768, "insecure": True},
                       save_model=tmp_path / "m")
    assert not (tmp_path / "m").exists()


# ----------------------------------------------------------------- class-scaled defaults (issue 40)
@pytest.fixture(scope="module")
def digits():
    return verticalfs.build_data("digits", parties=2, seed=0)


@pytest.mark.parametrize("name", ["all-features", "vflfs", "original-gate", "fedsdg-fs"])
def test_top_width_and_lr_follow_the_classes(name, digits, wine):
    """10 classes: the top model's hidden layer is 2 x 10 = 20 wide and Adam runs at 0.03 x 3 / 10;
    wine's 3 classes keep FedSDG-FS's 16 units and 0.03; 0 turns either rule off."""
    extra = {"secure": False} if name == "fedsdg-fs" else {}
    built = {}
    for key, data, params in (("digits", digits, {}), ("wine", wine, {}),
                              ("off", digits, {"top_per_class": 0, "lr_classes": 0})):
        m = create(name, seed=0, epochs=0, **extra, **params)
        m.fit(Federation.in_process(data))
        t = m.trainer_
        first = next(mod for mod in t.top.modules() if isinstance(mod, torch.nn.Linear))
        built[key] = (t.config.top_hidden, round(t.config.lr, 6), first.out_features)
    assert built == {"digits": ((20,), 0.009, 20), "wine": ((16,), 0.03, 16), "off": ((16,), 0.03, 16)}


@pytest.mark.parametrize("name", ["original-gate", "fedsdg-fs"])
def test_gates_keep_the_papers_rate_and_their_penalty_follows_the_classes(name, digits, wine):
    """Issue 40: beyond 3 classes the networks' rate is lowered (lr x 3 / classes), but the gates'
    means keep ``lr`` (0.03 on digits, while the weights run at 0.009) and the penalty is lam x 3 /
    classes (0.03), and FedSDG-FS's embedding gates start at 1.0; wine's 3 classes build one
    optimizer at 0.03 with lam 0.1 and omega 0.5 as before; the rules turn off with ``gate_lr`` and
    ``lam_classes`` 0 / given."""
    extra = {"secure": False} if name == "fedsdg-fs" else {}
    built = {}
    for key, data, params in (("digits", digits, {}), ("wine", wine, {}),
                              ("off", digits, {"gate_lr": 0.009, "lam_classes": 0})):
        m = create(name, seed=0, epochs=0, **extra, **params)
        fed = Federation.in_process(data)
        m.fit(fed)
        role = fed.local_runtime(m.trainer_.parties[0]).role
        gates = {id(p) for p in (role.model.mu, role.model.omega) if p is not None}
        rates = sorted({round(g["lr"], 6) for g in role.optimizer.param_groups
                        for p in g["params"] if id(p) in gates})
        others = sorted({round(g["lr"], 6) for g in role.optimizer.param_groups
                         for p in g["params"] if id(p) not in gates})
        built[key] = (rates, others, round(role.spec.lam, 6), float(role.model.omega.detach()[0]) if name == "fedsdg-fs" else None)
    omega = {"digits": 1.0, "wine": 0.5, "off": 0.5} if name == "fedsdg-fs" else dict.fromkeys(built)
    assert built == {"digits": ([0.03], [0.009], 0.03, omega["digits"]), "wine": ([0.03], [0.03], 0.1, omega["wine"]),
                     "off": ([0.009], [0.009], 0.1, omega["off"])}
