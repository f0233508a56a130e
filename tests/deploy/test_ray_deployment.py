"""A three-party deployment where one party runs `party serve --engine ray` on a local Ray cluster
(`ray start --head` with two worker CPUs, on 127.0.0.1), against the same deployment with that party
in memory: the same training history, metrics, selection, method traffic and predictions (issue 55).

The cluster is started by this module (its own temporary folder, loopback only) and stopped by
terminating the `ray start --block` process, which stops the processes it started.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("ray")
pytest.importorskip("grpc")
pytest.importorskip("pyarrow")

from verticalfs.engine.ray import LOOPBACK_ENV  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray_deployment")]
PARTIES = ("bank", "telecom", "insurer")
#: the cluster's authentication token, given to its head and to the party (Ray's token auth; not
#: ~/.ray/auth_token, which another Ray instance on this host may replace)
_TOKEN = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _files(root: Path) -> None:
    """breast_cancer by columns: the bank (label), the telecom (also as a folder of three Parquet
    files, the ray engine's table) and the insurer; ids in a different order per file, some held
    by one party only."""
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer(as_frame=True)
    X, y = d.data, d.target
    ids = np.array([f"c{i:04d}" for i in range(len(X))])
    for k, (name, cols) in enumerate(zip(PARTIES, np.array_split(np.asarray(X.columns), 3), strict=True)):
        df = X[list(cols)].copy()
        df.columns = [f"{name}_{j}" for j in range(len(cols))]
        df.insert(0, "id", ids)
        if name == "bank":
            df["default"] = y.to_numpy()
        keep = np.ones(len(df), dtype=bool)
        keep[np.random.default_rng(k).choice(len(df), 10 * k, replace=False)] = False
        df = df[keep].sample(frac=1.0, random_state=k).reset_index(drop=True)
        df.to_parquet(root / f"{name}.parquet", index=False)
        if name == "telecom":
            (root / "telecom_table").mkdir()
            for j, part in enumerate(np.array_split(np.arange(len(df)), 3)):
                df.iloc[part].to_parquet(root / "telecom_table" / f"part-{j}.parquet", index=False)


def _deployment(root: Path, name: str, ray_address: str | None) -> Path:
    lines = ['label_party = "bank"', 'label_column = "default"', "insecure = true", "connect_timeout = 60",
             "call_timeout = 120"]
    for p in PARTIES:
        lines += [f"[parties.{p}]", f'address = "127.0.0.1:{_free_port()}"', f'file = "{p}.parquet"']
        if p == "telecom" and ray_address:
            lines += ['engine = "ray"', f'ray_address = "{ray_address}"', 'table = "telecom_table"']
        # the two runs compared to the bit: the label holder's seeds, not each party's own (issue 50)
        lines += [f"[parties.{p}.policy]", "own_randomness = false"]
    f = root / name
    f.write_text("\n".join(lines) + "\n")
    return f


def _serve(dep: Path, name: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "250", LOOPBACK_ENV: "0", **_TOKEN}
    return subprocess.Popen([sys.executable, "-m", "verticalfs", "party", "serve", "--config", str(dep), "--name",
                             name, "--insecure"], cwd=dep.parent, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _serves(proc: subprocess.Popen, name: str) -> str:
    """The party's "serves" line (an --insecure party warns first); its output so far if it stopped."""
    seen = []
    while True:
        line = proc.stdout.readline()
        seen.append(line)
        if f"party {name} serves" in line:
            return line
        if not line or len(seen) > 50:
            raise AssertionError(f"party {name} did not start:\n" + "".join(seen))


def _stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def ray_cluster():
    """`ray start --head --block` on 127.0.0.1 with two worker CPUs; its address."""
    temp = tempfile.mkdtemp(prefix="vfsrt-")  # short: Ray's socket paths must fit 107 bytes
    port = _free_port()
    env = {**os.environ, LOOPBACK_ENV: "0", **_TOKEN}
    log = Path(temp) / "head.log"  # a file, not a pipe nobody reads once the cluster runs
    with open(log, "w") as out:
        head = subprocess.Popen([shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray", "start",
                                 "--head", "--block", "--port", str(port), "--num-cpus", "2", "--include-dashboard",
                                 "false", "--disable-usage-stats", "--temp-dir", temp], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t = time.monotonic()
        while time.monotonic() - t < 180 and head.poll() is None and "Ray runtime started" not in log.read_text():
            time.sleep(0.5)
        assert "Ray runtime started" in log.read_text(), log.read_text()
        yield f"127.0.0.1:{port}"
    finally:
        _stop(head, 60)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray_deployment")
    (root / "data").mkdir()
    _files(root / "data")
    return root


def test_a_party_on_a_ray_cluster_trains_and_predicts_as_the_in_memory_party(site, ray_cluster):
    from verticalfs.deploy.config import Deployment
    from verticalfs.deploy.holder import run_deployment
    from verticalfs.deploy.predict import predict_deployment

    params = {"epochs": 2, "batch_size": 64, "hidden": (16, 8)}
    out = {}
    for label, address in (("memory", None), ("ray", ray_cluster)):
        # a folder each: the label holder's PSI cache (state/ beside the file) is not shared, so that
        # both runs intersect the ids over the network (the ray party's blinding on Ray tasks)
        here = site / label
        shutil.copytree(site / "data", here)
        dep = _deployment(here, "deployment.toml", address)
        procs = {p: _serve(dep, p) for p in PARTIES if p != "bank"}
        try:
            for p, proc in procs.items():
                line = _serves(proc, p)
                if label == "ray" and p == "telecom":
                    assert "engine ray" in line and "telecom_table" in line
            res = run_deployment(dep, "vfl", seed=0, params=params, save_model=here / "model")
            pred = predict_deployment(Deployment.load(dep), here / "model")
            out[label] = (res, pred)
        finally:
            for proc in procs.values():
                _stop(proc)
    (mem, mem_pred), (ray, ray_pred) = out["memory"], out["ray"]
    def untimed(history):  # an epoch's record without its clock readings
        return [{k: v for k, v in h.items() if not any(w in k for w in ("second", "time", "_s"))} for h in history]

    assert ray.metrics == mem.metrics  # trained on the same rows, to the bit
    assert untimed(ray.history) == untimed(mem.history), [
        {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k)} for a, b in zip(ray.history, mem.history, strict=True)]
    assert ray.info["deployment"]["rows"] == mem.info["deployment"]["rows"]
    for phase in ("train", "eval", "setup"):  # the label holder sees a party: the same messages and bytes
        if phase in mem.communication["by_phase"]:
            assert ray.communication["by_phase"][phase] == mem.communication["by_phase"][phase]
    assert ray.communication["by_kind"] == mem.communication["by_kind"]
    assert list(ray_pred["ids"]) == list(mem_pred["ids"]) and len(ray_pred["ids"]) > 500
    for k in ray_pred:
        if isinstance(ray_pred[k], np.ndarray) and ray_pred[k].dtype.kind == "f":
            assert np.array_equal(ray_pred[k], mem_pred[k])
    assert ray.info["deployment"]["psi_cached"] == [] == mem.info["deployment"]["psi_cached"]
    assert ray.communication["by_kind"]["PsiChunk"] > 0  # (equal to the in-memory party's, above)
    ids = pd.read_parquet(site / "data" / "telecom.parquet")["id"]
    assert ray.info["deployment"]["rows"]["telecom"]["rows_in_file"] == len(ids)
