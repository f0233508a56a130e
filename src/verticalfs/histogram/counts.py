"""Histograms in the clear: rows and class counts per (feature, bin), and the one pass over a
party's row blocks that also sums encrypted arrays per (feature, bin) (:mod:`.encrypted`)."""

from __future__ import annotations

import numpy as np

from verticalfs.histogram.binning import equal_frequency_blocks, equal_frequency_edges, merged_edges
from verticalfs.histogram.encrypted import BinSums


def bin_sizes(codes: np.ndarray, n_bins: int) -> np.ndarray:
    """``n_{ji}``: rows per (feature, bin), ``(d, n_bins)``."""
    n, d = codes.shape
    flat = (np.arange(d, dtype=np.int64)[None, :] * n_bins + codes).ravel()
    return np.bincount(flat, minlength=d * n_bins).reshape(d, n_bins)


def class_counts(codes: np.ndarray, y: np.ndarray, n_classes: int, n_bins: int) -> np.ndarray:
    """``n_{jik}``: rows of class ``k`` per (feature, bin), ``(d, n_bins, n_classes)``, in the clear."""
    n, d = codes.shape
    flat = ((np.arange(d, dtype=np.int64)[None, :] * n_bins + codes) * n_classes + np.asarray(y, np.int64)[:, None])
    return np.bincount(flat.ravel(), minlength=d * n_bins * n_classes).reshape(d, n_bins, n_classes)


def bin_counts(X, n_bins: int, y=None, n_classes: int = 0, encrypted=(), size: int | None = None,
               min_rows: int = 1) -> tuple[np.ndarray, np.ndarray | None, list]:
    """Everything a party counts per (feature, bin) of equal-frequency bins
    (:func:`~verticalfs.histogram.binning.equal_frequency_edges`), in one pass over row blocks of
    ``X`` (issue 39: a memory-mapped table is never copied whole, nor its code matrix built):

    - ``n_{ji}`` (:func:`bin_sizes`);
    - with labels ``y``: ``n_{jik}`` (:func:`class_counts`), summed exactly (integers);
    - for each encrypted array in ``encrypted`` (rows first): its sums per (feature, bin)
      (:class:`~verticalfs.histogram.encrypted.BinSums`), the blocks' sums multiplied together mod
      ``n**2``, which is the same ciphertext as one sum over every row.

    ``min_rows`` > 1 (a party's ``min_bin_rows``, issue 50): bins of fewer training rows merged
    with the next one up first (:func:`~verticalfs.histogram.binning.merged_edges`).
    """
    X = np.asarray(X)
    n, d = X.shape
    n_bins = int(n_bins)
    edges = merged_edges(X, equal_frequency_edges(X, n_bins), min_rows, size)
    sizes = np.zeros((d, n_bins), dtype=np.int64)
    counts = None if y is None else np.zeros((d, n_bins, int(n_classes)), dtype=np.int64)
    y = None if y is None else np.asarray(y, dtype=np.int64)
    sums = [BinSums(A, n_bins, d) for A in encrypted]
    cols = (np.arange(d, dtype=np.int64) * n_bins)[None, :]
    for s, e, block in equal_frequency_blocks(X, edges, size=size):
        for acc in sums:
            acc.add(s, e, block)
        cell = block + cols  # (feature, bin) of every value: bin_sizes' and class_counts' cells, in place
        sizes += np.bincount(cell.ravel(), minlength=d * n_bins).reshape(d, n_bins)
        if counts is not None:
            cell *= int(n_classes)
            cell += y[s:e, None]
            counts += np.bincount(cell.ravel(), minlength=counts.size).reshape(counts.shape)
    return sizes, counts, [acc.result() for acc in sums]
