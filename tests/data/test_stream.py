"""A party's table read in pieces (issue 39): the streamed path prepares exactly what the in-memory
path prepares, from Parquet, a folder of Parquet files and CSV, into memory-mapped matrices."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyarrow")

from verticalfs.data.stream import StreamedTable, fit_streamed  # noqa: E402
from verticalfs.data.vertical import SPLITS  # noqa: E402
from verticalfs.deploy.party import Align, DeployedParty  # noqa: E402
from verticalfs.exceptions import DataError  # noqa: E402


def _table(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"id": [f"c{i:05d}" for i in rng.permutation(n)],
                       "income": rng.lognormal(3, 1, n), "age": rng.integers(18, 90, n).astype(float),
                       "plan": rng.choice(["gold", "basic", "free"], n),
                       "calls": rng.poisson(30, n).astype(float)})
    df.loc[rng.random(n) < 0.05, "income"] = np.nan
    df.loc[rng.random(n) < 0.05, "plan"] = None
    return df


def _align(party, ids, codes, scaling="minmax", impute="median"):
    party.handle("active", Align(ids=list(ids), split=codes, scaling=scaling, impute=impute), None, None)
    return {s: party.data.X_all(s).numpy() for s in SPLITS}, party.preprocessor


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    df = _table()
    df.to_csv(root / "t.csv", index=False)
    df.to_parquet(root / "t.parquet", index=False)
    (root / "parts").mkdir()
    for k, part in enumerate([df.iloc[:1000], df.iloc[1000:2000], df.iloc[2000:]]):  # a folder, read in name order
        part.to_parquet(root / "parts" / f"part-{k}.parquet", index=False)
    rng = np.random.default_rng(1)
    ids = rng.choice(df["id"].to_numpy(), 2000, replace=False)  # the label holder's order
    codes = rng.choice(3, 2000, p=[0.7, 0.1, 0.2]).astype(np.int64)
    return root, ids, codes


@pytest.mark.parametrize("source", ["t.parquet", "parts", "t.csv"])
@pytest.mark.parametrize("scaling", ["minmax", "robust", "standard"])
@pytest.mark.parametrize("columns_at_once", [None, 1, 3])
def test_streamed_and_in_memory_prepare_the_same_matrices(files, source, scaling, columns_at_once, monkeypatch):
    """``columns_at_once``: the transform pass reads that many columns per pass over the file (its
    budget of decoded bytes made small: 1 puts the one-hot column alone, 3 gives non-contiguous
    prepared columns), and writes 7 rows between two releases of their pages."""
    import verticalfs.data.stream as stream

    root, ids, codes = files
    if columns_at_once is not None:
        monkeypatch.setattr(stream, "DECODED_BYTES", 10 * 3000 * columns_at_once)  # rows of the largest row group
        monkeypatch.setattr(stream, "WRITE_ROWS", 7)
    mem = DeployedParty("telecom", root / "t.csv", categorical=["plan"], stream=False)
    big = DeployedParty("telecom", root / source, categorical=["plan"], stream=True)
    assert big.table is not None and mem.table is None
    assert sorted(big.ids) == sorted(mem.ids)
    X_mem, pp_mem = _align(mem, ids, codes, scaling=scaling)
    X_big, pp_big = _align(big, ids, codes, scaling=scaling)
    assert pp_big.feature_names == pp_mem.feature_names and pp_big.categories == pp_mem.categories
    assert pp_big.fill == pp_mem.fill
    for s in SPLITS:
        if len(X_big[s]):  # the tensor is the memory-mapped file, not a copy in memory
            f = next(big.table.work_dir.glob(f"aligned-*/telecom-{s}.f32"))
            assert f.stat().st_size == X_big[s].nbytes and str(f) in open("/proc/self/maps").read()
        if scaling == "standard":  # a column's sums in another order (module docstring): last bits
            np.testing.assert_allclose(X_big[s], X_mem[s], rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(pp_big.offset, pp_mem.offset, rtol=1e-12)
        else:
            assert np.array_equal(X_big[s], X_mem[s]), s  # byte for byte
            assert pp_big.scale == pp_mem.scale and pp_big.offset == pp_mem.offset


def test_a_second_alignment_replaces_the_first_and_removes_its_files(files):
    root, ids, codes = files
    party = DeployedParty("telecom", root / "t.parquet", categorical=["plan"], stream=True)
    X1, _ = _align(party, ids, codes)
    first = sorted(party.table.work_dir.glob("aligned-*"))
    X2, _ = _align(party, ids[:500], codes[:500])
    second = sorted(party.table.work_dir.glob("aligned-*"))
    assert len(first) == len(second) == 1 and first != second  # the first alignment's folder is gone
    assert len(X2["train"]) == int((codes[:500] == 0).sum())
    work = party.table.work_dir
    del party
    import gc

    gc.collect()
    assert not work.exists()  # the working folder goes with the party


def test_constant_warning_and_bad_files(tmp_path):
    df = pd.DataFrame({"id": ["a", "b", "c", "d"], "x": [1.0, 1.0, 1.0, 1.0], "y": [2.0, 2.0, np.nan, 2.0]})
    df.to_parquet(tmp_path / "c.parquet", index=False)
    t = StreamedTable("p", tmp_path / "c.parquet")
    pp = fit_streamed(t, np.arange(4), ["x", "y"], [], scaling="minmax", impute="median")
    assert len(pp.warnings) == 1 and "are constant on the training rows" in pp.warnings[0]
    df.assign(id=["a", "a", "c", "d"]).to_parquet(tmp_path / "d.parquet", index=False)
    with pytest.raises(DataError, match="ids repeat in column 'id'.*'a'"):
        StreamedTable("p", tmp_path / "d.parquet").ids()
    with pytest.raises(DataError, match="no id column 'key'"):
        StreamedTable("p", tmp_path / "c.parquet", id_column="key")


def test_a_subset_of_columns_prepares_its_share_of_the_block_to_the_bit():
    """PartyPreprocessor.subset: the streamed transform's groups of columns (data/stream.py)."""
    from verticalfs.data.preprocess import PartyPreprocessor

    df = _table(500).drop(columns="id")
    for scaling in ("minmax", "standard", "robust", "none"):
        pp = PartyPreprocessor.fit("telecom", df, ["plan"], scaling=scaling, impute="median")
        full = pp.transform(df)
        for cols in (["income"], ["plan"], ["calls", "plan"], ["income", "age", "plan"], list(df.columns)):
            sub, at = pp.subset(cols)
            assert [pp.feature_names[j] for j in at] == sub.feature_names
            assert np.array_equal(sub.transform(df[cols]), full[:, at]), (scaling, cols)
        with pytest.raises(KeyError, match="nope"):
            pp.subset(["nope"])


