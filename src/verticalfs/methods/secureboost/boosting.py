"""The model SecureBoost trains, in the clear: losses, gradients, the split gain, leaf values, row
and column sampling. The federated label holder (:mod:`.method`) and the central reference
(:mod:`.reference`) both use these definitions; they differ in how the histograms are obtained.

XGBoost's objective with its parameters (Chen & Guestrin 2016, eq. 6-7): for a node with gradient and
hessian sums ``G, H`` (per output), ``score = sum_k T(G_k)**2 / (H_k + lambda)`` with the L1
soft-threshold ``T(G) = sign(G) max(|G| - alpha, 0)``; a split's gain is ``(score_L + score_R -
score) / 2 - gamma``; a leaf's value ``-T(G_k) / (H_k + lambda)`` times the learning rate.

Losses (``K`` outputs): ``logistic`` (binary, ``K = 1``: ``g = p - y``, ``h = p (1 - p)``),
``softmax`` (``K`` classes: ``g_k = p_k - y_k``, ``h_k = p_k (1 - p_k)``, the diagonal of the
Hessian; XGBoost doubles it, ours is the exact diagonal), ``squared`` (regression: ``g = F - y``,
``h = 1``). A multi-class tree is one tree with ``K`` values per leaf (FATE's SecureBoost-MO,
XGBoost's ``multi_strategy = "multi_output_tree"``): its split maximises the gain summed over the
classes, so the ``K`` gradient vectors travel packed together and one histogram serves every class.
``min_child_weight`` bounds the hessian summed over the outputs. The start is the training prior
(log-odds, log class shares) or the mean: XGBoost's ``base_score``.
"""

from __future__ import annotations

import numpy as np

from verticalfs.training.history import derive_seed

LOSSES = ("logistic", "softmax", "squared")


def loss_for(task: str) -> str:
    return {"binary": "logistic", "multiclass": "softmax", "regression": "squared"}[task]


def n_outputs(task: str, n_classes: int) -> int:
    return int(n_classes) if task == "multiclass" else 1


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _softmax(F: np.ndarray) -> np.ndarray:
    z = F - F.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def base_score(task: str, y: np.ndarray, n_classes: int) -> np.ndarray:
    """The start ``F_0`` ``(K,)``: log-odds of the training labels, log class shares, or the mean."""
    y = np.asarray(y)
    if task == "regression":
        return np.asarray([float(y.mean()) if y.size else 0.0])
    if task == "binary":
        p = float(np.clip(y.mean() if y.size else 0.5, 1e-6, 1 - 1e-6))
        return np.asarray([np.log(p / (1 - p))])
    share = np.bincount(y.astype(np.int64), minlength=int(n_classes)) / max(1, y.size)
    return np.log(np.clip(share, 1e-6, None))


def gradients(task: str, F: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``g, h`` ``(n, K)`` of the loss at margins ``F`` ``(n, K)``."""
    F = np.asarray(F, dtype=np.float64)
    y = np.asarray(y)
    if task == "regression":
        return F - y.astype(np.float64)[:, None], np.ones_like(F)
    if task == "binary":
        p = _sigmoid(F)
        return p - y.astype(np.float64)[:, None], p * (1.0 - p)
    p = _softmax(F)
    onehot = np.zeros_like(p)
    onehot[np.arange(len(y)), y.astype(np.int64)] = 1.0
    return p - onehot, p * (1.0 - p)


def output(task: str, F: np.ndarray) -> np.ndarray:
    """What the metrics take: logits ``(n, 2)`` (binary), log-probabilities ``(n, K)``, values."""
    F = np.asarray(F, dtype=np.float64)
    if task == "regression":
        return F[:, 0]
    if task == "binary":
        return np.concatenate([np.zeros_like(F), F], axis=1)
    z = F - F.max(1, keepdims=True)
    return z - np.log(np.exp(z).sum(1, keepdims=True))


def loss_value(task: str, F: np.ndarray, y: np.ndarray) -> float:
    """The mean training loss (log-loss, cross-entropy or half squared error)."""
    F = np.asarray(F, dtype=np.float64)
    y = np.asarray(y)
    if not len(y):
        return float("nan")
    if task == "regression":
        return float(0.5 * np.mean((F[:, 0] - y) ** 2))
    if task == "binary":
        z = F[:, 0]
        return float(np.mean(np.logaddexp(0.0, z) - y * z))
    logp = output(task, F)
    return float(-np.mean(logp[np.arange(len(y)), y.astype(np.int64)]))


# ------------------------------------------------------------------------------------- gains
def soft_threshold(G: np.ndarray, alpha: float) -> np.ndarray:
    return np.sign(G) * np.maximum(np.abs(G) - alpha, 0.0) if alpha else G


def score(G: np.ndarray, H: np.ndarray, lam: float, alpha: float) -> np.ndarray:
    """``sum_k T(G_k)**2 / (H_k + lambda)`` over the last axis."""
    T = soft_threshold(G, alpha)
    return (T * T / (H + lam)).sum(-1)


def split_gain(GL: np.ndarray, HL: np.ndarray, G: np.ndarray, H: np.ndarray, lam: float, alpha: float,
               gamma: float) -> np.ndarray:
    """The gain of left sums ``GL, HL`` (``(..., K)``) in a node of sums ``G, H`` (``(K,)``)."""
    return 0.5 * (score(GL, HL, lam, alpha) + score(G - GL, H - HL, lam, alpha) - score(G, H, lam, alpha)) - gamma


def leaf_values(g: np.ndarray, h: np.ndarray, leaf: np.ndarray, n_leaves: int, lam: float, alpha: float,
                eta: float) -> np.ndarray:
    """The value ``(n_leaves, K)`` of every leaf: ``-eta T(G) / (H + lambda)`` over its rows
    (``leaf``: each row's leaf index; sums in row order)."""
    K = g.shape[1]
    G = np.zeros((n_leaves, K))
    H = np.zeros((n_leaves, K))
    for k in range(K):  # a loop over outputs, not rows
        G[:, k] = np.bincount(leaf, weights=g[:, k], minlength=n_leaves)
        H[:, k] = np.bincount(leaf, weights=h[:, k], minlength=n_leaves)
    return -eta * soft_threshold(G, alpha) / (H + lam)


# ---------------------------------------------------------------------------------- sampling
def sample_rows(seed: int, tree: int, n: int, subsample: float) -> np.ndarray:
    """The sorted training rows of tree ``tree`` (all when ``subsample`` is 1)."""
    if subsample >= 1.0:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(derive_seed(seed, "secureboost rows", tree))
    k = max(1, int(round(subsample * n)))
    return np.sort(rng.choice(n, k, replace=False)).astype(np.int64)


def sample_features(seed: int, tree: int, counts: dict[str, int], fraction: float) -> dict[str, np.ndarray]:
    """Per party, a bool mask over its (opaque) features used by tree ``tree``: ``fraction`` of
    all features over the parties, at least one (``colsample_bytree``)."""
    names = list(counts)
    total = sum(counts.values())
    if fraction >= 1.0 or total == 0:
        return {p: np.ones(counts[p], dtype=bool) for p in names}
    rng = np.random.default_rng(derive_seed(seed, "secureboost features", tree))
    k = max(1, int(round(fraction * total)))
    chosen = np.zeros(total, dtype=bool)
    chosen[rng.choice(total, k, replace=False)] = True
    out, s = {}, 0
    for p in names:
        out[p] = chosen[s:s + counts[p]]
        s += counts[p]
    return out
