"""Neural-network building blocks (bottom MLPs, top models, proximal operators)."""

from verticalfs.nn.models import MLP, BottomMLP, TopModel, init_weights, make_optimizer, seeded, train_scale
from verticalfs.nn.prox import (
           apply_prox,
           group_norms,
           nonzero_groups,
           prox_l21,
           prox_l21_,
           zero_groups,
)

__all__ = ["MLP", "BottomMLP", "TopModel", "init_weights", "make_optimizer", "seeded", "train_scale", "apply_prox",
           "group_norms", "nonzero_groups", "prox_l21", "prox_l21_", "zero_groups"]
