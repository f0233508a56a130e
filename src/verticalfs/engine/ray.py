"""A party on a Ray cluster: its table read, prepared and PSI-blinded by Ray workers (issue 55).

``verticalfs party serve --engine ray [--ray-address HOST:PORT]`` (or ``engine = "ray"`` in the
party's table of the deployment file) keeps the party's coordinator where it was (the gRPC server,
the TLS identity, the policy, the bottom model and the mini-batch loop) and hands its table to a Ray
cluster (the ``ray`` extra: ``pip install 'verticalfs[ray]'``; Ray is Apache-2.0):

- **reading**: every pass over the table is one plain Ray task per *unit* (a file's adjacent row
  groups, up to :data:`UNIT_ROWS` rows), which reads its row groups with pyarrow where the table
  lives (a file, a folder of files, or a URI such as ``s3://bucket/table/`` through pyarrow's
  filesystems); the coordinator reads only the metadata (schema, row count, row groups). (Ray Data
  jobs did this in verticalfs 0.7.0: each job spent 1-2.5 s before its first block's function ran
  and made three uneven blocks of eight files; a task starts in milliseconds.);
- **ids**: a pass checks the id column (no missing, the widest id) and one streams the ids, as
  fixed-width UTF-8 bytes, into one memory-mapped file on the coordinator, sorted in place
  (:class:`SortedIds`): ``w`` bytes an id (``w`` the widest id's UTF-8 length), in the page cache,
  not in the coordinator's resident memory. An id's *row* is its rank in that order;
- **PSI**: the party's blinding (one scalar multiplication per id and per id of the label
  holder) runs as Ray tasks over shards of each chunk (:class:`RayExecutor`), the messages
  unchanged;
- **preparation**, two passes of tasks, each unit's rows joined to the alignment (per rank of the
  sorted ids, the aligned row and split: memory-mapped files the workers open read-only) through
  the unit's ranks among the sorted ids (searched once, at the first alignment, and kept in the
  working folder): the **fit** reads each unit once and sends the per-column statistics of its
  training rows (:mod:`verticalfs.engine.stats`: min/max, counts and categories exact; mean and
  variance merged; quartiles from sketches, exact while a unit holds at most 4,096 training
  values of a column), merged on the coordinator into the party's preprocessor; its aligned rows
  stay in Ray's object store, sorted by split and aligned row; the **transform** writes one float32
  file per split (the shards training reads mini-batches from, memory-mapped, as the local
  engine's): one writer task per contiguous range of the matrices (as many ranges as units,
  rounded up to a multiple of the cluster's CPUs, of about as many rows each) takes that range's
  rows from every unit's aligned rows, prepares them a few MB at a time and writes the range in
  order, into a file of its own where the ranges start on pages (Linux; buffered writes into one
  file take turns on its lock), a split's files then spliced into one memory map
  (:func:`~verticalfs.data.stream.spliced_memmap`; :meth:`RayTable._write_ranges`;
  where the aligned rows would not fit in half the object store, each unit is read again and its
  rows written at their aligned rows through a memory map);
- **faults**: each unit and each range is a Ray task; a worker that dies is retried by Ray (a task's writes are
  idempotent: the same rows get the same values; an object lost from the store is made again by
  running its task again), and the coordinator checks that every aligned row was written exactly
  once per pass.

The workers must reach the table and the party's working folder (``work_dir``, where the
alignment files and the prepared matrices are): on one host, any folder; across hosts, a shared
filesystem. The workers run this module's functions: verticalfs (the same version) must be
installed where they run. The PSI scalar is sent to the party's own workers with each task: the
cluster is inside the party's trust boundary (docs/scale.md).
"""

from __future__ import annotations

import mmap
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from verticalfs.data.stream import (
    BATCH_ROWS,
    WRITE_ROWS,
    keep_pages_released,
    release_pages,
    splice_pad,
    spliced_memmap,
)
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
    except ImportError:
        raise ConfigError("the ray engine needs Ray: pip install 'verticalfs[ray]'") from None
    return ray


def connect(address: str | None = None, *, num_cpus: int | None = None) -> Any:
    """This process connected to the Ray cluster at ``address`` (``HOST:PORT`` of a cluster's
    head, as ``ray start --head`` prints it, or ``"auto"``), or, without one, to a Ray instance it
    starts on this host, on the loopback address only, its files in a temporary folder of its own
    (both stopped and removed by :func:`disconnect`). Idempotent."""
    global _started_here, _temp_dir
    import sys

    if not address and "ray" not in sys.modules:  # a single-host instance: reached on 127.0.0.1 only
        os.environ.setdefault(LOOPBACK_ENV, "0")
    if not address:
        # the instance it starts: Ray waits 30 s for its GCS server's port file by default, which a
        # loaded host exceeded in CI ("Timed out waiting for file ... gcs_server_port_..."); 120 s,
        # Ray's own wait for its RocksDB back end (the operator's setting wins)
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")
        # its workers do the party's own work (the passes over its table, its PSI blinding) for a
        # coordinator that runs at the party's priority: Ray starts workers at niceness 15 (meant
        # for a cluster's spare capacity), under which any other process of the host took their
        # cores (seen 2026-11-28: the workers of benchmarks/scale/ray_engine.py at niceness 15 beside
        # two training runs at 0, its 1 -> 2 worker speedups 0.9-1.3x). The operator's setting wins.
        os.environ.setdefault("RAY_worker_niceness", "0")
    ray = _ray()
    if not ray.is_initialized():
        kw: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False,
                              "configure_logging": False}
        if address:
            ray.init(address=address, **kw)
        else:
            _temp_dir = tempfile.mkdtemp(prefix="vfsray-")  # (short: Ray's socket paths must fit 107 bytes)
            ray.init(num_cpus=num_cpus, _temp_dir=_temp_dir, **kw)
            _started_here = True
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


