"""Load a user's own vertically partitioned data: one file per party, rows aligned by id.

>>> vds, report = load_party_files(                                   # doctest: +SKIP
...     {"bank": "bank.csv", "shop": "shop.parquet", "telecom": "telecom.csv.gz"},
...     label_party="bank", label_column="default", id_column="customer_id",
...     categorical={"shop": ["segment"]},
... )
>>> print(report.summary())                                           # doctest: +SKIP

Each file (``.csv``, ``.csv.gz``, ``.parquet`` or ``.pq``) holds the id column and that party's
columns; the label column is in the file of ``label_party``. Ids are read as strings (``"007"`` and
``"7"`` are different ids). Rows are aligned with an inner join on the id (the ids present in every
file, in sorted order); :class:`AlignmentReport` says how many rows each file lost, which columns
were taken as categorical and which have missing values (imputed later per party, on its own
training rows, if asked).

Files are checked before anything else runs, each problem reported with the file, the column and
the fix: a directory instead of a file, an unknown type, no data rows, a delimiter that leaves one
column, a file that is not in the given encoding, nested Parquet columns, duplicate or empty column
names, a party file with only ids, a file larger than ``max_bytes`` (on disk, or decompressed), a numeric
column holding a marker such as ``?`` (pass ``na_values``), an ambiguous label (pass ``task``).

The label holder may also hold features: in the federation its labels go to the active party and
its other columns (if any) form a passive feature block named after it. If the label file holds
only the id and the label, it contributes no feature block.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from verticalfs.data.table import TASKS
from verticalfs.data.vertical import PartyBlock, VerticalDataset
from verticalfs.exceptions import DataError
from verticalfs.names import LABEL_HOLDER

__all__ = ["DEFAULT_MAX_BYTES", "MAX_INFERRED_CLASSES", "MIN_ROWS_PER_INFERRED_CLASS", "SUFFIXES", "AlignmentReport", "load_party_files",
           "read_party_rows"]

SUFFIXES: tuple[str, ...] = (".csv", ".csv.gz", ".parquet", ".pq")
#: Integer-like numeric labels with at most this many distinct values are inferred to be classes
#: whatever the number of rows.
MAX_INFERRED_CLASSES = 20
#: More distinct integers are still classes when each has at least this many rows on average
#: (scikit-learn's ``type_of_target`` calls any integer label "multiclass"; it warns when the
#: classes exceed half the rows). 26 letters over 1,560 rows (60 a class) or 100 classes over
#: 50,000 rows are classes; 1,000 integers over 2,000 rows (2 a class) ask for ``task``.
MIN_ROWS_PER_INFERRED_CLASS = 20
#: The most bytes a party file may hold (``max_bytes``, ``--max-file-mb``): its size on disk, and
#: decompressed for ``.csv.gz`` and Parquet; a larger file is refused before it is read
DEFAULT_MAX_BYTES = 1 << 30
#: tasks a user may name: the precise ones and ``classification`` (binary or multiclass by count)
USER_TASKS: tuple[str, ...] = (*TASKS, "classification")


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
    categorical: dict[str, list[str]] = field(default_factory=dict)
    auto_categorical: bool = False
    missing: dict[str, dict[str, int]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """A human-readable table of the alignment, one line per party."""
        width = max([len(p) for p in self.files] + [5])
        lines = [
            f"aligned {self.n_aligned} samples by id over {len(self.files)} parties"
            + (f" (labels from {self.label_party!r})" if self.label_party else " (no labels: new rows to predict)"),
            f"  {'party':<{width}}  {'in file':>8}  {'kept':>8}  {'lost':>8}  file",
        ]
        for p, path in self.files.items():
            lines.append(
                f"  {p:<{width}}  {self.rows_in_file[p]:>8}  {self.rows_kept[p]:>8}  "
                f"{self.rows_lost[p]:>8}  {path}"
            )
        cats = {p: c for p, c in self.categorical.items() if c}
        if cats:
            how = "chosen automatically (non-numeric)" if self.auto_categorical else "declared"
            lines.append(f"categorical columns, {how}: " + "; ".join(f"{p}: {', '.join(c)}" for p, c in cats.items()))
        miss = {p: m for p, m in self.missing.items() if m}
        if miss:
            lines.append("missing values among the aligned rows: " + "; ".join(
                f"{p}: " + ", ".join(f"{c} ({k})" for c, k in m.items()) for p, m in miss.items()))
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


class _Limited(io.RawIOBase):
    """A readable stream that refuses to give more than ``limit`` bytes (a decompression guard)."""

    def __init__(self, raw, limit: int, party: str, path: Path) -> None:
        self.raw, self.limit, self.party, self.path, self.n = raw, limit, party, path, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self.raw.read(len(b))
        self.n += len(data)
        if self.n > self.limit:
            raise _too_big(self.party, self.path, "expands when decompressed to more than", self.limit)
        b[: len(data)] = data
        return len(data)


class _Counted(io.RawIOBase):
    """A readable stream that counts the bytes and lines read through it and logs progress
    (:class:`~verticalfs.utils.progress.Ticker`): reading a large CSV printed nothing for 900 s
    (issue 53)."""

    def __init__(self, raw, ticker) -> None:
        self.raw, self.ticker, self.n, self.lines = raw, ticker, 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self.raw.read(len(b))
        b[: len(data)] = data
        self.n += len(data)
        self.lines += data.count(b"\n")
        self.ticker(self.n / 2**20, f" ({self.lines:,} rows)")
        return len(data)

    def close(self) -> None:
        self.raw.close()
        super().close()


def _too_big(party: str, path: Path, what: str, max_bytes: int) -> DataError:
    return DataError(f"party {party!r}: {str(path)!r} {what} the limit of {max_bytes:,} bytes "
                     f"({max_bytes / 2**20:.3g} MiB, --max-file-mb / max_bytes=); raise the limit if this machine "
                     "has the memory (reading a CSV takes several times its size), or give a smaller file")


def _check_size(party: str, path: Path, max_bytes: int) -> None:
    """Refuse a file larger than ``max_bytes`` on disk before reading it (compressed files are
    bounded again as they expand)."""
    size = path.stat().st_size
    if size > max_bytes:
        raise _too_big(party, path, f"is {size:,} bytes ({size / 2**20:.3g} MiB), more than", max_bytes)


def _open_text(party: str, path: Path, max_bytes: int):
    """A binary stream of the file's bytes (decompressed and size-limited for ``.gz``)."""
    if path.name.lower().endswith(".gz"):
        return io.BufferedReader(_Limited(gzip.open(path, "rb"), max_bytes, party, path))
    return open(path, "rb")


