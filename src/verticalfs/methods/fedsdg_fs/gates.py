"""Stochastic dual gates (fedsdg-fs.md section IV-B) around a party's bottom MLP.

A party's model is ``g = h(x * s) * q``: an *input gate* ``s`` (one per feature) in front of the
bottom MLP ``h`` and an *embedding gate* ``q`` (one per embedding component) behind it. Each gate is
a clipped Gaussian

    s_i = max(0, min(1, mu_i + rho_i)),  rho_i ~ N(0, sigma^2)   (q_j likewise with omega_j),

the continuous relaxation of a Bernoulli indicator; the l0 penalty of equation (3) becomes the sum
of the probabilities that each gate is open, ``sum_i Phi(mu_i / sigma) + sum_j Phi(omega_j / sigma)``
(equation (4), :meth:`GatedMLP.regularizer`). In training one noise vector is drawn per step
(Algorithm 2 line 4: one rho per feature and one gamma per component, shared by the rows of the
mini-batch, as in STG), so a component whose gate is 0 at this step is 0 for the whole batch and
need not be sent. Its gradient with respect to ``mu`` is the Monte Carlo estimator of equation
(5) with ``C = 1`` sample per step, which is what autograd computes through the clip: ``dL/dmu_i =
sum_n dL/dx'_{n,i} x_{n,i}`` where ``0 < mu_i + rho_i < 1`` and 0 elsewhere (the paper leaves C
open; one sample per step is STG's choice and Algorithm 2's). At inference the gates are
deterministic, ``clip(mu, 0, 1)`` and ``clip(omega, 0, 1)``.

Features and components leave the model for real (:meth:`GatedMLP.keep_inputs`,
:meth:`GatedMLP.keep_outputs`): the input layer and the gate vectors shrink together.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from verticalfs.nn.models import MLP


def gate_probability(p: torch.Tensor, sigma: float) -> torch.Tensor:
    """``Phi(p / sigma)``: the probability that the clipped Gaussian gate of mean ``p`` is open."""
    return 0.5 * (1.0 + torch.erf(p / (sigma * math.sqrt(2.0))))


def clipped(p: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
    """``max(0, min(1, p + noise))`` (deterministic ``clip(p, 0, 1)`` without noise)."""
    return torch.clamp(p if noise is None else p + noise, 0.0, 1.0)


class GatedMLP(nn.Module):
    """A bottom MLP with an input gate (``mu``) and an embedding gate (``omega``); either may be off.

    Parameters
    ----------
    mlp : MLP
    mu, omega : tensor or None
        Initial gate means (``None``: that gate is absent, i.e. always 1).
    sigma : float
        Standard deviation of the gate noise (0.5, STG's and our default).
    generator : torch.Generator
        Draws the gate noise (the party's own stream, seeded by the spec).
    """

    def __init__(self, mlp: MLP, mu: torch.Tensor | None, omega: torch.Tensor | None, sigma: float,
                 generator: torch.Generator) -> None:
        super().__init__()
        self.mlp = mlp
        self.mu = None if mu is None else nn.Parameter(mu.detach().clone().float())
        self.omega = None if omega is None else nn.Parameter(omega.detach().clone().float())
        self.sigma = float(sigma)
        self.generator = generator
        #: the gates of the last forward pass (for what is sent and for the per-epoch record)
        self.last_s: torch.Tensor | None = None
        self.last_q: torch.Tensor | None = None

    def _noise(self, p: torch.Tensor) -> torch.Tensor:
        return torch.randn(p.shape, generator=self.generator) * self.sigma

    def gates(self, train: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(s, q)``: sampled in training, deterministic otherwise."""
        s = None if self.mu is None else clipped(self.mu, self._noise(self.mu) if train else None)
        q = None if self.omega is None else clipped(self.omega, self._noise(self.omega) if train else None)
        return s, q

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, q = self.gates(self.training)
        self.last_s, self.last_q = s, q
        h = self.mlp(x if s is None else x * s)
        return h if q is None else h * q

    def regularizer(self, reduce: str = "mean") -> torch.Tensor:
        """``sum Phi(mu / sigma) + sum Phi(omega / sigma)`` (equation (4) without lambda), or with
        ``reduce="mean"`` that sum divided by the number of gates (STG's code takes the mean,
        ``torch.mean``; one mean over both kinds keeps equation (4)'s equal weight per gate)."""
        probs = [gate_probability(p, self.sigma) for p in (self.mu, self.omega) if p is not None and p.numel()]
        if not probs:
            return torch.zeros(())
        total = torch.cat(probs).sum()
        return total / sum(int(p.numel()) for p in probs) if reduce == "mean" else total

    # ----------------------------------------------------- the MLP's interface
    @property
    def input_layer(self) -> nn.Linear:
        return self.mlp.input_layer

    @property
    def output_layer(self) -> nn.Linear:
        return self.mlp.output_layer

    @property
    def n_inputs(self) -> int:
        return self.mlp.n_inputs

    @property
    def n_outputs(self) -> int:
        return self.mlp.n_outputs

    def keep_inputs(self, keep) -> None:
        keep = np.asarray(keep, dtype=np.int64)
        self.mlp.keep_inputs(keep)
        if self.mu is not None:
            self.mu = nn.Parameter(self.mu.detach()[torch.as_tensor(keep)].clone())

    def keep_outputs(self, keep) -> None:
        keep = np.asarray(keep, dtype=np.int64)
        self.mlp.keep_outputs(keep)
        if self.omega is not None:
            self.omega = nn.Parameter(self.omega.detach()[torch.as_tensor(keep)].clone())


def gini_init(gini: np.ndarray, scale: float) -> np.ndarray:
    """Algorithm 1 line 15: ``mu_j`` proportional to ``1 / G(f_j)``, the constant set so that the
    party's lowest-impurity feature starts at ``scale`` (our choice of the constant, which the
    paper leaves open; FedSDG-FS's default 0.5 is STG's neutral start). A feature of
    impurity 0 (it alone separates the classes on the training rows) gets ``scale``."""
    g = np.asarray(gini, dtype=np.float64)
    if g.size == 0:
        return g
    pos = g[g > 0]
    if pos.size == 0:
        return np.full(g.shape, float(scale))
    inv = np.where(g > 0, pos.min() / np.where(g > 0, g, 1.0), 1.0)
    return float(scale) * inv
