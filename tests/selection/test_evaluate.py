"""The classifiers trained on selected columns, and the FilterMethod base class."""

from __future__ import annotations

import numpy as np
import pytest

import verticalfs
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.methods.filter import FilterMethod, FilterParams, FilterRole
from verticalfs.selection import (
    CLASSIFIERS,
    cross_validate_selected,
    evaluate_selected,
    make_classifier,
)

ROLES = {"fixed-test": FilterRole}


@pytest.fixture(scope="module")
def xy():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=300) > 0).astype(int)
    return X, y


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_every_classifier_learns(name, xy):
    X, y = xy
    met = evaluate_selected(X[:200], y[:200], X[200:], y[200:], name, seed=0)
    assert met["roc_auc"] > 0.85
    assert 0.0 <= met["accuracy"] <= 1.0


def test_svm_accuracy_uses_decision_threshold(xy):
    X, y = xy
    met = evaluate_selected(X[:200], y[:200], X[200:], y[200:], "svm")
    pred = make_classifier("svm").fit(X[:200], y[:200]).predict(X[200:])
    assert met["accuracy"] == pytest.approx(float((pred == y[200:]).mean()))


def test_no_columns_predicts_the_prior(xy):
    X, y = xy
    met = evaluate_selected(X[:200, :0], y[:200], X[200:, :0], y[200:], "lr")
    assert met["roc_auc"] == pytest.approx(0.5)


def test_cross_validation(xy):
    X, y = xy
    met = cross_validate_selected(X, y, "lr", folds=5)
    assert met["roc_auc"] > 0.9
    with pytest.raises(ConfigError, match="folds"):
        cross_validate_selected(X, y, "lr", folds=1)


def test_unknown_classifier():
    with pytest.raises(ConfigError, match="unknown classifier"):
        make_classifier("knn")


class Fixed(FilterMethod):
    name = "fixed-test"
    Params = FilterParams

    def select(self, fed):
        a, b = fed.party_names[:2]
        return [(b, 2), (a, 0), (b, 0)]


def test_filter_method_gathers_in_selection_order():
    data = verticalfs.build_data("breast_cancer", parties=3, seed=0)
    fed = Federation.in_process(data, trace=True, roles=ROLES)
    m = Fixed(seed=0, n_select=3).fit(fed)  # its three features (the default, auto, would search)
    a, b = fed.party_names[:2]
    assert m.info_["selected"] == [f"{b}:{data.party(b).feature_names[2]}", f"{a}:{data.party(a).feature_names[0]}",
                                   f"{b}:{data.party(b).feature_names[0]}"]
    assert m.support_[b].tolist()[:3] == [True, False, True] and m.support_[b].sum() == 2
    # gathering is metered in phase "train"; the history entry counts it
    assert m.info_["selection_bytes"] == 0 and m.info_["gather_bytes"] > 0
    assert fed.ledger.bytes_where(phase="train") == m.info_["gather_bytes"]
    assert m.history_[0]["bytes"] == m.info_["gather_bytes"]
    assert fed.ledger.total_bytes == m.info_["gather_bytes"] + fed.ledger.bytes_where(phase="setup")
    X, _ = m.gather(fed, m.selected_)
    ref = np.stack([data.party(b).X["test"][:, 2], data.party(a).X["test"][:, 0], data.party(b).X["test"][:, 0]], 1)
    np.testing.assert_array_equal(X["test"], ref)
    # every party now reports the selected features as its kept ones
    for p, mask in fed.observe_support().items():
        np.testing.assert_array_equal(mask, m.support_[p])


def test_n_select_validated():
    data = verticalfs.build_data("breast_cancer", parties=3, seed=0)
    with pytest.raises(ConfigError, match="n_select"):
        Fixed(seed=0, n_select=31).fit(Federation.in_process(data, roles=ROLES))
    with pytest.raises(ConfigError, match="classifier"):
        Fixed(seed=0, classifier="knn").fit(Federation.in_process(data, roles=ROLES))
