"""Online scoring over a deployment: latency of one id and throughput in batches, over real HTTP.

Three parties on 127.0.0.1 with mutual TLS (two ``verticalfs party serve`` processes and the label
party), a ``vfl`` model trained over the deployment with ``--save-model``, then ``verticalfs
serve-model`` in its own process; this script is the HTTP client (httpx, one keep-alive connection):

1. **one id per request**: ``--requests`` sequential requests, latency p50 / p99 (ms);
2. **batches of 1,000 ids**: ``--batches`` sequential requests, ids scored per second;
3. **concurrent clients**: ``--clients`` threads each sending one id at a time: requests per second
   and the number of batches the server made of them (the ``--batch-ms`` window at work).

Goal figures (issue 38) are printed beside the measured ones: p99 <= 50 ms for one id, >= 5,000 ids/s
in batches of 1,000. The data are synthetic (``--rows`` rows, 3 x 10 numeric columns), made
here so that batches of 1,000 distinct ids exist.

Usage::

    .venv/bin/python benchmarks/network/serve.py [--rows 20000] [--requests 500] [--batches 40]
        [--clients 8] [--batch-ms 2]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

PARTIES = ("bank", "telecom", "insurer")
GOAL_P99_MS = 50.0
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


def write_deployment(root: Path, parties) -> Path:
    """Certificates for ``parties`` (``certs make``) and a deployment file with mutual TLS on
    127.0.0.1: the bank holds the label ``default``, every party ``<party>.csv`` keyed by ``customer_id``."""
    subprocess.run([sys.executable, "-m", "verticalfs", "certs", "make", "--parties", ",".join(parties), "--out",
                    str(root / "certs")], check=True, capture_output=True)
    lines = ['label_party = "bank"', 'label_column = "default"', 'id_column = "customer_id"', 'certs = "certs"']
    for p in parties:
        lines += [f"[parties.{p}]", f'address = "127.0.0.1:{free_port()}"', f'file = "{p}.csv"']
    (root / "deployment.toml").write_text("\n".join(lines) + "\n")
    return root / "deployment.toml"


def start(cmd: list[str], cwd: Path, ready: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--batch-ms", type=float, default=2.0)
    args = ap.parse_args()
    import httpx

    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dep = make_site(root, args.rows)
        vf = [sys.executable, "-m", "verticalfs"]
        try:
            procs += [start([*vf, "party", "serve", "--config", str(dep), "--name", p], root, f"party {p} serves")
                      for p in PARTIES[1:]]
            t0 = time.perf_counter()
            subprocess.run([*vf, "run", "--config", str(dep), "-m", "vfl", "--no-progress", "-p", "epochs=2",
                            "--save-model", str(root / "model")], cwd=root, check=True, capture_output=True)
            train_s = time.perf_counter() - t0
            port = free_port()
            t0 = time.perf_counter()
            procs.append(start([*vf, "serve-model", "--config", str(dep), "--model", str(root / "model"), "--port",
                                str(port), "--batch-ms", str(args.batch_ms)], root, "serving"))
            url = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=url, timeout=60) as client:
                while client.get("/health").status_code != 200:
                    time.sleep(0.1)
                open_s = time.perf_counter() - t0
                known = client.get("/health").json()["ids_known"]
                rng = np.random.default_rng(1)
                ids = np.array([f"c{i:07d}" for i in range(args.rows)])
                for i in ids[:20]:  # warm up
                    client.post("/predict", json={"ids": [str(i)]})
                lat = []
                for i in rng.choice(ids, args.requests):
                    t = time.perf_counter()
                    r = client.post("/predict", json={"ids": [str(i)]})
                    lat.append((time.perf_counter() - t) * 1e3)
                    assert r.status_code == 200 and len(r.json()["predictions"]) == 1, r.text
                t = time.perf_counter()
                n = 0
                for _ in range(args.batches):
                    batch = rng.choice(ids, 1000, replace=False).tolist()
                    r = client.post("/predict", json={"ids": batch})
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
        finally:
            for p in reversed(procs):
                stop(p)

    p50, p99 = statistics.median(lat), percentile(lat, 99)
    rate = n / batch_s
    print(f"online scoring, vfl, 3 parties over loopback mutual TLS, {args.rows} rows ({known} ids known), "
          f"--batch-ms {args.batch_ms}; trained over the deployment in {train_s:.1f} s, serve-model ready "
          f"(model opened, PSI) in {open_s:.1f} s")
    print(f"{'figure':<44}{'measured':>12}{'goal':>12}")
    print(f"{'one id per request: p50 latency (ms)':<44}{p50:>12.2f}{'':>12}")
    print(f"{'one id per request: p99 latency (ms)':<44}{p99:>12.2f}{'<= ' + format(GOAL_P99_MS, 'g'):>12}"
          + ("  met" if p99 <= GOAL_P99_MS else "  NOT met"))
    print(f"{'batches of 1,000 ids: ids/s':<44}{rate:>12,.0f}{'>= ' + format(GOAL_IDS_PER_S, ',.0f'):>12}"
          + ("  met" if rate >= GOAL_IDS_PER_S else "  NOT met"))
    print(f"{f'{args.clients} concurrent clients, one id each: req/s':<44}{len(clat) / conc_s:>12,.0f}")
    print(f"{'  ... p99 latency (ms)':<44}{percentile(clat, 99):>12.2f}")
    print(f"{f'  ... server batches for {len(clat)} requests':<44}{made:>12d}")


if __name__ == "__main__":
    main()
