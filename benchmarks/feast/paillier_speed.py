"""Paillier throughput of every installed back end, measured in one run.

    python benchmarks/feast/paillier_speed.py [--bits 2048] [--n 300] [--repeat 3] [--json out.json]

For each back end (``python``, ``phe``, ``pypaillier``, ``heu``; those not installed are listed as
such) generates a key of ``--bits`` bits and times, on ``--n`` float64 values in [-1, 1) (32
fractional bits), :func:`verticalfs.crypto.benchmark.rates`:

- ``enc/s``: encryptions per second with the public key only (a party that does not hold the key);
- ``enc/s (holder)``: with the private key (the ``python`` back end then computes ``r**n`` by the
  CRT; the FATE protocols encrypt at the key holder);
- ``dec/s``: decryptions per second (CRT; ``phe`` uses its own ``raw_decrypt``);
- ``pool r^n/s`` and ``enc/s (pooled)``: precomputing ``--n`` obfuscators ``r**n mod n**2``
  (:meth:`~verticalfs.crypto.PrivateKey.precompute`), then the online encryptions that consume
  them (one modular multiplication each).

Each figure is the median of ``--repeat`` repetitions (a new key each). ``auto`` resolves to the
first installed back end of ``verticalfs.crypto.AUTO_ORDER``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

try:
    from verticalfs.crypto import AUTO_ORDER, available_backends, backend_info
    from verticalfs.crypto.benchmark import rates
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from verticalfs.crypto import AUTO_ORDER, available_backends, backend_info
    from verticalfs.crypto.benchmark import rates

COLUMNS = [("encrypt_per_s", "enc/s"), ("encrypt_holder_per_s", "enc/s (holder)"), ("decrypt_per_s", "dec/s"),
           ("precompute_per_s", "pool r^n/s"), ("encrypt_pooled_per_s", "enc/s (pooled)"),
           ("keygen_seconds", "keygen s")]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--n", type=int, default=300, help="values encrypted/decrypted per measurement")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backends", default="python,phe,pypaillier,heu")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    info = backend_info()
    have = set(available_backends())
    results: dict = {"bits": args.bits, "n": args.n, "repeat": args.repeat, "auto_order": list(AUTO_ORDER),
                     "backends": {}}
    print(f"Paillier throughput, {args.bits}-bit keys, {args.n} values, median of {args.repeat}")
    print(f"{'back end':<11}" + "".join(f"{h:>16}" for _, h in COLUMNS))
    for name in [b.strip() for b in args.backends.split(",") if b.strip()]:
        if name not in have:
            print(f"{name:<11}  not installed")
            results["backends"][name] = {"available": False}
            continue
        runs = [rates(name, bits=args.bits, n=args.n, pool=True, insecure=args.bits < 2048)
                for _ in range(args.repeat)]
        row = {k: statistics.median(r[k] for r in runs) for k, _ in COLUMNS}
        row["licence"] = info[name]["licence"]
        results["backends"][name] = row
        print(f"{name:<11}" + "".join(f"{row[k]:>16.3f}" if k == "keygen_seconds" else f"{row[k]:>16.0f}"
                                      for k, _ in COLUMNS))
    auto = next((b for b in AUTO_ORDER if b in have and (b != "pypaillier" or args.bits >= 2048)), "python")
    results["auto"] = auto
    print(f"auto -> {auto}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
