"""PSI at scale (issue 39): seconds, ids/s and peak RSS per side, openmined-psi vs ristretto255.

The label holder and the party each run in a process of their own (spawned), exchanging the
library's PSI messages as serde-encoded bytes over a pipe (the bytes a network channel carries;
no TLS). The label holder holds ids ``0 .. n-1``, the party ``n/2 .. 3n/2 - 1`` (half shared), as
int64 arrays; each side's ids are text to the engines. ``ids/s`` counts both sides' ids (``2n / s``,
as benchmarks/network does). Peak RSS is each process's own high-water mark (``ru_maxrss``; the
ristretto255 engine's workers are threads of it), beside the RSS it had before PSI started.

    python benchmarks/scale/psi.py                       # 100k and 1M, both engines, + per-op cost
    python benchmarks/scale/psi.py --sizes 100000 --engines ristretto255 --parallel processes
    python benchmarks/scale/psi.py --ten-million         # adds 10M (ristretto255: ~40 min on 2 free cores)

Without ``--ten-million`` the 10M line is extrapolated from the largest size measured (time x
10M/n; RSS by the per-id growth between the two largest sizes) and labelled so.

Goals (issue 39): 1M x 1M <= 90 s and 10M x 10M <= 15 min on 2 cores, < 1 GiB per party.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time

import numpy as np

GOAL_S = {1_000_000: 90.0, 10_000_000: 900.0}
GOAL_RSS_MB = 1024.0


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _now_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _party(conn, engine: str, n: int, workers: int | None, parallel: str, out) -> None:
    from verticalfs.psi import PsiParty
    from verticalfs.transport.serde import decode_at, encode_at

    ids = np.arange(n // 2, n // 2 + n, dtype=np.int64)
    base = _now_rss_mb()
    party = PsiParty(ids, workers=workers, parallel=parallel)
    cpu = time.process_time()
    while True:
        data = conn.recv_bytes()
        if not data:
            break
        msg, at, _ = decode_at(data)
        conn.send_bytes(encode_at(party.reply(msg), at)[0])
    out.send({"base_mb": base, "peak_mb": _rss_mb(), "cpu_s": time.process_time() - cpu})


class _PipeProxy:
    """The label holder's view of the party: a request is encoded, piped, answered, decoded."""

    name = "party"

    def __init__(self, conn) -> None:
        self.conn, self.bytes, self.messages = conn, 0, 0

    def request(self, msg, at, expect=None):
        from verticalfs.transport.serde import decode_at, encode_at

        data = encode_at(msg, at)[0]
        self.conn.send_bytes(data)
        back = self.conn.recv_bytes()
        self.bytes += len(data) + len(back)
        self.messages += 2
        reply = decode_at(back)[0]
        if expect is not None and not isinstance(reply, expect):
            raise TypeError(f"expected {expect.__name__}, got {type(reply).__name__}")
        return reply


def _holder(conn, engine: str, n: int, chunk: int, workers: int | None, parallel: str, out) -> None:
    from verticalfs.psi import intersect_with

    ids = np.arange(n, dtype=np.int64)
    base = _now_rss_mb()
    proxy = _PipeProxy(conn)
    t0, cpu = time.perf_counter(), time.process_time()
    idx = intersect_with(proxy, ids, engine=engine, chunk=chunk, workers=workers, parallel=parallel)
    secs = time.perf_counter() - t0
    conn.send_bytes(b"")
    ok = len(idx) == n - n // 2 and (len(idx) == 0 or (idx[0] == n // 2 and idx[-1] == n - 1))
    out.send({"seconds": secs, "base_mb": base, "peak_mb": _rss_mb(), "cpu_s": time.process_time() - cpu,
              "found": int(len(idx)), "correct": bool(ok), "mb": proxy.bytes / 1e6, "messages": proxy.messages})


def run_one(engine: str, n: int, *, chunk: int | None = None, workers: int | None = None,
            parallel: str = "threads") -> dict:
    """One PSI of ``n`` x ``n`` ids (half shared), each side in its own spawned process."""
    from verticalfs.psi import CHUNK

    chunk = chunk or CHUNK
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    (hr, hw), (pr, pw) = ctx.Pipe(duplex=False), ctx.Pipe(duplex=False)
    procs = [ctx.Process(target=_party, args=(b, engine, n, workers, parallel, pw)),
             ctx.Process(target=_holder, args=(a, engine, n, chunk, workers, parallel, hw))]
    for p in procs:
        p.start()
    try:
        h, party = hr.recv(), pr.recv()
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return {"engine": engine, "n": n, **h, "party": party}


def per_op(count: int = 20_000) -> dict:
    """Single-process cost of the ristretto255 engine's two operations, and the scalar
    multiplication rate with 2 threads and 2 processes (libsodium through rbcl)."""
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    import rbcl

    from verticalfs.psi import blind_ids, hash_to_group, reblind_points

    key = rbcl.crypto_core_ristretto255_scalar_random()
    ids = np.arange(count, dtype=np.int64)
    t, c = time.perf_counter(), time.process_time()
    pts = hash_to_group(ids)
    hashed, hashed_cpu = count / (time.perf_counter() - t), count / (time.process_time() - c)
    blob = b"".join(pts)
    t, c = time.perf_counter(), time.process_time()
    reblind_points(key, blob)
    mults, mults_cpu = count / (time.perf_counter() - t), count / (time.process_time() - c)
    out = {"hash_to_group_per_s": hashed, "scalarmult_per_s": mults,
           "hash_to_group_per_cpu_s": hashed_cpu, "scalarmult_per_cpu_s": mults_cpu}
    half = len(blob) // 64 * 32
    pools = {"threads": lambda: ThreadPoolExecutor(2),
             "processes": lambda: ProcessPoolExecutor(2, mp_context=mp.get_context("spawn"))}
    for name, make in pools.items():
        with make() as ex:
            list(ex.map(blind_ids, [key, key], [ids[:8], ids[:8]]))  # start the workers
            t = time.perf_counter()
            list(ex.map(reblind_points, [key, key], [blob[:half], blob[half:]]))
            out[f"scalarmult_per_s_2_{name}"] = count / (time.perf_counter() - t)
    return out


