"""The SparseVFL benchmark's data (``datasets.py``): Table 1's rows and Table A1's columns."""

from __future__ import annotations

import pytest
from datasets import ASSIGNMENTS, EMBEDDING_DIM, TABLE1_SIZES, build

from verticalfs.exceptions import DataError


def test_wine_quality_is_table_1_and_table_a1(data_dir):
    data = build("wine_quality", 0, data_dir)
    assert tuple(data.n_samples(s) for s in ("train", "val", "test")) == tuple(TABLE1_SIZES["wine_quality"])
    assert sorted(c for p in data.parties for c in p.feature_names) == sorted(
        c for cols in ASSIGNMENTS["wine_quality"].values() for c in cols)
    assert EMBEDDING_DIM["wine_quality"] == 4


def test_unknown_data_set_is_named():
    with pytest.raises(DataError, match="'covertype'.*adult"):
        build("covertype", 0)
