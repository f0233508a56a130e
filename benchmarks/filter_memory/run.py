"""Peak resident memory of one party's filter-method statistics on a memory-mapped table (issue 39
item 3).

A deployed party with a large table holds its prepared matrix as a float32 memory-mapped file
(``verticalfs.data.stream``). This script writes such a file (``--rows`` x ``--cols``, seeded; the
label depends on the first three columns) under ``--dir``, then runs, each in a fresh process, one
filter method's party side on it: the handler of the message the label holder sends, with that
message built here. Printed per method: the process's resident memory before the handler (Python,
numpy, torch, the labels), the peak during it (``VmHWM`` after resetting it through
``/proc/self/clear_refs``), the difference, the largest increase of its two parts (``RssAnon``:
copies and other allocations; ``RssFile``: pages of the mapped table, which the kernel may reclaim),
sampled every 2 ms, and the seconds. The file is removed at the end.

Run it with the verticalfs to measure on the path (e.g. ``PYTHONPATH=src``); the same script measures
an older tree with ``PYTHONPATH=<that tree>/src``, as the handlers and messages are unchanged::

    PYTHONPATH=src python benchmarks/filter_memory/run.py --rows 1000000 --cols 50

Methods: ``mi`` (``LabelScoresRequest`` with every training label, the baseline's default),
``feast`` (``FeastSetup`` with FEAST's stratified sample of ``B^(m+1)|Y|`` rows and its first
``ScoreRequest``), ``ms-gini`` and ``sffs`` with ``secure=False`` (``PlainGiniLabels``,
``PlainFLabels``: their Paillier paths sum the same blocks under encryption, which at a million
rows is hours of encryption before any of this memory matters), ``fate-lasso`` (``LassoStart``:
the party's state and first partial predictor) and ``fate-iv-binning`` (FATE's quantile bins of
every column and their per-bin label counts in the clear: the party's side of ``IVLabels`` without
the Paillier sums, by the library's public binning functions).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

METHODS = ("mi", "feast", "ms-gini", "sffs", "fate-lasso", "fate-iv-binning")


def rss_kb(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def make_table(path: Path, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """The float32 table (written in slices of 100k rows) and its binary labels."""
    X = np.memmap(path, dtype=np.float32, mode="w+", shape=(rows, cols))
    rng = np.random.default_rng(seed)
    y = np.empty(rows, dtype=np.uint8)
    for s in range(0, rows, 100_000):
        e = min(rows, s + 100_000)
        B = rng.normal(size=(e - s, cols)).astype(np.float32)
        X[s:e] = B
        y[s:e] = (B[:, 0] + 0.5 * B[:, 1] - 0.5 * B[:, 2] + 0.5 * rng.normal(size=e - s) > 0)
    X.flush()
    del X
    return y


def child(method: str, path: Path, rows: int, cols: int, labels: Path) -> dict:
    import torch

    from verticalfs.party import Context, LocalData
    from verticalfs.transport.messages import At

    torch.set_num_threads(1)
    y = np.load(labels)
    X = np.memmap(path, dtype=np.float32, mode="r+", shape=(rows, cols))
    data = LocalData("p", [f"f{j}" for j in range(cols)], {"train": X})
    ctx = Context(None, At("selection"), "active")

    if method == "mi":
        from verticalfs.methods.feast.messages import LabelScoresRequest
        from verticalfs.methods.feast.role import MIRole

        def run():
            return MIRole(data, None, ctx).on_label_scores(LabelScoresRequest(
                rows=None, labels=y, bins=8, discretizer="equal-frequency", supervised_bins=False, top=10), ctx)
    elif method == "feast":
        from verticalfs.methods.feast.messages import FeastSetup, ScoreRequest
        from verticalfs.methods.feast.role import FeastRole
        from verticalfs.selection.sampling import feast_sample_size, stratified_sample

        sample = stratified_sample(y, feast_sample_size(rows, 8, 3, 2), np.random.default_rng(0))

        def run():
            role = FeastRole(data, None, ctx)
            role.on_setup(FeastSetup(rows=sample.astype(np.uint32), labels=y[sample], bins=8,
                                     discretizer="equal-frequency", supervised_bins=False, seed=0), ctx)
            return role.on_score(ScoreRequest(round=1, top=10), ctx)
    elif method == "ms-gini":
        from verticalfs.methods.fedsdg_fs.baselines import MSGiniRole
        from verticalfs.methods.fedsdg_fs.messages import PlainGiniLabels

        def run():
            return MSGiniRole(data, None, ctx).on_plain_labels(
                PlainGiniLabels(labels=y.astype(np.int64), n_classes=2, n_bins=10), ctx)
    elif method == "sffs":
        from verticalfs.methods.fedsdg_fs.baselines import PlainFLabels, SFFSRole

        def run():
            return SFFSRole(data, None, ctx).on_plain(PlainFLabels(labels=y.astype(np.int64)), ctx)
    elif method == "fate-lasso":
        from verticalfs.crypto import generate_keypair
        from verticalfs.methods.fate.messages import LassoStart
        from verticalfs.methods.fate.role import LassoRole

        pub, _ = generate_keypair(512, insecure=True)

        def run():
            return LassoRole(data, None, ctx).on_lasso_start(LassoStart(
                public_key=pub.to_bytes(), insecure=True, alpha=0.01, lr=0.1, batch_size=1024, shuffle_seed=0,
                feature_precision=24, run=0), ctx)
    elif method == "fate-iv-binning":
        from verticalfs.methods.fate import binning

        def run():
            Xa = data.X_all("train").numpy()
            if hasattr(binning, "quantile_code_blocks"):  # this tree: the party's blocks
                nums, blocks = binning.quantile_code_blocks(Xa, 10)
                ev = np.zeros((cols, 10), dtype=np.int64)
                for s, e, codes in blocks:
                    flat = codes + (np.arange(cols) * 10)[None, :]
                    ev += np.bincount(flat[y[s:e] == 1].ravel(), minlength=cols * 10).reshape(cols, 10)
                return ev
            codes, nums = binning.quantile_bins(Xa, 10)  # an older tree: the whole code matrix
            flat = codes + (np.arange(cols) * 10)[None, :]
            return np.bincount(flat[y == 1].ravel(), minlength=cols * 10).reshape(cols, 10)
    else:
        raise SystemExit(f"unknown method {method!r}; use one of {METHODS}")

    import threading

    before, anon0, file0 = rss_kb(), rss_kb("RssAnon"), rss_kb("RssFile")
    seen = {"RssAnon": anon0, "RssFile": file0}
    done = threading.Event()

    def watch_rss():  # the split of the peak: anonymous memory (copies) and mapped file pages
        while not done.wait(0.002):
            for k in seen:
                seen[k] = max(seen[k], rss_kb(k))

    watch = threading.Thread(target=watch_rss, daemon=True)
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset VmHWM to the current RSS
    watch.start()
    t0 = time.perf_counter()
    run()
    sec = time.perf_counter() - t0
    done.set()
    watch.join()
    peak = rss_kb("VmHWM")
    return {"method": method, "rss_before_mb": before / 1024, "peak_mb": peak / 1024,
            "increase_mb": (peak - before) / 1024, "anon_increase_mb": (seen["RssAnon"] - anon0) / 1024,
            "file_increase_mb": (seen["RssFile"] - file0) / 1024, "seconds": sec}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--cols", type=int, default=50)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the table's file goes (removed after)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--label", default="", help="a name for this tree in the output (e.g. before, after)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    folder = Path(args.dir)
    if args.child:
        print(json.dumps(child(args.child, folder / "table.f32", args.rows, args.cols, folder / "labels.npy")))
        return
    work = Path(tempfile.mkdtemp(prefix="filter-memory-", dir=folder))
    try:
        y = make_table(work / "table.f32", args.rows, args.cols)
        np.save(work / "labels.npy", y)
        mb = args.rows * args.cols * 4 / 2 ** 20
        print(f"# {args.label or 'tree'}: {args.rows} rows x {args.cols} columns, float32 file {mb:.0f} MiB "
              f"(float64 copy {2 * mb:.0f} MiB)")
        print(f"{'method':18s} {'RSS before':>11s} {'peak':>9s} {'increase':>9s} {'of which copies':>16s} "
              f"{'file pages':>11s} {'seconds':>8s}")
        for m in args.methods.split(","):
            out = subprocess.run([sys.executable, __file__, "--child", m, "--dir", str(work), "--rows",
                                  str(args.rows), "--cols", str(args.cols)], capture_output=True, text=True,
                                 env=os.environ)
            if out.returncode:
                print(f"{m:18s} failed: {out.stderr.strip().splitlines()[-1] if out.stderr else out.returncode}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{m:18s} {r['rss_before_mb']:8.0f} MB {r['peak_mb']:6.0f} MB {r['increase_mb']:6.0f} MB "
                  f"{r['anon_increase_mb']:13.0f} MB {r['file_increase_mb']:8.0f} MB {r['seconds']:8.2f}", flush=True)
    finally:
        for f in work.iterdir():
            f.unlink()
        work.rmdir()


if __name__ == "__main__":
    main()
