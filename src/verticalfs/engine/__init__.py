"""A party's engine: where its table is read, prepared and served from (issue 55).

A deployed party (:class:`~verticalfs.deploy.party.DeployedParty`) holds its table through one of
these engines; the party's coordinator (its gRPC server, TLS identity, policy and bottom model) is
the same with either, and the label holder sees the same messages:

- ``"local"`` (the default): the party's own process reads its file, in memory when small, in
  pieces (:class:`~verticalfs.data.stream.StreamedTable`) when large;
- ``"ray"``: a Ray cluster reads the party's Parquet table where it lives (a folder or an
  object-store path through pyarrow's filesystems), runs the two preparation passes as Ray jobs and
  blinds its PSI ids as Ray tasks (:mod:`verticalfs.engine.ray`; the ``ray`` extra).

The seam an engine implements (:class:`PartyTable`) is small: the table's schema, its ids (for PSI
and the alignment), a check of its values, the preparation of the aligned rows into one float32
memory-mapped matrix per split (what training reads mini-batches from), and the executor its PSI
blinding runs on. This module imports no engine: ``import verticalfs`` never imports Ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from verticalfs.exceptions import ConfigError

#: the engines a party can run on (``party serve --engine``, the deployment file's ``engine``)
ENGINES = ("local", "ray")


class PartyTable(Protocol):
    """What a party's engine provides (see the module docstring)."""

    party: str
    path: Any
    columns: list[str]
    n_rows: int
    work_dir: Path

    def schema_frame(self) -> pd.DataFrame:
        """An empty frame with the table's columns and types."""

    def id_lookup(self) -> Any:
        """The ids, sorted, with ``positions(ids)`` (each one's row, -1 if not held), ``sorted``
        (what PSI blinds) and ``len``; checked: no missing and no repeated id."""

    def check_values(self, columns: Sequence[str], categorical: Sequence[str]) -> None:
        """Refuse values training cannot use (infinite, or a range that overflows), before anyone connects."""

    def prepare(self, pos: np.ndarray, codes: np.ndarray, cols: Sequence[str], cats: Sequence[str], *,
                scaling: str, impute: str, splits: Sequence[str], out_dir: str | Path) -> tuple[Any, dict]:
        """``(preprocessor, {split: float32 matrix})``: rows ``pos`` (positions given by the id
        lookup) prepared, row ``i`` in split ``codes[i]``, each split in the order of ``pos``."""

    def psi_executor(self) -> tuple[Executor, int] | None:
        """Where the PSI blinding runs (an executor and its worker count), or None for the default."""

    def close(self) -> None:
        """Release what the engine holds (its working folder, its connection to the cluster)."""


def check_engine(engine: str, where: str = "--engine") -> str:
    if engine not in ENGINES:
        raise ConfigError(f"{where}: unknown engine {engine!r}; choose one of {list(ENGINES)}")
    return engine


def open_table(engine: str, party: str, path: str | Path, *, id_column: str = "id", ray_address: str | None = None,
               work_dir: str | Path | None = None, **read_options: Any) -> PartyTable:
    """The table of ``party`` at ``path`` on ``engine`` (``"local"``: read in pieces by this process)."""
    check_engine(engine)
    if engine == "ray":
        from verticalfs.engine.ray import RayTable

        return RayTable(party, path, id_column=id_column, address=ray_address, work_dir=work_dir)
    from verticalfs.data.stream import StreamedTable

    return StreamedTable(party, path, id_column=id_column, work_dir=work_dir, **read_options)
