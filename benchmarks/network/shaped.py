"""Measured wall time on 10 Mbit/s links against the bandwidth model's simulated tau.

Each party runs ``verticalfs party serve`` in its own network namespace; the label holder runs
``verticalfs run --config deployment.toml`` in another; each party is joined to the label holder
by its own veth pair, both ends shaped with the ``tbf`` queueing discipline to ``--mbps`` (the
model's topology: one link of bandwidth B per party, sparsevfl.md section 4.4). The label party's
file holds only the ids and the label, so every feature party is behind a shaped link. Mutual TLS
and PSI run as in any deployment.

For ``sparsevfl-16`` and ``original`` (SparseVFL's uncompressed baseline) it prints the measured
training time of the networked run (the method's fit, as ``timings.total_seconds``; PSI and
alignment before it are not included) and the simulated tau of the in-process run of the same
files and seed at the same bandwidth (:func:`verticalfs.transport.bandwidth.estimate_wall_time`:
measured compute + bytes / B per synchronous round), and their ratio. Metrics of the two runs must
agree (checked).

Needs root, ``ip`` and ``tc`` (iproute2) and the ``deploy`` extra; otherwise it says why and
exits. It creates namespaces ``vfbench-*`` and addresses 10.77.<i>.0/30 inside them only, and
removes them (and every process it started) on exit, also on SIGTERM or Ctrl-C.

Usage::

    sudo .venv/bin/python benchmarks/network/shaped.py [--data-dir DIR] [--dataset adult]
        [--parties 3] [--epochs 2] [--mbps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

PREFIX = "vfbench"
PY = sys.executable


def sh(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def can_shape() -> str | None:
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} (iproute2) is not installed"
    probe = f"{PREFIX}-probe"
    r = sh("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create network namespaces: {r.stderr.strip()}"
    sh("ip", "netns", "del", probe, check=False)
    return None


class Links:
    """Namespaces ``vfbench-h`` (label holder) and ``vfbench-p<i>``, a shaped veth pair each."""

    def __init__(self, n: int, mbps: float) -> None:
        self.holder = f"{PREFIX}-h"
        self.parties = [f"{PREFIX}-p{i}" for i in range(1, n + 1)]
        self.addresses = {}
        self.cleanup()
        sh("ip", "netns", "add", self.holder)
        sh("ip", "link", "set", "lo", "up", ns=self.holder)
        rate = f"{mbps}mbit"
        for i, ns in enumerate(self.parties, start=1):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
            a, b = f"vfh{i}", f"vfp{i}"
            sh("ip", "link", "add", a, "netns", self.holder, "type", "veth", "peer", "name", b, "netns", ns)
            for dev, space, ip in ((a, self.holder, f"10.77.{i}.1/30"), (b, ns, f"10.77.{i}.2/30")):
                sh("ip", "addr", "add", ip, "dev", dev, ns=space)
                sh("ip", "link", "set", dev, "up", ns=space)
                # egress of each end: each direction limited to the rate (burst: one MTU-sized bucket)
                sh("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", "32kbit",
                   "latency", "400ms", ns=space)
            self.addresses[ns] = f"10.77.{i}.2"

    def cleanup(self=None) -> None:
        out = sh("ip", "netns", "list", check=False).stdout
        for line in out.splitlines():
            name = line.split()[0] if line.strip() else ""
            if name.startswith(PREFIX):
                sh("ip", "netns", "del", name, check=False)


def write_files(folder: Path, dataset: str, n_parties: int, data_dir) -> tuple[dict, list[str]]:
    """The data set's columns split among the parties, one CSV each; the label party holds only
    the ids and the label."""
    import numpy as np

    from verticalfs.data.partition import partition
    from verticalfs.data.registry import load_dataset

    table = load_dataset(dataset, data_dir=data_dir, seed=0)
    vds = partition(table, n_parties, seed=0)
    ids = np.array([f"r{i:06d}" for i in range(vds.n_samples)])
    files = {}
    import pandas as pd

    label = pd.DataFrame({"id": ids, "label": vds.y})
    files["holder"] = folder / "holder.csv"
    label.to_csv(files["holder"], index=False)
    names = []
    for i, b in enumerate(vds.blocks, start=1):
        df = b.X.copy()
        df.columns = [str(c) for c in df.columns]
        df.insert(0, "id", ids)
        files[f"p{i}"] = folder / f"p{i}.csv"
        df.to_csv(files[f"p{i}"], index=False)
        names.append(f"p{i}")
    return files, names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA"))
    ap.add_argument("--dataset", default="adult")
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--mbps", type=float, default=10.0)
    ap.add_argument("--methods", default="sparsevfl-16,original")
    args = ap.parse_args()
    why = can_shape()
    if why:
        print(f"skipped: {why} (this benchmark needs root, network namespaces and tc tbf)")
        return

    def on_term(signum, frame):  # SIGTERM as Ctrl-C: the finally block removes the namespaces, stops the parties
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    import verticalfs
    from verticalfs.data.user import load_party_files
    from verticalfs.transport.grpc import make_certs

    tmp = Path(tempfile.mkdtemp(prefix="vfshaped-"))
    procs: list[subprocess.Popen] = []
    links = None
    try:
        files, names = write_files(tmp, args.dataset, args.parties, args.data_dir)
        links = Links(args.parties, args.mbps)
        make_certs(["active", "holder", *names], tmp / "certs",
                   hosts=["localhost", "127.0.0.1", *links.addresses.values()])
        lines = ['label_party = "holder"', 'label_column = "label"', 'id_column = "id"', 'certs = "certs"',
                 "connect_timeout = 20", '[parties.holder]', 'address = "127.0.0.1:7000"', 'file = "holder.csv"']
        for name, ns in zip(names, links.parties, strict=True):
            lines += [f"[parties.{name}]", f'address = "{links.addresses[ns]}:7001"', f'file = "{name}.csv"',
                      'categorical = "auto"']
        dep = tmp / "deployment.toml"
        dep.write_text("\n".join(lines) + "\n")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
        for name, ns in zip(names, links.parties, strict=True):
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, PY, "-m", "verticalfs", "party", "serve",
                                           "--config", str(dep), "--name", name], cwd=tmp, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for p, name in zip(procs, names, strict=True):
            line = p.stdout.readline()
            if f"party {name} serves" not in line:
                raise RuntimeError(f"party {name} did not start: {line}{p.stdout.read()}")
        vds, _ = load_party_files({k: v for k, v in files.items()}, label_party="holder", label_column="label",
                                  id_column="id", categorical="auto")
        data = verticalfs.build_data(vds, seed=0)
        print(f"{args.dataset}, {args.parties} parties behind {args.mbps:g} Mbit/s tbf links, {args.epochs} epochs; "
              f"{data.n_samples('train')} training rows")
        print(f"{'method':<14} {'measured s':>10} {'simulated s':>11} {'ratio':>6} {'MB':>7}")
        for method in args.methods.split(","):
            params = {"epochs": args.epochs}
            ref = verticalfs.run(method, data, seed=0, params=params, bandwidths_mbps=(args.mbps,))
            tau = ref.estimates[0]["seconds"]
            out = tmp / f"{method}.json"
            r = subprocess.run(["ip", "netns", "exec", links.holder, PY, "-m", "verticalfs", "run", "--config",
                                str(dep), "-m", method, "-p", f"epochs={args.epochs}", "--no-progress", "--out",
                                str(out)], cwd=tmp, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"{method} failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")
            res = json.loads(out.read_text())
            if res["metrics"] != ref.metrics:
                raise RuntimeError(f"{method}: networked metrics {res['metrics']} != in-process {ref.metrics}")
            measured = res["timings"]["total_seconds"]
            print(f"{method:<14} {measured:>10.2f} {tau:>11.2f} {measured / tau:>6.2f} "
                  f"{res['communication']['total_bytes'] / 1e6:>7.2f}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        Links.cleanup(None)  # every vfbench-* namespace (also those of a Links interrupted while being made)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
