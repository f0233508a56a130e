"""A party's table read in pieces: bounded memory for a party with millions of rows (issue 39).

The in-memory path (:func:`~verticalfs.data.user._read_frames`, then
:func:`~verticalfs.data.vertical.prepare_block`) holds the whole table in pandas, then the aligned
rows, then the prepared matrix: several times the file. :class:`StreamedTable` reads the file
through :mod:`pyarrow.dataset` instead (a Parquet file, a folder of Parquet files, or a CSV file,
which is first rewritten once as Parquet in the party's working folder so that a column can be read
alone), and :func:`prepare_streamed` prepares the aligned rows without ever holding the table:

1. the **fit** reads one column at a time (one float64 column of 10M rows is 80 MB) and fits
   :class:`~verticalfs.data.preprocess.PartyPreprocessor` on that column's training rows; the
   per-column fits are merged into the party's preprocessor. Every statistic the preprocessor
   takes (min/max, mean/std, medians, quartiles, category levels, most frequent values) is a
   per-column statistic, so the merged fit is the fit of the whole block: byte for byte for
   min-max and robust scaling and every imputation (the same numpy calls on the same values);
   for standard scaling the mean and variance are summed over one column instead of a matrix,
   which numpy adds in another order, so they may differ in the last bits (tested to 1e-12);
2. the **transform** reads record batches of all the party's columns, keeps the aligned rows of
   each batch, applies the fitted preprocessor (row by row the same arithmetic as in memory) and
   writes them to one float32 memory-mapped file per split, in the label holder's row order.

:class:`~verticalfs.party.LocalData` then holds tensors backed by those files: a mini-batch reads
its rows by index, and the operating system keeps in memory only the pages in use. The seam for an
engine beyond one machine (Ray Data, Spark) is :class:`StreamedTable`'s three reads: ``ids()``,
``column(name)`` and ``batches(columns)`` (docs/scale.md).
"""

from __future__ import annotations

import mmap
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from verticalfs.data.preprocess import PartyPreprocessor
from verticalfs.exceptions import DataError

#: rows of one record batch of the transform pass (64k rows x 50 columns of float64: 26 MB)
BATCH_ROWS = 1 << 16
#: the transform pass reads as many columns at once as keep about this many bytes of a row group
#: decoded (see :func:`prepare_streamed`): Parquet decodes a row group's column chunk whole; at row
#: groups of 500k rows, 50 float32 columns read together held +266 MB of resident memory, 10 columns
#: +61 MB, one +15 (pyarrow's ParquetFile.iter_batches, 2026-11-26), about 10 bytes a value. Each
#: group is one more pass over the row groups (the same bytes read in all: a column chunk once).
DECODED_BYTES = 64 << 20
#: rows of the transform written to a memory map between two releases of the pages they touched
WRITE_ROWS = 4096
#: files at least this large are read streamed by a deployed party (``stream_above_mb``)
DEFAULT_STREAM_ABOVE_MB = 256.0


_ALLOCATORS_BOUND = False


def bound_allocators() -> None:
    """Make this process give freed memory back to the system at once (called when a party reads
    a table in pieces, i.e. a large one): glibc's ``malloc`` keeps its mmap threshold at 128 KiB
    instead of raising it after each large free (numpy's temporaries of a few MB then come from
    ``mmap`` and return to the system when freed, rather than staying in the heap), and pyarrow
    allocates through it too (its default pool, mimalloc or jemalloc, keeps freed pages for
    reuse). Measured on a 300k-row label party's process (benchmarks/scale/RESULTS.md): the
    connection's peak -96 MB, the epoch's -50 MB. Process-wide and idempotent; a no-op where either
    allocator is not there."""
    global _ALLOCATORS_BOUND
    if _ALLOCATORS_BOUND:
        return
    _ALLOCATORS_BOUND = True
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD: fixed, no dynamic raise
    except (OSError, AttributeError):  # not glibc
        pass
    try:
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())  # malloc, bounded as above (mimalloc kept freed pages)
    except (ImportError, AttributeError):
        pass


def _pyarrow():
    try:
        import pyarrow  # noqa: F401
        import pyarrow.dataset as ds
    except ImportError:  # pragma: no cover - pyarrow is a dependency of the deploy extra
        raise DataError("reading a party's table in pieces needs pyarrow; run `pip install pyarrow`") from None
    return ds


