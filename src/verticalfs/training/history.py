"""Per-epoch history (a list of dicts) and training callbacks."""

from __future__ import annotations

import sys
import time
import zlib
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def derive_seed(seed: int, *keys: Any) -> int:
    """A 31-bit seed derived from ``seed`` and any keys (party names, purposes)."""
    ent = [int(seed)] + [zlib.crc32(str(k).encode()) for k in keys]
    return int(np.random.SeedSequence(ent).generate_state(1)[0] & 0x7FFFFFFF)


class History(list[dict[str, Any]]):
    """One dict per communication epoch: ``epoch``, ``phase``, cumulative ``bytes`` (training
    traffic: every phase but ``eval``), ``bytes_total`` (all traffic), ``train_loss``, the test
    metrics by name, the validation metrics as ``val_<name>`` and ``spurious_removed`` where the
    ground truth is known."""

    def column(self, key: str) -> list[Any]:
        return [h.get(key) for h in self]

    def best(self, key: str, higher_is_better: bool = True) -> float | None:
        vals: list[float] = [v for v in self.column(key) if v is not None and v == v]
        if not vals:
            return None
        return max(vals) if higher_is_better else min(vals)


class Run(Protocol):
    """A loop of a run as its callbacks see it: a split-learning trainer
    (:class:`~verticalfs.training.split.SplitTrainer`), a round driver
    (:class:`~verticalfs.training.rounds.RoundDriver`), or a filter method's evaluation."""

    #: what its steps are: ``"epoch"`` (a split-learning loop, an evaluation) or ``"round"``
    unit: str

    @property
    def position(self) -> int:
        """Epochs (or rounds) done so far, over every loop of the method (a resumed loop jumps to
        its checkpoint's)."""
        ...


class Callback:
    """What a run tells as it goes; override the hooks you need (each is a no-op here).

    The loops (a :class:`Run`) call the hooks: ``on_train_begin(run, total, phase)`` when a loop of
    at most ``total`` epochs or rounds starts in ``phase``, ``on_epoch_end(run, entry)`` after each
    (``entry`` is its history entry: ``epoch`` or ``round``, metrics, bytes so far),
    ``on_train_end(run)``, and ``on_stage_step(obj, stage, done, total)`` for a long stage that is
    not an epoch (ICAFS's synthesis). The entry points (:func:`verticalfs.run`,
    :func:`~verticalfs.deploy.holder.run_deployment`, ``predict``) hand every event of the run
    (:mod:`verticalfs.events`: start, phases, epochs and rounds, selection, refusal, warnings, end)
    to :meth:`on_event`, which the progress lines and bars (:class:`ProgressCallback`) and an event
    file consume.
    """

    def on_train_begin(self, trainer: Run, epochs: int, phase: str) -> None: ...

    def on_epoch_end(self, trainer: Run, entry: dict[str, Any]) -> None: ...

    def on_train_end(self, trainer: Run) -> None: ...

    def on_stage_step(self, trainer: object, stage: str, done: int, total: int) -> None:
        """A step of a long stage that is not an epoch (ICAFS's synthesis): ``done`` of ``total``."""

    def on_event(self, event: Any) -> None:
        """An event of the run (a model of :mod:`verticalfs.events`)."""


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class _Open:
    """A loop the progress follows: its phase, size and unit, when it started, its bar's task."""

    __slots__ = ("phase", "total", "unit", "t0", "task")

    def __init__(self, phase: str, total: int, unit: str, t0: float) -> None:
        self.phase, self.total, self.unit, self.t0 = phase, total, unit, t0
        self.task: TaskID | None = None


