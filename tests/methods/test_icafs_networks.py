"""ICAFS's synthesis networks: shapes, bounded critic features or spectrally normalised critic
weights, WGAN-GP's gradient penalty and the auxiliary classifier's term."""

from __future__ import annotations

import pytest
import torch

from verticalfs.methods.icafs.networks import Critic, Generator, gradient_penalty


@pytest.mark.parametrize("arch", ["conv", "conv-full", "mlp"])
def test_shapes(arch):
    G, D = Generator(8, 5, 13, arch=arch, hidden=8), Critic(13, 5, arch=arch, hidden=8)
    x = G(torch.randn(4, 8), torch.zeros(4, 5))
    assert x.shape == (4, 13)
    assert D(torch.cat([x, torch.zeros(4, 5)], 1)).shape == (4, 1)
    assert Generator(8, 0, 13, arch=arch, hidden=8)(torch.randn(4, 8)).shape == (4, 13)


@pytest.mark.parametrize("arch", ["conv", "conv-full", "mlp"])
def test_party_critic_features_are_normalised(arch):
    """A party's part of the federated critic ends in a LayerNorm without affine parameters: each
    row's features have mean 0 and variance 1 however large the input."""
    D = Critic(13, 0, arch=arch, hidden=8, out_dim=6)
    h = D(1000 * torch.randn(5, 13))
    assert h.shape == (5, 6)
    torch.testing.assert_close(h.mean(1), torch.zeros(5), atol=1e-4, rtol=0)
    torch.testing.assert_close(h.var(1, unbiased=False), torch.ones(5), atol=1e-3, rtol=0)