def _check_file(party: str, path: Path) -> str:
    if path.is_dir():
        raise DataError(f"party {party!r}: {str(path)!r} is a directory, not a file; give the path of the "
                        "party's data file inside it")
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
    return suffix


#: the first bytes of binary formats a party file is mistaken for (Parquet is read by its suffix)
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"PAR1", "a Parquet file: name it .parquet"),
    (b"PK\x03\x04", "a zip archive (or an Excel .xlsx workbook): export the sheet as CSV"),
    (b"\xd0\xcf\x11\xe0", "an old Excel .xls workbook: export the sheet as CSV"),
    (b"\x1f\x8b", "gzip-compressed: name it .csv.gz"),
    (b"BZh", "bzip2-compressed: decompress it"),
    (b"\xfd7zXZ", "xz-compressed: decompress it"),
    (b"%PDF", "a PDF document"),
    (b"SQLite format 3", "an SQLite database: export the table as CSV"),
)


def _check_text(party: str, path: Path, max_bytes: int) -> None:
    """Refuse binary content before reading it as text: a known signature, or NUL bytes in its start."""
    with _open_text(party, path, max_bytes) as fh:
        head = fh.read(8192)
    what = next((w for sig, w in _SIGNATURES if head.startswith(sig)), None)
    if what is None and b"\x00" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff")):
        what = f"binary (a NUL byte at offset {head.index(bytes(1))})"
    if what is not None:
        raise DataError(f"party {party!r}: {str(path)!r} is not a text CSV file: its content is {what}; give "
                        f"the party's data as {', '.join(SUFFIXES)}")


def _bad_byte(party: str, path: Path, encoding: str, max_bytes: int) -> DataError:
    """The error for a file that does not decode: the line and byte offset of the first bad byte
    (read in chunks; counting newlines is per chunk, not per row)."""
    import codecs

    dec = codecs.getincrementaldecoder(encoding)()
    start, lines, line_start = 0, 1, 0  # the buffer's file offset, its line, the offset that line starts at
    with _open_text(party, path, max_bytes) as fh:
        while True:
            chunk = fh.read(1 << 20)
            pending = dec.getstate()[0] if hasattr(dec, "getstate") else b""
            buf = bytes(pending) + chunk
            try:
                dec.decode(chunk, final=not chunk)
            except UnicodeDecodeError as e:
                head = buf[:e.start]
                line = lines + head.count(b"\n")
                if b"\n" in head:
                    line_start = start + head.rfind(b"\n") + 1
                pos = start + e.start
                return DataError(
                    f"party {party!r}: {str(path)!r} is not valid {encoding}: line {line}, column "
                    f"{pos - line_start + 1} (byte offset {pos}) holds {buf[e.start:max(e.end, e.start + 1)]!r}; "
                    "fix that byte, or pass the file's encoding if the whole file uses another "
                    "(--encoding latin-1, encoding='latin-1', ...)")
            if not chunk:
                break
            done = buf[: len(buf) - len(dec.getstate()[0])] if hasattr(dec, "getstate") else buf
            lines += done.count(b"\n")
            if b"\n" in done:
                line_start = start + done.rfind(b"\n") + 1
            start += len(done)
    return DataError(f"party {party!r}: {str(path)!r} is not valid {encoding}; pass its encoding "
                     "(--encoding latin-1, encoding='latin-1', ...)")


def _header(party: str, path: Path, delimiter: str, encoding: str, max_bytes: int) -> list[str]:
    """The CSV's column names, read with the csv module (pandas would rename duplicates silently)."""
    _check_text(party, path, max_bytes)
    with _open_text(party, path, max_bytes) as fh, io.TextIOWrapper(fh, encoding=encoding, newline="") as text:
        try:  # (the wrapper closed by its own `with`: an unclosed one warned, issue 53)
            line = text.readline()
        except UnicodeDecodeError:
            raise _bad_byte(party, path, encoding, max_bytes) from None
    if not line.strip():
        raise DataError(f"party {party!r}: {str(path)!r} is empty (no header row); give a file with a "
                        "header row of column names and one row per sample")
    return next(csv.reader([line], delimiter=delimiter))


