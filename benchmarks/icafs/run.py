"""Rerun the comparison of icafs.md section V: Tables IV-VIII and the synthetic data's quality.

    python benchmarks/icafs/run.py --data-dir ../shared/datasets --out results/icafs

- Table IV: test accuracy of VFLFS, group lasso, CompFS, SEFS and ICAFS on ALLAML, USPS and TOX_171
  with K = 2, 5 and 10 clients over 5 seeds (held-out splits), beside the reference network on all
  features (``vfl``, the "MLP on all features" the issue asks for). ADNI is not available: its
  column stays empty.
- Table V: ICAFS with DP-SGD on the encoders at epsilon 20, 10 and 5 (delta 1e-5), K = 2.
- Table VI: the ablations (fixed temperature, an MLP instead of the gates, no selection), K = 2.
  Tables V and VI's runs (but ``no-fs``, which has no stage 1) take the stage 1 of Table IV's K = 2
  run of their seed instead of computing it again (:func:`stage1_key`, :func:`run_group`, the
  library's ``stage1_cache``): it is the same computation, and a restored run is the run that
  recomputes it (tested).
- Table VII: seconds and megabytes of ICAFS's synthesis, training and inference (the test split),
  from the ledger and the clock, beside SEFS's, K = 2.
- Table VIII: ICAFS with Gaussian noise columns making 50 %, 33 % and 20 % of each party's columns
  (``noise`` 1.0, 0.5 and 0.25: our reading of "50 %" as the share of the columns), K = 2.
- Synthetic quality: per data set, a logistic regression trained on ICAFS's synthetic rows (all
  parties' blocks and the synthetic labels, pooled by the benchmark only) and tested on the real
  test rows, against one trained on the real training rows; and stage 1's seconds on USPS.

Table IV is given twice. First as section V-B evaluates every method: "train a multi-layer
perceptron (MLP) using only these selected features" -- the reference network (``vfl``, same
seed) trained on each method's selection (``PreparedData.restrict``). Then each method's own model
on the features it selected (ICAFS: after its refit on them; VFLFS: after its selection epoch;
group lasso: pruned; CompFS and SEFS: their test-time gates). ``random-half`` (ours) is the
reference network on half of each party's columns drawn at random: what a selection of half has
to beat. ``--seeds``, ``--clients``, ``--datasets``, ``--methods`` and ``--only`` (table4,
table5, table6, table7, table8, quality) shorten a run; results go to ``--out`` (atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

DATASETS = ("ALLAML", "USPS", "TOX_171")
METHODS = ("vflfs", "group-lasso", "compfs", "sefs", "icafs")
#: Table IV's references: the network on all features, and on half of each party's columns drawn at
#: random (ours: what a selection of half of the columns has to beat under section V-B's evaluation)
REFERENCES = ("vfl", "random-half")
PAPER4 = {  # icafs.md Table IV, K = 2 / 5 / 10 (accuracy %), for the side-by-side only
    "vflfs": {"ALLAML": (98.85, 98.04, 91.44), "USPS": (68.77, 58.97, 46.24), "TOX_171": (74.65, 62.76, 55.35)},
    "group-lasso": {"ALLAML": (98.76, 98.21, 92.67), "USPS": (70.45, 59.97, 45.44), "TOX_171": (75.46, 60.21, 55.46)},
    "compfs": {"ALLAML": (100.0, 99.32, 91.57), "USPS": (70.51, 55.15, 44.32), "TOX_171": (73.01, 57.98, 51.66)},
    "sefs": {"ALLAML": (97.56, 96.01, 90.21), "USPS": (68.96, 56.23, 42.14), "TOX_171": (73.68, 59.87, 53.44)},
    "icafs": {"ALLAML": (100.0, 100.0, 93.33), "USPS": (72.03, 60.23, 50.11), "TOX_171": (76.28, 63.84, 57.12)},
}
PAPER5 = {0: (100.0, 72.03, 76.28), 10: (93.33, 71.20, 57.14), 5: (93.33, 63.87, 54.29)}  # ALLAML, USPS, TOX_171
PAPER6 = {"icafs": (100.0, 72.03, 76.28), "fixed-temp": (100.0, 71.25, 73.13), "embedding": (100.0, 69.25, 72.31),
          "no-fs": (98.76, 65.16, 65.44)}
PAPER8 = {0.0: (100.0, 72.03, 76.28), 1.0: (100.0, 50.70, 57.14), 0.5: (93.33, 57.25, 62.57), 0.25: (100.0, 65.77, 65.24)}
VARIANTS = ("icafs", "fixed-temp", "embedding", "no-fs")
NOISE = (1.0, 0.5, 0.25)
EPSILONS = (20.0, 10.0, 5.0)


#: Stage 1 of one worker's last run (the library's in-process reuse; see :func:`run_group`), made on first use
_CACHE = None


def stage1_cache():
    """This worker's :class:`~verticalfs.methods.icafs.Stage1Cache` (one stage 1 at a time)."""
    global _CACHE
    if _CACHE is None:
        from verticalfs.methods.icafs import Stage1Cache

        _CACHE = Stage1Cache()
    return _CACHE


