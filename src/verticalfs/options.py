"""Checking the command line's options before any data is loaded or any epoch runs.

Every function raises :class:`~verticalfs.exceptions.ConfigError` (bad option) or
:class:`~verticalfs.exceptions.DataError` (bad file) with a message that names the option or file
and the fix; the CLI turns them into one line and exit code 2.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

from verticalfs.exceptions import ConfigError

#: the seeds numpy's legacy and new generators both accept
MAX_SEED = 2**32 - 1

#: the exit code of a command refused for a bad option or input
EXIT_BAD_INPUT = 2


def fail(exc: Exception) -> None:
    """End a command on ``exc``: one line ``error: ...`` on standard error, exit code 2 (the CLI's
    and every method-provided command's way to refuse a bad option)."""
    import typer
    from rich.console import Console
    from rich.text import Text

    msg = " ".join(str(exc).split())  # one line
    Console(stderr=True).print(Text("error: ", style="bold red") + Text(msg), soft_wrap=True, highlight=False)
    raise typer.Exit(EXIT_BAD_INPUT)


def check_out(path: str | Path | None, option: str = "--out", *, directory: bool = False) -> Path | None:
    """An output path that can be written, checked before any work starts.

    Not an existing directory where a file is meant (nor an existing file where a folder is meant),
    not under a file, and its nearest existing folder writable. Missing parent folders are created
    (a fresh clone has no ``results/``), so the write at the end cannot fail on them.
    """
    if path is None:
        return None
    p = Path(path)
    if directory:
        if p.exists() and not p.is_dir():
            raise ConfigError(f"{option} {str(p)!r} is a file; give a folder for the results")
    elif p.is_dir():
        raise ConfigError(f"{option} {str(p)!r} is a directory; give a file path such as {str(p / 'result.json')!r}")
    parent = p.parent if str(p.parent) else Path(".")
    # the nearest folder that exists: everything below it is created here
    existing = parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{option} {str(p)!r}: {str(existing)!r} is a file, not a folder; "
                          "give a path that is not under a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {str(p)!r}: the folder {str(existing)!r} is not writable; "
                          "choose a writable place")
    if p.exists() and not p.is_dir() and not os.access(p, os.W_OK):
        raise ConfigError(f"{option} {str(p)!r} exists and is not writable")
    if not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"{option} {str(p)!r}: cannot create the folder {str(parent)!r} ({e.strerror})") from None
    _probe(p if directory and p.is_dir() else parent, p, option)
    return p


def _probe(folder: Path, p: Path, option: str) -> None:
    """Create and remove a file in ``folder``: permission bits say nothing on a read-only file system
    or to root, and the result is written there (atomically, by a temporary file and a rename)."""
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(prefix=".verticalfs-probe-", dir=folder)
    except OSError as e:
        raise ConfigError(f"{option} {str(p)!r}: cannot write in the folder {str(folder)!r} "
                          f"({e.strerror or type(e).__name__}); choose a writable place") from None
    os.close(fd)
    os.unlink(tmp)


def check_epochs(epochs: int | None, option: str = "--epochs") -> int | None:
    """``--epochs``: at least one (0 would report an untrained model as a result); None = the method's default."""
    if epochs is None:
        return None
    if isinstance(epochs, bool) or int(epochs) != epochs or epochs < 1:
        raise ConfigError(f"{option} must be a whole number >= 1, got {epochs!r} (0 trains nothing); leave it "
                          "out for the method's default")
    return int(epochs)


def check_seed(seed: int, option: str = "--seed") -> int:
    if isinstance(seed, bool) or int(seed) != seed or not 0 <= int(seed) <= MAX_SEED:
        raise ConfigError(f"{option} must be an integer in [0, {MAX_SEED}], got {seed!r}")
    return int(seed)


