"""A deployment as a user runs it: one `verticalfs party serve` process per party, the label party
running `verticalfs run --config deployment.toml`, mutual TLS, PSI on the ids, on 127.0.0.1.

Each party reads only its own CSV (with ids the others do not all hold). The networked run must
give the in-process run's metrics, selection and method traffic for the same files and seed; a
party killed mid-run stops the run with an error naming it; ``--resume`` after the kill ends with
the uninterrupted run's metrics.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("private_set_intersection")

import verticalfs  # noqa: E402
from tests.event_stream import Lines, check_stream  # noqa: E402
from verticalfs.data.user import load_party_files  # noqa: E402
from verticalfs.deploy.config import Deployment  # noqa: E402
from verticalfs.exceptions import ConfigError  # noqa: E402
from verticalfs.methods import available, get  # noqa: E402

# the module's tests share one site and two party processes (module fixtures): one xdist worker runs
# them all, in order (a second worker would start its own processes, each importing torch). All but
# the networked vfl run are marked slow: that one keeps a deployment (party serve, PSI, mutual TLS) in
# the fast suite.
pytestmark = pytest.mark.xdist_group("deploy_deployment")
PARTIES = ("bank", "telecom", "insurer")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _files(folder: Path) -> dict[str, Path]:
    """breast_cancer split by columns into three organisations' files; ids overlap only partly
    and the rows are in a different order in each file."""
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer(as_frame=True)
    X, y = d.data, d.target
    cols = np.array_split(np.asarray(X.columns), 3)
    ids = np.array([f"c{i:04d}" for i in range(len(X))])
    rng = np.random.default_rng(7)
    out = {}
    for k, (name, c) in enumerate(zip(PARTIES, cols, strict=True)):
        df = X[list(c)].copy()
        df.columns = [f"{name}_{j}" for j in range(len(c))]
        df.insert(0, "customer_id", ids)
        if name == "bank":
            df["default"] = y.to_numpy()
        keep = np.ones(len(df), dtype=bool)
        keep[rng.choice(len(df), 15 * k, replace=False)] = False  # telecom lacks 15 ids, insurer 30
        df = df[keep]
        extra = df.iloc[:5].copy()  # ids nobody else holds
        extra["customer_id"] = [f"x{name}{i}" for i in range(5)]
        df = pd.concat([df, extra]).sample(frac=1.0, random_state=k)
        out[name] = folder / f"{name}.csv"
        df.to_csv(out[name], index=False)
    return out


def _site(root: Path, policy: list[str]) -> Path:
    files = _files(root)
    subprocess.run([sys.executable, "-m", "verticalfs", "certs", "make", "--parties", ",".join(PARTIES),
                    "--out", str(root / "certs")], check=True, capture_output=True)
    lines = ['label_party = "bank"', 'label_column = "default"', 'id_column = "customer_id"', 'certs = "certs"',
             'checkpoints = "ck"', "connect_timeout = 5"]
    for p in PARTIES:
        lines += [f"[parties.{p}]", f'address = "127.0.0.1:{_free_port()}"', f'file = "{files[p].name}"']
    for p in PARTIES:
        lines += [f"[parties.{p}.policy]", *policy]
    (root / "deployment.toml").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    # feast as in-process: its evaluation classifier on gathered columns
    # feast as in-process: its evaluation classifier on gathered columns; the label holder's seeds and a
    # bottom model as wide as in-process (issue 50's floors and own randomness keep them otherwise);
    # secureboost's open finding accepted (its gradients cannot be checked: docs/methods/secureboost.md)
    return _site(tmp_path_factory.mktemp("deployment"), ["release_columns = true", "own_randomness = false",
                                                          "max_embedding_fraction = 1.0",
                                                          'allow_findings = ["secureboost-gradients"]'])


def _start(site: Path, name: str, *args: str) -> subprocess.Popen:
    """``party serve`` of ``name`` over the site's deployment file (``args``: more options, e.g. ``--policy``)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "verticalfs", "party", "serve", "--config",
                             str(site / "deployment.toml"), "--name", name, *args], cwd=site, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _listening(proc: subprocess.Popen, name: str) -> subprocess.Popen:
    line = proc.stdout.readline()  # "party <name> serves ..." once listening
    assert f"party {name} serves" in line, line + proc.stdout.read()
    return proc


