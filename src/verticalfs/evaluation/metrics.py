"""Prediction metrics and feature-selection scores."""

from __future__ import annotations

import warnings

import numpy as np
from scipy.stats import rankdata
from sklearn import metrics as skm

CLASSIFICATION_METRICS = ("accuracy", "balanced_accuracy", "roc_auc", "f1_macro", "log_loss")
REGRESSION_METRICS = ("r2", "mse", "mae")


def primary_metric(task: str) -> str:
    """The metric a run is judged by: accuracy for classification, R² for regression."""
    return "r2" if task == "regression" else "accuracy"


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def prediction_metrics(task: str, y_true: np.ndarray, output: np.ndarray, n_classes: int | None = None) -> dict[str, float]:
    """Metrics of a model output against the labels.

    Parameters
    ----------
    task : {"binary", "multiclass", "regression"}
    y_true : array of shape (n,)
    output : array
        Logits of shape (n, C) for classification (or probabilities; softmax is applied to
        logits), predictions of shape (n,) or (n, 1) for regression.
    """
    y_true = np.asarray(y_true)
    out = np.asarray(output, dtype=np.float64)
    if len(y_true) == 0:
        return {}
    if task == "regression":
        pred = out.reshape(-1)
        return {
            "r2": float(skm.r2_score(y_true, pred)),
            "mse": float(skm.mean_squared_error(y_true, pred)),
            "mae": float(skm.mean_absolute_error(y_true, pred)),
        }
    proba = _softmax(out) if out.ndim == 2 else np.stack([1 - out, out], 1)
    pred = proba.argmax(1)
    res = {
        "accuracy": float(skm.accuracy_score(y_true, pred)),
        "balanced_accuracy": float(skm.balanced_accuracy_score(y_true, pred)),
        "f1_macro": float(skm.f1_score(y_true, pred, average="macro", zero_division=0)),
    }
    res["roc_auc"] = roc_auc(y_true, proba)
    # breaks ties of saturated scores when choosing the best epoch
    res["log_loss"] = float(skm.log_loss(y_true, proba, labels=np.arange(proba.shape[1])))
    return res


def roc_auc(y_true: np.ndarray, proba: np.ndarray) -> float:
    """Binary ROC-AUC, or macro one-vs-rest over the classes present; NaN if undefined."""
    present = np.unique(y_true)
    if len(present) < 2:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if proba.shape[1] == 2:
            return float(skm.roc_auc_score(y_true, proba[:, 1]))
        return float(np.mean(_ovr_auc(y_true, proba, present)))


def _ovr_auc(y_true: np.ndarray, proba: np.ndarray, present: np.ndarray) -> np.ndarray:
    """One-vs-rest ROC-AUC of every class in ``present`` at once, by the Mann-Whitney statistic:
    the AUC of class ``c`` is (sum of the ranks of its rows in column ``c`` - n_c (n_c + 1) / 2) /
    (n_c (n - n_c)), ties ranked by their average, which is the trapezoidal area that
    ``roc_auc_score(y_true == c, proba[:, c])`` computes (tested to 1e-12). One ranking of the
    columns instead of a call per class: 30 classes took a second per evaluation in SEFS's epochs."""
    columns = np.asarray(proba)[:, present]
    ranks = rankdata(columns, axis=0)
    positive = np.asarray(y_true)[:, None] == present[None, :]
    n_pos = positive.sum(axis=0).astype(np.float64)
    n_neg = len(y_true) - n_pos
    rank_sum = np.where(positive, ranks, 0.0).sum(axis=0)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def selection_scores(kept: np.ndarray, spurious: np.ndarray) -> dict[str, float]:
    """Feature-selection scores against a ground-truth mask.

    Parameters
    ----------
    kept : bool array
        ``True`` for features the method kept.
    spurious : bool array
        ``True`` for features known to be irrelevant.

    Returns
    -------
    dict
        ``spurious_removed`` (fraction of spurious features removed), ``tpr`` (fraction of relevant
        features kept), ``precision`` (fraction of kept features that are relevant), plus counts.
    """
    kept = np.asarray(kept, dtype=bool)
    spurious = np.asarray(spurious, dtype=bool)
    n_sp = int(spurious.sum())
    n_rel = int((~spurious).sum())
    removed_sp = int((~kept & spurious).sum())
    kept_rel = int((kept & ~spurious).sum())
    return {
        "spurious_removed": removed_sp / n_sp if n_sp else float("nan"),
        "tpr": kept_rel / n_rel if n_rel else float("nan"),
        "precision": kept_rel / int(kept.sum()) if kept.sum() else float("nan"),
        "n_kept": int(kept.sum()),
        "n_spurious": n_sp,
        "n_spurious_removed": removed_sp,
    }
