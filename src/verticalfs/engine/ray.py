"""A party on a Ray cluster: its table read, prepared and PSI-blinded by Ray workers (issue 55).

``verticalfs party serve --engine ray [--ray-address HOST:PORT]`` (or ``engine = "ray"`` in the
party's table of the deployment file) keeps the party's coordinator where it was (the gRPC server,
the TLS identity, the policy, the bottom model and the mini-batch loop) and hands its table to a Ray
cluster (the ``ray`` extra: ``pip install 'verticalfs[ray]'``; Ray is Apache-2.0):

- **reading**: Ray Data reads the party's Parquet table where it lives (a file, a folder of
  files, or a URI such as ``s3://bucket/table/`` through pyarrow's filesystems); the coordinator
  reads only the metadata (schema, row count);
- **ids**: a Ray job checks the id column (no missing, the widest id) and streams the ids, as
  fixed-width UTF-8 bytes, into one memory-mapped file on the coordinator, sorted in place
  (:class:`SortedIds`): ``w`` bytes an id (``w`` the widest id's UTF-8 length), in the page cache,
  not in the coordinator's resident memory. An id's *row* is its rank in that order;
- **PSI**: the party's blinding (one scalar multiplication per id and per id of the label
  holder) runs as Ray tasks over shards of each chunk (:class:`RayExecutor`), the messages
  unchanged;
- **preparation**, two Ray jobs over the table's blocks, each joining its rows to the alignment by
  id (the sorted ids and, per rank, the aligned row and split: three memory-mapped files the
  workers open read-only): the **fit** sends each block's per-column statistics of its training
  rows (:mod:`verticalfs.engine.stats`: min/max, counts and categories exact; mean and variance
  merged; quartiles from sketches, exact while a block holds at most 4,096 training values of a
  column), merged on the coordinator into the party's preprocessor; the **transform** prepares
  each block's aligned rows with it and writes them into one float32 memory-mapped file per split
  at their aligned rows (the shards training reads mini-batches from, as the local engine's);
- **faults**: each block is a Ray task; a worker that dies is retried by Ray (a block's writes are
  idempotent: the same rows get the same values), and the coordinator checks that every aligned
  row was written exactly once per pass.

The workers must reach the table and the party's working folder (``work_dir``, where the
alignment files and the prepared matrices are): on one host, any folder; across hosts, a shared
filesystem. The workers run this module's functions: verticalfs (the same version) must be
installed where they run. The PSI scalar is sent to the party's own workers with each task: the
cluster is inside the party's trust boundary (docs/scale.md).
"""

from __future__ import annotations

import os
import pickle
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from verticalfs.data.stream import BATCH_ROWS, WRITE_ROWS, keep_pages_released, release_pages
from verticalfs.exceptions import ConfigError, DataError

#: an environment variable for tests: a folder where the first transform task writes its pid and
#: waits (up to a minute) until the file ``killed`` appears there, so that a test can kill that
#: worker at a known point and see Ray retry the task
FAULT_DIR_ENV = "VERTICALFS_RAY_FAULT_DIR"
#: times Ray runs a task again after its worker died (the Ray default for tasks is 3)
RETRIES = 3
_started_here = False


#: Ray's switch between a single-host instance on the loopback address ("0") and a node that other
#: hosts reach on this host's address (Ray's default on Linux); read when ray is first imported
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_temp_dir: str | None = None


def _ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise ConfigError("the ray engine needs Ray: pip install 'verticalfs[ray]'") from None
    return ray


