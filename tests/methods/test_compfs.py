"""CompFS over the federation: the split of each learner's first layer is exact, the gate
penalties reach the parties' gates, and removing the unselected features changes no prediction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import verticalfs
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.baselines.compfs import CompFSTrainer, GatedFirstLayers


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=2, noise=1.0, seed=0)


def test_first_layer_split_is_exact():
    """Each party's part of a learner's first layer, summed over parties, is the first layer on the
    concatenated gated input (what the centralised CompFS computes)."""
    torch.manual_seed(0)
    a, b = GatedFirstLayers(3, 2, 4, 0.1, 0.7).eval(), GatedFirstLayers(5, 2, 4, 0.1, 0.7).eval()
    xa, xb = torch.randn(6, 3), torch.randn(6, 5)
    W = torch.cat([a.W, b.W], 2)  # (N, h, 8)
    m = torch.cat([a.masks(6), b.masks(6)], 2)
    xbar = torch.cat([a.xbar, b.xbar])
    gated = m * torch.cat([xa, xb], 1)[None] + (1 - m) * xbar
    want = torch.einsum("nrd,nhd->rnh", gated, W).reshape(6, -1)
    torch.testing.assert_close(a(xa) + b(xb), want)


def test_penalties_reach_the_gates_and_shrink_groups(data):
    fed = Federation.in_process(data)
    m = create("compfs", seed=0, epochs=30, beta_s=20.0)
    m.fit(fed)
    kept = sum(v.sum() for v in m.get_support().values())
    assert 0 < kept < sum(p.n_features for p in data.parties) / 2
    assert m.metrics_["accuracy"] > 0.85


def test_removing_unselected_features_changes_no_prediction(data):
    fed = Federation.in_process(data)
    m = create("compfs", seed=1, epochs=5)
    trainer = CompFSTrainer(fed, "compfs", m.params, seed=1)
    trainer.setup()
    trainer.fit(phase="train")
    before = trainer.predict("test")
    from verticalfs.methods.baselines.compfs import CompFSSelect, CompFSSelected
    from verticalfs.transport.messages import At

    for q in trainer.parties:
        fed.proxy(q).request(CompFSSelect(), At("selection", 5), expect=CompFSSelected)
    after = trainer.predict("test")
    assert sum(fed.local_runtime(q).role.model.w.shape[1] for q in trainer.parties) < sum(
        p.n_features for p in data.parties)
    np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-5)


def test_top_k_is_shared_among_the_parties(data):
    """Each learner keeps at most its party's share of top_k features, the largest probabilities."""
    fed = Federation.in_process(data)
    m = create("compfs", seed=0, epochs=2, top_k=6, batch_size=64, hidden=(8,))
    m.fit(fed)
    for q in data.party_names:
        role = fed.local_runtime(q).role
        assert role.spec.top_k == 3  # ceil(6 * 23 / 46)
        hard = role.model.hard()
        assert torch.all(hard.sum(1) == 3)
        assert m.get_support(q).sum() <= 4 * 3


@pytest.mark.slow
def test_default_penalties_keep_a_ten_class_model_above_chance():
    """Issue 40: the synthetic configuration's penalties (4.5, 1.2), weighed by sqrt(d), close
    nearly every gate on digits (3 of 95 columns kept after 35 epochs, .300); the default (the
    authors' MNIST 0.18) keeps a working model."""
    digits = verticalfs.build_data("digits", parties=2, seed=0)
    runs = {}
    for key, extra in (("default", {}), ("synthetic", {"beta_s": 4.5, "beta_d": 1.2})):
        m = create("compfs", seed=0, epochs=4, refit_epochs=0, **extra)  # the penalties alone
        m.fit(Federation.in_process(digits))
        runs[key] = (int(sum(v.sum() for v in m.get_support().values())), m.metrics_["accuracy"])
    # measured: 40 features kept at .817 against 33 at .592 (4 epochs; 35 epochs: 29 at .853, 3 at .300)
    assert runs["default"][0] > runs["synthetic"][0]
    assert runs["default"][1] > 0.7 > runs["synthetic"][1]


def test_learners_widen_with_many_classes_only():
    """Issue 40: at least 2 x classes hidden units; the authors' 20 up to 10 classes (binary sets unchanged)."""
    from verticalfs.methods.baselines.compfs import CompFSParams, learner_width

    p = CompFSParams()
    assert [learner_width(p, c) for c in (0, 2, 10, 11, 30)] == [20, 20, 20, 22, 60]
    assert learner_width(CompFSParams(hidden_per_class=0), 30) == 20


@pytest.mark.slow
def test_the_refit_trains_the_model_that_is_evaluated():
    """Issue 53: the learners train on relaxed gates and are evaluated on their threshold's
    selection; on wide many-class data that model was far below the training's (.285 on the
    20-class digit-images). After the selection the gates stay as selected and ``refit_epochs``
    train the learners on them: the kept features do not change, the penalties are off, and the
    accuracy rises."""
    data = verticalfs.build_data("digits", parties=2, noise=0.5, seed=0)
    runs = {}
    for refit in (0, 3):
        fed = Federation.in_process(data)
        m = create("compfs", seed=0, epochs=4, refit_epochs=refit).fit(fed)
        runs[refit] = (m, fed)
    (m0, f0), (m3, f3) = runs[0], runs[3]
    assert {q: v.tolist() for q, v in m0.get_support().items()} == {q: v.tolist() for q, v in m3.get_support().items()}
    assert m3.trainer_.epoch == 7 and m0.trainer_.epoch == 4
    for q in data.party_names:
        a, b = f0.local_runtime(q).role.model, f3.local_runtime(q).role.model
        assert b.frozen and not b.w.requires_grad
        torch.testing.assert_close(a.w, b.w)  # the gates did not move in the refit
        assert not torch.equal(a.W, b.W)  # the learners did
    assert m3.metrics_["accuracy"] > m0.metrics_["accuracy"]
