"""CTGAN's per-column variational Gaussian mixture, fitted for many columns at once.

:class:`~.transform.ModeSpecificNormalizer` fits one variational (Dirichlet-process) Gaussian
mixture per continuous column: scikit-learn's :class:`~sklearn.mixture.BayesianGaussianMixture`
with CTGAN's settings (10 components, ``weight_concentration_prior=0.001``, 100 iterations, one
initialisation) and ``covariance_type="spherical"``. One ``fit`` per column costs about 10-20 ms of
Python and scikit-learn overhead on a few dozen rows, which is minutes on ALLAML's 7,129 columns.
This module runs the *same algorithm* for every column together, as array operations over a
``(columns, rows, components)`` block:

1. scikit-learn's initialisation: ``KMeans(n_clusters=K, n_init=1, random_state=RandomState(seed))``
   on the column, i.e. k-means++ seeding (the first centre by ``RandomState.choice``, then
   ``2 + int(log K)`` candidates per centre by ``RandomState.uniform``, the same draws from the same
   per-column ``RandomState``) and Lloyd's iterations (at most 300, strict convergence or a centre
   shift below ``1e-4`` times the column's variance), on the column centred as KMeans centres it;
   the labels give the one-hot responsibilities.
2. scikit-learn's variational EM for the Dirichlet-process mixture with its default priors (mean
   prior the column's mean, mean precision 1, degrees of freedom 1, covariance prior the column's
   variance, ``reg_covar`` 1e-6), each column stopping where scikit-learn's would: when its lower
   bound changes by less than ``tol`` (1e-3), or after ``max_iter`` (100) iterations.

It computes scikit-learn's mixture up to floating-point rounding (sums in another order): on ALLAML
and on a bimodal column the weights, means and variances agree with scikit-learn's to ~1e-9 (tested
in ``tests/methods/test_icafs_mixture.py``). One path of scikit-learn's k-means is not written here:
when a cluster empties during Lloyd's iterations (scikit-learn moves the farthest point into it);
such columns, rare on continuous data, are fitted by scikit-learn itself (:func:`fit_columns`
counts them in ``fallback``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, digamma, gammaln

EPS = 10 * np.finfo(np.float64).eps


@dataclass
class Mixtures:
    """Fitted mixtures of ``m`` columns with ``K`` components each (arrays of shape ``(m, K)``):
    what scikit-learn's ``weight_concentration_``, ``mean_precision_``, ``means_``,
    ``degrees_of_freedom_``, ``covariances_`` and ``weights_`` hold, and ``converged`` ``(m,)``."""

    wc0: np.ndarray
    wc1: np.ndarray
    mean_precision: np.ndarray
    means: np.ndarray
    dof: np.ndarray
    covariances: np.ndarray
    weights: np.ndarray
    converged: np.ndarray

    def __getitem__(self, rows) -> Mixtures:
        """The mixtures of some columns (a slice or index array over the first axis)."""
        return Mixtures(*(getattr(self, f)[rows] for f in self.__dataclass_fields__))

    @property
    def prec_chol(self) -> np.ndarray:
        return 1.0 / np.sqrt(self.covariances)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Posterior over the components of each value: ``X`` is ``(m, n)`` (a column per row),
        the result ``(m, n, K)`` (scikit-learn's ``predict_proba`` per column)."""
        return np.exp(_log_resp(X, self)[1])


def _log_weights(wc0, wc1):
    dsum = digamma(wc0 + wc1)
    da, db = digamma(wc0), digamma(wc1)
    c = np.cumsum(db - dsum, axis=1)
    return da - dsum + np.concatenate([np.zeros_like(c[:, :1]), c[:, :-1]], 1)


