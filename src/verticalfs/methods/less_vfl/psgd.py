"""Proximal SGD (P-SGD) for LESS-VFL stages 2 and 3, vectorised over candidate lambdas.

Algorithm 1 of less-vfl.md runs P-SGD on one model: a plain SGD step on a mini-batch followed by
``prox_{lambda, eta}`` on the input layer (:mod:`verticalfs.nn.prox`). The hyper-parameter search
of section 3 ("the server can explore the space of lambda_s without communication", "each party
can tune lambda_m without communication") needs the same optimisation for several lambdas from the
same starting point. :class:`StackedMLP` holds ``L`` copies of an :class:`~verticalfs.nn.MLP` as
stacked weight tensors ``(L, out, in)`` so all candidates train in one batched matrix product per
layer (no Python loop over candidates or rows); candidate ``i`` uses ``lams[i]``. Every candidate
sees the same mini-batches, so with ``L = 1`` this is exactly Algorithm 1's loop.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from verticalfs.nn.models import MLP
from verticalfs.nn.prox import group_norms, prox_l21


class StackedMLP:
    """``L`` independent copies of ``mlp``'s parameters, trained together."""

    def __init__(self, mlp: MLP, copies: int, center: torch.Tensor | None = None) -> None:
        self.copies = int(copies)
        self.layers: list[tuple] = []
        self.center = None if center is None else center.detach().to(torch.float32)
        for m in mlp.net:
            if isinstance(m, nn.Linear):
                W = m.weight.detach().unsqueeze(0).repeat(self.copies, 1, 1).clone().requires_grad_(True)
                b = m.bias.detach().unsqueeze(0).repeat(self.copies, 1).clone().requires_grad_(True)
                if self.center is not None and len(self.layers) == 0:
                    # centred parametrisation of the input layer: W (x - mu) + (b + W mu)
                    with torch.no_grad():
                        b += W.detach() @ self.center
                self.layers.append(("linear", W, b))
            else:
                self.layers.append(("fn", m))

    @property
    def params(self) -> list[torch.Tensor]:
        out = []
        for layer in self.layers:
            if layer[0] == "linear":
                out.extend(layer[1:])
        return out

    @property
    def input_weight(self) -> torch.Tensor:
        """The stacked input-layer weights ``(L, out, in)``: column ``j`` of copy ``i`` is a group."""
        return next(layer[1] for layer in self.layers if layer[0] == "linear")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` of shape ``(B, in)`` -> ``(L, B, out)``."""
        h = x if self.center is None else x - self.center
        for layer in self.layers:
            if layer[0] == "linear":
                _, W, b = layer
                if h.ndim == 2:
                    h = torch.einsum("bi,loi->lbo", h, W) + b[:, None, :]
                else:
                    h = torch.baddbmm(b[:, None, :], h, W.transpose(1, 2))
            else:
                h = layer[1](h)
        return h

    def export(self, mlp: MLP, i: int) -> MLP:
        """A copy of ``mlp`` holding copy ``i``'s weights."""
        new = copy.deepcopy(mlp)
        lins = [layer for layer in self.layers if layer[0] == "linear"]
        for k, (m, (_, W, b)) in enumerate(zip(new.linears, lins, strict=False)):
            m.weight.data.copy_(W.detach()[i])
            bias = b.detach()[i]
            if k == 0 and self.center is not None:
                bias = bias - W.detach()[i] @ self.center
            m.bias.data.copy_(bias)
        return new


def psgd(
    stack: StackedMLP,
    X: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    lams: Sequence[float],
    *,
    lr: float,
    epochs: int,
    batch_size: int,
    seed: int,
) -> list[float]:
    """Run P-SGD for ``epochs`` passes over ``X`` in shuffled mini-batches; return the loss per epoch.

    ``loss_fn(out, rows)`` maps the stacked output ``(L, B, out)`` of the rows ``rows`` to one
    loss per candidate ``(L,)``; candidates are independent, so the gradient of their sum is each
    candidate's own gradient. After every SGD step (step size ``lr`` = eta of less-vfl.md
    Algorithm 1) the input layer of candidate ``i`` goes through ``prox_{lams[i], lr}``.
    """
    lams = np.asarray(lams, dtype=np.float64)
    if lams.shape != (stack.copies,):
        raise ValueError(f"need one lambda per copy ({stack.copies}), got {lams.shape}")
    params = stack.params
    W0 = stack.input_weight
    n = int(X.shape[0])
    nb = max(1, -(-n // batch_size))
    rng = np.random.default_rng(seed)
    curve = []
    for _ in range(epochs):
        perm = torch.from_numpy(rng.permutation(n))
        total = torch.zeros(stack.copies)
        for b in range(nb):
            rows = perm[b * batch_size:(b + 1) * batch_size]
            losses = loss_fn(stack.forward(X[rows]), rows)
            grads = torch.autograd.grad(losses.sum(), params)
            with torch.no_grad():
                for p, g in zip(params, grads, strict=False):
                    p.sub_(lr * g)
                W0.copy_(prox_l21(W0, lams, lr))
            total += losses.detach() * len(rows)
        curve.append((total / n).tolist())
    return curve


def significant(stack: StackedMLP) -> list[np.ndarray]:
    """Per copy, the indices of the input groups that are not zero."""
    norms = group_norms(stack.input_weight)
    return [np.flatnonzero(row.numpy() > 0) for row in norms]


def psgd_stable(make_stack: Callable[[], StackedMLP], X: torch.Tensor, loss_fn, lams: Sequence[float], *,
                lr: float, epochs: int, batch_size: int, seed: int, retries: int = 4,
                blowup: float = 1e3):
    """:func:`psgd` with a divergence guard: if any candidate's epoch loss becomes non-finite or
    exceeds ``blowup`` x its first-epoch loss (plus one), start again from the same model with a
    quarter of the step size (at most ``retries`` times). The paper gives no step size; this keeps
    a fixed default usable on data whose pre-trained embeddings have very different scales.
    Returns ``(stack, curve, lr_used)``."""
    for attempt in range(retries + 1):
        stack = make_stack()
        curve = psgd(stack, X, loss_fn, lams, lr=lr, epochs=epochs, batch_size=batch_size, seed=seed)
        c = np.asarray(curve, dtype=np.float64)
        bad = c.size and (not np.all(np.isfinite(c)) or np.any(c.max(0) > blowup * (c[0] + 1.0)))
        params_ok = all(bool(torch.isfinite(p).all()) for p in stack.params)
        if not bad and params_ok:
            return stack, curve, lr
        if attempt < retries:
            lr = lr / 4.0
    return stack, curve, lr
