"""Online scoring over a deployment: latency of one id, with where its time goes, over real HTTP.

For each scenario, three parties on 127.0.0.1 with mutual TLS (two ``verticalfs party serve``
processes and the label party), a ``vfl`` model trained over the deployment with ``--save-model``,
then ``verticalfs serve-model`` in its own process; this script is the HTTP client (httpx, one
keep-alive connection). Scenarios (``--scenarios``):

- ``adult``: the Adult data set (``--data-dir`` or ``VERTICALFS_DATA``: the shared data sets),
  its columns split among the three parties (``partition``, seed 0; categorical columns one-hot
  encoded by each party), 48,842 ids;
- ``synthetic``: ``--rows`` rows of 3 x 10 numeric columns (make_classification).

Per scenario:

1. **one id per request**: ``--requests`` sequential requests: latency p50 / p95 / p99 (ms), and
   the breakdown of a request from the server's ``Server-Timing`` header, median and p99 of each
   part: ``stage`` (the round of ``StageIds``: every party prepares the row), ``infer`` (the
   method's inference round and the label holder's top model), per party the round trip of each
   round (``rtt``) and the party's own share of it (``party``: decoding, its work, encoding; the
   rest of the round trip is gRPC, TLS and loopback), ``queue`` (the batcher), ``json`` (the
   answer), and ``http`` (client latency minus the server's total: HTTP, uvicorn, the client);
2. **TLS**: a 256-byte round trip through the transport (a ``PartyServer`` echo in another
   process) with mutual TLS and without: what TLS adds to each round trip;
3. **batches of 1,000 ids**: ``--batches`` sequential requests, ids scored per second;
4. **concurrent clients**: ``--clients`` threads each sending one id at a time: requests per second
   and the batches the server made of them.

Goals (issue 52): p99 <= 25 ms for one id on both scenarios; >= 5,000 ids/s in batches of 1,000
(issue 38). The machine's load average is printed beside the figures: latency on a shared host
is the host's, rerun on a quiet one for the figure that counts. SIGTERM or Ctrl-C stops every
process this script started.

Usage::

    .venv/bin/python benchmarks/network/serve.py [--scenarios adult,synthetic] [--data-dir DIR]
        [--rows 20000] [--requests 1000] [--batches 40] [--clients 8] [--batch-ms 0]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

PARTIES = ("bank", "telecom", "insurer")
GOAL_P99_MS = 25.0
GOAL_IDS_PER_S = 5000.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_site(root: Path, rows: int) -> Path:
    """Three parties' files (ids in a different order in each) and a deployment file with mTLS."""
    import pandas as pd
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=rows, n_features=30, n_informative=12, random_state=0)
    ids = np.array([f"c{i:07d}" for i in range(rows)])
    rng = np.random.default_rng(0)
    for k, p in enumerate(PARTIES):
        df = pd.DataFrame(X[:, 10 * k:10 * (k + 1)], columns=[f"{p}_{j}" for j in range(10)])
        df.insert(0, "customer_id", ids)
        if p == "bank":
            df["default"] = y
        df.iloc[rng.permutation(rows)].to_csv(root / f"{p}.csv", index=False)
    return write_deployment(root, PARTIES)


def make_adult(root: Path, data_dir) -> Path:
    """Adult's columns split among the three parties (the bank holds the label and a third of the
    columns), ids in a different order in each file; categorical columns found by each party."""

    from verticalfs.data.partition import partition
    from verticalfs.data.registry import load_dataset

    vds = partition(load_dataset("adult", data_dir=data_dir, seed=0), len(PARTIES), seed=0)
    ids = np.array([f"c{i:07d}" for i in range(vds.n_samples)])
    rng = np.random.default_rng(0)
    for p, block in zip(PARTIES, vds.blocks, strict=True):
        df = block.X.copy()
        df.columns = [f"{p}_{c}" for c in df.columns]
        df.insert(0, "customer_id", ids)
        if p == "bank":
            df["default"] = np.asarray(vds.y)
        df.iloc[rng.permutation(len(df))].to_csv(root / f"{p}.csv", index=False)
    return write_deployment(root, PARTIES, categorical="auto")


def write_deployment(root: Path, parties, categorical: str | None = None) -> Path:
    """Certificates for ``parties`` (``certs make``) and a deployment file with mutual TLS on
    127.0.0.1: the bank holds the label ``default``, every party ``<party>.csv`` keyed by ``customer_id``."""
    subprocess.run([sys.executable, "-m", "verticalfs", "certs", "make", "--parties", ",".join(parties), "--out",
                    str(root / "certs")], check=True, capture_output=True)
    lines = ['label_party = "bank"', 'label_column = "default"', 'id_column = "customer_id"', 'certs = "certs"']
    for p in parties:
        lines += [f"[parties.{p}]", f'address = "127.0.0.1:{free_port()}"', f'file = "{p}.csv"']
        if categorical is not None:
            lines.append(f'categorical = "{categorical}"')
    (root / "deployment.toml").write_text("\n".join(lines) + "\n")
    return root / "deployment.toml"


