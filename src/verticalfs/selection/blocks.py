"""A party's columns read in row blocks: the filter methods' statistics without a copy of the table
(issue 39 item 3).

A deployed party with a large table holds its prepared matrix in a float32 memory-mapped file
(:mod:`verticalfs.data.stream`). The filter methods' statistics (bin cut points, per-bin and
per-class counts, per-class sums) are sums over rows, or per-column order statistics, so they are
computed here over blocks of :data:`BLOCK_ROWS` rows at a time (:func:`row_blocks`) or over a few
whole columns at a time (:func:`column_groups`, for exact quantiles, which need a column's every
value): the memory is a block, or a group of columns about as large as a block, never the table.

Reading a block touches the pages of the mapped file, which the kernel then counts in the party's
resident memory although they are only cached file pages. After a block is used, :func:`release`
gives the pages of a shared file mapping back (``madvise(MADV_DONTNEED)``: the data stays in the
file and the page cache; the next read of those rows faults them in again). It does nothing for an
array in ordinary memory.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from collections.abc import Iterator

import numpy as np

#: rows of one block (64k rows x 50 columns of float64: 26 MB)
BLOCK_ROWS = 1 << 16

_MADV_DONTNEED = 4  # Linux
_libc = None


def block_rows(rows: int | None = None) -> int:
    """The block size in rows: ``rows``, or :data:`BLOCK_ROWS` (read at call time, so a test may
    lower it)."""
    return max(1, int(BLOCK_ROWS if rows is None else rows))


def _file_mapping(addr: int) -> tuple[int, int] | None:
    """``(start, end)`` of the shared file mapping holding address ``addr``, from /proc/self/maps;
    None for anything else (anonymous or private memory, or not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split(maxsplit=5)
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                if lo <= addr < hi:
                    shared = len(parts[1]) == 4 and parts[1][3] == "s"
                    named = len(parts) == 6 and parts[5].startswith("/") and int(parts[4]) != 0
                    return (lo, hi) if shared and named else None
    except (OSError, ValueError, IndexError):
        return None
    return None


class _Releaser:
    """Gives back the pages of rows ``[s, e)`` of a C-contiguous array in a shared file mapping."""

    def __init__(self, X: np.ndarray) -> None:
        self.span = None
        if not isinstance(X, np.ndarray) or X.ndim != 2 or not X.flags.c_contiguous or X.nbytes == 0:
            return
        addr = X.ctypes.data
        span = _file_mapping(addr)
        if span is not None and addr + X.nbytes <= span[1]:
            self.span = span
            self.addr, self.row = addr, X.strides[0]

    def __call__(self, s: int, e: int) -> None:
        global _libc
        if self.span is None or e <= s:
            return
        page = mmap.PAGESIZE
        lo = max(self.span[0], (self.addr + s * self.row) // page * page)
        hi = min(self.span[1], -(-(self.addr + e * self.row) // page) * page)
        if hi <= lo:
            return
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        _libc.madvise(lo, hi - lo, _MADV_DONTNEED)  # a hint: a failure only leaves the pages resident


def release(X: np.ndarray, s: int, e: int) -> None:
    """Give back the resident pages of rows ``[s, e)`` of ``X`` if ``X`` lies in a shared file
    mapping (see the module docstring); nothing otherwise."""
    _Releaser(np.asarray(X))(s, e)


def _pieces(rows: np.ndarray, step: int) -> Iterator[tuple[int, int]]:
    """``(a, b)``: consecutive runs of ``rows`` of at most ``step`` indices whose rows lie in one
    window of ``step`` rows of the table when ``rows`` is sorted (so each run's pages are a block's,
    released before the next run is read); runs of ``step`` indices otherwise."""
    n = len(rows)
    if n == 0:
        return
    if n > 1 and not (rows[1:] >= rows[:-1]).all():
        for a in range(0, n, step):
            yield a, min(n, a + step)
        return
    window = np.asarray(rows, dtype=np.int64) // step
    cuts = np.flatnonzero(window[1:] != window[:-1]) + 1
    for a, b in zip(np.r_[0, cuts].tolist(), np.r_[cuts, n].tolist(), strict=True):
        for c in range(a, b, step):
            yield c, min(b, c + step)


def row_blocks(X, rows: np.ndarray | None = None, *, dtype=np.float64, size: int | None = None,
               columns: slice | None = None) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(first, last, block)`` over the rows of ``X`` (all, or the indices ``rows``): ``block`` is
    a copy in ``dtype`` of at most ``size`` rows (default :data:`BLOCK_ROWS`); ``first:last`` are
    positions in ``rows`` (or rows of ``X``). The pages read are released after each block (for
    sorted ``rows``, e.g. a sample, each block's rows lie within ``size`` rows of the table).
    ``columns``: copy only these columns of each block (all rows only)."""
    X = np.asarray(X)
    step = block_rows(size)
    free = _Releaser(X)
    if rows is None:
        cols = slice(None) if columns is None else columns
        for s in range(0, X.shape[0], step):
            e = min(X.shape[0], s + step)
            block = np.array(X[s:e, cols], dtype=dtype)
            free(s, e)
            yield s, e, block
        return
    rows = np.asarray(rows)
    for a, b in _pieces(rows, step):
        r = rows[a:b]
        block = np.asarray(X[r], dtype=dtype)
        free(int(r.min()), int(r.max()) + 1)
        yield a, b, block


def take_rows(X, rows, *, dtype=np.float64, size: int | None = None) -> np.ndarray:
    """``X[rows]`` as ``dtype`` (e.g. a mini-batch), read in sorted order a block of the table at a
    time, releasing each block's pages (:func:`release`): a batch of random rows does not leave the
    whole mapped file resident."""
    X = np.asarray(X)
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    order = np.argsort(rows, kind="stable")
    out = np.empty((len(rows),) + X.shape[1:], dtype=dtype)
    for a, b, block in row_blocks(X, rows[order], dtype=dtype, size=size):
        out[order[a:b]] = block
    return out


def column_groups(X, rows: np.ndarray | None = None, *, dtype=np.float64, size: int | None = None
                  ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(columns, values)``: groups of whole columns of ``X`` (on all rows, or on ``rows``) as a
    ``dtype`` array ``(rows, len(columns))``, as many columns per group as a block of ``size`` rows
    of all columns holds (at least one). Each group is gathered by one pass of row blocks."""
    X = np.asarray(X)
    n, d = (X.shape[0] if rows is None else len(rows)), X.shape[1]
    per = max(1, min(d, block_rows(size) * d // max(1, n))) if d else 1
    for c0 in range(0, d, per):
        cols = np.arange(c0, min(d, c0 + per))
        out = np.empty((n, len(cols)), dtype=dtype, order="F")  # each column contiguous (its sort)
        if rows is None:  # a pass over the table copying only the group's columns of each block
            for s, e, block in row_blocks(X, dtype=dtype, size=size, columns=slice(c0, c0 + len(cols))):
                out[s:e] = block
        else:
            for s, e, block in row_blocks(X, rows, dtype=X.dtype, size=size):
                out[s:e] = block[:, c0:c0 + len(cols)]
        yield cols, out
