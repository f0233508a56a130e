"""LESS-VFL (less-vfl.md section 3), local lasso and group lasso: protocol, shrinking, selection."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import verticalfs
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.less_vfl.method import DEFAULT_LAMBDAS_M
from verticalfs.methods.less_vfl.role import SelectFeatures
from verticalfs.names import LABEL_HOLDER as ACTIVE
from verticalfs.training.split import SplitTrainer, TrainConfig
from verticalfs.transport.messages import At
from verticalfs.tuning import grid_search, select_best, summarise

# solver "psgd" with one lambda_m: Algorithm 1 as written (the protocol tests below count its messages);
# the default ("pgd", a lambda_m path chosen on validation accuracy) has its own tests at the end
FAST = {"epochs": 3, "pretrain_epochs": 1, "pretrain_min_steps": 0, "select_epochs_s": 10, "select_epochs_m": 10, "hidden": (16, 8),
        "batch_size": 64, "solver": "psgd"}
METHODS = ("less-vfl", "local-lasso", "group-lasso")


def fast(name: str, **extra) -> dict:
    p = dict(FAST)
    if name == "group-lasso":
        p = {k: v for k, v in p.items() if not k.startswith(("pretrain", "select", "solver"))}
    elif name == "local-lasso":
        p.pop("select_epochs_s")
    p.update(extra)
    return p


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models: one torch thread is several times faster than two competing ones."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


def fit(name, data, seed=0, trace=False, **extra):
    fed = Federation.in_process(data, trace=trace)
    m = create(name, seed=seed, **fast(name, **extra))
    return m, m.fit(fed), fed


# ----------------------------------------------------------------------------- contract
@pytest.mark.parametrize("name", METHODS)
def test_contract(name, data):
    m, returned, fed = fit(name, data)
    assert returned is m
    assert set(m.support_) == set(data.party_names)
    for p in data.parties:
        assert m.support_[p.name].shape == (p.n_features,) and m.support_[p.name].dtype == bool
    assert fed.ledger.total_bytes > 0
    assert m.history_ and "accuracy" in m.metrics_
    m2, _, fed2 = fit(name, data)
    assert fed2.ledger.total_bytes == fed.ledger.total_bytes
    assert m2.metrics_ == m.metrics_
    for q in data.party_names:
        assert np.array_equal(m2.support_[q], m.support_[q])


def test_seconds_per_stage(data):
    """Every stage's seconds are in the result (item 8 of the like-for-like issue); each party
    measures its own stage 3, and in process their sum is inside the label holder's wall time."""
    m, _, _ = fit("less-vfl", data)
    sec = m.info_["seconds"]
    assert set(sec) == {"pretrain", "stage2", "stage3_wall", "stage3", "post_selection"}
    assert set(sec["stage3"]) == set(data.party_names)
    assert all(v > 0 for v in sec["stage3"].values()) and sec["stage2"] > 0 and sec["pretrain"] > 0
    assert sum(sec["stage3"].values()) <= sec["stage3_wall"]


# ----------------------------------------------------------------------------- protocol
def test_selection_phase_is_one_upload_and_one_message_per_party(data):
    m, _, fed = fit("less-vfl", data, trace=True)
    recs = [r for r in fed.ledger.records() if r.phase == "selection"]
    kinds = sorted((r.sender, r.receiver, r.kind) for r in recs)
    expected = []
    for q in data.party_names:
        expected += [(ACTIVE, q, "EmbedRequest"), (ACTIVE, q, "SelectFeatures"), (q, ACTIVE, "Embeddings")]
    assert kinds == sorted(expected)
    # the upload is the whole training split, without autograd
    reqs = [msg for s, r, msg in fed.channel.decoded() if type(msg).__name__ == "EmbedRequest" and msg.batch == -1
            and msg.split == "train"]
    assert len(reqs) == len(data.party_names) and not any(r.train for r in reqs)
    n_train = fed.n_samples("train")
    for s, _r, msg in fed.channel.decoded():
        if type(msg).__name__ == "Embeddings" and s != ACTIVE and msg.values.shape[0] == n_train:
            assert msg.values.shape[1] == 8  # embedding_dim default
    phases = [h["phase"] for h in m.history_]
    assert phases == ["pretrain", "selection", "train", "train"]