def stage1_key(job: dict) -> str | None:
    """What ICAFS's stage 1 of ``job`` depends on, when other runs can share it; else None.

    Algorithm 1 reads only the data, the seed (every random stream of it is derived from the run's
    seed), K and the synthesis settings. Table V's DP-SGD acts on the encoders' steps on real rows
    and Table VI's ``fixed-temp`` and ``embedding`` on the top model, both in stages 2-3, so those
    runs and Table IV's K = 2 run of the same seed make the same synthetic rows. ``no-fs`` makes
    none, and Table VIII's noise columns change the data. A job that sets a synthesis setting of its
    own runs alone; the library restores a kept stage 1 only for a run whose stage 1 is the same.
    """
    from verticalfs.methods.icafs.stage1 import SYNTHESIS_PARAMS

    params = job.get("params") or {}
    if (job["method"] != "icafs" or job.get("noise") or job["kind"] not in ("table4", "table5", "table6")
            or params.get("variant") == "no-fs" or set(params) & set(SYNTHESIS_PARAMS)):
        return None
    return json.dumps({k: job.get(k) for k in ("dataset", "parties", "seed", "synth_steps")}, sort_keys=True)


def run_group(jobs: list[dict]) -> list[dict]:
    """Runs one after the other in one worker, sharing stage 1 among those of one :func:`stage1_key`
    through the library's ``stage1_cache`` (which restores it only for a run that would compute the
    same one; a Table IV run, first in its group, computes its own, for its cost and quality
    figures, and leaves it to the rest). A restored run's ledger has no stage-1 bytes and its
    ``info`` says ``synthesis_reused`` (Tables V and VI report accuracy only)."""
    try:
        return [run_one(j, reuse=True) for j in jobs]
    finally:
        stage1_cache().clear()  # a worker keeps nothing between groups


