"""Mode-specific normalisation of a party's columns for conditional tabular GANs (icafs.md section
IV-A, "continuous variables are modeled using a variational Gaussian mixture model, while
categorical variables are one-hot encoded"; the representation of Xu et al. 2019, CTGAN, written
here on scikit-learn's :class:`~sklearn.mixture.BayesianGaussianMixture`: the ``ctgan`` and ``rdt``
packages are BUSL-1.1 and are not imported).

A continuous column is fitted with a variational (Dirichlet-process) Gaussian mixture of at most
``max_modes`` components; the modes with weight above ``weight_threshold`` are kept. A value ``x``
becomes ``[alpha, one-hot(k)]``: a mode ``k`` drawn from its posterior over the kept modes, and
``alpha = (x - mu_k) / (4 sigma_k)`` clipped to ``[-0.99, 0.99]``. The inverse takes the mode of the
largest one-hot entry and ``x = alpha * 4 sigma_k + mu_k``. A categorical column (few distinct
values, or declared) is one-hot encoded and decoded by its largest entry. Every operation is
vectorised over rows.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from joblib import Parallel, delayed
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import BayesianGaussianMixture

from verticalfs.exceptions import DataError


@dataclass
class ColumnInfo:
    """One column's part of the representation: ``kind`` (``continuous`` / ``categorical``), its
    output width, and the fitted modes (``means``, ``stds``) or categories."""

    kind: str
    width: int
    means: np.ndarray = field(default_factory=lambda: np.zeros(0))
    stds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    categories: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _fit_mixture(col: np.ndarray, n_components: int, seed: int) -> BayesianGaussianMixture:
    # CTGAN's mixture. covariance_type "spherical": on one column every covariance type is the
    # same model (a variance per component; measured on TOX_171: weights and means agree with
    # "full" to 3e-6 after the same iterations), and "full"'s per-component Python loops made it
    # 2.7x slower, which matters on thousands of columns
    gm = BayesianGaussianMixture(n_components=max(1, n_components), weight_concentration_prior_type="dirichlet_process",
                                 weight_concentration_prior=0.001, max_iter=100, n_init=1, random_state=seed,
                                 covariance_type="spherical")
    with warnings.catch_warnings():  # CTGAN's 100 iterations often stop short: recorded, not printed
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm.fit(col.reshape(-1, 1))
    return gm


class ModeSpecificNormalizer:
    """Fit on a party's training columns, then :meth:`transform` / :meth:`inverse_transform`.

    Parameters
    ----------
    max_modes : int
        Components of each column's variational Gaussian mixture (10, CTGAN's).
    weight_threshold : float
        A mode is kept when its mixture weight exceeds this (0.005, CTGAN's).
    max_categories : int
        A column with at most this many distinct values is treated as categorical (10).
    seed : int
        Seeds the mixtures and the draw of each value's mode.
    max_fit_rows : int
        Each mixture is fitted on at most this many rows (a seeded sample; 0 = all). Ours, for
        speed: a variational mixture costs about 0.65 s per column on USPS's 6,361 training rows
        and 0.3 s on 2,000 (scikit-learn's iterations dominate), and stage 1 must fit in minutes.
    n_jobs : int or None
        Columns fitted in parallel processes (joblib; 1 = in this process, -1 = every core; None,
        the default: every core when there are at least 64 continuous columns, else 1).
    """

    def __init__(self, max_modes: int = 10, weight_threshold: float = 0.005, max_categories: int = 10,
                 seed: int = 0, max_fit_rows: int = 2000, n_jobs: int | None = None) -> None:
        if max_modes < 1 or not 0 <= weight_threshold < 1 or max_categories < 1:
            raise DataError(f"ModeSpecificNormalizer: need max_modes >= 1, 0 <= weight_threshold < 1 and "
                            f"max_categories >= 1, got {max_modes}, {weight_threshold}, {max_categories}")
        self.max_modes = int(max_modes)
        self.weight_threshold = float(weight_threshold)
        self.max_categories = int(max_categories)
        self.seed = int(seed)
        self.max_fit_rows = int(max_fit_rows)
        self.n_jobs = None if n_jobs is None else int(n_jobs)
        self.columns: list[ColumnInfo] = []
        self._mixtures: list[BayesianGaussianMixture | None] = []

    # ------------------------------------------------------------------ fit
    def fit(self, X: np.ndarray, categorical=()) -> ModeSpecificNormalizer:
        X = self._check(X)
        cat = set(int(c) for c in categorical)
        self.columns, self._mixtures = [], []
        #: per continuous column: did its mixture converge within CTGAN's 100 iterations
        self.converged_: list[bool] = []
        rows = np.arange(X.shape[0])
        if 0 < self.max_fit_rows < X.shape[0]:
            rows = np.sort(np.random.default_rng(self.seed).choice(X.shape[0], self.max_fit_rows, replace=False))
        kinds = []
        for j in range(X.shape[1]):
            values = np.unique(X[:, j])
            kinds.append("categorical" if j in cat or len(values) <= self.max_categories else "continuous")
        cont = [j for j in range(X.shape[1]) if kinds[j] == "continuous"]
        jobs = self.n_jobs if self.n_jobs is not None else (-1 if len(cont) >= 64 else 1)
        fitted = Parallel(n_jobs=jobs)(
            delayed(_fit_mixture)(X[rows, j], min(self.max_modes, len(np.unique(X[rows, j]))), self.seed + j)
            for j in cont) if cont else []
        mixtures = dict(zip(cont, fitted, strict=True))
        for j in range(X.shape[1]):
            col = X[:, j]
            if kinds[j] == "categorical":
                values = np.unique(col)
                self.columns.append(ColumnInfo("categorical", len(values), categories=values))
                self._mixtures.append(None)
                continue
            gm = mixtures[j]
            self.converged_.append(bool(gm.converged_))
            keep = gm.weights_ > self.weight_threshold
            if not keep.any():
                keep = gm.weights_ == gm.weights_.max()
            means = gm.means_.reshape(-1)[keep]
            stds = np.sqrt(gm.covariances_.reshape(-1))[keep]
            self.columns.append(ColumnInfo("continuous", 1 + int(keep.sum()), means=means, stds=stds))
            gm._vf_keep = keep  # which of the mixture's components are modes
            self._mixtures.append(gm)
        self.n_features_in_ = X.shape[1]
        return self

    @property
    def output_width(self) -> int:
        return sum(c.width for c in self.columns)

    def spans(self, modes: bool = True) -> list[tuple[int, int]]:
        """``(start, width)`` of every one-hot block of the representation: each categorical
        column, and with ``modes`` each continuous column's mode indicator (what a conditional
        vector could name)."""
        out, pos = [], 0
        for c in self.columns:
            if c.kind == "categorical":
                out.append((pos, c.width))
            elif modes:
                out.append((pos + 1, c.width - 1))
            pos += c.width
        return out

    # ------------------------------------------------------------ transform
    def transform(self, X: np.ndarray) -> np.ndarray:
        X = self._check(X)
        if X.shape[1] != getattr(self, "n_features_in_", -1):
            raise DataError(f"ModeSpecificNormalizer: fitted on {getattr(self, 'n_features_in_', 0)} columns, "
                            f"got {X.shape[1]}")
        rng = np.random.default_rng(self.seed)
        n = X.shape[0]
        out = np.zeros((n, self.output_width), dtype=np.float32)
        pos = 0
        for j, (info, gm) in enumerate(zip(self.columns, self._mixtures, strict=True)):
            col = X[:, j]
            if info.kind == "categorical":
                idx = np.searchsorted(info.categories, col)
                ok = (idx < len(info.categories)) & (info.categories[np.minimum(idx, len(info.categories) - 1)] == col)
                if not ok.all():
                    raise DataError(f"ModeSpecificNormalizer: column {j} has values not seen when fitting, e.g. "
                                    f"{col[~ok][:3].tolist()}")
                out[np.arange(n), pos + idx] = 1.0
            else:
                probs = gm.predict_proba(col.reshape(-1, 1))[:, gm._vf_keep]
                probs = probs + 1e-6
                probs /= probs.sum(1, keepdims=True)
                u = rng.random((n, 1))
                k = np.minimum((np.cumsum(probs, 1) < u).sum(1), probs.shape[1] - 1)  # one draw per row
                alpha = np.clip((col - info.means[k]) / (4 * info.stds[k]), -0.99, 0.99)
                out[:, pos] = alpha
                out[np.arange(n), pos + 1 + k] = 1.0
            pos += info.width
        return out

    def inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        Z = np.asarray(Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != self.output_width:
            raise DataError(f"ModeSpecificNormalizer: expected {self.output_width} columns, got shape {Z.shape}")
        out = np.zeros((Z.shape[0], len(self.columns)))
        pos = 0
        for j, info in enumerate(self.columns):
            block = Z[:, pos:pos + info.width]
            if info.kind == "categorical":
                out[:, j] = info.categories[block.argmax(1)]
            else:
                k = block[:, 1:].argmax(1)
                out[:, j] = np.clip(block[:, 0], -1, 1) * 4 * info.stds[k] + info.means[k]
            pos += info.width
        return out

    @staticmethod
    def _check(X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise DataError(f"ModeSpecificNormalizer: expected a 2-D array, got shape {X.shape}")
        if not np.all(np.isfinite(X)):
            raise DataError("ModeSpecificNormalizer: the columns hold NaN or infinite values; impute them first")
        return X
