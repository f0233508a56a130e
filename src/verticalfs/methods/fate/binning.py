"""FATE's quantile binning and its WoE / IV computation, in the clear.

Binning (FATE ``QuantileBinning``): split points are the column's quantiles at
``1/B, 2/B, ..., (B-1)/B, 1`` (``B = bin_num``, default 10), duplicates dropped; a value goes to
the first bin whose split point is ``>= value`` (``bisect_left``), values above the last split
point to the last bin. FATE queries a Greenwald-Khanna summary (relative error 1e-4); here the
quantiles are exact: the split point for rate ``r`` is the smallest value whose empirical CDF is
``>= r`` (what a zero-error summary returns). Every split point is a value of the column, so no
bin is empty.

WoE / IV (FATE ``IvCalculator.woe_1d``), with *event* = label 1: per bin
``event_rate = events / event_total``, ``non_event_rate = non_events / non_event_total``,
``woe = ln(event_rate / non_event_rate)``, ``iv = sum (event_rate - non_event_rate) * woe``.
FATE's adjustment for bins without events or without non-events: both rates of such a bin become
``(count + adjustment_factor) / total`` (default factor 0.5), which keeps the logarithm finite; a
total of zero is replaced by 1.
"""

from __future__ import annotations

import numpy as np

from verticalfs.selection.blocks import column_groups, row_blocks


def quantile_split_points(col: np.ndarray, n_bins: int) -> np.ndarray:
    """FATE's deduplicated split points of one column (see the module docstring)."""
    xs = np.sort(np.asarray(col, dtype=np.float64))
    n = len(xs)
    if n == 0:
        return np.zeros(1)
    rates = np.arange(1, n_bins + 1) / n_bins
    idx = np.clip(np.ceil(rates * n - 1e-9).astype(np.int64) - 1, 0, n - 1)
    return np.unique(xs[idx])


def split_point_table(X: np.ndarray, n_bins: int, size: int | None = None) -> list[np.ndarray]:
    """FATE's split points of every column of ``X`` (:func:`quantile_split_points`), a group of
    whole columns at a time (:func:`verticalfs.selection.blocks.column_groups`; issue 39: a
    memory-mapped table is never copied whole)."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"quantile_bins expects a 2-D array, got shape {X.shape}")
    out: list[np.ndarray] = []
    for _, G in column_groups(X, size=size):
        out += [quantile_split_points(G[:, j], n_bins) for j in range(G.shape[1])]  # one sort per column
    return out


def code_with(block: np.ndarray, split_points: list[np.ndarray]) -> np.ndarray:
    """Bin codes ``(rows, d)`` (int64) of a float64 block under each column's split points."""
    codes = np.zeros(block.shape, dtype=np.int64)
    for j, sp in enumerate(split_points):  # one vectorised searchsorted per column
        codes[:, j] = np.minimum(np.searchsorted(sp, block[:, j], side="left"), len(sp) - 1)
    return codes


def quantile_code_blocks(X: np.ndarray, n_bins: int, size: int | None = None):
    """``(bin_nums, blocks)``: the number of bins of each column ``(d,)`` and an iterator of
    ``(first, last, codes)`` over row blocks of ``X`` (the codes of :func:`quantile_bins`)."""
    sps = split_point_table(X, n_bins, size)
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


def woe_iv(events: np.ndarray, non_events: np.ndarray,
           adjustment_factor: float = 0.5) -> tuple[np.ndarray, float]:
    """WoE per bin and IV of one feature from its per-bin event / non-event counts (FATE's rule)."""
    e = np.asarray(events, dtype=np.float64)
    ne = np.asarray(non_events, dtype=np.float64)
    e_tot = e.sum() or 1.0
    ne_tot = ne.sum() or 1.0
    adj = (e == 0) | (ne == 0)
    er = np.where(adj, (e + adjustment_factor) / e_tot, e / e_tot)
    ner = np.where(adj, (ne + adjustment_factor) / ne_tot, ne / ne_tot)
    woe = np.log(er / ner)
    return woe, float(np.sum((er - ner) * woe))


def information_values(X: np.ndarray, y: np.ndarray, n_bins: int = 10,
                       adjustment_factor: float = 0.5) -> np.ndarray:
    """IV of every column of ``X`` against binary ``y`` (event = 1), in the clear (reference)."""
    codes, bin_nums = quantile_bins(X, n_bins)
    y = np.asarray(y).astype(bool)
    out = np.zeros(codes.shape[1])
    for j in range(codes.shape[1]):
        k = int(bin_nums[j])
        ev = np.bincount(codes[y, j], minlength=k)
        ne = np.bincount(codes[~y, j], minlength=k)
        out[j] = woe_iv(ev, ne, adjustment_factor)[1]
    return out