def _serve(site: Path, name: str) -> subprocess.Popen:
    return _listening(_start(site, name), name)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def servers(site):
    started = {p: _start(site, p) for p in PARTIES if p != "bank"}  # start together: each imports torch
    procs = {p: _listening(proc, p) for p, proc in started.items()}
    yield procs
    for p in procs.values():
        _stop(p)


def _in_process(site: Path, method: str, params: dict, seed: int = 0):
    vds, _ = load_party_files({p: site / f"{p}.csv" for p in PARTIES}, label_party="bank",
                              label_column="default", id_column="customer_id")
    return verticalfs.run(method, verticalfs.build_data(vds, seed=seed), seed=seed, params=params)


def _method_traffic(res) -> dict:
    """Payload bytes per phase and kind, without the networked run's own `audit` phase."""
    out = {k: v for k, v in res.communication["by_phase"].items() if k not in ("audit", "setup", "checkpoint")}
    kinds = res.communication["by_kind"]
    out.update({k: kinds[k] for k in ("Hello", "HelloRequest", "Join", "Ready") if k in kinds})  # setup's method part
    return out


@pytest.mark.parametrize("method,params", [
    ("vfl", {"epochs": 2, "batch_size": 64, "hidden": (16, 8)}),
    pytest.param("feast", {"n_select": 8}, marks=pytest.mark.slow),
    # the label party's own block is a party of its own on both roads: the same trees, the same bytes
    pytest.param("secureboost", {"n_estimators": 3, "max_depth": 3, "n_bins": 16},
                 marks=pytest.mark.slow),
    # the label party's own splits hidden from the others (issue 51): the same trees and bytes on both roads
    pytest.param("secureboost", {"n_estimators": 3, "max_depth": 3, "n_bins": 16, "hide_own_splits": True,
                                 "label_party": "bank"},
                 marks=pytest.mark.slow, id="secureboost-hidden"),
])
def test_networked_run_equals_in_process(site, servers, method, params):
    from verticalfs.deploy.holder import run_deployment

    sink = Lines()
    net = run_deployment(site / "deployment.toml", method, seed=0, params=params, callbacks=[sink])
    ref = _in_process(site, method, params)
    # its events (issue 49): started with the parties' policies, PSI and alignment, then the method's
    events = sink.events()
    assert check_stream(events, method=method, parties=["telecom", "insurer"], mode="deployment") >= 1
    assert events[0].label_party == "bank" and set(events[0].policies) == {"telecom", "insurer"}
    assert events[0].policies["telecom"]["release_columns"] is True
    phases = [e.name for e in events if e.type == "phase" and e.state == "end"]
    assert phases[:2] == ["psi", "align"]
    assert events[-1].bytes_total == net.communication["total_bytes"]
    assert net.metrics == ref.metrics
    assert net.selection["n_kept"] == ref.selection["n_kept"]
    for p in ref.selection["parties"]:
        assert net.selection["parties"][p]["kept_columns"] == ref.selection["parties"][p]["kept_columns"]
    assert _method_traffic(net) == _method_traffic(ref)
    # the ids were intersected privately, or (unchanged files) the label holder reused its earlier result
    from verticalfs.psi import resolve_engine  # psi_engine = "auto": ristretto255 where rbcl is installed

    psi_kind = {"ristretto255": "PsiChunk", "openmined": "PsiRequest"}[resolve_engine()]
    cached = net.info["deployment"]["psi_cached"]
    assert (net.communication["by_kind"].get(psi_kind, 0) > 0 and cached == []) or (
        cached == ["telecom", "insurer"] and psi_kind not in net.communication["by_kind"])
    assert net.timings["psi_s"] > 0 and net.timings["psi_s"] < net.timings["total_seconds"] + 60
    rows = net.info["deployment"]["rows"]
    n = net.info["deployment"]["n_aligned"]
    held = [set(pd.read_csv(site / f"{p}.csv", dtype={"customer_id": str})["customer_id"]) for p in PARTIES]
    assert n == len(set.intersection(*held)) < 569  # exactly the ids every file holds
    assert rows["telecom"]["rows_in_file"] == 569 - 15 + 5
    assert rows["insurer"]["rows_kept"] == n == sum(len(v) for v in ref.federation.labels.y.values())
    if method == "vfl":  # TCP carried the ledger's bytes plus gRPC framing and TLS (the label holder's links)
        assert net.communication["wire_bytes"] > net.communication["total_bytes"]
    if params.get("hide_own_splits"):  # the bank's own splits were hidden: the others summed over anchors
        assert net.communication["by_kind"].get("HiddenHistogramRequest", 0) > 0
    if method == "feast":  # its party-to-party messages, recorded at the parties, are on the ledger
        assert net.communication["by_direction"].get("peer", 0) == ref.communication["by_direction"]["peer"] > 0


