"""The in-memory form of a whole (not yet partitioned) data set.

A :class:`Table` is what every loader returns: one row per sample, feature columns in a
:class:`pandas.DataFrame`, the label vector, sample ids and the task type. It exists only *before*
the data are split between parties (or, for a user's own data, after the per-party files have been
aligned by id); from then on :class:`verticalfs.data.VerticalDataset` holds per-party blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from verticalfs.exceptions import DataError

Task = Literal["binary", "multiclass", "regression"]
TASKS: tuple[str, ...] = ("binary", "multiclass", "regression")


@dataclass
class Table:
    """A data set before vertical partitioning.

    Parameters
    ----------
    name : str
        Data set name (e.g. ``"phishing"``).
    X : pandas.DataFrame
        Feature columns, one row per sample. Numeric columns are float; categorical columns
        (listed in ``categorical``) may hold strings and are one-hot encoded by preprocessing.
    y : numpy.ndarray
        Labels, shape ``(n,)``. For classification: integer codes ``0..C-1``; for regression: float.
    task : {"binary", "multiclass", "regression"}
    ids : numpy.ndarray, optional
        Sample ids, shape ``(n,)``; defaults to ``0..n-1``.
    categorical : list of str
        Names of the categorical columns of ``X``.
    class_names : list of str, optional
        Original label of each class code.
    spurious : numpy.ndarray of bool, optional
        Ground truth: ``True`` for columns known to be irrelevant (e.g. MADELON probes). Kept apart
        for evaluation only; no party and no method reads it.
    predefined_test : numpy.ndarray of bool, optional
        Rows that belong to the data set's official test split (Adult, USPS), if it has one.
    impute : {None, "median"}
        How preprocessing fills missing numeric values by default (fitted on each party's own
        training rows). ``None``: missing values are an error.
    """

    name: str
    X: pd.DataFrame
    y: np.ndarray
    task: Task
    ids: np.ndarray | None = None
    categorical: list[str] = field(default_factory=list)
    class_names: list[str] | None = None
    spurious: np.ndarray | None = None
    predefined_test: np.ndarray | None = None
    impute: str | None = None

    def __post_init__(self) -> None:
        n = len(self.X)
        if self.task not in TASKS:
            raise DataError(f"data set {self.name!r}: unknown task {self.task!r}; use one of {TASKS}")
        self.y = np.asarray(self.y)
        if self.y.shape != (n,):
            raise DataError(
                f"data set {self.name!r}: labels have shape {self.y.shape}, expected ({n},) to match "
                f"{n} feature rows"
            )
        if self.ids is None:
            self.ids = np.arange(n)
        self.ids = np.asarray(self.ids)
        if self.ids.shape != (n,):
            raise DataError(f"data set {self.name!r}: ids have shape {self.ids.shape}, expected ({n},)")
        if self.spurious is None:
            self.spurious = np.zeros(self.X.shape[1], dtype=bool)
        self.spurious = np.asarray(self.spurious, dtype=bool)
        if self.spurious.shape != (self.X.shape[1],):
            raise DataError(
                f"data set {self.name!r}: spurious mask has shape {self.spurious.shape}, expected "
                f"({self.X.shape[1]},)"
            )
        missing = [c for c in self.categorical if c not in self.X.columns]
        if missing:
            raise DataError(f"data set {self.name!r}: categorical columns {missing} are not in X")
        if self.task != "regression":
            self.y = self.y.astype(np.int64)

    @property
    def n_samples(self) -> int:
        return len(self.X)

    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    @property
    def n_classes(self) -> int:
        """Number of classes (1 for regression)."""
        if self.task == "regression":
            return 1
        return int(self.y.max()) + 1

    @property
    def feature_names(self) -> list[str]:
        return [str(c) for c in self.X.columns]
