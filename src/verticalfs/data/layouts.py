"""Named data layouts: a paper's own column split and row split of a data set, by name.

``verticalfs run -d adult -m sparsevfl-16 --partition paper`` (or ``--partition sparsevfl``)
builds exactly the data that the paper's benchmark (``benchmarks/sparsevfl``) uses: the columns
of sparsevfl.md Appendix A Table A1 over three parties and the rows of Table 1, instead of the
default random column split and 70/10/20 % row split. :func:`build_layout` is the one place these
layouts are defined; the benchmarks call it.

Layouts (``LAYOUTS[name][dataset]``):

``sparsevfl``
    - ``adult``: the UCI training file gives 29,304 training and 3,257 validation rows (10 % of
      the training file, stratified, seeded), the UCI test file the 16,281 test rows (Table 1);
      columns as Table A1 (5 / 5 / 4 source columns, 28 / 35 / 45 after one-hot encoding).
    - ``wine_quality``: red and white stacked, 80 / 10 / 10 % (Table 1's 5,197 / 650 / 650);
      columns as Table A1 (``color`` is the loader's ``is_red``).
    - ``physionet2012`` (the stand-in for Covertype, which is not available): its 41 columns split
      contiguously over three parties (14 / 14 / 13), 80 / 10 / 10 % like Covertype's in Table 1.

``paper`` resolves to the one layout registered for the data set (an error names the choices if
there are several or none).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from verticalfs.exceptions import ConfigError, DataError


@dataclass(frozen=True)
class Layout:
    """One paper's layout of one data set."""

    name: str
    dataset: str
    source: str
    parties: int
    assignment: dict[str, list[str]] | None = None
    partition_strategy: str = "random"
    test_size: float | None = 0.2  # None: the data set's predefined test rows
    val_size: float = 0.1  # a fraction of the training file when test_size is None
    sizes: tuple[int, int, int] | None = None  # (train, val, test) the paper's table states
    extra: dict = field(default_factory=dict)


_SPARSEVFL = "sparsevfl.md Appendix A Table A1 (columns), Table 1 (rows)"
LAYOUTS: dict[str, dict[str, Layout]] = {
    "sparsevfl": {
        "adult": Layout(
            "sparsevfl", "adult", _SPARSEVFL, 3,
            assignment={
                "party1": ["age", "workclass", "fnlwgt", "education", "education-num"],
                "party2": ["marital-status", "occupation", "relationship", "race", "sex"],
                "party3": ["capital-gain", "capital-loss", "hours-per-week", "native-country"],
            },
            test_size=None, val_size=0.1, sizes=(29304, 3257, 16281), extra={"embedding_dim": 8}),
        "wine_quality": Layout(
            "sparsevfl", "wine_quality", _SPARSEVFL, 3,
            assignment={
                "party1": ["fixed acidity", "volatile acidity", "citric acid", "residual sugar"],
                "party2": ["chlorides", "free sulfur dioxide", "total sulfur dioxide", "density"],
                "party3": ["pH", "sulphates", "alcohol", "is_red"],
            },
            test_size=0.1, val_size=0.1, sizes=(5197, 650, 650), extra={"embedding_dim": 4}),
        "physionet2012": Layout(
            "sparsevfl", "physionet2012", _SPARSEVFL + "; stands in for Covertype", 3,
            partition_strategy="contiguous", test_size=0.1, val_size=0.1, extra={"embedding_dim": 4}),
    },
}


def layout_names() -> list[str]:
    return ["paper", *sorted(LAYOUTS)]


def is_layout(name: str | None) -> bool:
    return name is not None and (name == "paper" or name in LAYOUTS)


def resolve_layout(name: str, dataset: str) -> Layout:
    """The layout ``name`` (``paper``: the only one registered) of ``dataset``; ConfigError naming
    the layouts that exist otherwise."""
    have = {k: v[dataset] for k, v in LAYOUTS.items() if dataset in v}
    if name == "paper":
        if len(have) == 1:
            return next(iter(have.values()))
        if not have:
            raise ConfigError(f"--partition paper: no paper layout is registered for data set {dataset!r} "
                              f"(layouts exist for {sorted({d for v in LAYOUTS.values() for d in v})}); use "
                              f"--partition random|contiguous or --assignment FILE")
        raise ConfigError(f"--partition paper is ambiguous for {dataset!r}: name one of {sorted(have)}")
    if name not in LAYOUTS:
        raise ConfigError(f"unknown layout {name!r}; choose one of {layout_names()}")
    if dataset not in LAYOUTS[name]:
        raise ConfigError(f"layout {name!r} has no split of {dataset!r}; it covers {sorted(LAYOUTS[name])}")
    return LAYOUTS[name][dataset]


def build_layout(name: str, dataset: str, *, seed: int = 0, data_dir: str | Path | None = None,
                 parties: int | None = None, **kw):
    """Prepared data of ``dataset`` in layout ``name`` (extra keywords go to ``build_data``:
    ``noise``, ``overlap``, ``scaling``, ``impute``). ``parties``, when given, must equal the
    layout's. Raises DataError if the split sizes differ from the ones the paper states."""
    from verticalfs.data.build import build_data
    from verticalfs.data.registry import load_dataset

    lay = resolve_layout(name, dataset)
    if parties is not None and int(parties) != lay.parties:
        raise ConfigError(f"layout {lay.name!r} of {dataset!r} has {lay.parties} parties ({lay.source}); "
                          f"leave out --parties or set it to {lay.parties}")
    common = dict(seed=seed, assignment=lay.assignment, **kw)
    if lay.assignment is None:
        common.update(parties=lay.parties, partition_strategy=lay.partition_strategy)
    if lay.test_size is None:  # predefined test rows; val = a fraction of the training file
        table = load_dataset(dataset, data_dir=data_dir, seed=seed)
        if table.predefined_test is None:
            raise DataError(f"layout {lay.name!r}: data set {dataset!r} has no predefined test rows")
        n = len(table.y)
        n_file = int(np.count_nonzero(~np.asarray(table.predefined_test, dtype=bool)))
        # build_data's val_size is a fraction of *all* rows; this is val_size of the training file
        data = build_data(table, val_size=lay.val_size * n_file / n, **common)
    else:
        data = build_data(dataset, data_dir=data_dir, test_size=lay.test_size, val_size=lay.val_size, **common)
    got = tuple(data.n_samples(s) for s in ("train", "val", "test"))
    if lay.sizes is not None and got != lay.sizes:
        raise DataError(f"{dataset}: split sizes {got} differ from the layout's {lay.sizes} ({lay.source})")
    return data
