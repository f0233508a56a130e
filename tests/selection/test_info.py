"""Entropy, MI, CMI and symmetric uncertainty against hand-computed values and scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import mutual_info_score

from verticalfs.exceptions import DataError
from verticalfs.selection.info import (
    column_cmi_terms,
    column_entropy,
    column_mutual_info,
    conditional_entropy,
    conditional_mutual_info,
    entropy,
    joint_codes,
    mutual_info,
    normalised_cmi,
    symmetric_uncertainty,
)

LN2 = np.log(2.0)


class TestHandComputed:
    def test_entropy(self):
        assert entropy([0, 1, 0, 1]) == pytest.approx(1.0)
        assert entropy([0, 0, 0, 0]) == 0.0
        assert entropy([0, 1, 2, 3]) == pytest.approx(2.0)
        # p = (1/2, 1/4, 1/4): 0.5 + 0.5 + 0.5
        assert entropy([7, 7, 3, 5]) == pytest.approx(1.5)

    def test_joint_and_conditional(self):
        x = [0, 0, 1, 1]
        y = [0, 1, 0, 1]
        assert entropy(x, y) == pytest.approx(2.0)
        assert entropy(x, x) == pytest.approx(1.0)
        assert conditional_entropy(y, x) == pytest.approx(1.0)
        assert conditional_entropy(x, x) == pytest.approx(0.0)

    def test_mutual_info(self):
        assert mutual_info([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(0.0)
        assert mutual_info([0, 0, 1, 1], [5, 5, 9, 9]) == pytest.approx(1.0)
        # x = y on 3 of 4 rows: I = H(y) - H(y|x) = 1 - (1/2 * 0 + 1/2 * H(1/2... )) computed by hand
        x = [0, 0, 1, 1]
        y = [0, 0, 1, 0]  # H(Y)=H(1/4)=0.8113; H(Y|X)= 1/2*0 + 1/2*1 = 0.5
        h14 = -(0.25 * np.log2(0.25) + 0.75 * np.log2(0.75))
        assert mutual_info(x, y) == pytest.approx(h14 - 0.5)

    def test_xor_cmi(self):
        # y = x XOR z: x and z are each independent of y, but given z, x determines y
        x = np.array([0, 0, 1, 1])
        z = np.array([0, 1, 0, 1])
        y = x ^ z
        assert mutual_info(x, y) == pytest.approx(0.0)
        assert conditional_mutual_info(y, x, z) == pytest.approx(1.0)
        assert conditional_mutual_info(y, x, x) == pytest.approx(0.0)

    def test_symmetric_uncertainty(self):
        assert symmetric_uncertainty([0, 0, 1, 1], [1, 1, 0, 0]) == pytest.approx(1.0)
        assert symmetric_uncertainty([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(0.0)
        assert symmetric_uncertainty([0, 0], [0, 0]) == 0.0


class TestAgainstSklearn:
    def test_mutual_info_matches_sklearn(self):
        rng = np.random.default_rng(1)
        for _ in range(5):
            x = rng.integers(0, 6, 500)
            y = (x + rng.integers(0, 4, 500)) % 5
            assert mutual_info(x, y) == pytest.approx(mutual_info_score(x, y) / LN2, abs=1e-12)

    def test_cmi_matches_sklearn_per_stratum(self):
        rng = np.random.default_rng(2)
        z = rng.integers(0, 3, 900)
        x = rng.integers(0, 4, 900)
        y = (x * (z == 1) + rng.integers(0, 2, 900)) % 3
        ref = sum((z == v).mean() * mutual_info_score(x[z == v], y[z == v]) for v in np.unique(z)) / LN2
        assert conditional_mutual_info(x, y, z) == pytest.approx(ref, abs=1e-12)

    def test_column_functions_match_scalar_ones(self):
        rng = np.random.default_rng(3)
        C = rng.integers(0, 8, (400, 6))
        y = (C[:, 0] > 3).astype(int) ^ (rng.random(400) < 0.2)
        v = rng.integers(0, 20, 400)
        np.testing.assert_allclose(column_entropy(C), [entropy(c) for c in C.T])
        np.testing.assert_allclose(column_entropy(C, v), [entropy(v, c) for c in C.T])
        np.testing.assert_allclose(column_mutual_info(C, y), [mutual_info_score(c, y) / LN2 for c in C.T],
                                   atol=1e-12)
        t = column_cmi_terms(C, y, v)
        np.testing.assert_allclose(t["cmi"], [conditional_mutual_info(y, c, v) for c in C.T], atol=1e-12)
        support = [len(np.unique(joint_codes(y, c, v))) for c in C.T]
        np.testing.assert_array_equal(t["support"], support)


class TestNormalisedScore:
    def test_equation_12(self):
        rng = np.random.default_rng(4)
        C = rng.integers(0, 4, (300, 3))
        y = rng.integers(0, 2, 300)
        v = rng.integers(0, 5, 300)
        su = normalised_cmi(C, y, v)
        for i, c in enumerate(C.T):
            num = conditional_mutual_info(y, c, v)
            den = entropy(y, v) + entropy(v, c) - entropy(v)
            alpha = np.sqrt(len(np.unique(joint_codes(y, c, v))))
            assert su[i] == pytest.approx(num / (alpha * den))
        np.testing.assert_allclose(normalised_cmi(C, y, v, "cmi"), [conditional_mutual_info(y, c, v) for c in C.T],
                                   atol=1e-12)

    def test_identical_feature_scores_zero(self):
        rng = np.random.default_rng(5)
        f = rng.integers(0, 8, 200)
        y = (f > 3).astype(int)
        v = f.copy()
        assert normalised_cmi(f[:, None], y, v)[0] == pytest.approx(0.0, abs=1e-12)


def test_joint_codes_dense_and_no_overflow():
    rng = np.random.default_rng(6)
    cols = [rng.integers(0, 10**6, 50) for _ in range(8)]
    j = joint_codes(*cols)
    assert j.min() == 0 and j.max() == len(np.unique(np.stack(cols, 1), axis=0)) - 1


def test_rejects_non_integer_codes():
    with pytest.raises(DataError, match="integer codes"):
        entropy(np.array([0.5, 1.0]))


class TestAdjustedEstimator:
    """``estimator="adjusted"`` (issue 53): the plug-in MI / CMI less its mean under label
    permutation, so that a column with many occupied bins but no information about the labels
    scores about 0 instead of its plug-in bias, (B - 1)(|Y| - 1) / (2 n ln 2) bits and more given
    a many-valued V."""

    def test_permute_within_keeps_each_stratum(self):
        from verticalfs.selection.info import permute_within

        rng = np.random.default_rng(0)
        y = rng.integers(0, 5, 300)
        v = rng.integers(0, 7, 300)
        yp = permute_within(y, v, rng)
        assert not np.array_equal(yp, y)
        for s in range(7):  # every stratum keeps its multiset of labels
            assert sorted(yp[v == s].tolist()) == sorted(y[v == s].tolist())
        assert sorted(permute_within(y, None, rng).tolist()) == sorted(y.tolist())

    def test_noise_scores_about_zero_where_plugin_is_biased(self):
        from verticalfs.selection.info import adjusted_mutual_info

        rng = np.random.default_rng(1)
        n, k = 600, 10
        y = rng.integers(0, k, n)
        noise = rng.integers(0, 8, (n, 20))  # 8 occupied bins, independent of y
        weak = np.where(rng.random(n) < 0.15, y % 2, 0)[:, None]  # two values, a little about y
        C = np.concatenate([noise, weak], 1)
        plug = column_mutual_info(C, y)
        adj = adjusted_mutual_info(C, y, np.random.default_rng(2))
        bias = 7 * (k - 1) / (2 * n * LN2)
        assert plug[:20].mean() == pytest.approx(bias, rel=0.25)  # the plug-in bias of the noise
        assert (plug[:20] > plug[20]).sum() >= 15  # plug-in: most noise columns outrank the weak real one
        assert abs(adj[:20].mean()) < 0.15 * bias  # adjusted: the noise about 0 on average (its spread stays)
        assert adj[20] > adj[:20].max()  # ... and every noise column below the weak real one
        # a column that is the label keeps nearly all of its plug-in value
        full = adjusted_mutual_info(y[:, None], y, np.random.default_rng(3))[0]
        assert full == pytest.approx(column_mutual_info(y[:, None], y)[0], rel=0.05)

    def test_conditional_noise_given_many_valued_v(self):
        rng = np.random.default_rng(4)
        n = 800
        y = rng.integers(0, 4, n)
        v = rng.integers(0, 60, n)  # a merged statistical variable of many values
        noise = rng.integers(0, 8, (n, 10))
        info = np.where(rng.random(n) < 0.5, y, rng.integers(0, 4, n))[:, None]
        C = np.concatenate([noise, info], 1)
        plug = normalised_cmi(C, y, v, "cmi")
        adj = normalised_cmi(C, y, v, "cmi", "adjusted", np.random.default_rng(5))
        assert plug[:10].min() > 0.3  # the plug-in CMI of noise given 60 strata: large
        assert adj[:10].max() < 0.1 * plug[:10].min()
        assert adj[10] > 5 * adj[:10].max()
        su = normalised_cmi(C, y, v, "su", "adjusted", np.random.default_rng(5))
        assert su[10] > su[:10].max()

    def test_binned_matches_codes_and_unknown_estimator(self):
        from verticalfs.selection.discretize import apply_bins, fit_bins
        from verticalfs.selection.info import adjusted_mutual_info, binned_mutual_info

        rng = np.random.default_rng(6)
        X = rng.normal(size=(400, 6))
        y = (X[:, 0] > 0).astype(np.int64) + 2 * (rng.random(400) < 0.3)
        E = fit_bins(X, "equal-frequency", 8)
        got = binned_mutual_info(X, E, y, None, "adjusted", np.random.default_rng(7))
        want = adjusted_mutual_info(apply_bins(X, E), y, np.random.default_rng(7))
        np.testing.assert_allclose(got, want, atol=1e-12)
        with pytest.raises(DataError, match="estimator"):
            binned_mutual_info(X, E, y, None, "miller")
        with pytest.raises(DataError, match="estimator"):
            normalised_cmi(apply_bins(X, E), y, y, "su", "miller")
