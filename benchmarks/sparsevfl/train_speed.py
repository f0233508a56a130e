"""Seconds per epoch of ``original`` and ``sparsevfl-16`` on Adult (3 parties, Table A1, batch 1024).

    python benchmarks/sparsevfl/train_speed.py [--epochs 10] [--repeats 5]

One torch thread. Every message is serialised, metered and decoded as in a normal run. Two figures
per method, each the median over ``--repeats`` of the mean over ``--epochs`` epochs (after one
warm-up epoch):

- ``train``: one training epoch (29 batches x 3 parties: request, coded embeddings, coded gradients);
- ``epoch``: a training epoch plus what the method does after it: the evaluation on the
  validation and test splits (whole-split embedding uploads in phase ``eval``) and the
  best-validation checkpoint.

The public implementation takes about 0.30 s (ORIGINAL) and 0.46 s (SPARSEVFL-16) per epoch of
training and validation on this machine; the aim is half of that.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import datasets as D  # noqa: E402

from verticalfs.federation import Federation  # noqa: E402
from verticalfs.methods import create  # noqa: E402
from verticalfs.methods.sparsevfl import CodedVFLTrainer  # noqa: E402

PUBLIC = {"original": 0.30, "sparsevfl-16": 0.46}


def measure(data, name: str, epochs: int, repeats: int) -> tuple[float, float]:
    method = create(name, seed=0, epochs=epochs)
    p = method.params
    fed = Federation.in_process(data)
    tr = CodedVFLTrainer(fed, name, p, **method.coding(), lam=getattr(p, "lam", 0.0),
                         norm=getattr(p, "norm", "none"), seed=0)
    tr.setup()
    tr.fit(1)  # warm-up
    train, full = [], []
    perf = time.perf_counter
    for _ in range(repeats):
        t_train = 0.0
        t0 = perf()
        for _ in range(epochs):
            t1 = perf()
            loss = tr.train_epoch()
            t_train += perf() - t1
            tr.epoch += 1
            tr.record("train", loss)
        full.append((perf() - t0) / epochs)
        train.append(t_train / epochs)
    return float(np.median(train)), float(np.median(full))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA"))
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    data = D.build("adult", 0, args.data_dir)
    print(f"adult: {data.n_samples('train')} training rows, parties {[p.n_features for p in data.parties]} features, "
          f"batch 1024, torch threads {torch.get_num_threads()}")
    for name in ("original", "sparsevfl-16"):
        tr, full = measure(data, name, args.epochs, args.repeats)
        print(f"{name:>13}: {tr:.3f} s/epoch training, {full:.3f} s/epoch with evaluation "
              f"(public implementation ~{PUBLIC[name]:.2f} s, aim {PUBLIC[name] / 2:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