def _utf8(a: np.ndarray) -> np.ndarray:
    """A numpy text array as UTF-8 bytes (``S`` dtype): when every character is ASCII (the usual
    ids), a cast of the code points to bytes (no Python object per id), else ``np.char.encode``."""
    a = np.asarray(a)
    if a.dtype.kind != "U":
        a = a.astype(str)
    k = a.dtype.itemsize // 4
    if k and a.ndim == 1:
        u = np.ascontiguousarray(a).view(np.uint32).reshape(len(a), k)
        if not (u >= 128).any():
            return u.astype(np.uint8).view(f"S{k}").reshape(len(a))
    return np.char.encode(a, "utf-8")


#: queries searched among the sorted ids at a time (sorted first: see :func:`_search`)
SEARCH_ROWS = 1 << 20


def _search(sorted_: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``np.searchsorted(sorted_, q)``, the queries visited in their sorted order: numpy's binary
    search then starts from the previous answer, and the reads of a large sorted array (ids of
    millions of rows, memory-mapped) follow each other instead of missing the CPU's caches at
    random (8x less CPU for 250,000 queries among 10M integers)."""
    if len(q) < 2:
        return np.searchsorted(sorted_, q)
    o = np.argsort(q)  # (not stable, not needed: equal queries have one answer; 5x faster than "stable"
    #                     for 900k integers with numpy's AVX-512 sort, 0.016 s against 0.078)
    j = np.empty(len(q), dtype=np.intp)
    j[o] = np.searchsorted(sorted_, q[o])
    return j


def _u64(a: np.ndarray, width: int = 8) -> np.ndarray:
    """Byte strings (``S`` dtype) of at most 8 bytes, their first ``width`` bytes, as the unsigned
    integers of their NUL-padded big-endian bytes (the same order as the strings)."""
    k = a.dtype.itemsize
    b = np.zeros((len(a), 8), dtype=np.uint8)
    m = min(k, width, 8)
    b[:, :m] = a.view(np.uint8).reshape(len(a), k)[:, :m]
    return b.view(">u8").reshape(len(a)).astype(np.uint64)


class SortedIds:
    """A party's ids as fixed-width UTF-8 bytes, sorted, in a memory-mapped file (``w`` bytes an
    id, ``w`` the widest id's length): an id's row is its rank. ``sorted`` is the array (numpy
    ``S`` dtype), what PSI blinds; :meth:`positions` the rank of each of some ids (-1 if not held)."""

    def __init__(self, path: Path, n: int, width: int) -> None:
        self.path, self.width = Path(path), int(width)
        self.sorted = (np.memmap(self.path, dtype=f"S{self.width}", mode="r+", shape=(n,)) if n
                       else np.zeros(0, dtype=f"S{self.width}"))
        self._keys: np.ndarray | None = None

    def keys(self) -> np.ndarray | None:
        """Ids of at most 8 bytes as unsigned integers (big-endian bytes, NUL-padded: the same
        order as the bytes), in a memory-mapped file beside the ids: a search among integers is
        several times faster than among byte strings. None for wider ids."""
        if self._keys is None and 0 < self.width <= 8 and len(self.sorted):
            f = self.path.with_name(self.path.name + ".u64")
            k = np.memmap(f, dtype=np.uint64, mode="w+", shape=(len(self.sorted),))
            for a in range(0, len(k), BATCH_ROWS):
                k[a:a + BATCH_ROWS] = _u64(self.sorted[a:a + BATCH_ROWS])
                release_pages(self.sorted, a, a + BATCH_ROWS)
                release_pages(k, a, a + BATCH_ROWS)
            k.flush()
            keep_pages_released(k)
            self._keys = k
        return self._keys

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
        keys = self.keys()
        step = SEARCH_ROWS
        if len(q) >= 1 << 16:  # (two threads: numpy's sort and search release the GIL)
            step = min(step, -(-len(q) // 2))
            with ThreadPoolExecutor(2) as ex:
                for f in [ex.submit(self._positions, q, out, keys, a, step) for a in range(0, len(q), step)]:
                    f.result()
        else:
            for a in range(0, len(q), step):
                self._positions(q, out, keys, a, step)
        release_pages(s)
        if keys is not None:
            release_pages(keys)
        return out

    def _positions(self, q: np.ndarray, out: np.ndarray, keys: np.ndarray | None, a: int, step: int) -> None:
        """:meth:`positions` of ``q[a:a + step]``, into ``out[a:a + step]``."""
        s = self.sorted
        part = q[a:a + step]
        part = part if part.dtype.kind == "S" else _utf8(part)
        if keys is not None:  # as integers: an id longer than the widest held is not held
            k = part.dtype.itemsize
            longer = (part.view(np.uint8).reshape(len(part), k)[:, self.width:].any(1) if k > self.width
                      else np.zeros(len(part), dtype=bool))
            qk = _u64(part, self.width)
            j = _search(keys, qk)
            j[j == len(s)] = 0
            hit = (keys[j] == qk) & ~longer
        else:
            j = _search(s, part)
            j[j == len(s)] = 0
            hit = s[j] == part
        out[a:a + step][hit] = j[hit]


def _fixed_width(col, width: int) -> np.ndarray:
    """A pyarrow column of ids (text, or anything castable to text) as a numpy ``S{width}`` array
    (UTF-8 bytes, NUL-padded), built from the Arrow buffers without a Python object per id."""
    import pyarrow as pa

    b = col.cast(pa.string()).cast(pa.large_binary())
    if isinstance(b, pa.ChunkedArray):
        b = b.combine_chunks()
    n = len(b)
    out = np.zeros(n, dtype=f"S{max(1, width)}")
    if not n:
        return out
    _, off_buf, data_buf = b.buffers()
    off = np.frombuffer(off_buf, dtype=np.int64, count=n + 1, offset=b.offset * 8)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lens = np.diff(off)
    if lens.size and int(lens.max()) > width:
        raise DataError(f"an id is {int(lens.max())} bytes long where the widest is {width}")
    total = int(off[-1] - off[0])
    if total:
        row = np.repeat(np.arange(n, dtype=np.int64), lens)
        within = np.arange(total, dtype=np.int64) - np.repeat(off[:-1] - off[0], lens)
        out.view(np.uint8).reshape(n, max(1, width))[row, within] = data[off[0]:off[-1]]
    return out


def _id_widths(batch, id_column: str) -> dict:
    import pyarrow as pa
    import pyarrow.compute as pc

    col = batch.column(id_column)
    nulls = col.null_count
    b = col.cast(pa.string()).cast(pa.binary())
    width = pc.max(pc.binary_length(b)).as_py() if len(b) - nulls else 0
    return {"rows": len(col), "nulls": nulls, "width": int(width or 0)}


def _id_bytes(batch, id_column: str, width: int) -> np.ndarray:
    return _fixed_width(batch.column(id_column), width)


def _ranks(join: dict, unit: int, ids_col) -> np.ndarray:
    """The rank among the sorted ids of each id of a unit (-1: not there), computed once per unit
    and kept in the working folder (``join["ranks"]``): every later pass and every later alignment
    gathers from it instead of searching the sorted ids again. Written atomically (a retried or a
    repeated task writes the same bytes)."""
    f = Path(join["ranks"], f"{unit}.npy")
    try:
        r = np.load(f)
        if len(r) == len(ids_col):
            return r
    except (OSError, ValueError):
        pass
    if not join["n"]:
        return np.full(len(ids_col), -1, dtype=np.int64)
    q = _fixed_width(ids_col, join["width"])
    if join.get("keys"):  # the ids as 8-byte integers (SortedIds.keys): the same ranks, found faster
        s, q = np.memmap(join["keys"], dtype=np.uint64, mode="r", shape=(join["n"],)), _u64(q, join["width"])
    else:
        s = np.memmap(join["ids"], dtype=f"S{join['width']}", mode="r", shape=(join["n"],))
    j = np.minimum(_search(s, q), join["n"] - 1)
    r = np.where(s[j] == q, j, -1).astype(np.int64)
    del s
    tmp = f.with_name(f"{unit}.{os.getpid()}.{secrets.token_hex(3)}.tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, r)
    os.replace(tmp, f)
    return r


def _join(join: dict, unit: int, ids_col) -> tuple[np.ndarray, np.ndarray]:
    """Each id of a unit (a pyarrow column) -> (split code or -1, destination row), from the alignment files."""
    r = _ranks(join, unit, ids_col)
    held = r >= 0
    j = np.where(held, r, 0)
    split = np.memmap(join["split"], dtype=np.int8, mode="r", shape=(join["n"],))[j]
    dest = np.memmap(join["dest"], dtype=np.int64, mode="r", shape=(join["n"],))[j]
    return np.where(held, split, -1).astype(np.int8), dest


def _frame(batch, cols: Sequence[str], cats: set, rows: np.ndarray | None) -> dict[str, Any]:
    """The columns ``cols`` of the rows ``rows`` (None: all) of a unit, typed as the local engine types them
    (:func:`_column`)."""
    return dict(_Columns(batch, cols, cats, rows))


class _Columns(Mapping):
    """The columns :func:`_frame` gives, each made when it is asked for (one column alive at a
    time where the caller keeps one: :func:`~verticalfs.engine.stats.block_stats`)."""

    def __init__(self, batch, cols: Sequence[str], cats: set, rows: np.ndarray | None) -> None:
        import pyarrow as pa

        self.batch, self.cols, self.cats = batch, list(cols), cats
        self._known = set(self.cols)
        self.idx = None if rows is None else pa.array(rows, pa.int64())

    def __getitem__(self, c: str) -> Any:
        if c not in self._known:
            raise KeyError(c)
        col = self.batch.column(c)
        return _column(col if self.idx is None else col.take(self.idx), c in self.cats)

    def __iter__(self):
        return iter(self.cols)

    def __len__(self) -> int:
        return len(self.cols)


def _column(col, categorical: bool) -> Any:
    """A pyarrow column typed as the local engine types it (:func:`~verticalfs.data.stream._typed`):
    a float64 array straight from Arrow for an integer or floating column (the same floats as
    pandas' conversion), a text series through pandas otherwise."""
    import pyarrow as pa

    from verticalfs.data.stream import _typed

    t = col.type
    if not categorical and (pa.types.is_floating(t) or pa.types.is_integer(t)):
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)  # (nulls: NaN, as pandas')
    return _typed(col.to_pandas(), categorical)


def _matrix(frame: dict[str, Any], cols: Sequence[str], rows: int) -> pd.DataFrame:
    """``frame`` as the data frame :meth:`PartyPreprocessor.transform` takes."""
    return pd.DataFrame({c: frame[c] for c in cols}, index=pd.RangeIndex(rows), copy=False) if len(cols) else \
        pd.DataFrame(index=range(rows))


def _check_block(batch, cols: Sequence[str]) -> dict:
    out = {}
    for c in cols:
        a = batch.column(c).to_numpy(zero_copy_only=False).astype(np.float64)
        with np.errstate(invalid="ignore"):
            inf = bool(np.isinf(a).any())
            ok = a[np.isfinite(a)]
        out[c] = (inf, float(ok.min()) if len(ok) else np.inf, float(ok.max()) if len(ok) else -np.inf)
    return out


def _fit_block(batch, unit: int, id_column: str, join: dict, cols: Sequence[str], cats: Sequence[str],
               counts_numeric: bool, handoff: bool = False):
    """A unit's statistics of its training rows and their number; with ``handoff``, also its
    aligned rows (their columns as read, their split and destination row), left in the object
    store for the transform (no second read)."""
    from verticalfs.engine.stats import block_stats

    split, dest = _join(join, unit, batch.column(id_column))
    train = np.flatnonzero(split == 0)
    # (a column at a time: the 50 float64 columns of 1M rows' units at once cost a page fault per 4 KB
    # each task, about 90k in all, where one column alive at a time costs 30k)
    st = block_stats(_Columns(batch, cols, set(cats), train), set(cats), counts_numeric=counts_numeric)
    if not handoff:
        return st, len(train)
    keep = np.flatnonzero(split >= 0)
    keep = keep[np.lexsort((dest[keep], split[keep]))]  # by split, then destination row (see _range_task)
    rows = {"table": batch.select(list(cols)).take(keep), "split": split[keep], "dest": dest[keep]}
    return (st, len(train)), rows


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


def _transform_block(batch, unit: int, id_column: str, join: dict, pp: dict, cols: Sequence[str],
                     cats: Sequence[str], outputs: list, where: str, node: str | None = None) -> list[int]:
    split, dest = _join(join, unit, batch.column(id_column))
    keep = np.flatnonzero(split >= 0)
    return _write_prepared(batch, keep, split[keep], dest[keep], pp, cols, cats, outputs, where, node)


def _write_prepared(batch, keep: np.ndarray | None, ks: np.ndarray, rows_all: np.ndarray, pp: dict, cols: Sequence[str],
                    cats: Sequence[str], outputs: list, where: str, node: str | None = None) -> list[int]:
    """The rows ``keep`` (None: all) of ``batch`` prepared by ``pp`` and written into the split
    ``ks[i]``'s matrix at row ``rows_all[i]``; the rows written per split. The matrices are written
    to their files (``msync``) only where this worker is not on the coordinator's node ``node``
    (a shared filesystem); on its node the page cache they are written to is the coordinator's."""
    from verticalfs.data.preprocess import PartyPreprocessor

    _fault_point()
    written = [0] * len(outputs)
    n = batch.num_rows if keep is None else len(keep)
    if n:
        X = _matrix(_frame(batch, cols, set(cats), keep), cols, n)
        A = PartyPreprocessor.from_dict(pp).transform(X, where=where)
        del X
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
            if node is None or _node_id() != node:
                out.flush()
            del out
            written[k] = len(m)
    return written


#: bytes of a matrix's file one zero-filling task writes at least (see RayTable._zero_fill)
ZERO_BYTES = 1 << 24


def _zero_task(path: str, start: int, stop: int) -> tuple[float, float, float]:
    """Zeros written over bytes ``start``..``stop`` of ``path`` (idempotent; see RayTable._zero_fill)."""
    c0, w0 = time.process_time(), time.time()
    zeros = bytes(min(1 << 22, stop - start))
    fd = os.open(path, os.O_WRONLY)
    try:
        at = start
        while at < stop:
            at += os.pwrite(fd, zeros[:min(len(zeros), stop - at)], at)
    finally:
        os.close(fd)
    return time.process_time() - c0, w0, time.time()


def _node_id() -> str | None:
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # noqa: BLE001 - not in a Ray process: write the files through
        return None


def _handed_task(rows: dict, kw: dict) -> tuple[list[int], float]:
    """The transform of a unit's aligned rows that its fit task left in the object store."""
    c0, w0 = time.process_time(), time.time()
    t = rows["table"]
    out = _write_prepared(t, None, rows["split"], rows["dest"], **kw)
    return out, (time.process_time() - c0, w0, time.time())


#: rows a writer task (:func:`_range_task`) transforms at a time, at most
#: :data:`TRANSFORM_BYTES` of float64 (a chunk's copies are a few MB and the heap's pages are
#: reused). Measured 2026-11-28, 1M rows of 50 columns, 8 ranges on 2 workers, the writers' CPU
#: seconds and page faults: 4,096 rows 0.57 and 0.73 s; 8,192 rows 0.60 and 0.70 s, ~20k faults;
#: 16,384 rows 0.93 and 0.74 s, ~70k; 32,768 rows (verticalfs 0.8.0) 0.64-0.78 s, ~55k
TRANSFORM_ROWS = 1 << 13
#: bytes of float64 a chunk of :data:`TRANSFORM_ROWS` holds at most (wide tables: fewer rows a chunk)
TRANSFORM_BYTES = 1 << 22


def _chunk_rows(d: int) -> int:
    """Rows of ``d`` columns a writer transforms at a time (:data:`TRANSFORM_ROWS`, fewer for wide tables)."""
    return max(256, min(TRANSFORM_ROWS, TRANSFORM_BYTES // (8 * max(1, d))))


#: the writers' ranges (:func:`_cut`) start on a multiple of this many rows of a split's matrix
#: (a page of its file: 1,024 rows of ``d`` float32 columns are ``d`` pages of 4 KB)
PIECE_ALIGN = 1024


def _pwrite(fd: int, view: memoryview, at: int) -> None:
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], at + done)


def _range_task(piece: tuple[tuple[int, int, int], ...], kw: dict, *units: dict) -> tuple[tuple[list, bool], tuple]:
    """One contiguous range of the matrices (``piece``: its segments ``(k, lo, hi)``, rows ``lo..hi-1``
    of split ``k``'s matrix; a range that crosses a split's end goes on in the next split's),
    prepared and written: a segment's rows are gathered from every unit's aligned rows that the fit
    left in the object store (``units``, each sorted by split and destination row: a slice of
    each, no copy), transformed :func:`_chunk_rows` rows at a time (a few MB: in the CPU's caches),
    placed in the segment's buffer and written with one ``pwrite``: into the segment's own file
    where ``kw["shards"]`` (:func:`_shard_path`, from byte
    :func:`~verticalfs.data.stream.splice_pad`: two workers' buffered writes into one file take
    turns on its inode lock, ``benchmarks/scale/writers.py``), else at its rows of the split's
    file. No memory map: no page faults, no released pages, no page shared with another writer;
    one large write leaves the matrix in the page cache's large folios, which training's random
    reads of rows map a folio at a time (measured 2026-11-28, 1M rows: an epoch took 0.4 s over a
    matrix written in ranges of 22 MB, 1.0 s over one written in chunks of 1.6 MB, 0.8-1.0 s over
    one written through populated memory maps). Idempotent (a retried task writes the same
    bytes). Gives ``(([rows per segment], whether every row of the range came exactly once),
    took)``."""
    import pyarrow as pa

    from verticalfs.data.preprocess import PartyPreprocessor

    c0, w0 = time.process_time(), time.time()
    _fault_point()
    d = int(kw["outputs"][piece[0][0]][2])
    cols, cats = kw["cols"], set(kw["cats"])
    pp = PartyPreprocessor.from_dict(kw["pp"])
    node = kw.get("node")
    step = _chunk_rows(d)
    whole = np.empty((max(hi - lo for _k, lo, hi in piece), d), dtype=np.float32)
    counts, ok = [], True
    for k, lo, hi in piece:
        parts, dests = [], []  # this segment's rows of each unit (a slice), and their rows in the segment
        for u in units:
            sp, dst = u["split"], u["dest"]
            a, b = int(np.searchsorted(sp, k, "left")), int(np.searchsorted(sp, k, "right"))
            i, j = a + np.searchsorted(dst[a:b], [lo, hi])
            if j > i:
                parts.append(u["table"].slice(int(i), int(j - i)))
                dests.append(dst[i:j] - lo)
        counts.append(sum(len(x) for x in dests))
        seg = whole[:hi - lo]
        r = np.concatenate(dests) if dests else np.zeros(0, dtype=np.int64)
        if len(r) != hi - lo or not (np.bincount(r, minlength=hi - lo) == 1).all():
            ok = False
            seg[:] = 0  # (rows missing or repeated: the coordinator refuses the pass)
        groups: dict[Any, list[int]] = {}  # parts of one schema are transformed together (files may differ)
        for i, p in enumerate(parts):
            groups.setdefault(p.schema, []).append(i)
        starts = np.concatenate([[0], np.cumsum([len(x) for x in dests])]).astype(np.int64)
        for idx in groups.values():
            t = pa.concat_tables([parts[i] for i in idx])
            rg = np.concatenate([r[starts[i]:starts[i + 1]] for i in idx])
            for c in range(0, len(rg), step):  # (a few MB at a time: in the CPU's caches)
                part = t.slice(c, step)
                X = _matrix(_frame(part, cols, cats, None), cols, part.num_rows)
                seg[rg[c:c + step]] = pp.transform(X, where=kw["where"])
            del t
        del parts
        shard = kw.get("shards")
        flat, base = memoryview(seg).cast("B"), splice_pad(lo * d * 4) if shard else lo * d * 4
        fd = (os.open(_shard_path(kw["outputs"][k][0], lo), os.O_WRONLY | os.O_CREAT, 0o600) if shard
              else os.open(kw["outputs"][k][0], os.O_WRONLY))
        try:
            _pwrite(fd, flat, base)
            if node is None or _node_id() != node:
                os.fsync(fd)  # (a shared filesystem: the coordinator's node reads it; on its own node, its page cache)
        finally:
            os.close(fd)
        del flat
    return (counts, ok), (time.process_time() - c0, w0, time.time())


def _shard_path(path: str, lo: int) -> str:
    """The file of the rows from ``lo`` of the matrix ``path`` where each range is a file of its own
    (``<split file>.<lo>.f32``; its rows from byte :func:`~verticalfs.data.stream.splice_pad`)."""
    p = Path(path)
    return str(p.with_name(f"{p.stem}.{lo}{p.suffix}"))


def _cut(sizes: Sequence[int], pieces: int, align: int = PIECE_ALIGN) -> list[tuple[tuple[int, int, int], ...]]:
    """The matrices of ``sizes`` rows, one after the other, cut into ``pieces`` contiguous ranges of
    about as many rows each (fewer where there are fewer rows). A range is a tuple of segments
    ``(split, lo, hi)``, more than one where it crosses a split's end; a cut is on a multiple of
    ``align`` rows of its split (a page of the split's file: ``align`` rows of ``d`` float32
    columns are ``d`` pages of 4 KB) or on a split's end, where the ranges are longer than
    ``align`` rows."""
    total = int(sum(sizes))
    if not total:
        return []
    p = max(1, min(total, int(pieces)))
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64).tolist()
    cuts = [0]
    for i in range(1, p):
        c = i * total // p
        if total // p > align:  # on a page of split k's file (or its end)
            k = int(np.searchsorted(starts, c, "right")) - 1
            c = min(starts[k] + round((c - starts[k]) / align) * align, starts[k + 1])
        cuts.append(max(c, cuts[-1]))
    cuts.append(total)
    out = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        seg = tuple((k, max(a, starts[k]) - starts[k], min(b, starts[k + 1]) - starts[k])
                    for k in range(len(sizes)) if min(b, starts[k + 1]) > max(a, starts[k]))
        if seg:
            out.append(seg)
    return out


