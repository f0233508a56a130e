"""ICAFS's wall time against group lasso's on the same data, in one run (issue 42 item 1).

    python benchmarks/icafs/speed.py --data-dir ../shared/datasets              # ALLAML, K = 2, defaults
    python benchmarks/icafs/speed.py --dataset digits --parties 3 --noise 1.0   # digits, 50 % noise columns
    python benchmarks/icafs/speed.py --iteration-cost 3 --skip-fit              # one stage-1 iteration per arch

Runs, one after the other in this process (torch's default threads): the mode-specific
normalisation of party 1's columns alone (the batched fit and, with ``--sklearn-reference``, the
per-column scikit-learn fit it replaces, with the largest difference between their representations),
then ``icafs`` at its defaults (stage 1's seconds from its ``info``, the rest is stages 2-3 and the
refit), then ``group-lasso`` at its defaults, then ``icafs`` with no Algorithm 1 iteration (every
party's mixtures, stages 2-3 and the refit: the floor of the ratio; ``--no-floor`` skips it). Prints
the times, the ratio, the accuracies, the issue's goals (ICAFS <= 180 s and <= 10x group lasso on
ALLAML with K = 2), the cost of one iteration and how many iterations 10x group lasso leaves room for. ``--synth-steps``
shortens stage 1 (then the figures are not the defaults', and the output says so). The machine is
shared: compare figures within one run; the load average is printed with them.

``--threads`` sets torch's threads for the whole run (default: torch's own, 2 on this machine; on a
machine shared by more busy processes than cores, 1 thread was several times faster, see the
README). Torch's lazy imports (``torch.optim`` pulls in ``torch._dynamo``, ~15 s under load) are
done before any timing, so neither method pays them. ``--iteration-cost N`` times N Algorithm 1
iterations of party 1 (its critic step and generator step, with unit gradients in place of the
label holder's) for each synthesis network (``conv``, ``conv-full``, ``mlp``) in this process.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA"))
    ap.add_argument("--dataset", default="ALLAML")
    ap.add_argument("--parties", type=int, default=2)
    ap.add_argument("--noise", type=float, default=0.0, help="Gaussian noise columns per real column (1.0 = 50 %%)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--synth-steps", type=int, default=None, help="ICAFS's stage-1 iterations (default: 250)")
    ap.add_argument("--threads", type=int, default=None, help="torch's threads (default: torch's own)")
    ap.add_argument("--iteration-cost", type=int, default=0, metavar="N",
                    help="time N stage-1 iterations of party 1 for each synthesis network")
    ap.add_argument("--skip-fit", action="store_true", help="do not run icafs and group-lasso")
    ap.add_argument("--no-floor", dest="floor", action="store_false",
                    help="do not also run icafs with no Algorithm 1 iteration (the ratio's floor)")
    ap.add_argument("--sklearn-reference", action="store_true",
                    help="also fit party 1's mixtures column by column with scikit-learn (slow) and compare")
    args = ap.parse_args()

    import numpy as np
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # torch's lazy imports, outside every timing

    import verticalfs
    from verticalfs.federation import Federation
    from verticalfs.methods import create
    from verticalfs.methods.icafs.transform import ModeSpecificNormalizer

    data = verticalfs.build_data(args.dataset, parties=args.parties, seed=args.seed, data_dir=args.data_dir,
                                 noise=args.noise)
    X = data.parties[0].X["train"].astype(np.float64)
    n_cols = sum(p.n_features for p in data.parties)
    print(f"{args.dataset}: {len(X)} training rows, {n_cols} columns over {args.parties} parties, noise {args.noise}",
          flush=True)
    t = time.perf_counter()
    norm = ModeSpecificNormalizer(seed=args.seed).fit(X)
    Z = norm.transform(X)
    t_norm = time.perf_counter() - t
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    print(f"mode-specific normalisation of party 1 ({X.shape[1]} columns -> {norm.output_width}): "
          f"{t_norm:.1f} s batched (fit + transform; {norm.fallback_} columns by scikit-learn)", flush=True)
    if args.sklearn_reference:
        t = time.perf_counter()
        ref = ModeSpecificNormalizer(seed=args.seed, backend="sklearn").fit(X)
        Zr = ref.transform(X)
        t_ref = time.perf_counter() - t
        same = Zr.shape == Z.shape
        diff = float(np.abs(Zr - Z).max()) if same else float("nan")
        how = f"equal shape, largest difference {diff:.3g}" if same else "differ in shape"
        print(f"  scikit-learn per column: {t_ref:.1f} s ({t_ref / t_norm:.1f}x); representations {how}", flush=True)

    if args.iteration_cost:
        iteration_cost(X, norm, args.iteration_cost, args.seed)
    if args.skip_fit:
        return
    params = {} if args.synth_steps is None else {"synth_steps": args.synth_steps}
    t, c = time.perf_counter(), time.process_time()
    m = create("icafs", seed=args.seed, **params)
    m.fit(Federation.in_process(data))
    t_icafs, c_icafs = time.perf_counter() - t, time.process_time() - c
    s1 = float(m.info_.get("synthesis_seconds", 0.0))
    which = f" (synth_steps={args.synth_steps}, not the default)" if params else " (defaults)"
    print(f"icafs{which}: "
          f"{t_icafs:.1f} s (stage 1 {s1:.1f} s, stages 2-3 and refit {t_icafs - s1:.1f} s; CPU {c_icafs:.1f} s); "
          f"test accuracy {100 * m.metrics_['accuracy']:.2f} %", flush=True)
    t, c = time.perf_counter(), time.process_time()
    g = create("group-lasso", seed=args.seed)
    g.fit(Federation.in_process(data))
    t_gl, c_gl = time.perf_counter() - t, time.process_time() - c
    print(f"group-lasso (defaults): {t_gl:.1f} s (CPU {c_gl:.1f} s); "
          f"test accuracy {100 * g.metrics_['accuracy']:.2f} %", flush=True)
    ratio = t_icafs / t_gl
    print(f"ratio icafs / group-lasso: {ratio:.1f}x (CPU time {c_icafs / c_gl:.1f}x; "
          f"torch threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f})")
    if args.dataset == "ALLAML" and args.parties == 2 and not params and args.noise == 0:
        print(f"goal ICAFS <= 180 s: {'met' if t_icafs <= 180 else 'NOT met'} ({t_icafs:.0f} s); "
              f"goal ratio <= 10x: {'met' if ratio <= 10 else 'NOT met'} ({ratio:.1f}x)")
    if args.floor:
        # what ICAFS costs before any Algorithm 1 iteration (the mixtures of every party, stages 2-3
        # and the refit on zero synthetic iterations' networks): the ratio's floor, and how many
        # iterations a budget of 10x group lasso would leave
        t = time.perf_counter()
        z = create("icafs", seed=args.seed, synth_steps=0)
        z.fit(Federation.in_process(data))
        t_zero = time.perf_counter() - t
        steps = int(m.params.synth_steps)
        per_step = max(t_icafs - t_zero, 0.0) / steps
        room = (10 * t_gl - t_zero) / per_step if per_step > 0 else float("inf")
        print(f"icafs with no Algorithm 1 iteration (every party's mixtures, stages 2-3, refit): {t_zero:.1f} s = "
              f"{t_zero / t_gl:.1f}x group lasso; one iteration of all parties {per_step:.3f} s "
              f"(({t_icafs:.1f} - {t_zero:.1f}) / {steps}); 10x group lasso ({10 * t_gl:.1f} s) leaves room for "
              f"{max(room, 0):.0f} of the {steps} iterations")


def iteration_cost(X, norm, n: int, seed: int) -> None:
    """Seconds of one Algorithm 1 iteration of party 1 (critic step on 2 B rows, generator step on B)
    for each synthesis network, interleaved, the first iteration of each left out."""
    import numpy as np
    import torch

    from verticalfs.methods.icafs.networks import Critic, Generator
    from verticalfs.methods.icafs.synthesis import BETAS, PartySynthesis

    ps = PartySynthesis(X, name="party 1", code_dim=64, feature_dim=32, channels=8, arch="mlp", lr=1e-3,
                        max_modes=10, seed=seed)
    W, B, rng = norm.output_width, min(500, len(X)), np.random.default_rng(seed)
    nets = {}
    for arch in ("conv", "conv-full", "mlp"):
        G, D = Generator(64, 0, W, arch=arch, hidden=8), Critic(W, 0, arch=arch, hidden=8, out_dim=32, spectral=True)
        nets[arch] = (G, D, torch.optim.Adam(G.parameters(), 1e-3, betas=BETAS),
                      torch.optim.Adam(D.parameters(), 1e-3, betas=BETAS))
    times: dict = {a: [] for a in nets}
    for _ in range(n + 1):
        for arch, (G, D, og, od) in nets.items():
            ps.G, ps.D, ps.opt_g, ps.opt_d = G, D, og, od
            codes = rng.standard_normal((B, 64)).astype(np.float32)
            t = time.perf_counter()
            hr, hf = ps.critic_features(rng.integers(0, len(X), B), codes)
            ps.critic_step(np.ones_like(hr), -np.ones_like(hf))
            h = ps.generator_features(codes)
            ps.generator_step(np.ones_like(h))
            times[arch].append(time.perf_counter() - t)
    base = float(np.mean(times["conv"][1:]))
    for arch, ts in times.items():
        m = float(np.mean(ts[1:]))
        print(f"one stage-1 iteration of party 1 ({W} wide, {B} rows), arch={arch}: {m:.3f} s "
              f"({m / base:.1f}x conv; torch threads {torch.get_num_threads()}, load average "
              f"{os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
