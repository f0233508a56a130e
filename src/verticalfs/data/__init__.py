"""Loading, partitioning, perturbing and preparing vertically partitioned data."""

from verticalfs.data.partition import (
    add_noise_features,
    add_overlap,
    load_assignment,
    partition,
    party_name,
)
from verticalfs.data.registry import DATASETS, list_datasets, load_dataset, resolve_data_dir
from verticalfs.data.table import Table
from verticalfs.data.user import AlignmentReport, load_party_files
from verticalfs.data.vertical import (
    LabelData,
    PartyBlock,
    PartyData,
    PreparedData,
    VerticalDataset,
)

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
