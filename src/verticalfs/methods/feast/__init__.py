"""FEAST (feast.md) and its filter baselines: ``feast``, ``cfeast``, ``mi``, ``random``, ``raw``.

FEAST sends the labels of its sampled rows to every feature party: see :mod:`.method`.
"""

from verticalfs.methods.feast.baselines import CFeast, MutualInfo, RandomSelect, Raw
from verticalfs.methods.feast.method import Feast, FeastParams

__all__ = ["CFeast", "Feast", "FeastParams", "MutualInfo", "RandomSelect", "Raw"]
