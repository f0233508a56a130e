"""The split-learning loop (Algorithm 2) with its hooks, mini-batch agreement, history and callbacks."""

from verticalfs.training.batches import BatchPlan, epoch_permutation
from verticalfs.training.history import Callback, History, ProgressCallback, derive_seed
from verticalfs.training.split import SplitRole, SplitSpec, SplitTrainer, TrainConfig, loss_fn

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
