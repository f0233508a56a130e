"""Per-epoch history (a list of dicts) and training callbacks."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from verticalfs.training.split import SplitTrainer


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


class Callback:
    """No-op hooks; override the ones you need."""

    def on_train_begin(self, trainer: SplitTrainer, epochs: int, phase: str) -> None: ...

    def on_epoch_end(self, trainer: SplitTrainer, entry: dict[str, Any]) -> None: ...

    def on_train_end(self, trainer: SplitTrainer) -> None: ...


class ProgressCallback(Callback):
    """A rich progress bar over epochs showing the latest test metric and megabytes sent."""

    def __init__(self, description: str = "training", metric: str = "accuracy") -> None:
        self.description = description
        self.metric = metric
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def on_train_begin(self, trainer: SplitTrainer, epochs: int, phase: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task(f"{self.description} ({phase})", total=epochs, info="")

    def on_epoch_end(self, trainer: SplitTrainer, entry: dict[str, Any]) -> None:
        if self._progress is None or self._task is None:  # (both are set together)
            return
        m = entry.get(self.metric)
        info = f"{self.metric}={m:.4f} " if isinstance(m, float) else ""
        info += f"{entry.get('bytes', 0) / 1e6:.2f} MB"
        self._progress.update(self._task, advance=1, info=info)

    def on_train_end(self, trainer: SplitTrainer) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


NON_METRIC_KEYS = frozenset({"epoch", "phase", "bytes", "bytes_total", "train_loss", "spurious_removed",
                             "stage", "components_open", "temperature"})


def final_metrics(history: list[dict[str, Any]]) -> dict[str, float]:
    """The test metrics of the last history entry (keys that are not bookkeeping or ``val_*``)."""
    if not history:
        return {}
    last = history[-1]
    return {k: v for k, v in last.items()
            if k not in NON_METRIC_KEYS and not k.startswith("val_") and isinstance(v, (int, float))}
