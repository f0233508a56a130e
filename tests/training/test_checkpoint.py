"""End-of-epoch checkpoints and resume, in-process (the networked case is in tests/deploy)."""

from __future__ import annotations

import json

import pytest

import verticalfs
from verticalfs.exceptions import ConfigError
from verticalfs.training import split


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


def _interrupted(data, method, params, folder, after: int) -> None:
    """Run until ``after`` epochs are recorded, then stop as a crash would (no clean-up)."""
    orig = split.SplitTrainer.record
    seen = {"n": 0}

    def record(self, *a, **k):
        entry = orig(self, *a, **k)
        seen["n"] += 1
        if seen["n"] == after:
            raise KeyboardInterrupt
        return entry

    split.SplitTrainer.record = record
    try:
        with pytest.raises(KeyboardInterrupt):
            verticalfs.run(method, data, seed=0, params=params, checkpoint_dir=folder)
    finally:
        split.SplitTrainer.record = orig


@pytest.mark.parametrize("method,params,after", [
    ("vfl", {"epochs": 4, "batch_size": 64, "hidden": (16, 8)}, 2),
    ("sparsevfl-16", {"epochs": 3, "batch_size": 64}, 2),
    # interrupted in its training stage: the pre-training is recomputed, the selection repeated
    ("less-vfl", {"pretrain_epochs": 2, "epochs": 3, "batch_size": 64, "hidden": (16, 8)}, 4),
])
def test_resume_ends_as_uninterrupted(data, tmp_path, method, params, after):
    full = verticalfs.run(method, data, seed=0, params=params)
    _interrupted(data, method, params, tmp_path, after)
    latest = json.loads((tmp_path / "latest.json").read_text())
    assert latest["epochs"] >= 1
    # a newer, half-written party file (a crash while saving) is never loaded: latest.json names the last
    # checkpoint that every side finished
    party_dir = next((tmp_path / "parties").iterdir()) / latest["run"]
    (party_dir / "s9-e99.pt").write_bytes(b"\x80half")
    res = verticalfs.run(method, data, seed=0, params=params, checkpoint_dir=tmp_path, resume=True)
    assert res.metrics == full.metrics
    assert res.selection["n_kept"] == full.selection["n_kept"]
    assert [h.get("roc_auc") for h in res.history] == [h.get("roc_auc") for h in full.history]
    phases = {k: v for k, v in res.communication["by_phase"].items() if k != "checkpoint"}
    assert phases == full.communication["by_phase"]  # the ledger as if never interrupted
    assert not (tmp_path / "latest.json").exists()


def test_resume_refuses_another_run(data, tmp_path):
    params = {"epochs": 3, "batch_size": 64, "hidden": (16, 8)}
    _interrupted(data, "vfl", params, tmp_path, 2)
    with pytest.raises(ConfigError, match="another run"):
        verticalfs.run("vfl", data, seed=1, params=params, checkpoint_dir=tmp_path, resume=True)
    with pytest.raises(ConfigError, match="nothing to resume"):
        verticalfs.run("vfl", data, seed=0, params=params, checkpoint_dir=tmp_path / "empty", resume=True)
