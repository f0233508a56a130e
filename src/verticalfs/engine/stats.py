"""Mergeable per-column statistics: a party's preprocessing fitted from pieces of its table (issue 55).

An engine that reads a party's table in blocks on many workers (:mod:`verticalfs.engine.ray`) fits
the party's :class:`~verticalfs.data.preprocess.PartyPreprocessor` in two steps: every block's
training rows give a :class:`ColumnStats` per column (:func:`block_stats`, on a worker), and the
coordinator merges them (:func:`merge`) and builds the preprocessor (:func:`preprocessor`). No
column is ever gathered whole, except where the values fit in a sketch.

What is exact and what is not:

- **exact, byte for byte with the in-memory fit**: min/max (min-max scaling: scikit-learn's
  ``MinMaxScaler`` is fitted on the merged ``[min, max]``, the same floats), the numbers of rows
  and missing values, the categories and the most frequent value (merged counts; ties: the
  smallest), and the median and quartiles (median imputation, robust scaling) **while every block
  holds at most** :data:`SKETCH` **training values of the column**: the blocks then send their
  values and the coordinator runs numpy's own median and percentiles on them;
- **exact up to the last bits**: the mean and variance (mean imputation, standard scaling) are
  merged from each block's count, mean and sum of squared deviations (Chan et al.'s pairwise
  update), which adds in another order than numpy's one pass over the column;
- **approximate**: the median and quartiles of a column where some block holds more than
  :data:`SKETCH` training values: that block sends :data:`SKETCH` evenly spaced order statistics
  of its sorted values, each standing for ``n / SKETCH`` values, and the coordinator takes the
  weighted quantile of the merged points. Each block's points are within ``n_block / SKETCH``
  ranks of the truth, so the merged quantile's rank is off by at most ``rows / SKETCH`` (0.025 %
  of the rows at the default); the docs state it, the fit records ``approximate`` columns.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from verticalfs.data.preprocess import DOMINATED_SHARE, PartyPreprocessor
from verticalfs.exceptions import DataError

#: values of a column a block sends as they are; above it, this many evenly spaced order statistics
SKETCH = 4096


@dataclass
class ColumnStats:
    """One column's statistics over some training rows (mergeable)."""

    categorical: bool
    n: int = 0  # rows
    missing: int = 0  # missing values among them
    lo: float = np.inf  # numeric: min and max of the present values
    hi: float = -np.inf
    mean: float = 0.0  # numeric: mean and sum of squared deviations of the present values
    m2: float = 0.0
    points: list = field(default_factory=list)  # numeric: [(values, weight)] sketches
    counts: dict = field(default_factory=dict)  # categorical, or numeric most-frequent: value -> rows

    @property
    def exact_points(self) -> bool:
        return all(w == 1.0 for _, w in self.points)


def _sketch(v: np.ndarray) -> tuple[np.ndarray, float]:
    if len(v) <= SKETCH:
        return v.copy(), 1.0
    s = np.sort(v)
    # the midpoints of SKETCH equal slices of the sorted values: each stands for n / SKETCH values
    at = ((np.arange(SKETCH) + 0.5) * len(s) / SKETCH).astype(np.int64)
    return s[at], len(s) / SKETCH


def block_stats(frame: pd.DataFrame | Mapping[str, Any], cats: set, *, counts_numeric: bool) -> dict[str, ColumnStats]:
    """Each column's statistics over ``frame`` (a block's training rows, columns typed as
    :func:`~verticalfs.data.stream._typed` types them: text or float64; a data frame, or a mapping
    of column to series or float64 array). ``counts_numeric``: keep the numeric columns' value
    counts too (most-frequent imputation)."""
    out = {}
    for c in (list(frame.columns) if isinstance(frame, pd.DataFrame) else list(frame)):
        s = frame[c]
        if c in cats:
            miss = s.isna().to_numpy()
            vals = s[~miss].astype(str)
            out[c] = ColumnStats(True, n=len(s), missing=int(miss.sum()), counts=vals.value_counts().to_dict())
            continue
        a = np.asarray(s, dtype=np.float64)
        present = a[~np.isnan(a)]
        st = ColumnStats(False, n=len(a), missing=int(len(a) - len(present)))
        if len(present):
            st.lo, st.hi = float(present.min()), float(present.max())
            st.mean = float(present.mean())
            st.m2 = float(((present - st.mean) ** 2).sum())
            st.points = [_sketch(present)]
            if counts_numeric:
                u, k = np.unique(present, return_counts=True)
                st.counts = dict(zip(u.tolist(), k.tolist(), strict=True))
        out[c] = st
    return out


