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
    patience: int = 0,
    rtol: float = 1e-2,
) -> list[float]:
    """Run P-SGD for at most ``epochs`` passes over ``X`` in shuffled mini-batches; return the loss
    per epoch run.

    ``patience > 0`` stops at a plateau ("until the training loss plateaus", less-vfl.md section
    3, Hyper-parameter tuning, which lets T1 and T2 be chosen this way): when, for every
    candidate, the set of non-zero input groups has not changed for ``patience`` epochs and the
    mean objective (loss + lambda G) of the last ``patience`` epochs is within ``rtol``
    (relative) of the ``patience`` epochs before. ``patience = 0`` runs all ``epochs`` (a fixed T).

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
    objective: list[np.ndarray] = []
    supports: list[torch.Tensor] = []
    lam_t = torch.as_tensor(lams, dtype=torch.float32)
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
        if patience > 0:
            norms = group_norms(W0)
            objective.append((total / n + lam_t * norms.sum(-1)).numpy().astype(np.float64))
            supports.append(norms > 0)
            k = int(patience)
            if len(objective) >= 2 * k and all(bool(torch.equal(supports[-1], sup)) for sup in supports[-k:]):
                new, old = np.mean(objective[-k:], 0), np.mean(objective[-2 * k:-k], 0)
                if np.all(np.abs(new - old) <= rtol * np.maximum(np.abs(old), 1e-12)):
                    break
    return curve


def significant(stack: StackedMLP) -> list[np.ndarray]:
    """Per copy, the indices of the input groups that are not zero."""
    norms = group_norms(stack.input_weight)
    return [np.flatnonzero(row.numpy() > 0) for row in norms]


def psgd_stable(make_stack: Callable[[], StackedMLP], X: torch.Tensor, loss_fn, lams: Sequence[float], *,
                lr: float, epochs: int, batch_size: int, seed: int, retries: int = 4,
                blowup: float = 1e3, patience: int = 0, rtol: float = 1e-2):
    """:func:`psgd` with a divergence guard: if any candidate's epoch loss becomes non-finite or
    exceeds ``blowup`` x its first-epoch loss (plus one), start again from the same model with a
    quarter of the step size (at most ``retries`` times). The paper gives no step size; this keeps
    a fixed default usable on data whose pre-trained embeddings have very different scales.
    Returns ``(stack, curve, lr_used)``."""
    for attempt in range(retries + 1):
        stack = make_stack()
        curve = psgd(stack, X, loss_fn, lams, lr=lr, epochs=epochs, batch_size=batch_size, seed=seed,
                     patience=patience, rtol=rtol)
        c = np.asarray(curve, dtype=np.float64)
        bad = c.size and (not np.all(np.isfinite(c)) or np.any(c.max(0) > blowup * (c[0] + 1.0)))
        params_ok = all(bool(torch.isfinite(p).all()) for p in stack.params)
        if not bad and params_ok:
            return stack, curve, lr
        if attempt < retries:
            lr = lr / 4.0
    return stack, curve, lr


def proximal_path(stack: StackedMLP, X: torch.Tensor, loss_fn, lambdas: Sequence[float], *,
                  max_iter: int = 100, tol: float = 5e-3, calm: int = 3) -> list[dict]:
    """Problems (4) / (5) of less-vfl.md solved to a plateau for each lambda of a path.

    Full-batch accelerated proximal gradient (FISTA, Beck and Teboulle 2009, with the adaptive
    restart of O'Donoghue and Candes 2015 and a backtracked step size), i.e. the issue's
    "full-batch P-SGD ... stopping on convergence", which section 3 of the paper allows ("the
    server can minimize its optimization problem locally until the training loss plateaus";
    likewise each party). Every iteration is a gradient step on all parameters followed by
    ``prox_{lambda, eta}`` on the input layer; ``eta`` is halved until the sufficient-decrease
    condition holds, so no step size is tuned per data set. The lambdas are solved in increasing
    order, each warm-started from the previous solution (the pathwise strategy of lasso
    solvers), and each stops when the objective ``f + lambda G`` changed by at most ``tol``
    (relative) with the same non-zero groups for ``calm`` iterations in a row, or after
    ``max_iter`` iterations.

    Why not a fixed count of mini-batch epochs: with a fixed step the total shrinkage a group can
    receive is ``lambda * eta * steps``, and the steps per epoch grow with the number of rows, so
    the same lambda removed every noise feature on phishing (30 batches per epoch) and none on
    digits (5 per epoch); solved to a plateau, lambda means the same on every data set.

    ``stack`` holds one copy (``L = 1``); ``loss_fn(out, rows)`` as for :func:`psgd`. Returns one
    dict per lambda, in the order of ``lambdas``: ``lambda``, ``iterations``, ``loss``, ``objective``, ``support`` and
    ``state`` (the parameters, to be put back with :func:`load_state`).
    """
    if stack.copies != 1:
        raise ValueError("proximal_path solves one model at a time (copies=1)")
    params = stack.params
    W0 = stack.input_weight
    k0 = next(i for i, p in enumerate(params) if p is W0)
    rows = torch.arange(int(X.shape[0]))

    def put(values) -> None:
        with torch.no_grad():
            for p, v in zip(params, values, strict=True):
                p.copy_(v)

    def f_grad(values):
        put(values)
        loss = loss_fn(stack.forward(X), rows)[0]
        grads = torch.autograd.grad(loss, params)
        return float(loss.detach()), [g.detach() for g in grads]

    def f_only(values) -> float:
        put(values)
        with torch.no_grad():
            return float(loss_fn(stack.forward(X), rows)[0])

    def penalty(values) -> float:
        return float(torch.linalg.vector_norm(values[k0], dim=-2).sum())

    def support(values) -> torch.Tensor:
        return torch.linalg.vector_norm(values[k0], dim=-2)[0] > 0

    x = [p.detach().clone() for p in params]
    eta = 1.0
    lambdas = [float(v) for v in lambdas]
    order = np.argsort(lambdas, kind="stable")
    out: list = [None] * len(lambdas)
    for j in order:
        lam = lambdas[j]
        x_prev, t, quiet, iters = [v.clone() for v in x], 1.0, 0, 0
        f_x = f_only(x)
        F = f_x + lam * penalty(x)
        sup = support(x)
        for it in range(1, int(max_iter) + 1):
            iters = it
            t_next = (1.0 + (1.0 + 4.0 * t * t) ** 0.5) / 2.0
            y = [a + ((t - 1.0) / t_next) * (a - b) for a, b in zip(x, x_prev, strict=True)]
            f_y, g_y = f_grad(y)
            while True:
                x_new = [a - eta * g for a, g in zip(y, g_y, strict=True)]
                x_new[k0] = prox_l21(x_new[k0], [lam], eta)
                f_new = f_only(x_new)
                d = [a - b for a, b in zip(x_new, y, strict=True)]
                bound = f_y + sum(float((g * e).sum()) for g, e in zip(g_y, d, strict=True)) \
                    + sum(float((e * e).sum()) for e in d) / (2.0 * eta)
                if f_new <= bound + 1e-12 * abs(f_y) or eta < 1e-8:
                    break
                eta *= 0.5
            F_new = f_new + lam * penalty(x_new)
            if F_new > F:  # adaptive restart: drop the momentum when the objective goes up
                t_next = 1.0
            sup_new = support(x_new)
            quiet = quiet + 1 if (abs(F - F_new) <= tol * max(abs(F_new), 1e-12)
                                  and bool(torch.equal(sup_new, sup))) else 0
            x_prev, x, t, F, sup, f_x = x, x_new, t_next, F_new, sup_new, f_new
            eta *= 1.1
            if quiet >= calm:
                break
        out[j] = {"lambda": lam, "iterations": iters, "loss": f_x, "objective": F,
                  "support": np.flatnonzero(sup.numpy()), "state": [v.clone() for v in x]}
    put(x)
    return out


def load_state(stack: StackedMLP, state: Sequence[torch.Tensor]) -> None:
    """Put the parameters of a :func:`proximal_path` point back into ``stack``."""
    with torch.no_grad():
        for p, v in zip(stack.params, state, strict=True):
            p.copy_(v)
