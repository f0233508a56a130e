"""``VerticalSelector``: a scikit-learn selector over federated selection."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.utils.estimator_checks import check_estimator

from verticalfs.exceptions import ConfigError
from verticalfs.sklearn import VerticalSelector


def test_passes_check_estimator():
    failed = {}

    def record(**kw):
        if kw.get("status") == "failed":
            failed[kw["check_name"]] = kw.get("exception")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_estimator(VerticalSelector(), on_fail=None, callback=record)
    assert not failed, failed


@pytest.fixture(scope="module")
def xy():
    X, y = make_classification(n_samples=400, n_features=12, n_informative=3, n_redundant=0,
                               n_clusters_per_class=1, class_sep=1.5, shuffle=False, random_state=0)
    return X, y


def test_selects_the_informative_columns(xy):
    X, y = xy  # shuffle=False: the 3 informative columns come first
    sel = VerticalSelector(method="feast", parties={"a": range(0, 6), "b": range(6, 12)},
                           params={"n_select": 3}).fit(X, y)
    assert sel.get_support(indices=True).tolist() == [0, 1, 2]
    assert sel.transform(X).shape == (400, 3)
    assert list(sel.get_feature_names_out()) == ["x0", "x1", "x2"]
    assert sel.bytes_sent_ > 0 and sel.result_.communication["total_bytes"] == sel.bytes_sent_
    assert list(sel.party_of_[:6]) == ["a"] * 6


def test_columns_by_name_and_unused_columns():
    import pandas as pd

    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    parties = {"bank": list(X.columns[:10]), "telecom": list(X.columns[10:20])}  # last 10 unused
    sel = VerticalSelector(method="mi", parties=parties, params={"n_select": 4}).fit(X, y)
    assert sel.get_support().sum() == 4 and not sel.get_support()[20:].any()
    out = sel.get_feature_names_out()
    assert set(out) <= set(X.columns[:20])
    assert isinstance(sel.transform(X), (np.ndarray, pd.DataFrame))
    with pytest.raises(ConfigError, match="both"):
        VerticalSelector(parties={"a": [0, 1], "b": [1]}).fit(X.values, y)


def test_in_a_pipeline_with_grid_search_and_clone(xy):
    X, y = xy
    pipe = Pipeline([("select", VerticalSelector(method="mi", n_parties=3)),
                     ("clf", LogisticRegression(max_iter=500))])
    grid = GridSearchCV(pipe, {"select__params": [{"n_select": 1}, {"n_select": 3}]}, cv=3)
    grid.fit(X, y)
    scores = grid.cv_results_["mean_test_score"]
    best = grid.cv_results_["params"][int(np.argmax(scores))]
    assert grid.best_params_ == best and min(scores) > 0.8
    n = best["select__params"]["n_select"]
    assert grid.best_estimator_.named_steps["select"].get_support().sum() == n
    twin = clone(pipe.named_steps["select"])
    assert twin.get_params() == pipe.named_steps["select"].get_params()
    assert not hasattr(twin, "support_")


def test_a_selecting_trainer_works_too(xy):
    X, y = xy
    sel = VerticalSelector(method="group-lasso", params={"epochs": 3, "lambda_m": 5.0, "hidden": (8,)}).fit(X, y)
    assert 0 < sel.get_support().sum() <= 12
