"""Loaders for the real benchmark data sets shipped in ``../shared/datasets``.

Every loader has the form ``load_<name>(data_dir) -> Table`` where ``data_dir`` is the folder holding
*all* data sets (the one with ``madelon/``, ``adult/``, ...; the CLI's ``--data-dir`` or the
environment variable ``VERTICALFS_DATA``). Each loader knows its own sub-folder and file names, as
documented in that sub-folder's ``PROVENANCE.md``. A missing file raises
:class:`~verticalfs.exceptions.DataError` naming the expected path and the fix.

Labels of classification sets are integer codes ``0..C-1``; ``Table.class_names`` keeps the original
label of each code.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.io
import scipy.sparse

from verticalfs.data.table import Table
from verticalfs.exceptions import DataError

__all__ = [
    "ADULT_CATEGORICAL",
    "ADULT_COLUMNS",
    "ADULT_NUMERIC",
    "ASU_MAT_FILES",
    "load_adult",
    "load_allaml",
    "load_arcene",
    "load_basehock",
    "load_madelon",
    "load_pcmac",
    "load_phishing",
    "load_physionet2012",
    "load_relathe",
    "load_tox_171",
    "load_usps",
    "load_wine_quality",
]

DATA_ENV = "VERTICALFS_DATA"

ADULT_COLUMNS: tuple[str, ...] = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
)
ADULT_NUMERIC: tuple[str, ...] = (
    "age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week",
)
ADULT_CATEGORICAL: tuple[str, ...] = tuple(c for c in ADULT_COLUMNS if c not in ADULT_NUMERIC)

#: data set name -> (sub-folder, file name) of the ASU feature-selection ``.mat`` files (X, Y).
ASU_MAT_FILES: dict[str, tuple[str, str]] = {
    "arcene": ("arcene", "arcene.mat"),
    "basehock": ("BASEHOCK", "BASEHOCK.mat"),
    "relathe": ("RELATHE", "RELATHE.mat"),
    "pcmac": ("PCMAC", "PCMAC.mat"),
    "allaml": ("ALLAML", "ALLAML.mat"),
    "tox_171": ("TOX_171", "TOX_171.mat"),
}


# ---------------------------------------------------------------------------- helpers
def _require(data_dir: str | Path, *parts: str) -> Path:
    """Path of a data file under ``data_dir``; :class:`DataError` with the fix if it is missing."""
    path = Path(data_dir).joinpath(*parts)
    if not path.is_file():
        raise DataError(
            f"data file {str(path)!r} not found; set --data-dir or the environment variable "
            f"{DATA_ENV} to the folder holding the data sets (../shared/datasets, the one containing "
            f"{parts[0]!r})"
        )
    return path


def _codes(y: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Map labels to ``0..C-1`` by sorted unique value; return codes and the original values as str."""
    uniq, codes = np.unique(np.asarray(y).ravel(), return_inverse=True)
    return codes.astype(np.int64), [_label_str(u) for u in uniq]


def _label_str(v) -> str:
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def _dense_float32(a) -> np.ndarray:
    """A (possibly sparse) matrix as a dense C-contiguous float32 array."""
    if scipy.sparse.issparse(a):
        a = a.toarray()
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def _frame(X: np.ndarray, prefix: str = "f") -> pd.DataFrame:
    return pd.DataFrame(X, columns=[f"{prefix}{j}" for j in range(X.shape[1])], copy=False)


def _loadmat(path: Path) -> dict:
    try:
        return scipy.io.loadmat(str(path))
    except Exception as exc:  # scipy raises several types for corrupt files
        raise DataError(f"could not read MATLAB file {str(path)!r}: {exc}") from exc


def _read_whitespace(path: Path) -> np.ndarray:
    return pd.read_csv(path, sep=r"\s+", header=None, dtype=np.float64).to_numpy()