class IdLookup:
    """A party's ids, sorted, with each one's file row: the rows of a list of ids found by a binary
    search (vectorised), in ``n x (id width + 8)`` bytes, not a hash table of Python strings.

    ``sorted`` is the ids in sorted order (a numpy ``str`` array), ``rows[k]`` the file row of
    ``sorted[k]``.
    """

    def __init__(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids)
        if ids.dtype.kind != "U":
            ids = ids.astype(str)
        self.rows = np.argsort(ids, kind="stable")
        self.sorted = ids[self.rows]

    def __len__(self) -> int:
        return len(self.sorted)

    def repeated(self, most: int) -> np.ndarray:
        """Up to ``most`` ids held more than once."""
        s = self.sorted
        return np.unique(s[1:][s[1:] == s[:-1]])[:most] if len(s) > 1 else s[:0]

    def file_order(self) -> np.ndarray:
        out = np.empty_like(self.sorted)
        out[self.rows] = self.sorted
        return out

    def positions(self, ids) -> np.ndarray:
        """The file row of each of ``ids`` (int64), -1 for an id not held."""
        q = np.asarray(ids)
        if q.dtype.kind != "U":
            q = q.astype(str) if len(q) else q.astype("<U1")
        out = np.full(len(q), -1, dtype=np.int64)
        if not len(self.sorted):
            return out
        for a in range(0, len(q), BATCH_ROWS):  # a block at a time: no copy of the ids found beside them
            part = q[a:a + BATCH_ROWS]
            j = np.searchsorted(self.sorted, part)
            j[j == len(self.sorted)] = 0
            hit = self.sorted[j] == part
            out[a:a + BATCH_ROWS][hit] = self.rows[j[hit]]
        return out


