"""Discretisers: bin counts, supervised cut points on a separable case, refusal without labels."""

from __future__ import annotations

import numpy as np
import pytest

from verticalfs.exceptions import ConfigError
from verticalfs.selection.discretize import apply_bins, check_discretizer, discretize, fit_bins


def test_equal_frequency_bin_counts():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(800, 3))
    codes = discretize(X, "equal-frequency", 8)
    assert codes.dtype == np.int32 and codes.shape == (800, 3)
    for c in codes.T:
        np.testing.assert_array_equal(np.bincount(c), [100] * 8)


def test_equal_frequency_with_ties_keeps_codes_dense():
    x = np.r_[np.zeros(70), np.ones(30)][:, None]  # a one-hot column
    codes = discretize(x, "equal-frequency", 8)[:, 0]
    np.testing.assert_array_equal(np.unique(codes), [0, 1])
    assert (codes == (x[:, 0] > 0)).all()
    const = discretize(np.full((10, 1), 3.0), "equal-frequency", 8)
    assert (const == 0).all()


def test_equal_width():
    x = np.linspace(0, 1, 101)[:, None]
    codes = discretize(x, "equal-width", 4)[:, 0]
    assert codes.max() == 3
    assert codes[0] == 0 and codes[-1] == 3
    # a value on a cut point goes to the lower bin
    assert codes[25] == 0 and codes[26] == 1


def test_bins_fitted_once_applied_elsewhere():
    rng = np.random.default_rng(1)
    X = rng.random((200, 2))
    E = fit_bins(X, "equal-frequency", 4)
    new = np.array([[-1.0, 2.0]])
    np.testing.assert_array_equal(apply_bins(new, E), [[0, 3]])


@pytest.mark.parametrize("method", ["mdlp", "chimerge"])
def test_supervised_separable(method):
    rng = np.random.default_rng(2)
    x = np.r_[rng.uniform(0, 0.4, 150), rng.uniform(0.6, 1.0, 150)]
    y = np.r_[np.zeros(150, int), np.ones(150, int)]
    E = fit_bins(x, method, 8, y)
    cuts = E[0][~np.isnan(E[0])]
    assert len(cuts) == 1
    assert 0.39 <= cuts[0] <= 0.6
    codes = apply_bins(x, E)[:, 0]
    np.testing.assert_array_equal(codes, y)


@pytest.mark.parametrize("method", ["mdlp", "chimerge"])
def test_supervised_uninformative_column_is_not_split_much(method):
    rng = np.random.default_rng(3)
    x = rng.random(400)
    y = rng.integers(0, 2, 400)
    E = fit_bins(x, method, 8, y)
    n_cuts = int((~np.isnan(E[0])).sum())
    assert n_cuts <= (0 if method == "mdlp" else 7)


def test_supervised_respects_max_bins():
    x = np.arange(400, dtype=float)
    y = (np.arange(400) // 25) % 2  # 16 alternating runs
    for method in ("mdlp", "chimerge"):
        codes = discretize(x, method, 4, y)
        assert codes.max() <= 3


@pytest.mark.parametrize("method", ["mdlp", "chimerge"])
def test_refused_without_labels(method):
    with pytest.raises(ConfigError, match=r"party 'bank'.*only the label holder.*equal-frequency"):
        fit_bins(np.random.default_rng(0).random((20, 2)), method, 8, None, party="bank")
    with pytest.raises(ConfigError, match="party 'bank'"):
        check_discretizer(method, has_labels=False, party="bank")


def test_unknown_discretizer_and_bad_bins():
    with pytest.raises(ConfigError, match="unknown discretizer"):
        discretize(np.zeros((3, 1)), "kmeans")
    with pytest.raises(ConfigError, match="at least 2"):
        discretize(np.zeros((3, 1)), bins=1)
