"""The filters' ``n_select`` on data sets of several shapes (issue 53): every N of the grid that
``n_select="auto"`` searches, so that a rule for choosing N can be judged on all of them at once.

    python benchmarks/generalise/filters.py --data digits,multiclass-wide --methods mi,feast --json filters.jsonl
    python benchmarks/generalise/filters.py --table filters.jsonl              # auto (and 10) against vfl
    python benchmarks/generalise/filters.py --rules filters.jsonl              # several tolerances side by side

Every run: 3 parties, +50 % Gaussian noise columns, seed 0, the method's defaults but ``n_select``
(``sffs``/``ms-gini``/``fate-*`` with ``secure=false`` or 1,024-bit keys, ``insecure=true``:
the selection does not depend on the encryption). JSON lines: ``n_select="auto"`` itself (the
method's own choice, the bytes of its search included) and N = 10 (the default before issue 53),
each a run; and for each N of :func:`verticalfs.methods.filter.auto_grid` the validation and test
accuracy of the filter's classifier on the selected columns and the share of the injected noise
columns removed: for a ranking (``nested``: every filter but FEAST) the first N of one selection
at the grid's largest N, the classifier fitted here exactly as the method fits it; for FEAST one
run per N. ``vfl``'s test accuracy is one line per data
set. ``--rules`` recomputes the choice "the smallest N whose validation accuracy is at most
``tol`` below the grid's best" for several ``tol`` from the per-N lines (no rerun).

Data sets (``--data``): the built-in ``digits`` (10 classes, 64 pixels), ``multiclass-synth``
(30 classes, 500), ``multiclass-wide`` (26 classes, 617), ``wine`` (3 classes, 13),
``breast_cancer`` (2 classes, 30) and ``madelon-synth`` (2 classes, 500); from the shared data
(``VERTICALFS_DATA``): ``usps`` (a stratified 3,000 rows of 9,298, 10 classes, 256), ``tox_171``
(4 classes, 5,748; 171 rows), ``madelon`` (2 classes, 500), ``phishing`` (2 classes, 30),
``arcene`` (2 classes, 10,000; 200 rows).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

FILTERS = ("mi", "feast", "cfeast", "sffs", "ms-gini", "random")
DATA = ("digits", "multiclass-synth", "multiclass-wide", "usps", "madelon", "phishing")


def table(name: str, seed: int = 0):
    """A registered data set by name, or a stratified 3,000-row sample of USPS."""
    if name != "usps":
        return name
    from sklearn.model_selection import train_test_split

    from verticalfs.data.loaders import load_usps
    from verticalfs.data.table import Table

    t = load_usps(os.environ.get("VERTICALFS_DATA", "../shared/datasets"))
    idx, _ = train_test_split(np.arange(len(t.y)), train_size=3000, stratify=t.y, random_state=seed)
    idx = np.sort(idx)
    return Table(name="usps3000", X=t.X.iloc[idx].reset_index(drop=True), y=t.y[idx], task="multiclass")


def fixed(method: str) -> dict:
    """The parameters every run of ``method`` gets here (see the docstring)."""
    if method in ("sffs", "ms-gini"):
        return {"secure": False}
    if method.startswith("fate-"):
        return {"key_bits": 1024, "insecure": True}
    return {}


#: parameters given with ``--params`` (JSON), passed to every method that has them (e.g.
#: ``{"estimator": "plugin"}`` for the MI filters' estimator before issue 53's change)
EXTRA: dict = {}


def extra(method: str) -> dict:
    """The ``--params`` that ``method`` takes."""
    import dataclasses

    from verticalfs.methods import registry

    names = {f.name for f in dataclasses.fields(registry.get(method).Params)}
    return {k: v for k, v in EXTRA.items() if k in names}


def run_one(method: str, data, n_select, seed: int = 0) -> tuple[dict, object]:
    import verticalfs

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = verticalfs.run(method, data, seed=seed, params={**fixed(method), **extra(method), "n_select": n_select})
    h = r.history[-1] if r.history else {}
    sel = r.selection
    return ({"method": method, "n_select": n_select, "accuracy": float(r.metrics.get("accuracy", np.nan)),
             "val_accuracy": h.get("val_accuracy"), "kept": sel.get("n_kept"), "features": sel.get("n_features"),
             "noise_removed": sel.get("spurious_removed"), "bytes": r.communication["total_bytes"],
             "auto": r.info.get("auto"), "seconds": time.perf_counter() - t0}, r)


def prefixes(method: str, data, res, grid: list[int], seed: int = 0) -> list[dict]:
    """A ranking's every N of the grid from one selection at the grid's largest N: the first N
    features of its order, the filter's classifier (``fit_classifier``, the same call and seed)
    fitted on their training columns and scored on the validation and test rows."""
    from verticalfs.evaluation.metrics import prediction_metrics
    from verticalfs.selection.evaluate import classifier_output, fit_classifier

    order = [tuple(s.split(":", 1)) for s in res.info["selected"]]
    names = {p.name: list(p.feature_names) for p in data.parties}
    idx = [(q, names[q].index(f)) for q, f in order]
    lab = data.labels
    spur = {p: np.asarray(data.ground_truth[p], dtype=bool) for p in data.party_names}
    n_spur = sum(int(v.sum()) for v in spur.values())
    out = []
    for n in grid:
        cols = idx[:n]
        X = {s: np.stack([data.party(q).X[s][:, i] for q, i in cols], 1) for s in ("train", "val", "test")}
        model = fit_classifier(X["train"], lab.y["train"], "lr", seed=seed, task=lab.task, n_classes=lab.n_classes)
        acc = {s: prediction_metrics(lab.task, lab.y[s], classifier_output(model, X[s], lab.task, lab.n_classes),
                                     lab.n_classes)["accuracy"] for s in ("val", "test")}
        kept_noise = sum(int(spur[q][i]) for q, i in cols)
        out.append({"method": method, "n_select": n, "accuracy": acc["test"], "val_accuracy": acc["val"],
                    "kept": n, "features": sum(len(v) for v in names.values()),
                    "noise_removed": 1 - kept_noise / n_spur if n_spur else None, "bytes": None, "auto": None,
                    "seconds": 0.0, "from": f"the first {n} of n_select={max(grid)}"})
    return out


def choose(lines: list[dict], tol: float) -> dict | None:
    """The per-N line the rule picks: the smallest N with validation accuracy >= best - tol."""
    grid = [r for r in lines if isinstance(r["n_select"], int) and r.get("grid")]
    if not grid:
        return None
    best = max(r["val_accuracy"] for r in grid)
    return min((r for r in grid if r["val_accuracy"] >= best - tol), key=lambda r: r["n_select"])


def load(paths: list[str]) -> list[dict]:
    return [json.loads(line) for p in paths for line in open(p) if line.strip()]


def markdown(paths: list[str]) -> str:
    """Per data set and filter: vfl, N = 10 (before issue 53) and n_select=auto (after):
    test accuracy, features kept, share of the noise columns removed."""
    runs = load(paths)
    out = ["| data | vfl | filter | N = 10: acc (kept, noise removed) | auto: acc (N, noise removed) | auto's MB |",
           "| --- | --- | --- | --- | --- | --- |"]
    sets = list(dict.fromkeys(r["data"] for r in runs))
    for d in sets:
        vfl = next((r["accuracy"] for r in runs if r["data"] == d and r["method"] == "vfl"), None)
        for m in dict.fromkeys(r["method"] for r in runs if r["data"] == d and r["method"] != "vfl"):
            ten = next((r for r in runs if r["data"] == d and r["method"] == m and r["n_select"] == 10), None)
            auto = next((r for r in runs if r["data"] == d and r["method"] == m and r["n_select"] == "auto"), None)

            def cell(r, n=False):
                if r is None:
                    return ""
                k = r["kept"] if not n else r["auto"]["chosen"] if r.get("auto") else r["kept"]
                return f"{r['accuracy']:.3f} ({k}/{r['features']}, {r['noise_removed']:.0%})"

            mb = "" if auto is None else f"{auto['bytes'] / 1e6:.2f}"
            ref = "" if vfl is None else f"{vfl:.3f}"
            out.append(f"| {d} | {ref} | {m} | {cell(ten)} | {cell(auto, True)} | {mb} |")
    return "\n".join(out)


def rules(paths: list[str], tols=(0.0, 0.01, 0.02, 0.03)) -> str:
    """The choice of each tolerance from the per-N lines: test accuracy and noise removed."""
    runs = load(paths)
    out = ["| data | filter | " + " | ".join(f"tol {t}: acc (N, noise)" for t in tols) + " |",
           "| --- | --- | " + " | ".join("---" for _ in tols) + " |"]
    for d in dict.fromkeys(r["data"] for r in runs):
        for m in dict.fromkeys(r["method"] for r in runs if r["data"] == d and r["method"] != "vfl"):
            lines = [r for r in runs if r["data"] == d and r["method"] == m]
            cells = []
            for t in tols:
                r = choose(lines, t)
                cells.append("" if r is None else f"{r['accuracy']:.3f} ({r['n_select']}, {r['noise_removed']:.0%})")
            out.append(f"| {d} | {m} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=",".join(DATA))
    ap.add_argument("--methods", default=",".join(FILTERS))
    ap.add_argument("--json", default=None, help="append each run as a JSON line to this file")
    ap.add_argument("--no-grid", action="store_true", help="only N = 10 and auto (not every N of the grid)")
    ap.add_argument("--no-grid-for", default="", help="comma-separated methods measured at N = 10 and auto only "
                    "(FEAST's per-N runs on 1,536 columns take long)")
    ap.add_argument("--table", nargs="+", default=None, help="print these JSON-line files as a Markdown table")
    ap.add_argument("--rules", nargs="+", default=None, help="the choice of several tolerances, from the files")
    ap.add_argument("--params", default="{}", help="JSON parameters for every method that has them, e.g. "
                    "'{\"estimator\": \"plugin\"}'")
    ap.add_argument("--tag", default="", help="appended to each method's name in the JSON lines (e.g. '[plugin]')")
    a = ap.parse_args(argv)
    EXTRA.update(json.loads(a.params))
    if a.table:
        print(markdown(a.table))
        return 0
    if a.rules:
        print(rules(a.rules))
        return 0
    import torch

    import verticalfs
    from verticalfs.methods.filter import auto_grid

    torch.set_num_threads(1)

    def emit(row: dict) -> None:
        print(f"  {row['method']:<8} N={row.get('n_select')!s:<5} acc {row['accuracy']:.3f} val "
              f"{row.get('val_accuracy') or float('nan'):.3f} kept {row.get('kept')} noise removed "
              f"{row.get('noise_removed') or 0:.2f} {row['seconds']:.1f} s", flush=True)
        if a.json:
            if a.tag and row["method"] != "vfl":
                row = {**row, "method": row["method"] + a.tag}
            with open(a.json, "a") as f:
                f.write(json.dumps(row) + "\n")

    for name in a.data.split(","):
        data = verticalfs.build_data(table(name), parties=3, noise=0.5, seed=0)
        d = sum(p.n_features for p in data.parties)
        print(f"\n{name}: {d} features with noise, {data.labels.n_classes} classes; grid {auto_grid(d)}  "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            v = verticalfs.run("vfl", data, seed=0)
        emit({"data": name, "method": "vfl", "accuracy": float(v.metrics["accuracy"]), "kept": d, "features": d,
              "seconds": time.perf_counter() - t0})
        for m in a.methods.split(","):
            grid = auto_grid(d)
            for n in ("auto", 10):
                row, _ = run_one(m, data, n)
                emit({"data": name, **row, "grid": False})
            if a.no_grid or m in a.no_grid_for.split(","):
                continue
            if m != "feast":  # a ranking (cfeast: greedy, its default): one selection at the grid's largest N
                row, res = run_one(m, data, grid[-1])
                for r in prefixes(m, data, res, grid):
                    emit({"data": name, **r, "grid": True})
            else:  # FEAST: its rounds depend on N, one selection per N
                for n in grid:
                    row, _ = run_one(m, data, n)
                    emit({"data": name, **row, "grid": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
