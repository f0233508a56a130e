"""One folder with every part of a model trained over a deployment, for ``verticalfs predict --model``.

Over a deployment each party writes its own part on its own host (``<model_dir>/<name>/<party>.pt``)
and the label holder its manifest and ``active.pt`` (``run --save-model DIR``): nothing leaves its
host. To predict in one place (an audit, a test, a party handing its part over on purpose),
:func:`gather_model` (``verticalfs model gather``) copies the label holder's folder and each
party's part into one folder, each file checked against the manifest's SHA-256 first; the folder
is what ``verticalfs predict --model`` reads. It is written under a temporary name and renamed
when complete.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path

from verticalfs.exceptions import ConfigError


def gather_model(model: str | Path, out: str | Path, *, config: str | Path | None = None,
                 parts: Mapping[str, str | Path] | None = None) -> Path:
    """Copy the label holder's model folder ``model`` and every party's part into ``out`` (new).

    A party's part is ``parts[party]`` (the file, or the folder holding it), else, with the
    deployment file ``config``, ``<model_dir>/<name>/<party>.pt`` of that party's policy (its
    folder on this host: a single-host deployment, or a copy laid out the same way). Every file
    must match the manifest's SHA-256."""
    from verticalfs.model import MANIFEST, read_manifest
    from verticalfs.model_files import sha256

    model, out = Path(model), Path(out)
    man = read_manifest(model)
    name = model.resolve().name
    dep = None
    if config is not None:
        from verticalfs.deploy.config import Deployment

        dep = Deployment.load(config)
    given = {str(k): Path(v) for k, v in (parts or {}).items()}
    unknown = sorted(set(given) - set(man["parties"]))
    if unknown:
        raise ConfigError(f"--part names {unknown}, not parties of the model in {str(model)!r} "
                          f"({sorted(man['parties'])})")
    if out.exists():
        raise ConfigError(f"--out {str(out)!r} exists; give a new folder")
    files: list[tuple[Path, str, str, str]] = [(model / man["label_holder"]["file"], man["label_holder"]["file"],
                                                man["label_holder"]["sha256"], "the label holder")]
    for party, entry in man["parties"].items():
        if party in given:
            src = given[party] / entry["file"] if given[party].is_dir() else given[party]
        elif dep is not None:
            if party not in dep.parties:
                raise ConfigError(f"party {party!r} of the model is not in {str(dep.path)!r}; give --part {party}=PATH")
            src = Path(dep.party(party).policy.model_dir or "") / name / entry["file"]
        else:
            raise ConfigError(f"party {party!r}'s part of the model: give --part {party}=PATH (its {entry['file']}, "
                              "from its model folder on its host) or --config deployment.toml")
        files.append((src, entry["file"], entry["sha256"], f"party {party!r}"))
    tmp = out.with_name(f".{out.name}.partial-{secrets.token_hex(4)}")
    tmp.mkdir(parents=True)
    try:
        shutil.copy2(model / MANIFEST, tmp / MANIFEST)
        for src, file, want, who in files:
            try:
                data = src.read_bytes()
            except OSError as exc:
                raise ConfigError(f"{who}'s part {str(src)!r} cannot be read ({exc.strerror}); give --part") from None
            if sha256(data) != want:
                raise ConfigError(f"{who}'s part {str(src)!r} does not match the manifest of {str(model)!r} (sha256 "
                                  f"{sha256(data)[:12]}..., expected {want[:12]}...): another model's, or changed")
            (tmp / file).write_bytes(data)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


__all__ = ["gather_model"]
