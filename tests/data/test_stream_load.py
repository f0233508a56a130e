"""The in-process path over large party files (issue 55, item 5): `load_party_files` reads files from
`stream_above_mb` in pieces (data/stream.py), the blocks' rows staying in the files until they are
prepared into memory-mapped matrices; the data set, report, prepared rows and a run are those of the
in-memory path, byte for byte."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyarrow")

import verticalfs  # noqa: E402
from verticalfs.data.user import load_party_files  # noqa: E402
from verticalfs.exceptions import DataError  # noqa: E402

PARTIES = ("bank", "telecom", "insurer")


def _files(tmp_path, n=1500, seed=0):
    rng = np.random.default_rng(seed)
    ids = np.array([f"c{i}" for i in range(n)])
    out = {}
    for k, p in enumerate(PARTIES):
        o = rng.permutation(n)[: n - 40 * k]  # each file lacks some ids, in its own order
        df = pd.DataFrame({"id": ids[o], f"{p}_a": rng.normal(size=len(o)),
                           f"{p}_b": rng.choice(["u", "v", None], len(o)), f"{p}_c": rng.exponential(size=len(o))})
        df.loc[rng.random(len(o)) < 0.05, f"{p}_a"] = np.nan
        if p == "bank":
            df["default"] = (df[f"{p}_c"] + rng.normal(size=len(o)) > 1).astype(int)
        out[p] = tmp_path / f"{p}.parquet"
        df.to_parquet(out[p], index=False)
    return out


def test_large_files_give_the_in_memory_data_set_prepared_rows_and_run(tmp_path):
    files = _files(tmp_path)
    kw = {"label_party": "bank", "label_column": "default", "categorical": "auto", "impute": "median"}
    mem, rep_mem = load_party_files(files, stream_above_mb=None, **kw)
    big, rep_big = load_party_files(files, stream_above_mb=0, **kw)  # every file "large"
    assert all(hasattr(b, "prepare") for b in big.blocks) and not any(hasattr(b, "prepare") for b in mem.blocks)
    assert rep_big.summary() == rep_mem.summary() and rep_big.missing == rep_mem.missing
    assert rep_big.categorical == rep_mem.categorical and rep_big.warnings == rep_mem.warnings
    assert np.array_equal(big.ids, mem.ids) and np.array_equal(big.y, mem.y) and big.task == mem.task
    a, b = verticalfs.build_data(mem, seed=0), verticalfs.build_data(big, seed=0)
    for x, y in zip(a.parties, b.parties, strict=True):
        assert x.feature_names == y.feature_names
        for s in x.X:
            assert isinstance(y.X[s], np.memmap) and np.array_equal(x.X[s], np.asarray(y.X[s]))
    r1 = verticalfs.run("vfl", a, seed=0, params={"epochs": 2})
    r2 = verticalfs.run("vfl", b, seed=0, params={"epochs": 2})
    assert r1.metrics == r2.metrics and r1.history == r2.history


def test_large_files_are_checked_as_the_in_memory_path_checks(tmp_path):
    files = _files(tmp_path, n=300)
    with pytest.raises(DataError, match="label column 'nope'"):
        load_party_files(files, label_party="bank", label_column="nope", categorical="auto", stream_above_mb=0)
    with pytest.raises(DataError, match="column 'bank_b' .* is not numeric"):
        load_party_files(files, label_party="bank", label_column="default", stream_above_mb=0)
    with pytest.raises(DataError, match="strip_ids"):
        load_party_files(files, label_party="bank", label_column="default", categorical="auto", strip_ids=True,
                         stream_above_mb=0)
    df = pd.read_parquet(files["telecom"])
    df.loc[3, "telecom_c"] = np.inf
    df.to_parquet(files["telecom"], index=False)
    vds, _ = load_party_files(files, label_party="bank", label_column="default", categorical="auto",
                              impute="median", stream_above_mb=0)
    with pytest.raises(DataError, match="infinite values"):
        verticalfs.build_data(vds, seed=0)
