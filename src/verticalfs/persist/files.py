"""Checkpoint files and the party's side of checkpoints: below :mod:`verticalfs.party`.

A party answers :class:`~verticalfs.transport.messages.Persist` (save, load, clear its role's state
in its own folder) with :func:`party_persist`; the label holder's side
(:class:`~verticalfs.training.checkpoint.Checkpointer`, what the run saves and when) writes its own
files with the same helpers. The files and their guarantees (plain data, private keys apart, modes
0600 / 0700, atomic writes) are described in :mod:`verticalfs.training.checkpoint`. This module
imports nothing from the protocol's loops, the methods or :mod:`verticalfs.party`: it sees a party
through :class:`PersistingParty`.
"""

from __future__ import annotations

import io
import os
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.persist import state as _state
from verticalfs.transport.messages import Ack, Persist
from verticalfs.utils.io import check_private_file, write_bytes_atomic

if TYPE_CHECKING:
    from verticalfs.crypto.keys import PrivateKey

#: a role's attributes that are not state (rebuilt by the run's Join); the party's own DP accountant
#: (``dp_steps_left``) is never rewound by a load
_NOT_STATE = frozenset({"data", "spec", "dp_steps_left"})


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(s: dict[str, Any]) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])


#: mode of every checkpoint file (model state, masks, keys: the owner's only)
FILE_MODE = 0o600
KEYS_SUFFIX = ".keys.json"


def _keys_path(path: Path) -> Path:
    return path.with_name(path.stem + KEYS_SUFFIX)


def _private_dir(folder: Path, *, ours: bool = False) -> Path:
    """``folder``, made 0700 when this library creates it (or when it is ``ours``, a run's folder)."""
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        ours = True
    if ours:
        os.chmod(folder, 0o700)
    return folder


def _write(path: Path, obj: Any) -> None:
    """``obj`` as plain data in ``path`` (0600); private keys in ``<tag>.keys.json`` (0600), first."""
    tree, keys = _state.encode(obj)
    _private_dir(path.parent, ours=True)
    if keys:
        write_bytes_atomic(_keys_path(path), _state.keys_to_json(keys), mode=FILE_MODE)
    else:
        _keys_path(path).unlink(missing_ok=True)
    buf = io.BytesIO()
    torch.save(tree, buf)
    write_bytes_atomic(path, buf.getvalue(), mode=FILE_MODE)


def _read(path: Path) -> tuple[dict[str, Any], dict[str, PrivateKey]]:
    """``(tree, private keys)`` of a checkpoint file: ``weights_only=True``, keys from JSON."""
    try:
        tree = torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a file that is not a plain-data checkpoint
        raise ConfigError(f"{str(path)!r} is not a verticalfs checkpoint ({type(exc).__name__}); checkpoints of "
                          "earlier versions cannot be resumed, start the run afresh") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{str(path)!r} is not a verticalfs checkpoint")
    kp = _keys_path(path)
    if kp.is_file():
        keys = _state.keys_from_json(check_private_file(kp, "checkpoint's Paillier key file").read_bytes(),
                                     repr(str(kp)))
    else:
        keys = {}
    return tree, keys


def restore_attrs(obj: Any, saved: dict[str, Any], keys: dict[str, PrivateKey], what: str) -> None:
    """Put saved attributes back into ``obj`` (modules and optimisers in place)."""
    for k, s in saved.items():
        setattr(obj, k, _state.restore_into(getattr(obj, k, None), s, keys, f"{what}.{k}"))


def _prune(run_dir: Path, keep: int = 2) -> None:
    for old in sorted(run_dir.glob("*.pt"), key=lambda p: p.stat().st_mtime)[:-keep]:
        old.unlink(missing_ok=True)
        _keys_path(old).unlink(missing_ok=True)


def _safe(name: str, what: str) -> str:
    if not name or any(c in name for c in "/\\") or name in (".", ".."):
        raise ProtocolError(f"{what} {name!r} is not a plain name")
    return name


# ---------------------------------------------------------------------------------- the party side
class _Kept(Protocol):
    kept: Any

    def keep(self, indices: Any) -> None: ...


class _Role(Protocol):
    transient: tuple[str, ...]


class PersistingParty(Protocol):
    """What :func:`party_persist` uses of a party (a :class:`~verticalfs.party.PartyRuntime`)."""

    name: str
    checkpoint_dir: str | Path | None
    method: str | None
    policy: Any  # its PartyPolicy (own_randomness: a load draws fresh noise)

    @property
    def role(self) -> Any: ...

    @property
    def data(self) -> Any: ...


def party_persist(runtime: PersistingParty, msg: Persist) -> Ack:
    """A party's answer to :class:`Persist` (``runtime.checkpoint_dir`` is its own folder)."""
    folder = runtime.checkpoint_dir
    if folder is None:
        raise ProtocolError(f"party {runtime.name!r} has no checkpoint folder; start it with one "
                            "(`checkpoints` in the deployment file, or checkpoint_dir=...)")
    run_dir = Path(folder) / _safe(str(msg.run), "run id")
    if msg.action == "clear":  # the run completed: its checkpoints are no longer needed
        shutil.rmtree(run_dir, ignore_errors=True)
        return Ack()
    role = runtime.role
    if role is None:
        raise ProtocolError(f"party {runtime.name!r} has no role to checkpoint")
    path = run_dir / f"{_safe(str(msg.tag), 'checkpoint tag')}.pt"
    if msg.action == "save":
        skip = _NOT_STATE | set(role.transient)
        state = {k: v for k, v in vars(role).items() if k not in skip}
        _private_dir(Path(folder))
        _write(path, {"role": state, "kept": np.asarray(runtime.data.kept), "rng": rng_state(),
                      "method": runtime.method})
        # keep this checkpoint and the one before (the label holder may not have committed this one)
        _prune(run_dir)
        return Ack()
    if msg.action == "load":
        if not path.is_file():
            raise ProtocolError(f"party {runtime.name!r} has no checkpoint {msg.tag!r} of run {msg.run!r} in "
                                f"{str(run_dir)!r}; resume needs every party's folder as the interrupted run left it")
        saved, keys = _read(path)
        if saved.get("method") != runtime.method:
            raise ProtocolError(f"party {runtime.name!r}: checkpoint {msg.tag!r} is of {saved.get('method')!r}, the "
                                f"run is {runtime.method!r}")
        runtime.data.keep(_state.restore_into(None, saved["kept"], keys))
        restore_attrs(role, saved["role"], keys, f"party {runtime.name!r}")
        set_rng_state(_state.restore_into(None, saved["rng"], keys))
        if runtime.policy.own_randomness:  # never replay the noise drawn before (a label holder could rewind
            from verticalfs.trust import reseed  # the party and cancel its masks): fresh OS entropy

            reseed(role)
        return Ack()
    raise ProtocolError(f"unknown checkpoint action {msg.action!r}; use 'save', 'load' or 'clear'")


