"""Two processes writing one prepared matrix (issue 55): what the ray engine's range writers can gain
from a second worker, and what reading the matrix back costs, for three ways of writing it.

Each process writes ``--mb`` MB of rows, ``--piece`` MB at a time, into its own contiguous range:

- ``pwrite, one file``: buffered ``pwrite`` into disjoint ranges of one file (the engine's range
  writers since 0.8.1, ``verticalfs.engine.ray._range_task``);
- ``pwrite, a file each``: the same, each process into a file of its own;
- ``maps, one file``: each piece of one file mapped shared, ``MADV_HUGEPAGE`` and
  ``MADV_POPULATE_WRITE`` (its pages made present in one call), then copied in.

Before each configuration the previous files are removed and the script waits ``--cold-wait``
seconds: on a VM whose balloon reports free pages to its host (virtio-balloon free page
reporting, as on these machines), freed pages go back to the host within about a second, and a
page's first touch afterwards costs a fault on the host too; ``--cold-wait 0`` measures pages just
freed. Then every file is read as an epoch reads a prepared matrix (``benchmarks/scale/ray_engine.py``):
1,024 random rows at a time through a memory map, released every 64 batches; its minor page faults
count the page-cache folios the writes left (fewer, larger folios: fewer faults).

    python benchmarks/scale/writers.py                    # 200 MB a process, cold pages
    python benchmarks/scale/writers.py --cold-wait 0      # pages just freed

It prints, per design, the seconds of 1 and of 2 processes, the throughput ratio (2 processes
write twice the bytes: 2 x t1 / t2, 2.0 where they do not contend), and the read's seconds and
faults.
"""

from __future__ import annotations

import argparse
import mmap
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MB = 1 << 20
ROW_BYTES = 200  # 50 float32 columns, as ray_engine.py's tables
#: Linux's MADV_POPULATE_WRITE (5.14; Python 3.11's mmap does not name it)
POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
DESIGNS = {"pwrite-one": "pwrite, one file", "pwrite-own": "pwrite, a file each", "maps-one": "maps, one file"}


def source(piece: int) -> np.ndarray:
    """The bytes a writer writes, every piece: seeded float32 values in [0, 1)."""
    return np.random.default_rng(0).random(piece // 4, dtype=np.float32).view(np.uint8)


def _write(design: str, path: str, at: int, size: int, piece: int, start, out) -> None:
    """One writer process: ``size`` bytes at ``at`` of ``path``, ``piece`` bytes at a time."""
    src = source(piece)  # (before the clock)
    start.wait()
    c0, t0 = time.process_time(), time.perf_counter()
    fd = os.open(path, os.O_RDWR)
    try:
        done = 0
        while done < size:
            n, off = min(piece, size - done), at + done
            if design == "maps-one":
                base = off - off % mmap.ALLOCATIONGRANULARITY
                m = mmap.mmap(fd, n + off - base, flags=mmap.MAP_SHARED, offset=base)
                for advice in (mmap.MADV_HUGEPAGE, POPULATE_WRITE):
                    try:
                        m.madvise(advice)
                    except OSError:
                        pass
                dst = np.frombuffer(m, dtype=np.uint8, count=n, offset=off - base)
                dst[:] = src[:n]
                del dst
                m.close()
            else:
                view, w = memoryview(src)[:n], 0
                while w < n:
                    w += os.pwrite(fd, view[w:], off + w)
            done += n
    finally:
        os.close(fd)
    out.put((time.perf_counter() - t0, time.process_time() - c0))


def _read(path: Path, seed: int = 0) -> tuple[float, int]:
    """An epoch's reads of ``path``: seconds and minor page faults."""
    n = path.stat().st_size // ROW_BYTES
    order = np.random.default_rng(seed).permutation(n)
    f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), n * ROW_BYTES, prot=mmap.PROT_READ)
    m = np.frombuffer(mm, dtype=np.float32).reshape(n, ROW_BYTES // 4)
    total = 0.0
    for b, a in enumerate(range(0, n, 1024)):
        total += float(m[np.sort(order[a:a + 1024])][:, 0].sum())
        if b % 64 == 63:
            mm.madvise(mmap.MADV_DONTNEED)  # (released, as the party's loaders keep them)
    del m
    mm.close()
    return time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0


def run(design: str, procs: int, size: int, piece: int, folder: Path, cold_wait: float) -> dict:
    for f in folder.iterdir():
        f.unlink()
    time.sleep(cold_wait)
    if design == "pwrite-own":
        specs = [(folder / f"own{i}.f32", 0) for i in range(procs)]
        for p, _ in specs:
            p.write_bytes(b"")
            os.truncate(p, size)
    else:
        p = folder / "one.f32"
        p.write_bytes(b"")
        os.truncate(p, procs * size)
        specs = [(p, i * size) for i in range(procs)]
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(procs), ctx.Queue()
    ps = [ctx.Process(target=_write, args=(design, str(p), at, size, piece, start, out)) for p, at in specs]
    for p in ps:
        p.start()
    took = [out.get() for _ in ps]
    for p in ps:
        p.join()
    reads = [_read(f) for f in sorted(folder.iterdir())]
    return {"design": design, "procs": procs, "wall": max(t for t, _c in took), "cpu": sum(c for _t, c in took),
            "read_s": sum(r for r, _f in reads), "faults": sum(f for _r, f in reads)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=200, help="MB each process writes")
    ap.add_argument("--piece", type=float, default=22.0, help="MB written at a time (a range writer's segment)")
    ap.add_argument("--cold-wait", type=float, default=5.0,
                    help="seconds between removing the last files and writing (the host takes freed pages back)")
    ap.add_argument("--designs", default=",".join(DESIGNS))
    ap.add_argument("--dir", default=None, help="where the files go (default: a temporary folder)")
    a = ap.parse_args(argv)
    designs = a.designs.split(",")
    unknown = sorted(set(designs) - set(DESIGNS))
    if unknown:
        ap.error(f"--designs: unknown {unknown}; choose from {sorted(DESIGNS)}")
    size = a.mb * MB // ROW_BYTES * ROW_BYTES
    piece = max(ROW_BYTES, int(a.piece * MB) // ROW_BYTES * ROW_BYTES)
    folder = Path(tempfile.mkdtemp(prefix="vfs-writers-", dir=a.dir))
    load = os.getloadavg()
    print(f"writers of one matrix: {a.mb} MB a process in pieces of {a.piece:g} MB, {os.cpu_count()} cores, "
          f"load {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}, pages {'cold' if a.cold_wait else 'just freed'} "
          f"(--cold-wait {a.cold_wait:g} s), files in {folder}", flush=True)
    rows = []
    try:
        for d in designs:
            one = run(d, 1, size, piece, folder, a.cold_wait)
            two = run(d, 2, size, piece, folder, a.cold_wait)
            rows += [one, two]
            print(f"  {DESIGNS[d]:<20}: 1 process {one['wall']:.3f} s (CPU {one['cpu']:.3f} s), 2 processes "
                  f"{two['wall']:.3f} s (CPU {two['cpu']:.3f} s): throughput x{2 * one['wall'] / two['wall']:.2f}; "
                  f"reading the 2 processes' rows back {two['read_s']:.2f} s, {two['faults']:,} page faults",
                  flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
