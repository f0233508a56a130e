"""ICAFS's mode-specific normalisation (icafs.md section IV-A): a round trip recovers the columns."""

from __future__ import annotations

import numpy as np
import pytest

from verticalfs.exceptions import DataError
from verticalfs.methods.icafs.transform import ModeSpecificNormalizer


def _columns(n=600, seed=0):
    rng = np.random.default_rng(seed)
    bimodal = np.where(rng.random(n) < 0.4, rng.normal(-5, 0.5, n), rng.normal(3, 1.0, n))
    skewed = rng.exponential(2.0, n)
    category = rng.integers(0, 4, n).astype(float)
    return np.stack([bimodal, skewed, category], 1)


def test_round_trip_recovers_every_column():
    X = _columns()
    msn = ModeSpecificNormalizer(seed=0).fit(X)
    Z = msn.transform(X)
    assert Z.shape == (len(X), msn.output_width)
    back = msn.inverse_transform(Z)
    # continuous: exact unless alpha was clipped at +-0.99 (beyond 4 sigma of its mode)
    for j in (0, 1):
        close = np.isclose(back[:, j], X[:, j], atol=1e-4)
        assert close.mean() > 0.99, j
    np.testing.assert_array_equal(back[:, 2], X[:, 2])


def test_modes_and_representation():
    X = _columns()
    msn = ModeSpecificNormalizer(seed=0).fit(X)
    info = msn.columns[0]
    assert info.kind == "continuous" and 2 <= len(info.means) <= 10
    assert np.any(np.abs(info.means + 5) < 0.5) and np.any(np.abs(info.means - 3) < 0.5)  # both modes found
    assert msn.columns[2].kind == "categorical" and msn.columns[2].width == 4
    Z = msn.transform(X)
    w0 = msn.columns[0].width
    assert np.all(np.abs(Z[:, 0]) <= 0.99)
    np.testing.assert_array_equal(Z[:, 1:w0].sum(1), 1.0)  # exactly one mode per value
    spans = msn.spans()
    assert spans[0] == (1, w0 - 1) and spans[-1] == (msn.output_width - 4, 4)
    for a, w in spans:  # every span is one-hot in every row
        np.testing.assert_array_equal(Z[:, a:a + w].sum(1), 1.0)


def test_bad_input_is_refused():
    msn = ModeSpecificNormalizer().fit(_columns())
    with pytest.raises(DataError, match="not seen"):
        msn.transform(np.array([[0.0, 1.0, 7.0]]))
    with pytest.raises(DataError, match="NaN"):
        ModeSpecificNormalizer().fit(np.array([[np.nan, 1.0]]))
    with pytest.raises(DataError, match="columns"):
        msn.inverse_transform(np.zeros((2, 3)))
