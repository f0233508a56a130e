"""Load a user's own vertically partitioned data: one file per party, rows aligned by id.

>>> vds, report = load_party_files(                                   # doctest: +SKIP
...     {"bank": "bank.csv", "shop": "shop.parquet", "telecom": "telecom.csv.gz"},
...     label_party="bank", label_column="default", id_column="customer_id",
...     categorical={"shop": ["segment"]},
... )
>>> print(report.summary())                                           # doctest: +SKIP

Each file (``.csv``, ``.csv.gz``, ``.parquet`` or ``.pq``) holds the id column and that party's
columns; the label column is in the file of ``label_party``. Rows are aligned with an inner join on
the id (the ids present in every file, in sorted order); :class:`AlignmentReport` says how many rows
each file lost.

The label holder may also hold features: in the federation its labels go to the active party and
its other columns (if any) form a passive feature block named after it. If the label file holds
only the id and the label, it contributes no feature block.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path

import numpy as np
import pandas as pd

from verticalfs.data.table import TASKS
from verticalfs.data.vertical import PartyBlock, VerticalDataset
from verticalfs.exceptions import DataError
from verticalfs.names import LABEL_HOLDER

__all__ = ["MAX_INFERRED_CLASSES", "SUFFIXES", "AlignmentReport", "load_party_files"]

SUFFIXES: tuple[str, ...] = (".csv", ".csv.gz", ".parquet", ".pq")
#: Integer-like numeric labels with more distinct values than this are inferred to be regression.
MAX_INFERRED_CLASSES = 50


@dataclass
class AlignmentReport:
    """What the id alignment kept and lost, per party.

    Attributes
    ----------
    files : dict of str -> str
        Party -> file path.
    rows_in_file : dict of str -> int
        Party -> number of rows in its file.
    rows_kept : dict of str -> int
        Party -> rows whose id is in every file (the same number for all parties).
    rows_lost : dict of str -> int
        Party -> rows dropped because their id is missing from at least one other file.
    n_aligned : int
        Number of aligned samples.
    label_party : str
        Party whose file holds the label.
    """

    files: dict[str, str] = field(default_factory=dict)
    rows_in_file: dict[str, int] = field(default_factory=dict)
    rows_kept: dict[str, int] = field(default_factory=dict)
    rows_lost: dict[str, int] = field(default_factory=dict)
    n_aligned: int = 0
    label_party: str = ""

    def summary(self) -> str:
        """A human-readable table of the alignment, one line per party."""
        width = max([len(p) for p in self.files] + [5])
        lines = [
            f"aligned {self.n_aligned} samples by id over {len(self.files)} parties "
            f"(labels from {self.label_party!r})",
            f"  {'party':<{width}}  {'in file':>8}  {'kept':>8}  {'lost':>8}  file",
        ]
        for p, path in self.files.items():
            lines.append(
                f"  {p:<{width}}  {self.rows_in_file[p]:>8}  {self.rows_kept[p]:>8}  "
                f"{self.rows_lost[p]:>8}  {path}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


# ---------------------------------------------------------------------------- reading
def _suffix(path: Path) -> str | None:
    name = path.name.lower()
    for s in sorted(SUFFIXES, key=len, reverse=True):
        if name.endswith(s):
            return s
    return None


def _read(party: str, path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise DataError(
            f"party {party!r}: file {str(path)!r} does not exist; check the path "
            f"(relative paths are taken from {str(Path.cwd())!r})"
        )
    suffix = _suffix(path)
    if suffix is None:
        raise DataError(
            f"party {party!r}: file {str(path)!r} has an unsupported type; use one of "
            f"{', '.join(SUFFIXES)} (convert the file, or rename it if it already is one of these)"
        )
    try:
        if suffix in (".parquet", ".pq"):
            if not any(importlib.util.find_spec(m) for m in ("pyarrow", "fastparquet")):
                raise DataError(
                    f"party {party!r}: reading the Parquet file {str(path)!r} needs pyarrow; "
                    "run `pip install pyarrow` (or convert the file to CSV)"
                )
            return pd.read_parquet(path)
        return pd.read_csv(path)
    except DataError:
        raise
    except Exception as exc:  # pandas/pyarrow raise many types for malformed files
        raise DataError(f"party {party!r}: could not read {str(path)!r}: {exc}") from exc


def _show(values, k: int = 5) -> str:
    vals = [repr(v.item() if hasattr(v, "item") else v) for v in list(values)[:k]]
    more = " ..." if len(values) > k else ""
    return "[" + ", ".join(vals) + more + "]"


def _check_ids(party: str, path: Path, df: pd.DataFrame, id_column: str) -> None:
    if id_column not in df.columns:
        raise DataError(
            f"party {party!r}: file {str(path)!r} has no id column {id_column!r}; its columns are "
            f"{[str(c) for c in df.columns]}. Pass id_column=... naming the column that identifies "
            "samples (the same in every file)"
        )
    ids = df[id_column]
    n_missing = int(ids.isna().sum())
    if n_missing:
        raise DataError(
            f"party {party!r}: id column {id_column!r} in {str(path)!r} has {n_missing} missing "
            "values; every row needs an id (drop those rows)"
        )
    dup = ids[ids.duplicated(keep=False)].unique()
    if len(dup):
        raise DataError(
            f"party {party!r}: id column {id_column!r} in {str(path)!r} has {len(dup)} duplicated "
            f"ids, e.g. {_show(np.sort(dup))}; ids must be unique per file (deduplicate or aggregate "
            "the rows)"
        )


# ---------------------------------------------------------------------------- labels
def _labels(
    y: pd.Series, task: str | None, path: Path, column: str
) -> tuple[np.ndarray, str, list[str] | None]:
    """Task inference and label coding; returns (y, task, class_names)."""
    where = f"label column {column!r} in {str(path)!r}"
    numeric = pd.api.types.is_numeric_dtype(y) and not pd.api.types.is_bool_dtype(y)
    values = y.to_numpy()
    if task is not None and task not in TASKS:
        raise DataError(f"unknown task {task!r} for {where}; use one of {TASKS} or None to infer it")
    if task is None:
        if numeric:
            v = values.astype(np.float64)
            integer_like = bool(np.all(np.isfinite(v)) and np.all(v == np.round(v)))
            n_unique = len(np.unique(v))
            if not integer_like or n_unique > MAX_INFERRED_CLASSES:
                task = "regression"
            else:
                task = "binary" if n_unique <= 2 else "multiclass"
        else:
            task = "binary" if y.nunique() <= 2 else "multiclass"
    if task == "regression":
        if not numeric:
            raise DataError(
                f"{where} is not numeric ({y.dtype}) but the task is regression; convert it to "
                "numbers or use a classification task"
            )
        return values.astype(np.float64), task, None
    if numeric:
        uniq, codes = np.unique(values, return_inverse=True)
        names = [str(int(u)) if float(u).is_integer() else str(u) for u in uniq]
    else:
        uniq, codes = np.unique(values.astype(str), return_inverse=True)
        names = [str(u) for u in uniq]
    if len(uniq) < 2:
        raise DataError(
            f"{where} has only one class ({names[0]!r}) among the aligned rows; a classification "
            "label needs at least two (check the label column, or that the id alignment did not "
            "drop the other classes)"
        )
    if task == "binary" and len(uniq) != 2:
        raise DataError(
            f"{where} has {len(uniq)} classes but task='binary'; use task='multiclass' (or None)"
        )
    return codes.astype(np.int64), task, names


# ---------------------------------------------------------------------------- main entry
def load_party_files(
    files: Mapping[str, str | Path],
    *,
    label_party: str,
    label_column: str,
    id_column: str = "id",
    categorical: Mapping[str, Sequence[str]] | None = None,
    task: str | None = None,
    name: str = "user",
) -> tuple[VerticalDataset, AlignmentReport]:
    """Read one file per party and align the rows by id.

    Parameters
    ----------
    files : mapping of party name -> path
        One ``.csv``, ``.csv.gz``, ``.parquet`` or ``.pq`` file per party, each with the id column.
        Party order gives the order of the feature blocks.
    label_party : str
        The party whose file holds ``label_column``. Its other columns, if any, become a passive
        feature block with that party's name; the labels go to the active party.
    label_column : str
        Name of the label column.
    id_column : str
        Name of the sample-id column, the same in every file; ids must be unique per file.
    categorical : mapping of party name -> list of column names, optional
        Non-numeric columns to one-hot encode later. Every non-numeric column must be listed.
    task : {"binary", "multiclass", "regression"}, optional
        Inferred when None: non-integer numeric labels (or more than 50 distinct integer values)
        -> regression; two distinct values -> binary; otherwise multiclass. Classification labels
        are mapped to codes ``0..C-1`` by sorted value; ``class_names`` keeps the original values.
    name : str
        Name of the data set.

    Returns
    -------
    VerticalDataset
        Feature blocks aligned by id (``ids`` = the aligned ids, sorted), labels at the active
        party.
    AlignmentReport
        Rows in each file, kept and lost.

    Raises
    ------
    DataError
        Missing file, unsupported suffix, missing id or label column, duplicated ids, undeclared
        non-numeric column, missing values, feature-name clash across parties, no common ids, or a
        classification label with a single class. Each message names the file, the column and the
        fix.
    """
    if not files:
        raise DataError("no party files given; pass {party name: path} with at least one file")
    files = {str(p): Path(f) for p, f in files.items()}
    if LABEL_HOLDER in files:
        raise DataError(
            f"party name {LABEL_HOLDER!r} (file {str(files[LABEL_HOLDER])!r}) is reserved for the label holder "
            "in the federation; give that party another name"
        )
    if label_party not in files:
        raise DataError(
            f"label_party {label_party!r} has no file; the parties are {list(files)}"
        )
    if label_column == id_column:
        raise DataError(f"label_column and id_column are both {label_column!r}; they must differ")
    categorical = {str(p): [str(c) for c in cols] for p, cols in (categorical or {}).items()}
    unknown = [p for p in categorical if p not in files]
    if unknown:
        raise DataError(
            f"categorical names parties {unknown} that have no file; the parties are {list(files)}"
        )

    frames: dict[str, pd.DataFrame] = {}
    for party, path in files.items():
        df = _read(party, path)
        df.columns = [str(c) for c in df.columns]
        _check_ids(party, path, df, id_column)
        frames[party] = df

    lpath = files[label_party]
    if label_column not in frames[label_party].columns:
        cols = [c for c in frames[label_party].columns if c != id_column]
        raise DataError(
            f"party {label_party!r}: label column {label_column!r} is not in {str(lpath)!r}; its "
            f"columns are {cols}. Pass label_column=... or label_party=... for the file holding it"
        )

    # feature columns per party, declared categoricals, name clashes
    feats: dict[str, list[str]] = {}
    owner: dict[str, str] = {}
    for party, df in frames.items():
        drop = {id_column, label_column} if party == label_party else {id_column}
        cols = [c for c in df.columns if c not in drop]
        for c in categorical.get(party, []):
            if c not in cols:
                raise DataError(
                    f"party {party!r}: column {c!r} is declared categorical but is not a feature "
                    f"column of {str(files[party])!r}; its feature columns are {cols}"
                )
        cat = set(categorical.get(party, []))
        for c in cols:
            s = df[c]
            if c not in cat and not pd.api.types.is_numeric_dtype(s):
                raise DataError(
                    f"party {party!r}: column {c!r} in {str(files[party])!r} is not numeric "
                    f"({s.dtype}); declare it via categorical={{{party!r}: [{c!r}]}} to one-hot "
                    "encode it, or encode it as numbers yourself"
                )
            if c in owner:
                raise DataError(
                    f"column {c!r} is in the files of both {owner[c]!r} ({str(files[owner[c]])!r}) "
                    f"and {party!r} ({str(files[party])!r}); feature names must be unique across "
                    "parties for reporting, rename one of them"
                )
            owner[c] = party
        feats[party] = cols
    if not any(feats.values()):
        raise DataError(
            "no party holds any feature column besides the id and label; add feature files"
        )

    # inner join on ids: the ids present in every file, sorted
    id_arrays = {p: df[id_column].to_numpy() for p, df in frames.items()}
    dtypes = {p: str(frames[p][id_column].dtype) for p in frames}
    try:
        arrays = list(id_arrays.values())
        common = reduce(np.intersect1d, arrays[1:], np.unique(arrays[0]))
    except TypeError as exc:
        raise DataError(
            f"id column {id_column!r} has incomparable types across files ({dtypes}); use one "
            "type in every file"
        ) from exc
    if len(common) == 0:
        examples = "; ".join(
            f"{str(files[p])!r}: {_show(a, 3)} ({dtypes[p]})" for p, a in id_arrays.items()
        )
        raise DataError(
            f"no id in column {id_column!r} is present in every file; ids per file look like "
            f"{examples}. Check that the files use the same ids and the same id type"
        )
    report = AlignmentReport(label_party=label_party, n_aligned=len(common))
    aligned: dict[str, pd.DataFrame] = {}
    for party, df in frames.items():
        a = df.set_index(id_column).loc[common].reset_index(drop=True)
        aligned[party] = a
        report.files[party] = str(files[party])
        report.rows_in_file[party] = len(df)
        report.rows_kept[party] = len(a)
        report.rows_lost[party] = len(df) - len(a)

    # missing values among the aligned rows
    for party, a in aligned.items():
        check = feats[party] + ([label_column] if party == label_party else [])
        if not check:
            continue
        n_na = a[check].isna().sum()
        bad = n_na[n_na > 0]
        if len(bad):
            c, k = str(bad.index[0]), int(bad.iloc[0])
            others = f" (also {list(map(str, bad.index[1:]))})" if len(bad) > 1 else ""
            raise DataError(
                f"party {party!r}: column {c!r} in {str(files[party])!r} has {k} missing values "
                f"among the {len(a)} aligned rows{others}; impute them or drop those rows/the column"
            )

    y, task_, class_names = _labels(aligned[label_party][label_column], task, lpath, label_column)

    blocks = []
    for party, cols in feats.items():
        if not cols:
            continue
        X = aligned[party][cols].copy()
        cat = [c for c in cols if c in set(categorical.get(party, []))]
        for c in cols:
            X[c] = X[c].astype(str) if c in cat else X[c].astype(np.float64)
        blocks.append(PartyBlock(name=party, X=X, categorical=cat))

    vds = VerticalDataset(
        name=name,
        blocks=blocks,
        y=y,
        task=task_,
        ids=np.asarray(common),
        class_names=class_names,
    )
    return vds, report
