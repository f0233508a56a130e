"""The driver of round-based protocols: rounds of messages rather than split-learning batches.

FATE's lasso (a training run per round of its search over the L1 strength) runs on it, and a
boosted-tree protocol does too (a tree, or a level, per round). The protocol says what a round is;
the driver does the rest, as :class:`~verticalfs.training.split.SplitTrainer` does for split
learning:

- a history entry per round (:class:`~verticalfs.training.history.History`): ``round`` (from 1),
  ``phase``, the round's figures, ``seconds``, and the ledger's ``bytes`` (training traffic so
  far: every phase but ``eval`` and ``checkpoint``) and ``bytes_total``;
- the callbacks (:class:`~verticalfs.training.history.Callback`): ``on_train_begin(driver,
  max_rounds, phase)``, ``on_epoch_end(driver, entry)`` after every round, ``on_train_end(driver)``;
- a check of every figure a round returns: a value that is NaN or infinite stops the run with a
  :class:`~verticalfs.exceptions.ConfigError` naming the round and the figure;
- checkpoints after every round (:class:`~verticalfs.training.checkpoint.Checkpointer`: each party
  saves its role by a ``Persist``, the label holder the driver's history and the protocol's
  :meth:`~RoundProtocol.state`), and a resumed run continues after the last complete round with
  the same results as an uninterrupted one.

A protocol implements :class:`RoundProtocol`::

    class Trees:
        phase = "train"
        def begin(self, driver): ...              # before the first round (set-up, not state)
        def run_round(self, index): ...           # one round -> {"val_accuracy": .., "train_loss": ..}
        def stop(self, entry): ...                # after a round's entry is recorded: enough?
        def state(self): ...                      # plain data for a checkpoint (keys go apart)
        def load_state(self, state): ...          # put it back (a resumed run)

    history = RoundDriver(fed, "secureboost", max_rounds=50, callbacks=cbs, checkpoints=ck).run(Trees())
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from verticalfs.exceptions import ConfigError
from verticalfs.training.history import Callback, History

if TYPE_CHECKING:
    from verticalfs.crypto.keys import PrivateKey
    from verticalfs.training.checkpoint import Checkpointer
    from verticalfs.transport.ledger import Ledger


class RoundProtocol(Protocol):
    """What a round-based protocol supplies to :class:`RoundDriver` (see the module docstring)."""

    #: the ledger phase of its rounds' messages (``selection``, ``train``, ...)
    phase: str

    def begin(self, driver: RoundDriver) -> None:
        """Before the first round, also in a resumed run (set-up that is not restored: what every
        round needs and the same seeds rebuild)."""

    def run_round(self, index: int) -> dict[str, Any]:
        """Round ``index`` (from 0): its messages; returns the round's figures by name (numbers:
        metrics, a loss as ``train_loss``, counts) for its history entry."""
        ...

    def stop(self, entry: dict[str, Any]) -> bool:
        """After round ``entry["round"]`` was recorded: whether the protocol is done (early stopping)."""
        ...

    def state(self) -> dict[str, Any]:
        """The label holder's state of the protocol after a round: plain data (tensors, arrays,
        numbers, strings, lists, dicts; Paillier keys, saved apart by the checkpoint)."""
        ...

    def load_state(self, state: dict[str, Any]) -> None:
        """Put :meth:`state`'s output back (a resumed run, after :meth:`begin`)."""
        ...


class _Fed(Protocol):
    @property
    def party_names(self) -> list[str]: ...

    @property
    def ledger(self) -> Ledger: ...

    def proxy(self, name: str) -> Any: ...


