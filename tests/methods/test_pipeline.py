"""Pipelines: a selection method feeding a training method in one run (``feast+sparsevfl-16``)."""

from __future__ import annotations

import numpy as np
import pytest

import verticalfs
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.methods import create, get


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


# the tests of `piped` (a module fixture) form one xdist group: a second worker running some of them
# would repeat its run
SHARED_PIPED = pytest.mark.xdist_group("pipeline-piped")


@pytest.fixture(scope="module")
def piped(data):
    fed = Federation.in_process(data, trace=True)
    m = create("feast+sparsevfl-16", seed=0, **{"feast.n_select": 8, "epochs": 3,
                                                  "sparsevfl-16.batch_size": 64})
    m.fit(fed)
    return m, fed


def test_pipeline_class_from_names():
    cls = get("feast+sparsevfl-16")
    assert cls.name == "feast+sparsevfl-16" and cls.stage_names == ("feast", "sparsevfl-16")
    assert get("feast+sparsevfl-16") is cls
    with pytest.raises(ConfigError, match="unknown method"):
        get("feast+nope")
    with pytest.raises(ConfigError, match="pooled"):
        get("cfeast+vfl")


def test_parameters_go_to_their_stage():
    m = create("mi+vfl", seed=0, **{"mi.n_select": 4, "vfl.lr": 0.02, "epochs": 2})
    assert m.stages[0].params.n_select == 4
    assert m.stages[1].params.lr == 0.02 and m.stages[1].params.epochs == 2
    with pytest.raises(ConfigError, match="names no stage"):
        create("mi+vfl", lr=0.1)
    with pytest.raises(ConfigError, match="no parameter"):
        create("mi+vfl", **{"mi.no_such": 1})


@SHARED_PIPED
def test_the_second_stage_trains_on_the_first_stage_columns(piped, data):
    m, fed = piped
    selected = m.stages[0]  # the FEAST stage object
    kept = {p: np.flatnonzero(mask) for p, mask in m.get_support().items()}
    assert sum(len(v) for v in kept.values()) == 8
    for p in data.party_names:
        role = fed.local_runtime(p).role
        if len(kept[p]):
            assert role.model.input_layer.in_features == len(kept[p])  # built on the kept columns
            np.testing.assert_array_equal(role.data.kept, kept[p])
    assert m.info_["feast"]["selected"] == 8 and selected.name == "feast"


@SHARED_PIPED
def test_the_ledger_shows_both_stages(piped):
    m, fed = piped
    kinds = {(r.phase, r.kind) for r in fed.ledger.records()}
    assert ("selection", "FeastSetup") in kinds and ("selection", "KeepFeatures") in kinds
    assert ("train", "Embeddings") in kinds and ("train", "Gradients") in kinds
    assert not any(k == "GatherColumns" for _, k in kinds)  # no evaluation classifier in a pipeline
    joins = [msg.method for _, _, msg in fed.channel.decoded() if type(msg).__name__ == "Join"]
    assert set(joins) == {"feast", "sparsevfl-16"}
    h = m.history_
    assert h[0]["phase"] == "selection" and h[0]["stage"] == "feast"
    assert [e["bytes"] for e in h] == sorted(e["bytes"] for e in h)
    assert 0 <= m.metrics_["roc_auc"] <= 1


def test_a_party_left_without_features_leaves_the_training(data):
    fed = Federation.in_process(data)
    m = create("random+vfl", seed=3, **{"random.n_select": 1, "epochs": 1, "vfl.hidden": (4,)})
    m.fit(fed)
    left = m.info_["random"]["parties_left"]
    assert len(left) == 2
    trained = [p for p in data.party_names if p not in left]
    assert list(m.trainer_.parties) == trained
