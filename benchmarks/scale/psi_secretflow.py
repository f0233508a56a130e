"""SecretFlow's PSI (the `spu` wheel: ECDH, KKRT16, RR22) between two processes on 127.0.0.1 (issue 55).

Measures what an OPRF/VOLE-based PSI costs here, beside verticalfs's ECDH engines
(benchmarks/scale/psi.py). Each side runs in a process of its own; they talk over SecretFlow's own
link (brpc over TCP on two loopback ports), not over verticalfs's messages; their input is a CSV
file of ids each (``c0 .. c{n-1}`` for the receiver, half of them shared with the sender's), the
receiver writes the intersection to a CSV file. Prints per protocol and size: wall seconds, each
side's CPU seconds and peak RSS, and the intersection found (checked).

`spu` pins ``numpy<2`` and ``jax<=0.4.34`` (verticalfs's environment has numpy 2): run it in an
environment of its own, e.g.::

    python3 -m venv /tmp/sf && /tmp/sf/bin/pip install spu==0.9.5
    /tmp/sf/bin/python benchmarks/scale/psi_secretflow.py --sizes 1000000 --protocols RR22,KKRT,ECDH

(This script imports neither verticalfs nor anything outside the standard library, numpy and spu.)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _write_ids(path: Path, ids: np.ndarray) -> None:
    with open(path, "w") as f:
        f.write("id\n")
        for a in range(0, len(ids), 1 << 20):
            f.write("\n".join(np.char.add("c", ids[a:a + (1 << 20)].astype(str)).tolist()))
            f.write("\n")


def _side(rank: int, protocol: str, ports: list[int], folder: str, out) -> None:
    import spu.libspu.link as link
    import spu.psi as psi

    desc = link.Desc()
    desc.id = "verticalfs-bench"
    for r in range(2):
        desc.add_party(f"p{r}", f"127.0.0.1:{ports[r]}")
    desc.recv_timeout_ms = 3600 * 1000
    lctx = link.create_brpc(desc, rank)
    conf = psi.PsiExecuteConfig(
        protocol_conf=psi.PsiProtocolConfig(protocol=getattr(psi.PsiProtocol, f"PROTOCOL_{protocol}"),
                                            receiver_rank=0, broadcast_result=False,
                                            ecdh_params=psi.EcdhParams(curve=psi.EllipticCurveType.CURVE_25519)),
        input_params=psi.InputParams(path=f"{folder}/in{rank}.csv", selected_keys=["id"], keys_unique=True),
        output_params=psi.OutputParams(path=f"{folder}/out{rank}.csv", disable_alignment=True))
    t, c = time.perf_counter(), time.process_time()
    report = psi.psi_execute(conf, lctx)
    out.put({"rank": rank, "seconds": time.perf_counter() - t, "cpu_s": time.process_time() - c,
             "found": int(report.intersection_count),
             "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    lctx.stop_link()


def _ports() -> list[int]:
    out = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            out.append(s.getsockname()[1])
    return out


def run_one(protocol: str, n: int) -> dict:
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="vfs-sfpsi-") as d:
        _write_ids(Path(d) / "in0.csv", np.arange(n))
        _write_ids(Path(d) / "in1.csv", np.arange(n // 2, n // 2 + n))
        q = ctx.Queue()
        ports = _ports()
        procs = [ctx.Process(target=_side, args=(r, protocol, ports, d, q)) for r in range(2)]
        t = time.perf_counter()
        for p in procs:
            p.start()
        sides = sorted((q.get(timeout=3600) for _ in procs), key=lambda s: s["rank"])
        for p in procs:
            p.join(60)
        wall = time.perf_counter() - t
        out_rows = sum(1 for _ in open(Path(d) / "out0.csv")) - 1
    return {"protocol": protocol, "n": n, "wall_s": wall, "sides": sides, "correct": out_rows == n - n // 2}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--protocols", default="RR22,KKRT,ECDH")
    a = ap.parse_args(argv)
    print(f"SecretFlow PSI (spu), n x n ids (half shared), two processes on 127.0.0.1; {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f} at start", flush=True)
    rows = []
    for proto in a.protocols.split(","):
        for n in [int(s) for s in a.sizes.split(",")]:
            r = run_one(proto, n)
            rows.append(r)
            rec, snd = r["sides"]
            print(f"{proto:>5} {n:>11,} x {n:<11,} {r['wall_s']:7.1f} s wall (both processes, from spawn)   "
                  f"PSI itself {rec['seconds']:6.1f} s; CPU receiver {rec['cpu_s']:5.1f} s, "
                  f"sender {snd['cpu_s']:5.1f} s;"
                  f" peak RSS {rec['peak_mb']:.0f} / {snd['peak_mb']:.0f} MB; intersection "
                  f"{rec['found']:,} {'correct' if r['correct'] else 'WRONG'}; load {os.getloadavg()[0]:.1f}",
                  flush=True)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
