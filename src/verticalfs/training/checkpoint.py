"""Checkpoints at the end of every epoch, and resuming a run from the last complete one.

A run with a checkpoint folder saves, after every training epoch of the one split-learning loop
(:class:`~verticalfs.training.split.SplitTrainer`) and after every round of a round-based protocol
(:class:`~verticalfs.training.rounds.RoundDriver`), whichever loop (:class:`Loop`) runs:

- at every party (a :class:`Persist` message, phase ``checkpoint``): its role's state (bottom
  model, optimiser, gates, masks, batch plan, a protocol's weights), the features it still uses,
  its RNG states, in its own folder (a party's checkpoint never leaves its host);
- at the label holder: the loop's state (:meth:`Loop.checkpoint_state`: a trainer's attributes, top
  model, optimiser, history, best epoch so far, and whatever a method's trainer keeps; a driver's
  history and its protocol's state), the ledger so far, the RNG states.

Each file is written atomically (a temporary file, then a rename); the label holder then writes
the run's ``latest.json`` naming the checkpoint, only after every party confirmed its file: a
checkpoint that any side did not finish is never named there, so never loaded. Every run keeps
its checkpoints under a key of its own (its run id and session, :class:`Checkpointer`): runs of
one label holder sharing a checkpoint folder do not touch each other's.

``resume=True`` reads the ``latest.json`` of the most recent interrupted run with the same run id
(method, parameters, seed, codec, parties and rows) and refuses checkpoints of another run. The
method runs again from its start; the epochs of every loop segment before the checkpointed one are recomputed (the same seeds give the same states, no
checkpoint is written while replaying), and when the checkpointed segment starts, the label
holder and every party load their state and the run continues with the next epoch. Single-loop
methods (``vfl``, the SparseVFL family) thus replay nothing but the set-up; LESS-VFL resumed in its
training stage recomputes its pre-training. The ledger is restored to the checkpoint's, so the
final figures are those of an uninterrupted run with the same seed (plus the ``checkpoint``
messages, which are on the ledger in their own phase).

Files hold plain data only (:mod:`verticalfs.training.state`): tensors, numbers, strings, lists
and dicts, read with ``torch.load(weights_only=True)`` (no class is constructed from a file) and put
back into the resumed run's own objects. A party's Paillier private key (secure FedSDG-FS) is not
in the ``.pt`` file: its integers ``n, p, q`` go to ``<tag>.keys.json`` beside it, read as JSON.
Every file is written with mode 0600 in a run folder made 0700 (they hold model state, masks and
keys): only the account that runs the party reads them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from verticalfs.exceptions import ConfigError
from verticalfs.persist import state as _state
from verticalfs.persist.files import (
    FILE_MODE,
    KEYS_SUFFIX,
    _private_dir,
    _prune,
    _read,
    _write,
    party_persist,
    restore_attrs,
    rng_state,
    set_rng_state,
)
from verticalfs.transport.messages import Ack, At, Persist
from verticalfs.utils.io import write_json_atomic

if TYPE_CHECKING:
    from verticalfs.crypto.keys import PrivateKey

__all__ = ["FILE_MODE", "KEYS_SUFFIX", "PHASE", "Checkpointer", "Loop", "party_persist", "restore_attrs", "rng_state",
           "run_id", "set_rng_state"]

PHASE = "checkpoint"


class Loop(Protocol):
    """What a checkpointed loop offers the :class:`Checkpointer` (a
    :class:`~verticalfs.training.split.SplitTrainer`, a :class:`~verticalfs.training.rounds.RoundDriver`)."""

    #: the label holder's federation (its parties checkpoint by ``Persist``, its ledger is saved)
    fed: Any
    #: the parties taking part now
    parties: list[str]

    @property
    def position(self) -> int:
        """Epochs or rounds done (the ``round`` of the checkpoint's messages)."""
        ...

    def checkpoint_state(self) -> dict[str, Any]:
        """The label holder's state of the loop (plain data, see :mod:`verticalfs.training.state`)."""
        ...

    def load_checkpoint_state(self, saved: dict[str, Any], keys: dict[str, PrivateKey]) -> None:
        """Put :meth:`checkpoint_state`'s output back into the resumed run's loop."""
        ...


# ---------------------------------------------------------------------------- the label holder's side
class Checkpointer:
    """The label holder's checkpoints of one run (see the module docstring).

    Every run keeps its checkpoints apart, under a key of its own: ``<run id>-<session>`` (the run's
    session id at the parties, or a fresh token in-process), a folder of that name in the label
    holder's ``folder`` (with the run's own ``latest.json``) and in every party's folder. So several
    runs of one label holder, with the same checkpoint folder, never overwrite or delete each
    other's checkpoints: :meth:`clear` removes this run's folder only. A running run holds a lock on
    its folder (``.lock``, released when its process ends), so a resume never takes the folder of
    a run still going.

    Parameters
    ----------
    folder : path
        The label holder's checkpoint folder.
    run_id : str
        Identifies the run (:func:`run_id`); a resume takes only checkpoints of an equal run.
    resume : bool or "if-any"
        Continue from the most recent interrupted run with this ``run_id`` in ``folder`` (its own
        ``latest.json``); ``"if-any"``: if there is one, else start afresh.
    session : str, optional
        The run's session id at the parties (part of its key).
    """

    def __init__(self, folder: str | Path, run_id: str, *, resume: bool | str = False,
                 session: str | None = None) -> None:
        import secrets

        self.folder = Path(folder)
        self.run_id = run_id
        self.segment = -1  # loop segments (SplitTrainer.fit calls) started so far
        self.target: dict[str, Any] | None = None
        self.resumed_from: dict[str, Any] | None = None
        self._lock_fd: int | None = None
        self.key = f"{run_id}-{session or secrets.token_hex(6)}"
        if resume:
            found = self._interrupted()
            if found is None and resume != "if-any":
                others = sorted(p.parent.name for p in self.folder.glob("*/latest.json"))
                if others:
                    raise ConfigError(f"the checkpoints in {str(self.folder)!r} ({', '.join(others)}) are of other runs "
                                      "(method, parameters, seed, codec, parties or rows differ) or of runs still "
                                      "going; resume with the same options, or start afresh without --resume")
                raise ConfigError(f"nothing to resume: no checkpoint in {str(self.folder)!r} (no epoch of a run with "
                                  "this checkpoint folder completed)")
            if found is not None:
                self.key = found.parent.name
                self.target = json.loads(found.read_text())
                done = int(self.target["epochs"])
                seg = int(self.target["segment"])
                where = f" of loop segment {seg + 1}" if seg else ""
                #: what the resumed run continues from (also in the result's ``info["resumed_from"]``)
                self.resumed_from = {"epoch": done, "segment": seg, "tag": str(self.target["tag"])}
                sys.stderr.write(f"resuming from the checkpoint after epoch {done}{where} in "
                                 f"{str(found.parent)!r}: continuing with epoch {done + 1}\n")
                sys.stderr.flush()
        self._lock()

    @property
    def run_dir(self) -> Path:
        """This run's folder (its checkpoints and its ``latest.json``)."""
        return self.folder / self.key

    def _interrupted(self) -> Path | None:
        """The ``latest.json`` of the most recent run with this run id whose process ended."""
        import fcntl

        best: tuple[float, Path] | None = None
        for latest in self.folder.glob(f"{self.run_id}-*/latest.json"):
            try:
                if json.loads(latest.read_text()).get("run") != self.run_id:
                    continue
                fd = os.open(latest.parent / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
            except (OSError, ValueError):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a run still going holds it
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError:
                continue
            finally:
                os.close(fd)
            when = latest.stat().st_mtime
            if best is None or when > best[0]:
                best = (when, latest)
        return None if best is None else best[1]

    def _lock(self) -> None:
        import fcntl

        _private_dir(self.folder)
        _private_dir(self.run_dir, ours=True)
        fd = os.open(self.run_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ConfigError(f"the checkpoints in {str(self.run_dir)!r} are in use by a run still going") from None
        self._lock_fd = fd

    def release(self) -> None:
        """Let another run (a resume) take this run's folder: the run stopped in this process."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def replaying(self) -> bool:
        return self.target is not None and self.segment < int(self.target["segment"])

    def begin(self, loop: Loop) -> int:
        """A loop segment starts; returns how many of its epochs (or rounds) to skip (restored from
        the checkpoint)."""
        self.segment += 1
        if self.target is not None and self.segment == int(self.target["segment"]):
            done = int(self.target["epochs"])
            self._restore(loop, self.target["tag"])
            self.target = None
            return done
        return 0

    def save(self, loop: Loop, epochs_done: int) -> None:
        """After an epoch (or a round): every party saves, then the label holder, then ``latest.json`` names it."""
        if self.replaying:
            return
        tag = f"s{self.segment}-e{epochs_done}"
        at = At(PHASE, loop.position)
        fed = loop.fed
        for p in loop.parties:
            fed.proxy(p).request(Persist(action="save", run=self.key, tag=tag), at, expect=Ack)
        led = fed.ledger
        blob = {"trainer": loop.checkpoint_state(), "position": loop.position, "ledger": led.snapshot(),
                "rng": rng_state()}
        run_dir = self.run_dir
        _private_dir(self.folder)
        _write(run_dir / f"{tag}.pt", blob)
        write_json_atomic(run_dir / "latest.json", {"run": self.run_id, "segment": self.segment,
                                                    "epochs": epochs_done, "tag": tag})
        _prune(run_dir)

    def _restore(self, loop: Loop, tag: str) -> None:
        path = self.run_dir / f"{tag}.pt"
        if not path.is_file():
            raise ConfigError(f"the label holder's checkpoint {str(path)!r} named in latest.json is missing")
        blob, keys = _read(path)
        at = At(PHASE, int(blob.get("position", blob["trainer"].get("epoch", 0))))  # (a split trainer's before 0.7)
        for p in loop.parties:
            loop.fed.proxy(p).request(Persist(action="load", run=self.key, tag=tag), at, expect=Ack)
        loop.load_checkpoint_state(blob["trainer"], keys)
        loop.fed.ledger.restore(_state.restore_into(None, blob["ledger"], keys))
        set_rng_state(_state.restore_into(None, blob["rng"], keys))

    def clear(self, fed: Any = None, parties: Iterable[str] = ()) -> None:
        """The run finished: its checkpoints are no longer needed, at the label holder and (with
        ``fed``) at every party in ``parties`` (a ``Persist(action="clear")`` each); another run's
        are left as they are."""
        if fed is not None:
            for p in parties:
                fed.proxy(p).request(Persist(action="clear", run=self.key, tag=""), At(PHASE), expect=Ack)
        self.release()
        shutil.rmtree(self.run_dir, ignore_errors=True)


def run_id(method: str, params: dict[str, Any], seed: int, codec: str, parties: Iterable[str],
           n_rows: dict[str, int]) -> str:
    """A short fingerprint of what must be equal for a checkpoint to be resumed."""
    key = json.dumps({"method": method, "params": {k: repr(v) for k, v in sorted(params.items())}, "seed": seed,
                      "codec": codec, "parties": list(parties), "rows": n_rows}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]
