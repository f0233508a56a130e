"""Centralised references for the LESS-VFL rows (issue 16, item 5): how well can the data be learnt
at all, on the same rows the federated runs use?

    python benchmarks/less_vfl/references.py [--data-dir DIR] [--seed 0]

For each data set of ``run.py`` (and ``digits``), on the same split as the federated runs
(``build_data(..., seed)``: the same training, validation and test rows and the same min-max
scaling), pooled columns, scikit-learn:

- ``logreg``: logistic regression, C chosen on the validation rows from 10^-3 .. 10^3;
- ``mlp``: an MLP with the federated model's total widths (parties x (64, 32)), L2 ``alpha`` chosen
  on the validation rows from 10^-4 .. 10^-2, Adam, early stopping off, 200 iterations;

each without and with 50 % Gaussian noise features (as the benchmark injects them). For MADELON
also on its 20 relevant columns alone (5 informative and 15 linear combinations of them, whose
indices are not published with the data; they are found here as the 20 columns most correlated
with other columns: the 480 probes are independent noise, so this recovers them exactly, and the
script prints the indices).
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier

from verticalfs import build_data

HERE = Path(__file__).resolve().parent
DATASETS = {"phishing": 3, "physionet2012": 4, "usps": 4, "madelon": 4, "digits": 3}


def pooled(data, split):
    return np.concatenate([p.X[split] for p in data.parties], 1), data.labels.y[split]


def best_on_val(make, grid, Xtr, ytr, Xva, yva, Xte, yte):
    best = None
    for v in grid:
        m = make(v).fit(Xtr, ytr)
        va = m.score(Xva, yva)
        if best is None or va > best[0]:
            best = (va, v, m.score(Xte, yte))
    return best  # (val accuracy, chosen value, test accuracy)


def references(data, seed, hidden) -> dict:
    Xtr, ytr = pooled(data, "train")
    Xva, yva = pooled(data, "val")
    Xte, yte = pooled(data, "test")
    lr = best_on_val(lambda c: LogisticRegression(C=c, max_iter=2000), 10.0 ** np.arange(-3, 4), Xtr, ytr, Xva, yva,
                     Xte, yte)
    mlp = best_on_val(lambda a: MLPClassifier(hidden, alpha=a, max_iter=200, random_state=seed),
                      10.0 ** np.arange(-4, -1), Xtr, ytr, Xva, yva, Xte, yte)
    return {"logreg": lr, "mlp": mlp, "n_features": Xtr.shape[1]}


def relevant_madelon(data) -> np.ndarray:
    """The 20 columns with the largest absolute correlation to any other column."""
    X, _ = pooled(data, "train")
    names = [f"{p.name}:{n}" for p in data.parties for n in p.feature_names]
    c = np.abs(np.corrcoef(X, rowvar=False))
    np.fill_diagonal(c, 0.0)
    top = np.argsort(-c.max(0))[:20]
    return np.sort(top), [names[i] for i in np.sort(top)], float(np.sort(c.max(0))[::-1][19]), \
        float(np.sort(c.max(0))[::-1][20])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA", str(HERE.parents[2] / "shared" / "datasets")))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    print(f"Centralised references, seed {args.seed}, test accuracy % (hyper-parameter chosen on the validation rows)")
    print(f"{'data set':<15}{'noise':>6}{'features':>9}{'logreg':>9}{'(C)':>8}{'mlp':>8}{'(alpha)':>9}")
    for name in args.datasets.split(","):
        k = DATASETS[name]
        hidden = (64 * k, 32 * k)
        for noise in (0.0, 0.5):
            data = build_data(name, parties=k, noise=noise, seed=args.seed, data_dir=args.data_dir)
            r = references(data, args.seed, hidden)
            print(f"{name:<15}{noise:>6.1f}{r['n_features']:>9}{100 * r['logreg'][2]:>9.2f}{r['logreg'][1]:>8.0e}"
                  f"{100 * r['mlp'][2]:>8.2f}{r['mlp'][1]:>9.0e}", flush=True)
            if name == "madelon" and noise == 0.0:
                idx, names, c20, c21 = relevant_madelon(data)


                Xtr, ytr = pooled(data, "train")
                Xva, yva = pooled(data, "val")
                Xte, yte = pooled(data, "test")
                lr = best_on_val(lambda c: LogisticRegression(C=c, max_iter=2000), 10.0 ** np.arange(-3, 4),
                                 Xtr[:, idx], ytr, Xva[:, idx], yva, Xte[:, idx], yte)
                mlp = best_on_val(lambda a: MLPClassifier((64, 32), alpha=a, max_iter=500, random_state=args.seed),
                                  10.0 ** np.arange(-4, -1), Xtr[:, idx], ytr, Xva[:, idx], yva, Xte[:, idx], yte)
                print(f"{'  20 relevant':<15}{noise:>6.1f}{20:>9}{100 * lr[2]:>9.2f}{lr[1]:>8.0e}{100 * mlp[2]:>8.2f}"
                      f"{mlp[1]:>9.0e}", flush=True)
                print(f"    the 20 columns (party:column of this split): {', '.join(names)}; their max |corr| with "
                      f"another column >= {c20:.2f}, the 21st's {c21:.2f}", flush=True)

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
