"""The split-learning loop (Algorithm 2) with its hooks, mini-batch agreement, history and callbacks.

The names of :mod:`verticalfs.training.split` are imported on first use: the split loop sits above
:mod:`verticalfs.party` (its roles are party roles), while the party itself uses
:mod:`verticalfs.training.checkpoint`; importing that module must not import the loop.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from verticalfs.training.batches import BatchPlan, epoch_permutation
from verticalfs.training.history import Callback, History, ProgressCallback, derive_seed

if TYPE_CHECKING:  # pragma: no cover
    from verticalfs.training.split import SplitRole, SplitSpec, SplitTrainer, TrainConfig, loss_fn

_SPLIT = ("SplitRole", "SplitSpec", "SplitTrainer", "TrainConfig", "loss_fn")

__all__ = [
    "BatchPlan",
    "Callback",
    "History",
    "ProgressCallback",
    "SplitRole",
    "SplitSpec",
    "SplitTrainer",
    "TrainConfig",
    "derive_seed",
    "epoch_permutation",
    "loss_fn",
]


def __getattr__(name: str) -> Any:
    if name not in _SPLIT:
        raise AttributeError(f"module 'verticalfs.training' has no attribute {name!r}")
    value = getattr(importlib.import_module("verticalfs.training.split"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