class StreamedTable:
    """A party's table, read in pieces (see the module docstring).

    Parameters
    ----------
    party : str
    path : path
        A ``.parquet`` file, a folder of Parquet files, or a ``.csv`` file (rewritten once as Parquet
        in ``work_dir``).
    id_column : str
    work_dir : path, optional
        Where the CSV's Parquet copy and the prepared matrices go (default: a new temporary folder,
        removed by :meth:`close`).
    """

    def __init__(self, party: str, path: str | Path, *, id_column: str = "id", work_dir: str | Path | None = None,
                 na_values: Sequence[str] | None = None, delimiter: str = ",", encoding: str = "utf-8") -> None:
        ds = _pyarrow()
        bound_allocators()
        self.party, self.path, self.id_column = party, Path(path), id_column
        self._own_dir = work_dir is None
        self.work_dir = Path(tempfile.mkdtemp(prefix=f"verticalfs-{party}-")) if work_dir is None else Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        src = self.path
        try:
            if src.is_file() and src.suffix.lower() == ".csv":
                src = self._csv_to_parquet(ds, na_values, delimiter, encoding)
            self.dataset = ds.dataset(str(src), format="parquet")
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise DataError(f"party {party!r}: cannot read {str(self.path)!r} as a table: {exc}") from None
        self.columns = list(self.dataset.schema.names)
        if id_column not in self.columns:
            raise DataError(f"party {party!r}: {str(self.path)!r} has no id column {id_column!r}; its columns are "
                            f"{self.columns}")
        self.n_rows = int(self.dataset.count_rows())

    def _csv_to_parquet(self, ds, na_values, delimiter: str, encoding: str) -> Path:
        import pyarrow.csv as pcsv

        out = self.work_dir / "table.parquet"
        conv = pcsv.ConvertOptions(null_values=["", "NA", "NaN", "nan", "null", *(na_values or [])],
                                   strings_can_be_null=True, column_types={self.id_column: "string"})
        src = ds.dataset(str(self.path), format=ds.CsvFileFormat(
            parse_options=pcsv.ParseOptions(delimiter=delimiter), convert_options=conv,
            read_options=pcsv.ReadOptions(encoding=encoding, block_size=1 << 24)))
        import pyarrow.parquet as pq

        writer = None
        try:
            for batch in src.to_batches(use_threads=False):
                if writer is None:
                    writer = pq.ParquetWriter(str(out), batch.schema)
                writer.write_batch(batch)
        finally:
            if writer is not None:
                writer.close()
        return out

    # ------------------------------------------------------------------ the three reads (the seam)
    def ids(self) -> np.ndarray:
        """The id column as text (a numpy ``str`` array), in file order (checked: no missing and no
        repeated id). Converted a record batch at a time: the whole column never exists as Python
        strings (about 60 bytes an id more than the array's fixed width)."""
        return self.id_lookup().file_order()

    def id_lookup(self) -> IdLookup:
        """The ids as an :class:`IdLookup` (sorted, with each one's file row), checked as :meth:`ids`."""
        col = self.dataset.to_table(columns=[self.id_column], use_threads=False).column(0)
        if col.null_count:
            raise DataError(f"party {self.party!r}: {col.null_count} rows of {str(self.path)!r} have no id in "
                            f"column {self.id_column!r}; give every row an id")
        import pyarrow.compute as pc

        col = col.cast("string")
        # the widest id first, then one array filled a batch at a time (no second copy of the ids)
        width = (pc.max(pc.utf8_length(col)).as_py() or 1) if len(col) else 1
        ids = np.empty(len(col), dtype=f"<U{width}")
        for a in range(0, len(col), BATCH_ROWS):
            ids[a:a + BATCH_ROWS] = col.slice(a, BATCH_ROWS).to_numpy(zero_copy_only=False)
        del col
        look = IdLookup(ids)
        del ids
        dup = look.repeated(3)
        if len(dup):
            raise DataError(f"party {self.party!r}: ids repeat in column {self.id_column!r} of {str(self.path)!r} "
                            f"(e.g. {dup.tolist()}); every row needs its own id")
        return look

    def column(self, name: str) -> pd.Series:
        """One whole column (all rows, file order)."""
        return self.dataset.to_table(columns=[name], use_threads=False).column(0).to_pandas()

    def batches(self, columns: Sequence[str], batch_rows: int = BATCH_ROWS) -> Iterator[tuple[int, pd.DataFrame]]:
        """``(first row, frame)`` of consecutive record batches of ``columns``, in file order."""
        offset = 0
        # a file at a time through ParquetFile.iter_batches (no dataset scanner's read-ahead), a row
        # group's column chunks read page by page, not buffered whole (pre_buffer): at 1M rows in
        # row groups of 500k, 50 columns read at once held +266 MB here against +474 MB through the
        # dataset scanner (benchmarks/scale/RESULTS.md)
        import pyarrow.parquet as pq

        for frag in self.dataset.get_fragments():
            f = pq.ParquetFile(frag.path, pre_buffer=False, buffer_size=1 << 20)
            try:
                for b in f.iter_batches(batch_size=batch_rows, columns=list(columns), use_threads=False):
                    if b.num_rows:
                        yield offset, b.to_pandas()
                        offset += b.num_rows
            finally:
                f.close()

    def largest_row_group(self) -> int:
        """Rows of the table's largest Parquet row group (Parquet decodes a column's chunk of a row
        group whole: what one column read at a time holds)."""
        most = 0
        for frag in self.dataset.get_fragments():
            md = frag.metadata
            most = max([most] + [md.row_group(i).num_rows for i in range(md.num_row_groups)])
        return most

    def schema_frame(self) -> pd.DataFrame:
        """An empty frame with the table's columns and types (for the column checks)."""
        return self.dataset.schema.empty_table().to_pandas()

    # ------------------------------------------------------------------ the engine's seam (verticalfs.engine)
    def check_values(self, columns: Sequence[str], categorical: Sequence[str]) -> None:
        """Values training cannot use (infinite, or a range that overflows), a column at a time."""
        from verticalfs.data.preprocess import PartyPreprocessor

        for c in columns:
            if c not in set(categorical):
                PartyPreprocessor.check_values(self.party, self.column(c).to_frame(c), [], where=str(self.path))

    def prepare(self, pos: np.ndarray, codes: np.ndarray, cols: Sequence[str], cats: Sequence[str], *,
                scaling: str, impute: str, splits: Sequence[str], out_dir: str | Path, **kw):
        """:func:`prepare_streamed` over this table."""
        return prepare_streamed(self, pos, codes, cols, cats, scaling=scaling, impute=impute, splits=splits,
                                out_dir=out_dir, **kw)

    def psi_executor(self):
        """None: the PSI engine's own threads."""
        return None

    def close(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)


def _typed(s: pd.Series, categorical: bool) -> pd.Series:
    """As :func:`~verticalfs.data.user.party_block` types a column: text (missing kept) or float64."""
    return s.where(s.isna(), s.astype(str)) if categorical else s.astype(np.float64)