def test_local_lasso_sends_no_upload(data):
    _, _, fed = fit("local-lasso", data)
    recs = [r for r in fed.ledger.records() if r.phase == "selection"]
    assert sorted(r.kind for r in recs) == ["SelectFeatures"] * len(data.party_names)


def test_later_messages_carry_only_significant_components(data):
    m, _, fed = fit("less-vfl", data, lambda_s=0.01)
    K = m.info_["n_components"]
    assert sum(K.values()) < 8 * len(K)  # stage 2 dropped some components
    last_epoch = max(r.round for r in fed.ledger.records() if r.phase == "train")
    n_train = fed.n_samples("train")
    up = {q: fed.ledger.payload_where(phase="train", kind="Embeddings", sender=q, round=last_epoch)
          for q in data.party_names}
    for q, k in K.items():
        if k == 0:
            assert up[q] == 0
        else:
            assert up[q] == n_train * k * 4  # float32, |K_m| columns
    assert m.trainer_.top.input_layer.in_features == sum(K.values())


# ----------------------------------------------------------------------------- shrinking
def test_zeroed_groups_are_removed_from_the_model(data):
    fed = Federation.in_process(data)
    tr = SplitTrainer(fed, "less-vfl", TrainConfig(hidden=(16, 8), batch_size=64), seed=0)
    tr.setup()
    tr.fit(1, phase="pretrain")
    q = data.party_names[0]
    party = fed.local_runtime(q).role
    d0 = len(party.data.kept)
    fed.proxy(q).send(SelectFeatures(components=np.arange(8), lambdas=(1.0,), lr=0.05, epochs=30,
                                     batch_size=64, seed=1), At("selection"))
    info = party.selection_info
    kept = info["n_features_after"]
    assert 0 < kept < d0
    assert party.model.input_layer.in_features == kept == len(party.data.kept)
    assert party.data.X("train").shape[1] == kept
    assert torch.all(torch.linalg.vector_norm(party.model.input_layer.weight, dim=0) > 0)
    assert fed.observe_support()[q].sum() == kept


def test_shrinking_keeps_the_optimizer_state_of_what_stays(data):
    """drop_inputs / keep_outputs rebuild the optimizer for the new parameters but carry Adam's
    moments of the surviving weights over (a fresh Adam jolts every weight by about lr)."""
    fed = Federation.in_process(data)
    tr = SplitTrainer(fed, "vfl", TrainConfig(hidden=(16, 8), batch_size=64), seed=0)
    tr.setup()
    tr.fit(1)
    party = fed.local_runtime(data.party_names[0]).role
    W_in, W_out = party.model.input_layer.weight, party.model.output_layer.weight
    hidden = party.model.linears[1].weight
    before = {k: {n: v.clone() for n, v in party.optimizer.state[p].items()} for k, p in
              (("in", W_in), ("out", W_out), ("b_out", party.model.output_layer.bias), ("hidden", hidden))}
    keep, comps = np.array([0, 2, 5]), np.array([1, 3])
    party.drop_inputs(keep)
    party.keep_outputs(comps)
    st = party.optimizer.state
    new_in, new_out = party.model.input_layer.weight, party.model.output_layer.weight
    assert new_in is not W_in and new_out is not W_out
    for name in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(st[new_in][name], before["in"][name][:, keep])
        assert torch.equal(st[new_out][name], before["out"][name][comps])
        assert torch.equal(st[party.model.output_layer.bias][name], before["b_out"][name][comps])
        assert torch.equal(st[party.model.linears[1].weight][name], before["hidden"][name])
    assert float(st[new_in]["step"]) == float(before["in"]["step"]) > 0
    out = party.model(party.data.X("train")[:8])  # and a step goes on from the carried state
    party.step(out, torch.ones_like(out))
    assert float(party.optimizer.state[new_in]["step"]) == float(before["in"]["step"]) + 1