def run_one(job: dict, reuse: bool = False) -> dict:
    import torch

    import verticalfs
    from verticalfs.federation import Federation
    from verticalfs.methods import create

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    data = verticalfs.build_data(job["dataset"], parties=job["parties"], seed=job["seed"], data_dir=job["data_dir"],
                                 noise=job.get("noise", 0.0))
    if job["method"] == "random-half":
        return _random_half(job, data)
    params = dict(job.get("params", {}))
    if job["method"] == "group-lasso":  # the papers' group lasso: one lambda_m, no penalty path on
        params.setdefault("lam_path", ())  # USPS's 10 and TOX_171's 4 classes (the default since issue 53)
    if job["method"] == "icafs" and job.get("synth_steps") is not None:
        params["synth_steps"] = job["synth_steps"]
    cache = None
    if job["method"] == "icafs":  # a run alone keeps its stage 1 for the quality figures only
        from verticalfs.methods.icafs import Stage1Cache

        cache = stage1_cache() if reuse and stage1_key(job) is not None else Stage1Cache()
        params["stage1_cache"] = cache
    m = create(job["method"], seed=job["seed"], **params)
    fed = Federation.in_process(data)
    m.fit(fed)
    fit_seconds = time.perf_counter() - t0
    sup = m.get_support()
    led = fed.ledger
    out = {**{k: v for k, v in job.items() if k != "data_dir"}, "metrics": m.metrics_,
           "ratio": sum(int(v.sum()) for v in sup.values()) / sum(len(v) for v in sup.values()),
           "mbytes": led.total_bytes / 1e6, "seconds": fit_seconds,
           "info": {k: v for k, v in m.info_.items() if isinstance(v, (int, float, str, dict))}}
    if job.get("cost"):
        pre = led.bytes_where(phase="pretrain")
        out["pretrain_mbytes"] = pre / 1e6
        out["train_mbytes"] = (led.total_bytes - pre - led.bytes_where(phase="eval")) / 1e6
        b0, t1 = led.total_bytes, time.perf_counter()
        m.trainer_.predict("test")
        out["inference_mbytes"] = (led.total_bytes - b0) / 1e6
        out["inference_seconds"] = time.perf_counter() - t1
    # section V-B: "train a multi-layer perceptron (MLP) using only these selected features"; the
    # reference network (``vfl``, the same seed) on each method's selection, for every method alike
    out["support"] = _indices(sup)
    if job["kind"] == "table4":
        out["mlp_metrics"] = m.metrics_ if job["method"] == "vfl" else _retrained(data, sup, job["seed"])
    if job.get("quality"):
        from sklearn.linear_model import LogisticRegression

        kept = cache.last  # all parties' blocks and the synthetic labels, pooled by the benchmark only
        S = np.concatenate([kept.blocks[q].numpy() for q in data.party_names], 1)
        ys = kept.labels
        Xtr = np.concatenate([p.X["train"] for p in data.parties], 1)
        Xte = np.concatenate([p.X["test"] for p in data.parties], 1)
        yte = data.labels.y["test"]
        out["quality"] = {
            "synthetic_to_real": float(LogisticRegression(max_iter=2000).fit(S, ys).score(Xte, yte))
            if len(np.unique(ys)) > 1 else float("nan"),
            "real_to_real": float(LogisticRegression(max_iter=2000).fit(Xtr, data.labels.y["train"]).score(Xte, yte)),
        }
    return out


def _indices(sup: dict) -> dict:
    """A support (bool mask per party) as the kept indices, for ``results.json``."""
    return {p: np.flatnonzero(v).tolist() for p, v in sup.items()}


def _retrained(data, sup: dict, seed: int) -> dict:
    """Section V-B: the test metrics of the reference network (``vfl``) trained on ``sup`` alone."""
    from verticalfs.federation import Federation
    from verticalfs.methods import create

    ev = create("vfl", seed=seed)
    ev.fit(Federation.in_process(data.restrict({p: np.asarray(v, dtype=bool) for p, v in sup.items()})))
    return ev.metrics_


