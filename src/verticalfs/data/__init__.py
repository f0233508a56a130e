"""Loading, partitioning, perturbing and preparing vertically partitioned data.

The names below are imported on first use (issue 53): the command line checks its options against
:mod:`verticalfs.data.layouts` and :mod:`verticalfs.data.registry` without loading pandas or
scikit-learn, so that an error before any work stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_LAZY = {
    "add_noise_features": "verticalfs.data.partition",
    "add_overlap": "verticalfs.data.partition",
    "load_assignment": "verticalfs.data.partition",
    "partition": "verticalfs.data.partition",
    "party_name": "verticalfs.data.partition",
    "DATASETS": "verticalfs.data.registry",
    "list_datasets": "verticalfs.data.registry",
    "load_dataset": "verticalfs.data.registry",
    "resolve_data_dir": "verticalfs.data.registry",
    "Table": "verticalfs.data.table",
    "AlignmentReport": "verticalfs.data.user",
    "load_party_files": "verticalfs.data.user",
    "LabelData": "verticalfs.data.vertical",
    "PartyBlock": "verticalfs.data.vertical",
    "PartyData": "verticalfs.data.vertical",
    "PreparedData": "verticalfs.data.vertical",
    "VerticalDataset": "verticalfs.data.vertical",
}

if TYPE_CHECKING:  # pragma: no cover
    from verticalfs.data.partition import add_noise_features, add_overlap, load_assignment, partition, party_name
    from verticalfs.data.registry import DATASETS, list_datasets, load_dataset, resolve_data_dir
    from verticalfs.data.table import Table
    from verticalfs.data.user import AlignmentReport, load_party_files
    from verticalfs.data.vertical import LabelData, PartyBlock, PartyData, PreparedData, VerticalDataset

__all__ = [
    "DATASETS",
    "AlignmentReport",
    "LabelData",
    "PartyBlock",
    "PartyData",
    "PreparedData",
    "Table",
    "VerticalDataset",
    "add_noise_features",
    "add_overlap",
    "list_datasets",
    "load_assignment",
    "load_dataset",
    "load_party_files",
    "partition",
    "party_name",
    "resolve_data_dir",
]


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'verticalfs.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
