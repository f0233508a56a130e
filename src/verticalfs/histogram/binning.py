"""Quantile binning of a party's own columns, on its own rows: the bin codes every histogram sums by.

Two rules, each kept exactly as the method that uses it defines it:

- **FATE's quantile binning** (``fate-iv``, FATE ``QuantileBinning``; :func:`quantile_split_points`):
  split points are the column's quantiles at ``1/B, 2/B, ..., (B-1)/B, 1`` (``B = n_bins``),
  duplicates dropped; a value goes to the first bin whose split point is ``>= value``
  (``bisect_left``), values above the last split point to the last bin. FATE queries a
  Greenwald-Khanna summary (relative error 1e-4); here the quantiles are exact: the split point for
  rate ``r`` is the smallest value whose empirical CDF is ``>= r`` (what a zero-error summary
  returns). Every split point is a value of the column, so no bin is empty. The trees
  (:class:`BinTable`) use this rule too: bin ``b`` holds the values in ``(sp[b-1], sp[b]]``, so
  "bin <= b" is "value <= sp[b]", a threshold the party keeps to itself.
- **Equal frequency** (FedSDG-FS's Algorithm 1; :func:`equal_frequency_edges`): the cut points of
  :func:`verticalfs.selection.discretize.fit_bins` (``np.quantile`` at ``k/B``, linear
  interpolation), a value coded by the number of cut points strictly below it.

Both read a party's table a group of whole columns at a time and code it a block of rows at a
time (:mod:`verticalfs.selection.blocks`; issue 39: a memory-mapped table is never copied whole).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from verticalfs.exceptions import ProtocolError
from verticalfs.selection.blocks import column_groups, row_blocks
from verticalfs.selection.discretize import coded_blocks, fit_bins_blocked

#: ``(first, last, codes)`` of one block of rows: codes ``(last - first, d)``
CodeBlocks = Iterator[tuple[int, int, np.ndarray]]


# ------------------------------------------------------------------------ FATE's quantile rule
def quantile_split_points(col: np.ndarray, n_bins: int) -> np.ndarray:
    """FATE's deduplicated split points of one column (see the module docstring)."""
    xs = np.sort(np.asarray(col, dtype=np.float64))
    n = len(xs)
    if n == 0:
        return np.zeros(1)
    rates = np.arange(1, n_bins + 1) / n_bins
    idx = np.clip(np.ceil(rates * n - 1e-9).astype(np.int64) - 1, 0, n - 1)
    return np.unique(xs[idx])


def split_point_table(X: np.ndarray, n_bins: int, size: int | None = None,
                      rows: np.ndarray | None = None) -> list[np.ndarray]:
    """FATE's split points of every column of ``X`` (on all rows, or the sorted indices ``rows``)
    (:func:`quantile_split_points`), a group of whole columns at a time
    (:func:`verticalfs.selection.blocks.column_groups`; a memory-mapped table is never copied whole)."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"quantile_bins expects a 2-D array, got shape {X.shape}")
    out: list[np.ndarray] = []
    for _, G in column_groups(X, rows, size=size):
        out += [quantile_split_points(G[:, j], n_bins) for j in range(G.shape[1])]  # one sort per column
    return out


def code_with(block: np.ndarray, split_points: list[np.ndarray]) -> np.ndarray:
    """Bin codes ``(rows, d)`` (int64) of a float64 block under each column's split points."""
    codes = np.zeros(block.shape, dtype=np.int64)
    for j, sp in enumerate(split_points):  # one vectorised searchsorted per column
        codes[:, j] = np.minimum(np.searchsorted(sp, block[:, j], side="left"), len(sp) - 1)
    return codes


