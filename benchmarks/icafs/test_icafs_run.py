"""The ICAFS benchmark's shortcut: Table IV's K = 2 run and Tables V and VI's runs of one seed share
stage 1 (``run.py``, :func:`run_group`, through the library's ``stage1_cache``, whose own tests are
``tests/methods/test_icafs_stage1.py``), and a run that restores it is the run that computes it
again; and the oracle of ``mapping.py``."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def load(name: str):
    """A script of this folder as a module of its own name (several benchmark folders hold a run.py)."""
    spec = importlib.util.spec_from_file_location(f"icafs_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return load("run")


#: stages 2-3 shortened (they do not change stage 1): seconds, not minutes
SHORT = {"epochs": 2, "refit_epochs": 1, "hidden": (16, 8)}


def job(kind: str, seed: int = 0, **extra) -> dict:
    return {"data_dir": None, "synth_steps": 3, "dataset": "wine", "parties": 2, "seed": seed, "method": "icafs",
            "kind": kind, **extra}


def short(j: dict) -> dict:
    return {**j, "params": {**SHORT, **j.get("params", {})}}


def test_what_shares_stage_1(bench):
    t4 = job("table4", quality=True, cost=True)
    dp = job("table5", eps=5.0, params={"dp_epsilon": 5.0})
    fixed = job("table6", variant="fixed-temp", params={"variant": "fixed-temp"})
    assert bench.stage1_key(t4) == bench.stage1_key(dp) == bench.stage1_key(fixed) is not None
    assert bench.stage1_key(job("table4", seed=1)) != bench.stage1_key(t4)
    assert bench.stage1_key(job("table6", variant="no-fs", params={"variant": "no-fs"})) is None  # no synthesis
    assert bench.stage1_key(job("table8", noise=0.5)) is None  # other data
    assert bench.stage1_key(job("table5", params={"dp_epsilon": 5.0, "synth_batch": 64})) is None  # other stage 1
    assert bench.stage1_key({**t4, "method": "sefs"}) is None
    grouped = bench.groups([fixed, dp, t4, job("table8", noise=0.5)])
    assert [[j["kind"] for j in g] for g in grouped] == [["table4", "table6", "table5"], ["table8"]]


def test_a_restored_stage_1_gives_the_run_that_computes_it(bench, monkeypatch):
    from verticalfs.methods.icafs import dp

    # DP-SGD's noise is keyed by OS entropy, so two DP runs differ by design: pinned here so that
    # the comparison sees stage 1 alone
    monkeypatch.setattr(dp, "noise_seed", lambda: 0)
    jobs = [short(j) for j in (job("table4", quality=True, cost=True),
                               job("table6", variant="fixed-temp", params={"variant": "fixed-temp"}),
                               job("table5", eps=20.0, params={"dp_epsilon": 20.0}))]
    assert len({bench.stage1_key(j) for j in jobs}) == 1  # stage 2-3 settings share stage 1
    alone = [bench.run_one(j) for j in jobs[1:]]
    shared = bench.run_group(jobs)
    assert not shared[0]["info"].get("synthesis_reused")  # Table IV's run computes its own (cost, quality)
    for a, s in zip(alone, shared[1:], strict=True):
        assert s["info"]["synthesis_reused"] == 1 and not a["info"].get("synthesis_reused")
        assert s["metrics"] == a["metrics"] and s["support"] == a["support"]
        assert s["info"]["synthesis_bytes"] == a["info"]["synthesis_bytes"]
        assert s["mbytes"] < a["mbytes"]  # the restored run sent no stage-1 message
    assert len(bench.stage1_cache()) == 0  # a worker keeps nothing between groups
    # and the report writes Tables V and VI from such runs (it once formatted a variant as a number)
    args = argparse.Namespace(datasets="wine", clients="2", seeds=1, only="table5,table6", methods="", synth_steps=3)
    text = bench.report(shared, args)
    assert "| epsilon 20 | " in text and "| fixed-temp | " in text and "| ICAFS | " in text


def test_the_oracle_of_the_mapping_diagnostic_learns_the_gates_on_the_real_rows():
    """``mapping.py --stage1 real`` replaces Algorithm 1's output by each party's own real training
    rows and the real labels: stage 2 then draws its "synthetic" batches from exactly those (that
    the parties and the label holder stay aligned is the library's, tested in tests/methods)."""
    import numpy as np

    import verticalfs
    from verticalfs.federation import Federation
    from verticalfs.methods.icafs.method import ICAFSParams, ICAFSTrainer
    from verticalfs.methods.icafs.role import SYNTHETIC

    mapping = load("mapping")
    data = verticalfs.build_data("wine", parties=2, seed=0)
    fed = Federation.in_process(data)
    tr = ICAFSTrainer(fed, "icafs", ICAFSParams(), seed=0)
    tr.setup()
    mapping.real_as_synthetic(tr, fed, data)
    assert np.array_equal(tr.y_syn.numpy(), np.asarray(data.labels.y["train"]))
    for party in data.parties:
        role = fed.local_runtime(party.name).role
        got = role.rows(SYNTHETIC, 0, 0).numpy()
        assert np.allclose(got, party.X["train"][role.synth_plan.rows(0, 0)])
    out = mapping.run_seed({"seed": 0, "dataset": "wine", "parties": 2, "data_dir": None, "stage1": "real",
                            "params": SHORT})
    assert set(out["accuracy"]) == set(mapping.MAPPINGS) and all(0.5 < a <= 1 for a in out["accuracy"].values())
    assert len(out["open_share"]) == sum(tr.embedding_dims.values())