def test_a_refusal_over_the_deployment_is_an_event(site, servers):
    """A party's policy refuses the plaintext mode (require_secure = true): its refusal is an event
    naming it and the rule, then the run's end with the error."""
    from verticalfs.deploy.holder import run_deployment
    from verticalfs.exceptions import PolicyError

    sink = Lines()
    with pytest.raises(PolicyError, match="require_secure"):
        run_deployment(site / "deployment.toml", "fedsdg-fs", seed=0, callbacks=[sink],
                       params={"secure": False, "epochs": 1})
    events = sink.events()
    check_stream(events, method="fedsdg-fs", parties=["telecom", "insurer"], mode="deployment", status="error")
    (refusal,) = [e for e in events if e.type == "refusal"]
    assert refusal.rule == "require_secure" and refusal.party in PARTIES


@pytest.fixture(scope="module")
def open_site(tmp_path_factory):
    """A site whose parties allow every method's small test settings (512-bit keys, plaintext modes,
    a run per registered method), with its two party processes."""
    root = _site(tmp_path_factory.mktemp("open"), ["release_columns = true", "min_key_bits = 0",
                                                    "require_secure = false", "max_psi_requests = 1000",
                                                    # and every method's test shapes (issue 50's floors)
                                                    'allow_findings = ["all"]', "min_hidden_layers = 0",
                                                    "max_embedding_fraction = 1.0", "min_batch_size = 1"])
    started = {p: _start(root, p) for p in PARTIES if p != "bank"}
    procs = {p: _listening(proc, p) for p, proc in started.items()}
    yield root
    for p in procs.values():
        _stop(p)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in available() if not get(n).needs_pooled_data])
def test_every_method_sends_valid_events_over_a_deployment(open_site, name):
    """The registry over a deployment's party processes: every method's events fit the schema."""
    from verticalfs.deploy.holder import run_deployment

    sink = Lines()
    res = run_deployment(open_site / "deployment.toml", name, seed=0, params=get(name).test_params,
                         callbacks=[sink])
    events = sink.events()
    assert check_stream(events, method=res.info["trained_as"], parties=["telecom", "insurer"],
                        mode="deployment") >= 1
    assert [e.name for e in events if e.type == "phase" and e.state == "end"][:2] == ["psi", "align"]
    assert [e.type for e in events].count("selection") == 1


def _args(params: dict) -> list[str]:
    return [a for k, v in params.items()
            for a in ("-p", f"{k}={v if not isinstance(v, tuple) else ','.join(map(str, v))}")]


def _latest(site: Path, after: float = 0.0) -> dict[str, dict]:
    """The label holder's checkpoints of runs under way or interrupted: run folder -> its latest.json."""
    out = {}
    for f in (site / "ck" / "active").glob("*/latest.json"):
        try:
            if f.stat().st_mtime >= after:
                out[f.parent.name] = json.loads(f.read_text())
        except (OSError, ValueError):  # (being replaced)
            pass
    return out


def _wait_for_epochs(site: Path, holders: list, n: int, after: float, runs: int = 1, timeout: float = 180) -> dict:
    t0 = time.monotonic()
    while True:
        got = {k: v for k, v in _latest(site, after).items() if v["epochs"] >= n}
        if len(got) >= runs:
            return got
        for h in holders:
            assert h.poll() is None, h.communicate()
        assert time.monotonic() - t0 < timeout
        time.sleep(0.05)


