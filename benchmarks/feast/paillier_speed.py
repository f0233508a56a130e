"""Paillier throughput of every installed back end, both kinds of randomness, one thread and all
threads, measured in one run.

    python benchmarks/feast/paillier_speed.py [--bits 2048] [--n 300] [--repeat 3] [--json out.json]

Its successor for the question "how close is each operation to its limit on one core, at full
randomness" is ``benchmarks/crypto/paillier_bench.py`` (owner and non-owner encryption, re-randomisation,
decryption, the background pool, python-paillier and HEU, and the bounds, in one run). This script
stays for the table of every back end with both kinds of randomness and both thread settings.

Rows: each back end (``python``, ``phe``, ``pypaillier``, ``heu``; those not installed are listed
as such) with each randomness it can draw (``full``: ``r**n`` with ``r`` uniform, Paillier 1999;
``short``: ``h_s**a`` with a ``ceil(bits/2)``-bit exponent, Damgård-Jurik-Nielsen 2010; see
``verticalfs.crypto.backends``), and ``phe (own API)``: python-paillier's ``encrypt`` and
``decrypt`` of floats, the plain reference. For each, on ``--n`` float64 values in [-1, 1)
(32 fractional bits), :func:`paillier_rates.rates` (beside this script):

- ``enc/s``: encryptions per second with the public key only (a party that does not hold the key);
- ``enc/s (holder)``: with the private key (the ``python`` back end then works mod ``p**2`` and
  ``q**2``; the FATE protocols encrypt at the key holder);
- ``dec/s``: decryptions per second (the CRT decryption for all; ``phe`` uses its own CRT
  ``raw_decrypt``);
- ``pool r^n/s``: precomputing ``--n`` obfuscators (:meth:`~verticalfs.crypto.PrivateKey.precompute`)
  — the cost a pool moves offline, not removes — and ``enc/s (pooled)``, the online encryptions that
  consume them (one modular multiplication each);
- ``keygen s``.

Every row is measured twice, each time in a fresh process: with one thread (the process pinned to
one CPU, ``RAYON_NUM_THREADS=1``) and with all the machine's threads. Only ``pypaillier``
parallelises (rayon); the others are single-threaded either way. Each figure is the median of
``--repeat`` repetitions (a new key each); the last column is enc/s relative to ``phe (own API)``
in the same thread setting.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # paillier_rates beside this script
try:
    from verticalfs.crypto import AUTO_ORDER, available_backends, backend_info
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from verticalfs.crypto import AUTO_ORDER, available_backends, backend_info
from paillier_rates import phe_rates, rates  # noqa: E402

COLUMNS = [("encrypt_per_s", "enc/s"), ("encrypt_holder_per_s", "enc/s (holder)"), ("decrypt_per_s", "dec/s"),
           ("precompute_per_s", "pool r^n/s"), ("encrypt_pooled_per_s", "enc/s (pooled)"),
           ("keygen_seconds", "keygen s")]
REFERENCE = "phe (own API)"


def measure(backends: list[str], bits: int, n: int, repeat: int) -> dict:
    """All rows in this process (the worker)."""
    info, have = backend_info(), set(available_backends())
    rows: dict = {}
    for name in backends:
        for kind in ("full", "short"):
            key = f"{name} {kind}"
            if name not in have:
                rows[key] = {"available": False, "why": "not installed"}
                continue
            if kind not in info[name]["randomness"]:
                rows[key] = {"available": False, "why": f"draws only {'/'.join(info[name]['randomness'])}"}
                continue
            if bits < info[name]["min_bits"]:
                rows[key] = {"available": False, "why": f"refuses keys under {info[name]['min_bits']} bits"}
                continue
            runs = [rates(name, bits=bits, n=n, pool=True, randomness=kind, insecure=bits < 2048)
                    for _ in range(repeat)]
            rows[key] = {k: statistics.median(r[k] for r in runs) for k, _ in COLUMNS}
            rows[key].update(available=True, licence=info[name]["licence"])
    if "phe" in have:
        runs = [phe_rates(bits, n) for _ in range(repeat)]
        rows[REFERENCE] = {k: statistics.median(r[k] for r in runs)
                           for k in ("encrypt_per_s", "decrypt_per_s", "keygen_seconds")}
        rows[REFERENCE]["available"] = True
    else:
        rows[REFERENCE] = {"available": False, "why": "phe not installed"}
    return rows


def run_worker(threads: str, args) -> dict:
    """One fresh process per thread setting (thread pools are sized once per process)."""
    env = dict(os.environ)
    if threads == "1":
        env["RAYON_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "1"
    else:
        env.pop("RAYON_NUM_THREADS", None)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        cmd = [sys.executable, __file__, "--worker", threads, "--bits", str(args.bits), "--n", str(args.n),
               "--repeat", str(args.repeat), "--backends", args.backends, "--json", str(out)]
        subprocess.run(cmd, env=env, check=True)
        return json.loads(out.read_text())


def print_table(title: str, rows: dict) -> None:
    print(title)
    print(f"{'back end':<18}" + "".join(f"{h:>15}" for _, h in COLUMNS) + f"{'enc vs phe':>12}")
    ref = rows.get(REFERENCE, {}).get("encrypt_per_s")
    for key, row in rows.items():
        if not row.get("available"):
            print(f"{key:<18}  ({row.get('why')})")
            continue
        cells = "".join((f"{row[k]:>15.3f}" if k == "keygen_seconds" else f"{row[k]:>15.0f}") if k in row
                        else f"{'-':>15}" for k, _ in COLUMNS)
        rel = f"{row['encrypt_per_s'] / ref:>11.2f}x" if ref else f"{'-':>12}"
        print(f"{key:<18}{cells}{rel}")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--n", type=int, default=300, help="values encrypted/decrypted per measurement")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backends", default="python,phe,pypaillier,heu")
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if args.worker is not None:  # the measuring process
        if args.worker == "1" and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        rows = measure(backends, args.bits, args.n, args.repeat)
        Path(args.json).write_text(json.dumps(rows))
        return rows
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    results: dict = {"bits": args.bits, "n": args.n, "repeat": args.repeat, "auto_order": list(AUTO_ORDER),
                     "cpus": ncpu, "threads": {}}
    print(f"Paillier throughput, {args.bits}-bit keys, {args.n} values, median of {args.repeat}; "
          f"operations per second")
    for threads, label in (("1", "one thread"), ("all", f"all threads ({ncpu} CPUs)")):
        rows = run_worker(threads, args)
        results["threads"][threads] = rows
        print()
        print_table(f"-- {label}", rows)
    have = set(available_backends())
    results["auto"] = {kind: next((b for b in AUTO_ORDER if b in have and kind in backend_info()[b]["randomness"]
                                   and (b != "pypaillier" or args.bits >= 2048)), "python")
                       for kind in ("full", "short")}
    print(f"\nauto -> {results['auto']['full']} (randomness='full', the default), "
          f"{results['auto']['short']} (randomness='short')")
    print("Decryption is the CRT method in every back end (phe: its own raw_decrypt), so dec/s is close for all.")
    if args.json:
        tmp = Path(args.json).with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1))
        tmp.replace(args.json)
    return results


if __name__ == "__main__":
    main()
