"""The L2,1 proximal operator (less-vfl.md section 3) against its closed form."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from verticalfs.nn import apply_prox, group_norms, nonzero_groups, prox_l21, prox_l21_, zero_groups


def closed_form(W: np.ndarray, lam: float, eta: float) -> np.ndarray:
    out = np.zeros_like(W)
    for j in range(W.shape[1]):
        p = W[:, j]
        n = np.linalg.norm(p)
        out[:, j] = p - lam * eta * p / n if n > lam * eta else 0.0
    return out


def test_prox_matches_closed_form_per_group():
    rng = np.random.default_rng(0)
    W = rng.normal(size=(6, 10)).astype(np.float32)
    W[:, 3] *= 0.01  # below the threshold
    lam, eta = 0.7, 0.5
    got = prox_l21(torch.from_numpy(W), lam, eta).numpy()
    np.testing.assert_allclose(got, closed_form(W, lam, eta), rtol=1e-5, atol=1e-6)
    assert np.all(got[:, 3] == 0)


def test_prox_is_the_minimiser_of_the_proximal_problem():
    rng = np.random.default_rng(1)
    W = torch.from_numpy(rng.normal(size=(4, 5)))
    lam, eta = 1.3, 0.4

    def obj(Z):
        return 0.5 * float(((Z - W) ** 2).sum()) + lam * eta * float(torch.linalg.vector_norm(Z, dim=0).sum())

    Z = prox_l21(W, lam, eta)
    best = obj(Z)
    for _ in range(200):
        assert obj(Z + 1e-3 * torch.from_numpy(rng.normal(size=(4, 5)))) >= best - 1e-9


def test_stacked_prox_uses_one_lambda_per_copy():
    rng = np.random.default_rng(2)
    W = rng.normal(size=(3, 4, 7)).astype(np.float32)
    lams = [0.0, 0.5, 10.0]
    got = prox_l21(torch.from_numpy(W), lams, 0.3).numpy()
    for i, lam in enumerate(lams):
        np.testing.assert_allclose(got[i], closed_form(W[i], lam, 0.3), rtol=1e-5, atol=1e-6)
    assert np.array_equal(got[0], W[0])  # lambda = 0: identity
    norms = group_norms(torch.from_numpy(W)).numpy()
    assert norms.shape == (3, 7)


def test_in_place_prox_on_a_linear_layer_reports_zero_groups():
    layer = nn.Linear(5, 8)
    with torch.no_grad():
        layer.weight[:, [1, 4]] *= 1e-4
    bias = layer.bias.detach().clone()
    zeroed = apply_prox(layer, lam=0.1, eta=0.1)
    assert list(zeroed) == [1, 4]
    assert list(nonzero_groups(layer)) == [0, 2, 3]
    assert torch.equal(layer.bias.detach(), bias)  # the bias is not part of any group
    mask = prox_l21_(layer.weight, 0.0, 1.0)
    assert mask.tolist() == zero_groups(layer).tolist()