class ProgressCallback(Callback):
    """Progress of a run on standard error, drawn from the run's events (:meth:`on_event`): a rich
    progress bar per running loop on a terminal; otherwise (output to a file or a pipe, where a bar
    draws nothing) one plain line per epoch, round or stage step with the time elapsed, an ETA, the
    latest test metric and the megabytes sent so far.

    Lines are printed at most every ``min_interval`` seconds (the first and the last step of a loop
    always), so a run of thousands of short epochs does not flood a log; ``lines=True`` forces them
    on a terminal too, ``lines=False`` forces the bar. ``description`` (the lines' prefix) defaults
    to each run's method, ``metric`` to its accuracy (R² for regression).
    """

    def __init__(self, description: str | None = None, metric: str | None = None, *, lines: bool | None = None,
                 min_interval: float = 1.0, stream: Any = None) -> None:
        self._fixed = description
        self.description = description or "training"
        self.metric = metric
        self.min_interval = float(min_interval)
        self._stream = stream
        self._lines = lines
        self._progress: Progress | None = None
        self._open: list[_Open] = []
        self._last = float("-inf")
        self._stage: tuple[str, float] | None = None

    def _use_lines(self) -> bool:
        if self._lines is not None:
            return self._lines
        stream = self._stream or sys.stderr
        try:
            return not stream.isatty()
        except (AttributeError, ValueError):  # a stream without a terminal (or closed)
            return True

    def _line(self, text: str) -> None:
        stream = self._stream or sys.stderr
        print(f"[{self.description}] {text}", file=stream, flush=True)

    def _due(self, done: int, last: bool) -> bool:
        now = time.monotonic()
        if last or done <= 1 or now - self._last >= self.min_interval:
            self._last = now
            return True
        return False

    @staticmethod
    def _timing(done: int, total: int, elapsed: float) -> str:
        eta = elapsed / done * (total - done) if done else float("nan")
        return f"{_clock(elapsed)} elapsed" + (f", ETA {_clock(eta)}" if done < total and eta == eta else "")

    # ------------------------------------------------------------------ events
    def on_event(self, event: Any) -> None:
        kind = event.type
        if kind == "run_start":
            if self._fixed is None:
                self.description = event.method or event.kind
        elif kind == "phase":
            if event.state == "start" and event.total is not None:
                self._begin(event)
            elif event.state == "end":
                self._end(event)
        elif kind in ("epoch", "round"):
            self._step(event)
        elif kind == "stage":
            self._stage_step(event)
        elif kind == "run_end":
            self._stop()

    def _begin(self, event: Any) -> None:
        unit = event.unit or "epoch"
        loop = _Open(event.name, int(event.total), unit, float(event.time))
        self._open.append(loop)
        self._last = float("-inf")
        if self._use_lines():
            self._line(f"{loop.phase}: {loop.total} {unit}(s)")
            return
        if self._progress is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(), transient=True,
                console=Console(stderr=True),
            )
            self._progress.start()
        loop.task = self._progress.add_task(f"{self.description} ({loop.phase})", total=loop.total, info="")

    def _info(self, event: Any) -> str:
        name = self.metric or next((k for k in ("accuracy", "r2") if k in event.metrics), "accuracy")
        m = event.metrics.get(name)
        info = f"{name}={m:.4f} " if isinstance(m, float) else ""
        return info + f"{event.bytes / 1e6:.2f} MB"

    def _step(self, event: Any) -> None:
        loop = self._open[-1] if self._open and self._open[-1].phase == event.phase else None
        if loop is None and event.total is None:
            # an entry of a phase without a loop of its own (LESS-VFL's selection after its
            # pre-training): not one more epoch of anything ("pretrain epoch 10/9", issue 53)
            if self._use_lines():
                self._line(f"{event.phase}: {self._info(event)} sent")
            return
        total = event.total if event.total is not None else (loop.total if loop is not None else event.index)
        if loop is not None and loop.task is not None and self._progress is not None:
            self._progress.update(loop.task, completed=event.index, info=self._info(event))
            return
        if self._use_lines() and self._due(event.index, event.index >= total):
            elapsed = float(event.time) - (loop.t0 if loop is not None else float(event.time))
            self._line(f"{event.phase} {event.type} {event.index}/{total}: "
                       f"{self._timing(event.index, total, elapsed)}; {self._info(event)} sent")

    def _end(self, event: Any) -> None:
        for i in range(len(self._open) - 1, -1, -1):  # the innermost open loop of that phase
            if self._open[i].phase == event.name:
                loop = self._open.pop(i)
                if loop.task is not None and self._progress is not None:
                    self._progress.remove_task(loop.task)
                break
        if not self._open:
            self._stop()

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _stage_step(self, event: Any) -> None:
        done, total = int(event.done), int(event.total)
        if self._stage is None or self._stage[0] != event.name or done <= 1:
            self._stage = (event.name, float(event.time))
            self._last = float("-inf")
        if self._use_lines() and self._due(done, done >= total):
            elapsed = float(event.time) - self._stage[1]
            self._line(f"{event.name} step {done}/{total}: {self._timing(done, total, elapsed)}; "
                       f"{event.bytes_total / 1e6:.2f} MB sent")


#: the command line refuses a training phase whose estimated time exceeds this (seconds: 7 days),
#: after its first epoch, unless --force (issue 53: --epochs 1e20 ran with an ETA of millions of years)
ETA_BOUND = 7 * 24 * 3600.0


class EtaGuard(Callback):
    """Refuses a training phase whose time, estimated after its first epoch (that epoch's time x
    the epochs asked for), exceeds ``bound`` seconds: a :class:`~verticalfs.exceptions.ConfigError`
    with the estimate, the epochs and the fix. Checked once per phase (a later slow epoch does not
    stop a run that was estimated within the bound)."""

    def __init__(self, bound: float = ETA_BOUND, option: str = "--epochs", force: str = "--force") -> None:
        self.bound, self.option, self.force = float(bound), option, force
        self._t0: float | None = None
        self._epochs = 0
        self._phase = ""

    def on_train_begin(self, trainer: Any, epochs: int, phase: str) -> None:
        self._t0, self._epochs, self._phase = time.monotonic(), int(epochs), phase

    def on_epoch_end(self, trainer: Any, entry: dict[str, Any]) -> None:
        if self._t0 is None:
            return
        first, self._t0 = time.monotonic() - self._t0, None
        eta = first * (self._epochs - 1)
        if eta > self.bound:
            from verticalfs.exceptions import ConfigError

            raise ConfigError(
                f"{self._phase}: {self._epochs:,} epochs would take about {_duration(eta)} (the first took "
                f"{first:.2f} s), more than the bound of {_duration(self.bound)}; give fewer epochs "
                f"({self.option}), or pass {self.force} to run anyway")


def _duration(seconds: float) -> str:
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            v = seconds / size
            return f"{v:.3g} {unit}" if v < 1e6 else f"{v:.2e} {unit}"
    return f"{seconds:.0f} s"


NON_METRIC_KEYS = frozenset({"epoch", "phase", "bytes", "bytes_total", "train_loss", "spurious_removed",
                             "stage", "components_open", "temperature"})


def final_metrics(history: list[dict[str, Any]]) -> dict[str, float]:
    """The test metrics of the last history entry (keys that are not bookkeeping or ``val_*``)."""
    if not history:
        return {}
    last = history[-1]
    return {k: v for k, v in last.items()
            if k not in NON_METRIC_KEYS and not k.startswith("val_") and isinstance(v, (int, float))}
