"""FEAST against its baselines on PhysioNet 2012: test ROC-AUC against N (feast.md Figure 8).

The full reproduction of section 5 (all seven methods incl. FATE-IV/-Lasso, five classifiers, PhysioNet
and Adult, cost figures, B/m sweeps, deletion ablation) is ``run.py`` next to this file; this script
stays as the smaller PhysioNet comparison with both protocols side by side.

Set-up (feast.md section 5.1): 4 parties, a random column split, and 4-16 columns of other
parties copied into each party (``overlap``, drawn per party and seed); B = 8, m = 3,
equal-frequency bins. For each seed, method and N the selection runs once (federated, on the
training split); the selected columns are then evaluated with each classifier two ways:

- ``test``: trained on the training split, ROC-AUC on the held-out test split that selection never
  saw (the split of ``prepare``: 70 / 10 / 20 %);
- ``cv``: the paper's protocol, 5-fold stratified cross-validation over all 4,000 rows (the
  selection has seen the training rows of those folds, as in the public implementation).

Selection bytes are the bytes of phase ``selection`` on the ledger (the gathering of the selected
columns for the evaluation is not counted there).

Usage::

    .venv/bin/python benchmarks/feast/accuracy.py [--seeds 0,1,2,3,4] [--ns 5,10,15]
        [--methods feast,mi,cfeast,random,raw] [--classifiers lr,rf] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

import verticalfs
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.selection import cross_validate_selected, evaluate_selected

REPO = Path(__file__).resolve().parents[2]


def pooled(data, selected, split):
    cols = [data.party(p).X[split][:, [i]] for p, i in selected]
    return np.concatenate(cols, 1) if cols else np.zeros((data.n_samples(split), 0), np.float32)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA", str(REPO.parent / "shared" / "datasets")))
    ap.add_argument("--dataset", default="physionet2012")
    ap.add_argument("--parties", type=int, default=4)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--ns", default="5,10,15")
    ap.add_argument("--methods", default="feast,mi,cfeast,random,raw")
    ap.add_argument("--classifiers", default="lr,rf")
    ap.add_argument("--no-cv", action="store_true", help="skip the paper's 5-fold protocol")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    ns = [int(n) for n in args.ns.split(",")]
    methods = args.methods.split(",")
    clfs = args.classifiers.split(",")
    rows: dict[tuple, list] = {}
    t_start = time.perf_counter()
    for seed in seeds:
        overlap = [int(v) for v in np.random.default_rng(seed).integers(4, 17, size=args.parties)]
        data = verticalfs.build_data(args.dataset, parties=args.parties, overlap=overlap, seed=seed,
                                     data_dir=args.data_dir)
        y = {s: np.asarray(data.labels.y[s]) for s in ("train", "val", "test")}
        y_all = np.concatenate([y["train"], y["val"], y["test"]])
        for name in methods:
            for n in (ns if name != "raw" else [0]):
                fed = Federation.in_process(data)
                paper = {"estimator": "plugin"} if name == "feast" else {}  # the paper's (feast.md 3.1)
                m = create(name, seed=seed, n_select=max(n, 1), classifier=clfs[0], **paper).fit(fed)
                sel = m.selected_
                sel_bytes = fed.ledger.bytes_where(phase="selection")
                X = {s: pooled(data, sel, s) for s in ("train", "val", "test")}
                X_all = np.concatenate([X["train"], X["val"], X["test"]])
                for clf in clfs:
                    test = evaluate_selected(X["train"], y["train"], X["test"], y["test"], clf, seed=seed)["roc_auc"]
                    cv = (float("nan") if args.no_cv else
                          cross_validate_selected(X_all, y_all, clf, folds=5, seed=seed)["roc_auc"])
                    rows.setdefault((name, n, clf), []).append((test, cv, sel_bytes, m.info_["selection_seconds"]))
        print(f"seed {seed} done ({time.perf_counter() - t_start:.0f} s; overlap per party {overlap})", flush=True)
    print(f"\n{args.dataset}, {args.parties} parties, overlap 4-16 per party, seeds {seeds}: "
          "ROC-AUC mean +- std (test = held-out split; cv = 5-fold over all rows)")
    print(f"{'method':<8} {'N':>3} {'clf':<4} {'test ROC-AUC':>16} {'cv ROC-AUC':>16} {'sel. bytes':>11} {'sel. s':>7}")
    for n in ns + [0]:
        for clf in clfs:
            for name in methods:
                r = rows.get((name, n, clf))
                if not r:
                    continue
                a = np.asarray(r, dtype=float)
                label = "all" if n == 0 else str(n)
                print(f"{name:<8} {label:>3} {clf:<4} {a[:, 0].mean():>9.4f} +-{a[:, 0].std():.4f} "
                      f"{a[:, 1].mean():>9.4f} +-{a[:, 1].std():.4f} {a[:, 2].mean():>11.0f} {a[:, 3].mean():>7.3f}")
            print()
    if "feast" in methods and "mi" in methods:
        print("paired by seed: FEAST's test ROC-AUC >= mi's in k of the seeds")
        for n in ns:
            for clf in clfs:
                f = np.asarray(rows[("feast", n, clf)], dtype=float)[:, 0]
                m = np.asarray(rows[("mi", n, clf)], dtype=float)[:, 0]
                print(f"  N={n:<3} {clf:<4} {int((f >= m).sum())}/{len(f)}  (mean difference {np.mean(f - m):+.4f})")


if __name__ == "__main__":
    main()