def _read(party: str, path: Path, *, delimiter: str = ",", encoding: str = "utf-8", na_values=None,
          id_column: str = "id", max_bytes: int = DEFAULT_MAX_BYTES) -> pd.DataFrame:
    suffix = _check_file(party, path)
    _check_size(party, path, max_bytes)
    try:
        if suffix in (".parquet", ".pq"):
            if not any(importlib.util.find_spec(m) for m in ("pyarrow", "fastparquet")):
                raise DataError(
                    f"party {party!r}: reading the Parquet file {str(path)!r} needs pyarrow; "
                    "run `pip install pyarrow` (or convert the file to CSV)"
                )
            df = _read_parquet(party, path, max_bytes)
        else:
            names = _header(party, path, delimiter, encoding, max_bytes)
            empty = [i + 1 for i, c in enumerate(names) if not c.strip()]
            if empty:
                raise DataError(f"party {party!r}: {str(path)!r} has empty column names at positions {empty}; "
                                "name every column in the header row")
            dup = sorted({c for c in names if names.count(c) > 1})
            if dup:
                raise DataError(f"party {party!r}: {str(path)!r} has duplicate column names {dup}; rename them "
                                "so that each column has its own name")
            if len(names) == 1 and any(ch in names[0] for ch in ";\t|"):
                guess = next(ch for ch in ";\t|" if ch in names[0])
                raise DataError(f"party {party!r}: reading {str(path)!r} with delimiter {delimiter!r} gives a "
                                f"single column {names[0][:40]!r}; its columns look separated by {guess!r}: pass "
                                f"--delimiter {guess!r} (delimiter={guess!r})")
            from verticalfs.utils.progress import Ticker

            size = None if suffix.endswith(".gz") else path.stat().st_size / 2**20
            ticker = Ticker(f"party {party!r}: reading {path.name}", size, "MB")
            with io.BufferedReader(_Counted(_open_text(party, path, max_bytes), ticker), 1 << 20) as fh:
                df = pd.read_csv(fh, sep=delimiter, encoding=encoding, na_values=na_values,
                                 dtype={id_column: str} if id_column in names else None)
            ticker.end(f" ({len(df):,} rows x {len(df.columns)} columns)")
    except DataError:
        raise
    except UnicodeDecodeError:
        raise _bad_byte(party, path, encoding, max_bytes) from None
    except Exception as exc:  # pandas/pyarrow raise many types for malformed files
        raise DataError(f"party {party!r}: could not read {str(path)!r}: {type(exc).__name__}: {exc}") from exc
    if len(df) == 0:
        raise DataError(f"party {party!r}: {str(path)!r} has a header but no data rows; give one row per sample")
    return df


def _read_parquet(party: str, path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> pd.DataFrame:
    import pyarrow.parquet as pq
    import pyarrow.types as pt

    meta = pq.read_metadata(path)  # the footer only
    # decoded: its pages uncompressed, and at least 8 bytes per value in memory (dictionary and
    # run-length encodings make a column of repeated values tiny in the file)
    full = max(sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)),
               8 * meta.num_rows * meta.num_columns)
    if full > max_bytes:
        raise _too_big(party, path, f"holds {meta.num_rows:,} rows x {meta.num_columns} columns, {full:,} bytes "
                       f"({full / 2**20:.3g} MiB) decoded, more than", max_bytes)
    schema = pq.read_schema(path)
    nested = [f.name for f in schema if pt.is_nested(f.type)]
    if nested:
        raise DataError(f"party {party!r}: {str(path)!r} has nested (list/struct/map) columns {nested}; "
                        "flatten them into one plain column each")
    names = [str(n) for n in schema.names]
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise DataError(f"party {party!r}: {str(path)!r} has duplicate column names {dup}; rename them")
    empty = [i + 1 for i, c in enumerate(names) if not c.strip()]
    if empty:
        raise DataError(f"party {party!r}: {str(path)!r} has empty column names at positions {empty}")
    return pd.read_parquet(path)


def _all_integers(ids: np.ndarray, block: int = 1 << 16) -> bool:
    """Every id an integer literal (digits after an optional minus), checked a block at a time (no
    stripped copy of all the ids), stopping at the first block that has another."""
    for a in range(0, len(ids), block):
        if not np.all(np.char.isdigit(np.char.lstrip(ids[a:a + block], "-"))):
            return False
    return True


def _sort_ids(ids: np.ndarray) -> np.ndarray:
    """Ids in a natural order: by integer value when every id is an integer literal (``"9"`` before
    ``"10"``; ``"007"`` and ``"7"`` stay distinct, the shorter first), else as text."""
    ids = np.asarray(ids, dtype=str)
    if ids.size and _all_integers(ids):
        try:
            vals = ids.astype(np.float64)
        except ValueError:
            return np.sort(ids)
        return ids[np.lexsort((ids, np.char.str_len(ids), vals))]
    return np.sort(ids)


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
    """Task inference and label coding; returns (y, task, class_names).

    Inference names only unambiguous cases: text or boolean labels, integer labels with at most
    :data:`MAX_INFERRED_CLASSES` values, and integer labels with more values but at least
    :data:`MIN_ROWS_PER_INFERRED_CLASS` rows per value on average are classes; labels with many
    non-integer values are a regression target. Many distinct integers with few rows each, or
    integers with a few non-integer values among them (one 0.5 among 0/1 labels), are ambiguous:
    an error asks for ``task``.
    """
    where = f"label column {column!r} in {str(path)!r}"
    if task is not None and task not in USER_TASKS:
        raise DataError(f"unknown task {task!r} for {where}; use one of {USER_TASKS} or None to infer it")
    n_missing = int(y.isna().sum())
    if n_missing:
        raise DataError(f"{where} is missing for {n_missing} of the aligned rows; every row needs a label "
                        "(drop those rows)")
    numeric = pd.api.types.is_numeric_dtype(y) and not pd.api.types.is_bool_dtype(y)
    values = y.to_numpy()
    if task is None:
        if not numeric:
            task = "classification"
        else:
            v = values.astype(np.float64)
            if not np.all(np.isfinite(v)):
                raise DataError(f"{where} holds infinite values; a label must be a finite number or a class")
            integer = v == np.round(v)
            n_unique = len(np.unique(v))
            if integer.all() and (n_unique <= MAX_INFERRED_CLASSES
                                  or n_unique * MIN_ROWS_PER_INFERRED_CLASS <= len(v)):
                task = "classification"
            elif integer.all():
                raise DataError(
                    f"{where} has {n_unique} distinct integer values over {len(v)} rows (fewer than "
                    f"{MIN_ROWS_PER_INFERRED_CLASS} a value): classes or a quantity? Say which with "
                    "--task classification or --task regression (task=...)")
            elif integer.mean() > 0.95 and len(np.unique(v[integer])) <= MAX_INFERRED_CLASSES:
                odd = np.unique(v[~integer])[:3].tolist()
                raise DataError(
                    f"{where} looks like classes {np.unique(v[integer])[:5].tolist()} but {int((~integer).sum())} "
                    f"rows hold other values such as {odd}; fix those labels, or say --task regression "
                    "(task='regression') if it is a quantity")
            else:
                task = "regression"
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
    if task == "classification":
        task = "binary" if len(uniq) == 2 else "multiclass"
    if task == "binary" and len(uniq) != 2:
        raise DataError(
            f"{where} has {len(uniq)} classes but task='binary'; use task='multiclass' (or None)"
        )
    return codes.astype(np.int64), task, names