def test_group_lasso_removes_zeroed_features_for_real(data):
    m, _, fed = fit("group-lasso", data, lambda_m=50.0)
    for q in data.party_names:
        party = fed.local_runtime(q).role
        assert party.model.input_layer.in_features == len(party.data.kept) == m.support_[q].sum()
    spur = np.concatenate([data.ground_truth[q] for q in data.party_names])
    kept = np.concatenate([m.support_[q] for q in data.party_names])
    assert not kept[spur].any()  # every spurious feature went
    assert sum(m.info_["features_kept"].values()) < sum(p.n_features for p in data.parties)


def test_party_without_significant_component_leaves(data):
    fed = Federation.in_process(data)
    tr = SplitTrainer(fed, "less-vfl", TrainConfig(hidden=(16, 8), batch_size=64), seed=0)
    tr.setup()
    q = data.party_names[1]
    fed.proxy(q).send(SelectFeatures(components=np.zeros(0, dtype=np.int64), lambdas=(0.1,), lr=0.05, epochs=1,
                                     batch_size=64, seed=1), At("selection"))
    role = fed.local_runtime(q).role
    assert role.left and len(role.data.kept) == 0


# ----------------------------------------------------------------------------- selection quality
def test_removes_known_spurious_features():
    data = verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=1)
    res = verticalfs.run("less-vfl", data, seed=1, params={"epochs": 6, "pretrain_epochs": 2, "batch_size": 64,
                                                           "lambda_m": 0.5, "select_epochs_m": 50,
                                                           "select_epochs_s": 50})
    ref = verticalfs.run("vfl", verticalfs.build_data("breast_cancer", parties=3, noise=0.0, seed=1), seed=1,
                         params={"epochs": 6, "batch_size": 64})
    assert res.selection["spurious_removed"] >= 0.8
    assert res.metrics["accuracy"] >= 0.9 * max(h["accuracy"] for h in ref.history)


def test_in_protocol_lambda_search_and_target(data):
    m, _, fed = fit("less-vfl", data, lambdas_s=(0.001, 0.01, 0.05), lambdas_m=(0.05, 0.3, 1.0),
                    target_accuracy=0.5, choose_m="proxy")
    st2 = m.info_["stage2"]
    assert [c["lambda_s"] for c in st2["candidates"]] == [0.001, 0.01, 0.05]
    assert m.info_["lambda_s"] in (0.001, 0.01, 0.05)
    for q in data.party_names:
        st3 = m.info_["stage3"][q]
        if st3.get("left"):
            continue
        assert len(st3["candidates"]) == 3 and st3["lambda_m"] in (0.05, 0.3, 1.0)
    # the search adds no message: still one upload and one SelectFeatures per party
    n_sel = sum(1 for r in fed.ledger.records() if r.phase == "selection")
    assert n_sel == 3 * len(data.party_names)
    assert m.info_["bytes_to_target"] is not None and m.info_["target"] == pytest.approx(0.45)
    assert m.info_["bytes_pretrain"] > 0 and m.info_["bytes_selection"] > 0


def test_grid_search_rows_and_selection(data):
    rows = grid_search(data, lambdas_m=(0.1, 0.5), lambdas_s=(0.01,), pretrain_epochs=(1,), seeds=(0,),
                       params={k: v for k, v in fast("less-vfl").items()}, target_accuracy=0.9)
    assert len(rows) == 2
    assert {r["lambda_m"] for r in rows} == {0.1, 0.5}
    for r in rows:
        assert 0.0 <= r["spurious_removed"] <= 1.0 and r["mb_total"] > 0
    summ = summarise(rows)
    assert len(summ) == 2 and all(s["runs"] == 1 for s in summ)
    best = select_best(rows, min_spurious_removed=0.0)
    assert best is not None and best["lambda_m"] in (0.1, 0.5)


