"""The ray engine of a party (verticalfs.engine.ray) on a real Ray instance with two worker processes:
the same ids, prepared rows and PSI as the local engines; a worker killed during the preparation is
retried by Ray and the prepared rows are the same. Slow: Ray starts its processes (~10-30 s)."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("ray")
pytest.importorskip("pyarrow")

from verticalfs.data.stream import SplicedMemmap, splice_pad  # noqa: E402
from verticalfs.data.vertical import SPLITS  # noqa: E402
from verticalfs.deploy.party import Align, DeployedParty  # noqa: E402
from verticalfs.engine import ray as engine  # noqa: E402
from verticalfs.exceptions import DataError  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray_engine")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A Ray instance of this process with two worker CPUs, on 127.0.0.1; the fault hook's folder set
    (inactive until a test makes it)."""
    fault = tmp_path_factory.mktemp("fault") / "hook"
    os.environ[engine.FAULT_DIR_ENV] = str(fault)  # inherited by the workers Ray starts
    engine.connect(num_cpus=2)
    yield fault
    engine.disconnect()
    os.environ.pop(engine.FAULT_DIR_ENV, None)


def _table(root: Path, n: int = 3000, files: int = 3, seed: int = 0,
           extreme: bool = False) -> tuple[Path, Path, pd.DataFrame]:
    """A party's table as a folder of ``files`` Parquet files and as one file (the local engines');
    ``extreme``: a value of column ``d`` that squashes the others under min-max scaling."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"id": [f"c{i}" for i in rng.permutation(n)], "a": rng.normal(2, 3, n),
                       "b": rng.integers(0, 6, n).astype(float), "c": rng.choice(["x", "y", "z"], n),
                       "d": rng.exponential(1.0, n)})
    if extreme:
        df.loc[:, "d"] = np.where(np.arange(n) % 97 == 0, 1e9, df["d"])  # (in the training rows too)
    df.loc[rng.random(n) < 0.05, "a"] = np.nan
    df.loc[rng.random(n) < 0.05, "c"] = None
    folder = root / "table"
    folder.mkdir()
    for k, part in enumerate(np.array_split(np.arange(n), files)):
        df.iloc[part].to_parquet(folder / f"part-{k}.parquet", index=False)
    one = root / "table.parquet"
    df.to_parquet(one, index=False)
    return folder, one, df


def _align_msg(df: pd.DataFrame, scaling: str, impute: str, seed: int = 1) -> Align:
    rng = np.random.default_rng(seed)
    ids = df["id"].to_numpy(dtype=str)[rng.permutation(len(df))[: int(len(df) * 0.8)]]
    return Align(ids=ids, split=rng.integers(0, 3, len(ids)), scaling=scaling, impute=impute)


def _prepared(party: DeployedParty, msg: Align) -> dict[str, np.ndarray]:
    party._align(msg)
    return {s: party.data.X_all(s).numpy().copy() for s in SPLITS}


@pytest.mark.parametrize("scaling,impute,exact", [("minmax", "median", True), ("robust", "most-frequent", True),
                                                  ("standard", "mean", False)])
def test_prepared_rows_are_the_local_engines(cluster, tmp_path, scaling, impute, exact):
    folder, one, df = _table(tmp_path)
    ray_party = DeployedParty("telecom", folder, categorical=["c"], engine="ray")
    assert ray_party.table.n_rows == 3000 and isinstance(ray_party.ids, np.memmap)
    memory = DeployedParty("telecom", one, categorical=["c"], stream=False)
    streamed = DeployedParty("telecom", one, categorical=["c"], stream=True)
    msg = _align_msg(df, scaling, impute)
    got, ref, ref2 = _prepared(ray_party, msg), _prepared(memory, msg), _prepared(streamed, msg)
    assert ray_party.data.feature_names == memory.data.feature_names
    for s in SPLITS:
        assert got[s].shape == ref[s].shape and got[s].shape[0] > 0
        if exact:  # min/max, median, quartiles (every block sends its values here), counts: to the bit
            assert np.array_equal(got[s], ref[s]) and np.array_equal(got[s], ref2[s])
        else:  # mean and variance merged from the blocks: the last bits may differ
            np.testing.assert_allclose(got[s], ref[s], rtol=1e-6, atol=1e-6)
    assert ray_party.preprocessor.categories == memory.preprocessor.categories
    assert ray_party.table.last_pass["approximate"] == []
    del ray_party


def test_ranges_of_the_matrices_written_by_many_writers_from_files_of_different_types(cluster, tmp_path):
    """The transform's writers each prepare one contiguous range of a split's matrix from every
    unit's rows: with many ranges (a range's rows from several units, a split cut in several
    ranges) and files whose column types differ (integers in one, floats in another), the rows are
    the in-memory party's; so are its warnings (those of squashed columns are made while the
    writers run)."""
    folder, one, df = _table(tmp_path, n=2000, files=4, extreme=True)
    part = folder / "part-1.parquet"
    pd.read_parquet(part).astype({"b": "int64"}).to_parquet(part, index=False)  # (the others: float64)
    memory = DeployedParty("telecom", one, categorical=["c"], stream=False)
    party = DeployedParty("telecom", folder, categorical=["c"], engine="ray")
    party.table.pieces = 11
    msg = _align_msg(df, "minmax", "median")
    got, ref = _prepared(party, msg), _prepared(memory, msg)
    assert party.table.last_pass["writer"] == "ranges"
    assert len(party.table.tasks) == 4 + 11  # the fit's units, then the writers
    for s in SPLITS:
        assert got[s].shape[0] > 0 and np.array_equal(got[s], ref[s])
    assert party.preprocessor.warnings == [w.replace(str(one), str(folder)) for w in memory.preprocessor.warnings]
    assert any("extreme values" in w and "'d'" in w for w in party.preprocessor.warnings)


def test_ids_sorted_in_a_memory_mapped_file_and_read_through_a_uri(cluster, tmp_path):
    folder, _, df = _table(tmp_path, n=500, files=2)
    t = engine.RayTable("telecom", folder.resolve().as_uri())  # file://...: pyarrow's filesystems
    try:
        ids = t.id_lookup()
        assert len(ids) == 500 and ids.width == max(len(i) for i in df["id"])
        assert ids.sorted.tolist() == sorted(i.encode() for i in df["id"])
        q = np.array(["c7", "nobody", "c499", "c0"])
        pos = ids.positions(q)
        assert pos[1] == -1 and all(ids.sorted[p].decode() == i for p, i in zip(pos, q, strict=True) if p >= 0)
    finally:
        t.close()
    assert not t.work_dir.exists()


def test_bad_ids_are_refused_before_anyone_connects(cluster, tmp_path):
    folder = tmp_path / "dup"
    folder.mkdir()
    pd.DataFrame({"id": ["a", "b"], "v": [1.0, 2.0]}).to_parquet(folder / "p0.parquet", index=False)
    pd.DataFrame({"id": ["c", "a"], "v": [3.0, 4.0]}).to_parquet(folder / "p1.parquet", index=False)
    with pytest.raises(DataError, match=r"ids repeat .*\['a'\]"):
        DeployedParty("telecom", folder, engine="ray")
    pd.DataFrame({"id": ["d", None], "v": [1.0, np.inf]}).to_parquet(folder / "p1.parquet", index=False)
    with pytest.raises(DataError, match="infinite values"):
        DeployedParty("telecom", folder, engine="ray")
    pd.DataFrame({"id": ["d", None], "v": [1.0, 2.0]}).to_parquet(folder / "p1.parquet", index=False)
    with pytest.raises(DataError, match="1 rows .* have no id"):
        DeployedParty("telecom", folder, engine="ray")


class _Direct:
    """The label holder's proxy to a party's PSI answers in this process (the messages' objects)."""

    name = "telecom"

    def __init__(self, party) -> None:
        self.party = party

    def request(self, msg, at, expect=None):
        reply = self.party.reply(msg)
        assert expect is None or isinstance(reply, expect)
        return reply


def test_psi_blinding_on_ray_tasks_finds_the_same_intersection(cluster, tmp_path):
    pytest.importorskip("rbcl")
    from verticalfs.psi import PsiParty, intersect_with

    folder, _, df = _table(tmp_path, n=2000, files=2)
    party = DeployedParty("telecom", folder, categorical=["c"], engine="ray")
    assert party.psi_options == {"workers": 2, "parallel": "ray"}  # each session's PsiParty: on Ray tasks
    holder = np.array([f"c{i}" for i in range(1000, 3000)])  # c1000..c1999 are the party's
    idx = intersect_with(_Direct(PsiParty(party.ids, **party.psi_options)), holder, chunk=700)
    assert holder[idx].tolist() == [f"c{i}" for i in range(1000, 2000)]
    threads = intersect_with(_Direct(PsiParty(df["id"].to_numpy(dtype=str))), holder, chunk=700)
    assert np.array_equal(idx, threads)


def test_a_file_per_range_spliced_into_one_map_per_split(cluster, tmp_path):
    """Where the writers' ranges start on pages of the matrix (beyond a few thousand rows), each
    writer writes a file of its own and each split's files are spliced into one memory map: the rows
    are the in-memory party's, and a second alignment's files replace the first's."""
    folder, one, df = _table(tmp_path, n=24_000, files=4)
    memory = DeployedParty("telecom", one, categorical=["c"], stream=False)
    party = DeployedParty("telecom", folder, categorical=["c"], engine="ray")
    party.table.pieces = 6
    for seed in (1, 2):
        msg = _align_msg(df, "minmax", "median", seed=seed)
        got, ref = _prepared(party, msg), _prepared(memory, msg)
        assert party.table.last_pass["writer"] == "ranges" and party.table.last_pass["shards"] is True
        d = len(party.data.feature_names)
        for s in SPLITS:
            assert got[s].shape[0] > 2048 and np.array_equal(got[s], ref[s])
            m = party.data._X_src[s]
            assert isinstance(m, SplicedMemmap)
            out = Path(m.filename).parent
            files = {int(f.name.split(".")[1]): f for f in out.glob(f"telecom-{s}.*.f32")}
            assert not (out / f"telecom-{s}.f32").exists() and min(files) == 0 and len(files) > 1
            # (exactly this alignment's rows: an earlier alignment's files were removed)
            assert sum(f.stat().st_size - splice_pad(lo * d * 4) for lo, f in files.items()) == len(ref[s]) * d * 4
    party.table.shards = False  # (as 0.8.1: every writer into its split's one file)
    assert np.array_equal(_prepared(party, msg)["train"], ref["train"]) and party.table.last_pass["shards"] is False


@pytest.mark.parametrize("n", [3000, 24_000])  # (ranges in one file per split; a file per range)
def test_a_worker_killed_during_the_preparation_is_retried_with_the_same_result(cluster, tmp_path, n):
    folder, _, df = _table(tmp_path, n=n, files=3)
    party = DeployedParty("telecom", folder, categorical=["c"], engine="ray")
    msg = _align_msg(df, "minmax", "median")
    ref = _prepared(party, msg)
    assert party.table.last_pass["shards"] is (n > 3000)
    shutil.rmtree(cluster, ignore_errors=True)  # (an earlier case's hook)
    cluster.mkdir()  # the hook: the first transform task writes its pid and waits
    out: dict = {}
    worker = threading.Thread(target=lambda: out.update(got=_prepared(party, msg)))
    worker.start()
    pid_file, t = cluster / "pid", time.monotonic()
    while not pid_file.exists() and time.monotonic() - t < 180:
        time.sleep(0.1)
    assert pid_file.exists(), "no transform task reached the hook"
    time.sleep(0.2)
    pid = int(pid_file.read_text())
    (cluster / "killed").touch()
    os.kill(pid, signal.SIGKILL)  # a Ray worker process, mid-task
    worker.join(300)
    assert not worker.is_alive() and "got" in out
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # it is gone: its block was prepared again by another worker
    for s in SPLITS:
        assert np.array_equal(out["got"][s], ref[s])
    shutil.rmtree(cluster)  # (the hook off for the tests after it)


def test_the_transform_reading_again_and_the_fits_handoff_prepare_the_same_rows(cluster, tmp_path):
    """The fit leaves each unit's aligned rows in the object store (the default where they fit in
    half of it); without it the transform reads the table again: the same rows. A second alignment
    on the same table reuses each unit's ranks among the ids (kept in the working folder) and is the
    local engine's too."""
    folder, one, df = _table(tmp_path, n=2500, files=2)
    memory = DeployedParty("telecom", one, categorical=["c"], stream=False)
    parties = [DeployedParty("telecom", folder, categorical=["c"], engine="ray") for _ in range(3)]
    parties[1].table.handoff = False
    parties[2].table.writer = "units"  # (verticalfs 0.8's writes of the handed-off rows, kept to compare)
    for seed in (1, 2):
        msg = _align_msg(df, "robust", "most-frequent", seed=seed)
        ref = _prepared(memory, msg)
        for p in parties:
            got = _prepared(p, msg)
            assert all(np.array_equal(got[s], ref[s]) for s in SPLITS)
            assert p.table.last_pass["units"] == 2 and p.table.last_pass["fit_cpu_s"] > 0
            assert p.table.last_pass["handoff"] is (p is not parties[1])  # (by default: the rows fit in the store)
            assert p.table.last_pass["writer"] == ["ranges", "units (the table read again)", "units"][parties.index(p)]
    ranks = list(parties[0].table.work_dir.glob("ranks-*/*.npy"))
    assert len(ranks) == 2  # one file per unit, written by the first alignment's fit
