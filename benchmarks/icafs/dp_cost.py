"""What ICAFS's DP-SGD costs, and what its ``secure_mode`` noise adds (issue 36 item 4).

    python benchmarks/icafs/dp_cost.py --data-dir ../shared/datasets

Per data set (K = 2, seed 0), the ``no-fs`` variant (the real-row steps alone, where DP-SGD acts:
no stage 1, no synthetic steps) trained ``--epochs`` epochs two ways, interleaved ``--repeats``
times and the fastest of each kept: without DP, and with DP-SGD as the library runs it (Opacus's
``secure_mode`` noise, a fresh OS-entropy key every step). Then the noise alone, through Opacus
directly: one step's noise for a party's encoder, plain and secure, with the reseeding from
``secrets``, and what the secure noise adds to the DP run by that count (both parties, every
real-row step). Prints a Markdown table of seconds and ratios measured in this one run. (The
library has no switch to turn secure noise off; an earlier version of this script toggled one.)
"""

from __future__ import annotations

import argparse
import time


def fit_seconds(data, dp_epsilon: float, epochs: int) -> float:
    from verticalfs.federation import Federation
    from verticalfs.methods import create

    m = create("icafs", seed=0, variant="no-fs", epochs=epochs, refit_epochs=0, dp_epsilon=dp_epsilon)
    t0 = time.perf_counter()
    m.fit(Federation.in_process(data))
    return time.perf_counter() - t0


def noise_seconds(n_params: int, secure: bool, reps: int = 200) -> float:
    """One step's noise for ``n_params`` weights (Opacus's generator), keyed afresh as the party does."""
    import torch
    from opacus.optimizers.optimizer import _generate_noise

    from verticalfs.methods.icafs import dp

    ref = torch.zeros(n_params)
    gen = dp.noise_generator()
    t0 = time.perf_counter()
    for _ in range(reps):
        gen.manual_seed(dp.noise_seed())
        _generate_noise(1.0, ref, generator=gen, secure_mode=secure)
    return (time.perf_counter() - t0) / reps


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--datasets", default="USPS,TOX_171")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)

    import torch

    import verticalfs
    from verticalfs.methods.icafs.method import ICAFSParams

    torch.set_num_threads(1)
    print("| data set | encoder weights (party 1) | no DP s | DP s | DP / no DP | "
          "noise a step, plain / secure ms | secure noise's extra, share of the DP run |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.datasets.split(","):
        data = verticalfs.build_data(name, parties=2, seed=0, data_dir=args.data_dir)
        best = {"off": float("inf"), "secure": float("inf")}
        for _ in range(args.repeats):  # interleaved: a shared machine's load hits both alike
            best["off"] = min(best["off"], fit_seconds(data, 0.0, args.epochs))
            best["secure"] = min(best["secure"], fit_seconds(data, 10.0, args.epochs))
        p = ICAFSParams()
        d = data.parties[0].X["train"].shape[1]
        h1, h2 = p.hidden
        n_params = d * h1 + h1 + h1 * h2 + h2 + h2 * p.embedding_dim + p.embedding_dim
        plain_ms, secure_ms = noise_seconds(n_params, False) * 1e3, noise_seconds(n_params, True) * 1e3
        steps = args.epochs * -(-data.labels.y["train"].shape[0] // p.batch_size)
        extra = 2 * steps * (secure_ms - plain_ms) / 1e3  # both parties (party 2's encoder about as large)
        print(f"| {name} | {n_params:,} | {best['off']:.1f} | {best['secure']:.1f} | "
              f"{best['secure'] / best['off']:.2f} | "
              f"{plain_ms:.3f} / {secure_ms:.3f} | {100 * extra / best['secure']:.1f} % |", flush=True)


if __name__ == "__main__":
    main()
