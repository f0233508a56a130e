"""ICAFS's synthesis networks: shapes, and a short conditional WGAN-GP run honours its condition."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verticalfs.methods.icafs.networks import (
    Critic,
    Generator,
    apply_activations,
    conditional_loss,
    wgan_gp_step,
)
from verticalfs.methods.icafs.sampling import ConditionalSampler
from verticalfs.methods.icafs.transform import ModeSpecificNormalizer


@pytest.mark.parametrize("arch", ["conv", "mlp"])
def test_shapes(arch):
    G, D = Generator(8, 5, 13, arch=arch, hidden=8), Critic(13, 5, arch=arch, hidden=8)
    x = G(torch.randn(4, 8), torch.zeros(4, 5))
    assert x.shape == (4, 13)
    assert D(torch.cat([x, torch.zeros(4, 5)], 1)).shape == (4, 1)


def test_activations_and_conditional_loss():
    raw = torch.tensor([[5.0, 2.0, 0.0, -3.0]])
    out = apply_activations(raw, [0], [(1, 3)])
    assert abs(out[0, 0].item() - np.tanh(5.0)) < 1e-6 and abs(out[0, 1:].sum().item() - 1) < 1e-5
    cond = torch.tensor([[0.0, 1.0, 0.0]])  # names category 1 of the span
    want = torch.nn.functional.cross_entropy(raw[:, 1:4], torch.tensor([1]))
    assert torch.isclose(conditional_loss(raw, cond, [(1, 3)]), want)


def test_a_short_conditional_run_honours_the_condition():
    rng = np.random.default_rng(0)
    n = 1200
    cat = rng.integers(0, 3, n).astype(float)
    cont = np.where(cat == 0, rng.normal(-4, 0.3, n), rng.normal(4, 0.3, n))
    msn = ModeSpecificNormalizer(seed=0).fit(np.stack([cont, cat], 1))
    Z = msn.transform(np.stack([cont, cat], 1))
    spans = [s for s in msn.spans() if s[0] >= msn.columns[0].width]  # condition on the category
    alphas = [0]
    sampler = ConditionalSampler(Z, spans, seed=0)
    torch.manual_seed(0)
    G, D = Generator(16, sampler.width, Z.shape[1], arch="mlp", hidden=16), Critic(Z.shape[1], sampler.width, arch="mlp", hidden=16)
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-3, betas=(0.5, 0.9))
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-3, betas=(0.5, 0.9))
    Zt = torch.from_numpy(Z)
    for _ in range(300):
        cond, span, c = sampler.sample(64)
        real = Zt[torch.from_numpy(sampler.real_rows(span, c))]
        wgan_gp_step(G, D, opt_g, opt_d, real, torch.from_numpy(cond), alphas, spans, 16)
    cond, span, c = sampler.sample(500)
    with torch.no_grad():
        raw = G(torch.randn(500, 16), torch.from_numpy(cond))
    a, w = spans[0]
    got = raw[:, a:a + w].argmax(1).numpy()
    assert (got == c).mean() > 0.9
