"""One party's preprocessing, fitted on its own training rows and applied to any rows later.

:class:`PartyPreprocessor` does, per party: imputation of missing values, one-hot encoding of the
categorical columns and scaling of the numeric ones. It is fitted on the party's *training* rows
only (nothing about other parties or other splits leaks into it) and kept, so that a saved model
applies exactly the same transformation to new rows (``verticalfs predict``). It holds only
numbers and strings (:meth:`to_dict` / :meth:`from_dict`), so it is saved without pickling.

Imputation (``impute``):

- ``median`` / ``mean``: numeric columns get their training median / mean; categorical columns
  their most frequent training category;
- ``most-frequent``: every column gets its most frequent training value (ties: the smallest);
- ``none``: a missing value is an error naming the party and the columns.

A missing categorical value is never a category of its own. Categories not seen in training
encode as all zeros (:meth:`PartyPreprocessor.transform` counts them per column when asked). Scaling:
``minmax`` (to [0, 1] on the training rows, scikit-learn's ``MinMaxScaler`` arithmetic), ``standard``
(zero mean, unit variance), ``robust`` (minus the median, over the interquartile range:
scikit-learn's ``RobustScaler``; a few extreme values do not squash the rest), ``quantile`` (each
value's rank among the training values, in [0, 1]: scikit-learn's ``QuantileTransformer`` with a
uniform output; any magnitude, a value of 1e300 included, keeps the others apart) or ``none``.

Fitting notes what a user should hear about in :attr:`PartyPreprocessor.warnings` (not saved): a
column whose extreme values squash the rest under min-max scaling, a column whose scaled training
values collapse to a few numbers under any scaling (issue 53: half the rows at 1e300), and a party
whose columns are all constant on its training rows (no informative column).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from verticalfs.data.choices import SCALINGS  # noqa: E402  (one list, read by the CLI without pandas)
from verticalfs.exceptions import DataError

#: a min-max-scaled column whose middle half of training values spans less than this share of its
#: range is dominated by extreme values (one 1e300 among values near 1 gives 1e-300)
DOMINATED_SHARE = 1e-4
from verticalfs.data.choices import PREPROCESS_IMPUTATIONS as IMPUTATIONS  # noqa: E402

#: ``scaling="quantile"``: the training quantiles kept per column (scikit-learn's default
#: ``n_quantiles``; fewer with fewer training rows)
N_QUANTILES = 1000
#: a column of at least this many distinct training values whose scaled values number at most
#: :data:`SQUASHED_SHARE` of them (and at most 2 more than its large values) has been squashed
SQUASH_MIN_DISTINCT = 20
SQUASHED_SHARE = 0.1


#: what a date or time column becomes with ``datetime="derive"``: one numeric column each
DATE_PARTS: tuple[str, ...] = ("year", "month", "day")
#: the choices for date and time columns: refuse them (default, with the options), drop them, or
#: derive :data:`DATE_PARTS` from them
DATETIME_CHOICES: tuple[str, ...] = ("refuse", "drop", "derive")
#: a text value that may be a date: a 4-digit year, or day, month and year joined by - / .
_DATE_LIKE = r"\b\d{4}\b|\b\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}\b"


#: the explicit formats tried, in order, before pandas' per-value "mixed" parsing: day and month
#: in a fixed order for the whole column (a per-value guess reads 05/01 as May and 13/01 as January)
DATE_FORMATS: tuple[str, ...] = ("ISO8601", "%d/%m/%Y", "%m/%d/%Y", "%d.%m.%Y", "%d-%m-%Y", "%m-%d-%Y", "%Y/%m/%d",
                                 "%d/%m/%y", "%m/%d/%y", "mixed")


def _parse_dates(values: pd.Series, fmt: str) -> pd.Series:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if pd.api.types.is_datetime64_any_dtype(values):
            return pd.to_datetime(values, utc=True)
        return pd.to_datetime(values.astype(str).str.strip(), errors="coerce", format=fmt, utc=True)


def date_format(values: pd.Series) -> str | None:
    """The format of a column of dates (``""`` for a datetime type), or None if it holds none:
    the first of :data:`DATE_FORMATS` under which at least 95 % of a sample of up to 1,000 values
    that look like dates (a 4-digit year, or d/m/y) parse."""
    if pd.api.types.is_datetime64_any_dtype(values):
        return ""
    if pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        return None
    v = values.dropna()
    if v.empty:
        return None
    v = v.iloc[:: max(1, len(v) // 1000)].astype(str).str.strip()
    if v.str.contains(_DATE_LIKE, regex=True).mean() < 0.95:
        return None
    for fmt in DATE_FORMATS:
        if _parse_dates(v, fmt).notna().mean() >= 0.95:
            return fmt
    return None


def datetime_columns(df, cols) -> dict[str, str]:
    """The columns of ``cols`` that hold dates or times, with their format (:func:`date_format`):
    a datetime type (Parquet timestamps), or text that looks like and parses as dates. One-hot
    encoding such a column makes a level of each date (issue 53: 2,666 levels, without a word).
    ``df``: a frame, or a mapping of column name to values (a streamed table's first rows)."""
    out = {}
    for c in cols:
        fmt = date_format(df[c])
        if fmt is not None:
            out[c] = fmt
    return out


def derived_date_names(column: str) -> list[str]:
    """The numeric columns ``datetime="derive"`` makes of ``column``: ``<column>_year`` etc."""
    return [f"{column}_{part}" for part in DATE_PARTS]


def derive_dates(df: pd.DataFrame, dates) -> pd.DataFrame:
    """``df`` with each date column of ``dates`` (``{column: format}``) replaced, in place of it,
    by its year, month and day (float; a value that does not parse as a date is missing in all
    three)."""
    if not dates:
        return df
    out = {}
    for c in df.columns:
        if c not in dates:
            out[c] = df[c]
            continue
        t = _parse_dates(df[c], dates[c] or "ISO8601")
        for part, name in zip(DATE_PARTS, derived_date_names(c), strict=True):
            out[name] = getattr(t.dt, part).astype(np.float64)
    return pd.DataFrame(out, index=df.index)


def _most_frequent(a: np.ndarray) -> object:
    """The most frequent value of ``a`` (ties: the smallest), NaN/None ignored; None if empty."""
    s = pd.Series(a).dropna()
    if s.empty:
        return None
    counts = s.value_counts()
    top = counts[counts == counts.max()].index
    return sorted(top)[0]


@dataclass
class PartyPreprocessor:
    """Fitted preprocessing of one party (see the module docstring).

    Attributes
    ----------
    party : str
    numeric, categorical : list of str
        The party's columns of each kind, in the order their outputs appear.
    fill : dict of str -> float or str
        The imputed value of each column that had missing training values or may get them.
    scale, offset : list of float
        Per numeric column: ``x * scale + offset`` (min-max) or ``(x - offset) / scale`` (standard),
        scikit-learn's ``MinMaxScaler`` / ``StandardScaler`` parameters fitted on the training rows.
    categories : dict of str -> list of str
        The training categories of each categorical column.
    """

    party: str
    numeric: list[str]
    categorical: list[str]
    scaling: str
    impute: str
    fill: dict = field(default_factory=dict)
    scale: list = field(default_factory=list)
    offset: list = field(default_factory=list)
    categories: dict = field(default_factory=dict)
    #: ``scaling="quantile"``: per numeric column, its training quantiles (ascending)
    quantiles: list = field(default_factory=list)
    #: date columns (and their formats) whose year, month and day are numeric columns here
    #: (``datetime="derive"``): :meth:`transform` derives them from new rows that hold the date
    #: column itself
    dates: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list, repr=False, compare=False)  # from fit; not saved

    # ---------------------------------------------------------------------------------- checking
    @staticmethod
    def check_values(party: str, X: pd.DataFrame, categorical, where: str = "") -> None:
        """Numbers that pandas reads but training cannot use, over *all* of a party's rows (a check
        of the data, not a fit): infinite values, and values so large that their range overflows
        (scaling would then silently squash the column)."""
        cat_set = set(categorical)
        num = [c for c in X.columns if c not in cat_set and pd.api.types.is_numeric_dtype(X[c])]
        if not num:
            return
        src = f" in {where}" if where else ""
        A = X[num].to_numpy(dtype=np.float64)
        inf = np.isinf(A).any(0)
        if inf.any():
            bad = [str(c) for c, m in zip(num, inf, strict=True) if m]
            raise DataError(f"party {party!r}: columns {bad}{src} hold infinite values, which training cannot "
                            "use; replace them (e.g. by missing values and --impute) or drop the columns")
        with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            rng = np.nanmax(A, 0) - np.nanmin(A, 0) if len(A) else np.zeros(len(num))
        big = np.isinf(rng)
        if big.any():
            bad = [str(c) for c, m in zip(num, big, strict=True) if m]
            raise DataError(f"party {party!r}: columns {bad}{src} have values too large to scale (their range "
                            "overflows); rescale them (e.g. divide by a power of ten)")

    # ---------------------------------------------------------------------------------- fitting
    @classmethod
    def fit(cls, party: str, X: pd.DataFrame, categorical, *, scaling: str = "minmax",
            impute: str = "none", where: str = "", check_constant: bool = True, dates=None) -> PartyPreprocessor:
        """Fit on the training rows ``X`` of ``party`` (``where`` names the file, for errors).
        ``check_constant=False`` leaves out the warning about a party whose columns are all
        constant (a fit of one column of many: :func:`verticalfs.data.stream.fit_streamed`)."""
        if scaling not in SCALINGS:
            raise DataError(f"unknown scaling {scaling!r}; use one of {SCALINGS}")
        if impute not in IMPUTATIONS:
            raise DataError(f"unknown imputation {impute!r}; use one of {IMPUTATIONS}")
        cat_set = set(categorical)
        cat = [str(c) for c in X.columns if c in cat_set]
        num = [str(c) for c in X.columns if c not in cat_set]
        src = f" in {where}" if where else ""
        for c in num:
            if not pd.api.types.is_numeric_dtype(X[c]):
                raise DataError(
                    f"party {party!r}: column {c!r}{src} is not numeric ({X[c].dtype}); list it as "
                    "categorical so it is one-hot encoded, or convert it to numbers")
        pp = cls(party, num, cat, scaling, impute, dates={str(c): str(f) for c, f in dict(dates or {}).items()})
        if num:
            A = X[num].to_numpy(dtype=np.float64)
            inf = np.isinf(A).any(0)
            if inf.any():
                bad = [c for c, m in zip(num, inf, strict=True) if m]
                raise DataError(f"party {party!r}: columns {bad}{src} hold infinite values, which training "
                                "cannot use; replace them (e.g. by missing values and --impute) or drop the columns")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns are reported below
                if impute == "median":
                    fills = np.nanmedian(A, axis=0) if len(A) else np.full(len(num), np.nan)
                elif impute == "mean":
                    fills = np.nanmean(A, axis=0) if len(A) else np.full(len(num), np.nan)
                elif impute == "most-frequent":
                    fills = np.array([_most_frequent(A[:, j]) if len(A) else np.nan for j in range(len(num))],
                                     dtype=np.float64)
                else:
                    fills = None
            nan = np.isnan(A)
            if fills is not None:
                pp.fill.update({c: float(v) for c, v in zip(num, fills, strict=True) if np.isfinite(v)})
            elif nan.any():
                bad = [c for c, m in zip(num, nan.any(0), strict=True) if m]
                raise DataError(f"party {party!r}: columns {bad}{src} have missing values; impute them "
                                "(--impute median, mean or most-frequent; impute='median' from Python) or "
                                "drop those rows or columns")
            A = pp._impute_numeric(A, src)
            dominated: set[int] = set()
            if scaling == "minmax" and len(A):
                pp.warnings += _dominated(party, num, A, src, dominated)
            if scaling == "quantile" and len(A):
                k = max(2, min(N_QUANTILES, len(A)))
                Q = np.quantile(A, np.linspace(0, 1, k), axis=0)  # float64: any finite magnitude
                pp.quantiles = [Q[:, j].tolist() for j in range(len(num))]
                pp.scale, pp.offset = [1.0] * len(num), [0.0] * len(num)
            elif scaling != "none" and len(A):
                from sklearn.preprocessing import MinMaxScaler, RobustScaler, StandardScaler

                with np.errstate(over="ignore", invalid="ignore"):
                    if scaling == "minmax":
                        sc = MinMaxScaler().fit(A)
                        a, b = sc.scale_, sc.min_
                    elif scaling == "robust":
                        sc = RobustScaler().fit(A)
                        a, b = sc.scale_, sc.center_
                    else:
                        sc = StandardScaler().fit(A)
                        a, b = sc.scale_, sc.mean_
                if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) or (
                        scaling == "minmax" and not np.all(np.isfinite(A.max(0) - A.min(0)))):
                    bad = [c for c, x, y in zip(num, a, b, strict=True) if not (np.isfinite(x) and np.isfinite(y))]
                    bad = bad or [c for c, r in zip(num, A.max(0) - A.min(0), strict=True) if not np.isfinite(r)]
                    raise DataError(f"party {party!r}: columns {bad}{src} have values too large to scale (their "
                                    "range overflows); rescale them (e.g. divide by a power of ten), or use "
                                    "--scaling quantile (each value's rank, any magnitude)")
                pp.scale, pp.offset = a.tolist(), b.tolist()
            elif scaling != "none":
                pp.scale, pp.offset = [1.0] * len(num), [0.0] * len(num)
            if scaling != "none" and len(A):
                pp.warnings += _collapsed(party, num, A, pp._scaled(A.copy()), src, scaling, dominated)
        for c in cat:
            col = X[c]
            missing = col.isna().to_numpy()
            if missing.any():
                if impute == "none":
                    raise DataError(f"party {party!r}: categorical column {c!r}{src} has missing values; "
                                    "impute them (--impute most-frequent) or drop those rows")
                top = _most_frequent(col.to_numpy(dtype=object))
                if top is None:
                    raise DataError(f"party {party!r}: column {c!r}{src} has no value in the training rows; drop it")
                pp.fill[c] = str(top)
            values = col.dropna().astype(str).to_numpy()
            if c in pp.fill and missing.any():
                values = np.concatenate([values, np.full(int(missing.sum()), pp.fill[c], dtype=object)])
            pp.categories[c] = sorted(np.unique(values.astype(str)).tolist())
        if check_constant and len(X) > 1 and len(X.columns) and pp._all_constant(X):
            pp.warnings.append(cls.constant_warning(party, [str(c) for c in X.columns], src))
        return pp

    @staticmethod
    def constant_warning(party: str, cols: list[str], src: str) -> str:
        return (f"party {party!r}{src}: all its columns {cols[:8]}{' ...' if len(cols) > 8 else ''} "
                "are constant on the training rows, so it has no informative column and adds only "
                "traffic; check its file, or leave the party out")

    def _all_constant(self, X: pd.DataFrame) -> bool:
        """Every numeric column one value (or missing) and every categorical one at most one category."""
        if any(len(self.categories[c]) > 1 for c in self.categorical):
            return False
        if not self.numeric:
            return True
        with warnings.catch_warnings(), np.errstate(invalid="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            A = X[self.numeric].to_numpy(dtype=np.float64)
            return bool(np.all(~(np.nanmax(A, 0) > np.nanmin(A, 0))))

    def _impute_numeric(self, A: np.ndarray, src: str = "") -> np.ndarray:
        nan = np.isnan(A)
        if not nan.any():
            return A
        cols = np.flatnonzero(nan.any(0))
        missing = [self.numeric[j] for j in cols if self.numeric[j] not in self.fill]
        if missing:
            if self.impute == "none":
                raise DataError(f"party {self.party!r}: columns {missing}{src} have missing values; impute them "
                                "(--impute median|mean|most-frequent) or drop those rows or columns")
            raise DataError(f"party {self.party!r}: columns {missing}{src} have no value in the training rows "
                            "to impute from; drop them")
        fills = np.array([self.fill.get(c, np.nan) for c in self.numeric], dtype=np.float64)
        return np.where(nan, fills[None, :], A)

    def _scaled(self, A: np.ndarray) -> np.ndarray:
        """``A`` (float64, imputed numeric columns) scaled; modified in place for the affine scalings."""
        if self.scaling == "minmax":
            A *= np.asarray(self.scale)
            A += np.asarray(self.offset)
        elif self.scaling in ("standard", "robust"):
            A -= np.asarray(self.offset)
            A /= np.asarray(self.scale)
        elif self.scaling == "quantile":
            out = np.empty_like(A)
            for j, q in enumerate(self.quantiles):  # a loop over columns, each one vectorised
                q = np.asarray(q, dtype=np.float64)
                refs = np.linspace(0, 1, len(q))
                x = A[:, j]
                # scikit-learn's QuantileTransformer: interpolated up and down, averaged (ties
                # within the quantiles map to their middle rank); clipped to the training range
                y = 0.5 * (np.interp(x, q, refs) - np.interp(-x, -q[::-1], -refs[::-1]))
                y[x - 1e-7 < q[0]] = 0.0  # its bounds as scikit-learn sets them (BOUNDS_THRESHOLD)
                y[x + 1e-7 > q[-1]] = 1.0
                out[:, j] = y
            A = out
        return A

    # -------------------------------------------------------------------------------- applying
    @property
    def feature_names(self) -> list[str]:
        """The prepared feature names: the numeric columns, then ``column=category`` per level."""
        return list(self.numeric) + [f"{c}={k}" for c in self.categorical for k in self.categories[c]]

    @property
    def sources(self) -> list[str]:
        """The user's column behind each prepared feature (a one-hot level maps to its column, a
        derived year, month or day to its date column)."""
        date_of = {n: c for c in self.dates for n in derived_date_names(c)}
        return [date_of.get(c, c) for c in self.numeric] + [c for c in self.categorical for _ in self.categories[c]]

    def transform(self, X: pd.DataFrame, where: str = "", unseen: dict | None = None) -> np.ndarray:
        """The prepared float32 features of the rows ``X`` (any rows: training, test or new).

        A category not seen in training encodes as all zeros; with ``unseen`` (a dict) the number
        of such values per column is put in it (``{column: count}``, only columns that had some).
        """
        derive = {c: f for c, f in self.dates.items() if c in X.columns and derived_date_names(c)[0] not in X.columns}
        if derive:  # new rows with the date column itself (a saved model's predict)
            X = derive_dates(X, derive)
        missing_cols = [c for c in self.numeric + self.categorical if c not in X.columns]
        if missing_cols:
            src = f" in {where}" if where else ""
            raise DataError(f"party {self.party!r}: columns {missing_cols} are missing{src}; the model was "
                            f"trained with {self.numeric + self.categorical}")
        parts = []
        src = f" in {where}" if where else ""
        if self.numeric:
            try:
                A = X[self.numeric].to_numpy(dtype=np.float64)
            except (TypeError, ValueError):
                bad = [c for c in self.numeric if not pd.api.types.is_numeric_dtype(X[c])]
                raise DataError(f"party {self.party!r}: columns {bad}{src} are numeric in the model but hold text "
                                "here; pass the missing-value markers with --na-values (e.g. '?') or fix them") from None
            inf = np.isinf(A).any(0)
            if inf.any():
                bad = [c for c, m in zip(self.numeric, inf, strict=True) if m]
                raise DataError(f"party {self.party!r}: columns {bad}{src} hold infinite values, which training "
                                "cannot use; replace them (e.g. by missing values and --impute) or drop the columns")
            A = self._impute_numeric(A, src)
            # scikit-learn's scaler arithmetic, in place: the same floats as MinMaxScaler/StandardScaler
            A = self._scaled(np.array(A, dtype=np.float64))
            big = ~np.isfinite(A).all(0) | (np.abs(A) > np.finfo(np.float32).max).any(0)
            if big.any():
                bad = [c for c, m in zip(self.numeric, big, strict=True) if m]
                raise DataError(f"party {self.party!r}: columns {bad}{src} have values too large to scale or to "
                                "hold as float32; rescale them (e.g. divide by a power of ten), or use --scaling "
                                "quantile (each value's rank, any magnitude)")
            parts.append(A)
        for c in self.categorical:
            col = X[c]
            if col.isna().any():
                if c not in self.fill:
                    raise DataError(f"party {self.party!r}: categorical column {c!r} has missing values and "
                                    "the model imputes none; impute them or drop those rows")
                col = col.fillna(self.fill[c])
            v = col.astype(str).to_numpy()
            cats = np.asarray(self.categories[c], dtype=object)
            onehot = v[:, None] == cats[None, :]
            if unseen is not None:
                k = int(len(v) - onehot.any(1).sum())
                if k:
                    unseen[c] = k
            parts.append(onehot.astype(np.float64))
        if not parts:
            return np.zeros((len(X), 0), dtype=np.float32)
        return np.ascontiguousarray(np.hstack(parts).astype(np.float32))

    def subset(self, columns) -> tuple[PartyPreprocessor, np.ndarray]:
        """The preprocessing of ``columns`` alone (a subset of the party's columns) and, for each
        of its prepared features, its position among this preprocessor's prepared features: every
        step is per column (imputation, scaling, one-hot), so ``sub.transform(X[columns])`` is
        ``self.transform(X)[:, positions]`` to the bit. A party prepares a table in groups of
        columns with it (data/stream.py: a Parquet row group is read a column chunk at a time)."""
        want = set(columns)
        unknown = want - set(self.numeric) - set(self.categorical)
        if unknown:
            raise KeyError(f"party {self.party!r}: no column {sorted(unknown)} to prepare")
        num = [j for j, c in enumerate(self.numeric) if c in want]
        sub = PartyPreprocessor(self.party, [self.numeric[j] for j in num],
                                [c for c in self.categorical if c in want], self.scaling, self.impute,
                                fill={c: v for c, v in self.fill.items() if c in want},
                                scale=[self.scale[j] for j in num] if self.scale else [],
                                offset=[self.offset[j] for j in num] if self.offset else [],
                                quantiles=[self.quantiles[j] for j in num] if self.quantiles else [],
                                categories={c: list(self.categories[c]) for c in self.categorical if c in want},
                                dates={c: f for c, f in self.dates.items() if set(derived_date_names(c)) & want})
        positions, at = list(num), len(self.numeric)
        for c in self.categorical:
            k = len(self.categories[c])
            if c in want:
                positions += range(at, at + k)
            at += k
        return sub, np.asarray(positions, dtype=np.int64)

    # ----------------------------------------------------------------------------- persistence
    def to_dict(self) -> dict:
        """Plain numbers and strings (saved with a model, loaded without pickle)."""
        return {"party": self.party, "numeric": list(self.numeric), "categorical": list(self.categorical),
                "scaling": self.scaling, "impute": self.impute, "fill": dict(self.fill),
                "scale": [float(v) for v in self.scale], "offset": [float(v) for v in self.offset],
                "categories": {c: list(v) for c, v in self.categories.items()},
                **({"dates": dict(self.dates)} if self.dates else {}),
                **({"quantiles": [list(q) for q in self.quantiles]} if self.quantiles else {})}

    @classmethod
    def from_dict(cls, d: dict) -> PartyPreprocessor:
        return cls(**{k: d[k] for k in ("party", "numeric", "categorical", "scaling", "impute", "fill", "scale",
                                        "offset", "categories")}, dates=dict(d.get("dates", {})),
                   quantiles=[list(q) for q in d.get("quantiles", [])])


def _collapsed(party: str, names: list[str], A: np.ndarray, scaled: np.ndarray, src: str, scaling: str,
               skip: set[int] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """Columns whose scaled training values collapse: at least :data:`SQUASH_MIN_DISTINCT`
    distinct values before, at most :data:`SQUASHED_SHARE` of that many distinct float32 values
    after (e.g. half the rows at 1e300: min-max and robust scaling make the other half one number;
    issue 53). Sorted per column, vectorised over columns."""
    if len(A) < SQUASH_MIN_DISTINCT:
        return []
    with np.errstate(over="ignore", invalid="ignore"):
        S = np.asarray(scaled, dtype=np.float64).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf where float32 overflowed: counted apart
        before = (np.diff(np.sort(A, axis=0), axis=0) != 0).sum(0) + 1
        after = (np.diff(np.sort(S, axis=0), axis=0) != 0).sum(0) + 1
    bad = np.flatnonzero((before >= SQUASH_MIN_DISTINCT) & (after <= SQUASHED_SHARE * before))
    out = []
    for j in bad:
        if j in skip:  # already named by the min-max note
            continue
        big = float(np.max(np.abs(A[:, j])))
        out.append(f"party {party!r}: column {names[j]!r}{src} has values of very different magnitudes (up to "
                   f"{big:.3g}, median {float(np.median(A[:, j])):.3g}): under {scaling} scaling its "
                   f"{int(before[j])} distinct training values become {int(after[j])}; use --scaling quantile (each "
                   "value's rank, any magnitude), or clip or drop the extreme values")
    return out


def _dominated(party: str, names: list[str], A: np.ndarray, src: str, found: set[int] | None = None) -> list[str]:
    """Columns whose extreme values squash the others under min-max scaling: the middle half of the
    training values spans less than :data:`DOMINATED_SHARE` of the range (vectorised over columns)."""
    if len(A) < 4:
        return []
    with np.errstate(over="ignore", invalid="ignore"):
        q25, q50, q75 = np.percentile(A, [25, 50, 75], axis=0)
        lo, hi = A.min(0), A.max(0)
        rng = hi - lo
        share = (q75 - q25) / rng
    bad = np.flatnonzero((q75 > q25) & np.isfinite(rng) & (rng > 0) & (share < DOMINATED_SHARE))
    if found is not None:
        found.update(int(j) for j in bad)
    out = []
    for j in bad:
        far = hi[j] if hi[j] - q50[j] >= q50[j] - lo[j] else lo[j]
        out.append(f"party {party!r}: column {names[j]!r}{src} has extreme values (up to {far:.3g}, median "
                   f"{q50[j]:.3g}) that squash its other values to ~0 under min-max scaling (its middle half spans "
                   f"{share[j]:.1e} of its range); use --scaling robust (median and interquartile range) or "
                   "--scaling standard, or clip or drop those values; a table read into memory also takes "
                   "--scaling quantile (each value's rank, any magnitude)")
    return out
