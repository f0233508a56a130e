"""Building a run's data by name or from a table: load, partition, perturb, split, preprocess.

:func:`verticalfs.build_data` (the same function) is the entry point; the data layer's paper
layouts (:mod:`verticalfs.data.layouts`) build on it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from verticalfs.data.partition import add_noise_features, add_overlap, load_assignment, partition
from verticalfs.data.table import Table
from verticalfs.data.vertical import PreparedData, VerticalDataset


def build_data(
    dataset: str | Table | VerticalDataset,
    *,
    parties: int = 3,
    noise: float | Sequence[float] = 0.0,
    overlap: int | Sequence[int] = 0,
    partition_strategy: str = "random",
    assignment: Mapping[str, Sequence[str]] | str | Path | None = None,
    seed: int = 0,
    data_dir: str | Path | None = None,
    scaling: str = "minmax",
    test_size: float = 0.2,
    val_size: float = 0.1,
    impute: str = "auto",
    fold: tuple[int, int] | None = None,
) -> PreparedData:
    """Load (by name), partition, perturb, split and preprocess a data set.

    Parameters
    ----------
    dataset : str, Table or VerticalDataset
        A registered name (see ``verticalfs datasets``), a loaded table, or an already
        partitioned data set (e.g. from :func:`verticalfs.data.load_party_files`).
    parties : int
        Passive (feature-holding) parties for an even column split.
    noise : float or list of float
        Gaussian noise features as a fraction of each party's columns (less-vfl.md section 5).
    overlap : int or list of int
        Columns of other parties copied into each party (feast.md section 5.1).
    partition_strategy : {"random", "contiguous"}
    assignment : mapping or path, optional
        Explicit columns per party (a dict, or a TOML/JSON file).
    seed : int
        Seeds the partition, the noise and the split.
    impute : {"auto", "median", "none"}
        Missing numeric values (see :meth:`VerticalDataset.prepare`).
    fold : (k, K), optional
        Cross-validation: test on fold ``k`` of ``K`` (see :meth:`VerticalDataset.prepare`).
    """
    if isinstance(dataset, VerticalDataset):
        vds = dataset
    else:
        if isinstance(dataset, str):
            from verticalfs.data.registry import load_dataset

            table = load_dataset(dataset, data_dir=data_dir, seed=seed)
        else:
            table = dataset
        if isinstance(assignment, (str, Path)):
            assignment = load_assignment(assignment)
        vds = partition(table, parties, strategy=partition_strategy, seed=seed, assignment=assignment)
    if np.any(np.asarray(noise, dtype=float) > 0):
        vds = add_noise_features(vds, noise, seed=seed)
    if np.any(np.asarray(overlap) > 0):
        vds = add_overlap(vds, overlap, seed=seed)
    return vds.prepare(seed=seed, test_size=test_size, val_size=val_size, scaling=scaling, impute=impute, fold=fold)
