"""A test-only method in one folder: two bottom models ("towers") per party with a pending graph
each, and a party-side L1 regulariser. It shows that a method needing a second model per party
and a local regulariser is added as one new folder with no change outside it: its messages, its
party role and its label-holder side all live here, on the core's seams (Role, SplitRole,
SplitTrainer, @message, the registry)."""

from tests.methods.example_two_tower.method import (
    TowerGradients,
    TowerRequest,
    TwoTower,
    TwoTowerRole,
)

__all__ = ["TowerGradients", "TowerRequest", "TwoTower", "TwoTowerRole"]
