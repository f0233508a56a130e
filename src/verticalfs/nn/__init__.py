"""Neural-network building blocks (bottom MLPs, top models, proximal operators)."""

from verticalfs.nn.models import MLP, BottomMLP, TopModel, make_optimizer, seeded

__all__ = ["MLP", "BottomMLP", "TopModel", "make_optimizer", "seeded"]
