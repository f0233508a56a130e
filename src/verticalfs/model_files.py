"""The file format of saved models, shared by the side that writes a file and the side that reads it.

A saved model (:mod:`verticalfs.model`) is one file per feature party, written *by that party*, one
for the label holder and a manifest. Every ``.pt`` file is a dict of tensors, numbers, strings,
lists and dicts only, tagged with :data:`FORMAT` and the library version, and is read with
``torch.load(weights_only=True)``: nothing is unpickled from disk. A file saved by another version,
or one whose SHA-256 does not match the manifest, is refused with an error naming the file. A
file name in a manifest must name a file inside the model folder (:func:`confined`): no ``..``,
no absolute path, no symbolic link leading out of it.

This module sits below :mod:`verticalfs.party` (a party writes and reads its own file here) and
imports nothing from the protocol or the methods.
"""

from __future__ import annotations

import hashlib
import hmac
import io
from pathlib import Path
from typing import TypedDict

import torch

from verticalfs.exceptions import ConfigError
from verticalfs.utils.io import write_bytes_atomic
from verticalfs.version import __version__

FORMAT = 1
MANIFEST = "manifest.json"


class HolderPart(TypedDict):
    """The label holder's part of a saved model (a method's ``export_holder``): plain data whose
    ``kind`` names its form; each form is a TypedDict extending this one (a split model's
    :class:`~verticalfs.training.split.SplitHolder`, a filter method's, ICAFS's)."""

    kind: str


def sha256(data: bytes) -> str:
    """The hex SHA-256 of ``data`` (what the manifest records per file)."""
    return hashlib.sha256(data).hexdigest()


def confined(directory: Path, name: object, what: str) -> Path:
    """``directory / name`` when ``name`` is a file name inside ``directory``, else a ConfigError
    naming the entry ``what``: a name with a folder part, ``..`` or an absolute path, or a file
    (or symbolic link) whose real path lies outside the folder, is refused."""
    folder = Path(directory)
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name
            or "\x00" in name or Path(name).is_absolute()):
        raise ConfigError(f"{what} names the file {name!r}: a model's files must be plain names inside its folder "
                          f"{str(folder)!r} (no '..', no folder, no absolute path); the manifest was changed, "
                          "save the model again")
    path = folder / name
    real, root = path.resolve(), folder.resolve()
    if real.parent != root:
        raise ConfigError(f"{what} names the file {name!r}, a link to {str(real)!r} outside the model folder "
                          f"{str(folder)!r}; refuse to read it (copy the model's files, not links)")
    return path


def dump(content: dict) -> bytes:
    """The bytes of a model file holding ``content`` (format and version added)."""
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "verticalfs_version": __version__, **content}, buf)
    return buf.getvalue()


def load(path: Path, expected_sha256: str | None, what: str) -> dict:
    """A model file read back: checksum (when given), format and version checked, no unpickling.

    ``what`` names the reader in errors (``"party 'bank'"``, ``"the label holder"``).
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what}: {str(path)!r} does not exist") from None
    if expected_sha256 is not None and sha256(raw) != expected_sha256:
        raise ConfigError(f"{what}: {str(path)!r} does not match its checksum in the manifest; it was changed "
                          "after saving, refuse to use it (save the model again)")
    try:
        obj = torch.load(io.BytesIO(raw), weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a file that is not a safe saved model
        raise ConfigError(f"{what}: {str(path)!r} is not a verticalfs model file ({type(exc).__name__})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ConfigError(f"{what}: {str(path)!r} is not a verticalfs model file of format {FORMAT}")
    if obj.get("verticalfs_version") != __version__:
        raise ConfigError(f"{what}: {str(path)!r} was saved by verticalfs {obj.get('verticalfs_version')}, this is "
                          f"{__version__}; use that version, or train and save the model again")
    return obj


#: the suffix of a party's own MAC beside its saved part (``<party>.pt.mac``)
MAC_SUFFIX = ".mac"


def mac(secret: bytes, data: bytes) -> str:
    """HMAC-SHA256 of a saved part under the party's own secret (hex)."""
    return hmac.new(bytes(secret), data, hashlib.sha256).hexdigest()


def save_party_file(directory: Path, party: str, content: dict, *, secret: bytes | None = None) -> tuple[str, str]:
    """A party writes its part (on its side); returns ``(file name, sha256)``. The file is private
    (0600, in a folder of mode 0700); with ``secret`` (the party's own, never sent) the party also
    writes ``<party>.pt.mac``, its HMAC of the file, which :func:`load_party_file` checks."""
    data = dump(content)
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o700)
    path = folder / f"{party}.pt"
    write_bytes_atomic(path, data, mode=0o600)
    if secret is not None:
        write_bytes_atomic(path.with_name(path.name + MAC_SUFFIX), mac(secret, data).encode(), mode=0o600)
    return path.name, sha256(data)


def load_party_file(path: Path, *, expected_sha256: str, party: str, secret: bytes | None = None) -> dict:
    """A party reads its part back (checksum and version checked, no unpickling). With ``secret``
    the part must carry the party's own MAC (:func:`save_party_file`): a file the party did not save
    itself, or one changed since, is refused whatever checksum the label holder sends."""
    if secret is not None:
        _check_mac(Path(path), party, secret)
    saved = load(Path(path), expected_sha256, f"party {party!r}")
    if saved.get("party") != party:
        raise ConfigError(f"party {party!r}: {str(path)!r} is the model file of party {saved.get('party')!r}")
    return saved


def _check_mac(path: Path, party: str, secret: bytes) -> None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"party {party!r}: {str(path)!r} does not exist") from None
    try:
        tag = path.with_name(path.name + MAC_SUFFIX).read_text().strip()
    except (FileNotFoundError, UnicodeDecodeError):
        tag = ""
    if not hmac.compare_digest(tag, mac(secret, data)):
        raise ConfigError(f"party {party!r} opens only model parts it saved itself: {str(path)!r} carries no valid MAC "
                          "of its own (changed, or not saved by this party); save the model again from a run with "
                          "this party (its policy's own_models_only)")
