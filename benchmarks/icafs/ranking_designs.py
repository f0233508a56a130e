"""Diagnostic (issue 53): candidate per-input-feature rankings of an ICAFS party, side by side, from
one trained model. ICAFS (stages 1-3 at its defaults, 3 parties, seed 0, in one process) is trained
up to its selection; then, with the model of that moment, each party's input features are ranked
by each candidate, and the script prints, per candidate, the share of the injected noise columns
its top ``select_ratio`` would remove and the mean rank percentile of the noise and of the real
columns (0 = ranked first; .5 each at random: a good ranking puts the noise high).

Candidates (``G``: the gradient of the real-row loss (7) under indicator gates with respect to the
party's embeddings, its components outside the kept ones zeroed; ``J``: the party's encoder's
Jacobian, row by row; ``x - mu``: the row's feature minus its training mean):

- ``path``: the path scores of the weights (``role.path_scores``, the rule until issue 53);
- ``gxi-train`` / ``gxi-val``: ``sum_rows |G J (x - mu)|`` (gradient x input) on the training /
  validation rows;
- ``sens-train`` / ``sens-val``: ``sum_rows (G J)^2 var(x)``;
- ``taylor-val``: ``-sum_rows G J (x - mu)``: the first-order estimate of the loss increase when
  the column is replaced by its mean (signed);
- ``explained-train`` / ``explained-val``: the share of the column's variance the kept
  components explain without its own first-order contribution (``role.explained_scores``, the rule
  since issue 53); ``r2-train`` / ``r2-val``: the same with it (the plain R^2);
- ``occl-train`` / ``occl-val``: that increase measured (the column set to its mean, the loss
  evaluated again): the reference a ranking would want to match, which a party cannot compute alone.

    python benchmarks/icafs/ranking_designs.py --data multiclass-synth
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # noise_ranking beside this script
    from noise_ranking import arguments, case, percentiles, top_share

    ap = arguments("0.5,0.4,0.3")
    ap.description = __doc__.splitlines()[0]
    ap.add_argument("--save", default=None, help="save the trained parties' encoders and the rankings here")
    a = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F

    from verticalfs.methods import create
    from verticalfs.methods.icafs.method import ICAFSTrainer
    from verticalfs.methods.icafs.role import explained_scores, path_scores

    data, noise, fed = case(a.data)
    t0 = time.perf_counter()
    m = create("icafs", seed=0, **json.loads(a.params))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.check(fed)
        tr = ICAFSTrainer(fed, m.name, m.params, seed=0, codec="float32")
        tr.setup()
        tr.synthesize()
        tr.fit(phase="train")
    print(f"icafs on {a.data}: trained to the selection in {time.perf_counter() - t0:.0f} s, "
          f"accuracy {tr.history[-1].get('accuracy', float('nan')):.3f}", flush=True)
    kept = tr.kept_components()
    top = tr.top
    top.eval()
    y = {s: torch.from_numpy(tr.labels.y[s].astype(np.int64)) for s in ("train", "val")}
    H = {s: torch.from_numpy(tr.embeddings(s)) for s in ("train", "val")}

    def loss_of(Hs: torch.Tensor, s: str) -> torch.Tensor:
        return F.cross_entropy(top(Hs, hard=True)[0], y[s], reduction="sum")

    G = {}
    for s in ("train", "val"):
        Hs = H[s].clone().requires_grad_(True)
        loss_of(Hs, s).backward()
        G[s] = Hs.grad * torch.from_numpy(kept.astype(np.float32))
    with torch.no_grad():
        base = {s: float(loss_of(H[s], s)) for s in ("train", "val")}
    start = 0
    results: dict[str, dict[str, np.ndarray]] = {}
    for q in tr.parties:
        d = tr.embedding_dims[q]
        role = fed.local_runtime(q).role
        model = role.model
        model.eval()
        comp = kept[start:start + d]
        sl = slice(start, start + d)
        start += d
        mu = role.data.X("train").mean(0)
        var = role.data.X("train").var(0)
        cand = {"path": path_scores(model, comp if comp.any() else np.ones(d, dtype=bool))}
        used = comp if comp.any() else np.ones(d, dtype=bool)
        for s in ("train", "val"):
            cand[f"explained-{s}"] = explained_scores(model, role.data.X(s), used)
            cand[f"r2-{s}"] = explained_scores(model, role.data.X(s), used, own=True)
        for s in ("train", "val"):
            X = role.data.X(s).clone().requires_grad_(True)
            out = model(X)
            (gx,) = torch.autograd.grad(out, X, G[s][:, sl])  # rows x features: G J
            gx = gx.detach()
            Xc = X.detach() - mu
            cand[f"gxi-{s}"] = (gx * Xc).abs().sum(0).numpy()
            cand[f"sens-{s}"] = ((gx ** 2).sum(0) * var).numpy()
            if s == "val":
                cand["taylor-val"] = (-(gx * Xc).sum(0)).numpy()
            # measured occlusion: the column set to its training mean
            Xd = X.detach()
            occ = np.empty(Xd.shape[1])
            with torch.no_grad():
                for j in range(Xd.shape[1]):
                    Xj = Xd.clone()
                    Xj[:, j] = mu[j]
                    Hj = H[s].clone()
                    Hj[:, sl] = model(Xj)
                    occ[j] = float(loss_of(Hj, s)) - base[s]
            cand[f"occl-{s}"] = occ
        results[q] = {k: np.asarray(v, dtype=np.float64) for k, v in cand.items()}
    if a.save:
        torch.save({"results": results, "noise": noise, "kept": kept,
                    "models": {q: fed.local_runtime(q).role.model for q in tr.parties}, "top": top}, a.save)
    total = sum(int(v.sum()) for v in noise.values())
    names = list(next(iter(results.values())))
    for name in names:
        line = [f"{name:>11}"]
        for ratio in (float(x) for x in a.ratios.split(",")):
            _, kept_noise = top_share({q: c[name] for q, c in results.items()}, noise, ratio)
            line.append(f"{ratio}: {1 - kept_noise / total:4.0%} removed")
        pn = np.concatenate([percentiles(c[name])[noise[q]] for q, c in results.items()]).mean()
        pr = np.concatenate([percentiles(c[name])[~noise[q]] for q, c in results.items()]).mean()
        line.append(f"rank percentile noise {pn:.2f} real {pr:.2f}")
        print("  ".join(line), flush=True)
    print(f"{time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