# ---------------------------------------------------------------------------- MADELON
def load_madelon(data_dir: str | Path) -> Table:
    """MADELON (NIPS 2003 challenge): the labelled train (2000) + valid (600) parts, 2600 x 500.

    The unlabelled challenge test part is not loaded. Labels ``-1/+1`` become ``0/1``. The real
    probes are not identified in the files, so ``spurious`` is all ``False`` (use ``madelon-synth``
    for a version with known probes). Features are named ``f0..f499``.
    """
    sub = "madelon"
    X_parts, y_parts = [], []
    for part in ("train", "valid"):
        data = _require(data_dir, sub, f"madelon_{part}.data.gz")
        labels = _require(data_dir, sub, f"madelon_{part}.labels")
        X_parts.append(_read_whitespace(data))
        y_parts.append(np.loadtxt(labels, dtype=np.int64, ndmin=1))
    X = np.vstack(X_parts)
    y = np.concatenate(y_parts)
    if len(X) != len(y):
        raise DataError(f"MADELON in {str(Path(data_dir) / sub)!r}: {len(X)} rows but {len(y)} labels")
    return Table(
        name="madelon",
        X=_frame(X),
        y=(y > 0).astype(np.int64),
        task="binary",
        class_names=["-1", "1"],
    )


# ---------------------------------------------------------------------------- phishing
_ARFF_ATTR = re.compile(r"^\s*@attribute\s+('[^']*'|\"[^\"]*\"|\S+)", re.IGNORECASE)


def _read_arff(path: Path) -> pd.DataFrame:
    """Minimal ARFF reader: attribute names from ``@attribute`` lines, values from the ``@data`` CSV."""
    text = path.read_text(encoding="utf-8", errors="replace")
    m = re.search(r"^\s*@data\s*$", text, flags=re.IGNORECASE | re.MULTILINE)
    if m is None:
        raise DataError(f"ARFF file {str(path)!r} has no @data line")
    header, body = text[: m.start()], text[m.end():]
    names = [a.group(1).strip("'\"") for a in map(_ARFF_ATTR.match, header.splitlines()) if a]
    if not names:
        raise DataError(f"ARFF file {str(path)!r} has no @attribute lines")
    df = pd.read_csv(
        io.StringIO(body), header=None, names=names, comment="%", skip_blank_lines=True,
        na_values=["?"],
    )
    return df


def load_phishing(data_dir: str | Path) -> Table:
    """UCI Phishing Websites: 11055 x 30, features in {-1, 0, 1} kept numeric (float).

    The label ``Result`` is ``-1`` (4898 rows) or ``1`` (6157 rows), mapped to codes ``0`` and ``1``;
    ``class_names`` are the original values ``["-1", "1"]`` (the files do not name the classes).
    """
    path = _require(data_dir, "phishing", "Training Dataset.arff")
    df = _read_arff(path)
    if "Result" not in df.columns:
        raise DataError(f"ARFF file {str(path)!r} has no 'Result' attribute (the label)")
    if df.isna().to_numpy().any():
        raise DataError(f"ARFF file {str(path)!r} has missing values; expected none")
    y = df.pop("Result").to_numpy()
    return Table(
        name="phishing",
        X=df.astype(np.float64),
        y=(y > 0).astype(np.int64),
        task="binary",
        class_names=["-1", "1"],
    )


# ---------------------------------------------------------------------------- adult
def _read_adult(path: Path, *, skip_banner: bool) -> pd.DataFrame:
    return pd.read_csv(
        path,
        header=None,
        names=[*ADULT_COLUMNS, "income"],
        sep=",",
        skipinitialspace=True,
        skiprows=1 if skip_banner else 0,
        skip_blank_lines=True,
        keep_default_na=False,
        dtype={c: str for c in (*ADULT_CATEGORICAL, "income")},
    )


def load_adult(data_dir: str | Path) -> Table:
    """UCI Adult: 32561 training + 16281 test rows = 48842 x 14 (6 numeric, 8 categorical).

    The test file's banner line is skipped and the trailing dots of its labels are stripped. Label
    ``>50K`` is ``1`` and ``<=50K`` is ``0``. Missing values (``?``, only in the categorical columns
    workclass, occupation and native-country) are kept as their own category ``"?"``, so no row is
    dropped and the one-hot encoding gets a "missing" indicator column. ``predefined_test`` marks
    the 16281 rows of the official test file (the last rows).
    """
    train = _read_adult(_require(data_dir, "adult", "adult.data.gz"), skip_banner=False)
    test = _read_adult(_require(data_dir, "adult", "adult.test.gz"), skip_banner=True)
    df = pd.concat([train, test], ignore_index=True)
    label = df.pop("income").str.strip().str.rstrip(".")
    bad = sorted(set(label.unique()) - {"<=50K", ">50K"})
    if bad:
        raise DataError(f"Adult files in {str(Path(data_dir) / 'adult')!r}: unexpected labels {bad}")
    for c in ADULT_NUMERIC:
        df[c] = pd.to_numeric(df[c], errors="raise").astype(np.float64)
    for c in ADULT_CATEGORICAL:
        df[c] = df[c].str.strip()
    test_mask = np.zeros(len(df), dtype=bool)
    test_mask[len(train):] = True
    return Table(
        name="adult",
        X=df,
        y=(label == ">50K").to_numpy().astype(np.int64),
        task="binary",
        categorical=list(ADULT_CATEGORICAL),
        class_names=["<=50K", ">50K"],
        predefined_test=test_mask,
    )


