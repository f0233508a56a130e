"""Methods at their defaults on multi-class data no paper used (issue 40, item 1).

    python benchmarks/generalise/defaults.py --data digits,synth30,usps --methods vfl,all-features,compfs

Every run: 3 parties, +50 % Gaussian noise columns, seed 0, the method at its defaults (plus any
``--param method.key=value``; ``fedsdg-fs`` always with ``secure=false``). Printed per data set: the
majority rate of the test split, ``vfl``'s accuracy, each method's test accuracy, the issue's bar
``majority + 0.3 (vfl - majority)``, the features kept and the seconds. Data sets (all seeded):

- ``digits``: scikit-learn's 8 x 8 digits, 1,797 x 64, 10 classes;
- ``synth30``: ``make_classification``, 3,000 rows, 50 informative + 450 redundant + 100 useless
  features, 30 classes, one cluster a class, ``class_sep`` 2 (with 300 informative features
  scikit-learn's logistic regression reaches .73 but ``vfl`` at its defaults .06: too hard to be a
  reference);
- ``multiclass-synth``: the built-in set of the generalisation suite (tests/test_generalisation.py),
  1,500 rows x 500 informative and redundant features, 30 classes;
- ``usps``: the shared USPS (VERTICALFS_DATA), a stratified sample of 3,000 of its 9,298 rows (to
  keep runs short on a loaded machine), 256 pixels, 10 classes;
- ``wide20``: 1,440 x 1,024, 20 classes (like COIL20's shape); ``wide26``: 1,560 x 617, 26 classes
  (like ISOLET's shape), both ``make_classification`` with half of the features informative (too
  hard to be a reference: ``vfl`` .12 on ``wide26``);
- ``multiclass-wide`` (1,560 x 617, 26 classes) and ``digit-images`` (1,440 x 1,024, 20 classes):
  the built-in wide sets of issue 53 (``verticalfs datasets``), on which ``vfl`` is a reference.

``--json FILE`` appends each run as one JSON line (rerun only what changed); ``--table FILE``
prints the runs of such files as a Markdown table, one column per ``--tag`` (e.g. before / after).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

DATA = ("digits", "synth30", "multiclass-synth", "usps", "wide20", "wide26", "multiclass-wide", "digit-images")
METHODS = ("vfl", "all-features", "vflfs", "original-gate", "fedsdg-fs", "sparsevfl", "sparsevfl-16", "compfs",
           "sefs")


def _synthetic(name: str, n: int, informative: int, redundant: int, useless: int, classes: int, seed: int = 0):
    import pandas as pd
    from sklearn.datasets import make_classification

    from verticalfs.data.table import Table

    X, y = make_classification(n_samples=n, n_features=informative + redundant + useless, n_informative=informative,
                               n_redundant=redundant, n_classes=classes, n_clusters_per_class=1, class_sep=2.0,
                               random_state=seed)
    return Table(name=name, X=pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])]), y=y.astype(np.int64),
                 task="multiclass")


def table(name: str, seed: int = 0):
    """The data set ``name`` as a :class:`~verticalfs.data.table.Table` (or a registered name)."""
    if name in ("digits", "multiclass-synth", "multiclass-wide", "digit-images"):
        return name  # registered: built in, no files
    if name == "synth30":
        return _synthetic("synth30", 3000, 50, 450, 100, 30, seed)
    if name == "wide20":
        return _synthetic("wide20", 1440, 512, 256, 256, 20, seed)
    if name == "wide26":
        return _synthetic("wide26", 1560, 308, 154, 155, 26, seed)
    if name == "usps":
        from sklearn.model_selection import train_test_split

        from verticalfs.data.loaders import load_usps
        from verticalfs.data.table import Table

        t = load_usps(os.environ.get("VERTICALFS_DATA", "../shared/datasets"))
        idx, _ = train_test_split(np.arange(len(t.y)), train_size=3000, stratify=t.y, random_state=seed)
        idx = np.sort(idx)
        return Table(name="usps3000", X=t.X.iloc[idx].reset_index(drop=True), y=t.y[idx], task="multiclass")
    from verticalfs.data.registry import DATASETS

    if name in DATASETS:
        return name  # any other registered set (breast_cancer, madelon-synth, ...; files from VERTICALFS_DATA)
    raise SystemExit(f"unknown data set {name!r}; choose from {DATA} or a registered one ({', '.join(DATASETS)})")


def parse_params(items: list[str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for item in items:
        key, eq, value = item.partition("=")
        method, _, k = key.partition(".")
        if not k or not eq:  # (an empty value is one: group-lasso.lam_path= is the empty path)
            raise SystemExit(f"--param wants method.key=value, got {item!r}")
        out.setdefault(method, {})[k] = value
    return out


def run_one(method: str, data, params: dict) -> dict:
    import verticalfs

    p = dict(params)
    if method == "fedsdg-fs":
        p.setdefault("secure", False)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = verticalfs.run(method, data, seed=0, params=p)
    return {"method": method, "accuracy": float(r.metrics["accuracy"]), "kept": r.selection.get("n_kept"),
            "features": r.selection.get("n_features"), "noise_removed": r.selection.get("spurious_removed"),
            "seconds": time.perf_counter() - t0, "params": p,
            "warnings": [str(w.message)[:120] for w in caught if "VerticalFS" in type(w.message).__name__]}


def markdown(paths: list[str]) -> str:
    """The JSON lines of ``paths`` as one Markdown table: rows data set x method, a column per tag
    (accuracy, features kept), plus the majority rate and the issue's bar from ``vfl``."""
    runs = [json.loads(line) for p in paths for line in open(p) if line.strip()]
    tags = list(dict.fromkeys(r["tag"] for r in runs))
    cell = {(r["data"], r["method"], r["tag"]): r for r in runs}
    rows = list(dict.fromkeys((r["data"], r["method"]) for r in runs))
    out = ["| data | method | " + " | ".join(f"{t}: acc (kept, noise removed)" for t in tags) + " | bar |",
           "| --- | --- | " + " | ".join("---" for _ in tags) + " | --- |"]
    for data, method in sorted(rows, key=lambda k: (k[0], k[1] != "vfl", k[1])):
        ref = next((cell[(data, "vfl", t)]["accuracy"] for t in tags if (data, "vfl", t) in cell), None)
        maj = next(r["majority"] for r in runs if r["data"] == data)
        vals = []
        for t in tags:
            r = cell.get((data, method, t))
            nr = r.get("noise_removed") if r is not None else None
            vals.append("" if r is None else f"{r['accuracy']:.3f} ({r['kept']}/{r['features']}"
                        + ("" if nr is None or r["kept"] == r["features"] else f", {nr:.0%}") + ")")
        bar = "" if ref is None else f"{maj + 0.3 * (ref - maj):.3f}"
        out.append(f"| {data} (majority {maj:.3f}) | {method} | " + " | ".join(vals) + f" | {bar} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="digits,synth30,usps")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--param", action="append", default=[], help="method.key=value (repeatable)")
    ap.add_argument("--json", default=None, help="append each run as a JSON line to this file")
    ap.add_argument("--suite", action="store_true",
                    help="the generalisation suite's budget: epochs=10, batch_size=64 (tests/test_generalisation.py)")
    ap.add_argument("--tag", default="", help="a label written with each JSON line (e.g. before/after)")
    ap.add_argument("--table", nargs="+", default=None, help="print these JSON-line files as a Markdown table")
    a = ap.parse_args(argv)
    if a.table:
        print(markdown(a.table))
        return 0
    import torch

    import verticalfs

    torch.set_num_threads(1)
    params = parse_params(a.param)
    for name in a.data.split(","):
        data = verticalfs.build_data(table(name), parties=3, noise=0.5, seed=0)
        y = np.asarray(data.labels.y["test"])
        majority = float(np.bincount(y).max() / len(y))
        print(f"\n{name}: {sum(len(g) for g in data.ground_truth.values())} features (with noise), "
              f"{data.labels.n_classes} classes, majority {majority:.3f}", flush=True)
        ref = None
        for method in a.methods.split(","):
            p = dict(params.get(method, {}))
            if a.suite:
                p = {"epochs": 10, "batch_size": 64, **p}
            res = run_one(method, data, p)
            if method == "vfl":
                ref = res["accuracy"]
            bar = "" if ref is None else f"  bar {majority + 0.3 * (ref - majority):.3f}"
            print(f"  {method:<14} acc {res['accuracy']:.3f}  kept {res['kept']}/{res['features']}  "
                  f"noise removed {res['noise_removed'] or 0:.2f}  "
                  f"{res['seconds']:6.1f} s{bar}  {res['params'] or ''}", flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps({"tag": a.tag, "data": name, "majority": majority, **res}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
