"""The VFL round loop (Algorithm 2), mini-batch agreement, history and callbacks."""

from verticalfs.training.batches import BatchPlan, epoch_permutation
from verticalfs.training.history import Callback, History, ProgressCallback, derive_seed
from verticalfs.training.vfl import TrainConfig, VFLTrainer, loss_fn

__all__ = [
    "BatchPlan",
    "Callback",
    "History",
    "ProgressCallback",
    "TrainConfig",
    "VFLTrainer",
    "derive_seed",
    "epoch_permutation",
    "loss_fn",
]
