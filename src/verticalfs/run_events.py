"""A run's events as it goes: what the entry points and the loops tell (the schema is
:mod:`verticalfs.events`).

:class:`RunEvents` is one run's: its start (method, data, parties, policies), its phases (start
and end, with seconds and the bytes each party sent or received), its epochs and rounds (with
metrics and the bytes so far), the selection, a party's refusal, warnings and its end (``ok``,
``error`` or ``interrupted``). :class:`LoopEvents` is the callback that turns the loops' hooks
(:class:`~verticalfs.training.history.Callback`) into phase, epoch, round and stage events.

The events go to the *sinks* a run is given: ``callbacks=`` of :func:`verticalfs.run` (and of
``run_deployment``, ``predict``, ``compare``) takes :class:`~verticalfs.training.history.Callback`
objects, whose hooks the loops call and whose :meth:`~verticalfs.training.history.Callback.on_event`
gets every event (the progress lines and bars,
:class:`~verticalfs.training.history.ProgressCallback`), and plain callables taking an event
(:class:`~verticalfs.events.EventLog`: one JSON line each, ``--events FILE``).
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from verticalfs.events import Emitter
from verticalfs.names import LABEL_HOLDER
from verticalfs.training.history import Callback, Run
from verticalfs.version import __version__

if TYPE_CHECKING:
    from verticalfs.transport.ledger import Ledger

#: a sink: takes one event
Sink = Callable[[Any], None]

#: what a history entry holds besides metrics (left out of an epoch event's ``metrics``)
_BOOKKEEPING = frozenset({"epoch", "round", "phase", "bytes", "bytes_total", "train_loss", "seconds", "stage"})


def split_callbacks(callbacks: Sequence[Any]) -> tuple[list[Callback], list[Sink]]:
    """``callbacks=`` of an entry point as the loops' callbacks and the event sinks: a
    :class:`Callback` is both (its hooks, its ``on_event``), any other callable a sink."""
    hooks: list[Callback] = []
    sinks: list[Sink] = []
    for cb in callbacks:
        if isinstance(cb, Callback):
            hooks.append(cb)
            sinks.append(cb.on_event)
        elif callable(cb):
            sinks.append(cb)
        else:
            from verticalfs.exceptions import ConfigError

            raise ConfigError(f"callbacks: {cb!r} is neither a verticalfs Callback nor a callable taking an event")
    return hooks, sinks


def _plain(v: Any) -> Any:
    """``v`` as JSON data (tuples as lists, paths and other objects as text; a non-finite float
    becomes null when the event is built)."""
    return json.loads(json.dumps(v, default=str))


_REFUSAL = re.compile(r"party '([^']+)' refuses to .*?: its policy has (\w+) = ")
_PARTY = re.compile(r"party '([^']+)'")


class RunEvents:
    """The events of one run (see the module docstring); ``ledger`` (set once the run has one)
    gives the bytes.

    Parameters
    ----------
    sinks : list of callables
        Each gets every event.
    parent : str, optional
        The comparison this run belongs to.
    """

    def __init__(self, sinks: Sequence[Sink], *, parent: str | None = None) -> None:
        self.emitter = Emitter(list(sinks))
        self.parent = parent
        self.ledger: Ledger | None = None
        self.t0 = time.perf_counter()
        self.started = False
        self.ended = False

    @property
    def run(self) -> str:
        """The run's id (every event carries it)."""
        return self.emitter.run

    def emit(self, type: str, **fields: Any) -> Any:
        return self.emitter.emit(type, **fields)

    def bytes_total(self) -> int:
        return 0 if self.ledger is None else int(self.ledger.total_bytes)

    def training_bytes(self) -> int:
        led = self.ledger
        if led is None:
            return 0
        return int(led.total_bytes - led.bytes_where(phase="eval") - led.bytes_where(phase="checkpoint"))

    def seconds(self) -> float:
        return time.perf_counter() - self.t0

    # ------------------------------------------------------------------ events
    def start(self, *, kind: str = "run", method: str | None = None, dataset: str | None = None,
              parties: Sequence[str] = (), label_party: str | None = None, mode: str = "in-process",
              seed: int | None = None, params: dict[str, Any] | None = None,
              policies: dict[str, dict[str, Any]] | None = None, command: list[str] | None = None) -> None:
        """The run began (once)."""
        if self.started:
            return
        self.started = True
        self.t0 = time.perf_counter()
        self.emit("run_start", kind=kind, method=method, dataset=dataset, parties=list(parties),
                  label_party=label_party, mode=mode, seed=seed, params=_plain(params or {}),
                  policies=_plain(policies or {}), command=command, parent=self.parent, version=__version__)

    def phase_start(self, name: str, *, total: int | None = None, unit: str | None = None) -> tuple[str, float, int]:
        """A phase began; what :meth:`phase_end` needs."""
        self.emit("phase", name=name, state="start", total=total, unit=unit, bytes_total=self.bytes_total())
        return name, time.perf_counter(), 0 if self.ledger is None else len(self.ledger)

    def phase_end(self, opened: tuple[str, float, int]) -> None:
        """The phase ``opened`` (from :meth:`phase_start`) ended: its seconds and its bytes per party."""
        name, t0, first = opened
        by_party: dict[str, int] = {}
        led = self.ledger
        if led is not None:
            for r in itertools.islice(led.records(), min(first, len(led)), None):
                party = r.receiver if r.sender == LABEL_HOLDER else r.sender
                by_party[party] = by_party.get(party, 0) + r.payload + r.overhead
        self.emit("phase", name=name, state="end", seconds=time.perf_counter() - t0,
                  bytes_total=self.bytes_total(), bytes_by_party=by_party)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A phase of the run: its start, and its end when the block is left (also on an error)."""
        opened = self.phase_start(name)
        try:
            yield
        finally:
            self.phase_end(opened)

    def warning(self, message: str) -> None:
        self.emit("warning", message=str(message))

    def selection(self, selection: dict[str, Any], scores: dict[str, Any] | None = None) -> None:
        """What each party kept (a result's ``selection`` block, with the method's scores per feature)."""
        parties = {}
        for p, e in selection.get("parties", {}).items():
            sc = (scores or {}).get(p)
            parties[p] = {"kept": list(e["kept"]), "n_kept": int(e["n_kept"]), "n_features": int(e["n_features"]),
                          "scores": None if sc is None else [float(x) for x in sc]}
        self.emit("selection", parties=parties)

    def refusal(self, exc: BaseException) -> None:
        """A party refused a request (a :class:`~verticalfs.exceptions.PolicyError`): its name and rule."""
        text = " ".join(str(exc).split())
        m = _REFUSAL.search(text)
        named = m or _PARTY.search(text)
        party = named.group(1) if named else "unknown"
        self.emit("refusal", party=party, rule=m.group(2) if m else None, message=text)

    def end(self, status: str = "ok", *, metrics: dict[str, Any] | None = None, error: str | None = None,
            result: str | None = None) -> None:
        """The run ended (once)."""
        if self.ended:
            return
        self.ended = True
        self.emit("run_end", status=status, metrics=_plain(metrics or {}), bytes_total=self.bytes_total(),
                  seconds=self.seconds(), error=error, result=result)

    def fail(self, exc: BaseException) -> None:
        """The run stops on ``exc``: a party's refusal is told as one, then the end (``interrupted``
        for Ctrl-C, else ``error`` with the message)."""
        from verticalfs.exceptions import PolicyError

        if isinstance(exc, KeyboardInterrupt):
            self.end("interrupted")
            return
        if isinstance(exc, PolicyError):
            self.refusal(exc)
        self.end("error", error=" ".join(f"{type(exc).__name__}: {exc}".split()))


@contextmanager
def failing(events: RunEvents | None, **start: Any) -> Iterator[RunEvents | None]:
    """The block of a run: an error (or Ctrl-C) leaving it ends the run's events with it (after a
    ``run_start`` from ``start`` if none was sent yet), then goes on."""
    try:
        yield events
    except BaseException as exc:
        if events is not None and not events.ended:
            events.start(**start)
            events.fail(exc)
        raise


def events_of(callbacks: Sequence[Any], *, parent: str | None = None) -> tuple[list[Callback], RunEvents | None]:
    """The loops' callbacks and the run's events (``None`` without a sink) of ``callbacks=``."""
    hooks, sinks = split_callbacks(callbacks)
    return hooks, (RunEvents(sinks, parent=parent) if sinks else None)


class LoopEvents(Callback):
    """The callback that turns the loops' hooks into events: a phase start with the loop's size,
    an ``epoch`` or ``round`` event per step (its index in the loop, its metrics, the bytes so far),
    the phase's end; a ``stage`` event per step of a long stage. Loops may nest (a round-based
    selection inside a filter method's)."""

    def __init__(self, events: RunEvents) -> None:
        self.events = events
        self._open: list[tuple[tuple[str, float, int], int, int, int]] = []  # (phase, total, start, count)

    def on_train_begin(self, trainer: Run, epochs: int, phase: str) -> None:
        opened = self.events.phase_start(phase, total=int(epochs), unit=trainer.unit)
        self._open.append((opened, int(epochs), int(trainer.position), 0))

    def on_epoch_end(self, trainer: Run, entry: dict[str, Any]) -> None:
        if self._open:
            opened, total, start, count = self._open[-1]
            count += 1
            self._open[-1] = (opened, total, start, count)
        else:  # a loop that did not say it began
            opened, total, start, count = (str(entry.get("phase", "train")), 0.0, 0), None, 0, 1
        index = int(trainer.position) - start
        if index < 1:  # a loop whose position does not move (or was restored behind): its own count
            index = count
        ev = self.events
        metrics = {k: float(v) for k, v in entry.items()
                   if k not in _BOOKKEEPING and isinstance(v, (int, float)) and not isinstance(v, bool)}
        loss = entry.get("train_loss")
        ev.emit("round" if trainer.unit == "round" else "epoch", phase=str(entry.get("phase", opened[0])),
                index=index, total=total, metrics=metrics,
                train_loss=float(loss) if isinstance(loss, (int, float)) else None,
                bytes=int(entry.get("bytes", ev.training_bytes())),
                bytes_total=int(entry.get("bytes_total", ev.bytes_total())), seconds=ev.seconds())

    def on_train_end(self, trainer: Run) -> None:
        if self._open:
            opened, *_ = self._open.pop()
            self.events.phase_end(opened)

    def on_stage_step(self, trainer: object, stage: str, done: int, total: int) -> None:
        self.events.emit("stage", name=stage, done=int(done), total=int(total), bytes_total=self.events.bytes_total())