_MISSING_MARKERS = ("?", "-", "--", "na", "n/a", "nan", "null", "none", "missing", ".", "unknown", "")


def _numeric_with_markers(s: pd.Series) -> list[str] | None:
    """If ``s`` holds numbers except for a few marker values (``?``, ``-``, ...), those markers."""
    if pd.api.types.is_numeric_dtype(s):
        return None
    v = s.dropna().astype(str).str.strip()
    if v.empty:
        return None
    num = pd.to_numeric(v, errors="coerce")
    bad = v[num.isna()]
    if bad.empty or len(bad) > 0.5 * len(v):
        return None
    markers = sorted(bad.unique().tolist())
    if len(markers) > 3:
        return None
    return markers


def strip_ids(ids) -> np.ndarray:
    """Ids without surrounding whitespace, and all-digit ids without leading zeros (``" 007 "`` ->
    ``"7"``, ``"000"`` -> ``"0"``); vectorised."""
    s = np.char.strip(np.asarray(ids, dtype=str))
    z = np.char.lstrip(s, "0")
    z = np.where(z == "", "0", z)
    return np.where(np.char.isdigit(s), z, s)


def _strip_hint(id_arrays: Mapping[str, np.ndarray], files: Mapping[str, Path], n_common: int) -> str | None:
    """If stripping the ids (:func:`strip_ids`) would align more rows: how many, with an example."""
    norm = {p: strip_ids(a) for p, a in id_arrays.items()}
    arrays = list(norm.values())
    common = reduce(np.intersect1d, arrays[1:], np.unique(arrays[0]))
    if len(common) <= n_common:
        return None
    exact = reduce(np.intersect1d, list(id_arrays.values())[1:], np.unique(list(id_arrays.values())[0]))
    extra = np.setdiff1d(common, strip_ids(exact)) if len(exact) else common
    key = extra[0]
    raw = {p: id_arrays[p][np.flatnonzero(norm[p] == key)[0]] for p in id_arrays}
    (p1, r1), (p2, r2) = next(((a, b) for a in raw.items() for b in raw.items() if a[1] != b[1]),
                              list(raw.items())[:2])
    return (f"{len(common) - n_common} more rows would align by id if surrounding whitespace and leading zeros "
            f"were stripped (e.g. {str(r1)!r} in {str(files[p1])!r} and {str(r2)!r} in {str(files[p2])!r}); if "
            "they are the same ids, pass --strip-ids (strip_ids=True)")


def _read_frames(files: Mapping[str, Path], *, id_column: str, na_values, delimiter: str, encoding: str,
                 max_bytes: int, strip: bool = False) -> dict[str, pd.DataFrame]:
    """Each party's file read and its ids checked (column names and ids as text; ``strip``: the
    ids stripped of surrounding whitespace and leading zeros first)."""
    frames: dict[str, pd.DataFrame] = {}
    for party, path in files.items():
        df = _read(party, path, delimiter=delimiter, encoding=encoding, na_values=na_values,
                   id_column=id_column, max_bytes=max_bytes)
        df.columns = [str(c) for c in df.columns]
        if strip and id_column in df.columns:
            ok = df[id_column].notna().to_numpy()
            df[id_column] = df[id_column].astype(object)
            df.loc[ok, id_column] = strip_ids(df.loc[ok, id_column].astype(str).to_numpy())
        _check_ids(party, path, df, id_column)
        df[id_column] = df[id_column].astype(str)
        frames[party] = df
    return frames


def refuse_datetimes(party: str, path: Path, levels: Mapping[str, int]) -> DataError:
    """The error for date and time columns (``levels``: their distinct values), with both options."""
    from verticalfs.data.preprocess import derived_date_names

    dt = list(levels)
    return DataError(
        f"party {party!r}: {f'columns {dt}' if len(dt) > 1 else f'column {dt[0]!r}'} in {str(path)!r} holds dates or "
        f"times ({', '.join(f'{c}: {k} distinct values' for c, k in levels.items())}), which one-hot encoding "
        f"would make a level of each; pass --datetime derive (datetime='derive': their year, month and day "
        f"as numeric columns {derived_date_names(dt[0])}) or --datetime drop (leave them out), or encode "
        "them yourself")