class RoundDriver:
    """Runs a :class:`RoundProtocol` round after round from the label holder (module docstring).

    Its callbacks see it as a :class:`~verticalfs.training.history.Run` of ``unit = "round"``.

    Parameters
    ----------
    fed : Federation
        The label holder's view (its ``ledger``; its parties checkpoint by ``Persist``).
    method : str
        The method's name (for errors).
    max_rounds : int
        The most rounds to run (fewer if the protocol stops early).
    phase : str
        The phase named in the history and the callbacks (default the protocol's).
    callbacks : sequence of Callback
    checkpoints : Checkpointer, optional
        Checkpoint after every round (the method's ``checkpoints``).
    entry_hook : callable, optional
        ``hook(entry)`` may add fields to each round's entry (the evaluator's ``spurious_removed``).
    parties : sequence of str, optional
        The parties that take part (and checkpoint); default every party of ``fed``.
    """

    #: what its callbacks' steps are
    unit = "round"

    def __init__(self, fed: _Fed, method: str, *, max_rounds: int, phase: str | None = None,
                 callbacks: Sequence[Callback] = (), checkpoints: Checkpointer | None = None,
                 entry_hook: Callable[[dict[str, Any]], None] | None = None,
                 parties: Sequence[str] | None = None) -> None:
        if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 0:
            raise ConfigError(f"{method}: the number of rounds must be a whole number >= 0, got {max_rounds!r}")
        self.fed = fed
        self.method = method
        self.max_rounds = max_rounds
        self.phase = phase
        self.callbacks = list(callbacks)
        self.checkpoints = checkpoints
        self.entry_hook = entry_hook
        self.parties = list(fed.party_names if parties is None else parties)
        self.history = History()
        self.round = 0  # rounds done
        self.stopped = False  # the protocol said it is done
        self.protocol: RoundProtocol | None = None

    @property
    def ledger(self) -> Ledger:
        return self.fed.ledger

    @property
    def position(self) -> int:
        """Where the run is, for a checkpoint's messages: the rounds done."""
        return self.round

    # ----------------------------------------------------------------------- the loop
    def run(self, protocol: RoundProtocol) -> History:
        """Run ``protocol``'s rounds (from the checkpoint's next one when resuming); the history."""
        self.protocol = protocol
        phase = self.phase or protocol.phase
        self.phase = phase
        for cb in self.callbacks:
            cb.on_train_begin(self, self.max_rounds, phase)
        try:
            protocol.begin(self)
            ck = self.checkpoints
            if ck is not None:
                ck.begin(self)  # a resumed run: history, rounds done and the protocol's state restored
            while self.round < self.max_rounds and not self.stopped:
                t0 = time.perf_counter()
                figures = protocol.run_round(self.round)
                seconds = time.perf_counter() - t0
                self.check_figures(figures)
                self.round += 1
                entry = self.record(figures, seconds)
                self.stopped = bool(protocol.stop(entry))
                if ck is not None:
                    ck.save(self, self.round)
        finally:
            for cb in self.callbacks:
                cb.on_train_end(self)
        return self.history

    def check_figures(self, figures: dict[str, Any]) -> None:
        """Raise :class:`~verticalfs.exceptions.ConfigError` if a figure of the round just run is
        NaN or infinite (a diverging protocol), naming the round and the figure."""
        for k, v in figures.items():
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(
                    f"{self.method}: {k} became {v} in round {self.round + 1}; lower the learning rate (lr) or scale "
                    "the features (--scaling standard or minmax)")

    def record(self, figures: dict[str, Any], seconds: float) -> dict[str, Any]:
        """Append the history entry of the round just run and tell the callbacks."""
        led = self.ledger
        entry: dict[str, Any] = {"round": self.round, "phase": self.phase, **figures, "seconds": float(seconds)}
        entry["bytes"] = led.total_bytes - led.bytes_where(phase="eval") - led.bytes_where(phase="checkpoint")
        entry["bytes_total"] = led.total_bytes
        if self.entry_hook is not None:
            self.entry_hook(entry)
        self.history.append(entry)
        for cb in self.callbacks:
            cb.on_epoch_end(self, entry)
        return entry

    # ----------------------------------------------------------------------- checkpoints
    def checkpoint_state(self) -> dict[str, Any]:
        """The label holder's state for a checkpoint: the rounds done, the history, the protocol's."""
        if self.protocol is None:
            raise ConfigError(f"{self.method}: no protocol is running")
        return {"round": self.round, "stopped": self.stopped, "history": list(self.history),
                "protocol": self.protocol.state()}

    def load_checkpoint_state(self, saved: dict[str, Any], keys: dict[str, PrivateKey]) -> None:
        """Put a checkpoint's state back (see :meth:`checkpoint_state`)."""
        from verticalfs.persist.state import restore_into

        if self.protocol is None:
            raise ConfigError(f"{self.method}: no protocol is running")
        self.round = int(saved["round"])
        self.stopped = bool(saved["stopped"])
        self.history = History(restore_into(None, saved["history"], keys, "the driver's history"))
        self.protocol.load_state(restore_into(None, saved["protocol"], keys, "the protocol's state"))
