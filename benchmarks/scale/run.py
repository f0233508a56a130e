"""How cost grows with rows (issue 39): seconds and peak RSS per party process, per stage and size.

For each size a seeded generator (:func:`generate`) writes three parties' Parquet files (the bank:
id, label and 50 columns; the telecom and the insurer: id and 50 columns each; float32 columns, a
known informative subset of 5 columns per party, every party holding the same ids in its own
order). Two ``verticalfs party serve`` processes (``--insecure`` on 127.0.0.1: TLS costs the same
at every size and is measured in benchmarks/network) serve the telecom and the insurer; this
process is the bank (the label holder, which also serves its own columns). Every party reads its
file in pieces (``stream_above_mb = 0``, data/stream.py).

Stages, timed separately:

- ``read``: a party process from start to listening (its ids read and its values checked);
- ``psi``: private set intersection with both parties at once (the connection's ``psi_seconds``);
- ``prepare``: the rest of the connection: the label holder's split and ``Align``, each party
  fitting its preprocessing and writing its memory-mapped matrices;
- ``vfl epoch``: one epoch of ``vfl`` (training and evaluation), the model saved;
- ``predict``: that saved model scoring every customer held by all three parties where the data
  lives (``verticalfs predict --config``: PSI over the parties' scoring files, here their training
  files, then the split model's inference), its own connection included;
- ``feast``: FEAST's selection with one epoch of ``vfl`` on the kept columns (``feast+vfl``: the
  parties keep their columns, the default policy), its own connection included.

Peak RSS: per stage, the largest resident set (``VmRSS``) of each process sampled every 0.1 s
during the stage (a spike shorter than that can be missed); per process over the whole size, its
high-water mark (``VmHWM``, exact). The bank's process is this one: the label holder and the bank's
own feature block (the files are generated in a process of their own). The slope is the
least-squares slope of log(seconds) against log(rows) over the sizes; the 10M line (when 10M is not
run) is extrapolated from the two largest sizes (seconds by their log-log slope, RSS by a straight
line in rows) and labelled so.

    python benchmarks/scale/run.py                     # 100k, 1M, 3M
    python benchmarks/scale/run.py --sizes 20000,100000 --quick
    python benchmarks/scale/run.py --sizes 3000000 --vfl-only    # the networked vfl run alone, exact peaks

Goals (issue 39): peak RSS per party < 1.5 GiB at 10M rows; every stage linear in rows (slope
<= 1.1).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

GOAL_RSS_GIB = 1.5
GOAL_SLOPE = 1.1
PARTIES = ("bank", "telecom", "insurer")
INFORMATIVE = 5


def generate(root: Path, n: int, *, columns: int = 50, seed: int = 0, chunk: int = 500_000) -> dict[str, Path]:
    """Three parties' Parquet files about ``n`` customers, written a chunk of customers at a time
    (bounded memory). The label is a logistic function of the first ``INFORMATIVE`` columns of every
    party (the other columns are noise). Each party's file lists a chunk's customers in its own
    shuffled order, so that aligning is a real lookup."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    w = np.random.default_rng(seed).normal(0, 1, (len(PARTIES), INFORMATIVE))
    paths = {p: root / f"{p}.parquet" for p in PARTIES}
    writers: dict[str, pq.ParquetWriter] = {}
    try:
        for a in range(0, n, chunk):
            idx = np.arange(a, min(n, a + chunk))
            ids = np.char.add("c", idx.astype(str))
            X = {p: np.random.default_rng([seed, k, a]).normal(0, 1, (len(idx), columns)).astype(np.float32)
                 for k, p in enumerate(PARTIES)}
            logit = sum(X[p][:, :INFORMATIVE].astype(np.float64) @ w[k] for k, p in enumerate(PARTIES))
            u = np.random.default_rng([seed, 99, a]).random(len(idx))
            y = (u < 1 / (1 + np.exp(-logit / np.sqrt(len(PARTIES))))).astype(np.int8)
            for k, p in enumerate(PARTIES):
                order = np.random.default_rng([seed, 100 + k, a]).permutation(len(idx))
                cols = {"id": pa.array(ids[order])}
                if p == "bank":
                    cols["default"] = pa.array(y[order])
                cols.update({f"{p}_{j}": pa.array(X[p][order, j]) for j in range(columns)})
                table = pa.table(cols)
                if p not in writers:
                    writers[p] = pq.ParquetWriter(str(paths[p]), table.schema)
                writers[p].write_table(table)
    finally:
        for wr in writers.values():
            wr.close()
    return paths


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Sampler:
    """Samples the resident set of some processes every ``every`` seconds; :meth:`stage` names the
    stage the samples belong to, :attr:`peaks` the largest per stage and process."""

    def __init__(self, pids: dict[str, int], every: float = 0.1) -> None:
        self.pids, self.every = dict(pids), every
        self.peaks: dict[str, dict[str, float]] = {}
        self._stage = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stage(self, name: str) -> None:
        self._stage = name
        self.peaks.setdefault(name, {p: 0.0 for p in self.pids})

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if not self._stage:
                continue
            peaks = self.peaks[self._stage]
            for p, pid in self.pids.items():
                v = _rss_mb(pid)
                if v == v:
                    peaks[p] = max(peaks[p], v)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def measure(n: int, root: Path, *, columns: int = 50, vfl_only: bool = False) -> dict:
    from verticalfs.api import run
    from verticalfs.deploy.config import Deployment
    from verticalfs.deploy.holder import connect, run_deployment
    from verticalfs.deploy.predict import predict_deployment

    t0 = time.perf_counter()
    # in a process of its own: this process is the bank's, and its peak resident set is measured
    subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
                    "from run import generate; generate(Path(sys.argv[2]), int(sys.argv[3]), columns=int(sys.argv[4]))",
                    str(Path(__file__).resolve().parent), str(root), str(n), str(columns)], check=True)
    paths = {p: root / f"{p}.parquet" for p in PARTIES}
    gen_s = time.perf_counter() - t0
    lines = ['label_party = "bank"', 'label_column = "default"', "insecure = true", "stream_above_mb = 0",
             "max_file_mb = 100000", "connect_timeout = 120"]
    for p in PARTIES:
        lines += [f"[parties.{p}]", f'address = "127.0.0.1:{_free_port()}"', f'file = "{paths[p].name}"',
                  f"[parties.{p}.policy]", "max_psi_ids = 100000000"]
    dep_file = root / "deployment.toml"
    dep_file.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs, read_s, started = {}, {}, {}
    for p in PARTIES[1:]:
        t = time.perf_counter()
        procs[p] = subprocess.Popen([sys.executable, "-m", "verticalfs", "party", "serve", "--config", str(dep_file),
                                     "--name", p, "--insecure"], cwd=root, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        started[p] = t
    out: dict = {"rows": n, "generate_s": gen_s, "stages": {}, "rss_mb": {}, "stage_rss_mb": {}}
    sampler = None
    try:
        for p, proc in procs.items():
            line = proc.stdout.readline()
            if "serves" not in line:
                raise RuntimeError(f"party {p} did not start: {line}{proc.stderr.read()}")
            read_s[p] = time.perf_counter() - started[p]
        out["stages"]["read"] = max(read_s.values())
        pids = {"bank": os.getpid(), **{p: proc.pid for p, proc in procs.items()}}
        out["stage_rss_mb"]["read"] = {p: _hwm_mb(pid) for p, pid in pids.items() if p != "bank"}
        out["stage_rss_mb"]["read"]["bank"] = float("nan")  # (the bank reads its file inside `connect`)
        sampler = Sampler(pids)
        dep = Deployment.load(dep_file)
        sampler.stage("connect")
        t = time.perf_counter()
        conn = connect(dep, seed=0)
        conn_s = time.perf_counter() - t
        out["stages"]["psi"] = conn.psi_seconds  # (all parties at once; the label holder's cache is empty)
        out["stages"]["prepare"] = conn_s - conn.psi_seconds
        try:
            sampler.stage("vfl epoch")
            t = time.perf_counter()
            res = run("vfl", conn.data, seed=0, params={"epochs": 1, "batch_size": 1024}, federation=conn.federation,
                      save_model=root / "model")
            out["stages"]["vfl epoch"] = time.perf_counter() - t
            out["vfl_accuracy"] = res.metrics.get("accuracy")
        finally:
            conn.close()
        if vfl_only:  # the networked vfl run alone: each process's VmHWM is that run's exact peak
            sampler.stop()
            out["stage_rss_mb"].update(sampler.peaks)
            out["rss_mb"] = {p: _hwm_mb(pid) for p, pid in pids.items()}
            return out
        sampler.stage("predict")
        t = time.perf_counter()
        pred = predict_deployment(dep, root / "model")
        out["stages"]["predict"] = time.perf_counter() - t
        out["predicted"] = len(pred["ids"])
        out["predict_psi_s"] = pred.get("psi_s", float("nan"))
        del pred
        sampler.stage("feast")
        t = time.perf_counter()
        res = run_deployment(dep, "feast+vfl", seed=0,  # N given: "auto" would gather the kept columns
                             params={"feast.n_select": 10, "vfl.epochs": 1, "vfl.batch_size": 1024})
        out["stages"]["feast"] = time.perf_counter() - t
        out["feast_trained_as"] = res.info.get("trained_as")
        sampler.stop()
        out["stage_rss_mb"].update(sampler.peaks)
        out["rss_mb"] = {p: _hwm_mb(pid) for p, pid in pids.items()}
    finally:
        if sampler is not None:
            sampler.stop()
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return out


def slope(rows: list[int], secs: list[float]) -> float:
    if len(rows) < 2:
        return float("nan")
    return float(np.polyfit(np.log(rows), np.log(secs), 1)[0])


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100000,1000000,3000000", help="rows per party, comma-separated")
    ap.add_argument("--columns", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="20k and 50k rows x 10 columns (a check, not a result)")
    ap.add_argument("--vfl-only", action="store_true",
                    help="only the networked vfl run (read, PSI, prepare, one epoch): each process's VmHWM is then "
                         "that run's exact peak")
    a = ap.parse_args(argv)
    sizes = [20_000, 50_000] if a.quick else [int(s) for s in a.sizes.split(",")]
    columns = 10 if a.quick else a.columns
    import torch

    torch.set_num_threads(1)
    results = []
    load = []
    for n in sizes:
        load.append(os.getloadavg()[0])
        with tempfile.TemporaryDirectory(prefix=f"vfs-scale-{n}-") as d:
            r = measure(n, Path(d), columns=columns, vfl_only=a.vfl_only)
        load.append(os.getloadavg()[0])
        results.append(r)
        print(format_size(r, columns), flush=True)
    rows = [r["rows"] for r in results]
    print(f"\nslope of log(seconds) against log(rows) over {rows} (goal <= {GOAL_SLOPE}):")
    for stage in results[0]["stages"]:
        print(f"  {stage:10s} {slope(rows, [r['stages'][stage] for r in results]):5.2f}")
    big = 10_000_000
    if len(results) >= 2 and rows[-1] < big:
        print(extrapolate(results[-2], results[-1], big, columns))
    top = max(max(r["rss_mb"].values()) for r in results)
    print(f"largest peak RSS of a party process measured: {top:.0f} MB (goal < {GOAL_RSS_GIB * 1024:.0f} MB at 10M "
          f"rows); load average (1 min) during the run {min(load):.1f} to {max(load):.1f}")
    return results


def format_size(r: dict, columns: int, label: str = "") -> str:
    n = r["rows"]
    st = "  ".join(f"{k} {v:7.1f} s" for k, v in r["stages"].items())
    lines = [f"{n:>10,} rows x {columns} columns a party{label}: {st}"]
    for stage, peaks in r.get("stage_rss_mb", {}).items():
        lines.append(f"{'':12s}peak RSS during {stage:9s}: " + "  ".join(
            f"{p} {v:6.0f} MB" for p, v in sorted(peaks.items(), key=lambda kv: PARTIES.index(kv[0]))))
    lines.append(f"{'':12s}peak RSS (VmHWM) of the size:  " + "  ".join(
        f"{p} {v:6.0f} MB" for p, v in sorted(r["rss_mb"].items(), key=lambda kv: PARTIES.index(kv[0])))
        + (f"   (vfl accuracy {r['vfl_accuracy']:.3f}; " + (
            f"{r['predicted']:,} rows predicted, their PSI {r.get('predict_psi_s', 0):.1f} s; " if "predicted" in r
            else "the vfl run only; ") + f"generating the files took {r['generate_s']:.1f} s)"
           if "vfl_accuracy" in r else ""))
    return "\n".join(lines)


def extrapolate(a: dict, b: dict, n: int, columns: int) -> str:
    """The ``n``-row line from sizes ``a`` < ``b``: seconds by their log-log slope, RSS by the straight
    line through them (what each row adds)."""
    na, nb = a["rows"], b["rows"]
    stages = {k: b["stages"][k] * (n / nb) ** slope([na, nb], [a["stages"][k], b["stages"][k]]) for k in b["stages"]}
    rss = {p: b["rss_mb"][p] + (b["rss_mb"][p] - a["rss_mb"][p]) * (n - nb) / (nb - na) for p in b["rss_mb"]}
    per_row = {p: (b["rss_mb"][p] - a["rss_mb"][p]) * 2**20 / (nb - na) for p in b["rss_mb"]}
    line = format_size({"rows": n, "stages": stages, "rss_mb": rss}, columns, " (EXTRAPOLATED, not measured)")
    return (line + f"\n{'':12s}(from {na:,} and {nb:,} rows: RSS grows " + ", ".join(
        f"{p} {v:.0f} bytes" for p, v in per_row.items()) + " a row)")


if __name__ == "__main__":
    main()
