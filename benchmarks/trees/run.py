"""SecureBoost side by side, in one run: ``secureboost`` against central XGBoost ``hist`` (the same
depth, trees, bins and penalties), against its own operation-count bound, against SecureBoost's
unpacked protocol, and FATE's HeteroSecureBoost where ``pyfate`` runs (issue 51, item 6).

For each case (adult and phishing over 2 and 3 parties, and a synthetic table of a million rows) it
prints, per tree: seconds; bytes; the gradient ciphertexts the label holder sends and the
histogram ciphertexts the parties return; the Paillier operations (the label holder's encryptions
and decryptions, the parties' additions, squarings, masks and re-randomisations: counted by the code
that does them); the operation-count bound (every operation at the faster of its rates measured just before and just
after the case) and the ratio of the measured seconds to it; the unpacked protocol's ciphertexts (two a row,
``g`` and ``h``, and two a histogram cell) and FATE 2.x's (one a row, ``g`` and ``h`` packed, and its
cipher-compressed histograms) beside ours; and the test AUC against XGBoost's.

Beside the measured ciphertexts-per-tree ratio against the unpacked protocol (the issue's goal:
at least 10x) it prints the packing's bound of that ratio for the case (``packing_bound``): from the
code's own layout (:class:`~verticalfs.histogram.gradients.GradientLayout`) and count
(:func:`~verticalfs.methods.secureboost.method.tree_ciphertexts`), a tree's ciphertexts with ``m``
rows a ciphertext are ``ceil(n / m) P + H sum_q ceil(sum_f (b_qf - 1) / c(m)) P`` (``n`` rows, ``H``
histograms a party, ``b_qf`` bins of party ``q``'s feature ``f``, of which the skipped one is not
returned, the others packed across features; ``P`` parts a row, ``c(m) = floor((G(m) - m + 1) / m)``
bins a returned ciphertext, ``G(m)`` groups a plaintext: fewer for ``m > 1``, whose slots carry the
40-bit masks), for every ``m`` the slot layout allows; the
best ratio over ``m`` and its ``m`` are what packing can give. ``--min-ciphertexts`` runs with the
``m`` of fewest ciphertexts (``packing = "ciphertexts"``) instead of least time.

    python benchmarks/trees/run.py                   # adult, phishing (2, 3 parties), 1M synthetic
    python benchmarks/trees/run.py --quick           # breast cancer only, seconds (the CI test)
    python benchmarks/trees/run.py --cases adult-2 --trees 5
    python benchmarks/trees/run.py --cases adult-2 --min-ciphertexts   # m chosen for fewest ciphertexts

Data from ``VERTICALFS_DATA`` (or ``--data-dir``); the machine's load is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import verticalfs
from verticalfs.crypto import EncryptedArray, generate_keypair
from verticalfs.exceptions import CryptoError
from verticalfs.federation import Federation
from verticalfs.histogram import gradients as HG
from verticalfs.methods import create

#: the cases: name -> (data set, parties); ``synth1m`` is a generated table
CASES = {"adult-2": ("adult", 2), "adult-3": ("adult", 3), "phishing-2": ("phishing", 2),
         "phishing-3": ("phishing", 3), "synth1m": ("synth1m", 2)}
QUICK = {"cancer-3": ("breast_cancer", 3)}


def load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def rates(key_bits: int, insecure: bool, n: int = 600) -> dict[str, float]:
    """Seconds per operation at ``key_bits``, measured now: the label holder's encryption (its CRT
    and fixed-base obfuscators), an addition (a product mod n**2, as a histogram sums: one reduceat), a
    squaring mod n**2 (Horner's shifts), a decryption (CRT) and a re-randomisation (a fresh r**n)."""
    pub, priv = generate_keypair(key_bits, insecure=insecure)
    EncryptedArray.encrypt(priv, np.arange(32), precision=0).rerandomize()  # warm: tables, the key's operations
    t = time.perf_counter()
    e = EncryptedArray.encrypt(priv, np.arange(n), precision=0)
    enc = (time.perf_counter() - t) / n
    codes = np.zeros((n, 1), dtype=np.int64)
    t = time.perf_counter()
    for _ in range(5):
        e.group_sum(codes, 1)
    add = (time.perf_counter() - t) / (5 * n)
    k = 64
    w = pub.max_int.bit_length() // 2 - 2  # a shift of w squarings a pair
    t = time.perf_counter()
    e[:k].pack(np.full(k // 2, 2), w)
    sq = (time.perf_counter() - t) / (k // 2 * w)
    t = time.perf_counter()
    e[:k].decrypt_mantissas(priv)
    dec = (time.perf_counter() - t) / k
    t = time.perf_counter()
    e[:k // 2].rerandomize()
    rer = (time.perf_counter() - t) / (k // 2)
    return {"encrypt": enc, "add": add, "square": sq, "decrypt": dec, "rerandomize": rer}


def synth1m(seed: int = 0):
    from sklearn.datasets import make_classification

    from verticalfs.data.table import Table

    X, y = make_classification(n_samples=1_000_000, n_features=20, n_informative=10, n_redundant=4,
                               random_state=seed)
    import pandas as pd

    return Table(name="synth1m", X=pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])]), y=y, task="binary")


def build(name: str, parties: int, seed: int):
    if name == "synth1m":
        return verticalfs.build_data(synth1m(seed), parties=parties, seed=seed)
    return verticalfs.build_data(name, parties=parties, seed=seed)


def xgboost_auc(data, p: dict) -> tuple[float, float]:
    """XGBoost ``hist`` on the pooled columns with the same parameters: test AUC, seconds per tree."""
    import xgboost as xgb
    from sklearn.metrics import roc_auc_score

    X = {s: np.concatenate([q.X[s] for q in data.parties], 1) for s in ("train", "test")}
    y = {s: data.labels.y[s] for s in ("train", "test")}
    clf = xgb.XGBClassifier(n_estimators=p["n_estimators"], max_depth=p["max_depth"], learning_rate=p["learning_rate"],
                            max_bin=p["n_bins"], reg_lambda=p["reg_lambda"], reg_alpha=p["reg_alpha"],
                            min_child_weight=p["min_child_weight"], tree_method="hist", n_jobs=1)
    t = time.perf_counter()
    clf.fit(X["train"], y["train"])
    secs = (time.perf_counter() - t) / p["n_estimators"]
    return float(roc_auc_score(y["test"], clf.predict_proba(X["test"])[:, 1])), secs


def secureboost(data, p: dict, seed: int) -> dict:
    for k in HG.OPS:
        HG.OPS[k] = 0
    m = create("secureboost", seed=seed, **p)
    fed = Federation.in_process(data)
    t = time.perf_counter()
    m.fit(fed)
    total = time.perf_counter() - t
    trees = m.info_["per_tree"]
    T = len(trees)
    led = fed.ledger
    return {"auc": m.metrics_["roc_auc"], "trees": T, "seconds_per_tree": float(np.mean([f["seconds"] for f in trees])),
            "total_seconds": total,
            "bytes_per_tree": (led.total_bytes - led.bytes_where(phase="setup")) / T,
            "gradient_ciphertexts": float(np.mean([f["ciphertexts"] for f in trees])),
            "returned_ciphertexts": float(np.mean([f["returned_ciphertexts"] for f in trees])),
            "histograms": float(np.mean([f["histograms"] for f in trees])),
            "rows": float(np.mean([f["rows"] for f in trees])),
            "layout": trees[-1]["layout"], "ops": {k: v / T for k, v in HG.OPS.items()},
            "cells": {q: int(n.sum()) for q, n in m.booster_.bin_nums.items()},
            "bin_nums": {q: [int(b) for b in n] for q, n in m.booster_.bin_nums.items()},
            "plain_bits": m.booster_.pub.max_int.bit_length() - 1, "values": 2 * m.booster_.K,
            "precision": int(m.params.precision), "packing": m.params.packing,
            "parties": len(data.parties), "key_bits": m.info_["key_bits"]}


def bound(run: dict, r: dict) -> dict:
    """The operation-count bound of one tree: every Paillier operation of it at its measured rate."""
    ops = run["ops"]
    counts = {"encrypt": run["gradient_ciphertexts"], "add": ops["additions"] + ops["masks"],
              "square": ops["squarings"], "decrypt": run["returned_ciphertexts"], "rerandomize": ops["sealed"]}
    secs = {k: counts[k] * r[k] for k in counts}
    return {"counts": counts, "seconds": sum(secs.values()), "by_op": secs}


def protocols(run: dict) -> dict:
    """Ciphertexts per tree of SecureBoost's unpacked protocol (g and h each a ciphertext: two a row,
    two a histogram cell) and of FATE 2.x's (one a row, g and h packed; its histograms cipher-compressed
    like ours with one row a ciphertext), for the same rows, histograms and bins as our run."""
    cells = sum(run["cells"].values())
    hists_per_party = run["histograms"] / max(1, run["parties"])
    per_hist_cells = cells  # every party's every bin, once a histogram (all parties together)
    unpacked = 2 * run["rows"] + 2 * hists_per_party * per_hist_cells
    # FATE: g and h in one plaintext (its GH packing), and its histograms packed into ciphertexts of
    # (key bits - 1) // (2 * slot) bins, slot = precision + bits(rows) (FATE's cipher compressor)
    slot = 53 + int(run["rows"]).bit_length()  # FATE encodes g, h as 53-bit fixed point
    per_ct = max(1, (run["key_bits"] - 2) // (2 * slot))
    fate = run["rows"] + hists_per_party * math.ceil(per_hist_cells / per_ct)
    ours = run["gradient_ciphertexts"] + run["returned_ciphertexts"]
    return {"unpacked": unpacked, "fate": fate, "ours": ours, "gradients_unpacked": 2 * run["rows"]}


def packing_bound(run: dict) -> dict:
    """The packing's bound of the ciphertexts-per-tree ratio against the unpacked protocol, for the
    run's rows, histograms a party and bins (see the module docstring): every ``m`` the slot layout
    allows, the count of each (the code's own :func:`tree_ciphertexts`), the best ratio and its ``m``."""
    from verticalfs.methods.secureboost.method import tree_ciphertexts

    n = max(1, int(round(run["rows"])))
    hpp = run["histograms"] / max(1, run["parties"])
    unpacked = 2 * run["rows"] + 2 * hpp * sum(run["cells"].values())
    nums = {q: np.asarray(v) for q, v in run["bin_nums"].items()}
    per_m: dict[int, float] = {}
    for m in range(1, 64):
        try:
            lay = HG.GradientLayout(run["values"], run["precision"], n, run["plain_bits"], m)
        except CryptoError:
            break
        per_m[m] = tree_ciphertexts(lay, n, nums, hpp)
    best = min(per_m, key=lambda m: per_m[m])
    return {"ciphertexts_by_m": per_m, "ratio_by_m": {m: unpacked / c for m, c in per_m.items()}, "best_m": best,
            "best_ratio": unpacked / per_m[best], "unpacked": unpacked, "histograms_per_party": hpp}


def fate_python() -> str | None:
    exe = os.environ.get("FATE_PYTHON", "/tmp/fate_venv/bin/python")
    return exe if Path(exe).exists() else None


def fate_attempt() -> str:
    """Whether FATE's HeteroSecureBoost (``pyfate``, a benchmark-only environment: never a dependency)
    imports here; the line printed says what happened."""
    import subprocess

    exe = fate_python()
    if exe is None:
        return "pyfate: no benchmark environment (python -m venv /tmp/fate_venv; pip install pyfate==2.2.0)"
    code = "from fate.ml.ensemble import HeteroSecureBoostGuest, HeteroSecureBoostHost; print('ok')"
    done = subprocess.run([exe, "-c", code], capture_output=True, text=True, timeout=600)
    if done.returncode == 0:
        return f"pyfate: HeteroSecureBoostGuest/Host import in {exe}"
    last = (done.stderr.strip().splitlines() or ["?"])[-1]
    return f"pyfate: does not import ({last})"


def fate_run(data, p: dict, folder: Path) -> dict:
    """FATE 2.x's HeteroSecureBoost on the same rows and parameters in its standalone launcher: the
    first party's columns and the labels at its guest, every other party a host (``fate_secureboost.py``)."""
    import subprocess

    import pandas as pd

    exe = fate_python()
    if exe is None:
        return {"error": "no pyfate environment"}
    folder.mkdir(parents=True, exist_ok=True)
    job = {"params": p, "hosts_train": {}, "hosts_test": {}, "out": str(folder / "fate_out.json")}
    parties = ["guest:9999"]
    for k, q in enumerate(data.parties):
        for s in ("train", "test"):
            df = pd.DataFrame(np.asarray(q.X[s], dtype=np.float64), columns=[f"x{j}" for j in range(q.n_features)])
            df.insert(0, "id", [f"{s}{i}" for i in range(len(df))])
            if k == 0:
                df.insert(1, "y", np.asarray(data.labels.y[s]).astype(int))
            path = folder / f"{q.name}_{s}.csv"
            df.to_csv(path, index=False)
            if k == 0:
                job[f"guest_{s}"] = str(path)
            else:
                job[f"hosts_{s}"][str(10000 + k - 1)] = str(path)
        if k:
            parties.append(f"host:{10000 + k - 1}")
    (folder / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "FATE_JOB": str(folder / "job.json")}
    script = Path(__file__).with_name("fate_secureboost.py")
    t = time.perf_counter()
    done = subprocess.run([exe, str(script), "--parties", *parties, "--log_level", "WARNING"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=7200)
    wall = time.perf_counter() - t
    out = folder / "fate_out.json"
    if done.returncode != 0 or not out.exists():
        tail = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {done.returncode}: {tail}", "wall_seconds": wall}
    return {**json.loads(out.read_text()), "wall_seconds": wall}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--quick", action="store_true", help="breast cancer only, small trees (seconds)")
    ap.add_argument("--trees", type=int, default=5)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--bins", type=int, default=32)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--rows-per-ciphertext", type=int, default=0, help="0: the cost model's choice")
    ap.add_argument("--min-ciphertexts", action="store_true",
                    help="with --rows-per-ciphertext 0: choose the rows a ciphertext for the fewest ciphertexts a "
                         "tree (packing = ciphertexts), not the least time")
    ap.add_argument("--synth-trees", type=int, default=2, help="trees of the 1M-row case")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the figures as JSON")
    ap.add_argument("--fate", action="store_true", help="also run FATE's HeteroSecureBoost (pyfate environment)")
    ap.add_argument("--work", default="/tmp/vf_trees_bench", help="folder for FATE's files")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    cases = QUICK if args.quick else {c: CASES[c] for c in args.cases.split(",")}
    key = {"key_bits": 512, "insecure": True} if args.quick else {"key_bits": args.key_bits,
                                                                   "insecure": args.key_bits < 2048}
    print(f"load before: {load()} (1, 5, 15 min); cores {os.cpu_count()}")
    r = rates(key["key_bits"], key["insecure"])
    print("rates at {} bits (s per op): ".format(key["key_bits"])
          + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in r.items()))
    print(fate_attempt())
    out = {"rates": r, "cases": {}}
    head = ("case", "rows", "m", "AUC", "XGB AUC", "dAUC", "s/tree", "bound s", "ratio", "MB/tree", "grad cts",
            "ret cts", "unpacked cts", "x fewer", "bound x fewer (m)", "grad x fewer", "FATE cts", "XGB s/tree")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, (dset, k) in cases.items():
        data = build(dset, k, args.seed)
        T = 2 if args.quick else (args.synth_trees if dset == "synth1m" else args.trees)
        p = {"n_estimators": T, "max_depth": 2 if args.quick else args.depth, "n_bins": 8 if args.quick else args.bins,
             "learning_rate": 0.3, "reg_lambda": 1.0, "reg_alpha": 0.0, "min_child_weight": 1.0,
             "rows_per_ciphertext": args.rows_per_ciphertext,
             "packing": "ciphertexts" if args.min_ciphertexts else "time", **key}
        # the bound at the faster of the rates measured just before and just after the case: on a shared
        # machine the load changes between cases, and a rate measured slower than the run met it is not
        # a bound (a phishing tree once took 0.41x a bound from rates measured minutes earlier)
        before = rates(key["key_bits"], key["insecure"])
        run = secureboost(data, p, args.seed)
        after = rates(key["key_bits"], key["insecure"])
        rc = {op: min(before[op], after[op]) for op in before}
        xauc, xsec = xgboost_auc(data, p)
        b = bound(run, rc)
        pr = protocols(run)
        pb = packing_bound(run)
        fate = fate_run(data, p, Path(args.work) / name) if args.fate and dset != "synth1m" else None
        out["cases"][name] = {"run": run, "xgboost": {"auc": xauc, "seconds_per_tree": xsec}, "bound": b,
                              "protocols": pr, "packing_bound": pb, "fate": fate, "load": load(),
                              "rates": rc}
        row = (name, f"{run['rows']:.0f}", str(run["layout"]["rows_per_ciphertext"]), f"{run['auc']:.4f}",
               f"{xauc:.4f}", f"{run['auc'] - xauc:+.4f}", f"{run['seconds_per_tree']:.1f}", f"{b['seconds']:.1f}",
               f"{run['seconds_per_tree'] / max(b['seconds'], 1e-9):.2f}", f"{run['bytes_per_tree'] / 1e6:.2f}",
               f"{run['gradient_ciphertexts']:.0f}", f"{run['returned_ciphertexts']:.0f}", f"{pr['unpacked']:.0f}",
               f"{pr['unpacked'] / pr['ours']:.1f}", f"{pb['best_ratio']:.1f} ({pb['best_m']})",
               f"{pr['gradients_unpacked'] / run['gradient_ciphertexts']:.1f}",
               f"{pr['fate']:.0f}", f"{xsec:.3f}")
        print("| " + " | ".join(row) + " |", flush=True)
        print(f"    {name}: bound by operation (s/tree): " + ", ".join(f"{k} {v:.1f}" for k, v in b["by_op"].items())
              + "; counts: " + ", ".join(f"{k} {v:.0f}" for k, v in b["counts"].items()) + f"; load {load()}",
              flush=True)
        print(f"    {name}: rates (us per op; the faster of just before and just after the case): "
              + ", ".join(f"{op} {v * 1e6:.1f}" for op, v in rc.items()), flush=True)
        print(f"    {name}: ciphertexts a tree by rows a ciphertext m (ratio to the unpacked protocol's "
              f"{pb['unpacked']:.0f}; {pb['histograms_per_party']:.1f} histograms a party; run with m = "
              f"{run['layout']['rows_per_ciphertext']}, packing = {run['packing']}): "
              + ", ".join(f"m={m} {c:.0f} ({pb['ratio_by_m'][m]:.1f}x)" for m, c in pb["ciphertexts_by_m"].items())
              + f"; best m={pb['best_m']}: {pb['best_ratio']:.1f}x (goal 10x)", flush=True)
        if fate is not None:
            print(f"    {name}: FATE 2.x HeteroSecureBoost (pyfate, standalone launcher, same rows and parameters): "
                  + (f"AUC {fate['auc']:.4f}, {fate['seconds_per_tree']:.1f} s/tree" if "auc" in fate
                     else fate["error"]), flush=True)
    print(f"load after: {load()}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, default=float))
    return out


if __name__ == "__main__":
    main()
    sys.exit(0)