def merge(a: dict[str, ColumnStats], b: dict[str, ColumnStats]) -> dict[str, ColumnStats]:
    """``a`` and ``b`` merged (``a`` is updated and returned)."""
    for c, y in b.items():
        x = a.get(c)
        if x is None:
            a[c] = y
            continue
        px, py = x.n - x.missing, y.n - y.missing
        if py:
            if px:  # Chan et al.: the pairwise update of mean and M2
                d = y.mean - x.mean
                tot = px + py
                x.mean = x.mean + d * py / tot
                x.m2 = x.m2 + y.m2 + d * d * px * py / tot
            else:
                x.mean, x.m2 = y.mean, y.m2
            x.lo, x.hi = min(x.lo, y.lo), max(x.hi, y.hi)
        x.n += y.n
        x.missing += y.missing
        x.points += y.points
        for k, v in y.counts.items():
            x.counts[k] = x.counts.get(k, 0) + v
    return a


def _top(counts: dict) -> Any:
    """The most frequent key (ties: the smallest), as ``_most_frequent`` picks it."""
    if not counts:
        return None
    most = max(counts.values())
    return sorted(k for k, v in counts.items() if v == most)[0]


def _values(st: ColumnStats) -> np.ndarray:
    return np.concatenate([p for p, _ in st.points]) if st.points else np.zeros(0)


def quantiles(st: ColumnStats, qs: list[float]) -> np.ndarray:
    """The ``qs`` quantiles (in [0, 100], as ``np.percentile``) of the column's present values:
    numpy's own when every block sent its values, else the weighted quantile of the sketches."""
    if not st.points:
        return np.full(len(qs), np.nan)
    if st.exact_points:
        return np.percentile(_values(st), qs)
    v = _values(st)
    w = np.concatenate([np.full(len(p), wt) for p, wt in st.points])
    o = np.argsort(v, kind="stable")
    v, w = v[o], w[o]
    cum = np.cumsum(w) - 0.5 * w  # each point at the middle of the ranks it stands for
    total = float(w.sum())
    return np.interp(np.asarray(qs) / 100.0 * total, cum, v)


def approximate(st: ColumnStats) -> bool:
    return not st.exact_points


