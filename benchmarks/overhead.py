"""Overhead of federation: time of ``vfl`` per epoch over ``central`` per epoch.

``central`` trains the same split architecture with the same arithmetic (same initialisation,
optimizers and batch order) in one process without messages, so the ratio is the cost of the
protocol: serialising, metering and delivering every embedding and gradient. The aim is a ratio
under 1.3 on phishing with 4 parties at the default batch size and model sizes.

Both methods are timed the same way, in the same process, interleaved (alternating which runs
first): a callback takes the time from the start of training (after set-up) to the end of the last
epoch (training and per-epoch evaluation included) and divides by the number of epochs. The
medians over ``--repeats`` runs are reported, and the ratio of the best runs (robust to other
processes competing for the CPU).

Torch runs with one intra-op thread by default (``--threads 1``): the models hold a few thousand
weights, so extra threads only add synchronisation, and one thread makes the timing much less
sensitive to a busy machine. ``--threads 0`` keeps torch's own default.

Usage::

    .venv/bin/python benchmarks/overhead.py [--data-dir DIR] [--epochs 10] [--repeats 7] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

import verticalfs
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.training.history import Callback

REPO = Path(__file__).resolve().parents[1]


class EpochTimer(Callback):
    """Wall-clock and CPU seconds per epoch, from the start of training to the end of the last epoch."""

    def __init__(self) -> None:
        self.begin = self.end = (0.0, 0.0)
        self.epochs = 0

    @staticmethod
    def _now() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    def on_train_begin(self, trainer, epochs: int, phase: str) -> None:
        self.begin = self._now()
        self.epochs = 0

    def on_epoch_end(self, trainer, entry: dict) -> None:
        self.end = self._now()
        self.epochs += 1

    @property
    def per_epoch(self) -> tuple[float, float]:
        """(wall seconds, CPU seconds) per epoch."""
        n = max(1, self.epochs)
        return (self.end[0] - self.begin[0]) / n, (self.end[1] - self.begin[1]) / n


def time_method(name: str, data, epochs: int, seed: int, batch_size: int | None) -> tuple[float, float]:
    timer = EpochTimer()
    params = {"epochs": epochs}
    if batch_size is not None:
        params["batch_size"] = batch_size
    method = create(name, seed=seed, callbacks=[timer], **params)
    fed = Federation.in_process(data)
    method.fit(fed)
    return timer.per_epoch


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA") or str(REPO.parent / "shared" / "datasets"))
    ap.add_argument("--dataset", default="phishing")
    ap.add_argument("--parties", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batch-size", type=int, default=None, help="default: the methods' default (256)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1; 0 keeps torch's own default)")
    args = ap.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    data = verticalfs.build_data(args.dataset, parties=args.parties, seed=args.seed, data_dir=args.data_dir)
    print(f"{args.dataset}: {data.n_samples('train')} training rows, parties "
          f"{[p.n_features for p in data.parties]} features; {args.epochs} epochs x {args.repeats} repeats, "
          f"{torch.get_num_threads()} torch thread(s)")
    # warm-up (imports, allocator, lazy torch initialisation), not timed
    for name in ("vfl", "central"):
        time_method(name, data, 1, args.seed, args.batch_size)
    times: dict[str, list[tuple[float, float]]] = {"vfl": [], "central": []}
    for r in range(args.repeats):
        order = ("vfl", "central") if r % 2 == 0 else ("central", "vfl")
        for name in order:
            times[name].append(time_method(name, data, args.epochs, args.seed, args.batch_size))
    med = statistics.median
    for name in ("vfl", "central"):
        wall = [t[0] for t in times[name]]
        cpu = [t[1] for t in times[name]]
        print(f"{name:<8}per epoch: {med(wall) * 1e3:8.2f} ms wall, {med(cpu) * 1e3:8.2f} ms CPU  "
              f"(wall per run: {', '.join(f'{t * 1e3:.1f}' for t in wall)})")

    def ratio(stat, i):
        return stat([t[i] for t in times["vfl"]]) / stat([t[i] for t in times["central"]])

    print(f"ratio vfl/central per epoch: {ratio(med, 0):.3f} (median wall clock), {ratio(med, 1):.3f} "
          f"(median CPU time), {ratio(min, 0):.3f} (best wall clock)  [aim: < 1.3]")


if __name__ == "__main__":
    main()
