"""Data sets that need no files and no network: synthetic generators and scikit-learn's bundled data.

- :func:`madelon_synth`: a MADELON-style problem with known probes (ground truth for selection).
- :func:`friedman`: Friedman #1 regression with 5 relevant and 5 irrelevant inputs.
- :func:`multiclass_synth`: 30 classes over 500 informative and redundant features (many classes,
  a wide table: what the papers' mostly binary sets do not exercise).
- :func:`breast_cancer`, :func:`digits`, :func:`wine`: small real data sets shipped with
  scikit-learn.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.datasets import (
    load_breast_cancer,
    load_digits,
    load_wine,
    make_classification,
    make_friedman1,
)

from verticalfs.data.table import Table

__all__ = [
    "MADELON_INFORMATIVE",
    "MADELON_N_FEATURES",
    "MADELON_REDUNDANT",
    "breast_cancer",
    "digits",
    "friedman",
    "madelon_synth",
    "multiclass_synth",
    "wine",
]

MADELON_INFORMATIVE = 5
MADELON_REDUNDANT = 15
MADELON_N_FEATURES = 500


def madelon_synth(n_samples: int = 2600, seed: int = 0) -> Table:
    """MADELON-style synthetic binary problem with known relevant features.

    Generated with :func:`sklearn.datasets.make_classification`, the generator MADELON itself was
    made with: 500 features = 5 informative + 15 redundant (linear combinations of the informative
    ones) + 480 probes (pure noise), ``n_clusters_per_class=16`` (32 clusters on the vertices of a
    5-dimensional hypercube), ``class_sep=1.0``, ``flip_y=0.01``. Columns are not shuffled, so
    ``f0..f4`` are informative, ``f5..f19`` redundant and ``f20..f499`` probes; ``spurious`` is
    ``True`` exactly for the probes. Rows are shuffled with ``seed`` (the generator emits them
    grouped by cluster).

    Parameters
    ----------
    n_samples : int
        Number of rows (MADELON's labelled part has 2600).
    seed : int
        Random seed of the generator and of the row shuffle.

    Returns
    -------
    Table
        Binary task named ``"madelon-synth"``.
    """
    X, y = make_classification(
        n_samples=n_samples,
        n_features=MADELON_N_FEATURES,
        n_informative=MADELON_INFORMATIVE,
        n_redundant=MADELON_REDUNDANT,
        n_repeated=0,
        n_classes=2,
        n_clusters_per_class=16,
        class_sep=1.0,
        flip_y=0.01,
        hypercube=True,
        shuffle=False,
        random_state=seed,
    )
    order = np.random.default_rng(seed).permutation(n_samples)
    X, y = X[order], y[order]
    spurious = np.zeros(MADELON_N_FEATURES, dtype=bool)
    spurious[MADELON_INFORMATIVE + MADELON_REDUNDANT:] = True
    return Table(
        name="madelon-synth",
        X=pd.DataFrame(X, columns=[f"f{j}" for j in range(MADELON_N_FEATURES)]),
        y=y.astype(np.int64),
        task="binary",
        class_names=["0", "1"],
        spurious=spurious,
    )


MULTICLASS_CLASSES = 30
MULTICLASS_INFORMATIVE = 20
MULTICLASS_REDUNDANT = 480


def multiclass_synth(n_samples: int = 1500, seed: int = 0) -> Table:
    """A many-class, wide synthetic problem: 30 classes over 500 features.

    Generated with :func:`sklearn.datasets.make_classification`: 20 informative features (one
    Gaussian cluster per class on the vertices of a 20-dimensional hypercube, ``class_sep=2.0``:
    a logistic regression on the pooled columns reaches about .84) and 480 redundant ones (random
    linear combinations of the informative), ``flip_y=0.01``. Every column carries signal, so
    ``spurious`` is all ``False``; add noise columns with ``build_data(..., noise=0.5)``. Columns
    are shuffled with ``seed``, so that an even split
    gives every party informative and redundant columns.

    Parameters
    ----------
    n_samples : int
        Number of rows (1,500: 50 per class).
    seed : int
        Random seed of the generator.

    Returns
    -------
    Table
        Multiclass task named ``"multiclass-synth"``, columns ``f0..f499``.
    """
    n_features = MULTICLASS_INFORMATIVE + MULTICLASS_REDUNDANT
    X, y = make_classification(
        n_samples=n_samples,
        n_features=n_features,
        n_informative=MULTICLASS_INFORMATIVE,
        n_redundant=MULTICLASS_REDUNDANT,
        n_repeated=0,
        n_classes=MULTICLASS_CLASSES,
        n_clusters_per_class=1,
        class_sep=2.0,
        flip_y=0.01,
        shuffle=True,
        random_state=seed,
    )
    return Table(
        name="multiclass-synth",
        X=pd.DataFrame(X, columns=[f"f{j}" for j in range(n_features)]),
        y=y.astype(np.int64),
        task="multiclass",
        class_names=[str(c) for c in range(MULTICLASS_CLASSES)],
        spurious=np.zeros(n_features, dtype=bool),
    )


def friedman(n_samples: int = 2000, seed: int = 0, *, noise: float = 1.0) -> Table:
    """Friedman #1 regression: ``y = 10 sin(pi x0 x1) + 20 (x2 - 0.5)^2 + 10 x3 + 5 x4 + noise``.

    Generated with :func:`sklearn.datasets.make_friedman1` with 10 inputs, all uniform on
    ``[0, 1]``: ``x0..x4`` enter the target, ``x5..x9`` are independent of it (``spurious`` True).

    Parameters
    ----------
    n_samples : int
        Number of rows.
    seed : int
        Random seed.
    noise : float
        Standard deviation of the Gaussian noise added to the target (1.0, as in Friedman 1991).

    Returns
    -------
    Table
        Regression task named ``"friedman"``, columns ``x0..x9``.
    """
    X, y = make_friedman1(n_samples=n_samples, n_features=10, noise=noise, random_state=seed)
    spurious = np.zeros(10, dtype=bool)
    spurious[5:] = True
    return Table(
        name="friedman",
        X=pd.DataFrame(X, columns=[f"x{j}" for j in range(10)]),
        y=y.astype(np.float64),
        task="regression",
        spurious=spurious,
    )


def _from_bunch(name: str, bunch, task: str, class_names: list[str]) -> Table:
    X = pd.DataFrame(
        np.asarray(bunch.data, dtype=np.float64), columns=[str(c) for c in bunch.feature_names]
    )
    return Table(
        name=name,
        X=X,
        y=np.asarray(bunch.target, dtype=np.int64),
        task=task,
        class_names=class_names,
    )


def breast_cancer() -> Table:
    """Wisconsin diagnostic breast cancer (scikit-learn): 569 x 30, binary.

    Codes as in scikit-learn: 0 = malignant (212), 1 = benign (357); the 30 real feature names.
    """
    b = load_breast_cancer()
    return _from_bunch("breast_cancer", b, "binary", [str(t) for t in b.target_names])


def digits() -> Table:
    """8 x 8 handwritten digits (scikit-learn): 1797 x 64 pixel counts 0..16, 10 classes.

    Feature names are scikit-learn's ``pixel_<row>_<col>``.
    """
    b = load_digits()
    return _from_bunch("digits", b, "multiclass", [str(t) for t in b.target_names])


def wine() -> Table:
    """UCI wine recognition (scikit-learn): 178 x 13 chemical measurements, 3 cultivars."""
    b = load_wine()
    return _from_bunch("wine", b, "multiclass", [str(t) for t in b.target_names])
