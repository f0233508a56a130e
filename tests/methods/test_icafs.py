"""ICAFS end to end: the federated synthesis (what crosses, what each side holds), the selection of
input features, the ablations, saving and predicting, and bad settings."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import verticalfs
from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.federation import Federation
from verticalfs.methods import create, get
from verticalfs.methods.icafs import messages as M
from verticalfs.methods.icafs.role import explained_scores, path_scores
from verticalfs.names import LABEL_HOLDER

SMALL = dict(get("icafs").test_params)


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=2, noise=1.0, seed=0)


# the tests of `traced` (a module fixture) form one xdist group: a second worker running some of them
# would repeat its run
SHARED_TRACED = pytest.mark.xdist_group("icafs-traced")


@pytest.fixture(scope="module")
def traced(data):
    fed = Federation.in_process(data, trace=True)
    m = create("icafs", seed=0, **{**SMALL, "synth_steps": 4})
    m.fit(fed)
    return m, fed


@SHARED_TRACED
def test_synthesis_leaves_every_block_with_its_owner(traced, data):
    """Stage 1's messages are the ones Algorithm 1 needs, of the widths the protocol fixes: the
    label holder gets critic features (never a row of a party's columns), the parties get codes
    (never a label); every party ends with its own synthetic block, the label holder with Y~."""
    m, fed = traced
    p = m.params
    kinds_up, kinds_down = set(), set()
    n_train = len(data.labels.y["train"])
    for sender, receiver, msg in fed.channel.decoded():
        kind = type(msg).__name__
        if sender == LABEL_HOLDER and isinstance(msg, (M.CriticRequest, M.GeneratorRequest, M.Synthesize)):
            kinds_down.add(kind)
            assert msg.codes.shape[1] == p.code_dim
            if isinstance(msg, M.CriticRequest):
                assert msg.rows.dtype == np.int64 and len(np.unique(msg.rows)) == len(msg.rows)
        elif receiver == LABEL_HOLDER and isinstance(msg, (M.CriticFeatures, M.CodeGradients)):
            kinds_up.add(kind)
            for a in ((msg.real, msg.fake) if isinstance(msg, M.CriticFeatures) else (msg.codes,)):
                assert a.shape[1] in (p.feature_dim, p.code_dim) and a.dtype == np.float32
    assert kinds_down == {"CriticRequest", "GeneratorRequest", "Synthesize"}
    assert kinds_up == {"CriticFeatures", "CodeGradients"}
    pretrain = {r.kind for r in fed.ledger.records() if r.phase == "pretrain"}
    assert {"CriticRequest", "CriticFeatures", "CriticGradients", "GeneratorRequest", "GeneratorGradients",
            "CodeGradients", "Synthesize", "Synthesized"} <= pretrain
    for q in data.party_names:
        role = fed.local_runtime(q).role
        assert role.synthetic.shape[0] == n_train
        assert not hasattr(role, "y_syn")
    assert m.trainer_.y_syn.shape == (n_train,)
    assert m.info_["synthesis_bytes"] == fed.ledger.bytes_where(phase="pretrain")


@SHARED_TRACED
def test_synthetic_block_is_in_the_party_columns(traced, data):
    """Each party's synthetic block is decoded to its own columns: inside the range the party's
    normaliser can produce (mode means +- 4 sigma), one column per feature it used."""
    m, fed = traced
    for q in data.party_names:
        role = fed.local_runtime(q).role
        norm = role.synth.norm
        S = role.synth.synthetic
        assert S.shape[1] == norm.n_features_in_ and np.all(np.isfinite(S))
        for j, c in enumerate(norm.columns):
            if c.kind == "continuous":
                lo, hi = (c.means - 4 * c.stds).min(), (c.means + 4 * c.stds).max()
                assert lo - 1e-4 <= S[:, j].min() and S[:, j].max() <= hi + 1e-4
            else:
                assert set(np.unique(S[:, j])) <= set(c.categories.astype(np.float32))


@SHARED_TRACED
def test_party_rejects_malformed_synthesis_messages(traced, data):
    m, fed = traced
    role = fed.local_runtime(data.party_names[0]).role
    with pytest.raises(ProtocolError, match="rows"):
        role.synth.critic_features(np.array([0, 10**6]), np.zeros((2, m.params.code_dim), dtype=np.float32))
    with pytest.raises(ProtocolError, match="codes"):
        role.synth.generator_features(np.zeros((2, m.params.code_dim + 1), dtype=np.float32))
    with pytest.raises(ProtocolError, match="NaN"):
        role.synth.synthesize(np.full((2, m.params.code_dim), np.nan, dtype=np.float32))
    with pytest.raises(ProtocolError, match="without its forward pass"):
        role.synth.critic_step(np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32))
    from verticalfs.methods.icafs.synthesis import PartySynthesis

    with pytest.raises(ProtocolError, match="critic_norm"):  # a spec from the label holder is untrusted
        PartySynthesis(np.random.default_rng(0).normal(size=(20, 3)), name="p", code_dim=4, feature_dim=4, channels=4,
                       arch="mlp", lr=1e-3, max_modes=2, seed=0, critic_norm="batchnorm")


@SHARED_TRACED
def test_adopting_a_synthesis_checks_its_shape_first(traced, data):
    """The seam Algorithm 1 ends in (and the benchmark's reuse and oracle use) refuses a block or
    labels that do not fit, before it changes anything."""
    m, fed = traced
    role = fed.local_runtime(data.party_names[0]).role
    before = role.synthetic
    n_cols = len(role.data.kept)
    with pytest.raises(ConfigError, match=rf"party '{data.party_names[0]}'.*shape \(5, {n_cols + 1}\)"):
        role.adopt_synthetic(torch.zeros(5, n_cols + 1))
    assert role.synthetic is before
    tr, y_before = m.trainer_, m.trainer_.y_syn
    for bad in (np.array([0, 1, tr.labels.n_classes]), np.array([-1, 0]), np.zeros((2, 2), dtype=int), np.array([], dtype=int)):
        with pytest.raises(ConfigError, match="synthetic labels"):
            tr.adopt_synthesis(bad, {})
    assert tr.y_syn is y_before


def test_path_scores_by_hand():
    from verticalfs.nn.models import MLP

    torch.manual_seed(0)
    model = MLP(3, (4, 5), 2, "relu")
    comp = np.array([False, True])
    W = [lin.weight.detach().abs().numpy() for lin in model.linears]
    A = W[2][1:2] @ W[1] @ W[0]
    np.testing.assert_allclose(path_scores(model, comp), np.linalg.norm(A, axis=0), rtol=1e-5)


def test_explained_scores_by_hand():
    """With ``own=True`` each feature's share is the R^2 of its least squares fit on the kept
    components (with an intercept); a constant feature scores 0; the blocks change nothing."""
    from verticalfs.nn.models import MLP

    torch.manual_seed(0)
    model = MLP(6, (8, 8), 4, "relu")
    X = torch.randn(300, 6)
    X[:, 5] = 0.25  # constant
    comp = np.array([True, False, True, True])
    with torch.no_grad():
        H = model(X).numpy()[:, comp].astype(np.float64)
    A = np.column_stack([H, np.ones(len(H))])
    want = []
    for j in range(6):
        x = X[:, j].numpy().astype(np.float64)
        if x.std() == 0:
            want.append(0.0)
            continue
        res = x - A @ np.linalg.lstsq(A, x, rcond=None)[0]
        want.append(1 - (res @ res) / ((x - x.mean()) @ (x - x.mean())))
    got = explained_scores(model, X, comp, own=True)
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(explained_scores(model, X, comp, own=True, block=7), got, atol=1e-7)
    np.testing.assert_allclose(explained_scores(model, X, comp, block=7), explained_scores(model, X, comp), atol=1e-7)
    assert model.training  # left as it was


def test_explained_scores_take_out_the_features_own_contribution():
    """For a linear encoder ``H = X W' + b`` the share without the feature's own contribution is
    exactly ``c' C^+ c / var`` with ``c = cov(H, x_j) - W[:, j] var_j``: by hand, and an
    independent column with a large weight scores ~0 while its plain R^2 is large."""
    from verticalfs.nn.models import MLP

    rng = np.random.default_rng(1)
    n = 4000
    z = rng.normal(size=(n, 1))
    X = np.hstack([z + 0.3 * rng.normal(size=(n, 3)), rng.normal(size=(n, 1))])
    model = MLP(4, (), 2, "relu")
    with torch.no_grad():
        model.input_layer.weight[:] = torch.tensor([[0.3, 0.3, 0.0, 2.0], [0.0, 0.2, 0.4, 0.0]])
    H = X @ model.input_layer.weight.detach().numpy().T.astype(np.float64)
    Xc, Hc = X - X.mean(0), H - H.mean(0)
    C = Hc.T @ Hc / n
    want = []
    for j in range(4):
        var = Xc[:, j] @ Xc[:, j] / n
        c = Hc.T @ Xc[:, j] / n - model.input_layer.weight.detach().numpy()[:, j] * var
        want.append(c @ np.linalg.solve(C, c) / var)
    got = explained_scores(model, torch.from_numpy(X.astype(np.float32)), np.ones(2, dtype=bool))
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert got[3] < 0.01 < 0.5 < explained_scores(model, torch.from_numpy(X.astype(np.float32)),
                                                   np.ones(2, dtype=bool), own=True)[3]
    assert got[:3].min() > 0.1


def test_explained_ranking_puts_noise_below_signal_where_weights_do_not():
    """The case the rule is for (issue 53): twenty real columns are noisy mixtures of two latent
    factors, forty noise columns are independent, and the encoder (a random ReLU network) carries
    *larger* weights on every noise column than on any real one (as Adam leaves the weights of
    columns an encoder used to fit its training rows). The weights' paths rank every noise column
    first; the plain R^2 on the components cannot tell them apart either; the share without the
    feature's own contribution ranks every real column above every noise column."""
    from verticalfs.nn.models import MLP

    rng = np.random.default_rng(0)
    n = 3000
    z = rng.normal(size=(n, 2))
    L = rng.choice([-1.0, 1.0], size=(2, 20)) * rng.uniform(0.5, 1.5, size=(2, 20))
    X = torch.from_numpy(np.hstack([z @ L + 0.5 * rng.normal(size=(n, 20)), rng.normal(size=(n, 40))]).astype(np.float32))
    torch.manual_seed(0)
    model = MLP(60, (16, 16), 4, "relu")
    with torch.no_grad():
        W = model.input_layer.weight
        W[:, :20] *= 0.5
        W[:, 20:] *= 3.0
    comp = np.ones(4, dtype=bool)
    p = path_scores(model, comp)
    assert p[20:].min() > p[:20].max()  # the weights alone keep the noise
    plain = explained_scores(model, X, comp, own=True)
    assert plain[20:].max() > plain[:20].min()
    s = explained_scores(model, X, comp)
    assert s[:20].min() > 1.5 * s[20:].max()


@SHARED_TRACED
def test_selection_keeps_the_ratio_for_real(traced, data):
    m, fed = traced
    for q, mask in m.get_support().items():
        d = next(p.n_features for p in data.parties if p.name == q)
        assert mask.sum() == round(m.params.select_ratio * d)
        role = fed.local_runtime(q).role
        assert role.model.input_layer.weight.shape[1] == mask.sum()
        assert role.synthetic.shape[1] == mask.sum()
    assert 0 < m.info_["components_kept"] <= m.info_["components"]


@pytest.mark.slow  # three 30-epoch runs (about 20 s on 2 idle cores); the selection's mechanics are tested fast above
def test_ranks_informative_features_above_noise(data):
    """On breast cancer with as many Gaussian noise columns as real ones, the half of each party's
    features ICAFS keeps is mostly real: over three seeds, far fewer noise columns than the half a
    random choice keeps (a single seed's share swings by a tenth: 7-12 of 30 kept, measured)."""
    kept_noise = total_kept = noise_all = total = 0
    for seed in (0, 1, 2):
        fed = Federation.in_process(data)
        m = create("icafs", seed=seed, **{**SMALL, "epochs": 30, "synth_steps": 100, "synth_batch": 500, "code_dim": 64,
                                           "feature_dim": 32, "refit_epochs": 0, "arch": "mlp"})
        m.fit(fed)
        for p in data.parties:
            mask = m.get_support(p.name)
            noise = np.array(["_noise" in f for f in p.feature_names])
            kept_noise += int((mask & noise).sum())
            total_kept += int(mask.sum())
            noise_all += int(noise.sum())
            total += len(noise)
    assert noise_all / total > 0.4
    # a random half keeps 50 % noise (sd ~5 points over these 90 choices); 35 % is 3 sd below
    assert kept_noise / total_kept < 0.35


@pytest.mark.parametrize("variant", ["fixed-temp", "embedding", "no-fs"])
def test_ablations_run(data, variant):
    fed = Federation.in_process(data)
    m = create("icafs", seed=0, variant=variant, **SMALL)
    m.fit(fed)
    assert 0 <= m.metrics_["accuracy"] <= 1
    pretrain = fed.ledger.bytes_where(phase="pretrain")
    assert (pretrain == 0) == (variant == "no-fs")
    if variant == "fixed-temp":
        assert all(e["temperature"] == 1.0 for e in m.history_ if "temperature" in e)


@SHARED_TRACED
def test_temperature_anneals_to_gamma(traced):
    m, _ = traced
    temps = [e["temperature"] for e in m.history_ if "temperature" in e]
    assert temps[0] > 1.0 and max(temps) == pytest.approx(m.params.gamma)
    assert temps == sorted(temps)


@SHARED_TRACED
def test_saved_model_predicts_what_the_trained_one_does(traced, tmp_path):
    m, fed = traced
    holder = m.export_holder()
    assert holder["kind"] == "icafs"
    got = m.predict_from_holder(holder, fed, "test")
    np.testing.assert_allclose(got, m.trainer_.predict("test"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad, match", [
    ({"variant": "nope"}, "variant"),
    ({"hidden": (8,)}, "two hidden"),
    ({"select_ratio": 0.0}, "select_ratio"),
    ({"arch": "rnn"}, "arch"),
    ({"gamma": 0.5}, "gamma"),
    ({"critic_norm": "batch"}, "critic_norm"),
    ({"aux_weight": -1.0}, "aux_weight"),
    ({"rank": "gradient"}, "rank"),
])
def test_bad_settings_fail_before_work(data, bad, match):
    fed = Federation.in_process(data)
    with pytest.raises(ConfigError, match=match):
        create("icafs", **{**SMALL, **bad}).fit(fed)
    assert fed.ledger.total_bytes == 0


def test_party_refuses_an_unknown_ranking_rule(data):
    """``ICAFSSpec.rank`` comes from the label holder: a party refuses a rule it does not know when
    asked to select, before it changes its inputs."""
    import dataclasses

    from verticalfs.dispatch import Context
    from verticalfs.methods.icafs.role import ICAFSRole
    from verticalfs.party import LocalData
    from verticalfs.transport.messages import At

    spec = dataclasses.replace(M.ICAFSSpec(hidden=(8, 8), embedding_dim=4, activation="relu", optimizer="adam",
                                           lr=0.01, weight_decay=0.0, seed=0, batch_size=32, shuffle_seed=0),
                               rank="oracle")
    ctx = Context(None, At("selection", 0), LABEL_HOLDER)
    role = ICAFSRole(LocalData.of(data.parties[0]), spec, ctx)
    before = role.model.input_layer.weight.shape
    with pytest.raises(ProtocolError, match="rank"):
        role.on_select_features(M.SelectFeatures(components=np.ones(4, dtype=bool), ratio=0.5), ctx)
    assert role.model.input_layer.weight.shape == before


def test_regression_target_refused():
    d = verticalfs.build_data("friedman", parties=2, seed=0)
    with pytest.raises(ConfigError, match="class labels"):
        create("icafs", **SMALL).fit(Federation.in_process(d))


@pytest.mark.slow  # 150 synthesis steps (about 7 s); the synthesis's messages and blocks are tested fast above
def test_federated_synthesis_learns_the_label():
    """Two parties, four columns each, whose means depend on the class: after a short federated
    synthesis (the label only at the label holder), a classifier trained on the synthetic rows and
    their synthetic labels classifies the real test rows, and the synthetic classes follow the
    training frequencies."""
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    from verticalfs.data.table import Table

    rng = np.random.default_rng(0)
    n = 600
    y = (rng.random(n) < 0.35).astype(np.int64)
    X = rng.normal(0, 1, (n, 8)) + np.where(y[:, None] == 1, 1.5, -1.5) * np.array([1, -1, 1, 0, 1, -1, 0, 1])
    table = Table(name="two-blobs", X=pd.DataFrame(X, columns=[f"x{j}" for j in range(8)]), y=y, task="binary",
                  class_names=["0", "1"])
    d = verticalfs.build_data(table, parties=2, seed=0)
    fed = Federation.in_process(d)
    m = create("icafs", seed=0, epochs=0, refit_epochs=0, synth_steps=150, arch="mlp", channels=8)
    m.fit(fed)
    S = np.concatenate([fed.local_runtime(q).role.synth.synthetic for q in d.party_names], 1)
    ys = m.trainer_.y_syn.numpy()
    Xte = np.concatenate([p.X["test"] for p in d.parties], 1)
    acc = LogisticRegression(max_iter=1000).fit(S, ys).score(Xte, d.labels.y["test"])
    assert acc > 0.9
    assert abs(ys.mean() - d.labels.y["train"].mean()) < 0.06


def test_dp_sgd_on_the_encoders(data):
    """dp_epsilon: the label holder picks Opacus's noise multiplier for the run's real-row steps,
    whose RDP epsilon is then the one asked; every party trains its encoder with Opacus's DP
    optimizer (per-sample clipping, noise), so the encoders differ from a run without DP."""
    from opacus.accountants import RDPAccountant
    from opacus.optimizers import DPOptimizer

    kw = {**SMALL, "epochs": 4, "refit_epochs": 0, "variant": "no-fs"}  # DP is on the real-row steps
    fed = Federation.in_process(data)
    m = create("icafs", seed=0, dp_epsilon=5.0, **kw)
    m.fit(fed)
    info = m.info_["dp"]
    acc = RDPAccountant()
    acc.history = [(info["noise_multiplier"], 64 / len(data.labels.y["train"]), info["steps"])]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Optimal order is the largest alpha")
        eps = acc.get_epsilon(delta=1e-5 - info["delta_empty_batches"])
    assert eps == pytest.approx(5.0, abs=0.05)
    for q in data.party_names:
        assert isinstance(fed.local_runtime(q).role.dp_optimizer, DPOptimizer)
    plain = Federation.in_process(data)
    create("icafs", seed=0, **kw).fit(plain)
    q = data.party_names[0]
    a = fed.local_runtime(q).role.model.output_layer.weight
    b = plain.local_runtime(q).role.model.output_layer.weight
    assert not torch.allclose(a, b)
    with pytest.raises(ConfigError, match="dp_delta"):
        create("icafs", dp_epsilon=5.0, dp_delta=0.0, **SMALL).fit(Federation.in_process(data))
