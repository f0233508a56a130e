"""The conditional generator and critic of ICAFS's synthesis stage (icafs.md section V-E) and one
party's local conditional WGAN-GP training step.

Section V-E: "Generators and discriminators are implemented using CNNs with 4 layers each. The
generator performs a series of deconvolution operations to generate a record while a discriminator
performs a series of convolution operations ... 3x3 filters ... For each pair of consecutive
layers, it adds a Conv2d layer, a LayerNorm layer, and a LeakyReLU activation layer. The final
layer is a Conv2d layer followed by a ReLU activation." A record of width ``w`` is laid out on the
smallest square ``side x side >= w`` (zero padded); ``arch="conv"`` (default) follows that text,
``arch="mlp"`` is the fully connected option the issue allows.

Interpretations (ours): the generator's last activation cannot be a ReLU, because the
mode-specific representation has negative values (``alpha`` in [-0.99, 0.99]); it applies CTGAN's
output activations instead: ``tanh`` on each ``alpha`` and a Gumbel-softmax on each one-hot span
(:func:`apply_activations`). The critic's last layer has no activation (a Wasserstein critic's
output is a real score, not a probability). The conditional vector enters the generator with the
noise and the critic with the record.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from verticalfs.methods.icafs.sampling import gradient_penalty


def square_side(width: int) -> int:
    return max(2, math.ceil(math.sqrt(int(width))))


class _ConvStack(nn.Module):
    """``depth`` 3x3 convolutions on a ``side x side`` map: Conv2d, LayerNorm, LeakyReLU between layers."""

    def __init__(self, c_in: int, channels: int, c_out: int, side: int, depth: int = 4) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = c_in
        for _ in range(depth - 1):
            layers += [nn.Conv2d(c, channels, 3, padding=1), nn.LayerNorm([channels, side, side]), nn.LeakyReLU(0.2)]
            c = channels
        layers.append(nn.Conv2d(c, c_out, 3, padding=1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Generator(nn.Module):
    """Noise and a conditional vector to a record of ``width`` values (before output activations)."""

    def __init__(self, noise_dim: int, cond_dim: int, width: int, arch: str = "conv", hidden: int = 64) -> None:
        super().__init__()
        self.width, self.arch = int(width), arch
        self.side = square_side(width)
        if arch == "conv":
            self.project = nn.Linear(noise_dim + cond_dim, hidden * self.side * self.side // 4 or hidden)
            self.channels = max(1, self.project.out_features // (self.side * self.side))
            self.body = _ConvStack(self.channels, hidden, 1, self.side)
        elif arch == "mlp":
            self.body = nn.Sequential(nn.Linear(noise_dim + cond_dim, 4 * hidden), nn.LayerNorm(4 * hidden),
                                      nn.LeakyReLU(0.2), nn.Linear(4 * hidden, 4 * hidden), nn.LayerNorm(4 * hidden),
                                      nn.LeakyReLU(0.2), nn.Linear(4 * hidden, width))
        else:
            raise ValueError(f"arch must be 'conv' or 'mlp', got {arch!r}")

    def forward(self, noise: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        x = torch.cat([noise, cond], 1)
        if self.arch == "mlp":
            return self.body(x)
        h = self.project(x)[:, : self.channels * self.side * self.side]
        out = self.body(h.view(-1, self.channels, self.side, self.side))
        return out.flatten(1)[:, : self.width]


class Critic(nn.Module):
    """A record and its conditional vector to a Wasserstein score."""

    def __init__(self, width: int, cond_dim: int, arch: str = "conv", hidden: int = 64) -> None:
        super().__init__()
        self.arch = arch
        self.side = square_side(width + cond_dim)
        if arch == "conv":
            self.body = _ConvStack(1, hidden, 1, self.side)
            self.head = nn.Linear(self.side * self.side, 1)
        elif arch == "mlp":
            self.body = nn.Sequential(nn.Linear(width + cond_dim, 4 * hidden), nn.LeakyReLU(0.2),
                                      nn.Linear(4 * hidden, 4 * hidden), nn.LeakyReLU(0.2), nn.Linear(4 * hidden, 1))
        else:
            raise ValueError(f"arch must be 'conv' or 'mlp', got {arch!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.arch == "mlp":
            return self.body(x)
        pad = self.side * self.side - x.shape[1]
        img = F.pad(x, (0, pad)).view(-1, 1, self.side, self.side)
        return self.head(self.body(img).flatten(1))


def apply_activations(raw: torch.Tensor, alphas, spans, tau: float = 0.2) -> torch.Tensor:
    """``tanh`` on the ``alphas`` positions, a Gumbel-softmax on each one-hot span (CTGAN's)."""
    parts = raw.clone()
    if len(alphas):
        idx = torch.as_tensor(list(alphas))
        parts[:, idx] = torch.tanh(raw[:, idx])
    for a, w in spans:
        parts[:, a:a + w] = F.gumbel_softmax(raw[:, a:a + w], tau=tau, hard=False)
    return parts


def conditional_loss(raw: torch.Tensor, cond: torch.Tensor, spans) -> torch.Tensor:
    """Cross-entropy of the generated span named by the conditional vector against it (CTGAN's
    generator term that makes the record honour its condition)."""
    loss, off = raw.new_zeros(()), 0
    total = cond.sum().clamp_min(1)
    for a, w in spans:
        c = cond[:, off:off + w]
        mask = c.sum(1) > 0
        if mask.any():
            loss = loss + F.cross_entropy(raw[mask, a:a + w], c[mask].argmax(1), reduction="sum")
        off += w
    return loss / total


def wgan_gp_step(G: Generator, D: Critic, opt_g, opt_d, real: torch.Tensor, cond: torch.Tensor, alphas, spans,
                 noise_dim: int, gp_weight: float = 10.0, generator: torch.Generator | None = None) -> tuple[float, float]:
    """One critic step and one generator step; returns ``(critic loss, generator loss)``."""
    n = real.shape[0]
    noise = torch.randn(n, noise_dim, generator=generator)
    fake = apply_activations(G(noise, cond), alphas, spans).detach()
    real_in, fake_in = torch.cat([real, cond], 1), torch.cat([fake, cond], 1)
    loss_d = D(fake_in).mean() - D(real_in).mean() + gradient_penalty(D, real_in, fake_in, gp_weight, generator)
    opt_d.zero_grad(set_to_none=True)
    loss_d.backward()
    opt_d.step()
    noise = torch.randn(n, noise_dim, generator=generator)
    raw = G(noise, cond)
    fake = apply_activations(raw, alphas, spans)
    loss_g = -D(torch.cat([fake, cond], 1)).mean() + conditional_loss(raw, cond, spans)
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    return float(loss_d.detach()), float(loss_g.detach())