@pytest.mark.slow
def test_kill_and_resume(site, servers):
    """The label holder as its own process: a party killed mid-run, not back within the rejoin window
    (0 here), is named; --resume ends with the metrics of an uninterrupted run."""
    params = {"epochs": 12, "batch_size": 32, "hidden": (16, 8)}
    ref = _in_process(site, "vfl", params)
    conf = site / "no-rejoin.toml"
    conf.write_text((site / "deployment.toml").read_text().replace("connect_timeout = 5", "connect_timeout = 5\n"
                                                                    "rejoin_window = 0"))
    cmd = [sys.executable, "-m", "verticalfs", "run", "--config", str(conf), "-m", "vfl", "--no-progress",
           *_args(params)]
    from verticalfs.deploy.holder import connect

    connect(Deployment.load(site / "deployment.toml")).close()  # PSI now: the runs below take it from the cache
    t_start = time.time()
    holder = subprocess.Popen(cmd, cwd=site, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (key,) = _wait_for_epochs(site, [holder], 2, t_start)
    servers["insurer"].kill()
    t_kill = time.monotonic()
    out, err = holder.communicate(timeout=60)
    assert holder.returncode != 0
    assert time.monotonic() - t_kill < 20
    assert "insurer" in out + err, out + err
    assert _latest(site)[key]["epochs"] < params["epochs"]
    servers["insurer"] = _serve(site, "insurer")  # the party comes back with its checkpoint folder
    done = subprocess.run([*cmd, "--resume", "--out", str(site / "resumed.json")], cwd=site, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    res = verticalfs.RunResult.load(site / "resumed.json")
    assert res.metrics == pytest.approx(ref.metrics, abs=0, rel=0)
    assert [h["roc_auc"] for h in res.history] == [h["roc_auc"] for h in ref.history]
    assert key not in _latest(site)  # a finished run leaves no checkpoint to resume
    # --resume did not redo PSI (the files did not change): the label holder's cached results
    assert res.info["deployment"]["psi_cached"] == ["telecom", "insurer"]
    assert "PsiRequest" not in res.communication["by_kind"] and "psi_s" in res.timings
    assert "result reused for telecom, insurer" in done.stderr
    resumed_at = res.info["resumed_from"]["epoch"]
    assert f"after epoch {resumed_at}" in done.stderr and resumed_at >= 2
    # nor any party: each deleted its checkpoints of the completed runs in its own folder
    assert not list((site / "ck").rglob("*.pt")), sorted((site / "ck").rglob("*.pt"))


@pytest.mark.slow
def test_a_party_restarted_mid_run_is_waited_for(site, servers):
    """A party killed mid-run and started again within the rejoin window (default 60 s): the run,
    without --resume, waits for it, continues from its last checkpoint and ends with the metrics of
    an uninterrupted run."""
    params = {"epochs": 10, "batch_size": 32, "hidden": (16, 8)}
    ref = _in_process(site, "vfl", params)
    out_file = site / "rejoined.json"
    cmd = [sys.executable, "-m", "verticalfs", "run", "--config", str(site / "deployment.toml"), "-m", "vfl",
           "--no-progress", "--out", str(out_file), *_args(params)]
    t_start = time.time()
    holder = subprocess.Popen(cmd, cwd=site, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_epochs(site, [holder], 2, t_start)
    servers["telecom"].kill()
    servers["telecom"].wait()
    servers["telecom"] = _serve(site, "telecom")  # a restart: all its state of the run is gone
    out, err = holder.communicate(timeout=300)
    assert holder.returncode == 0, out + err
    res = verticalfs.RunResult.load(out_file)
    assert res.metrics == ref.metrics
    assert [h["roc_auc"] for h in res.history] == [h["roc_auc"] for h in ref.history]
    (wait,) = res.info["deployment"]["rejoined"]
    assert wait["party"] == "telecom" and 0 < wait["waited_s"] < 60
    assert res.info["resumed_from"]["epoch"] >= 2  # from its last checkpoint, not from the start
    assert "waiting up to 60 s for party 'telecom' to come back" in err and "answers again after" in err
    assert res.info["deployment"]["psi_cached"] == ["telecom", "insurer"]  # PSI from the cache: digests only


@pytest.mark.slow
def test_two_runs_at_once_one_killed(site, servers, tmp_path):
    """Two label-holder runs of the same label party against the same party processes at once, each
    serving the label party's own columns itself (the second on a port of its own): killing the first
    (whose process holds the label party's address) leaves the second whole, which ends with the
    metrics it has alone; the first's checkpoint is left as it was, and --resume finishes it with the
    metrics of an uninterrupted run."""
    first = {"epochs": 80, "batch_size": 64, "hidden": (16, 8)}  # long enough to be going when the second starts
    second = {"epochs": 6, "batch_size": 64, "hidden": (8,)}

    def cmd(params, out):
        return [sys.executable, "-m", "verticalfs", "run", "--config", str(site / "deployment.toml"), "-m", "vfl",
                "--no-progress", "--out", str(out), *_args(params)]

    from verticalfs.deploy.holder import connect

    connect(Deployment.load(site / "deployment.toml")).close()  # PSI now: the runs below take it from the cache
    t_start = time.time()
    a = subprocess.Popen(cmd(first, tmp_path / "first.json"), cwd=site, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    (key_a,) = _wait_for_epochs(site, [a], 1, t_start)  # the first run trains (and holds the bank's address)
    b = subprocess.Popen(cmd(second, tmp_path / "second.json"), cwd=site, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    both = _wait_for_epochs(site, [a, b], 1, t_start, runs=2)
    (key_b,) = set(both) - {key_a}
    a.kill()  # the label holder of the first run, and the bank's columns it served, gone at once
    a.communicate()
    out, err = b.communicate(timeout=300)
    assert b.returncode == 0, out + err
    assert "serves bank's columns at 127.0.0.1:" in err  # its own block, on a port of its own
    res_b = verticalfs.RunResult.load(tmp_path / "second.json")
    assert res_b.metrics == _in_process(site, "vfl", second).metrics
    left = _latest(site)
    assert key_b not in left and key_a in left  # the second cleared its own checkpoint, not the first's
    done = subprocess.run([*cmd(first, tmp_path / "first.json"), "--resume"], cwd=site, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    res_a = verticalfs.RunResult.load(tmp_path / "first.json")
    assert res_a.metrics == _in_process(site, "vfl", first).metrics
    assert res_a.info["resumed_from"]["epoch"] == left[key_a]["epochs"] >= 1
    assert key_a not in _latest(site)


def test_unreachable_party_named(site, tmp_path):
    dep = Deployment.load(site / "deployment.toml")
    dep.parties["telecom"].address = f"127.0.0.1:{_free_port()}"
    dep.connect_timeout = 1.0
    from verticalfs.deploy.holder import connect
    from verticalfs.exceptions import TransportError

    t0 = time.monotonic()
    with pytest.raises(TransportError, match="telecom"):
        connect(dep)
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("text,match", [
    ('label_party = "bank"\nlabel_column = "y"\ncerts = "c"\n[parties.bank]\nfile = "b.csv"\n', "missing key 'parties.bank.address'"),
    ('label_party = "x"\nlabel_column = "y"\ncerts = "c"\n[parties.bank]\naddress = "h:1"\nfile = "b.csv"\n',
     "label_party 'x'"),
    ('label_party = "bank"\nlabel_column = "y"\n[parties.bank]\naddress = "h:1"\nfile = "b.csv"\n', "no TLS"),
    ('label_party = "bank"\nlabel_column = "y"\ncerts = "c"\n[parties.bank]\naddress = "nohost"\nfile = "b.csv"\n',
     r'parties.bank.address = "nohost": expected a string "host:port"'),
    ('label_party = "bank"\nlabel_column = "y"\ncerts = "c"\ncolour = 1\n[parties.bank]\naddress = "h:1"\n'
     'file = "b.csv"\n', "unknown key 'colour'"),
])
def test_bad_deployment_file(tmp_path, text, match):
    f = tmp_path / "deployment.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match):
        Deployment.load(f)
