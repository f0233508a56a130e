"""Diagnostic (issue 53): how well does ICAFS's feature ranking put the injected noise columns
last? One ``icafs`` run at its defaults on a built-in set with 50 % Gaussian noise columns (3
parties, seed 0, in one process); each party's ranking scores of *all* its inputs when it selected
(``ICAFSRole.ranking_scores``: the share of variance explained by the kept components since issue
53, the path scores with ``--params '{"rank": "path"}'``), then the share of the noise columns each
``select_ratio`` would remove from that one ranking, and the mean rank percentile of the noise and
of the real columns per party (0.5 each for a random ranking).

    python benchmarks/icafs/noise_ranking.py --data multiclass-synth

Measured 2026-11-28 with ``rank="path"`` (multiclass-synth, 2,706 s at load 8-14): .640 (vfl .527), 376 of 751 kept,
63 % of the noise removed at 0.5; 0.3 would remove 81 % (225 kept), 0.2 88 % (150); mean rank
percentile noise .57-.60, real .44-.46: the ranking is only a little better than chance, so the
ratio alone buys noise removal with real columns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import numpy as np


def arguments(ratios: str) -> argparse.ArgumentParser:
    """The options of this diagnostic and of ``ranking_designs.py`` beside it."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="multiclass-synth")
    ap.add_argument("--ratios", default=ratios)
    ap.add_argument("--params", default="{}", help="JSON parameters of icafs (default: its defaults)")
    return ap


def case(name: str):
    """``name`` built as both diagnostics use it (3 parties, +50 % Gaussian noise columns, seed 0,
    one thread): the data, each party's noise-column mask and an in-process federation."""
    import torch

    import verticalfs
    from verticalfs.federation import Federation

    torch.set_num_threads(1)
    data = verticalfs.build_data(name, parties=3, noise=0.5, seed=0)
    noise = {p.name: np.asarray(data.ground_truth[p.name], dtype=bool) for p in data.parties}
    return data, noise, Federation.in_process(data)


def percentiles(s: np.ndarray) -> np.ndarray:
    """Each column's rank percentile under scores ``s`` (0 = ranked first)."""
    pct = np.empty(len(s))
    pct[np.argsort(-s, kind="stable")] = np.arange(len(s)) / len(s)
    return pct


def top_share(scores: dict, noise: dict, ratio: float) -> tuple[int, int]:
    """Columns kept and noise columns among them when each party keeps its top ``ratio`` by ``scores``."""
    kept = kept_noise = 0
    for q, s in scores.items():
        top = np.argsort(-s, kind="stable")[: max(1, int(round(ratio * len(s))))]
        kept += len(top)
        kept_noise += int(noise[q][top].sum())
    return kept, kept_noise


def main(argv: list[str] | None = None) -> int:
    ap = arguments("0.5,0.4,0.3,0.25,0.2,0.15,0.1")
    ap.description = __doc__.splitlines()[0]
    a = ap.parse_args(argv)
    from verticalfs.methods import create

    data, noise, fed = case(a.data)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = create("icafs", seed=0, **json.loads(a.params)).fit(fed)
    ratio0 = float(m.params.select_ratio)
    print(f"icafs on {a.data}: accuracy {m.metrics_['accuracy']:.3f} at select_ratio {ratio0}, "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    # each party's ranking scores of all its inputs when it selected (ICAFSRole.ranking_scores)
    scores = {q: np.asarray(fed.local_runtime(q).role.ranking_scores) for q in data.party_names}
    total = sum(int(v.sum()) for v in noise.values())
    for ratio in (float(x) for x in a.ratios.split(",")):
        kept, kept_noise = top_share(scores, noise, ratio)
        print(f"select_ratio {ratio}: {kept} kept, {kept_noise} of {total} noise columns among them, "
              f"{1 - kept_noise / total:.0%} removed")
    for q, s in scores.items():
        pct = percentiles(s)
        print(f"{q}: mean rank percentile of the noise {pct[noise[q]].mean():.2f}, of the real columns "
              f"{pct[~noise[q]].mean():.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