# ----------------------------------------------------------------------------- solver "pgd"
def test_proximal_path_reaches_the_group_lasso_solution():
    """On a linear model with an orthonormal design the group-lasso problem has a closed form:
    min ||w - w_ls||^2 + lam sum_j ||w_j||  =>  w_j = w_ls_j (1 - lam / (2 ||w_ls_j||))_+."""
    from verticalfs.methods.less_vfl.psgd import StackedMLP, proximal_path
    from verticalfs.nn.models import MLP

    rng = np.random.default_rng(0)
    n, d, k = 400, 6, 3
    Z = rng.normal(size=(n, d))
    Q, _ = np.linalg.qr(Z - Z.mean(0))  # orthonormal columns in the span of centred ones: centred
    X = torch.tensor(Q * np.sqrt(n), dtype=torch.float32)  # X^T X / n = I
    W_true = np.zeros((k, d))
    W_true[:, :3] = rng.normal(size=(k, 3)) * np.array([2.0, 1.0, 0.3])
    Y = X @ torch.tensor(W_true.T, dtype=torch.float32) + 0.01 * torch.randn(n, k, generator=torch.Generator().manual_seed(0))
    C = (X.T @ X / n).numpy()
    w_ls = np.linalg.solve(C, (X.T @ (Y - Y.mean(0)) / n).numpy()).T  # (k, d)
    mlp = MLP(d, (), k)

    def loss(out, rows):
        return ((out - Y[rows]) ** 2).sum(-1).mean(-1)

    stack = StackedMLP(mlp, 1, center=X.mean(0))
    lams = [0.1, 1.0, 3.0]
    path = proximal_path(stack, X, loss, lams, max_iter=500, tol=1e-7)
    for lam, pt in zip(lams, path, strict=True):
        norms = np.linalg.norm(w_ls, axis=0)
        want = w_ls * np.clip(1.0 - lam / (2.0 * np.maximum(norms, 1e-12)), 0.0, None)
        got = pt["state"][0][0].numpy()  # the input weight of the single copy
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)  # float32, stopped at a plateau
        assert pt["support"].tolist() == np.flatnonzero(np.linalg.norm(want, axis=0) > 0).tolist()


