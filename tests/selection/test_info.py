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
