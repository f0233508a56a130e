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
    """The loop a callback hears from: a split-learning trainer
    (:class:`~verticalfs.training.split.SplitTrainer`), a round driver
    (:class:`~verticalfs.training.rounds.RoundDriver`), or a method whose one step is its evaluation
    (a filter method)."""


class Callback:
    """No-op hooks; override the ones you need."""

    def on_train_begin(self, trainer: Run, epochs: int, phase: str) -> None: ...

    def on_epoch_end(self, trainer: Run, entry: dict[str, Any]) -> None: ...

    def on_train_end(self, trainer: Run) -> None: ...

    def on_stage_step(self, trainer: Any, stage: str, done: int, total: int) -> None:
        """A step of a long stage that is not an epoch (ICAFS's synthesis): ``done`` of ``total``."""


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class ProgressCallback(Callback):
    """Progress of a run on standard error: a rich progress bar on a terminal; otherwise (output to a
    file or a pipe, where a bar draws nothing) one plain line per epoch or stage step with the time
    elapsed, an ETA, the latest test metric and the megabytes sent so far.

    Lines are printed at most every ``min_interval`` seconds (the first and the last step of a phase
    always), so a run of thousands of short epochs does not flood a log; ``lines=True`` forces them
    on a terminal too, ``lines=False`` forces the bar.
    """

    def __init__(self, description: str = "training", metric: str = "accuracy", *, lines: bool | None = None,
                 min_interval: float = 1.0, stream: Any = None) -> None:
        self.description = description
        self.metric = metric
        self.min_interval = float(min_interval)
        self._stream = stream
        self._lines = lines
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._phase = ""
        self._epochs = 0
        self._done = 0
        self._t0 = 0.0
        self._last = float("-inf")
        self._stage: tuple[str, float] | None = None

    def _use_lines(self) -> bool:
        if self._lines is not None:
            return self._lines
        stream = self._stream or sys.stderr
        return not (hasattr(stream, "isatty") and stream.isatty())

    def _line(self, text: str) -> None:
        stream = self._stream or sys.stderr
        print(f"[{self.description}] {text}", file=stream, flush=True)

    def _due(self, last: bool) -> bool:
        now = time.monotonic()
        if last or self._done <= 1 or now - self._last >= self.min_interval:
            self._last = now
            return True
        return False

    def _timing(self, done: int, total: int, t0: float) -> str:
        elapsed = time.monotonic() - t0
        eta = elapsed / done * (total - done) if done else float("nan")
        return f"{_clock(elapsed)} elapsed" + (f", ETA {_clock(eta)}" if done < total and eta == eta else "")

    def on_train_begin(self, trainer: Run, epochs: int, phase: str) -> None:
        self._phase, self._epochs, self._done = phase, int(epochs), 0
        self._t0, self._last = time.monotonic(), float("-inf")
        if self._use_lines():
            self._line(f"{phase}: {epochs} epoch(s)")
            return
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
        self._task = self._progress.add_task(f"{self.description} ({phase})", total=epochs, info="")

    def _info(self, entry: dict[str, Any]) -> str:
        m = entry.get(self.metric)
        info = f"{self.metric}={m:.4f} " if isinstance(m, float) else ""
        return info + f"{entry.get('bytes', 0) / 1e6:.2f} MB"

    def on_epoch_end(self, trainer: Run, entry: dict[str, Any]) -> None:
        self._done += 1
        if self._progress is None or self._task is None:  # (both are set together)
            if self._use_lines() and self._due(self._done >= self._epochs):
                self._line(f"{self._phase} epoch {self._done}/{self._epochs}: "
                           f"{self._timing(self._done, self._epochs, self._t0)}; {self._info(entry)} sent")
            return
        self._progress.update(self._task, advance=1, info=self._info(entry))

    def on_train_end(self, trainer: Run) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def on_stage_step(self, trainer: Any, stage: str, done: int, total: int) -> None:
        if self._stage is None or self._stage[0] != stage or done <= 1:
            self._stage = (stage, time.monotonic())
            self._last = float("-inf")
        self._done = done
        if self._use_lines() and self._due(done >= total):
            ledger = getattr(trainer, "ledger", None)
            sent = f"; {ledger.total_bytes / 1e6:.2f} MB sent" if ledger is not None else ""
            self._line(f"{stage} step {done}/{total}: {self._timing(done, total, self._stage[1])}{sent}")


NON_METRIC_KEYS = frozenset({"epoch", "phase", "bytes", "bytes_total", "train_loss", "spurious_removed",
                             "stage", "components_open", "temperature"})


def final_metrics(history: list[dict[str, Any]]) -> dict[str, float]:
    """The test metrics of the last history entry (keys that are not bookkeeping or ``val_*``)."""
    if not history:
        return {}
    last = history[-1]
    return {k: v for k, v in last.items()
            if k not in NON_METRIC_KEYS and not k.startswith("val_") and isinstance(v, (int, float))}