def fit_streamed(table: StreamedTable, rows: np.ndarray, cols: Sequence[str], cats: Sequence[str], *,
                 scaling: str, impute: str) -> PartyPreprocessor:
    """The party's preprocessor fitted on the file rows ``rows`` (its training rows), a column at a
    time (see the module docstring)."""
    cat_set = set(cats)
    where = str(table.path)
    merged = PartyPreprocessor(table.party, [], [], scaling, impute)
    constant = True
    from verticalfs.utils.progress import Ticker

    ticker = Ticker(f"party {table.party!r}: fitting its preprocessing on {len(rows):,} training rows", len(cols),
                    "columns")
    for j, c in enumerate(cols):
        ticker(j)
        s = _typed(table.column(c).iloc[rows].reset_index(drop=True), c in cat_set)
        one = PartyPreprocessor.fit(table.party, pd.DataFrame({c: s}), [c] if c in cat_set else [],
                                    scaling=scaling, impute=impute, where=where, check_constant=False)
        merged.numeric += one.numeric
        merged.categorical += one.categorical
        merged.fill.update(one.fill)
        merged.scale += one.scale
        merged.offset += one.offset
        merged.quantiles += one.quantiles
        merged.categories.update(one.categories)
        merged.warnings += one.warnings
        if c in cat_set:
            constant = constant and len(one.categories[c]) <= 1
        else:
            with np.errstate(invalid="ignore"):
                v = s.to_numpy(dtype=np.float64)
                constant = constant and not (np.nanmax(v) > np.nanmin(v) if len(v) and not np.isnan(v).all() else False)
    # numeric columns first, then categorical ones, as PartyPreprocessor.fit orders them
    if len(rows) > 1 and cols and constant:
        merged.warnings.append(PartyPreprocessor.constant_warning(table.party, list(cols), f" in {where}"))
    return merged


#: seconds between two releases of the memory-mapped matrices' pages (:func:`keep_pages_released`)
RELEASE_EVERY_S = 0.25
_mapped: dict[int, weakref.ref] = {}  # id -> the live memory-mapped arrays (arrays are not hashable)
_releaser: threading.Thread | None = None
_releaser_lock = threading.Lock()


def release_pages(arr, first: int | None = None, stop: int | None = None) -> None:
    """Unmap the resident pages of a memory-mapped array from this process (``MADV_DONTNEED``):
    they stay in the system's page cache (written pages included: the mapping is shared, nothing is
    lost), and a later read faults them in again; but they no longer count in the process's
    resident memory. Without it, writing or reading a split's matrix once leaves every page of it
    resident: 200 bytes a row at 50 columns, 2 GB at 10M rows. ``first``/``stop``: only the pages
    of those rows."""
    mm = getattr(arr, "_mmap", None)
    if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        try:
            if first is None:
                mm.madvise(mmap.MADV_DONTNEED)
            else:  # rows first..stop-1 only (the map starts at the file's start: np.memmap's offset 0)
                row = arr.strides[0]
                start = first * row // mmap.PAGESIZE * mmap.PAGESIZE
                mm.madvise(mmap.MADV_DONTNEED, start, max(0, min(len(mm), stop * row) - start))
        except (OSError, ValueError):  # closed, or not supported here
            pass


#: 2 MB regions of a memory-mapped matrix :func:`read_rows` reads rows from between two releases of
#: the pages it mapped. A read fault maps the faulting page's whole *folio* of the page cache, and
#: Linux (6.18 here, ext4) keeps a write's pages as one folio up to the write's size, 2 MB at most:
#: after the ray engine's writes of whole ranges, each random row of an epoch mapped up to 2 MB,
#: and a 10M-row party's epoch (random mini-batches of 1,024 rows, released every 4,096 rows)
#: peaked at 1,731 MB where its preparation had reached 1,220 (load 7-8). Releasing after every 64
#: regions touched bounds it to about 128 MB, and sequential reads (a few regions per 10,000 rows)
#: still release seldom. Measured (random batches of 1,024 rows, 50 float32 columns, 2026-11-28,
#: load 7-8): 6.3M rows written 2 MB at a time, released every 4,096 rows 11.5 s and +1,034 MB,
#: every 64 rows 11.9 s and +109 MB; written 64 KB at a time (folios no larger than the kernel's
#: fault-around window) and released every 4,096 rows, 34.3 s and +65 MB (smaller, many more faults);
#: at 630k rows 0.21, 0.36 and 1.56 s. Sequential blocks of 65,536 rows: every 64 rows cost 10x.
READ_FOLIOS = 64
_FOLIO_SHIFT = 21