def preprocessor(party: str, cols: list[str], cats: list[str], stats: dict[str, ColumnStats], *, scaling: str,
                 impute: str, where: str = "", dominated: bool = True) -> PartyPreprocessor:
    """The party's preprocessor from the merged statistics of its training rows (see the module
    docstring for what is exact): the same columns, order, fills, scales, categories and warnings
    as :meth:`PartyPreprocessor.fit` on the whole block. ``dominated=False`` leaves out the
    warnings of columns min-max scaling squashes (:func:`dominated_warnings`, which gives them
    first in the list: a caller adds them later, e.g. while the transform runs)."""
    from sklearn.preprocessing import MinMaxScaler, RobustScaler

    cat_set = set(cats)
    num = [c for c in cols if c not in cat_set]
    cat = [c for c in cols if c in cat_set]
    src = f" in {where}" if where else ""
    pp = PartyPreprocessor(party, list(num), list(cat), scaling, impute)
    n_rows = max((stats[c].n for c in cols), default=0)
    scale, offset = [], []
    missing_none = [c for c in num if stats[c].missing and impute == "none"]
    if missing_none:
        raise DataError(f"party {party!r}: columns {missing_none}{src} have missing values; impute them "
                        "(--impute median, mean or most-frequent; impute='median' from Python) or "
                        "drop those rows or columns")
    for c in num:
        st = stats[c]
        present = st.n - st.missing
        if impute != "none":
            if impute == "median":
                fill = float(np.median(_values(st))) if st.exact_points and present else (
                    float(quantiles(st, [50])[0]) if present else np.nan)
            elif impute == "mean":
                fill = st.mean if present else np.nan
            else:
                top = _top(st.counts)
                fill = np.nan if top is None else float(top)
            if np.isfinite(fill):
                pp.fill[c] = fill
            elif st.missing:
                raise DataError(f"party {party!r}: columns {[c]}{src} have no value in the training rows "
                                "to impute from; drop them")
        if scaling == "none" or not n_rows:
            continue
        fill = pp.fill.get(c)
        lo, hi = st.lo, st.hi
        if st.missing and fill is not None:  # the imputed values are among the column's
            lo, hi = min(lo, fill), max(hi, fill)
        with np.errstate(over="ignore", invalid="ignore"):
            if scaling == "minmax":
                sc = MinMaxScaler().fit(np.array([[lo], [hi]]))  # the same floats as over every row
                a, b = float(sc.scale_[0]), float(sc.min_[0])
            elif scaling == "robust":
                if st.exact_points:  # numpy's median and percentiles over the values (and the fills)
                    v = _values(st)
                    if st.missing and fill is not None:
                        v = np.concatenate([v, np.full(st.missing, fill)])
                    rs = RobustScaler().fit(v[:, None])
                    a, b = float(rs.scale_[0]), float(rs.center_[0])
                else:
                    q25, q50, q75 = quantiles(_with_fill(st, fill), [25, 50, 75])
                    iqr = q75 - q25
                    a, b = (float(iqr) if iqr != 0 else 1.0), float(q50)
            else:  # standard: the merged mean and variance, the imputed values included
                n, mean, m2 = present, st.mean, st.m2
                if st.missing and fill is not None:
                    k = st.missing
                    d = fill - mean
                    tot = n + k
                    mean, m2, n = mean + d * k / tot, m2 + d * d * n * k / tot, tot
                sd = float(np.sqrt(m2 / n)) if n else 0.0
                a, b = (sd if sd != 0 and np.isfinite(sd) else 1.0), float(mean)
        if not (np.isfinite(a) and np.isfinite(b)) or (scaling == "minmax" and not np.isfinite(hi - lo)):
            raise DataError(f"party {party!r}: columns {[c]}{src} have values too large to scale (their "
                            "range overflows); rescale them (e.g. divide by a power of ten)")
        scale.append(a)
        offset.append(b)
    if scaling != "none" and num:
        pp.scale, pp.offset = (scale, offset) if n_rows else ([1.0] * len(num), [0.0] * len(num))
    if dominated:
        pp.warnings += dominated_warnings(party, cols, cats, stats, scaling=scaling, where=where)
    for c in cat:
        st = stats[c]
        if st.missing:
            if impute == "none":
                raise DataError(f"party {party!r}: categorical column {c!r}{src} has missing values; "
                                "impute them (--impute most-frequent) or drop those rows")
            top = _top(st.counts)
            if top is None:
                raise DataError(f"party {party!r}: column {c!r}{src} has no value in the training rows; drop it")
            pp.fill[c] = str(top)
        levels = set(st.counts)
        if c in pp.fill and st.missing:
            levels.add(pp.fill[c])
        pp.categories[c] = sorted(levels)
    constant = all(len(pp.categories[c]) <= 1 for c in cat) and all(
        not stats[c].hi > stats[c].lo for c in num)
    if n_rows > 1 and cols and constant:
        pp.warnings.append(PartyPreprocessor.constant_warning(party, list(cols), src))
    return pp


def dominated_warnings(party: str, cols: list[str], cats: list[str], stats: dict[str, ColumnStats], *,
                       scaling: str, where: str = "") -> list[str]:
    """The warnings of :func:`preprocessor` for the numeric columns whose extreme values squash the
    others under min-max scaling (none for another scaling): the first of its warnings."""
    num = [c for c in cols if c not in set(cats)]
    n_rows = max((stats[c].n for c in cols), default=0)
    if scaling != "minmax" or n_rows < 4:
        return []
    return _dominated(party, num, stats, f" in {where}" if where else "")


def _with_fill(st: ColumnStats, fill: float | None) -> ColumnStats:
    if not st.missing or fill is None:
        return st
    out = ColumnStats(False, points=list(st.points) + [(np.array([fill]), float(st.missing))])
    return out


def _dominated(party: str, num: list[str], stats: dict[str, ColumnStats], src: str) -> list[str]:
    """:func:`verticalfs.data.preprocess._dominated` from the statistics (its quartiles from the
    sketches where those are approximate)."""
    out = []
    for c in num:
        st = stats[c]
        if not st.points:
            continue
        with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            q25, q50, q75 = quantiles(st, [25, 50, 75])
            lo, hi = st.lo, st.hi
            rng = hi - lo
            share = (q75 - q25) / rng if rng else np.inf
        if q75 > q25 and np.isfinite(rng) and rng > 0 and share < DOMINATED_SHARE:
            far = hi if hi - q50 >= q50 - lo else lo
            out.append(f"party {party!r}: column {c!r}{src} has extreme values (up to {far:.3g}, median "
                       f"{q50:.3g}) that squash its other values to ~0 under min-max scaling (its middle half spans "
                       f"{share:.1e} of its range); use --scaling robust (median and interquartile range) or "
                       "--scaling standard, or clip or drop those values; a table read into memory also takes "
                       "--scaling quantile (each value's rank, any magnitude)")
    return out