def streamed_datetimes(party: str, table: Any, schema: pd.DataFrame, path: Path, *, skip: set, how: str) -> list[str]:
    """The date and time columns of a table read in pieces (``table``: a
    :class:`~verticalfs.data.stream.StreamedTable` or another engine's table, ``schema`` its empty
    frame): typed columns (Parquet timestamps) by their type, text columns on their first 2,000
    rows when the table reads a column (on another engine by their type only). Refused
    (``how="refuse"``) like :func:`handle_datetimes`; ``derive`` is not possible in pieces yet
    (an error saying so); ``drop``: the names to leave out."""
    from verticalfs.data.preprocess import datetime_columns
    from verticalfs.data.stream import StreamedTable

    cand = [c for c in schema.columns if c not in skip]
    column = table.column if isinstance(table, StreamedTable) else None
    probe = {c: schema[c] if column is None or pd.api.types.is_numeric_dtype(schema[c])
             or pd.api.types.is_datetime64_any_dtype(schema[c]) else column(c).head(2000) for c in cand}
    dt = datetime_columns(probe, cand)
    if dt and how == "refuse":
        raise refuse_datetimes(party, path, {c: int(probe[c].nunique()) for c in dt})
    if dt and how == "derive":
        raise DataError(f"party {party!r}: {str(path)!r} is read in pieces (over stream_above_mb) and its date "
                        f"columns {dt} cannot be derived there yet; use datetime = \"drop\", or derive the "
                        "year, month and day into the file yourself")
    return list(dt)


def handle_datetimes(party: str, df: pd.DataFrame, path: Path, *, id_column: str, label_column: str | None,
                     declared: Sequence[str] = (), how: str = "refuse") -> tuple[pd.DataFrame, dict[str, str]]:
    """``df`` with its date and time columns (:func:`~verticalfs.data.preprocess.datetime_columns`;
    not the id, the label, nor a column declared categorical) refused, dropped or derived into
    year, month and day (``how``), and the derived date columns. Refusing names the columns, the
    file and both options: one-hot encoding a date makes a level of each date (issue 53). The
    derived columns come back as ``{column: format}``."""
    from verticalfs.data.preprocess import DATETIME_CHOICES, datetime_columns, derive_dates, derived_date_names

    if how not in DATETIME_CHOICES:
        raise DataError(f"datetime must be one of {DATETIME_CHOICES}, got {how!r}")
    skip = {id_column, label_column, *declared}
    dt = datetime_columns(df, [c for c in df.columns if c not in skip])
    if not dt:
        return df, {}
    if how == "refuse":
        raise refuse_datetimes(party, path, {c: int(df[c].nunique()) for c in dt})
    if how == "drop":
        return df.drop(columns=list(dt)), {}
    clash = [n for c in dt for n in derived_date_names(c) if n in df.columns]
    if clash:
        raise DataError(f"party {party!r}: {str(path)!r} already has columns {clash}, the names --datetime derive "
                        "gives the year, month and day; rename them or the date columns")
    return derive_dates(df, dt), dict(dt)


def feature_columns(party: str, df: pd.DataFrame, path: Path, *, id_column: str, label_column: str | None = None,
                    declared: Sequence[str] = (), auto: bool = False) -> tuple[list[str], list[str]]:
    """One party's feature columns (all but the id and, in the label party's file, the label) and
    which of them are categorical: the ``declared`` ones, and with ``auto`` every non-numeric one.
    A numeric column holding a few markers such as ``?`` or an undeclared text column is an error
    naming the file, the column and the fix."""
    drop = {id_column} if label_column is None else {id_column, label_column}
    cols = [c for c in df.columns if c not in drop]
    if not cols and label_column is None:
        raise DataError(f"party {party!r}: {str(path)!r} holds only the id column {id_column!r}; a "
                        "feature party's file needs at least one feature column (or leave the party out)")
    for c in declared:
        if c not in cols:
            raise DataError(
                f"party {party!r}: column {c!r} is declared categorical but is not a feature "
                f"column of {str(path)!r}; its feature columns are {cols}"
            )
    cat = list(declared)
    for c in cols:
        s_ = df[c]
        if c not in cat and not pd.api.types.is_numeric_dtype(s_):
            markers = _numeric_with_markers(s_)
            if markers is not None:
                n_bad = int(s_.astype(str).str.strip().isin(markers).sum())
                quoted = ",".join(markers)
                raise DataError(
                    f"party {party!r}: column {c!r} in {str(path)!r} holds numbers except for "
                    f"{markers} in {n_bad} rows; if these mean 'unknown', pass --na-values {quoted!r} "
                    f"(na_values={markers!r}) so they are read as missing values, not as a category")
            if auto:
                cat.append(c)
            else:
                raise DataError(
                    f"party {party!r}: column {c!r} in {str(path)!r} is not numeric "
                    f"({s_.dtype}); declare it with --categorical {party}:{c} (categorical={{{party!r}: "
                    f"[{c!r}]}}) or --categorical auto to one-hot encode it, or encode it as numbers yourself"
                )
    return cols, [c for c in cols if c in set(cat)]


def party_block(party: str, aligned: pd.DataFrame, cols: Sequence[str], cats: Sequence[str], path: Path,
                dates: Mapping[str, str] | None = None) -> PartyBlock:
    """The party's feature block from its aligned rows: categorical columns as text (missing kept
    missing), the others as float64; ``dates``: the date columns derived into its columns."""
    X = aligned[list(cols)].copy()
    for c in cols:
        X[c] = X[c].where(X[c].isna(), X[c].astype(str)) if c in cats else X[c].astype(np.float64)
    return PartyBlock(name=party, X=X, categorical=list(cats), source=str(path), dates=dict(dates or {}))


