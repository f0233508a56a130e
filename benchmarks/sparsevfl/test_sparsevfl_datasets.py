"""The SparseVFL benchmark's data (``datasets.py``): Table 1's rows and Table A1's columns."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from verticalfs.exceptions import DataError

# by its path, under a name of its own (a package named ``datasets`` may be installed too)
_spec = importlib.util.spec_from_file_location("sparsevfl_datasets", Path(__file__).resolve().parent / "datasets.py")
D = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(D)
ASSIGNMENTS, EMBEDDING_DIM, TABLE1_SIZES, build = D.ASSIGNMENTS, D.EMBEDDING_DIM, D.TABLE1_SIZES, D.build


def test_wine_quality_is_table_1_and_table_a1(data_dir):
    data = build("wine_quality", 0, data_dir)
    assert tuple(data.n_samples(s) for s in ("train", "val", "test")) == tuple(TABLE1_SIZES["wine_quality"])
    assert sorted(c for p in data.parties for c in p.feature_names) == sorted(
        c for cols in ASSIGNMENTS["wine_quality"].values() for c in cols)
    assert EMBEDDING_DIM["wine_quality"] == 4


def test_unknown_data_set_is_named():
    with pytest.raises(DataError, match="'covertype'.*adult"):
        build("covertype", 0)
