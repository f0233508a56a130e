"""Standard VFL training (Algorithm 2): equivalence with central, determinism, tasks, batches."""

from __future__ import annotations

import numpy as np
import pytest

import verticalfs
from verticalfs.evaluation import CLASSIFICATION_METRICS, REGRESSION_METRICS
from verticalfs.federation import Federation
from verticalfs.training import BatchPlan, SplitTrainer, TrainConfig, epoch_permutation
from verticalfs.transport import Embeddings

SMALL = {"epochs": 3, "batch_size": 64, "hidden": (16, 8)}


def history_core(history):
    """The history without byte counts (central sends none)."""
    return [{k: v for k, v in h.items() if not k.startswith("bytes")} for h in history]


@pytest.fixture(scope="module")
def bc():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


# the tests of `vfl_run` (a module fixture) form one xdist group: a second worker running some of them
# would repeat its run
SHARED_VFL_RUN = pytest.mark.xdist_group("vfl-run")


@pytest.fixture(scope="module")
def vfl_run(bc):
    return verticalfs.run("vfl", bc, seed=0, params=SMALL)


class TestEquivalenceWithCentral:
    @SHARED_VFL_RUN
    def test_identical_histories(self, bc, vfl_run):
        central = verticalfs.run("central", bc, seed=0, params=SMALL)
        a, b = history_core(vfl_run.history), history_core(central.history)
        assert len(a) == len(b) == SMALL["epochs"]
        for ha, hb in zip(a, b, strict=True):
            assert set(ha) == set(hb)
            for k in ha:
                if isinstance(ha[k], float):
                    assert ha[k] == pytest.approx(hb[k], rel=1e-6, abs=1e-9, nan_ok=True), k
                else:
                    assert ha[k] == hb[k], k
        assert central.total_bytes == 0 and vfl_run.total_bytes > 0

    def test_identical_with_mlp_top_and_sgd(self, bc):
        params = {**SMALL, "epochs": 2, "top_hidden": (8,), "optimizer": "sgd", "lr": 0.1}
        a = verticalfs.run("vfl", bc, seed=3, params=params).history
        b = verticalfs.run("central", bc, seed=3, params=params).history
        assert [h["train_loss"] for h in a] == pytest.approx([h["train_loss"] for h in b], rel=1e-6)


class TestDeterminism:
    @SHARED_VFL_RUN
    def test_same_seed_same_history(self, bc, vfl_run):
        again = verticalfs.run("vfl", bc, seed=0, params=SMALL)
        assert history_core(again.history) == history_core(vfl_run.history)
        assert again.communication == vfl_run.communication

    @SHARED_VFL_RUN
    def test_different_seed_different_history(self, bc, vfl_run):
        other = verticalfs.run("vfl", bc, seed=1, params=SMALL)
        assert [h["train_loss"] for h in other.history] != [h["train_loss"] for h in vfl_run.history]

    @SHARED_VFL_RUN
    def test_training_reduces_loss(self, vfl_run):
        losses = [h["train_loss"] for h in vfl_run.history]
        assert losses[-1] < losses[0]
        assert vfl_run.metrics["accuracy"] > 0.8


class TestTasks:
    def test_regression_improves_r2(self):
        data = verticalfs.build_data("friedman", parties=2, seed=0)
        res = verticalfs.run("vfl", data, seed=0, params={"epochs": 8, "batch_size": 64})
        r2 = [h["r2"] for h in res.history]
        assert r2[-1] > r2[0]
        assert r2[-1] > 0.5
        assert set(REGRESSION_METRICS) <= set(res.history[-1])
        assert "accuracy" not in res.metrics

    def test_multiclass(self):
        data = verticalfs.build_data("wine", parties=3, seed=0)
        res = verticalfs.run("vfl", data, seed=0, params={"epochs": 10, "batch_size": 16})
        assert data.labels.n_classes == 3
        assert res.metrics["accuracy"] > 0.6  # chance is about 0.4
        assert 0.0 <= res.metrics["roc_auc"] <= 1.0
        # the top model has one output per class
        assert res.method_obj.trainer_.top.n_outputs == 3

    @SHARED_VFL_RUN
    def test_metric_keys(self, vfl_run):
        entry = vfl_run.history[-1]
        for k in CLASSIFICATION_METRICS:
            assert k in entry and f"val_{k}" in entry
        assert {"epoch", "phase", "train_loss", "bytes", "bytes_total"} <= set(entry)
        assert [h["epoch"] for h in vfl_run.history] == [1, 2, 3]
        assert set(vfl_run.metrics) == set(CLASSIFICATION_METRICS)
        byts = [h["bytes"] for h in vfl_run.history]
        assert byts == sorted(byts) and byts[0] > 0


class TestMiniBatches:
    def test_epoch_permutation(self):
        p = epoch_permutation(100, 7, 3)
        assert sorted(p) == list(range(100))
        np.testing.assert_array_equal(p, epoch_permutation(100, 7, 3))
        assert not np.array_equal(p, epoch_permutation(100, 7, 4))

    def test_batches_cover_epoch(self):
        plan = BatchPlan(10, 4, 1)
        assert plan.n_batches == 3
        rows = np.concatenate([plan.rows(0, b) for b in range(3)])
        assert sorted(rows) == list(range(10))
        assert len(plan.rows(0, 2)) == 2

    def test_passive_and_active_plans_agree(self, bc):
        fed = Federation.in_process(bc, trace=True)
        trainer = SplitTrainer(fed, "vfl", TrainConfig(epochs=2, batch_size=64, hidden=(8,)), seed=5)
        trainer.setup()
        trainer.fit()
        for name in fed.party_names:
            plan = fed.local_runtime(name).role.plan
            assert plan is not trainer.plan
            assert (plan.n, plan.batch_size, plan.shuffle_seed) == (
                trainer.plan.n, trainer.plan.batch_size, trainer.plan.shuffle_seed)
            for e in range(3):
                for b in range(trainer.plan.n_batches):
                    np.testing.assert_array_equal(plan.rows(e, b), trainer.plan.rows(e, b))
        # every training Embeddings message has the rows of its batch
        records = list(fed.ledger.records())
        assert len(records) == len(fed.channel.decoded())
        sizes = [m.values.shape[0] for rec, (s, r, m) in zip(records, fed.channel.decoded(), strict=True)
                 if isinstance(m, Embeddings) and rec.phase == "train"]
        expected = [len(trainer.plan.rows(e, b)) for e in range(2) for b in range(trainer.plan.n_batches)
                    for _ in fed.party_names]
        assert sizes == expected

    def test_no_index_list_travels(self, bc):
        """Batches are agreed by seed: an EmbedRequest names the batch, not the rows."""
        fed = Federation.in_process(bc, trace=True)
        trainer = SplitTrainer(fed, "vfl", TrainConfig(epochs=1, batch_size=64, hidden=(8,)), seed=0)
        trainer.setup()
        trainer.train_epoch()
        reqs = [m for s, r, m in fed.channel.decoded() if type(m).__name__ == "EmbedRequest"]
        assert reqs and all(isinstance(m.batch, int) for m in reqs)
        assert fed.ledger.payload_where(kind="EmbedRequest") == 0

    def test_batch_order_depends_on_seed(self, bc):
        a = SplitTrainer(Federation.in_process(bc), "vfl", TrainConfig(), seed=0).plan
        b = SplitTrainer(Federation.in_process(bc), "vfl", TrainConfig(), seed=1).plan
        assert not np.array_equal(a.rows(0, 0), b.rows(0, 0))