def _unit_task(fs, path: str, row_groups: Sequence[int], columns: Sequence[str], fn, kw: dict) -> Any:
    """One unit of a pass, on a worker: its row groups of ``path`` (columns ``columns``) read with
    pyarrow on one thread (a task is one CPU), then ``fn(table, **kw)``; with the worker's CPU
    seconds. With ``kw["handoff"]``, ``fn`` gives ``(output, rows)`` and the task two results: the
    second, ``rows``, stays in the object store for a later task."""
    import pyarrow.parquet as pq

    c0, w0 = time.process_time(), time.time()
    with fs.open_input_file(path) as f:
        table = pq.ParquetFile(f).read_row_groups(list(row_groups), columns=list(columns), use_threads=False)
    if kw.get("handoff"):
        out, rows = fn(table, **kw)
        return (out, (time.process_time() - c0, w0, time.time())), rows
    out = fn(table, **kw)
    return out, (time.process_time() - c0, w0, time.time())


_remotes: dict[Any, Any] = {}


def _remote(ray, fn: Any = None, num_returns: int = 1) -> Any:
    """``fn`` (default :func:`_unit_task`) as a Ray remote function (one CPU, retried after its
    worker's death; a lost result in the object store is made again by running its task again)."""
    fn = fn or _unit_task
    r = _remotes.get((fn, num_returns))
    if r is None:
        r = _remotes[fn, num_returns] = ray.remote(fn).options(max_retries=RETRIES, num_cpus=1,
                                                                num_returns=num_returns)
    return r


