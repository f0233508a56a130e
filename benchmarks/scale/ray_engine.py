"""The ray engine of a party (issue 55): PSI blinding, preparation and an epoch on 1 and 2 Ray workers.

For each size a seeded table is written as a folder of Parquet files (``--files``, so that Ray Data
has blocks to spread; a lake table is such a folder), then, for each worker count, a process of its
own (so that its ``VmHWM`` is that configuration's exact peak) is the party's coordinator:

- ``read``: it starts a Ray instance with that many worker CPUs (on 127.0.0.1) and reads the table:
  the values checked and the ids sorted into a memory-mapped file (three passes of Ray tasks over
  the table's units);
- ``psi``: the party's whole side of a streamed ristretto255 PSI with a label holder of as many ids
  (half shared): its own ids hashed and blinded, the label holder's re-blinded, every scalar
  multiplication a Ray task over a shard of a chunk; the label holder's side is replayed (its
  chunks are valid group elements computed once before the clock starts), so the seconds are the
  party's alone;
- ``prepare``: an ``Align`` of 90 % of its ids in a random order (train/val/test 70/10/20): the fit
  and the transform as Ray tasks over the table's units (row groups) into the memory-mapped matrices
  (the workers' CPU seconds of each pass and the coordinator's are printed beside: on a shared
  machine the wall-clock speedup measures the other processes too);
- ``epoch``: one epoch of a bottom model (50 -> 16 linear layer, forward and backward) over the
  training rows in shuffled mini-batches of 1,024 read from the prepared matrices.

It prints, per size and worker count, each stage's seconds and the coordinator's peak RSS (the
Ray workers are other processes), then the speedup from 1 to 2 workers per stage, the slopes of
log(seconds) against log(rows), and a 100M-row projection from those slopes, labelled as one.

    python benchmarks/scale/ray_engine.py                          # 1M, 3M, 10M rows; 1 and 2 workers
    python benchmarks/scale/ray_engine.py --sizes 100000,300000    # a check on a busy machine
    python benchmarks/scale/ray_engine.py --sizes 10000000 --workers 2 --no-psi   # the 10M coordinator's RSS
    python benchmarks/scale/ray_engine.py --one-worker-sizes 1000000,3000000     # ~30 min: no 1-worker 10M run

Goals (issue 55): speedup >= 1.6x from 1 to 2 workers on PSI and preparation (on an idle machine:
the speedup of a busy one measures the other sessions); a 10M-row party's coordinator below 1.5 GiB.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

GOAL_SPEEDUP = 1.6
GOAL_RSS_MB = 1.5 * 1024
STAGES = ("read", "psi", "prepare", "epoch")


def generate(folder: Path, n: int, *, columns: int = 50, files: int = 8, seed: int = 0) -> Path:
    """A party's table: ids ``c0 .. c{n-1}`` in a random order, ``columns`` float32 columns, as
    ``files`` Parquet files of about n / files rows (written a file at a time)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    order = np.random.default_rng(seed).permutation(n)
    for k, part in enumerate(np.array_split(order, files)):
        rng = np.random.default_rng([seed, k])
        cols = {"id": pa.array(np.char.add("c", part.astype(str)))}
        cols.update({f"x{j}": pa.array(rng.normal(0, 1, len(part)).astype(np.float32)) for j in range(columns)})
        pq.write_table(pa.table(cols), folder / f"part-{k:04d}.parquet", row_group_size=250_000)
    return folder


