"""The training loops: split learning (Algorithm 2) with its hooks, the driver of round-based
protocols, mini-batch agreement, history, callbacks and checkpoints.

The party side of checkpoints (:mod:`verticalfs.persist`) sits below :mod:`verticalfs.party`, so
the loops, which drive party roles, import the party and nothing imports back.
"""

from __future__ import annotations

from verticalfs.training.batches import BatchPlan, epoch_permutation
from verticalfs.training.history import Callback, History, ProgressCallback, Run, derive_seed
from verticalfs.training.rounds import RoundDriver, RoundProtocol
from verticalfs.training.split import SplitRole, SplitSpec, SplitTrainer, TrainConfig, loss_fn

__all__ = [
    "BatchPlan",
    "Callback",
    "History",
    "ProgressCallback",
    "RoundDriver",
    "RoundProtocol",
    "Run",
    "SplitRole",
    "SplitSpec",
    "SplitTrainer",
    "TrainConfig",
    "derive_seed",
    "epoch_permutation",
    "loss_fn",
]