def read_party_rows(files: Mapping[str, str | Path], *, id_column: str = "id", na_values=None,
                    delimiter: str = ",", encoding: str = "utf-8", max_bytes: int = DEFAULT_MAX_BYTES,
                    strip_ids: bool = False) -> tuple[dict[str, pd.DataFrame], np.ndarray, AlignmentReport]:
    """New rows for prediction: one file per party (no label), aligned by id as in training.

    Returns the aligned frames (the id column removed), the aligned ids and the report (its
    ``warnings``: ids that would align after stripping, see :func:`load_party_files`).
    """
    if not files:
        raise DataError("no party files given; pass one file per party of the model")
    files = {str(p): Path(f) for p, f in files.items()}
    if isinstance(na_values, str):
        na_values = [v.strip() for v in na_values.split(",")]
    frames = _read_frames(files, id_column=id_column, na_values=na_values, delimiter=delimiter,
                          encoding=encoding, max_bytes=max_bytes, strip=strip_ids)
    id_arrays = {p: df[id_column].to_numpy(dtype=str) for p, df in frames.items()}
    arrays = list(id_arrays.values())
    common = _sort_ids(reduce(np.intersect1d, arrays[1:], np.unique(arrays[0])))
    hint = None if strip_ids else _strip_hint(id_arrays, files, len(common))
    if len(common) == 0:
        raise DataError(f"no id in column {id_column!r} is present in every file; nothing to predict"
                        + (f"; {hint}" if hint else ""))
    report = AlignmentReport(n_aligned=len(common))
    if hint:
        report.warnings.append(hint)
    return _align(frames, files, id_column, common, report), np.asarray(common), report


def _align(frames: Mapping[str, pd.DataFrame], files: Mapping[str, Path], id_column: str, common: np.ndarray,
           report: AlignmentReport) -> dict[str, pd.DataFrame]:
    """Each frame's rows of the ``common`` ids in that order (the id column removed), and the rows each
    file had, kept and lost in ``report``."""
    aligned = {}
    for party, df in frames.items():
        a = df.set_index(id_column).loc[common].reset_index(drop=True)
        aligned[party] = a
        report.files[party] = str(files[party])
        report.rows_in_file[party] = len(df)
        report.rows_kept[party] = len(a)
        report.rows_lost[party] = len(df) - len(a)
    return aligned