def start(cmd: list[str], cwd: Path, ready: str, keep: list | None = None) -> subprocess.Popen:
    """``cmd`` started (in ``keep`` at once, so that an interruption stops it), once it printed ``ready``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if keep is not None:
        keep.append(proc)
    while True:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"{' '.join(cmd[2:5])} ended before it was ready")
        if ready in line:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # drain
            return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def percentile(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def parse_timing(header: str) -> dict[str, float]:
    """``Server-Timing: stage;dur=1.2, ...`` as ``{"stage": 1.2, ...}`` (ms)."""
    out = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if dur:
            out[name] = float(dur)
    return out


def _echo_main(certs: str | None, address_out) -> None:
    from verticalfs.transport.grpc import PartyServer, TLSFiles

    class Echo:
        name = "telecom"

        def receive(self, sender, data):
            return data

    tls = None if certs is None else TLSFiles.in_folder(certs, "telecom")
    server = PartyServer(Echo(), "127.0.0.1:0", tls=tls, peers={"active"}, insecure=certs is None).start()
    address_out.send(server.address)
    address_out.recv()
    server.stop()


def tls_cost(certs: Path, repeats: int = 400) -> dict[str, float]:
    """Median round trip (ms) of 256 bytes through the transport, with mutual TLS and without."""
    import multiprocessing as mp

    from verticalfs.transport.grpc import GrpcChannel, TLSFiles

    ctx = mp.get_context("spawn")
    out = {}
    for mode in ("tls", "plain"):
        here, there = ctx.Pipe()
        proc = ctx.Process(target=_echo_main, args=(str(certs) if mode == "tls" else None, there), daemon=True)
        proc.start()
        try:
            if not here.poll(120):  # the echo server failed to start (its error is on stderr)
                raise RuntimeError(f"the {mode} echo server did not start")
            addr = here.recv()
            ch = GrpcChannel("active", {"telecom": addr}, insecure=mode == "plain",
                             tls=TLSFiles.in_folder(certs, "active") if mode == "tls" else None)
            data = b"x" * 256
            for _ in range(50):
                ch.call("active", "telecom", data)
            lat = []
            for _ in range(repeats):
                t = time.perf_counter()
                ch.call("active", "telecom", data)
                lat.append((time.perf_counter() - t) * 1e3)
            ch.close()
            out[mode] = float(np.median(lat))
        finally:
            here.send("stop")
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    return out


def scenario(name: str, args) -> dict:
    """Train, serve and measure one scenario; its figures."""
    import httpx

    with tempfile.TemporaryDirectory(prefix=f"vfserve-{name}-") as tmp:
        root = Path(tmp)
        dep = make_adult(root, args.data_dir) if name == "adult" else make_site(root, args.rows)
        vf = [sys.executable, "-m", "verticalfs"]
        mine = []
        try:
            for p in PARTIES[1:]:
                start([*vf, "party", "serve", "--config", str(dep), "--name", p], root, f"party {p} serves", mine)
            t0 = time.perf_counter()
            subprocess.run([*vf, "run", "--config", str(dep), "-m", "vfl", "--no-progress", "-p", "epochs=2",
                            "--save-model", str(root / "model")], cwd=root, check=True, capture_output=True)
            train_s = time.perf_counter() - t0
            port = free_port()
            t0 = time.perf_counter()
            start([*vf, "serve-model", "--config", str(dep), "--model", str(root / "model"), "--port", str(port),
                   "--batch-ms", str(args.batch_ms)], root, "serving", mine)
            url = f"http://127.0.0.1:{port}"
            import pandas as pd

            ids = pd.read_csv(root / "bank.csv", usecols=["customer_id"], dtype=str)["customer_id"].to_numpy()
            with httpx.Client(base_url=url, timeout=60) as client:
                while client.get("/ready").status_code != 200:
                    time.sleep(0.1)
                open_s = time.perf_counter() - t0
                known = client.get("/health").json()["ids_known"]
                rng = np.random.default_rng(1)
                for i in ids[:50]:  # warm up
                    client.post("/predict", json={"ids": [str(i)]})
                load = [os.getloadavg()[0]]
                lat, parts = [], []
                for i in rng.choice(ids, args.requests):
                    t = time.perf_counter()
                    r = client.post("/predict", json={"ids": [str(i)]})
                    lat.append((time.perf_counter() - t) * 1e3)
                    assert r.status_code == 200 and len(r.json()["predictions"]) == 1, r.text
                    timing = parse_timing(r.headers.get("server-timing", ""))
                    timing["http"] = lat[-1] - timing.get("total", 0.0)
                    parts.append(timing)
                load.append(os.getloadavg()[0])
                t = time.perf_counter()
                n = 0
                for _ in range(args.batches):
                    r = client.post("/predict", json={"ids": rng.choice(ids, 1000, replace=False).tolist()})
                    n += len(r.json()["predictions"])
                batch_s = time.perf_counter() - t
                before = client.get("/health").json()["batches"]
            per_client = max(args.requests // args.clients, 1)

            def worker(seed: int, out: list) -> None:
                r = np.random.default_rng(seed)
                with httpx.Client(base_url=url, timeout=60) as c:
                    for i in r.choice(ids, per_client):
                        t = time.perf_counter()
                        c.post("/predict", json={"ids": [str(i)]})
                        out.append((time.perf_counter() - t) * 1e3)

            clat: list[float] = []
            threads = [threading.Thread(target=worker, args=(s, clat)) for s in range(args.clients)]
            t = time.perf_counter()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            conc_s = time.perf_counter() - t
            with httpx.Client(base_url=url) as client:
                made = client.get("/health").json()["batches"] - before
            tls = tls_cost(root / "certs")
        finally:
            for p in reversed(mine):
                stop(p)
    return {"name": name, "known": known, "train_s": train_s, "open_s": open_s, "lat": lat, "parts": parts,
            "rate": n / batch_s, "clat": clat, "conc_s": conc_s, "made": made, "tls": tls, "load": load}


def report(res: dict, args) -> None:
    lat = res["lat"]
    p50, p95, p99 = (percentile(lat, q) for q in (50, 95, 99))
    print(f"\n== {res['name']}: vfl, 3 parties over loopback mutual TLS, {res['known']} ids known, --batch-ms "
          f"{args.batch_ms}; trained over the deployment in {res['train_s']:.1f} s, serve-model ready in "
          f"{res['open_s']:.1f} s; load average {res['load'][0]:.1f} -> {res['load'][1]:.1f} on {os.cpu_count()} cores")
    print(f"{'figure':<46}{'measured':>12}{'goal':>12}")
    print(f"{'one id per request: p50 latency (ms)':<46}{p50:>12.2f}")
    print(f"{'one id per request: p95 latency (ms)':<46}{p95:>12.2f}")
    print(f"{'one id per request: p99 latency (ms)':<46}{p99:>12.2f}{'<= ' + format(GOAL_P99_MS, 'g'):>12}"
          + ("  met" if p99 <= GOAL_P99_MS else "  NOT met"))
    print(f"{'batches of 1,000 ids: ids/s':<46}{res['rate']:>12,.0f}{'>= ' + format(GOAL_IDS_PER_S, ',.0f'):>12}"
          + ("  met" if res["rate"] >= GOAL_IDS_PER_S else "  NOT met"))
    print(f"{f'{args.clients} concurrent clients, one id each: req/s':<46}{len(res['clat']) / res['conc_s']:>12,.0f}")
    print(f"{'  ... p99 latency (ms)':<46}{percentile(res['clat'], 99):>12.2f}")
    print(f"{'  ... server batches for ' + str(len(res['clat'])) + ' requests':<46}{res['made']:>12d}")
    print(f"where one id's time goes (ms; median and p99 over {len(lat)} requests; the slowest 1% of requests: "
          "their mean per part)")
    names = sorted({k for t in res["parts"] for k in t}, key=lambda k: (k == "total", k == "http", k))
    slow = [t for t, x in zip(res["parts"], lat, strict=True) if x >= p99]
    print(f"  {'part':<28}{'median':>9}{'p99':>9}{'slowest 1%':>12}")
    for k in names:
        v = [t.get(k, 0.0) for t in res["parts"]]
        print(f"  {k:<28}{np.median(v):>9.2f}{percentile(v, 99):>9.2f}{np.mean([t.get(k, 0.0) for t in slow]):>12.2f}")
    tls = res["tls"]
    print(f"  TLS: a 256-byte round trip through the transport takes {tls['tls']:.2f} ms with mutual TLS, "
          f"{tls['plain']:.2f} ms without (+{tls['tls'] - tls['plain']:.2f} ms per round trip; a request makes two "
          "rounds to every party)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", default="adult,synthetic")
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA"))
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--batch-ms", type=float, default=0.0)
    args = ap.parse_args()

    def on_term(signum, frame):  # SIGTERM as Ctrl-C: the finally blocks stop every process started
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    for name in args.scenarios.split(","):
        if name == "adult" and not args.data_dir:
            print("adult: skipped (no --data-dir and no VERTICALFS_DATA)")
            continue
        report(scenario(name, args), args)


if __name__ == "__main__":
    main()
