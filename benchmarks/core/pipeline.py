"""A selection method feeding a training method (issue 13): ``feast+sparsevfl-16`` against
``sparsevfl-16`` alone on Adult, 3 parties, SparseVFL's paper settings (200 epochs, batch 1024).

FEAST selects ``n_select`` of Adult's 108 one-hot/scaled columns (10, the setting this benchmark
measured, ``--n-select``; the method's default ``"auto"`` would also gather candidate columns to
choose N) at a cost of a few kilobytes, and SparseVFL then trains on those columns only: the
parties that keep nothing drop out, so fewer embeddings travel per batch. Prints, per method, the
mean (± std over seeds) test ROC-AUC and accuracy, training and total megabytes, and the
acceptance line (fewer bytes at no more than 0.01 lower ROC-AUC). Finished runs are kept in
``--out``/runs and reused with ``--resume``.

    python benchmarks/core/pipeline.py --data-dir ../shared/datasets            # 3 seeds, ~30 min here
    python benchmarks/core/pipeline.py --data-dir ../shared/datasets --seeds 0 --epochs 50   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

from verticalfs.compare import compare


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA"))
    ap.add_argument("--dataset", default="adult")
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=None, help="default: the method's (the paper's 200)")
    ap.add_argument("--n-select", default="10", help="FEAST's N (10; 'auto': the method's default search)")
    ap.add_argument("--out", default="benchmarks/core/results/pipeline")
    ap.add_argument("--resume", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    methods = ["sparsevfl-16", "feast+sparsevfl-16"]
    params = {"feast+sparsevfl-16": {"feast.n_select": a.n_select}}
    seeds = [int(s) for s in a.seeds.split(",")]
    summary = compare(a.dataset, methods, parties=a.parties, seeds=seeds, epochs=a.epochs, params=params,
                      data_dir=a.data_dir, out_dir=a.out, resume=a.resume, reference=False,
                      on_start=lambda m, s: print(f"  running {m} seed {s}", file=sys.stderr, flush=True))
    rows = {}
    print(f"{a.dataset}, {a.parties} parties, seeds {seeds}, epochs {a.epochs or 'default (200)'}")
    print(f"{'method':22s} {'ROC-AUC':>17s} {'accuracy':>17s} {'train MB':>10s} {'total MB':>10s} {'kept':>5s}")
    for m in methods:
        rs = summary["runs"][m]
        auc = np.array([r["metrics"]["roc_auc"] for r in rs])
        acc = np.array([r["metrics"]["accuracy"] for r in rs])
        train = np.mean([r["train_mb"] for r in rs])
        total = np.mean([r["total_mb"] for r in rs])
        kept = np.mean([r["n_kept"] for r in rs])
        rows[m] = {"roc_auc": auc.tolist(), "accuracy": acc.tolist(), "train_mb": train, "total_mb": total,
                   "n_kept": kept}
        print(f"{m:22s} {auc.mean():8.4f} ± {auc.std():6.4f} {acc.mean():8.4f} ± {acc.std():6.4f} "
              f"{train:10.1f} {total:10.1f} {kept:5.0f}")
    base, pipe = rows["sparsevfl-16"], rows["feast+sparsevfl-16"]
    d_auc = float(np.mean(pipe["roc_auc"]) - np.mean(base["roc_auc"]))
    ratio = pipe["total_mb"] / base["total_mb"]
    met = ratio < 1 and d_auc >= -0.01
    print(f"ACCEPTANCE: feast+sparsevfl-16 sends {ratio:.1%} of sparsevfl-16's bytes "
          f"({pipe['total_mb']:.1f} MB vs {base['total_mb']:.1f} MB) at ROC-AUC difference {d_auc:+.4f} "
          f"(criterion: fewer bytes and >= -0.01): {'MET' if met else 'NOT MET'}")
    out = Path(a.out) / "summary.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "d_auc": d_auc, "bytes_ratio": ratio, "met": met}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
