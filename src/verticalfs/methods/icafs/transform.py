"""Mode-specific normalisation of a party's columns for conditional tabular GANs (icafs.md section
IV-A, "continuous variables are modeled using a variational Gaussian mixture model, while
categorical variables are one-hot encoded"; the representation of Xu et al. 2019, CTGAN, with
scikit-learn's :class:`~sklearn.mixture.BayesianGaussianMixture` as the mixture: the ``ctgan`` and
``rdt`` packages are BUSL-1.1 and are not imported).

A continuous column is fitted with a variational (Dirichlet-process) Gaussian mixture of at most
``max_modes`` components; the modes with weight above ``weight_threshold`` are kept. A value ``x``
becomes ``[alpha, one-hot(k)]``: a mode ``k`` drawn from its posterior over the kept modes, and
``alpha = (x - mu_k) / (4 sigma_k)`` clipped to ``[-0.99, 0.99]``. The inverse takes the mode of the
largest one-hot entry and ``x = alpha * 4 sigma_k + mu_k``. A categorical column (few distinct
values, or declared) is one-hot encoded and decoded by its largest entry.

The mixtures of all continuous columns are fitted together (:func:`.mixture.fit_columns`: scikit-
learn's algorithm, initialisation and stopping rule, written over a block of columns; the same
mixtures to rounding, tested), and the transform and its inverse work on every column at once
(no loop over columns or rows for continuous columns). ``backend="sklearn"`` fits each column with
scikit-learn itself (the reference; minutes on thousands of columns).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from verticalfs.exceptions import DataError
from verticalfs.methods.icafs.mixture import Mixtures, fit_columns

#: columns x rows x components handled at once by the transforms (bounds their memory)
_BLOCK = 4_000_000


@dataclass
class ColumnInfo:
    """One column's part of the representation: ``kind`` (``continuous`` / ``categorical``), its
    output width, and the fitted modes (``means``, ``stds``) or categories."""

    kind: str
    width: int
    means: np.ndarray = field(default_factory=lambda: np.zeros(0))
    stds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    categories: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _fit_mixture(col: np.ndarray, n_components: int, seed: int):
    """CTGAN's mixture of one column by scikit-learn (the reference of :func:`.mixture.fit_columns`).
    ``covariance_type="spherical"``: on one column every covariance type is the same model (a
    variance per component; measured on TOX_171: weights and means agree with "full" to 3e-6)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import BayesianGaussianMixture

    gm = BayesianGaussianMixture(n_components=max(1, n_components), weight_concentration_prior_type="dirichlet_process",
                                 weight_concentration_prior=0.001, max_iter=100, n_init=1, random_state=seed,
                                 covariance_type="spherical")
    with warnings.catch_warnings():  # CTGAN's 100 iterations often stop short: recorded, not printed
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm.fit(col.reshape(-1, 1))
    return gm


def _sklearn_groups(X: np.ndarray, n_components: np.ndarray, seeds: np.ndarray) -> list:
    """:func:`.mixture.fit_columns`'s groups, every column fitted by scikit-learn."""
    groups = []
    for K in np.unique(n_components):
        cols = np.flatnonzero(n_components == K)
        gms = [_fit_mixture(X[:, j], int(K), int(seeds[j])) for j in cols]
        groups.append((cols, Mixtures(
            np.stack([g.weight_concentration_[0] for g in gms]), np.stack([g.weight_concentration_[1] for g in gms]),
            np.stack([g.mean_precision_ for g in gms]), np.stack([g.means_.reshape(-1) for g in gms]),
            np.stack([g.degrees_of_freedom_ for g in gms]), np.stack([g.covariances_.reshape(-1) for g in gms]),
            np.stack([g.weights_ for g in gms]), np.array([g.converged_ for g in gms]))))
    return groups


