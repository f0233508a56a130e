"""Rerun the experiments of sparsevfl.md section 5: Table 2, Figure 3 and Table 3.

    python benchmarks/sparsevfl/run.py --data-dir ../shared/datasets          # the paper's setting
    python benchmarks/sparsevfl/run.py --quick                                # a few minutes

Writes into ``--out`` (default ``benchmarks/sparsevfl/results/``): one JSON per run in ``runs/``
(reused by later invocations with the same settings unless ``--fresh``), ``results.json`` (every
run's summary), ``figure3_<data>.png`` and ``table2.md`` / ``table3.md`` / ``figure3_<data>.md``;
and ``benchmarks/sparsevfl/RESULTS.md`` with every table and the acceptance line (all atomically;
with another ``--out``, ``RESULTS.md`` goes there instead).

Stages (``--stages``, default all):

- ``acceptance``: Adult, ORIGINAL and SPARSEVFL-16 at the 7 lambdas of Figure 3, ``--seeds`` seeds.
  Prints the summary line: SPARSEVFL-16 at its best lambda (the fewest bytes among the lambdas
  whose mean test ROC-AUC is within 0.003 of ORIGINAL's; the best-AUC lambda if none is), its
  training bytes as % of ORIGINAL's and the ROC-AUC difference.
- ``figure3``: every method on every data set: ORIGINAL, Q-16, Q-8, DIM-{2,3,4,6}, PCA,
  AUTOENCODER, SPARSEVFL (Q = 32) and SPARSEVFL-16 at the 7 lambdas, TOP-W-16 with W in
  {1024, 2048, 4096} at the 7 lambdas. Test ROC-AUC against total training bytes, one PNG per data
  set. Runs other than the acceptance ones use ``--figure-seeds`` seeds (default: see below).
- ``table2``: the ablation of Table 2 on Adult (SPARSEVFL-16, lambda = 0.01): ReLU / SeLU / eLU,
  L1 / L2 / no penalty, vertical / horizontal traversal; training MB and test ROC-AUC.
- ``table3``: T_m, S_m and tau at 10 and 100 Mbit/s of ORIGINAL and SPARSEVFL-16 (lambda = 0.01)
  on Adult (means over the acceptance seeds).

Defaults are the paper's setting (200 epochs, 5 seeds, 3 data sets). To keep the default run well
under an hour on 2 cores, only the acceptance runs (and, on the two small data sets, everything)
use 5 seeds; on Adult the other Figure 3 runs and the ablation use ``--figure-seeds`` (default 1).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import datasets as D  # noqa: E402  (benchmarks/sparsevfl/datasets.py)

from verticalfs.methods.sparsevfl.method import PAPER_LAMBDAS  # noqa: E402
from verticalfs.utils.io import save_figure_atomic, write_bytes_atomic, write_json_atomic  # noqa: E402

TOP_WS = (1024, 2048, 4096)
DIMS = (2, 3, 4, 6)
ABLATION_LAMBDA = 0.01
TABLE3_LAMBDA = 0.01
AUC_TOLERANCE = 0.003
BYTES_TARGET = 0.32
#: Table 2 rows: (activation, norm, traversal)
ABLATION = [("relu", "l1", "vertical"), ("selu", "l1", "vertical"), ("elu", "l1", "vertical"),
            ("relu", "l2", "vertical"), ("relu", "none", "vertical"), ("relu", "l1", "horizontal")]
PAPER_TABLE2 = {("relu", "l1", "vertical"): (223, 0.9067), ("selu", "l1", "vertical"): (594, 0.9063),
                ("elu", "l1", "vertical"): (594, 0.9067), ("relu", "l2", "vertical"): (302, 0.9056),
                ("relu", "none", "vertical"): (351, 0.9077), ("relu", "l1", "horizontal"): (277, 0.9067)}
PAPER_TABLE3 = {"original": {"T": [34.9, 12.4, 13.4, 12.4], "S": [396, 396, 396], "tau10": 365.0, "tau100": 80.0},
                "sparsevfl-16": {"T": [50.9, 16.6, 19.6, 17.9], "S": [85, 80, 58], "tau10": 135.5,
                                 "tau100": 77.1}}


# --------------------------------------------------------------------------- jobs
def job(dataset: str, method: str, seed: int, epochs: int, label: str | None = None, **params) -> dict:
    """One run: ``method`` with ``params`` on ``dataset`` for ``seed``; ``label`` names it in tables."""
    p = {"epochs": epochs, "embedding_dim": D.EMBEDDING_DIM[dataset], **params}
    return {"dataset": dataset, "method": method, "seed": seed, "params": p, "label": label or method}


def job_key(j: dict) -> str:
    blob = json.dumps({k: j[k] for k in ("dataset", "method", "seed", "params")}, sort_keys=True)
    return f"{j['dataset']}-{j['label']}-s{j['seed']}-{hashlib.sha1(blob.encode()).hexdigest()[:10]}"


@lru_cache(maxsize=2)
def _data(dataset: str, seed: int, data_dir: str | None):
    return D.build(dataset, seed, data_dir)


def run_job(args: tuple[dict, str | None, str]) -> dict:
    """Run one job in a worker (or load it from ``runs/``); returns its summary."""
    j, data_dir, runs_dir = args
    path = Path(runs_dir) / f"{job_key(j)}.json"
    if path.exists():
        return json.loads(path.read_text())
    import torch

    torch.set_num_threads(1)  # tiny models: one thread is several times faster on 2 cores
    from verticalfs import run

    data = _data(j["dataset"], j["seed"], data_dir)
    t0 = time.perf_counter()
    res = run(j["method"], data, seed=j["seed"], params=j["params"])
    seconds = time.perf_counter() - t0
    hist = res.history
    keep = ("epoch", "bytes", "bytes_total", "train_loss", "roc_auc", "accuracy", "f1_macro", "val_roc_auc",
            "embedding_zeros")
    out = {
        **{k: j[k] for k in ("dataset", "method", "seed", "params", "label")},
        "key": job_key(j),
        "metrics": res.metrics,
        "train_bytes": hist[-1]["bytes"] if hist else 0,
        "total_bytes": res.communication["total_bytes"],
        "eval_bytes": res.communication["by_phase"].get("eval", 0),
        "by_kind": res.info.get("bytes_by_kind_train", {}),
        "best_epoch": res.info.get("best_epoch"),
        "embedding_zeros": hist[-1].get("embedding_zeros") if hist else None,
        "wall_time": res.info.get("wall_time"),
        "seconds": seconds,
        "seconds_per_epoch": seconds / max(1, len(hist)),
        "history": [{k: h.get(k) for k in keep if k in h} for h in hist],
    }
    write_json_atomic(path, out)
    return out


def run_all(jobs: list[dict], workers: int, data_dir: str | None, runs_dir: Path, tag: str) -> list[dict]:
    runs_dir.mkdir(parents=True, exist_ok=True)
    todo = [(j, data_dir, str(runs_dir)) for j in jobs]
    cached = sum((runs_dir / f"{job_key(j)}.json").exists() for j in jobs)
    print(f"[{tag}] {len(jobs)} runs ({cached} already in {runs_dir})", flush=True)
    t0 = time.perf_counter()
    out = []
    if workers <= 1:
        for i, a in enumerate(todo):
            out.append(run_job(a))
            _progress(tag, i + 1, len(todo), t0, out[-1])
    else:
        # order: the biggest data sets first, so the pool does not end on one long run
        with ProcessPoolExecutor(max_workers=workers) as ex:
            for i, r in enumerate(ex.map(run_job, todo, chunksize=1)):
                out.append(r)
                _progress(tag, i + 1, len(todo), t0, r)
    return out


def _progress(tag: str, i: int, n: int, t0: float, r: dict) -> None:
    if i == n or i % 10 == 0:
        print(f"[{tag}] {i}/{n} runs, {time.perf_counter() - t0:.0f} s "
              f"(last: {r['dataset']} {r['label']} seed {r['seed']}: AUC {r['metrics'].get('roc_auc', float('nan')):.4f}, "
              f"{r['train_bytes'] / 1e6:.1f} MB)", flush=True)


# ----------------------------------------------------------------------- job lists
def sparse16_label(lam: float) -> str:
    return f"sparsevfl-16 l={lam:g}"


def acceptance_jobs(seeds, epochs) -> list[dict]:
    js = [job("adult", "original", s, epochs) for s in seeds]
    js += [job("adult", "sparsevfl-16", s, epochs, sparse16_label(lam), lam=lam) for lam in PAPER_LAMBDAS for s in seeds]
    return js


def figure3_jobs(dataset: str, seeds, epochs, lambdas, top_ws) -> list[dict]:
    js = []
    for s in seeds:
        js.append(job(dataset, "original", s, epochs))
        js.append(job(dataset, "q16", s, epochs))
        js.append(job(dataset, "q8", s, epochs))
        js += [job(dataset, "dim", s, epochs, f"dim-{k}", embedding_dim=k) for k in DIMS]
        js.append(job(dataset, "pca", s, epochs))
        js.append(job(dataset, "autoencoder", s, epochs))
        for lam in lambdas:
            js.append(job(dataset, "sparsevfl-16", s, epochs, sparse16_label(lam), lam=lam))
            js.append(job(dataset, "sparsevfl", s, epochs, f"sparsevfl l={lam:g}", lam=lam))
            js += [job(dataset, "top-w", s, epochs, f"top-{w}-16 l={lam:g}", lam=lam, top_w=w) for w in top_ws]
    return js


def ablation_label(act: str, norm: str, order: str) -> str:
    return f"ablation {act}/{norm}/{order}"


def table2_jobs(seeds, epochs) -> list[dict]:
    js = []
    for act, norm, order in ABLATION:
        if (act, norm, order) == ABLATION[0]:  # the SPARSEVFL-16 run itself
            js += [job("adult", "sparsevfl-16", s, epochs, sparse16_label(ABLATION_LAMBDA), lam=ABLATION_LAMBDA)
                   for s in seeds]
            continue
        lam = 0.0 if norm == "none" else ABLATION_LAMBDA
        js += [job("adult", "sparsevfl-16", s, epochs, ablation_label(act, norm, order), lam=lam,
                   norm=norm, order=order, last_activation=act) for s in seeds]
    return js


# ------------------------------------------------------------------------- summaries
def group(runs: list[dict]) -> dict[tuple[str, str], list[dict]]:
    g: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        g.setdefault((r["dataset"], r["label"]), []).append(r)
    return g


def mean_std(vals) -> tuple[float, float]:
    v = np.asarray([x for x in vals if x is not None], dtype=float)
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std()) if v.size > 1 else 0.0


def acceptance(runs: list[dict]) -> dict:
    g = group(runs)
    orig = g[("adult", "original")]
    o_auc, o_auc_sd = mean_std(r["metrics"]["roc_auc"] for r in orig)
    o_bytes, _ = mean_std(r["train_bytes"] for r in orig)
    rows = []
    for lam in PAPER_LAMBDAS:
        rs = g.get(("adult", sparse16_label(lam)))
        if not rs:
            continue
        auc, auc_sd = mean_std(r["metrics"]["roc_auc"] for r in rs)
        b, _ = mean_std(r["train_bytes"] for r in rs)
        rows.append({"lam": lam, "auc": auc, "auc_std": auc_sd, "bytes": b, "pct": 100 * b / o_bytes,
                     "diff": auc - o_auc, "seeds": len(rs),
                     "zeros": mean_std(r["embedding_zeros"] for r in rs)[0]})
    ok = [r for r in rows if r["diff"] >= -AUC_TOLERANCE]
    best = min(ok, key=lambda r: r["bytes"]) if ok else max(rows, key=lambda r: r["auc"])
    met = bool(ok) and best["pct"] <= 100 * BYTES_TARGET
    return {"original_auc": o_auc, "original_auc_std": o_auc_sd, "original_bytes": o_bytes,
            "original_seeds": len(orig), "rows": rows, "best": best, "within_tolerance": bool(ok), "met": met}


def acceptance_line(a: dict) -> str:
    b = a["best"]
    how = "fewest bytes within 0.003 ROC-AUC of ORIGINAL" if a["within_tolerance"] else \
        "no lambda within 0.003 ROC-AUC of ORIGINAL: best-AUC lambda"
    return (f"ACCEPTANCE (adult, 3 parties, {b['seeds']} seeds): sparsevfl-16 at lambda={b['lam']:g} ({how}) sends "
            f"{b['pct']:.1f} % of original's training bytes ({b['bytes'] / 1e6:.1f} MB vs "
            f"{a['original_bytes'] / 1e6:.1f} MB), test ROC-AUC {b['auc']:.4f} vs {a['original_auc']:.4f} "
            f"(diff {b['diff']:+.4f}); criterion (<= 32 % and >= -0.003): {'MET' if a['met'] else 'NOT MET'}")


def acceptance_md(a: dict) -> str:
    lines = ["| lambda | seeds | test ROC-AUC | diff vs ORIGINAL | training MB | % of ORIGINAL | zeros in E |",
             "| --- | --- | --- | --- | --- | --- | --- |",
             f"| ORIGINAL | {a['original_seeds']} | {a['original_auc']:.4f} ± {a['original_auc_std']:.4f} | | "
             f"{a['original_bytes'] / 1e6:.1f} | 100.0 | |"]
    for r in a["rows"]:
        mark = " **(best)**" if r is a["best"] else ""
        lines.append(f"| {r['lam']:g}{mark} | {r['seeds']} | {r['auc']:.4f} ± {r['auc_std']:.4f} | {r['diff']:+.4f} | "
                     f"{r['bytes'] / 1e6:.1f} | {r['pct']:.1f} | {r['zeros']:.3f} |")
    return "\n".join(lines)


def family(label: str) -> str:
    """Figure 3 series of a run label."""
    if label.startswith("top-"):
        return label.split(" ")[0]
    if label.startswith("sparsevfl") or label.startswith("dim-"):
        return label.split(" ")[0] if not label.startswith("dim-") else "dim-k"
    return label


def figure3_table(runs: list[dict], dataset: str) -> list[dict]:
    rows = []
    for (ds, label), rs in sorted(group(runs).items()):
        if ds != dataset or label.startswith("ablation"):
            continue
        auc, sd = mean_std(r["metrics"].get("roc_auc") for r in rs)
        b, _ = mean_std(r["train_bytes"] for r in rs)
        rows.append({"label": label, "family": family(label), "seeds": len(rs), "auc": auc, "auc_std": sd,
                     "bytes": b, "spe": mean_std(r["seconds_per_epoch"] for r in rs)[0]})
    return rows


def figure3_md(rows: list[dict], dataset: str) -> str:
    orig = next((r for r in rows if r["label"] == "original"), None)
    stand_in = D.STANDS_IN_FOR[dataset]
    note = f"stands in for {stand_in}; " if stand_in.lower().replace(" ", "_") != dataset else ""
    lines = [f"**{dataset}** ({note}e = {D.EMBEDDING_DIM[dataset]})", "",
             "| run | seeds | test ROC-AUC | training MB | % of ORIGINAL |", "| --- | --- | --- | --- | --- |"]
    order = {"original": 0, "q16": 1, "q8": 2, "dim-k": 3, "pca": 4, "autoencoder": 5, "sparsevfl": 6,
             "sparsevfl-16": 7}
    for r in sorted(rows, key=lambda r: (order.get(r["family"], 8), r["label"])):
        pct = f"{100 * r['bytes'] / orig['bytes']:.1f}" if orig else ""
        lines.append(f"| {r['label']} | {r['seeds']} | {r['auc']:.4f} ± {r['auc_std']:.4f} | {r['bytes'] / 1e6:.2f} | {pct} |")
    return "\n".join(lines)


def plot_figure3(rows: list[dict], dataset: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    styles = {"original": ("black", "o"), "q16": ("tab:blue", "s"), "q8": ("tab:cyan", "s"),
              "dim-k": ("tab:green", "^"), "pca": ("tab:olive", "v"), "autoencoder": ("tab:brown", "v"),
              "sparsevfl": ("tab:pink", "D"), "sparsevfl-16": ("tab:red", "*"),
              "top-1024-16": ("tab:purple", "x"), "top-2048-16": ("tab:orange", "x"),
              "top-4096-16": ("tab:gray", "x")}
    for fam in dict.fromkeys(r["family"] for r in rows):
        pts = sorted((r["bytes"], r["auc"]) for r in rows if r["family"] == fam)
        color, marker = styles.get(fam, ("k", "."))
        xs, ys = zip(*pts, strict=True)
        # lines only where the points are one parameter's sweep in byte order (lambda, k); TOP-W's
        # lambda sweep is not monotone in bytes, so its points stay unconnected
        joined = len(pts) > 1 and not fam.startswith("top-")
        ax.plot(xs, ys, marker=marker, color=color, label=fam, linestyle="-" if joined else "none",
                markersize=9 if fam == "sparsevfl-16" else 6)
    ax.set_xscale("log")
    ax.set_xlabel("total training bytes (log)")
    ax.set_ylabel("test ROC-AUC (best-validation epoch)")
    ax.set_title(f"sparsevfl.md Figure 3: {dataset}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    save_figure_atomic(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def table2_md(runs: list[dict]) -> str:
    g = group(runs)
    lines = ["| activation | norm | traversal | seeds | training MB | test ROC-AUC | zeros in E | paper MB | paper ROC-AUC |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for act, norm, order in ABLATION:
        label = sparse16_label(ABLATION_LAMBDA) if (act, norm, order) == ABLATION[0] else ablation_label(act, norm, order)
        rs = g.get(("adult", label), [])
        if not rs:
            continue
        b, _ = mean_std(r["train_bytes"] for r in rs)
        auc, sd = mean_std(r["metrics"]["roc_auc"] for r in rs)
        z, _ = mean_std(r["embedding_zeros"] for r in rs)
        pb, pa = PAPER_TABLE2[(act, norm, order)]
        lines.append(f"| {act} | {norm} | {order} | {len(rs)} | {b / 1e6:.1f} | {auc:.4f} ± {sd:.4f} | {z:.3f} | {pb} | {pa} |")
    return "\n".join(lines)


def table3(runs: list[dict]) -> tuple[str, dict]:
    g = group(runs)
    lines = ["| algorithm | m | T_m [s] | S_m [MB] | tau_10M [s] | tau_100M [s] | paper T_m | paper S_m | paper tau_10M | paper tau_100M |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    out = {}
    for name, label in (("original", "original"), ("sparsevfl-16", sparse16_label(TABLE3_LAMBDA))):
        rs = g.get(("adult", label), [])
        if not rs:
            continue
        wts = [r["wall_time"] for r in rs]
        parties = sorted(wts[0]["T_m"])
        T0 = mean_std(w["T_0"] for w in wts)[0]
        Tm = {p: mean_std(w["T_m"][p] for w in wts)[0] for p in parties}
        Sm = {p: mean_std(w["S_m"][p] for w in wts)[0] for p in parties}
        t10 = mean_std(w["tau"]["10"] for w in wts)[0]
        t100 = mean_std(w["tau"]["100"] for w in wts)[0]
        out[name] = {"T_0": T0, "T_m": Tm, "S_m": Sm, "tau_10": t10, "tau_100": t100, "seeds": len(rs)}
        pp = PAPER_TABLE3[name]
        shown = f"{name} (λ = {TABLE3_LAMBDA})" if name != "original" else name
        lines.append(f"| {shown} | 0 | {T0:.1f} | – | {t10:.1f} | {t100:.1f} | {pp['T'][0]} | – | {pp['tau10']} | {pp['tau100']} |")
        for i, p in enumerate(parties):
            lines.append(f"| | {i + 1} | {Tm[p]:.1f} | {Sm[p] / 1e6:.1f} | | | {pp['T'][i + 1]} | {pp['S'][i]} | | |")
    if "original" in out and "sparsevfl-16" in out:
        for b in ("10", "100"):
            red = 1 - out["sparsevfl-16"][f"tau_{b}"] / out["original"][f"tau_{b}"]
            out[f"reduction_{b}"] = red
    return "\n".join(lines), out


# ------------------------------------------------------------------------------ main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA"))
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=5, help="seeds of the acceptance runs (and of the small data sets)")
    ap.add_argument("--figure-seeds", type=int, default=None,
                    help="seeds of the other Adult runs of Figure 3 and Table 2 (default 1; --seeds with --quick)")
    ap.add_argument("--datasets", default="adult,wine_quality,physionet2012")
    ap.add_argument("--stages", default="acceptance,figure3,table2,table3")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true",
                    help="20 epochs, 2 seeds, lambdas {0.01, 0.0631, 0.1585}, W = 2048 only")
    ap.add_argument("--fresh", action="store_true", help="ignore runs already stored in <out>/runs")
    args = ap.parse_args(argv)
    if args.data_dir:
        os.environ["VERTICALFS_DATA"] = args.data_dir
    lambdas, top_ws = PAPER_LAMBDAS, TOP_WS
    if args.quick:
        args.epochs = min(args.epochs, 20)
        args.seeds = min(args.seeds, 2)
        lambdas, top_ws = (0.01, 0.0631, 0.1585), (2048,)
    fig_seeds = args.figure_seeds if args.figure_seeds is not None else (args.seeds if args.quick else 1)
    seeds = list(range(args.seeds))
    fseeds = list(range(min(fig_seeds, args.seeds) if fig_seeds else 1))
    datasets = [d for d in args.datasets.split(",") if d]
    stages = set(args.stages.split(","))
    out = Path(args.out)
    runs_dir = out / "runs"
    if args.fresh and runs_dir.exists():
        for f in runs_dir.glob("*.json"):
            f.unlink()
    t_start = time.perf_counter()

    jobs: list[dict] = []
    if "acceptance" in stages or "table3" in stages:
        jobs += acceptance_jobs(seeds, args.epochs) if "adult" in datasets else []
    if "figure3" in stages:
        for ds in datasets:
            jobs += figure3_jobs(ds, fseeds if ds == "adult" else seeds, args.epochs, lambdas, top_ws)
    if "table2" in stages and "adult" in datasets:
        jobs += table2_jobs(fseeds, args.epochs)
    uniq = {job_key(j): j for j in jobs}
    # acceptance first (its summary is printed as soon as it is there), then by data-set size
    acc_keys = {job_key(j) for j in acceptance_jobs(seeds, args.epochs)} if "adult" in datasets else set()
    first = [j for k, j in uniq.items() if k in acc_keys]
    rest = [j for k, j in uniq.items() if k not in acc_keys]
    runs = run_all(first, args.workers, args.data_dir, runs_dir, "acceptance") if first else []
    summary: dict = {"settings": {"epochs": args.epochs, "seeds": seeds, "figure_seeds_adult": fseeds,
                                  "datasets": datasets, "lambdas": list(lambdas), "top_ws": list(top_ws),
                                  "quick": args.quick}}
    md = [f"# SparseVFL benchmark results\n\nProduced by `python benchmarks/sparsevfl/run.py "
          f"{' '.join(argv if argv is not None else sys.argv[1:])}` "
          f"({args.epochs} epochs; acceptance seeds {seeds}; other Adult runs seeds {fseeds}; "
          f"small data sets seeds {seeds}).\n"]
    if first:
        acc = acceptance(runs)
        summary["acceptance"] = acc
        line = acceptance_line(acc)
        print(line, flush=True)
        md += ["## Acceptance: Adult, SPARSEVFL-16 against ORIGINAL\n", line + "\n", acceptance_md(acc) + "\n"]
    rest.sort(key=lambda j: {"adult": 0, "wine_quality": 1, "physionet2012": 2}.get(j["dataset"], 3))
    if rest:
        runs += run_all(rest, args.workers, args.data_dir, runs_dir, "figure3/table2")
    if "table2" in stages and "adult" in datasets:
        t2 = table2_md(runs)
        md += ["## Table 2: ablation on Adult (SPARSEVFL-16, λ = 0.01)\n", t2 + "\n"]
        write_bytes_atomic(out / "table2.md", (t2 + "\n").encode())
        print("\nTable 2 (ablation, adult)\n" + t2, flush=True)
    if "figure3" in stages:
        md.append("## Figure 3: test ROC-AUC against training bytes\n")
        for ds in datasets:
            rows = figure3_table(runs, ds)
            if not rows:
                continue
            summary.setdefault("figure3", {})[ds] = rows
            plot_figure3(rows, ds, out / f"figure3_{ds}.png")
            t = figure3_md(rows, ds)
            write_bytes_atomic(out / f"figure3_{ds}.md", (t + "\n").encode())
            md += [t + "\n", f"![{ds}](results/figure3_{ds}.png)\n"]
            print("\n" + t, flush=True)
    if "table3" in stages and "adult" in datasets:
        t3, t3d = table3(runs)
        summary["table3"] = t3d
        write_bytes_atomic(out / "table3.md", (t3 + "\n").encode())
        md += ["## Table 3: compute time, data size and simulated training time on Adult\n", t3 + "\n"]
        if "reduction_10" in t3d:
            red = (f"SPARSEVFL-16 (λ = {TABLE3_LAMBDA}) reduces tau by {100 * t3d['reduction_10']:.0f} % at 10 Mbit/s "
                   f"and {100 * t3d['reduction_100']:.0f} % at 100 Mbit/s (paper: 63 % and 4 %).")
            md.append(red + "\n")
        print("\nTable 3 (adult)\n" + t3, flush=True)
    if first:
        print("\n" + acceptance_line(summary["acceptance"]), flush=True)
    minutes = (time.perf_counter() - t_start) / 60
    summary["minutes"] = minutes
    summary["runs"] = [{k: v for k, v in r.items() if k != "history"} for r in runs]
    write_json_atomic(out / "results.json", summary)
    run_minutes = sum(r["seconds"] for r in runs) / 60
    summary["run_minutes"] = run_minutes
    md.append(f"{len(runs)} runs taking {run_minutes:.0f} min of run time in total (each run's own wall "
              f"clock, {args.workers} at a time); this invocation took {minutes:.1f} min (runs already in "
              f"results/runs/ are reused).\n")
    # RESULTS.md next to this script records the default output; a run elsewhere (--out) keeps its own
    results_md = HERE / "RESULTS.md" if out.resolve() == (HERE / "results").resolve() else out / "RESULTS.md"
    write_bytes_atomic(results_md, "\n".join(md).encode())
    print(f"\nwrote {out}/ and {results_md} in {minutes:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
