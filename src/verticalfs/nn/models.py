"""Plain ``nn.Module`` building blocks: the parties' bottom MLPs and the active party's top model.

Both expose ``input_layer`` (the first :class:`torch.nn.Linear`, whose column ``j`` holds the
weights of input ``j``: the group that group lasso acts on) and can shrink for real:
:meth:`BottomMLP.keep_inputs` / :meth:`BottomMLP.keep_outputs` / :meth:`TopModel.keep_inputs`
replace the affected layers by smaller ones holding the surviving weights, so later compute and
messages shrink too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from verticalfs.exceptions import ConfigError

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU,
               "leaky_relu": nn.LeakyReLU, "elu": nn.ELU, "selu": nn.SELU}
#: weight initialisations of :func:`init_weights`
INITS = ("torch", "xavier")
_T = TypeVar("_T")


def _activation(name: str) -> nn.Module:
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ConfigError(f"unknown activation {name!r}; use one of {sorted(ACTIVATIONS)}") from None


def _sliced_linear(layer: nn.Linear, rows=None, cols=None) -> nn.Linear:
    W = layer.weight.data
    b = layer.bias.data if layer.bias is not None else None
    if rows is not None:
        W = W[rows]
        b = b[rows] if b is not None else None
    if cols is not None:
        W = W[:, cols]
    new = nn.Linear(W.shape[1], W.shape[0], bias=b is not None)
    new.weight.data.copy_(W)
    if b is not None:
        new.bias.data.copy_(b)
    return new


class MLP(nn.Module):
    """``Linear -> act -> ... -> Linear [-> out_activation]``; ``widths`` are the hidden sizes (may
    be empty); ``out_bias=False`` drops the bias of the output layer (SparseVFL's client model)."""

    def __init__(self, d_in: int, widths: Sequence[int], d_out: int, activation: str = "relu",
                 out_activation: str | None = None, out_bias: bool = True) -> None:
        super().__init__()
        if d_in < 1 or d_out < 1:
            raise ConfigError(f"MLP needs at least one input and one output, got {d_in} -> {d_out}")
        sizes = [d_in, *[int(w) for w in widths], d_out]
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            last = i == len(sizes) - 2
            layers.append(nn.Linear(sizes[i], sizes[i + 1], bias=out_bias or not last))
            if i < len(sizes) - 2:
                layers.append(_activation(activation))
        if out_activation and out_activation != "none":
            layers.append(_activation(out_activation))
        self.net = nn.Sequential(*layers)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    @property
    def linears(self) -> list[nn.Linear]:
        return [m for m in self.net if isinstance(m, nn.Linear)]

    @property
    def input_layer(self) -> nn.Linear:
        return self.linears[0]

    @property
    def output_layer(self) -> nn.Linear:
        return self.linears[-1]

    @property
    def n_inputs(self) -> int:
        return self.input_layer.in_features

    @property
    def n_outputs(self) -> int:
        return self.output_layer.out_features

    def _replace(self, old: nn.Linear, new: nn.Linear) -> None:
        for i, m in enumerate(self.net):
            if m is old:
                self.net[i] = new
                return
        raise RuntimeError("layer not found")  # pragma: no cover

    def keep_inputs(self, keep: Sequence[int] | np.ndarray) -> None:
        """Keep only input columns ``keep``: the input layer shrinks to ``len(keep)`` inputs."""
        keep = torch.as_tensor(np.asarray(keep, dtype=np.int64))
        self._replace(self.input_layer, _sliced_linear(self.input_layer, cols=keep))

    def keep_outputs(self, keep: Sequence[int] | np.ndarray) -> None:
        """Keep only outputs ``keep`` (e.g. significant embedding components)."""
        keep = torch.as_tensor(np.asarray(keep, dtype=np.int64))
        self._replace(self.output_layer, _sliced_linear(self.output_layer, rows=keep))


class BottomMLP(MLP):
    """A party's feature extractor: ``d_in`` features -> ``embedding_dim`` embedding components."""


class TopModel(MLP):
    """The active party's fusion model on the concatenated embeddings (linear if no hidden widths)."""


def init_weights(module: nn.Module, init: str = "torch") -> nn.Module:
    """``torch``: leave PyTorch's default initialisation; ``xavier``: Xavier-uniform weights and unit
    biases for every Linear layer (the initialisation of the public SparseVFL implementation, whose
    paper states none)."""
    if init == "torch":
        return module
    if init != "xavier":
        raise ConfigError(f"unknown initialisation {init!r}; use one of {INITS}")
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.ones_(m.bias)
    return module


_SEEDED = threading.RLock()


def seeded(seed: int, build: Callable[[], _T]) -> _T:
    """Call ``build()`` with torch's global RNG seeded by ``seed``, restoring the RNG afterwards (one
    thread at a time: a party serving two sessions builds their models in two threads)."""
    with _SEEDED, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def train_scale(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and standard deviation of each column of a party's training rows ``X``, for
    ``(x - mean) / sd`` (issue 40: the autoencoder baseline and SEFS, whose ReLU units died on
    min-max columns). No rows: mean 0; fewer than two rows or a constant column (float32 rounding
    leaves ~1e-8): sd 1, so such a column is only centred."""
    d = X.shape[1]
    mu = X.mean(0) if len(X) else torch.zeros(d)
    sd = X.std(0) if len(X) > 1 else torch.ones(d)
    return mu, torch.where(sd > 1e-6, sd, torch.ones_like(sd))


def make_optimizer(params: Iterable[Any], name: str, lr: float, weight_decay: float = 0.0,
                   momentum: float = 0.0) -> torch.optim.Optimizer:
    name = name.lower()
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay, momentum=momentum)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    raise ConfigError(f"unknown optimizer {name!r}; use one of ['adam', 'adamw', 'sgd']")


def load_shaped(module: nn.Module, state: dict[str, Any]) -> nn.Module:
    """Load ``state`` into ``module``, first replacing every Linear layer whose saved weight has
    another shape by one of the saved shape (models that shrank while training: removed inputs,
    removed embedding components)."""
    for name, sub in list(module.named_modules()):
        if not isinstance(sub, nn.Linear):
            continue
        w = state.get(f"{name}.weight")
        if w is None or tuple(w.shape) == tuple(sub.weight.shape):
            continue
        new = nn.Linear(int(w.shape[1]), int(w.shape[0]), bias=f"{name}.bias" in state)
        parent_name, _, child = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, child, new)
    module.load_state_dict(state)
    return module
