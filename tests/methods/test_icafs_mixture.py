"""The batched per-column mixtures (``methods/icafs/mixture.py``) and the vectorised mode-specific
normalisation are pinned to their reference: scikit-learn's ``BayesianGaussianMixture`` fitted
column by column, and the per-column transform that the normaliser ran before."""

from __future__ import annotations

import numpy as np
import pytest

from verticalfs.methods.icafs.mixture import _kmeans_labels, fit_columns
from verticalfs.methods.icafs.transform import ModeSpecificNormalizer, _fit_mixture


def _columns(n=120, seed=0):
    rng = np.random.default_rng(seed)
    bimodal = np.where(rng.random(n) < 0.4, rng.normal(-5, 0.5, n), rng.normal(3, 1.0, n))
    skewed = rng.exponential(2.0, n)
    outliers = np.concatenate([rng.normal(0, 0.05, n - 2), [1.0, -0.7]])  # far points: k-means++ ties
    gene = rng.lognormal(0, 1, n)
    category = rng.integers(0, 4, n).astype(float)
    few = rng.integers(0, 12, n).astype(float)  # 12 values: continuous, 10 modes
    return np.stack([bimodal, skewed, outliers, gene, category, few], 1)


def _reference_transform(norm: ModeSpecificNormalizer, gms: dict, X: np.ndarray) -> np.ndarray:
    """The normaliser's transform as it was written per column (before the batched one)."""
    rng = np.random.default_rng(norm.seed)
    n = X.shape[0]
    out = np.zeros((n, norm.output_width), dtype=np.float32)
    pos = 0
    for j, info in enumerate(norm.columns):
        col = X[:, j]
        if info.kind == "categorical":
            out[np.arange(n), pos + np.searchsorted(info.categories, col)] = 1.0
        else:
            gm = gms[j]
            keep = gm.weights_ > norm.weight_threshold
            probs = gm.predict_proba(col.reshape(-1, 1))[:, keep] + 1e-6
            probs /= probs.sum(1, keepdims=True)
            u = rng.random((n, 1))
            k = np.minimum((np.cumsum(probs, 1) < u).sum(1), probs.shape[1] - 1)
            means, stds = gm.means_.reshape(-1)[keep], np.sqrt(gm.covariances_.reshape(-1))[keep]
            out[:, pos] = np.clip((col - means[k]) / (4 * stds[k]), -0.99, 0.99)
            out[np.arange(n), pos + 1 + k] = 1.0
        pos += info.width
    return out


@pytest.mark.parametrize("K", [3, 10])
def test_batched_mixtures_are_sklearns(K):
    X = _columns()[:, [0, 1, 2, 3, 5]]
    seeds = np.array([11, 12, 13, 14, 15])
    groups, fallback = fit_columns(X, np.full(X.shape[1], K), seeds)
    assert fallback == 0 and len(groups) == 1
    cols, mix = groups[0]
    for i, j in enumerate(cols):
        gm = _fit_mixture(X[:, j], K, int(seeds[j]))
        np.testing.assert_allclose(mix.weights[i], gm.weights_, rtol=0, atol=1e-9)
        np.testing.assert_allclose(mix.means[i], gm.means_.reshape(-1), rtol=0, atol=1e-9)
        np.testing.assert_allclose(mix.covariances[i], gm.covariances_.reshape(-1), rtol=1e-9, atol=1e-12)
        assert bool(mix.converged[i]) == bool(gm.converged_)
        np.testing.assert_allclose(mix[i:i + 1].predict_proba(X[:, [j]].T)[0], gm.predict_proba(X[:, [j]]), atol=1e-9)


def test_kmeans_initialisation_is_sklearns_including_ties():
    from sklearn.cluster import KMeans

    X = _columns()
    for j in (0, 2, 3):  # column 2's two outliers tie in k-means++'s potential
        for seed in range(5):
            ref = KMeans(10, n_init=1, random_state=np.random.RandomState(seed)).fit(X[:, [j]]).labels_
            got, empty = _kmeans_labels(X[:, j][None], 10, np.array([seed]))
            if not empty[0]:
                np.testing.assert_array_equal(got[0], ref)


def test_same_modes_on_a_bimodal_column():
    X = _columns()
    ref = ModeSpecificNormalizer(seed=0, backend="sklearn").fit(X)
    new = ModeSpecificNormalizer(seed=0).fit(X)
    assert [c.kind for c in new.columns] == [c.kind for c in ref.columns]
    assert [c.width for c in new.columns] == [c.width for c in ref.columns]
    for a, b in zip(ref.columns, new.columns, strict=True):
        np.testing.assert_allclose(b.means, a.means, atol=1e-9)
        np.testing.assert_allclose(b.stds, a.stds, atol=1e-9)
    means = new.columns[0].means
    assert np.any(np.abs(means + 5) < 0.5) and np.any(np.abs(means - 3) < 0.5)


def test_vectorised_transform_is_the_per_column_one():
    X = _columns()
    norm = ModeSpecificNormalizer(seed=4).fit(X)
    gms = {j: _fit_mixture(X[:, j], min(10, len(np.unique(X[:, j]))), 4 + j)
           for j, c in enumerate(norm.columns) if c.kind == "continuous"}
    Z = norm.transform(X)
    np.testing.assert_allclose(Z, _reference_transform(norm, gms, X), atol=1e-6)
    # the inverse round trip: exact unless alpha was clipped at +-0.99 (beyond 4 sigma of its mode)
    back = norm.inverse_transform(Z)
    for j, c in enumerate(norm.columns):
        if c.kind == "categorical":
            np.testing.assert_array_equal(back[:, j], X[:, j])
        else:
            assert np.isclose(back[:, j], X[:, j], atol=1e-4).mean() > 0.95, j


def test_inverse_transform_decodes_the_largest_entry_of_every_block():
    X = _columns()
    norm = ModeSpecificNormalizer(seed=0).fit(X)
    Z = np.random.default_rng(3).normal(size=(40, norm.output_width))
    back = norm.inverse_transform(Z)
    pos = 0
    for j, c in enumerate(norm.columns):
        block = Z[:, pos:pos + c.width]
        if c.kind == "categorical":
            np.testing.assert_array_equal(back[:, j], c.categories[block.argmax(1)])
        else:
            k = block[:, 1:].argmax(1)
            np.testing.assert_allclose(back[:, j], np.clip(block[:, 0], -1, 1) * 4 * c.stds[k] + c.means[k])
        pos += c.width