def _hwm_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _psi(party_ids, n_holder: int, workers: int, chunk: int) -> float:
    """The party's side of a streamed PSI against a replayed label holder of ``n_holder`` ids."""
    import rbcl

    from verticalfs.psi import PsiChunk, PsiOpen, PsiParty, blind_ids

    key = rbcl.crypto_core_ristretto255_scalar_random()
    one = blind_ids(key, np.arange(chunk))  # a valid chunk of the label holder's blinded ids, replayed
    party = PsiParty(party_ids, workers=workers, parallel="ray")
    t = time.perf_counter()
    opened = party.reply(PsiOpen(group="ristretto255", n=n_holder, chunk=chunk))
    c = opened.chunk
    rounds = max(-(-n_holder // c), -(-len(party_ids) // c))
    for i in range(rounds):
        k = max(0, min(c, n_holder - i * c))
        party.reply(PsiChunk(index=i, points=one[:k * 32]))
    return time.perf_counter() - t


def _epoch(data, batch: int = 1024, seed: int = 0) -> float:
    """One epoch over the party's training rows in shuffled mini-batches, each read as a party's
    training step reads it (``LocalData.batch``: from the memory-mapped split, its pages released)."""
    import torch

    n, d = data.X_all("train").shape
    model = torch.nn.Linear(d, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    order = np.random.default_rng(seed).permutation(n)
    t = time.perf_counter()
    for a in range(0, len(order), batch):
        xb = data.batch("train", order[a:a + batch])
        loss = model(xb).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - t


def _one(table: str, n: int, workers: int, psi: bool, chunk: int, out, writer: str = "ranges",
         handoff: bool | None = None, shards: bool = True) -> None:
    """One configuration, in a process of its own (its VmHWM is the configuration's peak)."""
    import torch

    from verticalfs.deploy.party import Align, DeployedParty
    from verticalfs.engine.ray import connect, disconnect
    from verticalfs.names import LABEL_HOLDER

    torch.set_num_threads(1)
    res: dict = {"rows": n, "workers": workers, "stages": {}}
    try:
        t = time.perf_counter()
        ray = connect(num_cpus=workers)  # a Ray instance of this many worker CPUs on 127.0.0.1
        party = DeployedParty("telecom", Path(table), engine="ray")
        party.table.writer, party.table.handoff, party.table.shards = writer, handoff, shards

        if int(ray.cluster_resources().get("CPU", 0)) != workers:
            raise RuntimeError(f"the Ray instance has {ray.cluster_resources().get('CPU')} CPUs, not {workers}")
        res["stages"]["read"] = time.perf_counter() - t
        res["rss_after_read_mb"] = _hwm_mb()
        if psi:
            res["stages"]["psi"] = _psi(party.ids, n, workers, chunk)
        rng = np.random.default_rng(1)
        keep = rng.permutation(n)[: int(n * 0.9)]
        # the Align message as the party decodes it (a text array of the ids), built a piece at a time
        ids = np.empty(len(keep), dtype=f"<U{len(str(n)) + 1}")
        for a in range(0, len(keep), 1 << 20):
            ids[a:a + (1 << 20)] = np.char.add("c", keep[a:a + (1 << 20)].astype(f"<U{len(str(n))}"))
        del keep
        msg = Align(ids=ids, split=rng.choice(3, len(ids), p=[0.7, 0.1, 0.2]).astype(np.int64), scaling="minmax",
                    impute="none")
        del ids  # (held by the message only, as in a party that decoded it)
        t, c = time.perf_counter(), time.process_time()
        party.handle(LABEL_HOLDER, msg, None, None)  # (as a label holder's Align arrives)
        res["stages"]["prepare"] = time.perf_counter() - t
        res["prepare_coordinator_cpu_s"] = time.process_time() - c
        res["rss_after_prepare_mb"] = _hwm_mb()
        del msg
        res.update({k: v for k, v in party.table.last_pass.items()
                    if k.endswith("_s") or k in ("units", "writer", "shards")})
        res["stages"]["epoch"] = _epoch(party.data)
        res["peak_rss_mb"] = _hwm_mb()
        res["load"] = os.getloadavg()[0]
        res["load3"] = os.getloadavg()
        del party
    except Exception as exc:  # noqa: BLE001 - reported by the parent
        res["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        disconnect()
    out.send(res)


def run_one(table: Path, n: int, workers: int, *, psi: bool = True, chunk: int = 16_384,
            writer: str = "ranges", handoff: bool | None = None, shards: bool = True) -> dict:
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_one, args=(str(table), n, workers, psi, chunk, b, writer, handoff, shards))
    p.start()
    res = a.recv()
    p.join(120)
    if p.is_alive():
        p.kill()
    if "error" in res:
        raise RuntimeError(f"{n:,} rows, {workers} workers: {res['error']}")
    return res


def slope(rows: list[int], secs: list[float]) -> float:
    if len(rows) < 2:
        return float("nan")
    return float(np.polyfit(np.log(rows), np.log(secs), 1)[0])


def fmt(r: dict) -> str:
    st = "  ".join(f"{k} {v:8.1f} s" for k, v in r["stages"].items())
    cpu = (f", workers' CPU {r['fit_cpu_s']:.1f} + {r['transform_cpu_s']:.1f} s over {r['units']} units, coordinator's "
           f"CPU {r['prepare_coordinator_cpu_s']:.1f} s, writer {r.get('writer')}"
           + (", a file per range" if r.get("shards") else "") if "fit_cpu_s" in r else "")
    return (f"{r['rows']:>12,} rows, {r['workers']} worker{'s' if r['workers'] > 1 else ' '}: {st}   "
            f"coordinator peak RSS {r['peak_rss_mb']:6.0f} MB (after reading {r['rss_after_read_mb']:.0f}, "
            f"preparing {r['rss_after_prepare_mb']:.0f})"
            f"  [fit {r['fit_s']:.1f} s, transform {r['transform_s']:.1f} s{cpu}; load {_load(r['load3'])}]")


def _load(avg) -> str:
    """The load averages (1, 5, 15 minutes), as ``uptime`` prints them."""
    return "/".join(f"{x:.2f}" for x in avg)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000000,3000000,10000000", help="rows of the party's table, comma-separated")
    ap.add_argument("--workers", default="1,2", help="Ray worker CPUs to compare, comma-separated")
    ap.add_argument("--one-worker-sizes", default=None,
                    help="run the 1-worker configuration only at these sizes (comma-separated; default: every "
                         "size): e.g. 1000000,3000000 leaves out the 1-worker 10M run (no speedup printed there)")
    ap.add_argument("--columns", type=int, default=50)
    ap.add_argument("--files", type=int, default=8, help="Parquet files the table is written as")
    ap.add_argument("--no-psi", action="store_true", help="leave out the PSI stage (e.g. for the 10M RSS alone)")
    ap.add_argument("--chunk", type=int, default=16_384)
    ap.add_argument("--writer", choices=("ranges", "units"), default="ranges",
                    help="how the transform writes the prepared matrices: ranges (a writer task per contiguous range "
                         "of rows, the default) or units (verticalfs 0.8: each unit's rows at their aligned rows "
                         "through a memory map; to compare)")
    ap.add_argument("--shards", choices=("on", "off"), default="on",
                    help="whether each range writer writes a file of its own, spliced into one map per split (on, "
                         "the default since 0.8.2) or every writer writes into its split's one file (off, as 0.8.1; "
                         "benchmarks/scale/writers.py: two buffered writers of one file take turns on its lock)")
    ap.add_argument("--handoff", choices=("auto", "on", "off"), default="auto",
                    help="whether the fit leaves the aligned rows in Ray's object store for the transform: auto (the "
                         "engine's choice: where they fit in half the store, which Ray sizes from the memory free "
                         "when it starts), on, or off (the transform reads the table again)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--full-psi", type=int, default=1_000_000,
                    help="first, a whole PSI of this many ids a side with the fastest engine (ristretto255: the "
                         "label holder and the party each in a process of its own, benchmarks/scale/psi.py); 0: "
                         "leave it out")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",") if s]
    workers = [int(w) for w in a.workers.split(",") if w]
    one_sizes = None if a.one_worker_sizes is None else {int(s) for s in a.one_worker_sizes.split(",") if s}
    print(f"ray engine of a party: {a.columns} float32 columns, tables as {a.files} Parquet files; stages: read "
          "(check + ids), psi (the party's side, on Ray tasks), prepare (fit + transform, Ray tasks), epoch "
          f"(bottom model, batches from the prepared shards); {os.cpu_count()} cores, load "
          f"{_load(os.getloadavg())} at start (1/5/15 min)", flush=True)
    if one_sizes is not None:
        print(f"1 worker only at {sorted(one_sizes)} rows (--one-worker-sizes): no 1 -> 2 speedup at "
              f"{[n for n in sizes if n not in one_sizes]}", flush=True)
    results: list[dict] = []
    if a.full_psi:
        sys.path.insert(0, str(Path(__file__).parent))
        import psi as psi_bench  # benchmarks/scale/psi.py

        r = psi_bench.run_one("ristretto255", a.full_psi)
        print("whole PSI, both sides (the fastest engine of verticalfs; SecretFlow's RR22 is measured by "
              "psi_secretflow.py in its own environment): " + psi_bench.fmt(r)
              + f"  [load {_load(os.getloadavg())}]", flush=True)
        results.append({"full_psi": r})
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"vfs-ray-{n}-") as d:
            t = time.perf_counter()
            table = generate(Path(d) / "table", n, columns=a.columns, files=a.files)
            print(f"{n:>12,} rows: table written in {time.perf_counter() - t:.1f} s", flush=True)
            for w in workers:
                if w == 1 and one_sizes is not None and n not in one_sizes:
                    print(f"{n:>12,} rows, 1 worker : left out (--one-worker-sizes)", flush=True)
                    continue
                r = run_one(table, n, w, psi=not a.no_psi, chunk=a.chunk, writer=a.writer,
                           handoff={"auto": None, "on": True, "off": False}[a.handoff], shards=a.shards == "on")
                results.append(r)
                print(fmt(r), flush=True)
        mine = {r["workers"]: r for r in results if r.get("rows") == n}
        if 1 in mine and 2 in mine:
            sp = {k: mine[1]["stages"][k] / mine[2]["stages"][k] for k in mine[2]["stages"]}
            print(f"{'':12s} speedup 1 -> 2 workers: " + "  ".join(
                f"{k} {v:.2f}x" + (f" (goal >= {GOAL_SPEEDUP}x {'met' if v >= GOAL_SPEEDUP else 'NOT met'})"
                                   if k in ("psi", "prepare") else "") for k, v in sp.items())
                + (f"  [fit {mine[1]['fit_s'] / mine[2]['fit_s']:.2f}x, transform "
                   f"{mine[1]['transform_s'] / mine[2]['transform_s']:.2f}x; workers' CPU 1 -> 2 workers: fit "
                   f"{mine[1]['fit_cpu_s']:.2f} -> {mine[2]['fit_cpu_s']:.2f} s, transform "
                   f"{mine[1]['transform_cpu_s']:.2f} -> {mine[2]['transform_cpu_s']:.2f} s "
                   f"({mine[2]['transform_cpu_s'] / max(1e-9, mine[1]['transform_cpu_s']) - 1:+.0%}; on an idle "
                   "machine a second worker halves the time only where these do not grow)]"
                   if mine[2].get("fit_s") else ""),
                flush=True)
    for w in workers:
        rs = [r for r in results if r.get("workers") == w]
        if len(rs) >= 2:
            rows = [r["rows"] for r in rs]
            sl = {k: slope(rows, [r["stages"][k] for r in rs]) for k in rs[0]["stages"]}
            print(f"slopes of log(seconds) against log(rows), {w} worker(s), over {rows}: "
                  + "  ".join(f"{k} {v:.2f}" for k, v in sl.items()))
            big = 100_000_000
            last = rs[-1]
            proj = {k: last["stages"][k] * (big / last["rows"]) ** max(sl[k], 1.0 if k in ("psi", "prepare") else 0)
                    for k in last["stages"]}
            per_row = ((rs[-1]["peak_rss_mb"] - rs[0]["peak_rss_mb"]) * 2**20 / max(1, rs[-1]["rows"] - rs[0]["rows"]))
            rss = rs[-1]["peak_rss_mb"] + per_row * (big - rs[-1]["rows"]) / 2**20
            print(f"  100,000,000 rows, {w} worker(s) (PROJECTION from the slopes, at least linear for psi and "
                  "prepare; not measured): " + "  ".join(f"{k} {v:9.0f} s" for k, v in proj.items())
                  + f"   coordinator RSS {rss:.0f} MB ({per_row:.0f} bytes a row beyond {rs[0]['rows']:,})")
    top = [r for r in results if r.get("rows", 0) >= 10_000_000]
    if top:
        peak = max(r["peak_rss_mb"] for r in top)
        print(f"10M-row party's coordinator: peak RSS {peak:.0f} MB (goal < {GOAL_RSS_MB:.0f} MB "
              f"{'met' if peak < GOAL_RSS_MB else 'NOT met'})")
    print(f"load average at the end (1/5/15 min): {_load(os.getloadavg())}")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