def quantile_code_blocks(X: np.ndarray, n_bins: int, size: int | None = None,
                         min_rows: int = 1) -> tuple[np.ndarray, CodeBlocks]:
    """``(bin_nums, blocks)``: the number of bins of each column ``(d,)`` and an iterator of
    ``(first, last, codes)`` over row blocks of ``X`` (the codes of :func:`quantile_bins`).

    ``min_rows`` > 1 (a party's ``min_bin_rows``, issue 50): bins of fewer training rows merged
    as :class:`BinTable` merges them (into the next bin up), at the cost of one more pass."""
    sps = split_point_table(X, n_bins, size)
    if int(min_rows) > 1 and np.asarray(X).shape[0]:
        counts = BinTable._counts(np.asarray(X), sps, size)
        sps = [_merge_small(sp, c, int(min_rows)) for sp, c in zip(sps, counts, strict=True)]
    bin_nums = np.asarray([len(sp) for sp in sps], dtype=np.int64)
    return bin_nums, ((s, e, code_with(b, sps)) for s, e, b in row_blocks(np.asarray(X), size=size))


def quantile_bins(X: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Bin codes ``(n, d)`` (int64) and the number of bins of each column ``(d,)``."""
    X = np.asarray(X)
    bin_nums, blocks = quantile_code_blocks(X, n_bins)
    codes = np.zeros(X.shape, dtype=np.int64)
    for s, e, c in blocks:
        codes[s:e] = c
    return codes, bin_nums


# ------------------------------------------------------------------------ equal frequency
def equal_frequency_edges(X: np.ndarray, n_bins: int) -> np.ndarray:
    """Cut points ``(d, K)`` (NaN-padded) of equal-frequency bins of every column of ``X``
    (:func:`verticalfs.selection.discretize.fit_bins_blocked`; no copy of ``X``)."""
    X = np.asarray(X)
    return fit_bins_blocked(X, "equal-frequency", int(n_bins)) if X.shape[1] else np.zeros((0, 0))


def merged_edges(X: np.ndarray, edges: np.ndarray, min_rows: int, size: int | None = None) -> np.ndarray:
    """``edges`` (``(d, K)`` cut points, NaN-padded; a value's bin is the number of cut points
    strictly below it) with every bin holding at least ``min_rows`` training rows: a smaller bin is
    merged with the next one up (its upper cut point dropped), the last with the one below, as
    :class:`BinTable` merges (a party's ``min_bin_rows``, issue 50). One pass over row blocks."""
    d = edges.shape[0]
    if int(min_rows) <= 1 or d == 0 or np.asarray(X).shape[0] == 0:
        return edges
    k = edges.shape[1]
    sizes = np.zeros((d, k + 1), dtype=np.int64)
    cols = (np.arange(d, dtype=np.int64) * (k + 1))[None, :]
    for _, _, block in equal_frequency_blocks(X, edges, size=size):
        sizes += np.bincount((block + cols).ravel(), minlength=d * (k + 1)).reshape(d, k + 1)
    out = np.full_like(edges, np.nan)
    for j in range(d):
        e = edges[j][~np.isnan(edges[j])]
        # bin b is (e[b-1], e[b]]: the same rule as the split points, with a top bound that is not a cut
        top = np.append(e, np.inf)
        kept = _merge_small(top, sizes[j, :len(e) + 1], int(min_rows))[:-1]
        out[j, :len(kept)] = kept
    return out


def equal_frequency_blocks(X: np.ndarray, edges: np.ndarray, size: int | None = None) -> CodeBlocks:
    """``(first, last, codes)`` over row blocks of ``X``: codes (int64) under ``edges``."""
    for s, e, block in coded_blocks(X, edges, size=size):
        yield s, e, block.astype(np.int64)


# ------------------------------------------------------------------------ the trees' bins
class BinTable:
    """A party's bins of its own columns for histogram trees: FATE's quantile rule fitted on its
    training rows, at most ``n_bins`` per column, each bin holding at least ``min_rows`` of them.

    The split points are the party's own lookup table: the label holder learns a split as
    (feature, bin) and never the threshold ``split_points[feature][bin]`` (:meth:`threshold`).

    Parameters
    ----------
    X : array (n, d)
        The party's training columns (read a group of columns at a time).
    n_bins : int
        At most this many bins per column.
    min_rows : int
        Every bin holds at least this many training rows (the party's policy,
        ``min_rows_per_bin``): a bin with fewer is merged into its upper neighbour (the last
        one into its lower). 1 leaves FATE's bins as they are.
    """

    def __init__(self, X: np.ndarray, n_bins: int, min_rows: int = 1, size: int | None = None) -> None:
        X = np.asarray(X)
        self.n_bins = int(n_bins)
        self.min_rows = max(1, int(min_rows))
        sps = split_point_table(X, self.n_bins, size)
        counts = self._counts(X, sps, size)
        if self.min_rows > 1 and X.shape[0]:
            merged = [_merge_small(sp, c, self.min_rows) for sp, c in zip(sps, counts, strict=True)]
            counts = [np.diff(np.r_[0, np.cumsum(c)[np.searchsorted(sp, m_)]]) for sp, c, m_ in
                      zip(sps, counts, merged, strict=True)]
            sps = merged
        self.split_points = sps
        self.bin_nums = np.asarray([len(sp) for sp in sps], dtype=np.int64)
        #: training rows per bin of each feature (the party's own figures; never sent)
        self.counts = counts

    @staticmethod
    def _counts(X: np.ndarray, sps: list[np.ndarray], size: int | None) -> list[np.ndarray]:
        out = [np.zeros(len(sp), dtype=np.int64) for sp in sps]
        for _, _, block in row_blocks(X, size=size):
            codes = code_with(block, sps)
            for j, sp in enumerate(sps):
                out[j] += np.bincount(codes[:, j], minlength=len(sp))
        return out

    @property
    def n_features(self) -> int:
        return len(self.split_points)

    def largest_bins(self) -> np.ndarray:
        """Per feature, the bin holding the most training rows (the first of equals)."""
        return np.asarray([int(np.argmax(c)) if len(c) else 0 for c in self.counts], dtype=np.int64)

    def codes(self, X: np.ndarray, rows: np.ndarray | None = None, size: int | None = None) -> np.ndarray:
        """Bin codes ``(n, d)`` of ``X`` (all rows, or the sorted indices ``rows``), int16 when the
        bins allow (a table of a million rows and a hundred columns: 200 MB, not 800)."""
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ProtocolError(f"BinTable: rows of shape {X.shape} for {self.n_features} binned features")
        n = X.shape[0] if rows is None else len(rows)
        dtype = np.int16 if int(self.bin_nums.max(initial=1)) < 2**15 else np.int64
        out = np.empty((n, X.shape[1]), dtype=dtype)
        for s, e, block in row_blocks(X, rows, size=size):
            out[s:e] = code_with(block, self.split_points)
        return out

    def threshold(self, feature: int, bin_: int) -> float:
        """The split value of "bin <= ``bin_``": a value ``x`` goes left iff ``x <= threshold``."""
        sp = self.split_points[int(feature)]
        if not 0 <= int(bin_) < len(sp) - 1:
            raise ProtocolError(f"BinTable: feature {feature} has {len(sp)} bins; a split after bin {bin_} "
                                "leaves one side empty")
        return float(sp[int(bin_)])


def _merge_small(sp: np.ndarray, counts: np.ndarray, least: int) -> np.ndarray:
    """Split points with every bin holding ``least`` rows or more: a bin below is merged with the
    next one up (dropping its split point), the last bin with the one below (dropping theirs)."""
    keep: list[int] = []
    run = 0
    for b, c in enumerate(counts.tolist()):  # one pass over a column's (few) bins
        run += int(c)
        if run >= least:
            keep.append(b)
            run = 0
    if not keep:
        return sp[-1:]
    if run:  # the top rows, too few for a bin of their own: join the last kept bin
        keep[-1] = len(sp) - 1
    return sp[np.asarray(keep, dtype=np.int64)]