def test_solver_validation_and_pretrain_min_steps(data):
    with pytest.raises(ConfigError, match="solver"):
        create("less-vfl", solver="adam").fit(Federation.in_process(data))
    # breast_cancer: ~400 training rows / 64 = 7 batches per epoch -> 60 steps need 9 epochs, capped
    # at half of the 12
    m, _, _ = fit("less-vfl", data, epochs=12, pretrain_min_steps=60)
    n_batches = -(-data.n_samples("train") // 64)
    assert m.info_["pretrain_epochs"] == min(-(-60 // n_batches), 6) > 1
    m, _, _ = fit("less-vfl", data, epochs=30, pretrain_min_steps=60)
    assert m.info_["pretrain_epochs"] == -(-60 // n_batches)
    assert [h["phase"] for h in m.history_].count("pretrain") == m.info_["pretrain_epochs"]


def test_pgd_proxy_choice_runs_the_protocol(data):
    """solver='pgd' with choose_m='proxy': the same messages as 'psgd' (one upload, one
    SelectFeatures per party), each party's choice among the lambda_m path by its proxy error,
    reported with its iterations."""
    m, _, fed = fit("less-vfl", data, solver="pgd", choose_m="proxy", epochs=4)
    kinds = sorted(r.kind for r in fed.ledger.records() if r.phase == "selection")
    n = len(data.party_names)
    assert kinds == sorted(["EmbedRequest"] * n + ["Embeddings"] * n + ["SelectFeatures"] * n)
    st3 = m.info_["stage3"]
    for v in st3.values():
        if v.get("left"):
            continue
        assert v["solver"] == "pgd" and len(v["iterations"]) == len(DEFAULT_LAMBDAS_M)
        assert v["lambda_m"] in DEFAULT_LAMBDAS_M
        rel = [c["proxy_rel_err"] for c in v["candidates"]]
        ok = [c["lambda_m"] for c in v["candidates"] if c["proxy_rel_err"] <= 0.05]
        assert v["lambda_m"] == (max(ok) if ok else min(DEFAULT_LAMBDAS_M)), rel
    assert m.info_["stage2"]["solver"] == "pgd"


# ----------------------------------------------------------------------------- the defaults
DEFAULTS = {"epochs": 4, "pretrain_epochs": 1, "pretrain_min_steps": 0, "hidden": (16, 8), "batch_size": 64}


def test_default_chooses_lambda_m_on_validation_accuracy(data):
    """Default: pgd path, every party sends its candidates' validation embeddings, the label holder
    keeps per party the largest lambda_m within tol_val of the pre-trained model's validation score."""
    fed = Federation.in_process(data, trace=True)
    m = create("less-vfl", seed=0, **DEFAULTS).fit(fed)
    assert (m.params.solver, m.params.choose_m, m.params.refit) == ("pgd", "val", "pretrained")
    lams = DEFAULT_LAMBDAS_M
    assert min(lams) <= 0.03  # the path reaches small lambdas (issue 40)
    st = m.info_["stage3_val"]
    ref, tol = st["reference_val_score"], st["tol"]
    assert tol == 0.02
    live = [q for q in data.party_names if m.info_["n_components"][q] > 0]
    assert set(st["parties"]) == set(live)
    for q, v in st["parties"].items():
        ok = [lam for lam, sc in zip(lams, v["val_scores"], strict=True) if sc >= ref - tol]
        assert v["lambda_m"] == (max(ok) if ok else min(lams))
        assert m.info_["stage3"][q]["lambda_m"] == v["lambda_m"]
        cand = {c["lambda_m"]: c["n_features"] for c in m.info_["stage3"][q]["candidates"]}
        assert m.info_["features_kept"][q] == cand[v["lambda_m"]]
    # messages of the selection phase: per live party the train upload, the validation upload,
    # SelectFeatures, its reply and KeepCandidate
    kinds = sorted((r.sender, r.receiver, r.kind) for r in fed.ledger.records() if r.phase == "selection")
    want = []
    for q in data.party_names:
        want += [(ACTIVE, q, "EmbedRequest"), (q, ACTIVE, "Embeddings"), (ACTIVE, q, "SelectFeatures")]
        if q in live:
            want += [(ACTIVE, q, "EmbedRequest"), (q, ACTIVE, "Embeddings"), (q, ACTIVE, "CandidateEmbeddings"),
                     (ACTIVE, q, "KeepCandidate")]
    assert kinds == sorted(want)
    n_val = fed.n_samples("val")
    for s, _r, msg in fed.channel.decoded():
        if type(msg).__name__ == "CandidateEmbeddings":
            assert msg.values.shape == (len(DEFAULT_LAMBDAS_M), n_val, m.info_["n_components"][s])


def _live_party(data, **params):
    fed = Federation.in_process(data)
    m = create("less-vfl", seed=0, **{**DEFAULTS, "epochs": 1, **params}).fit(fed)  # no post-selection epoch
    q = next(q for q in data.party_names if m.info_["n_components"][q] > 0)
    return m, fed.local_runtime(q).role, q


def test_refit_starts_from_the_pretrained_weights_of_the_kept_features(data):
    """refit='pretrained' (relaxed lasso): after selection the party's network is its pre-trained
    one restricted to the kept features and components; refit='lasso' keeps the shrunk solution."""
    m, role, q = _live_party(data)
    keep = np.flatnonzero(m.support_[q])
    K = np.asarray(m.info_["K_m"][q])
    pre_in = role.pretrained.input_layer.weight.detach()
    assert torch.equal(role.model.input_layer.weight.detach(), pre_in[:, torch.as_tensor(keep)])
    pre_out = role.pretrained.output_layer.weight.detach()
    assert torch.equal(role.model.output_layer.weight.detach(), pre_out[torch.as_tensor(K)])
    m2, role2, q2 = _live_party(data, refit="lasso")
    keep2 = np.flatnonzero(m2.support_[q2])
    shrunk = role2.model.input_layer.weight.detach().norm(dim=0)
    pre2 = role2.pretrained.input_layer.weight.detach()[:, torch.as_tensor(keep2)].norm(dim=0)
    assert bool((shrunk < pre2).all())  # the lasso shrinks the groups it keeps as well


def test_validation_choice_rule_and_untrusted_candidates(data):
    from verticalfs.exceptions import ProtocolError
    from verticalfs.methods.less_vfl.method import choose_lambda_m_on_val
    from verticalfs.methods.less_vfl.role import CandidateEmbeddings
    from verticalfs.transport.messages import Embeddings, EmbedRequest

    fed = Federation.in_process(data)
    tr = SplitTrainer(fed, "less-vfl", TrainConfig(hidden=(16, 8), batch_size=64), seed=0)
    tr.setup()
    tr.fit(3, phase="pretrain")
    at = At("selection", tr.epoch)
    n = tr.n_samples("val")
    parties = list(tr.parties)
    K = {q: np.arange(8) for q in parties}
    q = parties[0]
    pre = tr.decode_forward(q, fed.proxy(q).request(EmbedRequest("val", tr.epoch, -1, False), at, expect=Embeddings), n)
    same = CandidateEmbeddings(values=np.stack([pre, pre]).astype(np.float32))
    choice, rep = choose_lambda_m_on_val(tr, fed, tr.top, parties, K, {q: same}, (0.1, 0.2), 0.0, at)
    assert choice == {q: 1}  # both equal the reference: the larger lambda
    assert rep["parties"][q]["val_scores"] == [rep["reference_val_score"]] * 2
    flat = np.zeros_like(pre)  # a constant block loses accuracy
    worse = CandidateEmbeddings(values=np.stack([pre, flat]).astype(np.float32))
    choice, rep = choose_lambda_m_on_val(tr, fed, tr.top, parties, K, {q: worse}, (0.1, 0.2), 0.0, at)
    assert rep["parties"][q]["val_scores"][1] < rep["reference_val_score"]
    assert choice == {q: 0}
    for bad in (np.zeros((2, n + 1, 8), np.float32), np.full((2, n, 8), np.nan, np.float32)):
        with pytest.raises(ProtocolError, match=q):
            choose_lambda_m_on_val(tr, fed, tr.top, parties, K, {q: CandidateEmbeddings(values=bad)}, (0.1, 0.2),
                                   0.02, at)


def test_pretrain_epochs_rule():
    from verticalfs.methods.less_vfl.method import pretrain_epochs

    assert pretrain_epochs(2, 60, 30, 50) == 2      # phishing: the paper's 2 epochs are 60 steps
    assert pretrain_epochs(2, 60, 5, 50) == 12      # digits: 12 epochs of 5 batches
    assert pretrain_epochs(2, 60, 1, 50) == 25      # one batch per epoch: at most half of the run
    assert pretrain_epochs(2, 0, 1, 50) == 2
    assert pretrain_epochs(5, 60, 1, 4) == 4        # never more than the run


def test_new_params_are_validated(data):
    for bad in ({"choose_m": "best"}, {"refit": "scratch"}, {"tol_val": 2.0}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            create("less-vfl", **bad).fit(Federation.in_process(data))
