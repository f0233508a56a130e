"""The cost of the label proofs of issue 50: ``fate-iv`` and FedSDG-FS's Algorithm 1 (through
``ms-gini``, whose selection is Algorithm 1 alone) with and without them, in one run.

    python benchmarks/crypto/proofs.py [--data adult] [--rows 0] [--bits 2048] [--parties 3] [--json FILE]

Each method runs twice in one process on the same data and key size: once as an in-process run
does (no proof), once with every party's policy asking for them (``verify_labels``: the label
holder proves every label ciphertext and the class totals, each party verifies before it sums).
Printed per method and mode: the selection's wall time, the bytes of phase ``selection`` on the
ledger, the label holder's proving time and the proof's bytes, and the ratios with / without. Also
the primitive per row (prove, verify, bytes) for ``{0, 1}`` at ``--bits``. ``--rows`` keeps that
many training rows (0: all); the machine's load (``os.getloadavg``) is printed beside the figures:
these machines are shared, so compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def _fed(data, proofs_on: bool):
    from verticalfs.configuration import PartyPolicy
    from verticalfs.federation import Federation

    if not proofs_on:
        return Federation.in_process(data)
    return Federation.in_process(data, policy=PartyPolicy.permissive().model_copy(
        update={"verify_labels": True, "min_label_rows": 10}))


def _run(method: str, params: dict, data, proofs_on: bool) -> dict:
    from verticalfs.methods import get

    fed = _fed(data, proofs_on)
    m = get(method)(seed=0, **params)
    t0 = time.perf_counter()
    m.fit(fed)
    seconds = time.perf_counter() - t0
    info = m.info_
    return {"seconds": seconds, "selection_bytes": int(fed.ledger.bytes_where(phase="selection")),
            "proof_seconds": float(info.get("label_proof_seconds", 0.0)),
            "proof_bytes": int(info.get("label_proof_bytes", 0)), "selected": list(getattr(m, "selected_", []) or [])}


def _primitive(bits: int, n: int) -> dict:
    from verticalfs.crypto import EncryptedArray, generate_keypair, proofs

    pub, priv = generate_keypair(bits, insecure=bits < 2048)
    y = np.random.default_rng(0).integers(0, 2, n)
    enc = EncryptedArray.encrypt(priv, y, precision=0)
    cts = enc.ciphertexts()
    t0 = time.perf_counter()
    EncryptedArray.encrypt(priv, y, precision=0)
    t_enc = time.perf_counter() - t0
    t0 = time.perf_counter()
    pr = proofs.prove(priv, cts, y.tolist(), [0, 1])
    t_prove = time.perf_counter() - t0
    t0 = time.perf_counter()
    proofs.verify(pub, cts, [0, 1], pr)
    t_verify = time.perf_counter() - t0
    return {"bits": bits, "rows": n, "encrypt_ms_per_row": 1e3 * t_enc / n, "prove_ms_per_row": 1e3 * t_prove / n,
            "verify_ms_per_row": 1e3 * t_verify / n, "proof_bytes_per_row": len(pr) / n,
            "ciphertext_bytes": pub.ciphertext_bytes}


def main(argv=None) -> dict:
    import verticalfs

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="adult")
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA"))
    ap.add_argument("--rows", type=int, default=0, help="training rows kept (0: all)")
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--primitive-rows", type=int, default=300)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    insecure = a.bits < 2048
    test_size = 0.2
    data = verticalfs.build_data(a.data, parties=a.parties, seed=0, data_dir=a.data_dir, test_size=test_size)
    if a.rows:
        from dataclasses import replace

        keep = np.arange(min(a.rows, len(data.labels.y["train"])))
        data = replace(data, parties=[replace(p, X={**p.X, "train": p.X["train"][keep]}) for p in data.parties],
                       labels=replace(data.labels, y={**data.labels.y, "train": data.labels.y["train"][keep]}))
    n = len(data.labels.y["train"])
    out = {"data": a.data, "train_rows": n, "bits": a.bits, "parties": a.parties, "load_before": os.getloadavg(),
           "primitive": _primitive(a.bits, a.primitive_rows), "methods": {}}
    cases = [("fate-iv", {"n_select": 5, "key_bits": a.bits, "insecure": insecure}),
             ("ms-gini", {"key_bits": a.bits, "insecure": insecure})]
    for method, params in cases:
        row = {}
        for mode in (False, True):
            row["with" if mode else "without"] = _run(method, params, data, mode)
        w, wo = row["with"], row["without"]
        row["seconds_ratio"] = w["seconds"] / wo["seconds"]
        row["bytes_ratio"] = w["selection_bytes"] / max(1, wo["selection_bytes"])
        row["same_selection"] = w["selected"] == wo["selected"]
        out["methods"][method] = row
    out["load_after"] = os.getloadavg()
    p = out["primitive"]
    print(f"{a.data}: {n} training rows, {a.parties} parties, {a.bits}-bit keys; load {out['load_before']}")
    print(f"primitive ({{0, 1}}, {p['rows']} rows): encrypt {p['encrypt_ms_per_row']:.3f} ms/row, prove "
          f"{p['prove_ms_per_row']:.3f} ms/row, verify {p['verify_ms_per_row']:.3f} ms/row, "
          f"{p['proof_bytes_per_row']:.0f} B/row (ciphertext {p['ciphertext_bytes']} B)")
    print("| method | proofs | seconds | selection bytes | proving s | proof bytes | same selection |")
    print("|---|---|---|---|---|---|---|")
    for method, row in out["methods"].items():
        for mode in ("without", "with"):
            r = row[mode]
            print(f"| {method} | {mode} | {r['seconds']:.1f} | {r['selection_bytes']:,} | {r['proof_seconds']:.1f} | "
                  f"{r['proof_bytes']:,} | {row['same_selection'] if mode == 'with' else ''} |")
        print(f"| {method} | ratio | {row['seconds_ratio']:.2f}x | {row['bytes_ratio']:.2f}x | | | |")
    print(f"load after: {out['load_after']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
    return out


if __name__ == "__main__":
    main()
