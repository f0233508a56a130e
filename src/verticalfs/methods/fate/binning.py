"""FATE's quantile binning (on the shared histogram module, :mod:`verticalfs.histogram.binning`)
and its WoE / IV computation, in the clear.

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

from verticalfs.histogram.binning import (
    code_with,
    quantile_bins,
    quantile_code_blocks,
    quantile_split_points,
    split_point_table,
)

__all__ = ["code_with", "information_values", "quantile_bins", "quantile_code_blocks", "quantile_split_points",
           "split_point_table", "woe_iv"]


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