def connect(address: str | None = None, *, num_cpus: int | None = None) -> Any:
    """This process connected to the Ray cluster at ``address`` (``HOST:PORT`` of a cluster's
    head, as ``ray start --head`` prints it, or ``"auto"``), or, without one, to a Ray instance it
    starts on this host, on the loopback address only, its files in a temporary folder of its own
    (both stopped and removed by :func:`disconnect`). Idempotent."""
    global _started_here, _temp_dir
    import logging
    import sys

    if not address and "ray" not in sys.modules:  # a single-host instance: reached on 127.0.0.1 only
        os.environ.setdefault(LOOPBACK_ENV, "0")
    if not address:
        # the instance it starts: Ray waits 30 s for its GCS server's port file by default, which a
        # loaded host exceeded in CI ("Timed out waiting for file ... gcs_server_port_..."); 120 s,
        # Ray's own wait for its RocksDB back end (the operator's setting wins)
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")
    ray = _ray()
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # a line per job otherwise, on the party's stderr
    if not ray.is_initialized():
        kw: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False,
                              "configure_logging": False}
        if address:
            ray.init(address=address, **kw)
        else:
            _temp_dir = tempfile.mkdtemp(prefix="vfsray-")  # (short: Ray's socket paths must fit 107 bytes)
            ray.init(num_cpus=num_cpus, _temp_dir=_temp_dir, **kw)
            _started_here = True
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.enable_operator_progress_bars = False
    return ray


def disconnect() -> None:
    """Leave the cluster (a Ray instance this process started stops with it, its files removed)."""
    global _started_here, _temp_dir
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()
    _started_here = False
    if _temp_dir is not None:
        shutil.rmtree(_temp_dir, ignore_errors=True)
        _temp_dir = None


def cluster_cpus() -> int:
    ray = _ray()
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


# ------------------------------------------------------------------------------ PSI on Ray tasks
class RayExecutor(Executor):
    """A :class:`concurrent.futures.Executor` whose calls are Ray tasks (the PSI engine's
    :func:`~verticalfs.psi._spread` hands it a chunk's shards: blinding on the cluster's workers)."""

    def __init__(self) -> None:
        self._ray = _ray()
        self._remote: dict[Any, Any] = {}

    def submit(self, fn, /, *args, **kwargs) -> Future:  # type: ignore[override]
        r = self._remote.get(fn)
        if r is None:
            r = self._remote[fn] = self._ray.remote(fn).options(max_retries=RETRIES)
        return r.remote(*args, **kwargs).future()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass  # the tasks belong to the cluster; nothing to stop here


# ------------------------------------------------------------------------------ the table
def _filesystem(path: str | Path):
    """``(pyarrow filesystem, path in it)`` of a local path or a URI (``s3://``, ``gs://``, ``hdfs://``, ``file://``)."""
    import pyarrow.fs as pafs

    s = str(path)
    if "://" in s:
        try:
            return pafs.FileSystem.from_uri(s)
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot open the table {s!r}: {exc}") from None
    return pafs.LocalFileSystem(), str(Path(s).resolve())


class SortedIds:
    """A party's ids as fixed-width UTF-8 bytes, sorted, in a memory-mapped file (``w`` bytes an
    id, ``w`` the widest id's length): an id's row is its rank. ``sorted`` is the array (numpy
    ``S`` dtype), what PSI blinds; :meth:`positions` the rank of each of some ids (-1 if not held)."""

    def __init__(self, path: Path, n: int, width: int) -> None:
        self.path, self.width = Path(path), int(width)
        self.sorted = (np.memmap(self.path, dtype=f"S{self.width}", mode="r+", shape=(n,)) if n
                       else np.zeros(0, dtype=f"S{self.width}"))

    def __len__(self) -> int:
        return len(self.sorted)

    def repeated(self, most: int) -> np.ndarray:
        """Up to ``most`` ids held more than once (a block at a time)."""
        s, out = self.sorted, []
        for a in range(0, max(0, len(s) - 1), BATCH_ROWS):
            part = s[a:a + BATCH_ROWS + 1]
            out += part[1:][part[1:] == part[:-1]].tolist()
            release_pages(s, a, a + BATCH_ROWS + 1)
            if len(out) >= most:
                break
        return np.asarray(sorted(set(out))[:most], dtype=s.dtype)

    def positions(self, ids) -> np.ndarray:
        """The rank of each of ``ids`` (text: a numpy ``str`` array or a list) among the sorted ids, -1 if not held."""
        q = np.asarray(ids)
        out = np.full(len(q), -1, dtype=np.int64)
        s = self.sorted
        if not len(s) or not len(q):
            return out
        for a in range(0, len(q), BATCH_ROWS):
            part = q[a:a + BATCH_ROWS]
            part = part if part.dtype.kind == "S" else np.char.encode(part.astype(str), "utf-8")
            j = np.searchsorted(s, part)
            j[j == len(s)] = 0
            hit = s[j] == part
            out[a:a + BATCH_ROWS][hit] = j[hit]
        release_pages(s)
        return out


