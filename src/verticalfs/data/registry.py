"""Every data set by name: what it is, whether it needs files, and one way to load it.

>>> from verticalfs.data.registry import load_dataset
>>> table = load_dataset("madelon-synth", seed=1)            # no files needed
>>> table = load_dataset("adult", data_dir="../shared/datasets")  # doctest: +SKIP

File-based data sets are read from ``data_dir``: the argument if given, else the environment variable
``VERTICALFS_DATA`` (see :func:`resolve_data_dir`). The folder is the one holding all data sets
(``madelon/``, ``adult/``, ...).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from verticalfs.exceptions import ConfigError, DataError

if TYPE_CHECKING:  # pragma: no cover
    from verticalfs.data.table import Table

__all__ = [
    "DATASETS",
    "DATA_ENV",
    "DatasetInfo",
    "list_datasets",
    "load_dataset",
    "resolve_data_dir",
]

DATA_ENV = "VERTICALFS_DATA"

Loader = Callable[[Path | None, int], "Table"]


@dataclass(frozen=True)
class DatasetInfo:
    """Registry entry of one data set.

    Attributes
    ----------
    name : str
        Registry name (as given to :func:`load_dataset` and the CLI).
    loader : callable
        ``loader(data_dir, seed) -> Table``; ``data_dir`` is ``None`` for data sets that need no
        files, ``seed`` is ignored by data sets that are not generated.
    needs_files : bool
        Whether the data set is read from ``data_dir``.
    task : {"binary", "multiclass", "regression"}
    description : str
        One line for listings.
    used_by : str
        Paper(s) whose experiments use the data set (or a stand-in for theirs); ``""`` if none.
    """

    name: str
    loader: Loader
    needs_files: bool
    task: str
    description: str
    used_by: str = ""


def _files(name: str) -> Loader:
    """The loader ``verticalfs.data.loaders.<name>``, imported when it first loads (the registry's
    names are read without pandas: issue 53's fast errors)."""

    def load(data_dir: Path | None, seed: int) -> Table:
        from verticalfs.data import loaders

        return getattr(loaders, name)(data_dir)

    load.__name__ = name
    return load


class _Builtin:
    """``builtin.<generator>`` resolved when called (scikit-learn is imported then, not before)."""

    def __getattr__(self, name: str):
        from verticalfs.data import builtin as real

        return getattr(real, name)


builtin = _Builtin()


def _entries() -> list[DatasetInfo]:
    return [
        DatasetInfo(
            "madelon-synth", lambda d, s: builtin.madelon_synth(seed=s), False, "binary",
            "MADELON-style synthetic, 2600 x 500 (5 informative, 15 redundant, 480 known probes)",
            "FedSDG-FS",
        ),
        DatasetInfo(
            "friedman", lambda d, s: builtin.friedman(seed=s), False, "regression",
            "Friedman #1 regression, 2000 x 10 (x0-x4 relevant, x5-x9 known noise)",
            "FedSDG-FS",
        ),
        DatasetInfo(
            "multiclass-synth", lambda d, s: builtin.multiclass_synth(seed=s), False, "multiclass",
            "many-class synthetic, 1500 x 500 (20 informative, 480 redundant), 30 classes",
        ),
        DatasetInfo(
            "multiclass-wide", lambda d, s: builtin.multiclass_wide(seed=s), False, "multiclass",
            "wide many-class synthetic, 1560 x 617 (40 informative, 577 redundant), 26 classes",
        ),
        DatasetInfo(
            "digit-images", lambda d, s: builtin.digit_images(seed=s), False, "multiclass",
            "20 classes of 32x32 images (scikit-learn's digits, upright and turned), 1440 x 1024",
        ),
        DatasetInfo(
            "breast_cancer", lambda d, s: builtin.breast_cancer(), False, "binary",
            "Wisconsin breast cancer (scikit-learn), 569 x 30",
        ),
        DatasetInfo(
            "digits", lambda d, s: builtin.digits(), False, "multiclass",
            "8x8 handwritten digits (scikit-learn), 1797 x 64, 10 classes",
        ),
        DatasetInfo(
            "wine", lambda d, s: builtin.wine(), False, "multiclass",
            "UCI wine recognition (scikit-learn), 178 x 13, 3 classes",
        ),
        DatasetInfo(
            "madelon", _files("load_madelon"), True, "binary",
            "NIPS 2003 MADELON, labelled train+valid 2600 x 500", "FedSDG-FS",
        ),
        DatasetInfo(
            "phishing", _files("load_phishing"), True, "binary",
            "UCI Phishing Websites, 11055 x 30", "LESS-VFL",
        ),
        DatasetInfo(
            "adult", _files("load_adult"), True, "binary",
            "UCI Adult income>50K, 48842 x 14 (8 categorical; UCI test split)", "SparseVFL, FEAST",
        ),
        DatasetInfo(
            "wine_quality", _files("load_wine_quality"), True, "binary",
            "UCI Wine Quality red+white, quality>6, 6497 x 12", "SparseVFL",
        ),
        DatasetInfo(
            "physionet2012", _files("load_physionet2012"), True, "binary",
            "PhysioNet 2012 set A in-hospital death, 4000 x 41 (medians imputed)",
            "FEAST, LESS-VFL",
        ),
        DatasetInfo(
            "arcene", _files("load_arcene"), True, "binary",
            "ARCENE mass spectra, 200 x 10000", "FedSDG-FS",
        ),
        DatasetInfo(
            "basehock", _files("load_basehock"), True, "binary",
            "BASEHOCK newsgroups text, 1993 x 4862", "FedSDG-FS",
        ),
        DatasetInfo(
            "relathe", _files("load_relathe"), True, "binary",
            "RELATHE newsgroups text, 1427 x 4322", "FedSDG-FS",
        ),
        DatasetInfo(
            "pcmac", _files("load_pcmac"), True, "binary",
            "PCMAC newsgroups text, 1943 x 3289", "FedSDG-FS",
        ),
        DatasetInfo(
            "allaml", _files("load_allaml"), True, "binary",
            "ALLAML leukemia microarray, 72 x 7129", "ICAFS",
        ),
        DatasetInfo(
            "tox_171", _files("load_tox_171"), True, "multiclass",
            "TOX_171 microarray, 171 x 5748, 4 classes", "ICAFS",
        ),
        DatasetInfo(
            "usps", _files("load_usps"), True, "multiclass",
            "USPS digits, 9298 x 256, 10 classes (standard test split)", "ICAFS",
        ),
    ]


DATASETS: dict[str, DatasetInfo] = {info.name: info for info in _entries()}


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


_BY_KEY = {_key(n): n for n in DATASETS}


def resolve_data_dir(data_dir: str | Path | None = None) -> Path | None:
    """The folder holding the data sets: ``data_dir`` if given, else ``$VERTICALFS_DATA``, else None.

    Parameters
    ----------
    data_dir : str or Path, optional

    Returns
    -------
    Path or None
    """
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser()
    return None


def get_info(name: str) -> DatasetInfo:
    """Registry entry of ``name`` (case and ``-``/``_`` insensitive); :class:`ConfigError` if unknown."""
    real = _BY_KEY.get(_key(str(name)))
    if real is None:
        raise ConfigError(
            f"unknown data set {name!r}; valid names are: {', '.join(DATASETS)}"
        )
    return DATASETS[real]


def load_dataset(name: str, *, data_dir: str | Path | None = None, seed: int = 0) -> Table:
    """Load a registered data set by name.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS` (e.g. ``"madelon-synth"``, ``"adult"``).
    data_dir : str or Path, optional
        Folder holding the data sets; defaults to ``$VERTICALFS_DATA``. Only file-based data sets
        need it.
    seed : int
        Seed of generated data sets (ignored by the others).

    Returns
    -------
    Table

    Raises
    ------
    ConfigError
        Unknown name (the message lists the valid ones).
    DataError
        A file-based data set and no data folder, or a missing file.
    """
    info = get_info(name)
    root = resolve_data_dir(data_dir)
    if info.needs_files and root is None:
        raise DataError(
            f"data set {info.name!r} is read from files but no data folder is set; pass "
            f"--data-dir (data_dir=...) or set the environment variable {DATA_ENV} to the folder "
            "holding the data sets (../shared/datasets)"
        )
    return info.loader(root if info.needs_files else None, seed)


def list_datasets(data_dir: str | Path | None = None) -> list[dict]:
    """Describe every registered data set, loading the available ones to report their shapes.

    Parameters
    ----------
    data_dir : str or Path, optional
        Folder holding the data sets; defaults to ``$VERTICALFS_DATA``.

    Returns
    -------
    list of dict
        One dict per data set with keys ``name``, ``task``, ``available``, ``n_samples``,
        ``n_features``, ``n_classes`` (``None`` for regression), ``used_by`` and
        ``description``. Shapes are ``None`` for data sets that cannot be loaded (files missing).
    """
    root = resolve_data_dir(data_dir)
    rows = []
    for info in DATASETS.values():
        table = None
        if not info.needs_files or root is not None:
            try:
                table = info.loader(root if info.needs_files else None, 0)
            except DataError:
                table = None
        rows.append(
            {
                "name": info.name,
                "task": info.task,
                "available": table is not None,
                "n_samples": None if table is None else table.n_samples,
                "n_features": None if table is None else table.n_features,
                "n_classes": None if table is None or table.task == "regression" else table.n_classes,
                "used_by": info.used_by,
                "description": info.description,
            }
        )
    return rows