# ---------------------------------------------------------------------------- main entry
def load_party_files(
    files: Mapping[str, str | Path],
    *,
    label_party: str,
    label_column: str,
    id_column: str = "id",
    categorical: Mapping[str, Sequence[str]] | str | None = None,
    task: str | None = None,
    na_values: Sequence[str] | str | None = None,
    delimiter: str = ",",
    encoding: str = "utf-8",
    max_bytes: int = DEFAULT_MAX_BYTES,
    impute: str | None = None,
    name: str = "user",
    strip_ids: bool = False,
    stream_above_mb: float | None = 256.0,
    datetime: str = "refuse",
) -> tuple[VerticalDataset, AlignmentReport]:
    """Read one file per party and align the rows by id.

    Parameters
    ----------
    files : mapping of party name -> path
        One ``.csv``, ``.csv.gz``, ``.parquet`` or ``.pq`` file per party, each with the id column.
        Party order gives the order of the feature blocks.
    label_party : str
        The party whose file holds ``label_column``. Its other columns, if any, become a feature
        block with that party's name; the labels go to the label holder.
    label_column : str
        Name of the label column.
    id_column : str
        Name of the sample-id column, the same in every file; ids must be unique per file. Read as
        strings: ids that differ only by leading zeros are different ids.
    categorical : mapping of party name -> list of column names, or ``"auto"``, optional
        Non-numeric columns to one-hot encode later; ``"auto"`` takes every non-numeric column
        (the report says which). Otherwise every non-numeric column must be listed.
    task : {"classification", "binary", "multiclass", "regression"}, optional
        Inferred when None where it is unambiguous (see :func:`_labels`); classification labels are
        mapped to codes ``0..C-1`` by sorted value, ``class_names`` keeps the original values.
    na_values : str or list of str, optional
        Extra strings read as missing (pandas' ``na_values``; ``"?,NA,"`` as a comma-separated string).
    delimiter, encoding : str
        Of the CSV files.
    max_bytes : int
        The most bytes a party file may hold: its size on disk, and decompressed (``.csv.gz``) or
        decoded (Parquet); a larger file is refused before it is read (``--max-file-mb``).
    impute : str, optional
        The data set's default imputation (``median``, ``mean``, ``most-frequent``, ``none``),
        applied later per party on its own training rows (:meth:`VerticalDataset.prepare`).
    name : str
        Name of the data set.
    strip_ids : bool
        Strip surrounding whitespace from every id and leading zeros from all-digit ids before
        aligning (``" 007"`` matches ``"7"``). Without it, ids that would match after stripping are
        counted in a warning.
    stream_above_mb : float, optional
        When a file is at least this large (MiB; a folder of Parquet files: its total), every file
        is read in pieces and its rows prepared into memory-mapped matrices, as a deployed party
        does (:mod:`verticalfs.data.stream`): the same data, in bounded memory. ``None``: always in
        memory.
    datetime : {"refuse", "drop", "derive"}
        Columns holding dates or times (a datetime type, or text that parses as dates): refused
        with an error naming them (default), left out (``drop``), or each replaced by its year,
        month and day as numeric columns ``<column>_year``, ``<column>_month``, ``<column>_day``
        (``derive``; a saved model derives them from new rows too).

    Returns
    -------
    VerticalDataset
        Feature blocks aligned by id (``ids`` = the aligned ids, sorted), labels at the label
        holder.
    AlignmentReport
        Rows in each file, kept and lost; categorical columns; missing values.

    Raises
    ------
    DataError
        Any of the problems in the module docstring, with the file, the column and the fix.
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
    if task is not None and task not in USER_TASKS:
        raise DataError(f"unknown task {task!r}; use one of {USER_TASKS} (or leave it out to infer it)")
    if isinstance(na_values, str):
        na_values = [v.strip() for v in na_values.split(",")]
    if not isinstance(delimiter, str) or len(delimiter) != 1:
        raise DataError(f"the delimiter must be one character, got {delimiter!r}")
    try:
        "x".encode(encoding)
    except LookupError:
        raise DataError(f"unknown encoding {encoding!r}; use a Python codec name such as utf-8 or latin-1") from None
    auto = isinstance(categorical, str)
    if auto and categorical != "auto":
        raise DataError(f"categorical must be 'auto' or {{party: [columns]}}, got {categorical!r}")
    declared = {} if auto else {str(p): [str(c) for c in cols] for p, cols in (categorical or {}).items()}
    unknown = [p for p in declared if p not in files]
    if unknown:
        raise DataError(
            f"categorical names parties {unknown} that have no file; the parties are {list(files)}"
        )

    if stream_above_mb is not None:  # a large file: read in pieces (data/stream.py), not into pandas
        from verticalfs.data.stream import file_bytes

        if max(file_bytes(f) for f in files.values()) >= stream_above_mb * 2**20:
            if strip_ids:
                raise DataError(f"strip_ids applies to files read into memory; files from {stream_above_mb} MiB "
                                "are read in pieces: strip the ids in the files, or raise stream_above_mb")
            return _load_streamed(files, label_party=label_party, label_column=label_column, id_column=id_column,
                                 declared=declared, auto=auto, task=task, na_values=na_values, delimiter=delimiter,
                                 encoding=encoding, max_bytes=max_bytes, impute=impute, name=name, datetime=datetime)

    frames = _read_frames(files, id_column=id_column, na_values=na_values, delimiter=delimiter,
                          encoding=encoding, max_bytes=max_bytes, strip=strip_ids)

    lpath = files[label_party]
    if label_column not in frames[label_party].columns:
        cols = [c for c in frames[label_party].columns if c != id_column]
        raise DataError(
            f"party {label_party!r}: label column {label_column!r} is not in {str(lpath)!r}; its "
            f"columns are {cols}. Pass label_column=... or label_party=... for the file holding it"
        )

    # feature columns per party, categoricals, name clashes
    feats: dict[str, list[str]] = {}
    cats: dict[str, list[str]] = {}
    owner: dict[str, str] = {}
    dates: dict[str, dict[str, str]] = {}
    for party in list(frames):
        frames[party], dates[party] = handle_datetimes(
            party, frames[party], files[party], id_column=id_column,
            label_column=label_column if party == label_party else None, declared=declared.get(party, []),
            how=datetime)
    for party, df in frames.items():
        cols, cat = feature_columns(party, df, files[party], id_column=id_column,
                                    label_column=label_column if party == label_party else None,
                                    declared=declared.get(party, []), auto=auto)
        for c in cols:
            if c in owner:
                raise DataError(
                    f"column {c!r} is in the files of both {owner[c]!r} ({str(files[owner[c]])!r}) "
                    f"and {party!r} ({str(files[party])!r}); feature names must be unique across "
                    "parties for reporting, rename one of them"
                )
            owner[c] = party
        feats[party] = cols
        cats[party] = cat
    if not any(feats.values()):
        raise DataError(
            "no party holds any feature column besides the id and label; add feature files"
        )

    # inner join on ids (strings): the ids present in every file, sorted
    id_arrays = {p: df[id_column].to_numpy(dtype=str) for p, df in frames.items()}
    arrays = list(id_arrays.values())
    common = _sort_ids(reduce(np.intersect1d, arrays[1:], np.unique(arrays[0])))
    hint = None if strip_ids else _strip_hint(id_arrays, files, len(common))
    if len(common) == 0:
        examples = "; ".join(f"{str(files[p])!r}: {_show(a, 3)}" for p, a in id_arrays.items())
        raise DataError(
            f"no id in column {id_column!r} is present in every file; ids per file look like "
            f"{examples}. Check that the files use the same ids (ids are compared as text: '007' and "
            "'7' differ)" + (f"; {hint}" if hint else "")
        )
    report = AlignmentReport(label_party=label_party, n_aligned=len(common), auto_categorical=auto)
    if hint:
        report.warnings.append(hint)
    aligned = _align(frames, files, id_column, common, report)
    for party, a in aligned.items():
        report.categorical[party] = list(cats[party])
        n_na = a[feats[party]].isna().sum() if feats[party] else pd.Series(dtype=int)
        report.missing[party] = {str(c): int(k) for c, k in n_na.items() if k}

    y, task_, class_names = _labels(aligned[label_party][label_column], task, lpath, label_column)

    report.warnings += label_lookalikes(aligned, feats, label_party, label_column, files,
                                        classes=class_names is not None)
    blocks = [party_block(party, aligned[party], cols, cats[party], files[party], dates[party])
              for party, cols in feats.items() if cols]
    vds = VerticalDataset(
        name=name,
        blocks=blocks,
        y=y,
        task=task_,
        ids=np.asarray(common),
        class_names=class_names,
        impute=impute,
        warnings=list(report.warnings),
    )
    return vds, report


def named_like(column: str, label_column: str) -> bool:
    """A column name that reads as the label's (case, spaces, ``-`` and ``_`` ignored)."""
    def key(s: str) -> str:
        return "".join(ch for ch in str(s).lower() if ch.isalnum())
    return bool(key(label_column)) and key(column) == key(label_column)


