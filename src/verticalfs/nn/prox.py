"""The proximal operator of the L2,1 (group lasso) penalty on input-layer weight groups.

less-vfl.md section 2 defines the regulariser on a model's input layer ``P`` as
``G(theta) = sum_j ||P^j||_2``, one group ``P^j`` per input ``j`` (for :class:`torch.nn.Linear`,
whose weight has shape ``(out, in)``, the group of input ``j`` is column ``j``). Section 3 gives
the closed form of its proximal operator with parameter ``lambda`` and step size ``eta``::

    prox(P^j) = P^j - lambda * eta * P^j / ||P^j||   if ||P^j|| > lambda * eta
              = 0                                      otherwise

i.e. ``P^j * max(0, 1 - lambda * eta / ||P^j||)``. Proximal SGD (P-SGD) applies it after every
gradient step. The functions work on a single weight ``(out, in)`` or on a stack of weights
``(L, out, in)`` (several candidate models trained at once, see
:mod:`verticalfs.methods.less_vfl.psgd`); groups are always the columns (the ``in`` axis).
The bias is not an input weight and is never part of a group.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["group_norms", "prox_l21", "prox_l21_", "apply_prox", "zero_groups", "nonzero_groups"]


def _weight(w) -> torch.Tensor:
    return w.weight if isinstance(w, nn.Linear) else w


def group_norms(weight: torch.Tensor | nn.Linear) -> torch.Tensor:
    """L2 norm of every input group: shape ``(in,)`` (or ``(L, in)`` for a stack)."""
    W = _weight(weight).detach()
    return torch.linalg.vector_norm(W, dim=-2)


def _threshold(lam, eta, W: torch.Tensor) -> torch.Tensor:
    """``lambda * eta`` as a tensor broadcastable to the group norms (scalar or one per stack item)."""
    t = torch.as_tensor(np.asarray(lam, dtype=np.float64) * np.asarray(eta, dtype=np.float64),
                        dtype=W.dtype)
    if t.ndim == 1 and W.ndim == 3:
        t = t[:, None]
    return t


def prox_l21(weight: torch.Tensor, lam, eta) -> torch.Tensor:
    """Functional closed form of ``prox_{lambda, eta}`` on the columns of ``weight``.

    ``lam`` and ``eta`` may be scalars or, for a stack ``(L, out, in)``, sequences of length ``L``.
    """
    W = weight.detach()
    norms = torch.linalg.vector_norm(W, dim=-2, keepdim=True)
    t = _threshold(lam, eta, W)
    if t.ndim == 2:  # (L, 1) -> (L, 1, 1)
        t = t[:, :, None]
    scale = torch.clamp(1.0 - t / torch.clamp(norms, min=torch.finfo(W.dtype).tiny), min=0.0)
    return W * scale


@torch.no_grad()
def prox_l21_(weight: torch.Tensor | nn.Linear, lam, eta) -> torch.Tensor:
    """In-place ``prox_{lambda, eta}`` on the input groups; returns the bool mask of zero groups."""
    W = _weight(weight)
    W.copy_(prox_l21(W, lam, eta))
    return zero_groups(W)


def apply_prox(layer: nn.Linear, lam: float, eta: float) -> np.ndarray:
    """Apply the operator to ``layer``'s weight in place; indices of the groups that are now zero."""
    return np.flatnonzero(prox_l21_(layer, lam, eta).numpy())


def zero_groups(weight: torch.Tensor | nn.Linear) -> torch.Tensor:
    """Bool mask of the input groups whose weights are all exactly zero."""
    W = _weight(weight).detach()
    return ~(W != 0).any(dim=-2)


def nonzero_groups(weight: torch.Tensor | nn.Linear) -> np.ndarray:
    """Indices of the input groups with at least one non-zero weight (the significant inputs)."""
    return np.flatnonzero((~zero_groups(weight)).numpy())
