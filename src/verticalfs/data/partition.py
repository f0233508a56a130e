"""Vertical partitioning of a :class:`~verticalfs.data.table.Table` and the papers' perturbations.

- :func:`partition`: even split of columns over M parties (random or contiguous), or explicit
  column lists per party (:func:`load_assignment` reads them from TOML or JSON).
- :func:`add_noise_features`: Gaussian noise columns as a fraction of each party's columns
  (less-vfl.md section 5: 50 % extra noise features; Table 3: 80/25/10/0 % over four parties).
- :func:`add_overlap`: copy ``k`` columns of other parties into each party (feast.md section 5.1,
  "overlapping features").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from verticalfs.data.choices import STRATEGIES  # noqa: E402  (one list, read by the CLI without pandas)
from verticalfs.data.table import Table
from verticalfs.data.vertical import PartyBlock, VerticalDataset
from verticalfs.exceptions import DataError
from verticalfs.names import LABEL_HOLDER


def party_name(i: int) -> str:
    """Name of the ``i``-th passive party (0-based): ``party1``, ``party2``, ..."""
    return f"party{i + 1}"


def partition(
    table: Table,
    n_parties: int | None = None,
    *,
    strategy: str = "random",
    seed: int = 0,
    assignment: Mapping[str, Sequence[str]] | None = None,
) -> VerticalDataset:
    """Split the columns of ``table`` over passive parties.

    Parameters
    ----------
    table : Table
    n_parties : int
        Number of feature-holding parties for an even split (sizes differ by at most one).
    strategy : {"random", "contiguous"}
        ``random`` shuffles the columns with ``seed`` first; ``contiguous`` keeps their order.
    assignment : mapping of party name -> list of column names, optional
        Explicit partition; every column must be assigned exactly once. Overrides ``n_parties``.
    """
    cols = table.feature_names
    if assignment is not None:
        groups = _check_assignment(table, assignment)
    else:
        if n_parties is None or n_parties < 1:
            raise DataError(f"n_parties must be a positive integer, got {n_parties!r}")
        if n_parties > len(cols):
            raise DataError(
                f"cannot split {len(cols)} columns of {table.name!r} over {n_parties} parties; use at "
                f"most {len(cols)} parties"
            )
        if strategy not in STRATEGIES:
            raise DataError(f"unknown partition strategy {strategy!r}; use one of {STRATEGIES}")
        order = np.arange(len(cols))
        if strategy == "random":
            order = np.random.default_rng(seed).permutation(len(cols))
        chunks = np.array_split(order, n_parties)
        if strategy == "random":
            chunks = [np.sort(c) for c in chunks]
        groups = {party_name(i): [cols[j] for j in c] for i, c in enumerate(chunks)}
    spur = dict(zip(cols, table.spurious, strict=True))
    cat = set(table.categorical)
    Xc = table.X.copy()
    Xc.columns = cols
    blocks = [
        PartyBlock(
            name=name,
            X=Xc[list(c)].reset_index(drop=True),
            categorical=[x for x in c if x in cat],
            spurious=np.array([spur[x] for x in c], dtype=bool),
        )
        for name, c in groups.items()
    ]
    return VerticalDataset(
        name=table.name,
        blocks=blocks,
        y=table.y,
        task=table.task,
        ids=np.asarray(table.ids),
        class_names=table.class_names,
        predefined_test=table.predefined_test,
        impute=table.impute,
    )


def _check_assignment(table: Table, assignment: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    cols = table.feature_names
    known = set(cols)
    seen: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for party, names in assignment.items():
        if party == LABEL_HOLDER:
            raise DataError(f"party name {LABEL_HOLDER!r} is reserved for the label holder; rename it")
        names = [str(x) for x in names]
        unknown = [x for x in names if x not in known]
        if unknown:
            raise DataError(
                f"assignment for party {party!r} names columns {unknown} that {table.name!r} does not "
                f"have; its columns are {cols[:10]}{' ...' if len(cols) > 10 else ''}"
            )
        for x in names:
            if x in seen:
                raise DataError(f"column {x!r} is assigned to both {seen[x]!r} and {party!r}; give it to one")
            seen[x] = party
        if not names:
            raise DataError(f"assignment gives party {party!r} no columns")
        groups[str(party)] = names
    missing = [c for c in cols if c not in seen]
    if missing:
        raise DataError(
            f"columns {missing[:10]}{' ...' if len(missing) > 10 else ''} of {table.name!r} are not "
            "assigned to any party; assign every column (or drop it from the data)"
        )
    return groups


def load_assignment(path: str | Path) -> dict[str, list[str]]:
    """Read an explicit partition ``{party: [columns...]}`` from a ``.toml`` or ``.json`` file.

    TOML form::

        [parties]
        bank = ["age", "income"]
        telecom = ["calls", "data_gb"]

    JSON form: ``{"parties": {"bank": [...], "telecom": [...]}}`` (the ``parties`` level is optional).
    Read through :class:`verticalfs.configuration.AssignmentFile`: a problem is a
    :class:`~verticalfs.exceptions.ConfigError` naming the file and the key.
    """
    from verticalfs.configuration import read_assignment

    return read_assignment(path)


def add_noise_features(
    vds: VerticalDataset, fraction: float | Sequence[float], *, seed: int = 0
) -> VerticalDataset:
    """Append standard-normal noise columns to each party, marked spurious in the ground truth.

    Parameters
    ----------
    fraction : float or sequence of float
        Party ``m`` gets ``round(fraction_m * d_m)`` noise columns, where ``d_m`` is its number of
        original columns. One value applies to every party; a sequence gives one per party in
        order (e.g. ``[0.8, 0.25, 0.1, 0.0]`` for less-vfl.md Table 3).
    """
    fr = _per_party(vds, fraction, "noise fraction")
    if any(f < 0 for f in fr):
        raise DataError(f"noise fractions must be >= 0, got {list(fr)}")
    rng = np.random.default_rng(seed)
    blocks = []
    for b, f in zip(vds.blocks, fr, strict=True):
        k = int(round(f * b.n_features))
        if k == 0:
            blocks.append(b)
            continue
        noise = rng.standard_normal((vds.n_samples, k))
        names = [f"{b.name}_noise{j}" for j in range(k)]
        X = pd.concat([b.X, pd.DataFrame(noise, columns=names)], axis=1)
        spur = np.concatenate([b.spurious, np.ones(k, dtype=bool)])
        blocks.append(PartyBlock(b.name, X, list(b.categorical), spur, b.source, dict(b.dates)))
    return vds.with_blocks(blocks)


#: :func:`add_overlap` names a copied column ``<column>@copy``, appending ``'`` while the name is
#: taken; preparation one-hot encodes a categorical copy as ``<column>@copy=<category>``
COPY_SUFFIX = "@copy"
_COPY_NAME = re.compile(re.escape(COPY_SUFFIX) + r"'*(=.*)?$", re.DOTALL)


def is_overlap_copy(name: str) -> bool:
    """Whether a prepared feature name is a column a party received as a copy (:func:`add_overlap`).

    True for ``<column>@copy``, its clash-free variants ``<column>@copy'`` (``''``, ...) and the
    one-hot columns ``<column>@copy=<category>`` of a copied categorical column.
    """
    return _COPY_NAME.search(str(name)) is not None


def add_overlap(vds: VerticalDataset, k: int | Sequence[int], *, seed: int = 0) -> VerticalDataset:
    """Copy ``k`` randomly chosen columns held by *other* parties into each party.

    Simulates the duplicated features of feast.md section 5.1. Copies keep the source column's
    ground truth (a copy of a noise column is spurious) and are named ``<column>@copy``.
    """
    ks = _per_party(vds, k, "overlap count")
    rng = np.random.default_rng(seed)
    originals = {b.name: b for b in vds.blocks}
    blocks = []
    for b, kk in zip(vds.blocks, ks, strict=True):
        kk = int(kk)
        others = [(o.name, c, s) for o in vds.blocks if o.name != b.name
                  for c, s in zip(o.feature_names, o.spurious, strict=True)]
        if kk < 0 or kk > len(others):
            raise DataError(
                f"party {b.name!r}: cannot copy {kk} columns from other parties, which hold {len(others)}"
            )
        if kk == 0:
            blocks.append(b)
            continue
        pick = rng.choice(len(others), size=kk, replace=False)
        X = b.X.copy()
        spur = list(b.spurious)
        cat = list(b.categorical)
        for j in sorted(pick):
            src, c, s = others[j]
            new = f"{c}{COPY_SUFFIX}"
            while new in X.columns:
                new += "'"
            X[new] = originals[src].X[c].to_numpy()
            spur.append(bool(s))
            if c in originals[src].categorical:
                cat.append(new)
        blocks.append(PartyBlock(b.name, X, cat, np.asarray(spur, dtype=bool), b.source, dict(b.dates)))
    return vds.with_blocks(blocks)


def _per_party(vds: VerticalDataset, value, what: str) -> list:
    if isinstance(value, (int, float, np.integer, np.floating)):
        return [value] * vds.n_parties
    vals = list(value)
    if len(vals) != vds.n_parties:
        raise DataError(
            f"{what}: got {len(vals)} values for {vds.n_parties} parties; give one value or one per party"
        )
    return vals