# ---------------------------------------------------------------------------- wine quality
def load_wine_quality(data_dir: str | Path) -> Table:
    """UCI Wine Quality, red (1599) and white (4898) stacked: 6497 x 12.

    Features: the 11 physico-chemical columns plus ``is_red`` (1.0 for red, 0.0 for white wine).
    Label: binary ``quality > 6`` (i.e. 7, 8 or 9 -> ``1``; 1277 positives), the "Quality>6"
    setting of sparsevfl.md Table 1. Red rows come first.
    """
    frames = []
    for color in ("red", "white"):
        path = _require(data_dir, "wine_quality", f"winequality-{color}.csv")
        df = pd.read_csv(path, sep=";")
        df.columns = [str(c).strip().strip('"') for c in df.columns]
        if "quality" not in df.columns:
            raise DataError(f"wine quality file {str(path)!r} has no 'quality' column")
        df["is_red"] = 1.0 if color == "red" else 0.0
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    quality = df.pop("quality").to_numpy()
    return Table(
        name="wine_quality",
        X=df.astype(np.float64),
        y=(quality > 6).astype(np.int64),
        task="binary",
        class_names=["quality<=6", "quality>6"],
    )


# ---------------------------------------------------------------------------- PhysioNet 2012
PHYSIONET_LABEL = "In-hospital_death"
PHYSIONET_ID = "RecordID"
PHYSIONET_DROP = ("Length_of_stay",)
#: columns in which the challenge codes "not recorded" as -1 (a height, weight or sex of -1 is impossible)
PHYSIONET_MINUS_ONE_MISSING = ("Height", "Weight", "Gender")


def load_physionet2012(data_dir: str | Path) -> Table:
    """PhysioNet/CinC Challenge 2012 set A, tabular summary (per-patient means): 4000 x 41.

    Label ``In-hospital_death`` (3446 survivors -> ``0``, 554 deaths -> ``1``); ``ids`` are the
    ``RecordID`` values; the other outcome ``Length_of_stay`` is dropped (it would leak the label).

    Missing values: variables never measured for a patient are ``NA`` in the file. They stay NaN
    here and the table's default imputation is ``median``: preparation fills each column with the
    median of the owning party's own *training* rows (no statistic of test rows is used). The
    challenge's own missing-value code ``-1`` in Height (1894 rows), Weight (296) and Gender (3) is
    read as missing too (NaN, then imputed like the rest): a height, weight or sex of -1 is no
    measurement, and left as a number it would be a large spurious mode of those columns.
    """
    path = _require(data_dir, "physionet2012", "summary_mean.csv.gz")
    df = pd.read_csv(path, na_values=["NA"])
    missing = [c for c in (PHYSIONET_ID, PHYSIONET_LABEL) if c not in df.columns]
    if missing:
        raise DataError(f"PhysioNet file {str(path)!r} lacks the columns {missing}")
    ids = df.pop(PHYSIONET_ID).to_numpy()
    y = df.pop(PHYSIONET_LABEL).to_numpy()
    df = df.drop(columns=[c for c in PHYSIONET_DROP if c in df.columns]).astype(np.float64)
    coded = [c for c in PHYSIONET_MINUS_ONE_MISSING if c in df.columns]
    df[coded] = df[coded].mask(df[coded] == -1.0)
    all_missing = df.columns[df.isna().all()].tolist()
    if all_missing:
        raise DataError(f"PhysioNet file {str(path)!r}: columns {all_missing} have no values at all")
    return Table(
        name="physionet2012",
        X=df,
        y=y.astype(np.int64),
        task="binary",
        ids=ids,
        class_names=["survived", "died"],
        impute="median",
    )


