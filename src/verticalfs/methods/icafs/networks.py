"""The generator and critic of ICAFS's synthesis stage (icafs.md section V-E) and WGAN-GP's
gradient penalty; :mod:`.synthesis` puts them together across the parties.

Section V-E: "Generators and discriminators are implemented using CNNs with 4 layers each. The
generator performs a series of deconvolution operations to generate a record while a discriminator
performs a series of convolution operations ... 3x3 filters ... For each pair of consecutive
layers, it adds a Conv2d layer, a LayerNorm layer, and a LeakyReLU activation layer. The final
layer is a Conv2d layer followed by a ReLU activation." A record of width ``w`` is laid out on a
square ``side x side >= w`` (zero padded); ``arch="mlp"`` is the fully connected option the issue
allows. Two readings of the text:

- ``arch="conv"`` (default since 2026-11-26, issue 42): the generator *deconvolves* and the critic
  *convolves down*, as the text says and as CTAB-GAN's networks do (Zhao et al. 2021, whose
  description section V-E repeats; GTV, reference [31], uses them too), where the record is wide
  enough for it: :func:`strides` gives ``k`` stride-2 layers (three for ALLAML's and TOX_171's
  parties at K = 2; none for a record that fits in 32 x 32, such as USPS's, which then gets
  ``conv-full``'s networks, below: strided down to 4 x 4 its synthesis lost the label). ``side`` is
  the smallest multiple of ``2^k`` with ``side^2 >= w``. The critic: ``k`` 3x3 convolutions of
  stride 2 (``side`` -> ``side/2^k``), 3x3 ones of stride 1 up to four layers, each but the last
  followed by LayerNorm and LeakyReLU, the last to one map, and a linear head to the features (as
  before). The generator mirrors it: a linear projection of the code to ``channels`` maps of
  ``side/2^k``, 3x3 convolutions, ``k`` 3x3 transposed convolutions of stride 2 (LayerNorm and
  LeakyReLU between), and a learnt bias per output value (an untied bias, ours:
  translation-invariant filters over columns laid out in an arbitrary order cannot give each column
  its own offset; the full-resolution projection of ``conv-full`` gave it one). Every layer has
  ``channels`` filters (the paper gives no number). One Algorithm 1 iteration of an ALLAML party
  (72 rows x 3,565 columns, a 104 x 104 map) costs about 1/15 of ``conv-full``'s (measured in
  ``benchmarks/icafs/README.md``, "Speed").
- ``arch="conv-full"`` (the default until 2026-11-26, and ``conv``'s networks for a record of at
  most 32 x 32): four 3x3 convolutions of stride 1 at the full ``side x side`` resolution (``side``
  the smallest square), after a linear projection of the code to two full-resolution maps in the
  generator and before a linear head in the critic.

Interpretations (ours): the generator's last activation cannot be a ReLU, because the
mode-specific representation has negative values (``alpha`` in [-0.99, 0.99]); the synthesis
applies CTGAN's output activations instead (``tanh`` on each ``alpha``, a Gumbel-softmax on each
one-hot span). A critic's last layer has no activation (a Wasserstein critic's output is a real
score, not a probability).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


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


#: at most this many stride-2 layers in ``arch="conv"``: the map's side shrinks (critic) or grows
#: (generator) up to 2^3 times
_STRIDED = 3
_LAYERS = 4  # section V-E: "CNNs with 4 layers each"
#: ``arch="conv"`` keeps a record that fits in ``FULL_SIDE x FULL_SIDE`` at its full resolution
#: (``conv-full``'s networks), and strides only wider ones (see :func:`strides`)
FULL_SIDE = 32
#: the least side of the strided networks' bottom map (see :func:`strides`)
MIN_BOTTOM = 12


def strides(width: int) -> int:
    """Stride-2 layers of ``arch="conv"`` for a record of ``width`` values.

    None (0) if the record fits in ``FULL_SIDE x FULL_SIDE`` (then ``arch="conv"`` is ``conv-full``);
    else as many as keep the bottom map at least ``MIN_BOTTOM`` on a side, at most three. Measured
    (``benchmarks/icafs/README.md``, "Where the networks stride", K = 2, seed 0): on USPS, whose
    party record is 847 values (a 30 x 30 square), a logistic regression trained on the synthesis
    reaches 9.9 % on real rows with three strides (a 4 x 4 bottom map), 57.8 % with one (15 x 15),
    67.8 % with no stride and ``conv-full``'s networks 69.5 % (71.6 ± 0.9 % over five seeds). On
    TOX_171 (96 x 96) three strides (a 12 x 12 bottom map) kept the synthesis's quality (28.0 %
    against 29.1 %); on ALLAML (104 x 104, 13 x 13) it fell from 73.3 to 62.7 ± 8.9 % (15 test rows;
    two strides, 26 x 26, gave 58.7 ± 18.5 %); both made stage 1 ten times shorter. A full-resolution
    iteration costs about ``side^2``: affordable at 32 x 32, 8-18x the strided one on USPS, ~15x on
    ALLAML. The thresholds lie between the measured sides (30 and 96; 4 and 12); they are not
    pinned closer."""
    s0 = max(1, math.ceil(math.sqrt(int(width))))
    if s0 <= FULL_SIDE:
        return 0
    k = _STRIDED
    while k > 1 and math.ceil(s0 / 2 ** k) < MIN_BOTTOM:
        k -= 1
    return k


def strided_side(width: int) -> int:
    """``arch="conv"``'s square: the smallest multiple of ``2^k`` (``k`` = :func:`strides`) whose square
    holds ``width`` values (for ``k = 0``, ``conv-full``'s :func:`square_side`)."""
    k = strides(width)
    if k == 0:
        return square_side(width)
    return 2 ** k * max(1, math.ceil(math.sqrt(int(width)) / 2 ** k))


def _down(channels: int, side: int, k: int) -> nn.Sequential:
    """The critic's convolutions: ``k`` 3x3 of stride 2, then 3x3 of stride 1 up to four layers
    (LayerNorm, LeakyReLU between), the last to one map: ``1 x side x side`` -> ``1 x side/2^k x side/2^k``."""
    layers: list[nn.Module] = []
    c, s = 1, side
    for _ in range(k):
        s //= 2
        layers += [nn.Conv2d(c, channels, 3, stride=2, padding=1), nn.LayerNorm([channels, s, s]), nn.LeakyReLU(0.2)]
        c = channels
    for _ in range(_LAYERS - 1 - k):
        layers += [nn.Conv2d(c, channels, 3, padding=1), nn.LayerNorm([channels, s, s]), nn.LeakyReLU(0.2)]
        c = channels
    layers.append(nn.Conv2d(c, 1, 3, padding=1))
    return nn.Sequential(*layers)


def _up(channels: int, side: int, k: int) -> nn.Sequential:
    """The generator's deconvolutions, the critic's mirror: 3x3 convolutions at ``side/2^k`` (four
    layers less ``k``), then ``k`` 3x3 transposed convolutions of stride 2 (LayerNorm, LeakyReLU
    between): ``channels x side/2^k x side/2^k`` -> ``1 x side x side``."""
    s = side // 2 ** k
    layers: list[nn.Module] = []
    for i in range(_LAYERS - k):
        last = k == 0 and i == _LAYERS - 1
        layers.append(nn.Conv2d(channels, 1 if last else channels, 3, padding=1))
        if not last:
            layers += [nn.LayerNorm([channels, s, s]), nn.LeakyReLU(0.2)]
    for i in range(k):
        s *= 2
        last = i == k - 1
        layers.append(nn.ConvTranspose2d(channels, 1 if last else channels, 3, stride=2, padding=1, output_padding=1))
        if not last:
            layers += [nn.LayerNorm([channels, s, s]), nn.LeakyReLU(0.2)]
    return nn.Sequential(*layers)


class Generator(nn.Module):
    """Noise and a conditional vector to a record of ``width`` values (before output activations)."""

    def __init__(self, noise_dim: int, cond_dim: int, width: int, arch: str = "conv", hidden: int = 64) -> None:
        super().__init__()
        if arch == "conv" and strides(width) == 0:
            arch = "conv-full"  # a narrow record keeps its full resolution (:func:`strides`)
        self.width, self.arch = int(width), arch
        if arch == "conv":
            self.side, self.k = strided_side(width), strides(width)
            self.channels = hidden
            s = self.side // 2 ** self.k
            self.project = nn.Linear(noise_dim + cond_dim, hidden * s * s)
            self.body = _up(hidden, self.side, self.k)
            self.bias = nn.Parameter(torch.zeros(self.width))  # one learnt offset per output value (untied bias)
        elif arch == "conv-full":
            self.side = square_side(width)
            self.project = nn.Linear(noise_dim + cond_dim, hidden * self.side * self.side // 4 or hidden)
            self.channels = max(1, self.project.out_features // (self.side * self.side))
            self.body = _ConvStack(self.channels, hidden, 1, self.side)
        elif arch == "mlp":
            self.body = nn.Sequential(nn.Linear(noise_dim + cond_dim, 4 * hidden), nn.LayerNorm(4 * hidden),
                                      nn.LeakyReLU(0.2), nn.Linear(4 * hidden, 4 * hidden), nn.LayerNorm(4 * hidden),
                                      nn.LeakyReLU(0.2), nn.Linear(4 * hidden, width))
        else:
            raise ValueError(f"arch must be 'conv', 'conv-full' or 'mlp', got {arch!r}")

    def forward(self, noise: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        x = noise if cond is None else torch.cat([noise, cond], 1)
        if self.arch == "mlp":
            return self.body(x)
        if self.arch == "conv":
            s = self.side // 2 ** self.k
            out = self.body(self.project(x).view(-1, self.channels, s, s))
            return out.flatten(1)[:, : self.width] + self.bias
        h = self.project(x)[:, : self.channels * self.side * self.side]
        out = self.body(h.view(-1, self.channels, self.side, self.side))
        return out.flatten(1)[:, : self.width]


class Critic(nn.Module):
    """A record and its conditional vector to a Wasserstein score (``out_dim = 1``), or to
    ``out_dim`` features (the party's part of the federated critic,
    :mod:`verticalfs.methods.icafs.synthesis`), either normalised by a LayerNorm without affine
    parameters (bounded features; the gradient penalty is on the label holder's part only, which does
    not bound this network's gradients) or, ``spectral=True``, with every linear and convolutional
    weight spectrally normalised (Miyato et al. 2018), which bounds each layer's gain without a
    second-order exchange."""

    def __init__(self, width: int, cond_dim: int, arch: str = "conv", hidden: int = 64, out_dim: int = 1,
                 spectral: bool = False) -> None:
        super().__init__()
        if arch == "conv" and strides(width + cond_dim) == 0:
            arch = "conv-full"  # a narrow record keeps its full resolution (:func:`strides`)
        self.arch = arch
        if arch == "conv":
            self.side, k = strided_side(width + cond_dim), strides(width + cond_dim)
            self.body = _down(hidden, self.side, k)
            self.head = nn.Linear((self.side // 2 ** k) ** 2, out_dim)
        elif arch == "conv-full":
            self.side = square_side(width + cond_dim)
            self.body = _ConvStack(1, hidden, 1, self.side)
            self.head = nn.Linear(self.side * self.side, out_dim)
        elif arch == "mlp":
            self.body = nn.Sequential(nn.Linear(width + cond_dim, 4 * hidden), nn.LeakyReLU(0.2),
                                      nn.Linear(4 * hidden, 4 * hidden), nn.LeakyReLU(0.2))
            self.head = nn.Linear(4 * hidden, out_dim)
        else:
            raise ValueError(f"arch must be 'conv', 'conv-full' or 'mlp', got {arch!r}")
        self.norm = nn.LayerNorm(out_dim, elementwise_affine=False) if out_dim > 1 and not spectral else nn.Identity()
        if spectral:  # every weight of the critic divided by its largest singular value (Miyato et al. 2018)
            for m in list(self.modules()):
                if isinstance(m, (nn.Linear, nn.Conv2d)):
                    nn.utils.parametrizations.spectral_norm(m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.arch == "mlp":
            return self.norm(self.head(self.body(x)))
        pad = self.side * self.side - x.shape[1]
        img = F.pad(x, (0, pad)).view(-1, 1, self.side, self.side)
        return self.norm(self.head(self.body(img).flatten(1)))


def gradient_penalty(critic, real: torch.Tensor, fake: torch.Tensor, weight: float = 10.0,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """WGAN-GP's penalty ``weight * (||grad_x D(x_hat)||_2 - 1)^2`` averaged over the batch, with
    ``x_hat`` uniformly between ``real`` and ``fake`` rows (Gulrajani et al. 2017)."""
    eps = torch.rand(real.shape[0], 1, generator=generator, dtype=real.dtype)
    x = (eps * real + (1 - eps) * fake).requires_grad_(True)
    out = critic(x)
    (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    return float(weight) * ((grad.norm(2, dim=1) - 1) ** 2).mean()