def _log_resp(X, p: Mixtures):
    """scikit-learn's ``_estimate_log_prob_resp`` of BayesianGaussianMixture (spherical, one feature),
    its per-component terms gathered before they meet the rows: ``x^2 P + x Q + R``."""
    pc = p.prec_chol  # (m, K)
    prec = pc ** 2
    log_lambda = math.log(2.0) + digamma(0.5 * p.dof)
    R = (-0.5 * (math.log(2 * math.pi) + p.means ** 2 * prec) + np.log(pc) - 0.5 * np.log(p.dof)
         + 0.5 * (log_lambda - 1.0 / p.mean_precision) + _log_weights(p.wc0, p.wc1))
    x = X[:, :, None]  # (m, n, 1)
    weighted = (x * x) * (-0.5 * prec)[:, None, :]
    weighted += x * (p.means * prec)[:, None, :]
    weighted += R[:, None, :]
    top = weighted.max(2, keepdims=True)
    e = np.exp(weighted - top)
    norm = np.log(e.sum(2, keepdims=True)) + top
    weighted -= norm
    return norm[:, :, 0], weighted


def _m_step(X, resp, prior, reg_covar, wcp):
    """scikit-learn's M step (``_estimate_gaussian_parameters`` then weights, means, precisions)."""
    mean_prior, cov_prior = prior
    nk = resp.sum(1) + EPS  # (m, K)
    xk = np.einsum("mnk,mn->mk", resp, X) / nk
    avg_x2 = np.einsum("mnk,mn->mk", resp, X * X) / nk
    sk = avg_x2 - xk ** 2 + reg_covar
    tail = np.cumsum(nk[:, ::-1], axis=1)[:, ::-1]  # sum over j >= k
    wc0 = 1.0 + nk
    wc1 = wcp + np.concatenate([tail[:, 1:], np.zeros_like(nk[:, :1])], 1)
    mean_precision = 1.0 + nk
    means = (mean_prior[:, None] + nk * xk) / mean_precision
    dof = 1.0 + nk
    cov = cov_prior[:, None] + nk * (sk + 1.0 / mean_precision * (xk - mean_prior[:, None]) ** 2)
    cov = cov / dof
    return wc0, wc1, mean_precision, means, dof, cov


def _lower_bound(resp, log_resp, wc0, wc1, mean_precision, dof, cov):
    log_det = np.log(1.0 / np.sqrt(cov)) - 0.5 * np.log(dof)
    log_wishart = -(dof * log_det + dof * 0.5 * math.log(2.0) + gammaln(0.5 * dof)).sum(1)
    log_norm_weight = -betaln(wc0, wc1).sum(1)
    return (-np.einsum("mnk,mnk->m", resp, log_resp) - log_wishart - log_norm_weight
            - 0.5 * np.log(mean_precision).sum(1))