def _id_widths(batch, id_column: str):
    import pyarrow as pa
    import pyarrow.compute as pc

    col = batch.column(id_column)
    nulls = col.null_count
    b = col.cast(pa.string()).cast(pa.binary())
    width = pc.max(pc.binary_length(b)).as_py() if len(b) - nulls else 0
    return pa.table({"rows": [len(col)], "nulls": [nulls], "width": [int(width or 0)]})


def _id_bytes(batch, id_column: str, width: int):
    import pyarrow as pa

    b = batch.column(id_column).cast(pa.string()).cast(pa.binary())
    arr = np.asarray(b.to_numpy(zero_copy_only=False), dtype=f"S{width}")
    return pa.table({"ids": pa.array([arr.tobytes()], pa.binary())})


def _join(join: dict, ids_col) -> tuple[np.ndarray, np.ndarray]:
    """Each id of a block (a pyarrow column) -> (split code or -1, destination row), from the alignment files."""
    import pyarrow as pa

    s = np.memmap(join["ids"], dtype=f"S{join['width']}", mode="r", shape=(join["n"],))
    q = np.asarray(ids_col.cast(pa.string()).cast(pa.binary()).to_numpy(zero_copy_only=False),
                   dtype=f"S{join['width']}")
    j = np.minimum(np.searchsorted(s, q), join["n"] - 1)
    held = s[j] == q
    split = np.memmap(join["split"], dtype=np.int8, mode="r", shape=(join["n"],))[j]
    dest = np.memmap(join["dest"], dtype=np.int64, mode="r", shape=(join["n"],))[j]
    split = np.where(held, split, -1).astype(np.int8)
    return split, dest


def _frame(batch, cols: Sequence[str], cats: set, rows: np.ndarray) -> pd.DataFrame:
    from verticalfs.data.stream import _typed

    X = batch.select(list(cols)).take(rows).to_pandas() if len(cols) else pd.DataFrame(index=range(len(rows)))
    for c in cols:
        X[c] = _typed(X[c], c in cats)
    return X


def _check_block(batch, cols: Sequence[str]):
    import pyarrow as pa

    out = {}
    for c in cols:
        a = batch.column(c).to_numpy(zero_copy_only=False).astype(np.float64)
        with np.errstate(invalid="ignore"):
            inf = bool(np.isinf(a).any())
            ok = a[np.isfinite(a)]
        out[c] = (inf, float(ok.min()) if len(ok) else np.inf, float(ok.max()) if len(ok) else -np.inf)
    return pa.table({"check": pa.array([pickle.dumps(out)], pa.binary())})


def _fit_block(batch, id_column: str, join: dict, cols: Sequence[str], cats: Sequence[str], counts_numeric: bool):
    import pyarrow as pa

    from verticalfs.engine.stats import block_stats

    split, _ = _join(join, batch.column(id_column))
    train = np.flatnonzero(split == 0)
    st = block_stats(_frame(batch, cols, set(cats), train), set(cats), counts_numeric=counts_numeric)
    return pa.table({"stats": pa.array([pickle.dumps(st)], pa.binary()), "rows": [len(train)]})