# ---------------------------------------------------------------------------- ASU .mat sets
def _load_asu(name: str, data_dir: str | Path) -> Table:
    sub, fname = ASU_MAT_FILES[name]
    path = _require(data_dir, sub, fname)
    m = _loadmat(path)
    missing = [k for k in ("X", "Y") if k not in m]
    if missing:
        raise DataError(f"MATLAB file {str(path)!r} lacks the variables {missing}; expected X and Y")
    X = _dense_float32(m["X"])
    Y = m["Y"]
    if scipy.sparse.issparse(Y):
        Y = Y.toarray()
    y, class_names = _codes(np.asarray(Y).ravel())
    if len(y) != len(X):
        raise DataError(f"MATLAB file {str(path)!r}: X has {len(X)} rows but Y has {len(y)} labels")
    return Table(
        name=name,
        X=_frame(X),
        y=y,
        task="binary" if len(class_names) == 2 else "multiclass",
        class_names=class_names,
    )


def load_arcene(data_dir: str | Path) -> Table:
    """ARCENE (ASU copy): 200 x 10000 mass-spectrometry features; ``Y`` -1/+1 -> 0/1 (112/88)."""
    return _load_asu("arcene", data_dir)


def load_basehock(data_dir: str | Path) -> Table:
    """BASEHOCK (20 Newsgroups baseball vs. hockey): 1993 x 4862 term counts; 2 classes (994/999)."""
    return _load_asu("basehock", data_dir)


def load_relathe(data_dir: str | Path) -> Table:
    """RELATHE (20 Newsgroups religion vs. atheism): 1427 x 4322 term counts; 2 classes (779/648)."""
    return _load_asu("relathe", data_dir)


def load_pcmac(data_dir: str | Path) -> Table:
    """PCMAC (20 Newsgroups PC vs. Mac hardware): 1943 x 3289 term counts; 2 classes (982/961)."""
    return _load_asu("pcmac", data_dir)


def load_allaml(data_dir: str | Path) -> Table:
    """ALLAML leukemia microarray: 72 x 7129; ``Y`` 1 = ALL (47) -> 0, 2 = AML (25) -> 1."""
    return _load_asu("allaml", data_dir)


def load_tox_171(data_dir: str | Path) -> Table:
    """TOX_171 toxicology microarray: 171 x 5748; 4 classes (45/45/39/42) -> codes 0..3."""
    return _load_asu("tox_171", data_dir)


def load_usps(data_dir: str | Path) -> Table:
    """USPS digits: 7291 train + 2007 test = 9298 x 256 pixels in [0, 1], 10 classes.

    The file stores features x samples, so both parts are transposed and stacked (train first).
    Labels ``1..10`` with 10 = digit 0 become digits via ``label % 10``. ``predefined_test`` marks
    the 2007 rows of the standard test split (the last rows). Pixels are named ``f0..f255``
    (row-major 16 x 16).
    """
    path = _require(data_dir, "USPS", "USPS.mat")
    m = _loadmat(path)
    need = ("Train_DAT", "Test_DAT", "trainlabels", "testlabels")
    missing = [k for k in need if k not in m]
    if missing:
        raise DataError(f"MATLAB file {str(path)!r} lacks the variables {missing}")
    tr, te = _dense_float32(m["Train_DAT"]).T, _dense_float32(m["Test_DAT"]).T
    X = np.ascontiguousarray(np.vstack([tr, te]))
    y = np.concatenate([np.asarray(m["trainlabels"]).ravel(), np.asarray(m["testlabels"]).ravel()])
    if len(y) != len(X):
        raise DataError(f"MATLAB file {str(path)!r}: {len(X)} samples but {len(y)} labels")
    y = y.astype(np.int64) % 10
    test_mask = np.zeros(len(X), dtype=bool)
    test_mask[len(tr):] = True
    return Table(
        name="usps",
        X=_frame(X),
        y=y,
        task="multiclass",
        class_names=[str(d) for d in range(10)],
        predefined_test=test_mask,
    )