def extrapolate(rows: list[dict], n: int) -> dict:
    """The figures at ``n`` ids from the two largest measured sizes: time linear in ids, RSS by
    the per-id growth of the peak between them."""
    a, b = sorted(rows, key=lambda r: r["n"])[-2:] if len(rows) > 1 else (rows[0], rows[0])
    scale = n / b["n"]
    out = {"engine": b["engine"], "n": n, "seconds": b["seconds"] * scale, "extrapolated": True,
           "cpu_s": b["cpu_s"] * scale, "party": {"cpu_s": b["party"]["cpu_s"] * scale}}
    for side in ("holder", "party"):
        pa, pb = (r if side == "holder" else r["party"] for r in (a, b))
        slope = (pb["peak_mb"] - pa["peak_mb"]) / max(b["n"] - a["n"], 1)
        out[side + "_peak_mb"] = pb["peak_mb"] + slope * (n - b["n"])
    return out


def fmt(r: dict) -> str:
    """One measured (or extrapolated) PSI as the line this script prints."""
    n, s = r["n"], r["seconds"]
    goal = GOAL_S.get(n)
    goal_s = f"goal <= {goal:>5.0f} s {'met' if s <= goal else 'NOT met'}" if goal else ""
    h, q = r["cpu_s"], r["party"]["cpu_s"]
    bound = (f"{h + q:.0f} s (one side computes at a time)" if r["engine"] == "openmined" else
             f"{(h + q) / 2:.0f} s with both sides on 2 cores, {max(h, q) / 2:.0f} s with 2 cores per side")
    extra = f"\n{'':>14}CPU {h:.0f} s holder + {q:.0f} s party: on idle cores at least {bound}"
    if r.get("extrapolated"):
        hp, pp, tag = r["holder_peak_mb"], r["party_peak_mb"], "  (extrapolated)"
    else:
        hp, pp, tag = r["peak_mb"], r["party"]["peak_mb"], ""
        extra += (f"\n{'':>14}base RSS {r['base_mb']:.0f}/{r['party']['base_mb']:.0f} MB  {r['mb']:.0f} MB in "
                  f"{r['messages']} messages{'' if r['correct'] else '  WRONG INTERSECTION'}")
    rss_ok = "met" if max(hp, pp) < GOAL_RSS_MB else "NOT met"
    return (f"{r['engine']:>12} {n:>11,} x {n:<11,} {s:9.1f} s {2 * n / s:9,.0f} ids/s  peak RSS holder "
            f"{hp:6.0f} MB party {pp:6.0f} MB (goal < {GOAL_RSS_MB:.0f} {rss_ok})  {goal_s}{tag}{extra}")


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100000,1000000", help="ids per side, comma-separated")
    ap.add_argument("--engines", default="ristretto255,openmined")
    ap.add_argument("--ten-million", action="store_true", help="measure 10M x 10M too (long)")
    ap.add_argument("--chunk", type=int, default=None, help="ids per chunk (default: verticalfs.psi.CHUNK)")
    ap.add_argument("--workers", type=int, default=None, help="ristretto255 workers per side (default 2)")
    ap.add_argument("--parallel", choices=("threads", "processes"), default="threads")
    ap.add_argument("--no-ops", action="store_true", help="skip the per-operation costs")
    args = ap.parse_args(argv)
    from verticalfs.psi import installed

    sizes = [int(x) for x in args.sizes.split(",") if x] + ([10_000_000] if args.ten_million else [])
    print("PSI, n x n ids (half shared), each side in its own process, 2 cores; goals: 1M <= 90 s, "
          "10M <= 900 s, peak RSS < 1024 MB per side", flush=True)
    rows: list[dict] = []
    for engine in args.engines.split(","):
        if not installed(engine):
            print(f"{engine:>12} not installed: skipped", flush=True)
            continue
        mine = []
        for n in sizes:
            r = run_one(engine, n, chunk=args.chunk, workers=args.workers, parallel=args.parallel)
            mine.append(r)
            print(fmt(r), flush=True)
        if 10_000_000 not in sizes:
            r = extrapolate(mine, 10_000_000)
            mine.append(r)
            print(fmt(r), flush=True)
        rows += mine
    if not args.no_ops and installed("ristretto255"):
        ops = per_op()
        print("ristretto255 per operation, one thread: hash-to-group {hash_to_group_per_s:,.0f}/s "
              "({hash_to_group_per_cpu_s:,.0f} per CPU-second), scalar multiplication {scalarmult_per_s:,.0f}/s "
              "({scalarmult_per_cpu_s:,.0f} per CPU-second); scalar multiplications with 2 threads "
              "{scalarmult_per_s_2_threads:,.0f}/s, with 2 processes {scalarmult_per_s_2_processes:,.0f}/s (wall)"
              .format(**ops), flush=True)
        rows.append({"ops": ops})
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
