"""Diagnostic: which input features does ICAFS's selection pick, under other component -> feature
mappings? (Not a table of the paper: the mapping from embedding components to input features is
ours, issue item 3, and on USPS ICAFS's pick is no better than a random half.)

    python benchmarks/icafs/mapping.py --data-dir ../shared/datasets --dataset USPS --seeds 0,1,2,3,4

For each seed it trains ICAFS once (stages 1-3 at the defaults, K = 2) and, from that one trained
model, ranks each party's features four ways, keeps the top half of each party's columns and
scores each choice with section V-B's evaluation (the reference network retrained on it, as
``run.py`` does):

- ``issue``: the library's mapping (path weights ``|W3||W2||W1|`` restricted to the kept
  components, all components when none is kept): what ``icafs`` selects;
- ``x_std``: the same scores times each feature's standard deviation on the party's own training
  rows (a weight on a column that hardly varies carries little of the embedding);
- ``open_share``: path weights with each component weighted by the share of real training rows in
  which some selector's indicator gate is open, instead of the 0/1 "kept";
- ``F_filter``: the ANOVA F statistic of each column against the label (a centralised filter that
  needs the labels at the party: a reference only, not a federated method).

``--stage1 real`` is an oracle, not ICAFS: stage 1 is skipped and the gates are learnt on the real
training rows and labels in place of the synthetic ones (each party's own rows as its "synthetic"
block, the real labels at the label holder; nothing crosses that would not cross anyway, but
Algorithm 2 then sees perfect synthetic data). It separates what the synthesis costs the selection
from what stages 2-3 and the mapping give at best.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

MAPPINGS = ("issue", "x_std", "open_share", "F_filter")


def real_as_synthetic(tr, fed, data) -> None:
    """The oracle of ``--stage1 real``: each party's real training rows as its synthetic block and
    the real training labels as the synthetic labels (what ``ICAFSTrainer.synthesize`` leaves
    behind, with perfect data in it)."""
    y = np.asarray(data.labels.y["train"]).astype(np.int64)
    for party in data.parties:  # instrumentation: the in-process parties, each with the rows it trains on
        role = fed.local_runtime(party.name).role
        role.adopt_synthetic(role.data.X("train").clone())
    tr.adopt_synthesis(y, {"synthesis_seconds": 0.0, "synthesis_bytes": 0, "synthesis_rows": len(y),
                           "synthesis_oracle": 1})


def run_seed(job: dict) -> dict:
    import torch
    from sklearn.feature_selection import f_classif

    import verticalfs
    from verticalfs.federation import Federation
    from verticalfs.methods.icafs.method import ICAFSParams, ICAFSTrainer
    from verticalfs.methods.icafs.role import path_scores

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import _retrained

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    seed = job["seed"]
    data = verticalfs.build_data(job["dataset"], parties=job["parties"], seed=seed, data_dir=job["data_dir"])
    fed = Federation.in_process(data)
    tr = ICAFSTrainer(fed, "icafs", ICAFSParams(**job.get("params", {})), seed=seed)  # the defaults
    tr.setup()
    if job.get("stage1", "icafs") == "real":
        real_as_synthetic(tr, fed, data)
    else:
        tr.synthesize()
    tr.fit(phase="train")
    H = torch.from_numpy(tr.embeddings("train", phase="selection"))
    with torch.no_grad():
        share = tr.top.selected(H).numpy()
    kept = share >= 0.5
    sups: dict = {m: {} for m in MAPPINGS}
    start = 0
    for party in data.parties:
        d = tr.embedding_dims[party.name]
        model = fed.local_runtime(party.name).role.model  # instrumentation: the in-process party's encoder
        X = party.X["train"]
        comp = kept[start:start + d]
        s_issue = path_scores(model, comp if comp.any() else np.ones(d, dtype=bool))
        with torch.no_grad():
            A = model.linears[-1].weight.abs() * torch.from_numpy(share[start:start + d]).float()[:, None]
            for lin in reversed(model.linears[:-1]):
                A = A @ lin.weight.abs()
            s_open = torch.linalg.vector_norm(A, dim=0).numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            F = np.nan_to_num(f_classif(X, data.labels.y["train"])[0])
        k = max(1, int(round(0.5 * X.shape[1])))
        for name, s in zip(MAPPINGS, (s_issue, s_issue * X.std(0), s_open, F), strict=True):
            m = np.zeros(X.shape[1], dtype=bool)
            m[np.argsort(-s, kind="stable")[:k]] = True
            sups[name][party.name] = m
        start += d
    acc = {name: float(_retrained(data, sup, seed)["accuracy"]) for name, sup in sups.items()}
    return {"seed": seed, "dataset": job["dataset"], "components_kept": int(kept.sum()),
            "open_share": [round(float(v), 3) for v in share], "accuracy": acc,
            "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA"))
    ap.add_argument("--dataset", default="USPS")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--stage1", choices=("icafs", "real"), default="icafs",
                    help="'real': the oracle that learns the gates on the real training rows (see above)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    jobs = [{"seed": int(s), "dataset": args.dataset, "parties": args.clients, "data_dir": args.data_dir,
             "stage1": args.stage1}
            for s in args.seeds.split(",")]
    with ProcessPoolExecutor(args.workers) as ex:
        results = list(ex.map(run_seed, jobs))
    print(f"{args.dataset}, K = {args.clients}, stage 1 = {args.stage1}: section V-B's accuracy (%) of the top half of each party's "
          "columns under each mapping, from one trained ICAFS per seed")
    print("| seed | kept | " + " | ".join(MAPPINGS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in MAPPINGS) + " |")
    for r in results:
        print(f"| {r['seed']} | {r['components_kept']} | "
              + " | ".join(f"{100 * r['accuracy'][m]:.2f}" for m in MAPPINGS) + " |")
    print("| mean | | " + " | ".join(f"{100 * np.mean([r['accuracy'][m] for r in results]):.2f}" for m in MAPPINGS)
          + " |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
