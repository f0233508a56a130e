"""Fingerprint every registered method: metrics, selection and ledger bytes for fixed small settings.

Used to pin refactors of the core: run it before a change with ``--save before.json`` and after
with ``--compare before.json``; the comparison prints, per method and data set, whether metrics,
selection, payload bytes per phase and overhead bytes per phase are identical, and the
differences where they are not. Besides each registered method at its ``PARAMS``, ``VARIANTS``
fingerprint a method under other settings (e.g. ``fedsdg-fs+secure``, its Paillier protocol).

    python benchmarks/core/fingerprint.py --save benchmarks/core/fingerprint_before.json
    python benchmarks/core/fingerprint.py --compare benchmarks/core/fingerprint_before.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings

import numpy as np
import torch

import verticalfs
from verticalfs.methods import available

#: small settings per method (the same before and after a change)
PARAMS: dict[str, dict] = {
    "vfl": {"epochs": 3, "hidden": (16, 8)},
    "central": {"epochs": 3, "hidden": (16, 8)},
    "group-lasso": {"epochs": 3, "hidden": (16, 8), "lambda_m": 0.5},
    "less-vfl": {"epochs": 4, "hidden": (16, 8), "pretrain_epochs": 1, "select_epochs_m": 3,
                 "select_epochs_s": 3},
    "local-lasso": {"epochs": 4, "hidden": (16, 8), "pretrain_epochs": 1, "select_epochs_m": 3},
    "original": {"epochs": 3, "batch_size": 64},
    "q16": {"epochs": 3, "batch_size": 64},
    "q8": {"epochs": 3, "batch_size": 64},
    "dim": {"epochs": 3, "batch_size": 64},
    "sparsevfl": {"epochs": 3, "batch_size": 64},
    "sparsevfl-16": {"epochs": 3, "batch_size": 64},
    "top-w": {"epochs": 3, "batch_size": 64, "top_w": 64},
    "pca": {"epochs": 3, "batch_size": 64},
    "autoencoder": {"epochs": 3, "batch_size": 64, "ae_epochs": 3},
    "fate-iv": {"n_select": 5, "key_bits": 512, "insecure": True},
    "fate-lasso": {"n_select": 5, "key_bits": 512, "insecure": True, "epochs": 2, "rounds": 2},
    "feast": {"n_select": 5},
    "cfeast": {"n_select": 5},
    "mi": {"n_select": 5},
    "random": {"n_select": 5},
    "raw": {"n_select": 5},
    "all-features": {"epochs": 3, "batch_size": 64, "hidden": (16, 8)},
    "vflfs": {"epochs": 3, "batch_size": 64, "hidden": (16, 8)},
    "sefs": {"epochs": 3, "ss_epochs": 2, "batch_size": 64, "hidden": (16, 8)},
    "compfs": {"epochs": 3, "batch_size": 64, "hidden": (8,), "n_learners": 3, "top_k": 4},
    "original-gate": {"epochs": 3, "batch_size": 64, "hidden": (16, 8)},
    "fedsdg-fs": {"epochs": 3, "batch_size": 64, "hidden": (16, 8), "secure": False},
    "sffs": {"key_bits": 512, "insecure": True, "ratio": 0.5},  # the half of before issue 53's n_select="auto"
    "ms-gini": {"key_bits": 512, "insecure": True, "ratio": 0.5},
    "icafs": {"epochs": 3, "hidden": (16, 8), "synth_steps": 3, "synth_batch": 64, "channels": 4,
              "code_dim": 8, "feature_dim": 8, "refit_epochs": 1, "max_modes": 3},
}

#: further fingerprints of a method under other settings: name -> (method, params)
VARIANTS: dict[str, tuple[str, dict]] = {
    # Algorithms 1-3 under Paillier (512-bit keys): the secure loop of SecureFedSDGTrainer
    "fedsdg-fs+secure": ("fedsdg-fs", {"epochs": 2, "batch_size": 128, "hidden": (8, 4), "embedding_dim": 4,
                                       "top_hidden": (4,), "key_bits": 512, "insecure": True}),
}

DATASETS = {
    "breast_cancer-3p-noise0.5": dict(dataset="breast_cancer", parties=3, noise=0.5, seed=0),
    "wine-2p-overlap1": dict(dataset="wine", parties=2, overlap=1, seed=0),
}


def _clean(v):
    if isinstance(v, float):
        return None if math.isnan(v) else v
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, np.ndarray):
        return _clean(v.tolist())
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return _clean(float(v))
    return v


def fingerprint(method: str, data, params: dict) -> dict:
    try:
        res = verticalfs.run(method, data, seed=0, params=params)
    except verticalfs.exceptions.VerticalFSError as exc:  # e.g. a binary-only method on 3 classes
        return {"error": f"{type(exc).__name__}: {exc}"}
    led = res.federation.ledger
    by_phase_payload: dict[str, int] = {}
    by_phase_overhead: dict[str, int] = {}
    by_phase_messages: dict[str, int] = {}
    for r in led.records():
        by_phase_payload[r.phase] = by_phase_payload.get(r.phase, 0) + r.payload
        by_phase_overhead[r.phase] = by_phase_overhead.get(r.phase, 0) + r.overhead
        by_phase_messages[r.phase] = by_phase_messages.get(r.phase, 0) + 1
    hist = [{k: v for k, v in h.items() if isinstance(v, (int, float)) and k not in ("bytes", "bytes_total")}
            for h in res.history]
    return _clean({
        "metrics": res.metrics,
        "history": hist,
        "kept": {p: e["kept"] for p, e in res.selection["parties"].items()},
        "payload_by_phase": by_phase_payload,
        "overhead_by_phase": by_phase_overhead,
        "messages_by_phase": by_phase_messages,
        "total_bytes": led.total_bytes,
    })


def collect(methods) -> dict:
    torch.set_num_threads(1)
    out: dict = {}
    for dname, spec in DATASETS.items():
        spec = dict(spec)
        data = verticalfs.build_data(spec.pop("dataset"), **spec)
        for m in methods:
            method, params = VARIANTS.get(m, (m, PARAMS.get(m, {})))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out.setdefault(dname, {})[m] = fingerprint(method, data, params)
            print(f"{dname:28s} {m:14s} done", file=sys.stderr)
    return out


def _same(a, b, tol=0.0) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y, tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= tol
    return a == b


def compare(before: dict, after: dict) -> int:
    rows, n_bad = [], 0
    for dname, meths in before.items():
        for m, b in meths.items():
            a = after.get(dname, {}).get(m)
            if a is None:
                rows.append((dname, m, "missing after", "", "", "", ""))
                n_bad += 1
                continue
            if "error" in b or "error" in a:
                same = ("error" in b) == ("error" in a)
                rows.append((dname, m, "error both" if same else "ERROR CHANGED", "", "", "", ""))
                n_bad += not same
                continue
            met = _same(b["metrics"], a["metrics"]) and _same(b["history"], a["history"])
            sel = b["kept"] == a["kept"]
            phases = sorted(set(b["payload_by_phase"]) | set(a["payload_by_phase"]))
            pay_diff = {ph: a["payload_by_phase"].get(ph, 0) - b["payload_by_phase"].get(ph, 0) for ph in phases}
            ovh_diff = {ph: a["overhead_by_phase"].get(ph, 0) - b["overhead_by_phase"].get(ph, 0) for ph in phases}
            msg_diff = {ph: a["messages_by_phase"].get(ph, 0) - b["messages_by_phase"].get(ph, 0) for ph in phases}
            fmt = lambda d: ", ".join(f"{k} {v:+d}" for k, v in d.items() if v) or "identical"  # noqa: E731
            rows.append((dname, m, "identical" if met else "DIFFERENT", "identical" if sel else "DIFFERENT",
                         fmt(pay_diff), fmt(ovh_diff), fmt(msg_diff)))
            n_bad += (not met) + (not sel)
    head = ("data", "method", "metrics+history", "selection", "payload bytes", "overhead bytes", "messages")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return n_bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--save", help="write the fingerprints to this JSON file")
    ap.add_argument("--compare", help="compare against fingerprints saved earlier")
    ap.add_argument("--methods", help="comma-separated subset of methods and VARIANTS (default: every registered "
                    "method and every variant)")
    args = ap.parse_args()
    methods = args.methods.split(",") if args.methods else [*available(), *VARIANTS]
    unknown = [m for m in methods if m not in available() and m not in VARIANTS]
    if unknown:
        ap.error(f"unknown method or variant {unknown}; known: {[*available(), *VARIANTS]}")
    fp = collect(methods)
    if args.save:
        with open(args.save, "w") as f:
            json.dump(fp, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare) as f:
            before = json.load(f)
        if args.methods:
            before = {d: {m: v for m, v in ms.items() if m in methods} for d, ms in before.items()}
        sys.exit(1 if compare(before, fp) else 0)


if __name__ == "__main__":
    main()