def label_lookalikes(aligned: Mapping[str, pd.DataFrame], feats: Mapping[str, Sequence[str]], label_party: str,
                     label_column: str, files: Mapping[str, Path], *, classes: bool = True) -> list[str]:
    """Feature columns that may be a copy of the label: named like it, or holding the same values
    (for classes: the same partition of the rows, under any renaming of the values). A loop over
    columns; each comparison is vectorised over the rows."""
    y = aligned[label_party][label_column]
    y_codes = np.unique(y.astype(str).to_numpy(), return_inverse=True)[1]
    n_y = int(y_codes.max()) + 1 if len(y_codes) else 0
    out = []
    for party, cols in feats.items():
        # for classes only columns with as many values as the label can be a copy of it (one hashing pass)
        n_values = aligned[party][list(cols)].nunique(dropna=False) if classes and cols else None
        for c in cols:
            where = f"party {party!r}: column {c!r} in {str(files[party])!r}"
            if named_like(c, label_column):
                how = f"is named like the label column {label_column!r} of {label_party!r}"
            else:
                x = aligned[party][c]
                if (n_values is not None and n_values[c] != n_y) or x.isna().any():
                    continue
                if classes:
                    xc = np.unique(x.astype(str).to_numpy(), return_inverse=True)[1]
                    same = len(np.unique(xc * n_y + y_codes)) == n_y
                else:
                    same = pd.api.types.is_numeric_dtype(x) and bool(
                        np.array_equal(x.to_numpy(dtype=np.float64), y.to_numpy(dtype=np.float64)))
                if not same:
                    continue
                how = (f"holds the label {label_column!r} of {label_party!r}"
                       + (" (up to renaming its values)" if classes else ""))
            out.append(f"{where} {how}; if it is a copy of the label, the model learns the answer from it (an "
                       "accuracy that will not hold on new rows): drop the column or rename it if it is another "
                       "quantity")
    return out


def _load_streamed(files: dict, *, label_party: str, label_column: str, id_column: str, declared: dict, auto: bool,
                  task: str | None, na_values, delimiter: str, encoding: str, max_bytes: int, impute: str | None,
                  name: str, datetime: str = "refuse"):
    """:func:`load_party_files` for large files (``stream_above_mb``): each file read through
    :class:`~verticalfs.data.stream.StreamedTable` (its ids as an
    :class:`~verticalfs.data.stream.IdLookup`, its columns one at a time), the ids every file holds
    found by binary search, and blocks whose rows stay in the files until
    :meth:`VerticalDataset.prepare` prepares them in pieces. The same data set, report and warnings
    as the in-memory path."""
    import weakref

    from verticalfs.data.stream import StreamedTable, bound_allocators, streamed_block

    bound_allocators()
    tables: dict[str, StreamedTable] = {}
    for p, f in files.items():
        if f.is_file():
            _check_size(p, f, max_bytes)
        tables[p] = StreamedTable(p, f, id_column=id_column, na_values=na_values, delimiter=delimiter,
                                  encoding=encoding)
        weakref.finalize(tables[p], tables[p].close)
    lt = tables[label_party]
    if label_column not in lt.columns:
        cols = [c for c in lt.columns if c != id_column]
        raise DataError(f"party {label_party!r}: label column {label_column!r} is not in {str(files[label_party])!r}; "
                        f"its columns are {cols}. Pass label_column=... or label_party=... for the file holding it")
    feats, cats, owner = {}, {}, {}
    for p, t in tables.items():
        schema = t.schema_frame()
        skip = {id_column, label_column, *([] if auto else declared.get(p, []))}
        schema = schema.drop(columns=streamed_datetimes(p, t, schema, files[p], skip=skip, how=datetime))
        cols, cat = feature_columns(p, schema, files[p], id_column=id_column,
                                    label_column=label_column if p == label_party else None,
                                    declared=declared.get(p, []), auto=auto)
        for c in cols:
            if c in owner:
                raise DataError(f"column {c!r} is in the files of both {owner[c]!r} ({str(files[owner[c]])!r}) and "
                                f"{p!r} ({str(files[p])!r}); feature names must be unique across parties for "
                                "reporting, rename one of them")
            owner[c] = p
        feats[p], cats[p] = cols, cat
    if not any(feats.values()):
        raise DataError("no party holds any feature column besides the id and label; add feature files")
    # the ids every file holds: each file's sorted ids searched in the others' (no Python strings)
    looks = {p: t.id_lookup() for p, t in tables.items()}
    common = None
    for look in looks.values():
        s = look.sorted
        if common is None:
            common = s
            continue
        j = np.minimum(np.searchsorted(s, common), max(len(s) - 1, 0))
        common = common[(s[j] == common) if len(s) else np.zeros(len(common), bool)]
    common = _sort_ids(common)
    if not len(common):
        raise DataError(f"no id in column {id_column!r} is present in every file; check that the files use the "
                        "same ids (ids are compared as text: '007' and '7' differ)")
    report = AlignmentReport(label_party=label_party, n_aligned=len(common), auto_categorical=auto)
    pos = {}
    for p, look in looks.items():
        pos[p] = look.positions(common)
        report.files[p] = str(files[p])
        report.rows_in_file[p] = len(look)
        report.rows_kept[p] = len(common)
        report.rows_lost[p] = len(look) - len(common)
    del looks
    y_col = lt.column(label_column).iloc[pos[label_party]].reset_index(drop=True)
    y, task_, class_names = _labels(y_col, task, files[label_party], label_column)
    # a column at a time: its missing values among the aligned rows, and whether it copies the label
    for p, t in tables.items():
        report.categorical[p] = list(cats[p])
        report.missing[p] = {}
        for c in feats[p]:
            x = t.column(c).iloc[pos[p]].reset_index(drop=True)
            k = int(x.isna().sum())
            if k:
                report.missing[p][str(c)] = k
            frames = ({p: pd.DataFrame({c: x}), label_party: pd.DataFrame({label_column: y_col})}
                      if p != label_party else {p: pd.DataFrame({c: x, label_column: y_col})})
            report.warnings += label_lookalikes(frames, {p: [c]}, label_party, label_column, files,
                                                classes=class_names is not None)
    blocks = [streamed_block(p, tables[p], pos[p], feats[p], cats[p]) for p in feats if feats[p]]
    vds = VerticalDataset(name=name, blocks=blocks, y=y, task=task_, ids=np.asarray(common), class_names=class_names,
                          impute=impute, warnings=list(report.warnings))
    return vds, report
