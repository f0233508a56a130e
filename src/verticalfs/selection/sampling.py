"""Stratified row sampling and FEAST's sample-size rule (feast.md sections 4.1 and 4.6)."""

from __future__ import annotations

import numpy as np

from verticalfs.exceptions import ConfigError, DataError


def feast_sample_size(n_rows: int, bins: int, m: int, n_classes: int) -> int:
    """``L' = min(L, B^(m+1) |Y|)`` (feast.md equation 17 and ``L' <= L``).

    ``B^(m+1) |Y|`` is the largest number of distinct ``(y, f_i, v_j)`` combinations when a
    statistical variable merges ``m`` features of ``B`` bins each.
    """
    if bins < 2 or m < 1 or n_classes < 1:
        raise ConfigError(f"sample size rule needs bins >= 2, m >= 1 and at least one class; got B={bins}, "
                          f"m={m}, |Y|={n_classes}")
    need = int(bins) ** (int(m) + 1) * int(n_classes)
    return int(min(int(n_rows), need))


def resolve_sample_size(sample_size: int, n_rows: int, bins: int, m: int, n_classes: int) -> int:
    """The sample size of a ``sample_size`` parameter: 0 = FEAST's rule, -1 = all rows, else that many
    (at most all rows)."""
    if sample_size == 0:
        return feast_sample_size(n_rows, bins, m, n_classes)
    if sample_size == -1:
        return int(n_rows)
    if sample_size < 0:
        raise ConfigError(f"sample_size must be 0 (FEAST's rule B^(m+1)|Y|), -1 (all rows) or a positive "
                          f"number of rows, got {sample_size}")
    return int(min(sample_size, n_rows))


def stratified_sample(y, size: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted row indices of a stratified sample of ``size`` rows (proportional allocation, largest
    remainder), every class keeping at least one row when ``size`` allows it."""
    y = np.asarray(y)
    n = len(y)
    if not 0 < size <= n:
        raise DataError(f"cannot draw a sample of {size} rows from {n}")
    if size == n:
        return np.arange(n)
    classes, inv = np.unique(y, return_inverse=True)
    counts = np.bincount(inv)
    exact = counts * (size / n)
    alloc = np.floor(exact).astype(np.int64)
    short = size - int(alloc.sum())
    if short > 0:
        alloc[np.argsort(-(exact - alloc), kind="stable")[:short]] += 1
    if size >= len(classes):  # keep every class present
        empty = (alloc == 0) & (counts > 0)
        while empty.any():
            alloc[np.flatnonzero(empty)[0]] += 1
            alloc[np.argmax(alloc)] -= 1
            empty = (alloc == 0) & (counts > 0)
    # one random key per row; within each class keep the rows with the smallest keys
    key = rng.random(n)
    order = np.lexsort((key, inv))  # grouped by class, random within class
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - np.repeat(starts, counts)
    return np.flatnonzero(rank < alloc[inv])