def parse_seeds(text: str, option: str = "--seeds") -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``; every item an integer seed, no repeats, at least one."""
    items = [t.strip() for t in str(text).replace(";", ",").split(",")]
    if not any(items):
        raise ConfigError(f"{option} is empty; give comma-separated seeds such as 0,1,2")
    out = []
    for t in items:
        if not t:
            raise ConfigError(f"{option} {text!r} has an empty item; give comma-separated seeds such as 0,1,2")
        try:
            v = int(t)
        except ValueError:
            raise ConfigError(f"{option}: {t!r} is not an integer seed; give comma-separated seeds such as 0,1,2") from None
        out.append(check_seed(v, option))
    dup = sorted({v for v in out if out.count(v) > 1})
    if dup:
        raise ConfigError(f"{option} repeats seeds {dup}; each seed once")
    return out


def parse_fractions(text: str, option: str, *, n_parties: int | None = None, upper: float = 100.0
                    ) -> float | list[float]:
    """``--noise``: one fraction or one per party, each finite and in ``[0, upper]``."""
    items = [t.strip() for t in str(text).replace(";", ",").split(",") if t.strip()]
    if not items:
        raise ConfigError(f"{option} is empty; give a number such as 0.5 (or one per party)")
    vals = []
    for t in items:
        try:
            v = float(t)
        except ValueError:
            raise ConfigError(f"{option}: {t!r} is not a number") from None
        if not math.isfinite(v) or not 0.0 <= v <= upper:
            raise ConfigError(f"{option} values must be finite numbers in [0, {upper:g}], got {t!r}")
        vals.append(v)
    _check_count(vals, option, n_parties)
    return vals[0] if len(vals) == 1 else vals


def parse_counts(text: str, option: str, *, n_parties: int | None = None) -> int | list[int]:
    """``--overlap``: one non-negative integer or one per party."""
    items = [t.strip() for t in str(text).replace(";", ",").split(",") if t.strip()]
    if not items:
        raise ConfigError(f"{option} is empty; give a whole number such as 2 (or one per party)")
    vals = []
    for t in items:
        try:
            v = int(t)
        except ValueError:
            raise ConfigError(f"{option}: {t!r} is not a whole number") from None
        if v < 0:
            raise ConfigError(f"{option} values must be >= 0, got {v}")
        vals.append(v)
    _check_count(vals, option, n_parties)
    return vals[0] if len(vals) == 1 else vals


def _check_count(vals: Sequence, option: str, n_parties: int | None) -> None:
    if n_parties is not None and len(vals) not in (1, n_parties):
        raise ConfigError(f"{option} has {len(vals)} values for {n_parties} parties; give one value or one per party")


def parse_party_files(items: Sequence[str] | None) -> dict[str, str]:
    """``--party-file name=path`` (repeatable); a party named twice is an error."""
    files: dict[str, str] = {}
    for it in items or []:
        if "=" not in it:
            raise ConfigError(f"--party-file expects name=path, got {it!r}")
        k, v = (x.strip() for x in it.split("=", 1))
        if not k or not v:
            raise ConfigError(f"--party-file expects name=path, got {it!r}")
        if k in files:
            raise ConfigError(f"--party-file names party {k!r} twice ({files[k]!r} and {v!r}); one file per party")
        files[k] = v
    return files


def parse_categorical(items: Sequence[str] | None, parties: Sequence[str]) -> dict[str, list[str]] | str | None:
    """``--categorical bank:workclass,education`` (repeatable) or ``--categorical auto``."""
    if not items:
        return None
    if "auto" in items:
        if len(items) > 1:
            raise ConfigError("--categorical auto takes every non-numeric column; do not list columns beside it")
        return "auto"
    out: dict[str, list[str]] = {}
    for it in items:
        if ":" not in it:
            raise ConfigError(f"--categorical expects party:column,column (or auto), got {it!r}")
        party, cols = it.split(":", 1)
        party = party.strip()
        if party not in parties:
            raise ConfigError(f"--categorical names party {party!r}, which has no --party-file; parties: {list(parties)}")
        names = [c.strip() for c in cols.split(",") if c.strip()]
        if not names:
            raise ConfigError(f"--categorical {it!r} lists no column")
        out.setdefault(party, []).extend(names)
    return out