def test_a_streamed_party_keeps_its_selected_columns_in_memory_mapped_files(files):
    """A selection method's KeepFeatures on a streamed party: the kept columns go to memory-mapped
    files beside the prepared ones (a copy in memory was 300 MB at 3M rows x 25 columns), with the
    values of the in-memory selection; a later selection replaces the earlier file."""
    root, ids, codes = files
    party = DeployedParty("telecom", root / "t.parquet", categorical=["plan"], stream=True)
    _align(party, ids, codes)
    data = party.data
    full = {s: data.X_all(s).numpy().copy() for s in SPLITS}
    data.keep([0, 2, 5])
    first = sorted(party.table.work_dir.glob("aligned-*/telecom-*-kept-*.f32"))
    assert len(first) == sum(1 for s in SPLITS if len(full[s]))
    maps = open("/proc/self/maps").read()
    for s in SPLITS:
        assert np.array_equal(data.X(s).numpy(), full[s][:, [0, 2, 5]]), s
        if len(full[s]):
            assert any(str(f) in maps for f in first if f"-{s}-kept-" in f.name)
    data.keep_positions([2, 0])  # features 5 and 0, in that order
    second = sorted(party.table.work_dir.glob("aligned-*/telecom-*-kept-*.f32"))
    assert len(second) == len(first) and not set(first) & set(second)  # the first selection's files are gone
    for s in SPLITS:
        assert np.array_equal(data.X(s).numpy(), full[s][:, [5, 0]]), s


@pytest.mark.parametrize("folios", [1, 3, 64])
def test_rows_read_from_a_memory_map_in_pieces_are_the_rows(tmp_path, monkeypatch, folios):
    """``read_rows`` reads in pieces of rows within a few 2 MB regions of the file (its pages
    released after each): any rows (unsorted, repeated, sequential, none) in the order asked."""
    from verticalfs.data import stream

    monkeypatch.setattr(stream, "READ_FOLIOS", folios)
    rng = np.random.default_rng(0)
    a = rng.normal(size=(60_000, 40)).astype(np.float32)  # 9.6 MB: 5 regions of 2 MB
    m = np.memmap(tmp_path / "m.f32", dtype=np.float32, mode="w+", shape=a.shape)
    m[:] = a
    m.flush()
    for rows in (rng.integers(0, len(a), 5000), np.arange(1000, 40_000), np.array([59_999, 0, 0, 31_000]),
                 np.zeros(0, dtype=np.int64)):
        got = stream.read_rows(m, rows)
        assert got.dtype == np.float32 and np.array_equal(got, a[rows])
