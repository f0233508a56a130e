"""Fixtures shared by the method tests."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification

import verticalfs
from verticalfs.data.table import Table


@pytest.fixture(scope="module")
def four():
    """Four classes (beyond the penalty paths' lam_classes = 3), 300 rows, 12 columns + 6 noise,
    two parties: the many-class data of the gates' and group lasso's penalty-path tests."""
    X, y = make_classification(n_samples=300, n_features=12, n_informative=6, n_redundant=2, n_classes=4,
                               n_clusters_per_class=1, class_sep=2.0, random_state=0)
    t = Table(name="four", X=pd.DataFrame(X, columns=[f"f{j}" for j in range(12)]), y=y.astype(np.int64),
              task="multiclass")
    return verticalfs.build_data(t, parties=2, noise=0.5, seed=0)
