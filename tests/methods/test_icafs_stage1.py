"""ICAFS's stage-1 reuse (:mod:`verticalfs.methods.icafs.stage1`): in-process runs that would compute
the same Algorithm 1 compute it once, and a run that restores it is the run that computes it again."""

from __future__ import annotations

import numpy as np
import pytest

import verticalfs
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.methods import create, get
from verticalfs.methods.icafs import Stage1Cache
from verticalfs.transport.inprocess import InProcessChannel

SMALL = {**get("icafs").test_params, "synth_steps": 3}


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("wine", parties=2, seed=0)


def fit(data, cache=None, **params):
    fed = Federation.in_process(data)
    m = create("icafs", seed=params.pop("seed", 0), stage1_cache=cache, **{**SMALL, **params})
    m.fit(fed)
    return m, fed


def test_a_restored_stage_1_gives_the_run_that_computes_it(data):
    alone, fed_alone = fit(data, variant="fixed-temp")
    cache = Stage1Cache()
    first, _ = fit(data, cache)
    computed = cache.last
    restored, fed = fit(data, cache, variant="fixed-temp")
    assert not first.info_.get("synthesis_reused") and restored.info_["synthesis_reused"] == 1
    assert cache.last is computed and len(cache) == 1
    assert restored.metrics_ == alone.metrics_
    for q, mask in alone.get_support().items():
        assert np.array_equal(restored.get_support(q), mask)
    assert restored.info_["synthesis_bytes"] == alone.info_["synthesis_bytes"] > 0  # the computing run's figure
    assert fed.ledger.bytes_where(phase="pretrain") == 0 < fed_alone.ledger.bytes_where(phase="pretrain")
    # the kept stage 1 is the first run's synthetic rows and labels, and stays as it was
    assert np.array_equal(computed.labels, first.trainer_.y_syn.numpy())
    for q in data.party_names:
        assert computed.blocks[q].shape == (data.n_samples("train"), next(
            p.n_features for p in data.parties if p.name == q))


@pytest.mark.parametrize("change", [{"seed": 1}, {"synth_batch": 32}, {"data": "noise"}])
def test_another_stage_1_is_computed_not_restored(data, change):
    cache = Stage1Cache()
    fit(data, cache)
    other = verticalfs.build_data("wine", parties=2, seed=0, noise=0.5) if change.get("data") else data
    m, fed = fit(other, cache, **{k: v for k, v in change.items() if k != "data"})
    assert not m.info_.get("synthesis_reused") and fed.ledger.bytes_where(phase="pretrain") > 0
    assert len(cache) == 1  # size 1: the newest only


def test_only_in_process_and_only_a_cache(data):
    fed = Federation(data.labels, InProcessChannel(), data.party_names)  # the label holder alone
    with pytest.raises(ConfigError, match="in-process federations only"):
        create("icafs", seed=0, stage1_cache=Stage1Cache(), **SMALL).fit(fed)
    with pytest.raises(ConfigError, match="stage1_cache must be a Stage1Cache"):
        create("icafs", stage1_cache={})
    with pytest.raises(ConfigError, match="size must be >= 1"):
        Stage1Cache(0)


def test_adopted_rows_are_the_synthetic_batches_at_both_ends(data):
    """The seams Algorithm 1 ends in (``ICAFSRole.adopt_synthetic`` at each party,
    ``ICAFSTrainer.adopt_synthesis`` at the label holder) give stage 2 exactly the adopted rows, in
    one batch order at the parties and the label holder."""
    from verticalfs.methods.icafs.method import ICAFSParams, ICAFSTrainer
    from verticalfs.methods.icafs.role import SYNTHETIC

    fed = Federation.in_process(data)
    tr = ICAFSTrainer(fed, "icafs", ICAFSParams(), seed=0)
    tr.setup()
    y = np.asarray(data.labels.y["train"])
    for party in data.parties:  # each party's own real rows as its block
        role = fed.local_runtime(party.name).role
        role.adopt_synthetic(role.data.X("train").clone())
    tr.adopt_synthesis(y, {})
    assert np.array_equal(tr.y_syn.numpy(), y)
    for party in data.parties:
        role = fed.local_runtime(party.name).role
        for epoch, batch in ((0, 0), (1, 1)):  # 124 rows in batches of 64: batches 0 and 1
            rows = tr.synth_plan.rows(epoch, batch)
            assert role.synth_plan.rows(epoch, batch).tolist() == rows.tolist()
            np.testing.assert_allclose(role.rows(SYNTHETIC, epoch, batch).numpy(), party.X["train"][rows])
