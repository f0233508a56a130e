"""Prediction metrics, selection scores and bytes-to-target."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn import metrics as skm

from verticalfs.evaluation import (
    bytes_to_reach,
    prediction_metrics,
    primary_metric,
    roc_auc,
    selection_scores,
)


class TestPredictionMetrics:
    def test_binary_logits(self):
        rng = np.random.default_rng(0)
        y = rng.integers(0, 2, 200)
        logits = rng.standard_normal((200, 2)) + np.eye(2)[y] * 0.8
        m = prediction_metrics("binary", y, logits, 2)
        pred = logits.argmax(1)
        z = logits - logits.max(1, keepdims=True)
        proba = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        assert m["accuracy"] == pytest.approx(skm.accuracy_score(y, pred))
        assert m["balanced_accuracy"] == pytest.approx(skm.balanced_accuracy_score(y, pred))
        assert m["f1_macro"] == pytest.approx(skm.f1_score(y, pred, average="macro"))
        assert m["roc_auc"] == pytest.approx(skm.roc_auc_score(y, proba[:, 1]))
        assert 0.5 < m["accuracy"] < 1.0

    def test_known_values(self):
        y = np.array([0, 0, 1, 1])
        logits = np.array([[2.0, 0.0], [0.0, 1.0], [0.0, 3.0], [0.0, 2.0]])
        m = prediction_metrics("binary", y, logits)
        assert m["accuracy"] == 0.75
        assert m["balanced_accuracy"] == 0.75
        assert m["roc_auc"] == 1.0  # the ranking of P(class 1) is perfect

    def test_multiclass(self):
        rng = np.random.default_rng(1)
        y = rng.integers(0, 4, 300)
        logits = rng.standard_normal((300, 4)) + np.eye(4)[y]
        m = prediction_metrics("multiclass", y, logits, 4)
        z = np.exp(logits - logits.max(1, keepdims=True))
        proba = z / z.sum(1, keepdims=True)
        assert m["accuracy"] == pytest.approx(skm.accuracy_score(y, logits.argmax(1)))
        assert m["roc_auc"] == pytest.approx(
            skm.roc_auc_score(y, proba, multi_class="ovr", average="macro"))

    def test_multiclass_auc_equals_sklearn_per_class_with_ties_and_an_absent_class(self):
        # the rank statistic against scikit-learn's trapezoid, class by class: coarse probabilities
        # (many ties) and a class that never occurs in y (left out of the macro mean)
        rng = np.random.default_rng(3)
        y = rng.choice([0, 1, 2, 4, 5], size=400)
        proba = np.round(rng.dirichlet(np.ones(6), size=400) + 0.3 * np.eye(6)[y], 1)
        present = np.unique(y)
        expected = np.mean([skm.roc_auc_score(y == c, proba[:, c]) for c in present])
        assert roc_auc(y, proba) == pytest.approx(expected, rel=1e-12, abs=1e-12)

    def test_roc_auc_single_class_is_nan(self):
        assert math.isnan(roc_auc(np.zeros(5, int), np.full((5, 2), 0.5)))

    def test_regression(self):
        rng = np.random.default_rng(2)
        y = rng.standard_normal(50)
        pred = y + rng.standard_normal(50) * 0.3
        m = prediction_metrics("regression", y, pred.reshape(-1, 1))
        assert m["r2"] == pytest.approx(skm.r2_score(y, pred))
        assert m["mse"] == pytest.approx(skm.mean_squared_error(y, pred))
        assert m["mae"] == pytest.approx(skm.mean_absolute_error(y, pred))
        assert set(m) == {"r2", "mse", "mae"}

    def test_empty(self):
        assert prediction_metrics("binary", np.array([]), np.zeros((0, 2))) == {}

    def test_primary_metric(self):
        assert primary_metric("regression") == "r2"
        assert primary_metric("binary") == primary_metric("multiclass") == "accuracy"


class TestSelectionScores:
    def test_known_mask(self):
        spurious = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1], bool)
        kept = np.array([1, 1, 1, 0, 1, 0, 0, 0, 0, 1], bool)
        s = selection_scores(kept, spurious)
        assert s["spurious_removed"] == pytest.approx(4 / 6)
        assert s["tpr"] == pytest.approx(3 / 4)
        assert s["precision"] == pytest.approx(3 / 5)
        assert (s["n_kept"], s["n_spurious"], s["n_spurious_removed"]) == (5, 6, 4)

    def test_no_spurious_and_nothing_kept(self):
        s = selection_scores(np.zeros(3, bool), np.zeros(3, bool))
        assert math.isnan(s["spurious_removed"]) and math.isnan(s["precision"])
        assert s["tpr"] == 0.0


class TestBytesToReach:
    @pytest.fixture
    def history(self):
        return [
            {"epoch": 1, "bytes": 100, "accuracy": 0.70, "spurious_removed": 0.1},
            {"epoch": 2, "bytes": 200, "accuracy": 0.85, "spurious_removed": 0.5},
            {"epoch": 3, "bytes": 300, "accuracy": 0.84, "spurious_removed": 0.9},
            {"epoch": 4, "bytes": 400, "accuracy": 0.90, "spurious_removed": 0.9, "mse": 0.2},
        ]

    def test_first_entry_reaching_target(self, history):
        assert bytes_to_reach(history, 0.85) == 200.0
        assert bytes_to_reach(history, 0.7) == 100.0
        assert bytes_to_reach(history, 0.86) == 400.0

    def test_with_spurious_constraint(self, history):
        assert bytes_to_reach(history, 0.8, min_spurious_removed=0.8) == 300.0
        assert bytes_to_reach(history, 0.85, min_spurious_removed=0.8) == 400.0
        assert bytes_to_reach(history, 0.85, min_spurious_removed=0.95) is None

    def test_never_reached(self, history):
        assert bytes_to_reach(history, 0.99) is None
        assert bytes_to_reach([], 0.5) is None

    def test_lower_is_better_and_missing_metric(self, history):
        assert bytes_to_reach(history, 0.3, metric="mse", higher_is_better=False) == 400.0
        assert bytes_to_reach(history, 0.1, metric="mse", higher_is_better=False) is None

    def test_missing_spurious_removed_does_not_count(self):
        h = [{"bytes": 1, "accuracy": 0.9}]
        assert bytes_to_reach(h, 0.5, min_spurious_removed=0.1) is None
        assert bytes_to_reach(h, 0.5) == 1.0


def test_log_loss_equals_scikit_learn():
    import numpy as np
    from sklearn.metrics import log_loss

    from verticalfs.evaluation.metrics import prediction_metrics

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(50, 4))
    y = rng.integers(0, 4, 50)
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    got = prediction_metrics("multiclass", y, logits, 4)["log_loss"]
    assert abs(got - log_loss(y, p, labels=range(4))) < 1e-9