def _kmeans_labels(X: np.ndarray, K: int, seeds: np.ndarray, max_iter: int = 300, tol: float = 1e-4):
    """scikit-learn's ``KMeans(K, n_init=1, random_state=RandomState(seed)).fit(col).labels_`` for
    every row of ``X`` (``(m, n)``, one column per row). Returns the labels ``(m, n)`` and a mask of
    the columns whose Lloyd iterations emptied a cluster (not handled here: refit by the caller)."""
    m, n = X.shape
    Xc = X - X.mean(1, keepdims=True)  # KMeans centres the data
    x2 = Xc * Xc
    L = 2 + int(np.log(K))
    # the per-column random streams: one draw for the first centre, L per further centre
    draws = np.stack([np.random.RandomState(int(s)).random_sample(1 + (K - 1) * L) for s in seeds]) if m else \
        np.zeros((0, 1 + (K - 1) * L))
    p = np.ones(n) / n
    cdf = p.cumsum()
    cdf /= cdf[-1]
    first = np.searchsorted(cdf, draws[:, 0], side="right")
    rows = np.arange(m)
    centers = np.empty((m, K))
    centers[:, 0] = Xc[rows, first]
    c = centers[:, :1]
    closest = np.maximum(-2 * (c * Xc) + c * c + x2, 0)  # _euclidean_distances(squared=True)
    # the potentials summed as scikit-learn sums them (BLAS dot / gemv, not numpy's pairwise sum): two
    # candidates whose potentials tie in exact arithmetic (symmetric outliers) are then told apart
    # by the same rounding, and argmin takes the same one
    ones = np.ones(n)
    pot = np.matmul(closest[:, None, :], ones)[:, 0]
    for k in range(1, K):
        rand = draws[:, 1 + (k - 1) * L: 1 + k * L] * pot[:, None]  # (m, L)
        cum = np.cumsum(closest, 1)
        cand = (cum[:, :, None] < rand[:, None, :]).sum(1)  # searchsorted, side="left"
        np.clip(cand, None, n - 1, out=cand)
        cv = Xc[rows[:, None], cand]  # (m, L)
        d = np.maximum(-2 * (cv[:, :, None] * Xc[:, None, :]) + (cv * cv)[:, :, None] + x2[:, None, :], 0)
        d = np.minimum(closest[:, None, :], d)
        cpot = np.matmul(d, ones[:, None])[:, :, 0]
        best = cpot.argmin(1)
        pot = cpot[rows, best]
        closest = d[rows, best]
        centers[:, k] = cv[rows, best]
    # Lloyd's iterations
    tol_c = np.var(Xc, axis=1) * tol
    labels_old = np.full((m, n), -1)
    labels = labels_old.copy()
    active = np.ones(m, dtype=bool)
    strict = np.zeros(m, dtype=bool)
    empty = np.zeros(m, dtype=bool)
    for _ in range(max_iter):
        a = np.flatnonzero(active)
        if not len(a):
            break
        xa, ca = Xc[a], centers[a]
        lab = ((ca * ca)[:, None, :] - 2 * xa[:, :, None] * ca[:, None, :]).argmin(2)
        onehot = lab[:, :, None] == np.arange(K)
        cnt = onehot.sum(1)
        empty[a] |= (cnt == 0).any(1)
        new = np.einsum("mnk,mn->mk", onehot, xa) / np.maximum(cnt, 1)
        shift = ((new - ca) ** 2).sum(1)
        labels[a] = lab
        centers[a] = new
        same = (lab == labels_old[a]).all(1)
        strict[a] = same
        done = same | (shift <= tol_c[a]) | empty[a]
        labels_old[a] = lab
        active[a[done]] = False
    # not strictly converged: the labels of the last centres
    last = ~strict
    if last.any():
        ca = centers[last]
        labels[last] = ((ca * ca)[:, None, :] - 2 * Xc[last][:, :, None] * ca[:, None, :]).argmin(2)
    return labels, empty


