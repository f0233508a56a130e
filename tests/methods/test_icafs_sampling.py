"""ICAFS's training-by-sampling and gradient penalty."""

from __future__ import annotations

import numpy as np
import torch

from verticalfs.methods.icafs.sampling import ConditionalSampler, gradient_penalty


def test_conditional_vectors_follow_log_frequency_and_match_real_rows():
    rng = np.random.default_rng(0)
    n = 4000
    a = rng.choice(3, n, p=[0.9, 0.09, 0.01])  # a rare category
    b = rng.integers(0, 2, n)
    Z = np.zeros((n, 6))
    Z[np.arange(n), a] = 1
    Z[:, 3] = rng.normal(size=n)  # a continuous value between the spans
    Z[np.arange(n), 4 + b] = 1
    s = ConditionalSampler(Z, [(0, 3), (4, 2)], seed=1)
    cond, span, cat = s.sample(20000)
    assert cond.shape == (20000, 5) and np.all(cond.sum(1) == 1)
    share = np.bincount(cat[span == 0], minlength=3) / (span == 0).sum()
    freq = np.bincount(a, minlength=3)
    want = np.log1p(freq) / np.log1p(freq).sum()
    np.testing.assert_allclose(share, want, atol=0.02)  # the rare category is drawn far above 1 %
    rows = s.real_rows(span, cat)
    got = np.where(span == 0, a[rows], b[rows])
    np.testing.assert_array_equal(got, cat)


def test_gradient_penalty_of_a_linear_critic():
    w = torch.tensor([[3.0, 4.0]])
    critic = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        critic.weight.copy_(w)
    real, fake = torch.randn(8, 2), torch.randn(8, 2)
    gp = gradient_penalty(critic, real, fake, weight=10.0)
    assert torch.isclose(gp, torch.tensor(10.0 * (5.0 - 1.0) ** 2))
    gp.backward()
    assert critic.weight.grad is not None and critic.weight.grad.abs().sum() > 0
