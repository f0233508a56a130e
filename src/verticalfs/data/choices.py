"""The data options' allowed values, in a module that imports nothing (issue 53): the command line
checks its options against them before pandas or scikit-learn are loaded."""

from __future__ import annotations

#: scaling of the numeric columns (:mod:`verticalfs.data.preprocess`)
SCALINGS: tuple[str, ...] = ("minmax", "standard", "robust", "quantile", "none")
#: imputation of missing values, as the preprocessing takes it
PREPROCESS_IMPUTATIONS: tuple[str, ...] = ("median", "mean", "most-frequent", "none")
#: imputation as a data set's preparation takes it ("auto": median where values are missing)
IMPUTATIONS: tuple[str, ...] = ("auto", *PREPROCESS_IMPUTATIONS)
#: the column splits of ``partition``
STRATEGIES: tuple[str, ...] = ("random", "contiguous")
