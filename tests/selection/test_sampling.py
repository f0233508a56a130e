"""FEAST's sample-size rule (feast.md equation 17) and stratified sampling."""

from __future__ import annotations

import numpy as np
import pytest

from verticalfs.exceptions import ConfigError
from verticalfs.selection.sampling import feast_sample_size, resolve_sample_size, stratified_sample


def test_sample_size_rule():
    # B^(m+1) |Y| = 8^4 * 2 = 8192, at most L
    assert feast_sample_size(100_000, 8, 3, 2) == 8192
    assert feast_sample_size(4000, 8, 3, 2) == 4000
    assert feast_sample_size(100_000, 5, 2, 3) == 375
    assert feast_sample_size(100_000, 2, 1, 2) == 8
    assert resolve_sample_size(0, 30_000, 8, 3, 2) == 8192
    assert resolve_sample_size(-1, 30_000, 8, 3, 2) == 30_000
    assert resolve_sample_size(500, 300, 8, 3, 2) == 300
    with pytest.raises(ConfigError, match="sample_size"):
        resolve_sample_size(-2, 10, 8, 3, 2)


def test_stratified_sample_keeps_class_proportions():
    y = np.r_[np.zeros(900, int), np.ones(100, int)]
    rng = np.random.default_rng(0)
    y = y[rng.permutation(1000)]
    rows = stratified_sample(y, 250, np.random.default_rng(1))
    assert len(rows) == 250 and len(np.unique(rows)) == 250
    assert (np.diff(rows) > 0).all()
    np.testing.assert_array_equal(np.bincount(y[rows]), [225, 25])
    again = stratified_sample(y, 250, np.random.default_rng(1))
    np.testing.assert_array_equal(rows, again)
    np.testing.assert_array_equal(stratified_sample(y, 1000, rng), np.arange(1000))


def test_stratified_sample_keeps_rare_class():
    y = np.r_[np.zeros(995, int), np.ones(5, int)]
    rows = stratified_sample(y, 50, np.random.default_rng(0))
    assert np.bincount(y[rows]).tolist() == [49, 1]