def _block_argmax(Z: np.ndarray, starts: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """The position of the largest entry of every block ``Z[:, s:s + w]`` (first on ties), ``(n, blocks)``."""
    n = Z.shape[0]
    out = np.zeros((n, len(starts)), dtype=np.int64)
    if not len(starts):
        return out
    wmax = int(widths.max())
    step = max(1, _BLOCK // max(1, n * wmax))
    ar = np.arange(wmax)
    for a in range(0, len(starts), step):
        s, w = starts[a:a + step], widths[a:a + step]
        idx = np.minimum(s[:, None] + ar, Z.shape[1] - 1)
        vals = Z[:, idx]  # (n, blocks, wmax)
        vals[:, ar >= w[:, None]] = -np.inf
        out[:, a:a + step] = vals.argmax(2)
    return out


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
        Seeds the mixtures (column ``j``'s with ``seed + j``) and the draw of each value's mode.
    max_fit_rows : int
        Each mixture is fitted on at most this many rows (a seeded sample; 0 = all). Ours, for
        speed on long data sets (USPS's 6,361 training rows).
    backend : str
        ``batched`` (default): all columns' mixtures together (:func:`.mixture.fit_columns`);
        ``sklearn``: one scikit-learn fit per column, the reference it reproduces.
    """

    def __init__(self, max_modes: int = 10, weight_threshold: float = 0.005, max_categories: int = 10,
                 seed: int = 0, max_fit_rows: int = 2000, backend: str = "batched") -> None:
        if max_modes < 1 or not 0 <= weight_threshold < 1 or max_categories < 1:
            raise DataError(f"ModeSpecificNormalizer: need max_modes >= 1, 0 <= weight_threshold < 1 and "
                            f"max_categories >= 1, got {max_modes}, {weight_threshold}, {max_categories}")
        if backend not in ("batched", "sklearn"):
            raise DataError(f"ModeSpecificNormalizer: backend must be 'batched' or 'sklearn', got {backend!r}")
        self.max_modes = int(max_modes)
        self.weight_threshold = float(weight_threshold)
        self.max_categories = int(max_categories)
        self.seed = int(seed)
        self.max_fit_rows = int(max_fit_rows)
        self.backend = backend
        self.columns: list[ColumnInfo] = []

    # ------------------------------------------------------------------ fit
    def fit(self, X: np.ndarray, categorical=()) -> ModeSpecificNormalizer:
        X = self._check(X)
        n, d = X.shape
        cat = np.zeros(d, dtype=bool)
        cat[[int(c) for c in categorical]] = True
        rows = np.arange(n)
        if 0 < self.max_fit_rows < n:
            rows = np.sort(np.random.default_rng(self.seed).choice(n, self.max_fit_rows, replace=False))
        sx = np.sort(X, axis=0)
        n_unique = 1 + (np.diff(sx, axis=0) != 0).sum(0) if n else np.zeros(d, dtype=np.int64)
        cat |= n_unique <= self.max_categories
        cont = np.flatnonzero(~cat)
        Xf = X[rows][:, cont]
        sf = np.sort(Xf, axis=0)
        fit_unique = 1 + (np.diff(sf, axis=0) != 0).sum(0) if len(rows) else np.zeros(len(cont), dtype=np.int64)
        K = np.maximum(1, np.minimum(self.max_modes, fit_unique))
        seeds = self.seed + cont
        if self.backend == "sklearn":
            groups, self.fallback_ = _sklearn_groups(Xf, K, seeds), len(cont)
        else:
            groups, self.fallback_ = fit_columns(Xf, K, seeds)
        #: per continuous column: did its mixture converge within CTGAN's 100 iterations
        self.converged_ = [False] * len(cont)
        infos: dict[int, ColumnInfo] = {}
        self._groups = []  # (indices into cont, mixtures, kept modes first (order), kept count)
        for idx, mix in groups:
            keep = mix.weights > self.weight_threshold
            none = ~keep.any(1)
            keep[none] = mix.weights[none] == mix.weights[none].max(1, keepdims=True)
            order = np.argsort(~keep, axis=1, kind="stable")  # the kept components first, in their order
            n_keep = keep.sum(1)
            means = np.take_along_axis(mix.means, order, 1)
            stds = np.sqrt(np.take_along_axis(mix.covariances, order, 1))
            for i, c in enumerate(idx):
                k = int(n_keep[i])
                infos[int(cont[c])] = ColumnInfo("continuous", 1 + k, means=means[i, :k], stds=stds[i, :k])
                self.converged_[c] = bool(mix.converged[i])
            self._groups.append((idx, mix, order, n_keep, means, stds))
        self.columns = []
        for j in range(d):
            if j in infos:
                self.columns.append(infos[j])
            else:
                values = np.unique(X[:, j])
                self.columns.append(ColumnInfo("categorical", len(values), categories=values))
        widths = np.array([c.width for c in self.columns], dtype=np.int64)
        self._pos = np.cumsum(widths) - widths  # each column's first position in the representation
        self._cont = cont
        self._cat = np.flatnonzero(cat)
        self.n_features_in_ = d
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
        n = X.shape[0]
        out = np.zeros((n, self.output_width), dtype=np.float32)
        ar = np.arange(n)
        for j in self._cat:
            info, col, pos = self.columns[j], X[:, j], self._pos[j]
            idx = np.searchsorted(info.categories, col)
            ok = (idx < len(info.categories)) & (info.categories[np.minimum(idx, len(info.categories) - 1)] == col)
            if not ok.all():
                raise DataError(f"ModeSpecificNormalizer: column {j} has values not seen when fitting, e.g. "
                                f"{col[~ok][:3].tolist()}")
            out[ar, pos + idx] = 1.0
        # one uniform per row and continuous column, drawn column after column (n at a time)
        U = np.random.default_rng(self.seed).random((len(self._cont), n))
        for idx, mix, order, n_keep, means, stds in self._groups:
            K = order.shape[1]
            step = max(1, _BLOCK // max(1, n * K))
            for a in range(0, len(idx), step):
                sl = slice(a, a + step)
                cols = self._cont[idx[sl]]
                probs = np.take_along_axis(mix[sl].predict_proba(X[:, cols].T), order[sl][:, None, :], 2)  # (m, n, K)
                kept = np.arange(K) < n_keep[sl][:, None]  # (m, K)
                probs = np.where(kept[:, None, :], probs + 1e-6, 0.0)
                probs /= probs.sum(2, keepdims=True)
                k = np.minimum((np.cumsum(probs, 2) < U[idx[sl]][:, :, None]).sum(2), n_keep[sl][:, None] - 1)  # (m, n)
                mu = np.take_along_axis(means[sl], k, 1)
                sd = np.take_along_axis(stds[sl], k, 1)
                alpha = np.clip((X[:, cols].T - mu) / (4 * sd), -0.99, 0.99)
                pos = self._pos[cols]
                out[:, pos] = alpha.T
                out[ar[:, None], (pos[:, None] + 1 + k).T] = 1.0
        return out

    def inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        Z = np.asarray(Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != self.output_width:
            raise DataError(f"ModeSpecificNormalizer: expected {self.output_width} columns, got shape {Z.shape}")
        out = np.zeros((Z.shape[0], len(self.columns)))
        widths = np.array([c.width for c in self.columns], dtype=np.int64)
        if len(self._cat):
            k = _block_argmax(Z, self._pos[self._cat], widths[self._cat])
            for i, j in enumerate(self._cat):
                out[:, j] = self.columns[j].categories[k[:, i]]
        for idx, _mix, _order, _n_keep, means, stds in self._groups:
            cols = self._cont[idx]
            pos = self._pos[cols]
            k = _block_argmax(Z, pos + 1, widths[cols] - 1)  # (n, m)
            mu = np.take_along_axis(means, k.T, 1).T
            sd = np.take_along_axis(stds, k.T, 1).T
            out[:, cols] = np.clip(Z[:, pos], -1, 1) * 4 * sd + mu
        return out

    @staticmethod
    def _check(X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise DataError(f"ModeSpecificNormalizer: expected a 2-D array, got shape {X.shape}")
        if not np.all(np.isfinite(X)):
            raise DataError("ModeSpecificNormalizer: the columns hold NaN or infinite values; impute them first")
        return X