#: rows a unit of work (a Ray task) reads at most, where a file's row groups allow (adjacent row
#: groups of a file are put together up to it; a row group is never split)
UNIT_ROWS = 1 << 18


def _load_fit_code() -> None:
    try:
        import sklearn.preprocessing  # noqa: F401

        import verticalfs.engine.stats  # noqa: F401
    except ImportError:  # (said where it is needed)
        pass


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
        About how many units (Ray tasks) a pass over the table makes (default: units of up to
        :data:`UNIT_ROWS` rows; a unit is a file's row groups, never part of one).
    """

    def __init__(self, party: str, path: str | Path, *, id_column: str = "id", address: str | None = None,
                 work_dir: str | Path | None = None, blocks: int | None = None, num_cpus: int | None = None,
                 handoff: bool | None = None) -> None:
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
        # scikit-learn's scalers fit the preprocessor on the coordinator (engine.stats): loaded now,
        # beside the reads, not when the first alignment waits for it (~1 s of imports)
        threading.Thread(target=_load_fit_code, name="verticalfs-ray-imports", daemon=True).start()
        self._own_dir = work_dir is None
        self.work_dir = (Path(tempfile.mkdtemp(prefix=f"verticalfs-{party}-ray-")) if work_dir is None
                         else Path(work_dir))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._ids: SortedIds | None = None
        self._units: list[tuple[str, tuple[int, ...], int]] | None = None
        self._ranks_dir: Path | None = None  # each unit's ranks among the sorted ids (see _ranks)
        self._sizes: dict[str, int] = {}  # each column's uncompressed bytes (from the footers, with the units)
        self.cpu_s = 0.0  # the workers' CPU seconds of the passes run so far
        self.tasks: list[tuple[float, float, float]] = []  # each task's (CPU seconds, start, end), the latest pass's
        # how the transform writes the matrices from the fit's hand-off: "ranges" (a writer task per
        # contiguous range, _write_ranges) or "units" (verticalfs 0.8: each unit's task writes its
        # rows at their aligned rows through a memory map; kept to compare, benchmarks/scale)
        self.writer = "ranges"
        self.pieces: int | None = None  # ranges of the matrices the transform writes (None: as many as units)
        # the ranges' writers each write a file, spliced into one map per split (Linux; False: every
        # writer into its split's one file, as 0.8.1; kept to compare, benchmarks/scale)
        self.shards = True
        self.handoff = handoff  # None: when the aligned rows fit in half the object store (_hand_off)
        self.last_pass: dict[str, Any] = {}  # what the latest preparation did (blocks, approximate columns)

    # ------------------------------------------------------------------ reads
    def units(self) -> list[tuple[str, tuple[int, ...], int]]:
        """The table's units of work: ``(file, row groups, rows)``, adjacent row groups of a file
        together up to :data:`UNIT_ROWS` rows (or ``n_rows / blocks`` with ``blocks``); from the
        files' footers, read once."""
        if self._units is None:
            target = -(-self.n_rows // int(self.blocks)) if self.blocks else UNIT_ROWS
            units: list[tuple[str, tuple[int, ...], int]] = []
            sizes: dict[str, int] = {}
            for frag in self.dataset.get_fragments():
                frag.ensure_complete_metadata()
                md = frag.metadata
                for g in range(md.num_row_groups):  # each column's bytes, uncompressed (the hand-off's size)
                    rg = md.row_group(g)
                    for i in range(rg.num_columns):
                        c = rg.column(i).path_in_schema.split(".")[0]
                        sizes[c] = sizes.get(c, 0) + int(rg.column(i).total_uncompressed_size)
                cur: list[int] = []
                rows = 0
                for rg in frag.row_groups:
                    if cur and rows + rg.num_rows > target:
                        units.append((frag.path, tuple(cur), rows))
                        cur, rows = [], 0
                    cur.append(rg.id)
                    rows += rg.num_rows
                if cur:
                    units.append((frag.path, tuple(cur), rows))
            self._units, self._sizes = units, sizes
        return self._units

    def _map(self, columns: Sequence[str], fn, **fn_kwargs):
        """``fn(table, unit=k, **fn_kwargs)`` (``unit=`` if ``fn`` takes it) over the table's units
        (columns ``columns``), each a Ray task retried after its worker's death: yields ``(k,
        output)`` as the tasks finish (a few results held at a time); adds the workers' CPU seconds
        to ``self.cpu_s``. Tasks still running when the caller stops are cancelled."""
        ray = self._ray
        handoff = bool(fn_kwargs.get("handoff"))
        remote = _remote(ray, num_returns=2 if handoff else 1)
        units = self.units()
        with_unit = "unit" in fn.__code__.co_varnames[:fn.__code__.co_argcount]
        refs, kept = {}, {}
        for k, (path, rgs, _rows) in enumerate(units):
            kw = dict(fn_kwargs, unit=k) if with_unit else fn_kwargs
            r = remote.remote(self.fs, path, rgs, list(columns), fn, kw)
            if handoff:
                r, kept[k] = r
            refs[r] = k
        for r, out in self._as_finished(refs):
            k = refs[r]
            yield (k, out, kept.pop(k)) if handoff else (k, out)

    def _as_finished(self, refs):
        """``(ref, output)`` of each task of ``refs`` (returning ``(output, took)``) as it finishes,
        its CPU seconds added up (:meth:`_took`); the tasks still running when the caller stops
        are cancelled."""
        ray = self._ray
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for r in done:
                    out, took = ray.get(r)
                    self._took(took)
                    yield r, out
        finally:
            for r in pending:
                ray.cancel(r, force=False)

    def _hand_off(self, columns: Sequence[str], aligned: int) -> bool:
        """Whether the fit leaves the aligned rows in the object store for the transform (one read
        of the table) or the transform reads the table again: ``handoff`` if given, else whether
        the aligned rows' columns (estimated from the Parquet footers' uncompressed sizes) fit in
        half the cluster's object store (beyond, Ray would spill them to disk and read them back:
        a second read of the table costs no more)."""
        if self.handoff is not None:
            return bool(self.handoff)
        self.units()
        size = sum(self._sizes.get(c, 0) for c in set(columns)) * aligned / max(1, self.n_rows)
        store = float(self._ray.cluster_resources().get("object_store_memory", 0))
        return size <= 0.5 * store

    def _zero_fill(self, outputs: list) -> None:
        """The new matrices' files written with zeros, in contiguous pieces, one Ray task each: the
        transform's writes land at scattered rows, and a page's first write into a file's hole
        costs its allocation (several times the write itself, and serialised between processes
        writing the same file: measured, the transform did not speed up from 1 to 2 workers);
        written sequentially beforehand, those pages exist and the scattered writes only fill them."""
        ray = self._ray
        remote = _remote(ray, _zero_task)
        pieces = []
        for path, rows, d in outputs:
            size = rows * d * 4
            if not size:
                continue
            k = max(1, min(len(self.units()), -(-size // ZERO_BYTES)))
            cuts = [0] + [(size * i // k) // 4096 * 4096 for i in range(1, k)] + [size]
            pieces += [(path, a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
        refs = [remote.remote(p, a, b) for p, a, b in pieces]
        for took in ray.get(refs):
            self._took(took)

    def _took(self, took: tuple[float, float, float]) -> None:
        """A task's (CPU seconds, wall-clock start, end) added up (``cpu_s``, ``tasks``)."""
        self.cpu_s += took[0]
        self.tasks.append(took)

    def _handed(self, rows: dict, **kw):
        """:func:`_write_prepared` over the aligned rows each unit's fit left in the object store
        (``{unit: ref}``, emptied as the tasks finish, so that the store frees them): yields each
        task's output."""
        ray = self._ray
        remote = _remote(ray, _handed_task)
        refs = {remote.remote(ref, kw): k for k, ref in rows.items()}
        for r, out in self._as_finished(refs):
            rows.pop(refs[r], None)
            yield out

    def _pieces(self, sizes: Sequence[int]) -> list[tuple[tuple[int, int, int], ...]]:
        """The matrices cut into ranges, one writer task each (:func:`_range_task`, :func:`_cut`):
        ``pieces`` of them, by default as many as the table has units rounded up to a multiple of
        the cluster's CPUs, so that every worker gets as many (verticalfs 0.8.0 cut each split on
        its own, which made 9 uneven ranges of 1M rows' 8 units: one worker wrote 5 while the
        other, done with its 4, waited)."""
        cpus = cluster_cpus()
        return _cut(sizes, int(self.pieces or -(-len(self.units()) // cpus) * cpus))

    def _write_ranges(self, handed: dict, sizes: Sequence[int], outputs: list, kw: dict,
                      pieces: Sequence[tuple[tuple[int, int, int], ...]], meanwhile: Any = None) -> list[int]:
        """The transform from the aligned rows each unit's fit left in the object store (``{unit:
        ref}``, emptied once the writers are submitted: the store frees them when the writers are
        done): one writer task per contiguous range of the matrices (:meth:`_pieces`,
        :func:`_range_task`); the rows written per split. ``meanwhile()``, if given, runs on the
        coordinator while the writers do; ``pieces``: the ranges (:meth:`_pieces`), each segment a
        file of its own where ``kw["shards"]`` (:func:`_shard_path`). Each range is
        written by one process, sequentially with ``pwrite``: the transform's tasks of units
        (verticalfs 0.8) wrote each unit's rows at their aligned rows, scattered over the whole
        of every matrix, so every task faulted in and released pages of the whole file, shared
        with the other workers' (its workers' CPU seconds grew by half with a second worker)."""
        ray = self._ray
        remote = _remote(ray, _range_task)
        refs = [handed[k] for k in sorted(handed)]
        handed.clear()
        kw = dict(kw, outputs=outputs)
        written = [0] * len(sizes)
        tasks = {remote.remote(p, kw, *refs): p for p in pieces}
        del refs
        if meanwhile is not None:  # (the coordinator's own work while the writers run)
            meanwhile()
        bad = []
        for r, (counts, ok) in self._as_finished(tasks):
            for (k, lo, hi), n in zip(tasks[r], counts, strict=True):
                written[k] += n
                if not ok:
                    bad.append((k, lo, hi))
        if bad:
            raise DataError(f"party {self.party!r}: the transform found rows missing or repeated in {len(bad)} "
                            f"ranges of the prepared matrices (e.g. split {bad[0][0]}, rows {bad[0][1]}.."
                            f"{bad[0][2] - 1}); {str(self.path)!r} changed while it was read")
        return written

    def schema_frame(self) -> pd.DataFrame:
        return self.dataset.schema.empty_table().to_pandas()

    def check_values(self, columns: Sequence[str], categorical: Sequence[str]) -> None:
        """Infinite values, and ranges that overflow, in the numeric columns (a Ray job)."""
        num = [c for c in columns if c not in set(categorical)]
        if not num:
            return
        merged: dict[str, list] = {}
        for _k, out in self._map(num, _check_block, cols=num):
            for c, (inf, lo, hi) in out.items():
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
        units = self.units()
        stats = dict(self._map([self.id_column], _id_widths, id_column=self.id_column))
        n = sum(st["rows"] for st in stats.values())
        nulls = sum(st["nulls"] for st in stats.values())
        width = max([1] + [st["width"] for st in stats.values()])
        if nulls:
            raise DataError(f"party {self.party!r}: {nulls} rows of {str(self.path)!r} have no id in column "
                            f"{self.id_column!r}; give every row an id")
        if n != sum(u[2] for u in units) or any(stats[k]["rows"] != u[2] for k, u in enumerate(units)):
            raise DataError(f"party {self.party!r}: {str(self.path)!r} changed while it was read")
        token = secrets.token_hex(4)
        path = self.work_dir / f"ids-{token}.S{width}"
        self._ranks_dir = self.work_dir / f"ranks-{token}"
        self._ranks_dir.mkdir()
        mm = np.memmap(path, dtype=f"S{width}", mode="w+", shape=(n,)) if n else np.zeros(0, f"S{width}")
        starts = np.concatenate([[0], np.cumsum([u[2] for u in units])]).astype(np.int64)
        at = 0
        for k, arr in self._map([self.id_column], _id_bytes, id_column=self.id_column, width=width):
            if len(arr) != units[k][2]:
                raise DataError(f"party {self.party!r}: {str(self.path)!r} changed while it was read")
            a = int(starts[k])
            mm[a:a + len(arr)] = arr  # (the unit's place: the order of the units, whatever order they finish in)
            release_pages(mm, a, a + len(arr))
            at += len(arr)
            del arr
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
        ids.keys()  # (made now, with the ids, not at the first alignment: 0.02 s a million ids)
        self._ids = ids
        return ids

    def psi_executor(self) -> tuple[Executor, int]:
        return RayExecutor(), cluster_cpus()

    # ------------------------------------------------------------------ preparation
    def prepare(self, pos: np.ndarray, codes: np.ndarray, cols: Sequence[str], cats: Sequence[str], *,
                scaling: str, impute: str, splits: Sequence[str], out_dir: str | Path, **_: Any):
        """The aligned rows prepared by two Ray jobs (see the module docstring): ``(preprocessor,
        {split: np.memmap})``, as :func:`~verticalfs.data.stream.prepare_streamed` returns them."""
        from verticalfs.engine.stats import approximate, dominated_warnings, merge, preprocessor

        ids = self.id_lookup()
        start, self.tasks = time.time(), []
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
        keys = ids.keys()
        join = {"ids": str(ids.path), "width": ids.width, "n": n, "split": str(split_f), "dest": str(dest_f),
                "ranks": str(self._ranks_dir), "keys": str(keys.filename) if keys is not None else None}
        cols, cats = list(cols), list(cats)
        where = str(self.path)
        t0 = time.perf_counter()
        marks = {"aligned": time.time() - start}
        stats: dict = {}
        train_rows = 0
        cpu0 = self.cpu_s
        handed: dict[int, Any] = {}
        handoff = self._hand_off([self.id_column, *cols], sum(sizes))
        for k, (st, r), *rows in self._map([self.id_column, *cols], _fit_block, id_column=self.id_column, join=join,
                                           cols=cols, cats=cats, counts_numeric=impute == "most-frequent",
                                           handoff=handoff):
            merge(stats, st)
            train_rows += r
            if rows:
                handed[k] = rows[0]
        if train_rows != sizes[0]:
            raise DataError(f"party {self.party!r}: the fit saw {train_rows} training rows of {sizes[0]} aligned; "
                            f"{where!r} changed while it was read")
        if not stats:  # no block: every column empty
            from verticalfs.engine.stats import ColumnStats

            stats = {c: ColumnStats(c in set(cats)) for c in cols}
        marks["fitted"] = time.time() - start
        # (the warnings of squashed columns while the writers run: 0.03 s of 50 columns' quantiles)
        defer = bool(handoff and self.writer == "ranges")
        pp = preprocessor(self.party, cols, cats, stats, scaling=scaling, impute=impute, where=where,
                          dominated=not defer)

        def warn() -> None:
            if defer:
                pp.warnings[:0] = dominated_warnings(self.party, cols, cats, stats, scaling=scaling, where=where)

        fit_s = time.perf_counter() - t0
        marks["preprocessor"] = time.time() - start
        d = len(pp.feature_names)
        ranged = bool(handoff and self.writer == "ranges" and d)
        pieces = self._pieces(sizes) if ranged else []
        # a file per range where the ranges start on pages (as _cut makes them beyond a few thousand
        # rows), spliced into one map per split: two workers' buffered writes into one file take
        # turns on its inode lock (benchmarks/scale/writers.py, RESULTS.md "0.8.2")
        shards = bool(ranged and self.shards and sys.platform.startswith("linux")
                      and all(lo * d * 4 % mmap.PAGESIZE == 0 for p in pieces for _k, lo, _hi in p))
        stems = {f"{self.party}-{s}" for s in splits}
        for old in out_dir.iterdir():  # an earlier alignment's ranges, <stem>.<row>.f32 (a map of them stays valid)
            stem, _, rest = old.name.removesuffix(".f32").rpartition(".")
            if old.name.endswith(".f32") and stem in stems and rest.isdigit():
                old.unlink()
        outputs = []
        for s, rows in zip(splits, sizes, strict=True):
            f = out_dir / f"{self.party}-{s}.f32"
            if shards:
                f.unlink(missing_ok=True)  # (each range's writer makes its file)
            elif rows and d:
                np.memmap(f, dtype=np.float32, mode="w+", shape=(rows, d)).flush()
            outputs.append((str(f), rows, d))
        t1 = time.perf_counter()
        cpu1 = self.cpu_s
        written = np.zeros(len(splits), dtype=np.int64)
        kw = {"pp": pp.to_dict(), "cols": cols, "cats": cats, "where": where, "node": _node_id()}
        if ranged:
            got = self._write_ranges(handed, sizes, outputs, dict(kw, shards=shards), pieces, meanwhile=warn)
            written += np.asarray(got, dtype=np.int64)
        else:
            warn()  # each unit's rows written at their aligned rows through a memory map (re-read, or handed off)
            self._zero_fill(outputs)
            kw["outputs"] = outputs
            passes = (self._handed(handed, **kw) if handoff else
                      (w for _k, w in self._map([self.id_column, *cols], _transform_block,
                                                id_column=self.id_column, join=join, **kw)))
            for w in passes:
                written += np.asarray(w, dtype=np.int64)
        if written.tolist() != sizes:
            raise DataError(f"party {self.party!r}: the transform wrote {written.tolist()} rows per split where "
                            f"{sizes} are aligned; {where!r} changed while it was read")
        maps: dict[str, np.ndarray] = {}
        for k, (s, (f, rows, _d)) in enumerate(zip(splits, outputs, strict=True)):
            if rows and d:
                m = (spliced_memmap([_shard_path(f, lo) for lo in sorted(lo for p in pieces for kk, lo, _hi in p
                                                                          if kk == k)], (rows, d))
                     if shards else np.memmap(f, dtype=np.float32, mode="r+", shape=(rows, d)))
                release_pages(m)
                keep_pages_released(m)
                maps[s] = m
            else:
                maps[s] = np.zeros((rows, d), dtype=np.float32)
        marks["written"] = time.time() - start
        writer = "ranges" if ranged else "units" if handoff else "units (the table read again)"
        self.last_pass = {"handoff": handoff, "writer": writer, "shards": shards,
                          "fit_s": fit_s, "transform_s": time.perf_counter() - t1,
                          "units": len(self.units()),
                          "marks": marks, "tasks": [(c, a - start, b - start) for c, a, b in self.tasks],
                          "fit_cpu_s": cpu1 - cpu0, "transform_cpu_s": self.cpu_s - cpu1,
                          "approximate": sorted(c for c, st in stats.items() if not st.categorical and approximate(st)
                                                and (impute == "median" or scaling == "robust"))}
        return pp, maps

    def close(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        if self._owns_ray:
            self._owns_ray = False
            disconnect()
