"""The round driver (verticalfs.training.rounds): history, callbacks, NaN checks, checkpoints and
resume of round-based protocols; FATE's lasso on it."""

from __future__ import annotations

import json

import numpy as np
import pytest

import verticalfs
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.training.history import Callback
from verticalfs.training.rounds import RoundDriver

LASSO = {"n_select": 5, "key_bits": 512, "insecure": True, "epochs": 1, "rounds": 3, "batch_size": 128}


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


class Recorder(Callback):
    def __init__(self):
        self.calls = []

    def on_train_begin(self, run, total, phase):
        self.calls.append(("begin", total, phase))

    def on_epoch_end(self, run, entry):
        if "round" in entry:
            self.calls.append(("round", entry["round"], entry["phase"]))
        else:
            self.calls.append(("epoch", entry["epoch"], entry["phase"]))

    def on_train_end(self, run):
        self.calls.append(("end",))


class Counting:
    """A protocol of rounds that send nothing: figure ``x`` per round, stops when told."""

    phase = "train"

    def __init__(self, values, stop_at=None):
        self.values, self.stop_at, self.i = list(values), stop_at, 0
        self.begun = 0

    def begin(self, driver):
        self.begun += 1

    def run_round(self, index):
        assert index == self.i
        self.i += 1
        return {"x": self.values[index]}

    def stop(self, entry):
        return self.stop_at is not None and entry["round"] >= self.stop_at

    def state(self):
        return {"i": self.i}

    def load_state(self, state):
        self.i = int(state["i"])


def test_the_driver_records_each_round_tells_the_callbacks_and_stops_early(data):
    fed = Federation.in_process(data)
    rec = Recorder()
    proto = Counting([0.5, 0.25, 0.125, 1.0], stop_at=3)
    hist = RoundDriver(fed, "counting", max_rounds=4, callbacks=[rec]).run(proto)
    assert [h["round"] for h in hist] == [1, 2, 3] and [h["x"] for h in hist] == [0.5, 0.25, 0.125]
    assert all(h["phase"] == "train" and h["bytes"] == 0 and h["seconds"] >= 0 for h in hist)
    assert rec.calls == [("begin", 4, "train"), ("round", 1, "train"), ("round", 2, "train"),
                         ("round", 3, "train"), ("end",)]
    assert proto.begun == 1


def test_a_figure_that_is_not_finite_stops_the_run_naming_the_round(data):
    fed = Federation.in_process(data)
    rec = Recorder()
    with pytest.raises(ConfigError, match=r"counting: x became nan in round 2; lower the learning rate"):
        RoundDriver(fed, "counting", max_rounds=3, callbacks=[rec]).run(Counting([1.0, float("nan"), 2.0]))
    assert rec.calls[-1] == ("end",)  # the callbacks are told the loop ended


def test_fate_lasso_runs_a_round_per_training_run_of_its_search(data):
    rec = Recorder()
    res = verticalfs.run("fate-lasso", data, seed=0, params=LASSO)
    m = verticalfs.methods.create("fate-lasso", seed=0, callbacks=[rec], **LASSO)
    m.fit(Federation.in_process(data))
    runs = res.info["runs"]
    rounds = m.rounds_
    assert [r["round"] for r in rounds] == list(range(1, len(runs) + 1))
    assert [r["alpha"] for r in rounds] == [r["alpha"] for r in runs]
    assert [r["nonzero"] for r in rounds] == [r["nonzero"] for r in runs]
    assert all(r["phase"] == "selection" for r in rounds)
    assert np.all(np.diff([r["bytes"] for r in rounds]) > 0)  # bytes so far, growing with each run
    n = len(runs)
    # the rounds run inside the filter method's one step (its selection and evaluation)
    assert rec.calls == [("begin", 1, "selection"), ("begin", LASSO["rounds"], "selection"),
                         *[("round", i + 1, "selection") for i in range(n)], ("end",), ("epoch", 0, "selection"),
                         ("end",)]
    assert [h["epoch"] for h in res.history] == [0]  # the method's own history: its evaluation entry, as before


def test_fate_lasso_resumed_after_a_round_ends_as_uninterrupted(data, tmp_path, capsys):
    full = verticalfs.run("fate-lasso", data, seed=0, params=LASSO)
    assert len(full.info["runs"]) >= 2  # something left to resume
    orig = RoundDriver.record
    seen = {"n": 0}

    def record(self, *a, **k):
        entry = orig(self, *a, **k)
        seen["n"] += 1
        if seen["n"] == 2:  # after round 1 was checkpointed, in round 2: as a crash would
            raise KeyboardInterrupt
        return entry

    RoundDriver.record = record
    try:
        with pytest.raises(KeyboardInterrupt):
            verticalfs.run("fate-lasso", data, seed=0, params=LASSO, checkpoint_dir=tmp_path)
    finally:
        RoundDriver.record = orig
    (latest_file,) = tmp_path.glob("*/latest.json")  # the run's own folder (<run id>-<session>)
    latest = json.loads(latest_file.read_text())
    assert latest["epochs"] == 1
    keys = sorted(tmp_path.rglob("*.keys.json"))
    assert len(keys) == 1  # the label holder's key pair, apart from its .pt (the parties hold public keys)
    capsys.readouterr()
    res = verticalfs.run("fate-lasso", data, seed=0, params=LASSO, checkpoint_dir=tmp_path, resume=True)
    assert "after epoch 1" in capsys.readouterr().err
    assert res.info["resumed_from"]["epoch"] == 1
    assert res.metrics == full.metrics
    assert res.selection["parties"] == full.selection["parties"]
    assert [(r["alpha"], r["nonzero"], r["bytes"]) for r in res.info["runs"]] == [
        (r["alpha"], r["nonzero"], r["bytes"]) for r in full.info["runs"]]
    phases = {k: v for k, v in res.communication["by_phase"].items() if k != "checkpoint"}
    assert phases == full.communication["by_phase"]  # the ledger as if never interrupted
    assert not any(f.is_file() for f in tmp_path.rglob("*")), sorted(tmp_path.rglob("*"))
