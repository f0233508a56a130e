"""A method with a second model per party and a local regulariser, added as one folder
(``tests/methods/example_two_tower``) without any change to the core."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import verticalfs
from verticalfs.federation import Federation
from verticalfs.methods import registry
from verticalfs.names import LABEL_HOLDER


@pytest.fixture
def registered():
    """Register the example like a method folder under ``methods/`` is; remove it afterwards so the
    other tests' view of the registry is unchanged."""
    from tests.methods.example_two_tower import TwoTower

    registry.register(TwoTower)
    yield TwoTower
    registry._METHODS.pop(TwoTower.name, None)


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=2, seed=0)


def first_layers(fed, party):
    role = fed.local_runtime(party).role
    return [m.input_layer.weight.detach().clone() for m in role.models]


def test_runs_by_name_through_the_registry(registered, data):
    res = verticalfs.run("two-tower", data, seed=0, params={"epochs": 3, "batch_size": 64, "hidden": (8,)})
    assert res.metrics["roc_auc"] > 0.8
    kinds = res.communication["by_kind"]
    assert {"TowerRequest", "Embeddings", "TowerGradients", "Join"} <= set(kinds)
    # two embeddings per party and batch, both towers' gradients back
    train = [r for r in res.federation.ledger.records() if r.phase == "train"]
    n_batches = -(-data.n_samples("train") // 64)
    assert sum(r.kind == "TowerGradients" for r in train) == 3 * n_batches * 2 * 2
    assert all(r.sender == LABEL_HOLDER for r in train if r.kind == "TowerGradients")


def test_both_towers_learn_and_the_local_regulariser_acts(registered, data):
    params = {"epochs": 3, "batch_size": 64, "hidden": (8,)}
    runs = {}
    for l1 in (0.0, 0.05):
        fed = Federation.in_process(data)
        m = registered(seed=0, l1=l1, **params)
        m.fit(fed)
        runs[l1] = (m, fed)
        role = fed.local_runtime(data.party_names[0]).role
        assert role.pendings == [None, None]  # both graphs consumed
    m0, f0 = runs[0.0]
    _, f1 = runs[0.05]
    for p in data.party_names:
        w0, w1 = first_layers(f0, p), first_layers(f1, p)
        for t in (0, 1):
            assert w1[t].abs().sum() < 0.9 * w0[t].abs().sum()  # L1 at the party shrinks each tower
    # the two towers of a party are different models, and both were trained
    fresh = Federation.in_process(data)
    untrained = registered(seed=0, **{**params, "epochs": 0})
    untrained.fit(fresh)
    for p in data.party_names:
        trained, init = first_layers(f0, p), first_layers(fresh, p)
        assert not torch.equal(trained[0], trained[1])
        for t in (0, 1):
            assert not torch.equal(trained[t], init[t])
    # the label holder's top model sees both towers of every party
    assert m0.trainer_.top.input_layer.in_features == 2 * 8 * len(data.party_names)
    assert np.isfinite(m0.history_[-1]["train_loss"])