def fit_columns(X: np.ndarray, n_components: np.ndarray, seeds: np.ndarray, *, weight_concentration_prior: float = 1e-3,
                max_iter: int = 100, tol: float = 1e-3, reg_covar: float = 1e-6) -> tuple[list, int]:
    """Fit one mixture per column of ``X`` (``(n, m)``), column ``j`` with ``n_components[j]``
    components and ``RandomState(seeds[j])``, as scikit-learn's ``BayesianGaussianMixture(
    n_components, weight_concentration_prior_type="dirichlet_process", weight_concentration_prior,
    max_iter, n_init=1, random_state=seed, covariance_type="spherical")`` would.

    Returns the groups of columns with the same number of components, each as ``(columns,
    Mixtures)`` (the mixtures' rows in the order of ``columns``), and how many columns were fitted
    by scikit-learn instead (module docstring)."""
    X = np.asarray(X, dtype=np.float64)
    n, m = X.shape
    n_components = np.asarray(n_components, dtype=np.int64)
    seeds = np.asarray(seeds, dtype=np.int64)
    groups: list = []
    fallback = 0
    for K in np.unique(n_components):
        cols = np.flatnonzero(n_components == K)
        Xg = np.ascontiguousarray(X[:, cols].T)  # (mg, n)
        mg = len(cols)
        mix = Mixtures(*(np.zeros((mg, K)) for _ in range(7)), converged=np.zeros(mg, dtype=bool))
        if K == 1 or n < K:
            bad = np.ones(mg, dtype=bool)
        else:
            # columns in chunks bound the (columns, rows, components) blocks' memory
            chunk = max(1, int(4e6 // (n * K * 8)))
            bad = np.zeros(mg, dtype=bool)
            for s in range(0, mg, chunk):
                res, bad[s:s + chunk] = _fit_group(Xg[s:s + chunk], int(K), seeds[cols[s:s + chunk]],
                                                   weight_concentration_prior, max_iter, tol, reg_covar)
                _put(mix, slice(s, s + chunk), res)
        for i in np.flatnonzero(bad):
            _put(mix, i, _sklearn_fit(Xg[i], int(K), int(seeds[cols[i]]), weight_concentration_prior, max_iter, tol))
            fallback += 1
        groups.append((cols, mix))
    return groups, fallback


def _put(mix: Mixtures, where, part: Mixtures) -> None:
    for f in Mixtures.__dataclass_fields__:
        v = getattr(part, f)
        getattr(mix, f)[where] = v[0] if isinstance(where, (int, np.integer)) else v


def _fit_group(X, K, seeds, wcp, max_iter, tol, reg_covar):
    m, n = X.shape
    labels, bad = _kmeans_labels(X, K, seeds)
    resp = (labels[:, :, None] == np.arange(K)).astype(np.float64)
    prior = (X.mean(1), X.var(1, ddof=1))
    wc0, wc1, mp, means, dof, cov = _m_step(X, resp, prior, reg_covar, wcp)
    lb = np.full(m, -np.inf)
    active = np.ones(m, dtype=bool)
    converged = np.zeros(m, dtype=bool)
    for _ in range(max_iter):
        a = np.flatnonzero(active)
        if not len(a):
            break
        p = Mixtures(wc0[a], wc1[a], mp[a], means[a], dof[a], cov[a], None, None)  # type: ignore[arg-type]
        _, log_resp = _log_resp(X[a], p)
        resp = np.exp(log_resp)
        new = _m_step(X[a], resp, (prior[0][a], prior[1][a]), reg_covar, wcp)
        for arr, v in zip((wc0, wc1, mp, means, dof, cov), new, strict=True):
            arr[a] = v
        lb_new = _lower_bound(resp, log_resp, new[0], new[1], new[2], new[4], new[5])
        done = np.abs(lb_new - lb[a]) < tol
        lb[a] = lb_new
        converged[a[done]] = True
        active[a[done]] = False
    s = wc0 + wc1
    w = wc0 / s * np.concatenate([np.ones((m, 1)), np.cumprod(wc1 / s, axis=1)[:, :-1]], 1)
    w /= w.sum(1, keepdims=True)
    return Mixtures(wc0, wc1, mp, means, dof, cov, w, converged), bad


def _sklearn_fit(col, K, seed, wcp, max_iter, tol) -> Mixtures:
    """One column by scikit-learn itself, as a one-row :class:`Mixtures`."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import BayesianGaussianMixture

    gm = BayesianGaussianMixture(n_components=max(1, K), weight_concentration_prior_type="dirichlet_process",
                                 weight_concentration_prior=wcp, max_iter=max_iter, tol=tol, n_init=1,
                                 random_state=seed, covariance_type="spherical")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm.fit(np.asarray(col).reshape(-1, 1))
    wc0, wc1 = gm.weight_concentration_
    return Mixtures(wc0[None], wc1[None], gm.mean_precision_[None], gm.means_.reshape(1, -1),
                    gm.degrees_of_freedom_[None], gm.covariances_.reshape(1, -1), gm.weights_[None],
                    np.array([gm.converged_]))