@pytest.mark.parametrize("arch", ["conv", "conv-full", "mlp"])
def test_spectral_party_critic_has_unit_gain_layers(arch):
    """``spectral=True``: after 300 forward passes in training mode (each one power iteration),
    every linear and convolutional weight the critic uses has largest singular value 1, and the
    features are not LayerNorm-ed (they scale with the input)."""
    torch.manual_seed(0)
    D = Critic(13, 0, arch=arch, hidden=8, out_dim=6, spectral=True)
    D.train()
    for _ in range(300):
        D(torch.randn(5, 13))
    layers = [m for m in D.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    assert len(layers) >= 3
    for m in layers:
        sigma = torch.linalg.matrix_norm(m.weight.detach().flatten(1), ord=2)
        assert abs(float(sigma) - 1.0) < 1e-2
        assert hasattr(m, "parametrizations")
    D.eval()
    x = torch.randn(5, 13)
    assert not torch.allclose(D(100 * x), D(x))


def test_auxiliary_classifier_term_by_hand():
    """``aux_weight``: the critic's loss gains ``w * CE(classifier(phi(H_real)), y_real)``, the
    generators' ``w * CE(classifier(phi(H_fake)), y_fake)``; 0 leaves WGAN-GP's losses."""
    import numpy as np
    import torch.nn.functional as F

    from verticalfs.methods.icafs.synthesis import HolderSynthesis

    y = np.array([0, 1, 2, 1, 0, 2])

    def mk(w):
        return HolderSynthesis(y, 3, ["a", "b"], code_dim=4, feature_dim=5, hidden=16, aux_weight=w, seed=3)

    with_aux, without = mk(0.7), mk(0.0)
    without.D.load_state_dict(with_aux.D.state_dict())
    Hr, Hf = torch.randn(6, 10), torch.randn(6, 10)
    yr, yf = np.array([0, 1, 2, 0, 1, 2]), np.array([2, 2, 1, 0, 0, 1])

    def ce(H, t):
        return F.cross_entropy(with_aux.classifier(with_aux.D.phi(H)), torch.as_tensor(t))

    torch.testing.assert_close(with_aux.generator_loss(Hf, yf), without.generator_loss(Hf, yf) + 0.7 * ce(Hf, yf))
    with_aux.gen.manual_seed(1)
    without.gen.manual_seed(1)
    torch.testing.assert_close(with_aux.critic_loss(Hr, yr, Hf, yf),
                               without.critic_loss(Hr, yr, Hf, yf) + 0.7 * ce(Hr, yr))
    assert {id(p) for p in with_aux.classifier.parameters()} <= {id(p) for g in with_aux.opt_d.param_groups
                                                                  for p in g["params"]}


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


def test_party_output_activations_match_a_per_block_softmax():
    """The vectorised output activations (one softmax per block width over all blocks) equal
    CTGAN's per-block ones: tanh on each continuous scalar, a Gumbel softmax at temperature 0.2 on
    each block with the same noise; every block of every row sums to 1; gradients flow."""
    import numpy as np
    import torch.nn.functional as F

    from verticalfs.methods.icafs.synthesis import PartySynthesis

    rng = np.random.default_rng(0)
    X = np.c_[rng.normal(size=(300, 3)), rng.integers(0, 4, size=(300, 2)).astype(float),
              np.r_[rng.normal(-3, 0.3, 150), rng.normal(3, 0.3, 150)]]
    ps = PartySynthesis(X, name="a", code_dim=8, feature_dim=4, channels=4, arch="mlp", lr=1e-3, max_modes=5, seed=0)
    raw = torch.randn(7, ps.norm.output_width, requires_grad=True)
    state = ps.gen.get_state()
    out = ps._activate(raw)
    ps.gen.set_state(state)
    noise = ps._gumbel(7)
    assert noise.shape == (7, len(ps.onehot_idx)) and bool(torch.isfinite(noise).all())
    ref, j = raw.detach().clone(), 0
    for a, w in ps.spans:
        ref[:, a:a + w] = F.softmax((raw.detach()[:, a:a + w] + noise[:, j:j + w]) / 0.2, 1)
        assert torch.allclose(out[:, a:a + w].sum(1), torch.ones(7))
        j += w
    ref[:, ps.alpha_idx] = torch.tanh(raw.detach()[:, ps.alpha_idx])
    torch.testing.assert_close(out, ref)
    out[:, 0].sum().backward()
    assert raw.grad.abs().sum() > 0


def test_party_generator_step_leaves_the_critic_untouched():
    """The generator's step reaches G_k through D_k but neither computes nor applies gradients
    to D_k's weights; the critic's step updates D_k only."""
    import numpy as np

    from verticalfs.methods.icafs.synthesis import PartySynthesis

    rng = np.random.default_rng(1)
    ps = PartySynthesis(rng.normal(size=(40, 5)), name="a", code_dim=4, feature_dim=3, channels=4, arch="conv",
                        lr=1e-2, max_modes=3, seed=0)
    d0 = [p.detach().clone() for p in ps.D.parameters()]
    g0 = [p.detach().clone() for p in ps.G.parameters()]
    h = ps.generator_features(rng.normal(size=(6, 4)).astype(np.float32))
    grad_codes = ps.generator_step(np.ones_like(h))
    assert grad_codes.shape == (6, 4) and np.abs(grad_codes).sum() > 0
    assert all(p.grad is None for p in ps.D.parameters())
    assert all(torch.equal(a, b) for a, b in zip(d0, ps.D.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(g0, ps.G.parameters(), strict=True))
    g1 = [p.detach().clone() for p in ps.G.parameters()]
    hr, hf = ps.critic_features(np.arange(6), rng.normal(size=(6, 4)).astype(np.float32))
    assert hr.shape == hf.shape == (6, 3)
    ps.critic_step(np.ones_like(hr), -np.ones_like(hf))
    assert any(not torch.equal(a, b) for a, b in zip(d0, ps.D.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(g1, ps.G.parameters(), strict=True))


def test_conv_networks_convolve_down_and_deconvolve_up():
    """``arch="conv"`` (section V-E read as CTAB-GAN's networks): a 10,396-wide record on a 104 x 104
    square (the smallest multiple of 8 that holds it); the critic's three stride-2 3x3
    convolutions and a last 3x3 one leave a 13 x 13 map; the generator's three stride-2 transposed
    3x3 convolutions grow 13 x 13 back to 104 x 104; four convolutional layers each, and one
    learnt bias per output value in the generator."""
    from verticalfs.methods.icafs.networks import strided_side, strides

    assert [strides(w) for w in (10396, 9080)] == [3, 3] and [strided_side(w) for w in (10396, 9080)] == [104, 96]
    G = Generator(64, 0, 10396, arch="conv", hidden=8)
    D = Critic(10396, 0, arch="conv", hidden=8, out_dim=32, spectral=True)
    convs = [m for m in D.body if isinstance(m, torch.nn.Conv2d)]
    assert [m.stride for m in convs] == [(2, 2)] * 3 + [(1, 1)] and all(m.kernel_size == (3, 3) for m in convs)
    img = torch.nn.functional.pad(torch.randn(3, 10396), (0, 104 * 104 - 10396)).view(3, 1, 104, 104)
    assert D.body(img).shape == (3, 1, 13, 13) and D(torch.randn(3, 10396)).shape == (3, 32)
    ups = [m for m in G.body if isinstance(m, torch.nn.ConvTranspose2d)]
    assert len(ups) == 3 and all(m.stride == (2, 2) and m.kernel_size == (3, 3) for m in ups)
    assert sum(isinstance(m, (torch.nn.Conv2d, torch.nn.ConvTranspose2d)) for m in G.body) == 4
    x = G(torch.randn(3, 64))
    assert x.shape == (3, 10396)
    G.eval()
    z = torch.randn(3, 64)
    with torch.no_grad():
        before = G(z)
        G.bias[5] += 7.0
        shift = G(z) - before
    assert torch.allclose(shift[:, 5], torch.full((3,), 7.0)) and shift[:, torch.arange(10396) != 5].abs().max() == 0


def test_conv_strides_only_wide_records_and_keeps_their_bottom_map_at_least_12_wide():
    """:func:`strides`: a record that fits in 32 x 32 keeps its full resolution (``arch="conv"`` builds
    ``conv-full``'s very networks: the same outputs from the same seeds); a wider one strides as
    often as leaves a bottom map of at least 12 x 12 (ALLAML's 4,144-value parties at K = 5: two
    strides, 68 -> 17; its 2,067-value ones at K = 10: two, 48 -> 12; a 1,600-value record: one,
    40 -> 20), at most three."""
    from verticalfs.methods.icafs.networks import strided_side, strides

    cases = {1: 0, 847: 0, 1024: 0, 1025: 1, 1600: 1, 2067: 2, 4144: 2, 10396: 3, 40000: 3}
    assert {w: strides(w) for w in cases} == cases
    assert [strided_side(w) for w in (1600, 2067, 4144)] == [40, 48, 68]

    def outputs(arch: str, w: int):
        torch.manual_seed(0)
        G = Generator(64, 0, w, arch=arch, hidden=8)
        torch.manual_seed(1)
        D = Critic(w, 0, arch=arch, hidden=8, out_dim=32, spectral=True)
        torch.manual_seed(2)
        return G, D, G(torch.randn(4, 64)), D(torch.randn(4, w))

    G, D, g, d = outputs("conv", 847)  # USPS's party at K = 2 (128 pixels -> 847 values, 30 x 30)
    _, _, g_full, d_full = outputs("conv-full", 847)
    assert G.arch == D.arch == "conv-full" and torch.equal(g, g_full) and torch.equal(d, d_full)
    for w, k, bottom in ((1600, 1, 20), (2067, 2, 12), (4144, 2, 17)):
        G, D, g, d = outputs("conv", w)
        assert G.arch == D.arch == "conv" and g.shape == (4, w) and d.shape == (4, 32)
        assert sum(isinstance(m, torch.nn.ConvTranspose2d) for m in G.body) == k
        assert sum(isinstance(m, (torch.nn.Conv2d, torch.nn.ConvTranspose2d)) for m in G.body) == 4
        convs = [m for m in D.body if isinstance(m, torch.nn.Conv2d)]
        assert [m.stride for m in convs] == [(2, 2)] * k + [(1, 1)] * (4 - k)
        side = strided_side(w)
        img = torch.nn.functional.pad(torch.randn(2, w), (0, side * side - w)).view(2, 1, side, side)
        assert D.body(img).shape == (2, 1, bottom, bottom)


def test_three_strides_keep_the_eighth_sittings_networks_parameter_for_parameter():
    """ALLAML's party at K = 2 (10,396 values): the rule of :func:`strides` builds the networks the
    eighth sitting measured, the same modules in the same order with the same shapes (so the same
    seeded initial weights and the same figures; checked once against that code's outputs in one
    process, 2026-11-26): generator projection 64 -> 8 x 13 x 13, a 3x3 convolution and three
    transposed ones 13 -> 26 -> 52 -> 104; critic three stride-2 convolutions 104 -> 52 -> 26 -> 13,
    a 3x3 to one map and a 169 -> 32 head."""
    G = Generator(64, 0, 10396, arch="conv", hidden=8)
    D = Critic(10396, 0, arch="conv", hidden=8, out_dim=32, spectral=True)
    assert [(n, tuple(p.shape)) for n, p in G.named_parameters()] == [
        ("bias", (10396,)), ("project.weight", (1352, 64)), ("project.bias", (1352,)),
        ("body.0.weight", (8, 8, 3, 3)), ("body.0.bias", (8,)), ("body.1.weight", (8, 13, 13)),
        ("body.1.bias", (8, 13, 13)), ("body.3.weight", (8, 8, 3, 3)), ("body.3.bias", (8,)),
        ("body.4.weight", (8, 26, 26)), ("body.4.bias", (8, 26, 26)), ("body.6.weight", (8, 8, 3, 3)),
        ("body.6.bias", (8,)), ("body.7.weight", (8, 52, 52)), ("body.7.bias", (8, 52, 52)),
        ("body.9.weight", (8, 1, 3, 3)), ("body.9.bias", (1,))]
    assert [type(m).__name__ for m in G.body if isinstance(m, (torch.nn.Conv2d, torch.nn.ConvTranspose2d))] == [
        "Conv2d", "ConvTranspose2d", "ConvTranspose2d", "ConvTranspose2d"]
    assert [(n, tuple(p.shape)) for n, p in D.named_parameters()] == [
        ("body.0.bias", (8,)), ("body.0.parametrizations.weight.original", (8, 1, 3, 3)),
        ("body.1.weight", (8, 52, 52)), ("body.1.bias", (8, 52, 52)), ("body.3.bias", (8,)),
        ("body.3.parametrizations.weight.original", (8, 8, 3, 3)), ("body.4.weight", (8, 26, 26)),
        ("body.4.bias", (8, 26, 26)), ("body.6.bias", (8,)), ("body.6.parametrizations.weight.original", (8, 8, 3, 3)),
        ("body.7.weight", (8, 13, 13)), ("body.7.bias", (8, 13, 13)), ("body.9.bias", (1,)),
        ("body.9.parametrizations.weight.original", (1, 8, 3, 3)), ("head.bias", (32,)),
        ("head.parametrizations.weight.original", (32, 169))]
