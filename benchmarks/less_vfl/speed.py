"""LESS-VFL's compute against plain VFL (the like-for-like issue, item 8).

    python benchmarks/less_vfl/speed.py --data-dir ../shared/datasets

Phishing with 3 parties and 50 % injected noise, 10 communication epochs, one torch thread, the
same seed for every run. Runs ``vfl``, ``less-vfl`` with its defaults (``solver="pgd"``: stages 2
and 3 solved to a plateau, lambda_m chosen on validation accuracy, relaxed refit) and ``less-vfl``
with Algorithm 1's mini-batch P-SGD (``solver="psgd"``, ``refit="lasso"``: the defaults before that
issue) interleaved, ``--repeats`` times after one warm-up round that is not counted (the first run
of a process pays one-off imports). Prints the median wall time of each, its ratio to ``vfl``'s
median in the same run, the seconds per LESS-VFL stage and the selection quality (spurious features
removed, real features kept, test accuracy), so "how much faster" and "is it the same selection"
come from the same run. These machines are shared: only ratios within one run are claimed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

CONFIGS = {
    "vfl": ("vfl", {}),
    "less-vfl (default: pgd, validation choice)": ("less-vfl", {}),
    "less-vfl (before: psgd, lambda_m 0.2)": ("less-vfl", {"solver": "psgd", "refit": "lasso",
                                                          "pretrain_min_steps": 0}),
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA"))
    ap.add_argument("--dataset", default="phishing")
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from verticalfs import build_data, run

    data = build_data(args.dataset, parties=args.parties, noise=0.5, seed=args.seed, data_dir=args.data_dir)
    times: dict[str, list[float]] = {k: [] for k in CONFIGS}
    last: dict = {}
    for rep in range(args.repeats + 1):
        for label, (method, extra) in CONFIGS.items():
            t0 = time.perf_counter()
            res = run(method, data, seed=args.seed, params={"epochs": args.epochs, **extra})
            dt = time.perf_counter() - t0
            if rep > 0:  # round 0 is the warm-up
                times[label].append(dt)
            last[label] = res
    base = statistics.median(times["vfl"])
    print(f"{args.dataset}, {args.parties} parties, 50 % noise, {args.epochs} epochs, seed {args.seed}, one thread; "
          f"median of {args.repeats} interleaved runs after one warm-up round")
    print("| run | median s | x vfl | spurious removed % | real kept % | test accuracy % | stage seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, ts in times.items():
        res = last[label]
        sel = res.selection
        med = statistics.median(ts)
        sec = (res.info or {}).get("seconds")
        stages = "-"
        if sec:
            st3 = sum(v for v in sec["stage3"].values() if v)
            stages = (f"pre-train {sec['pretrain']:.2f}, stage 2 {sec['stage2']:.2f}, stage 3 {st3:.2f} "
                      f"(sum over parties), post {sec['post_selection']:.2f}")
        removed = sel.get("spurious_removed")
        tpr = sel.get("tpr")
        print(f"| {label} | {med:.2f} | {med / base:.2f} | "
              f"{'-' if removed is None else f'{100 * removed:.1f}'} | {'-' if tpr is None else f'{100 * tpr:.1f}'} | "
              f"{100 * res.metrics['accuracy']:.2f} | {stages} |")
    print("all runs (s): " + "; ".join(f"{k}: " + ", ".join(f"{t:.2f}" for t in v) for k, v in times.items()))


if __name__ == "__main__":
    main()
