"""The configuration stored with ``compare``'s finished runs, so that ``--resume`` reuses only runs of
the same configuration.

``compare --out DIR`` writes ``DIR/runs/config.json`` before its first run: the data (a data set's
name or the party files' SHA-256 hashes, parties, noise, overlap, split and preprocessing options),
the epochs and parameters shared by every seed, and each method's resolved parameters. With
``--resume`` the stored configuration must equal the new one (methods may be added, seeds may
change); the first difference is an error naming the key, the old value and the new one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from verticalfs.exceptions import ConfigError
from verticalfs.utils.io import write_json_atomic

CONFIG_FILE = "config.json"


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _plain(obj: Any) -> Any:
    """JSON's view of ``obj`` (tuples as lists, paths as text), as it reads back from the file."""
    return json.loads(json.dumps(obj, default=str, sort_keys=True))


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k in obj:
            out.update(_flat(obj[k], f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def first_difference(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, Any, Any] | None:
    """The first key (dotted, in the new configuration's order) whose value differs, or None."""
    a, b = _flat(_plain(dict(old))), _flat(_plain(dict(new)))
    for k in list(b) + [k for k in a if k not in b]:
        if a.get(k, "(not set)") != b.get(k, "(not set)"):
            return k, a.get(k, "(not set)"), b.get(k, "(not set)")
    return None


def check_and_store(run_dir: str | Path, config: Mapping[str, Any], *, resume: bool) -> None:
    """Write ``config`` beside the runs; with ``resume``, first refuse a configuration that differs
    from the stored one (the per-method parameters only for methods in both)."""
    run_dir = Path(run_dir)
    path = run_dir / CONFIG_FILE
    new = _plain(dict(config))
    if resume:
        runs = [p for p in run_dir.glob("*.json") if p.name != CONFIG_FILE] if run_dir.is_dir() else []
        old = None
        if path.is_file():
            try:
                old = json.loads(path.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"--resume: {str(path)!r} is not a valid configuration ({exc}); give another "
                                  "--out, or delete the folder's runs to start afresh") from None
        elif runs:
            raise ConfigError(f"--resume: {str(run_dir)!r} holds {len(runs)} runs but no {CONFIG_FILE} saying "
                              "which configuration they ran; give another --out, or run without --resume")
        if old is not None:
            both = set(old.get("methods", {})) & set(new.get("methods", {}))
            o = {**old, "methods": {m: old["methods"][m] for m in sorted(both)}}
            n = {**new, "methods": {m: new["methods"][m] for m in sorted(both)}}
            diff = first_difference(o, n)
            if diff is not None:
                key, was, now = diff
                raise ConfigError(f"--resume: the runs in {str(run_dir)!r} are of another configuration: {key} was "
                                  f"{json.dumps(was)}, now {json.dumps(now)}; give another --out, or the same options "
                                  "as before")
            new["methods"] = {**old.get("methods", {}), **new.get("methods", {})}
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, new)