def _random_half(job: dict, data) -> dict:
    """The reference network on half of each party's columns drawn at random (seeded by the run's seed)."""
    t0 = time.perf_counter()
    rng = np.random.default_rng([job["seed"], 2024])  # a stream of its own, apart from the methods' seeds
    sup = {}
    for p in data.parties:
        m = np.zeros(p.n_features, dtype=bool)
        m[rng.choice(p.n_features, max(1, p.n_features // 2), replace=False)] = True
        sup[p.name] = m
    metrics = _retrained(data, sup, job["seed"])
    return {**{k: v for k, v in job.items() if k != "data_dir"}, "metrics": metrics, "mlp_metrics": metrics,
            "ratio": sum(int(v.sum()) for v in sup.values()) / sum(len(v) for v in sup.values()),
            "support": _indices(sup), "mbytes": 0.0, "seconds": time.perf_counter() - t0, "info": {}}


def jobs_for(args) -> list[dict]:
    base = {"data_dir": args.data_dir, "synth_steps": args.synth_steps}
    seeds = range(args.seeds)
    datasets = [d for d in args.datasets.split(",") if d]
    clients = [int(k) for k in args.clients.split(",") if k]
    want = set(args.only.split(",")) if args.only else {"table4", "table5", "table6", "table7", "table8", "quality"}
    jobs = []
    if "table4" in want:
        methods = REFERENCES + METHODS
        if args.methods:
            chosen = [m for m in args.methods.split(",") if m]
            bad = sorted(set(chosen) - set(methods))
            if bad:
                raise SystemExit(f"--methods: unknown {bad}; choose from {', '.join(methods)}")
            methods = tuple(m for m in methods if m in chosen)
    else:  # ICAFS's own runs carry the quality figures; Table VII compares it with SEFS
        if args.methods:
            raise SystemExit(f"--methods chooses among Table IV's methods, but --only {args.only!r} leaves out table4 "
                             "(the other tables run ICAFS, and Table VII SEFS); add table4 to --only or drop --methods")
        methods = ("icafs",) * bool(want & {"quality", "table7", "table5", "table6", "table8"}) + ("sefs",) * ("table7" in want)
    for d in datasets:
        for k in clients:
            for sd in seeds:
                jobs += [{**base, "kind": "table4", "dataset": d, "parties": k, "seed": sd, "method": meth,
                          "quality": meth == "icafs", "cost": meth in ("icafs", "sefs") and k == 2}
                         for meth in methods if meth != "sefs" or "table4" in want or k == 2]
    if "table5" in want:
        jobs += [{**base, "kind": "table5", "dataset": d, "parties": 2, "seed": sd, "method": "icafs",
                  "eps": e, "params": {"dp_epsilon": e}} for d in datasets for e in EPSILONS for sd in seeds]
    if "table6" in want:
        jobs += [{**base, "kind": "table6", "dataset": d, "parties": 2, "seed": sd, "method": "icafs", "variant": v,
                  "params": {"variant": v}} for d in datasets for v in VARIANTS[1:] for sd in seeds]
    if "table8" in want:
        jobs += [{**base, "kind": "table8", "dataset": d, "parties": 2, "seed": sd, "method": "icafs", "noise": z}
                 for d in datasets for z in NOISE for sd in seeds]
    # the long runs first, so that the pool's workers finish together
    return sorted(jobs, key=lambda j: j["method"] not in ("icafs", "sefs"))


def groups(jobs: list[dict]) -> list[list[dict]]:
    """The jobs as :func:`run_group`'s groups: those sharing a :func:`stage1_key` together (Table IV's
    run first), every other job alone; the long groups first, so that the workers finish together."""
    shared: dict[str, list[dict]] = {}
    out: list[list[dict]] = []
    for j in jobs:
        k = stage1_key(j)
        if k is None:
            out.append([j])
        else:
            if k not in shared:
                shared[k] = []
                out.append(shared[k])
            shared[k].append(j)
    for g in out:
        g.sort(key=lambda j: j["kind"] != "table4")
    return sorted(out, key=lambda g: (not any(j["method"] in ("icafs", "sefs") for j in g), -len(g)))


def _key(job: dict) -> str:
    """What identifies a run: its job without the data folder (a result carries its job's fields)."""
    fields = ("kind", "dataset", "parties", "seed", "method", "params", "noise", "eps", "variant", "synth_steps")
    return json.dumps({k: job.get(k) for k in fields}, sort_keys=True)


def _steps(r: dict) -> int:
    return -1 if r.get("synth_steps") is None else int(r["synth_steps"])


def _acc(rows: list[dict], key: str = "metrics") -> str:
    v = [100 * r[key]["accuracy"] for r in rows if key in r]
    if not v:
        return ""
    return f"{np.mean(v):.2f} ± {np.std(v):.2f}" + (f" (n={len(v)})" if len(v) != 5 else "")


def _cell(runs: list[dict], paper: tuple | None, dataset: str) -> str:
    """Accuracy over ``runs``, with the paper's figure (PAPER5/6/8 are in the order of DATASETS)."""
    return _acc(runs) + (f" [{paper[DATASETS.index(dataset)]}]" if runs and paper and dataset in DATASETS else "")


def report(results: list[dict], args) -> str:
    datasets = [d for d in args.datasets.split(",") if d]
    clients = [int(k) for k in args.clients.split(",") if k]
    # an ICAFS run with a shortened stage 1 (--synth-steps) is its own row, never averaged with the default
    t4 = [{**r, "method": f"icafs, {r['synth_steps']} synthesis iterations"}
          if r["method"] == "icafs" and r.get("synth_steps") is not None else r
          for r in results if r["kind"] == "table4"]
    shown = REFERENCES + METHODS + tuple(sorted({r["method"] for r in t4} - set(REFERENCES + METHODS)))
    lines = ["# ICAFS benchmark results", "",
             f"`python benchmarks/icafs/run.py --seeds {args.seeds} --clients {args.clients} "
             f"--datasets {args.datasets}{' --only ' + args.only if args.only else ''}"
             f"{' --methods ' + args.methods if args.methods else ''}"
             f"{f' --synth-steps {args.synth_steps}' if args.synth_steps is not None else ''}`; accuracy % (mean ± sd "
             "over seeds); the paper's figure in brackets. ADNI is not available (its column stays empty).", ""]
    for key, title in (("mlp_metrics", "## Table IV: section V-B's evaluation, the reference network (`vfl`) trained "
                        "on each method's selected features"),
                       ("metrics", "## Table IV, each method's own model on its selected features")):
        if not any(key in r for r in t4):
            continue
        lines += [title, "", "| method | " + " | ".join(f"{d} K={k}" for d in datasets for k in clients) + " |",
                  "|---" * (1 + len(datasets) * len(clients)) + "|"]
        for meth in shown:
            cells = []
            for d in datasets:
                for k in clients:
                    rows = [r for r in t4 if r["method"] == meth and r["dataset"] == d and r["parties"] == k]
                    paper = PAPER4.get(meth.split(",")[0], {}).get(d)
                    ref = f" [{paper[(2, 5, 10).index(k)]}]" if paper and k in (2, 5, 10) else ""
                    acc = _acc(rows, key)
                    cells.append(acc + (ref if acc else ""))
            name = {"vfl": "vfl (all features, reference)",
                    "random-half": "random-half (a random half of each party's columns)"}.get(meth, meth)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["Share of the features each method kept (mean):", "",
              "| method | " + " | ".join(f"{d} K={k}" for d in datasets for k in clients) + " |",
              "|---" * (1 + len(datasets) * len(clients)) + "|"]
    for meth in shown[1:]:
        cells = []
        for d in datasets:
            for k in clients:
                rows = [r for r in t4 if r["method"] == meth and r["dataset"] == d and r["parties"] == k]
                cells.append(f"{np.mean([r['ratio'] for r in rows]):.3f}" if rows else "")
        lines.append(f"| {meth} | " + " | ".join(cells) + " |")
    q = [r for r in t4 if r.get("quality")]
    if q:
        lines += ["", "## Synthetic data's quality (K = 2 unless noted)", "",
                  "| data set | K | stage 1 iterations | LR synthetic -> real test | LR real -> real test | "
                  "stage 1 seconds | stage 1 MB |",
                  "|---|---|---|---|---|---|---|"]
        for d in datasets:
            for k in clients:
                for it in sorted({_steps(r) for r in q}):
                    rows = [r for r in q if r["dataset"] == d and r["parties"] == k and _steps(r) == it]
                    if not rows:
                        continue
                    lines.append(f"| {d} | {k} | {'default (250)' if it < 0 else it} | "
                                 f"{100 * np.nanmean([r['quality']['synthetic_to_real'] for r in rows]):.2f} | "
                                 f"{100 * np.mean([r['quality']['real_to_real'] for r in rows]):.2f} | "
                                 f"{np.mean([r['info']['synthesis_seconds'] for r in rows]):.0f} | "
                                 f"{np.mean([r['info']['synthesis_bytes'] for r in rows]) / 1e6:.1f} |")
    for kind, title, key, values, paper in (("table5", "Table V: DP-SGD on the encoders (delta 1e-5)", "eps", EPSILONS, PAPER5),
                                            ("table6", "Table VI: ablations", "variant", VARIANTS[1:], PAPER6),
                                            ("table8", "Table VIII: Gaussian noise columns (share of the columns)", "noise",
                                             NOISE, PAPER8)):
        rows = [r for r in results if r["kind"] == kind]
        if not rows:
            continue
        lines += ["", f"## {title}", "", "| setting | " + " | ".join(datasets) + " |", "|---" * (1 + len(datasets)) + "|"]
        base = {d: [r for r in t4 if r["method"] == "icafs" and r["dataset"] == d and r["parties"] == 2] for d in datasets}
        label0 = {"table5": "no DP", "table6": "ICAFS", "table8": "no noise"}[kind]
        paper0 = {"table5": PAPER5[0], "table6": PAPER6["icafs"], "table8": PAPER8[0.0]}[kind]
        lines.append(f"| {label0} | " + " | ".join(_cell(base[d], paper0, d) for d in datasets) + " |")
        for v in values:
            cells = [_cell([r for r in rows if r[key] == v and r["dataset"] == d], paper.get(v), d) for d in datasets]
            # one label per table (a dict of all three would format a variant's name as a number)
            label = (f"epsilon {v:g}" if kind == "table5" else str(v) if kind == "table6"
                     else f"{100 * v / (1 + v):.0f} % noise")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cost = [r for r in t4 if r.get("cost")]
    if cost:
        lines += ["", "## Table VII: cost (K = 2, mean over seeds)", "",
                  "| data set | method | synthesis s | synthesis MB | training s | training MB | inference s | inference MB |",
                  "|---|---|---|---|---|---|---|---|"]
        for d in datasets:
            for meth in ("sefs", "icafs"):
                rows = [r for r in cost if r["dataset"] == d and r["method"] == meth]
                if not rows:
                    continue
                syn_s = np.mean([r["info"].get("synthesis_seconds", 0.0) for r in rows])
                lines.append(f"| {d} | {meth} | {syn_s:.0f} | {np.mean([r['pretrain_mbytes'] for r in rows]):.1f} | "
                             f"{np.mean([r['seconds'] for r in rows]) - syn_s:.0f} | "
                             f"{np.mean([r['train_mbytes'] for r in rows]):.1f} | "
                             f"{np.mean([r['inference_seconds'] for r in rows]):.2f} | "
                             f"{np.mean([r['inference_mbytes'] for r in rows]):.2f} |")
        lines.append("")
        lines.append("SEFS's synthesis columns are its self-supervised phase (local: no bytes).")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA"))
    ap.add_argument("--out", default="results/icafs")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--clients", default="2,5,10")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated: table4,table5,table6,table7,table8,quality")
    ap.add_argument("--synth-steps", type=int, default=None,
                    help="ICAFS's stage-1 iterations (default: the method's, 250); fewer is a shortened run, "
                         "and RESULTS.md says so")
    ap.add_argument("--resume", action="store_true",
                    help="keep the runs already in --out's results.json and do only the missing ones (the "
                         "report covers both)")
    ap.add_argument("--methods", default="", help="comma-separated subset of Table IV's methods "
                    "(vfl,random-half,vflfs,group-lasso,compfs,sefs,icafs; default all)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from verticalfs.utils.io import write_bytes_atomic, write_json_atomic

    out = Path(args.out)
    if not out.parent.exists():
        raise SystemExit(f"--out: the folder {out.parent} does not exist")
    out.mkdir(exist_ok=True)
    jobs = jobs_for(args)
    results = []
    if args.resume and (out / "results.json").exists():
        results = json.loads((out / "results.json").read_text())
        done = {_key(r) for r in results}
        print(f"--resume: {len(results)} runs in {out / 'results.json'}; "
              f"{sum(_key(j) in done for j in jobs)} of the {len(jobs)} asked for are among them", flush=True)
        jobs = [j for j in jobs if _key(j) not in done]
    t0 = time.perf_counter()
    i = 0
    with ProcessPoolExecutor(args.workers) as ex:
        futures = [ex.submit(run_group, g) for g in groups(jobs)]
        for fut in as_completed(futures):
            for r in fut.result():
                i += 1
                results.append(r)
                print(f"[{i}/{len(jobs)} {time.perf_counter() - t0:6.0f}s] {r['kind']} {r['dataset']} K={r['parties']} "
                      f"{r['method']} seed {r['seed']} {r.get('params', '')}: acc "
                      f"{r['metrics'].get('accuracy', float('nan')):.4f} ratio {r['ratio']:.3f} ({r['seconds']:.0f}s"
                      f"{', stage 1 reused' if r['info'].get('synthesis_reused') else ''})", flush=True)
            write_json_atomic(out / "results.json", results)  # finished runs survive an interrupted one (--resume)
    text = report(results, args)
    write_bytes_atomic(out / "RESULTS.md", (text + "\n").encode())
    print(text)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