def _fault_point() -> None:
    """The test hook of :data:`FAULT_DIR_ENV` (nothing without it)."""
    d = os.environ.get(FAULT_DIR_ENV)
    if not d or not Path(d).is_dir() or Path(d, "killed").exists():
        return
    try:
        fd = os.open(Path(d, "pid"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)  # the first task only
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    t = time.monotonic()
    while not Path(d, "killed").exists() and time.monotonic() - t < 60:
        time.sleep(0.05)
    time.sleep(5)  # killed here (the test kills this process after writing `killed`)


def _transform_block(batch, id_column: str, join: dict, pp: dict, cols: Sequence[str], cats: Sequence[str],
                     outputs: list, where: str):
    import pyarrow as pa

    from verticalfs.data.preprocess import PartyPreprocessor

    _fault_point()
    split, dest = _join(join, batch.column(id_column))
    keep = np.flatnonzero(split >= 0)
    written = [0] * len(outputs)
    if len(keep):
        A = PartyPreprocessor.from_dict(pp).transform(_frame(batch, cols, set(cats), keep), where=where)
        ks, rows_all = split[keep], dest[keep]
        for k, (path, rows, d) in enumerate(outputs):
            m = np.flatnonzero(ks == k)
            if not len(m) or not rows or not d:
                continue
            out = np.memmap(path, dtype=np.float32, mode="r+", shape=(rows, d))
            r = rows_all[m]
            o = np.argsort(r)
            r, m = r[o], m[o]
            for a in range(0, len(r), WRITE_ROWS):  # ascending, a few thousand rows at a time, pages released
                out[r[a:a + WRITE_ROWS]] = A[m[a:a + WRITE_ROWS]]
                release_pages(out, int(r[a]), int(r[min(len(r), a + WRITE_ROWS) - 1]) + 1)
            out.flush()
            del out
            written[k] = len(m)
    return pa.table({"written": [written]})


class RayTable:
    """A party's Parquet table on a Ray cluster (see the module docstring): the seam of
    :class:`verticalfs.engine.PartyTable`.

    Parameters
    ----------
    party : str
    path : path or str
        A Parquet file, a folder of Parquet files, or a URI pyarrow reads (``s3://``, ``gs://``,
        ``hdfs://``, ``file://``).
    id_column : str
    address : str, optional
        The Ray cluster (``HOST:PORT`` of its head); default: a Ray instance started on this host.
    work_dir : path, optional
        The party's working folder (the sorted ids, the alignment, the prepared matrices): shared
        with the workers. Default: a new temporary folder, removed by :meth:`close`.
    blocks : int, optional
        Blocks Ray Data reads the table in (default: Ray Data's choice, about one per file).
    """

    def __init__(self, party: str, path: str | Path, *, id_column: str = "id", address: str | None = None,
                 work_dir: str | Path | None = None, blocks: int | None = None, num_cpus: int | None = None) -> None:
        import pyarrow.dataset as pads

        self.party, self.path, self.id_column, self.blocks = party, path, id_column, blocks
        self._owns_ray = "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
        self._ray = connect(address, num_cpus=num_cpus)  # (a cluster this table joined, it leaves on close)
        self.fs, self._root = _filesystem(path)
        try:
            self.dataset = pads.dataset(self._root, filesystem=self.fs, format="parquet")
            self.columns = list(self.dataset.schema.names)
            self.n_rows = int(self.dataset.count_rows())
        except (OSError, ValueError) as exc:
            raise DataError(f"party {party!r}: cannot read {str(path)!r} as a Parquet table: {exc}") from None
        if id_column not in self.columns:
            raise DataError(f"party {party!r}: {str(path)!r} has no id column {id_column!r}; its columns are "
                            f"{self.columns}")
        self._own_dir = work_dir is None
        self.work_dir = (Path(tempfile.mkdtemp(prefix=f"verticalfs-{party}-ray-")) if work_dir is None
                         else Path(work_dir))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._ids: SortedIds | None = None
        self.last_pass: dict[str, Any] = {}  # what the latest preparation did (blocks, approximate columns)

    # ------------------------------------------------------------------ reads
    def _read(self, columns: Sequence[str]):
        ray = self._ray
        kw: dict[str, Any] = {"filesystem": self.fs}
        if self.blocks:
            kw["override_num_blocks"] = int(self.blocks)
        return ray.data.read_parquet(self._root, **kw).select_columns(list(columns))

    def _map(self, columns: Sequence[str], fn, **fn_kwargs):
        """``fn(block, **fn_kwargs)`` over the table's blocks (columns ``columns``), as Ray tasks
        retried after a worker's death; its one-row outputs, as pyarrow tables."""
        ds = self._read(columns).map_batches(fn, batch_format="pyarrow", batch_size=None, fn_kwargs=fn_kwargs)
        return list(ds.iter_batches(batch_size=None, batch_format="pyarrow"))

    def schema_frame(self) -> pd.DataFrame:
        return self.dataset.schema.empty_table().to_pandas()

    def check_values(self, columns: Sequence[str], categorical: Sequence[str]) -> None:
        """Infinite values, and ranges that overflow, in the numeric columns (a Ray job)."""
        num = [c for c in columns if c not in set(categorical)]
        if not num:
            return
        merged: dict[str, list] = {}
        for t in self._map(num, _check_block, cols=num):
            for blob in t.column("check").to_pylist():
                for c, (inf, lo, hi) in pickle.loads(blob).items():
                    m = merged.setdefault(c, [False, np.inf, -np.inf])
                    m[0], m[1], m[2] = m[0] or inf, min(m[1], lo), max(m[2], hi)
        where = f" in {str(self.path)}"
        bad = [c for c in num if merged.get(c, [False])[0]]
        if bad:
            raise DataError(f"party {self.party!r}: columns {bad}{where} hold infinite values, which training cannot "
                            "use; replace them (e.g. by missing values and --impute) or drop the columns")
        with np.errstate(over="ignore"):
            big = [c for c in num if c in merged and merged[c][2] >= merged[c][1]
                   and not np.isfinite(merged[c][2] - merged[c][1])]
        if big:
            raise DataError(f"party {self.party!r}: columns {big}{where} have values too large to scale (their range "
                            "overflows); rescale them (e.g. divide by a power of ten)")

    def id_lookup(self) -> SortedIds:
        """The ids, checked (none missing, none repeated), sorted into a memory-mapped file (see the
        module docstring); read once."""
        if self._ids is not None:
            return self._ids
        stats = self._map([self.id_column], _id_widths, id_column=self.id_column)
        n = sum(sum(t.column("rows").to_pylist()) for t in stats)
        nulls = sum(sum(t.column("nulls").to_pylist()) for t in stats)
        width = max([1] + [max(t.column("width").to_pylist() or [0]) for t in stats])
        if nulls:
            raise DataError(f"party {self.party!r}: {nulls} rows of {str(self.path)!r} have no id in column "
                            f"{self.id_column!r}; give every row an id")
        path = self.work_dir / f"ids-{secrets.token_hex(4)}.S{width}"
        mm = np.memmap(path, dtype=f"S{width}", mode="w+", shape=(n,)) if n else np.zeros(0, f"S{width}")
        at = 0
        ds = self._read([self.id_column]).map_batches(_id_bytes, batch_format="pyarrow", batch_size=None,
                                                      fn_kwargs={"id_column": self.id_column, "width": width})
        for t in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            for blob in t.column("ids").to_pylist():
                k = len(blob) // width
                if at + k > n:
                    raise DataError(f"party {self.party!r}: {str(self.path)!r} changed while it was read")
                mm[at:at + k] = np.frombuffer(blob, dtype=f"S{width}")
                release_pages(mm, at, at + k)
                at += k
        if at != n:
            raise DataError(f"party {self.party!r}: {str(self.path)!r} changed while it was read ({at} ids of {n})")
        if n:
            mm.sort()  # in place, in the file's pages
            mm.flush()
            release_pages(mm)
        del mm
        ids = SortedIds(path, n, width)
        dup = ids.repeated(3)
        if len(dup):
            shown = [d.decode("utf-8", "replace") for d in dup.tolist()]
            raise DataError(f"party {self.party!r}: ids repeat in column {self.id_column!r} of {str(self.path)!r} "
                            f"(e.g. {shown}); every row needs its own id")
        keep_pages_released(ids.sorted)
        self._ids = ids
        return ids

    def psi_executor(self) -> tuple[Executor, int]:
        return RayExecutor(), cluster_cpus()

    # ------------------------------------------------------------------ preparation
    def prepare(self, pos: np.ndarray, codes: np.ndarray, cols: Sequence[str], cats: Sequence[str], *,
                scaling: str, impute: str, splits: Sequence[str], out_dir: str | Path, **_: Any):
        """The aligned rows prepared by two Ray jobs (see the module docstring): ``(preprocessor,
        {split: np.memmap})``, as :func:`~verticalfs.data.stream.prepare_streamed` returns them."""
        from verticalfs.engine.stats import approximate, merge, preprocessor

        ids = self.id_lookup()
        n = len(ids)
        pos = np.asarray(pos, dtype=np.int64)
        codes = np.asarray(codes, dtype=np.int64)
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        # the alignment, per rank of the sorted ids: its split (-1: not aligned) and its row in that split
        split_f, dest_f = out_dir / "split.i8", out_dir / "dest.i64"
        split = np.memmap(split_f, dtype=np.int8, mode="w+", shape=(max(n, 1),))
        dest = np.memmap(dest_f, dtype=np.int64, mode="w+", shape=(max(n, 1),))
        split[:] = -1
        sizes = []
        for k in range(len(splits)):
            mine = np.flatnonzero(codes == k)
            split[pos[mine]] = k
            dest[pos[mine]] = np.arange(len(mine))
            sizes.append(len(mine))
            del mine
        split.flush()
        dest.flush()
        release_pages(split)  # (written: the pages stay in the page cache, not in this process)
        release_pages(dest)
        del split, dest
        join = {"ids": str(ids.path), "width": ids.width, "n": n, "split": str(split_f), "dest": str(dest_f)}
        cols, cats = list(cols), list(cats)
        where = str(self.path)
        t0 = time.perf_counter()
        stats: dict = {}
        train_rows = 0
        for t in self._map([self.id_column, *cols], _fit_block, id_column=self.id_column, join=join, cols=cols,
                           cats=cats, counts_numeric=impute == "most-frequent"):
            for blob, r in zip(t.column("stats").to_pylist(), t.column("rows").to_pylist(), strict=True):
                merge(stats, pickle.loads(blob))
                train_rows += r
        if train_rows != sizes[0]:
            raise DataError(f"party {self.party!r}: the fit saw {train_rows} training rows of {sizes[0]} aligned; "
                            f"{where!r} changed while it was read")
        if not stats:  # no block: every column empty
            from verticalfs.engine.stats import ColumnStats

            stats = {c: ColumnStats(c in set(cats)) for c in cols}
        pp = preprocessor(self.party, cols, cats, stats, scaling=scaling, impute=impute, where=where)
        fit_s = time.perf_counter() - t0
        d = len(pp.feature_names)
        outputs = []
        for s, rows in zip(splits, sizes, strict=True):
            f = out_dir / f"{self.party}-{s}.f32"
            if rows and d:
                np.memmap(f, dtype=np.float32, mode="w+", shape=(rows, d)).flush()
            outputs.append((str(f), rows, d))
        t1 = time.perf_counter()
        written = np.zeros(len(splits), dtype=np.int64)
        for t in self._map([self.id_column, *cols], _transform_block, id_column=self.id_column, join=join,
                           pp=pp.to_dict(), cols=cols, cats=cats, outputs=outputs, where=where):
            for w in t.column("written").to_pylist():
                written += np.asarray(w, dtype=np.int64)
        if written.tolist() != sizes:
            raise DataError(f"party {self.party!r}: the transform wrote {written.tolist()} rows per split where "
                            f"{sizes} are aligned; {where!r} changed while it was read")
        maps: dict[str, np.ndarray] = {}
        for s, (f, rows, _d) in zip(splits, outputs, strict=True):
            if rows and d:
                m = np.memmap(f, dtype=np.float32, mode="r+", shape=(rows, d))
                release_pages(m)
                keep_pages_released(m)
                maps[s] = m
            else:
                maps[s] = np.zeros((rows, d), dtype=np.float32)
        self.last_pass = {"fit_s": fit_s, "transform_s": time.perf_counter() - t1,
                          "approximate": sorted(c for c, st in stats.items() if not st.categorical and approximate(st)
                                                and (impute == "median" or scaling == "robust"))}
        return pp, maps

    def close(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        if self._owns_ray:
            self._owns_ray = False
            disconnect()