def read_rows(arr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``arr[rows]`` (a float32 copy) read from a memory-mapped matrix in ascending row order, in
    pieces of rows within :data:`READ_FOLIOS` 2 MB regions of the file, the pages of each piece
    released after it: 100k rows drawn from a million touch nearly every page of the map, all of
    which a plain ``arr[rows]`` leaves resident (200 MB at 50 columns)."""
    rows = np.asarray(rows, dtype=np.int64)
    if not isinstance(arr, np.memmap):
        return np.asarray(arr[rows], dtype=np.float32)
    out = np.empty((len(rows),) + arr.shape[1:], dtype=np.float32)
    if not len(rows):
        return out
    order = np.argsort(rows, kind="stable")
    srt = rows[order]
    region = (srt * max(1, arr.strides[0])) >> _FOLIO_SHIFT
    new = np.ones(len(srt), dtype=np.int64)
    new[1:] = region[1:] != region[:-1]
    piece = (np.cumsum(new) - 1) // READ_FOLIOS
    cuts = [0, *(np.flatnonzero(piece[1:] != piece[:-1]) + 1).tolist(), len(srt)]
    for a, b in zip(cuts[:-1], cuts[1:], strict=False):
        r = srt[a:b]
        out[order[a:b]] = arr[r]
        release_pages(arr, int(r[0]), int(r[-1]) + 1)
    return out


def _release_loop() -> None:
    import time

    while True:
        time.sleep(RELEASE_EVERY_S)
        for r in list(_mapped.values()):
            m = r()
            if m is not None:
                release_pages(m)
            del m


def select_columns(src: np.memmap, idx: np.ndarray) -> np.ndarray:
    """Columns ``idx`` of a memory-mapped float32 matrix, written to a memory-mapped file beside
    it a block of :data:`BATCH_ROWS` rows at a time, both maps' pages released after each block (a
    selection method keeping some columns of a party of millions of rows: a copy in memory was 3M x
    25 x 4 bytes = 300 MB). An empty result is an ordinary array."""
    import secrets

    idx = np.asarray(idx, dtype=np.int64)
    if not len(src) or not len(idx):
        return np.zeros((len(src), len(idx)), dtype=np.float32)
    path = Path(src.filename)
    out = np.memmap(path.with_name(f"{path.stem}-kept-{secrets.token_hex(4)}.f32"), dtype=np.float32, mode="w+",
                    shape=(len(src), len(idx)))
    for a in range(0, len(src), BATCH_ROWS):
        out[a:a + BATCH_ROWS] = src[a:a + BATCH_ROWS][:, idx]
        release_pages(src, a, a + BATCH_ROWS)
        release_pages(out, a, a + BATCH_ROWS)
    out.flush()
    keep_pages_released(out)
    return out


#: :func:`spliced_memmap` maps its files into addresses aligned to this (2 MB, a huge page): a
#: file's byte ``x`` sits at an address congruent to ``x``, so that its page cache's 2 MB folios map
#: whole (one fault for 2 MB; measured 2026-11-28, an epoch over 1M rows spliced at unaligned
#: addresses took 500k page faults where one file's map took 82k)
SPLICE_ALIGN = 1 << 21


def splice_pad(at: int) -> int:
    """The byte of its file where :func:`spliced_memmap` expects the rows that start at byte
    ``at`` of the matrix (files hold a hole of that many bytes first)."""
    return int(at) % SPLICE_ALIGN


class _Splice:
    """Files mapped end to end into one range of addresses (Linux, ``MAP_FIXED``), read and write,
    shared; the ``_mmap`` of :func:`spliced_memmap`'s array, with the part of :class:`mmap.mmap`'s
    interface the helpers here use (``madvise``, ``flush``, ``close``, ``len``). It exposes its
    bytes through ``__array_interface__``, so an array over it keeps it (and its mapping) alive."""

    def __init__(self, paths: Sequence[str | Path], sizes: Sequence[int]) -> None:
        import ctypes
        import os

        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        for f in (libc.munmap, libc.madvise, libc.msync):
            f.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + ([ctypes.c_int] if f is not libc.munmap else [])
        self._libc, self._len, self._addr = libc, int(sum(sizes)), 0
        page = mmap.PAGESIZE
        self._span = -(-max(1, self._len) // page) * page
        failed = ctypes.c_void_p(-1).value
        addr = libc.mmap(None, self._span + SPLICE_ALIGN, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000, -1, 0)
        if addr in (None, failed):  # (0: PROT_NONE; 0x4000: MAP_NORESERVE: a reservation of addresses only)
            raise OSError(ctypes.get_errno(), "cannot reserve addresses for the spliced files")
        start = -(-int(addr) // SPLICE_ALIGN) * SPLICE_ALIGN  # (the reservation's aligned part kept)
        if start > addr:
            libc.munmap(addr, start - addr)
        libc.munmap(start + self._span, addr + SPLICE_ALIGN - start)
        self._addr = start
        at = 0
        try:
            for i, (path, n) in enumerate(zip(paths, sizes, strict=True)):  # (n: bytes from splice_pad(at))
                if n and i < len(sizes) - 1 and n % page:
                    raise ValueError(f"{str(path)!r}: {n} bytes, not a whole number of {page}-byte pages; only the "
                                     "last of the spliced files may end inside a page")
                if not n:
                    continue
                fd = os.open(path, os.O_RDWR)
                try:
                    r = libc.mmap(self._addr + at, n, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | 0x10, fd,
                                  splice_pad(at))
                finally:
                    os.close(fd)
                if r != self._addr + at:  # (0x10: MAP_FIXED, into its place in the reservation)
                    raise OSError(ctypes.get_errno(), f"cannot map {str(path)!r} into its place")
                at += n
        except BaseException:
            self.close()
            raise
        self.__array_interface__ = {"shape": (self._len,), "typestr": "|u1", "data": (self._addr, False),
                                    "version": 3}

    def __len__(self) -> int:
        return self._len

    def madvise(self, option: int, start: int = 0, length: int | None = None) -> None:
        import ctypes

        if not self._addr:
            raise ValueError("the spliced files are closed")
        n = self._len - start if length is None else length
        if n > 0 and self._libc.madvise(self._addr + start, n, option):
            raise OSError(ctypes.get_errno(), "madvise of the spliced files failed")

    def flush(self) -> None:
        if self._addr:
            self._libc.msync(self._addr, self._span, 4)  # (MS_SYNC)

    def close(self) -> None:
        if self._addr:
            self._libc.munmap(self._addr, self._span)
            self._addr = 0

    def __del__(self) -> None:
        self.close()


class SplicedMemmap(np.memmap):
    """An ``np.memmap`` over files laid end to end (:func:`spliced_memmap`)."""

    def flush(self) -> None:
        if self._mmap is not None:
            self._mmap.flush()


def spliced_memmap(paths: Sequence[str | Path], shape: tuple[int, int], dtype=np.float32) -> np.memmap:
    """A matrix of ``shape`` whose consecutive rows are in the files ``paths`` (each file's rows in
    order from byte :func:`splice_pad` of the matrix byte where they start; every file's rows but
    the last file's a whole number of pages), memory-mapped as one array (Linux: each file mapped
    into its place in one range of addresses). It is an ``np.memmap`` (``filename``: the first
    file's), read and write, shared, so that
    :func:`release_pages`, :func:`read_rows`, :func:`select_columns` and :func:`keep_pages_released`
    treat it as the map of one file. The ray engine's range writers write a file each: two
    buffered writers of one file take turns on its inode lock (``benchmarks/scale/writers.py``)."""
    dt = np.dtype(dtype)
    row = int(shape[1]) * dt.itemsize
    sizes, at = [], 0
    for p in paths:  # (each file's rows: its bytes after its hole, whole rows)
        n = max(0, Path(p).stat().st_size - splice_pad(at)) // row * row if row else 0
        sizes.append(n)
        at += n
    if at != int(shape[0]) * row:
        raise ValueError(f"the files {[str(p) for p in paths]} hold {at // max(row, 1)} rows of "
                         f"{shape[1]} columns where {shape[0]} are spliced")
    splice = _Splice(paths, sizes)
    raw = np.asarray(splice)  # (its base: the splice, kept alive by every view)
    arr = np.ndarray.__new__(SplicedMemmap, tuple(int(x) for x in shape), dtype=dt, buffer=raw)
    arr._mmap, arr.filename, arr.offset, arr.mode = splice, str(Path(paths[0]).resolve()), 0, "r+"
    return arr


def keep_pages_released(arr) -> None:
    """Release ``arr``'s pages every :data:`RELEASE_EVERY_S` seconds while it lives (a daemon
    thread for all of them): training reads mini-batches from the whole matrix, so without this
    an epoch leaves the whole matrix resident in the process."""
    global _releaser
    if getattr(arr, "_mmap", None) is None:
        return
    key = id(arr)
    _mapped[key] = weakref.ref(arr, lambda _r, key=key: _mapped.pop(key, None))
    with _releaser_lock:
        if _releaser is None:
            _releaser = threading.Thread(target=_release_loop, name="verticalfs-release-pages", daemon=True)
            _releaser.start()


def prepare_streamed(table: StreamedTable, pos: np.ndarray, codes: np.ndarray, cols: Sequence[str],
                     cats: Sequence[str], *, scaling: str, impute: str, splits: Sequence[str],
                     out_dir: str | Path, batch_rows: int = BATCH_ROWS, column_group: int | None = None):
    """The aligned rows prepared into float32 memory-mapped files, one per split.

    ``pos[i]`` is the file row of the label holder's row ``i`` and ``codes[i]`` its split (an index
    into ``splits``). Returns ``(preprocessor, {split: np.memmap})``; each split's rows are in the
    label holder's order. ``column_group``: the columns read and prepared in one pass over the
    file (default: as many as keep :data:`DECODED_BYTES` of the largest row group decoded).
    The preprocessor is fitted on the training rows (code 0, :func:`fit_streamed`), then applied by
    :func:`transform_streamed`.
    """
    pos = np.asarray(pos, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int64)
    pp = fit_streamed(table, pos[codes == 0], cols, cats, scaling=scaling, impute=impute)
    maps = transform_streamed(table, pp, pos, codes, cols, cats, splits=splits, out_dir=out_dir,
                              batch_rows=batch_rows, column_group=column_group)
    return pp, maps


def transform_streamed(table: StreamedTable, pp: PartyPreprocessor, pos: np.ndarray | None,
                       codes: np.ndarray | None, cols: Sequence[str], cats: Sequence[str], *,
                       splits: Sequence[str], out_dir: str | Path,
                       batch_rows: int = BATCH_ROWS, column_group: int | None = None) -> dict[str, np.ndarray]:
    """The file rows ``pos`` prepared by the fitted ``pp`` into float32 memory-mapped files
    ``<out_dir>/<party>-<split>.f32``, one per split (``codes[i]``: row ``i``'s split, an index into
    ``splits``), each split's rows in the order of ``pos`` (``None``: every file row, in file order,
    in the one split of ``splits``); ``{split: np.memmap}`` (an empty split:
    an ordinary empty array), their pages released as they are written and kept released
    (:func:`keep_pages_released`). ``cols``: the columns ``pp`` prepares, in file order; ``cats``:
    the categorical ones. Training prepares its aligned rows with it (:func:`prepare_streamed`), a
    party its scoring file with a saved model's preprocessor (every row, in file order)."""
    if column_group is None:
        column_group = max(1, DECODED_BYTES // (10 * max(1, table.largest_row_group())))
    column_group = max(1, int(column_group))
    whole = pos is None  # every file row, in file order, in one split: no row maps (17 bytes a row)
    if whole:
        n = table.n_rows
        pos, codes = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if len(splits) != 1:
            raise ValueError("every row (pos=None) goes to one split")
    pos = np.asarray(pos, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int64)
    d = len(pp.feature_names)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # file row -> (split, destination row) for the aligned rows; -1 elsewhere
    split_of = np.full(0 if whole else table.n_rows, -1, dtype=np.int8)
    dest = np.full(0 if whole else table.n_rows, -1, dtype=np.int64)
    maps: dict[str, np.ndarray] = {}
    for k, s in enumerate(splits):
        if whole:
            rows_k = n
        else:
            mine = np.flatnonzero(codes == k)
            split_of[pos[mine]] = k
            dest[pos[mine]] = np.arange(len(mine))
            rows_k = len(mine)
        f = out_dir / f"{table.party}-{s}.f32"
        # np.memmap cannot map an empty file: an empty split is an ordinary empty array
        maps[s] = (np.memmap(f, dtype=np.float32, mode="w+", shape=(rows_k, d)) if rows_k and d
                   else np.zeros((rows_k, d), dtype=np.float32))
    cat_set = set(cats)
    cols = list(cols)
    # a group of columns at a time: Parquet decodes a row group's column chunk whole, so reading all
    # 50 columns of a 500k-row group held ~270 MB of decoded pages at once (+530 MB over the pass
    # with the frames); a group keeps about DECODED_BYTES of it. Each step is per column, so the
    # groups' outputs are the whole block's to the bit (PartyPreprocessor.subset).
    groups = [cols[a:a + column_group] for a in range(0, len(cols), column_group)] or [[]]
    from verticalfs.utils.progress import Ticker

    ticker = Ticker(f"party {table.party!r}: preparing its rows", len(groups) * table.n_rows, "file rows read")
    for g, group in enumerate(groups):
        sub, at = pp.subset(group) if len(groups) > 1 else (pp, None)
        span = (slice(int(at[0]), int(at[-1]) + 1) if at is not None and len(at)
                and (np.diff(at) == 1).all() else None)
        for first, frame in table.batches(group, batch_rows):
            ticker(g * table.n_rows + first + len(frame), f" (columns {cols.index(group[0]) + 1 if group else 0}-"
                   f"{cols.index(group[-1]) + 1 if group else 0} of {len(cols)})" if ticker.due() else "")
            k_rows = (np.zeros(len(frame), dtype=np.int8) if whole  # dest[r] = r
                      else split_of[first:first + len(frame)])
            keep = np.flatnonzero(k_rows >= 0)
            if not len(keep):
                continue
            X = frame.iloc[keep].reset_index(drop=True)
            del frame
            for c in group:
                X[c] = _typed(X[c], c in cat_set)
            A = sub.transform(X, where=str(table.path))
            for k, s in enumerate(splits):
                m = k_rows[keep] == k
                if m.any():
                    rows = first + keep[m] if whole else dest[first + keep[m]]
                    # a batch's rows land all over the split (the label holder's order): written in
                    # ascending order a few thousand at a time, each piece's pages released after it
                    # (a whole batch at once left ~all of the split's pages resident: 180 MB at 1M rows)
                    o = np.argsort(rows)
                    rows, m = rows[o], np.flatnonzero(m)[o]
                    for a in range(0, len(rows), WRITE_ROWS):
                        r, mi = rows[a:a + WRITE_ROWS], m[a:a + WRITE_ROWS]
                        if at is None:
                            maps[s][r] = A[mi]
                        elif span is not None:  # contiguous prepared columns (no one-hot among them)
                            maps[s][r, span] = A[mi]
                        else:
                            maps[s][r[:, None], at[None, :]] = A[mi]
                        release_pages(maps[s], int(r[0]), int(r[-1]) + 1)
    ticker.end(f" ({d} features)")
    for m in maps.values():
        if isinstance(m, np.memmap):
            m.flush()
            release_pages(m)
            keep_pages_released(m)
    import pyarrow as pa

    pa.default_memory_pool().release_unused()  # the batches' buffers back to the system, not kept by the pool
    return maps


def file_bytes(path: str | Path) -> int:
    """A file's size, or a folder's (of Parquet files) total."""
    p = Path(path)
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return p.stat().st_size if p.exists() else 0



# ------------------------------------------------------------------ the in-process path, in pieces
class _Rows:
    """The shape of a streamed block's aligned rows (``len``, ``shape``, ``columns``): what a
    :class:`~verticalfs.data.vertical.PartyBlock` is checked by, without the rows."""

    def __init__(self, n: int, columns: Sequence[str]) -> None:
        self.columns = pd.Index(list(columns))
        self.shape = (int(n), len(self.columns))

    def __len__(self) -> int:
        return self.shape[0]


def streamed_block(party: str, table: StreamedTable, pos: np.ndarray, cols: Sequence[str], cats: Sequence[str]):
    """A :class:`~verticalfs.data.vertical.PartyBlock` whose rows stay in ``table`` (file rows
    ``pos`` in the data set's order): :meth:`VerticalDataset.prepare` checks its values a column at
    a time and prepares it with :func:`prepare_streamed` into memory-mapped matrices (the deployed
    party's code), byte for byte the in-memory preparation where :func:`prepare_streamed` is."""
    from verticalfs.data.vertical import PartyBlock

    class StreamedBlock(PartyBlock):
        def check_values(self) -> None:
            self.table.check_values(self.columns_, self.categorical)

        def prepare(self, idx: dict, *, scaling: str, impute: str):
            import secrets

            from verticalfs.data.vertical import SPLITS, PartyData

            codes = np.full(len(self.pos), -1, dtype=np.int64)
            for k, s in enumerate(SPLITS):
                codes[idx[s]] = k
            keep = codes >= 0
            pp, maps = prepare_streamed(self.table, self.pos[keep], codes[keep], self.columns_, self.categorical,
                                        scaling=scaling, impute=impute, splits=SPLITS,
                                        out_dir=self.table.work_dir / f"prepared-{secrets.token_hex(4)}")
            out = PartyData(name=self.name, feature_names=pp.feature_names, X=maps, preprocessor=pp,
                            sources=pp.sources)
            out._table = self.table  # type: ignore[attr-defined]  # its folder lives while the matrices do
            return out

    b = StreamedBlock(name=party, X=_Rows(len(pos), cols), categorical=list(cats),  # type: ignore[arg-type]
                      source=str(table.path))
    b.table, b.pos, b.columns_ = table, np.asarray(pos, dtype=np.int64), list(cols)  # type: ignore[attr-defined]
    return b
