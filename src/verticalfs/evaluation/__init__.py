"""Metrics, feature-selection scores and figures read off a history."""

from verticalfs.evaluation.metrics import (
    CLASSIFICATION_METRICS,
    REGRESSION_METRICS,
    prediction_metrics,
    primary_metric,
    roc_auc,
    selection_scores,
)
from verticalfs.evaluation.targets import bytes_to_reach, target_figure

__all__ = [
    "CLASSIFICATION_METRICS",
    "REGRESSION_METRICS",
    "bytes_to_reach",
    "prediction_metrics",
    "primary_metric",
    "roc_auc",
    "selection_scores",
    "target_figure",
]
