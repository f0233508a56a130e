"""Each party enforces its own policy, over gRPC between real processes on 127.0.0.1.

One deployment for the module (mutual TLS): the label party ``bank`` runs the label holder in this
process; ``telecom`` serves with the default policy of the deployment file, ``insurer`` with a
``--policy`` file of its own. With the default policy ``feast`` sends no raw column (the parties
select, the label holder trains ``vfl`` on the selected columns, the result says so), ``raw`` is
refused naming the party and ``release_columns``, a label holder asking for 1024-bit keys or for
the plaintext mode gets one line naming the party and the rule, a model is saved under its name in
the party's own folder, and a 300 MiB message is refused before the party buffers it (its RSS,
read from /proc, grows by less than 64 MiB).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("private_set_intersection")

from tests.bad_inputs import base  # noqa: E402
from tests.deploy.test_deployment import _free_port, _stop  # noqa: E402
from verticalfs.exceptions import PolicyError, TransportError, VerticalFSError  # noqa: E402

# the module's tests share one site and two party processes (module fixtures): one xdist worker runs
# them all, in order (a second worker would start its own processes, each importing torch)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("deploy_policy")]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from verticalfs.transport.grpc.tls import make_certs

    root = tmp_path_factory.mktemp("policy")
    files = base(root)  # bank (label), telecom, insurer: 120 customers
    make_certs(["active", *files], root / "certs")
    lines = ['label_party = "bank"', 'label_column = "default"', "connect_timeout = 20", 'certs = "certs"']
    for name, path in files.items():
        lines += [f"[parties.{name}]", f'address = "127.0.0.1:{_free_port()}"', f'file = "{Path(path).name}"']
        if name == "telecom":
            # feast's selection leaves telecom one column or two: an embedding of one column is that column,
            # which issue 50's default floor refuses (tests/attacks); here the test is about release_columns
            lines += ['categorical = ["plan"]', "[parties.telecom.policy]", "max_embedding_fraction = 1.0"]
        if name == "bank":  # the label party's own block allows what telecom refuses: the refusals are telecom's
            lines += ["[parties.bank.policy]", "require_secure = false", "min_key_bits = 1024"]
    (root / "deployment.toml").write_text("\n".join(lines) + "\n")
    (root / "insurer_policy.toml").write_text("[policy]\nmin_key_bits = 3072\nmax_message_mb = 128\n"
                                              "release_columns = true\nmax_embedding_fraction = 1.0\n")
    return root


def _serve(root: Path, name: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "verticalfs", "party", "serve", "--config",
                             str(root / "deployment.toml"), "--name", name, *extra], cwd=root, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def servers(site):
    procs = {"telecom": _serve(site, "telecom"), "insurer": _serve(site, "insurer", "--policy", "insurer_policy.toml")}
    lines = {}
    try:
        for name, p in procs.items():
            first = p.stdout.readline()
            assert f"party {name} serves" in first, first + p.stdout.read()
            lines[name] = p.stdout.readline()
        yield procs, lines
    finally:
        for p in procs.values():
            _stop(p)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_serve_prints_the_effective_policy(servers):
    _, lines = servers
    assert "policy of telecom" in lines["telecom"] and "release_columns = false" in lines["telecom"]
    assert "min_key_bits = 2048" in lines["telecom"] and "max_message_mb = 256.0" in lines["telecom"]
    # the insurer's own file replaces the deployment file's keys, and only those
    assert "insurer_policy.toml" in lines["insurer"] and "min_key_bits = 3072" in lines["insurer"]
    assert "max_message_mb = 128.0" in lines["insurer"] and "require_secure = true" in lines["insurer"]
    assert "release_columns = true" in lines["insurer"]


def test_feast_sends_no_raw_column_and_says_how_it_trained(site, servers):
    from typer.testing import CliRunner

    from verticalfs.cli import app

    res = CliRunner().invoke(app, ["run", "--config", str(site / "deployment.toml"), "-m", "feast", "-p",
                                   "n_select=4", "-e", "2", "--no-progress", "--out", str(site / "feast.json"),
                                   "--save-model", str(site / "holder" / "run1")])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "trained as feast+vfl" in out and "trained federatedly on the selected columns" in out, out
    r = json.loads((site / "feast.json").read_text())
    kinds = r["communication"]["by_kind"]
    assert "GatherColumns" not in kinds and "Columns" not in kinds, kinds
    assert kinds.get("FeastSetup", 0) > 0 and kinds.get("EmbedRequest", 0) > 0  # selected, then split learning
    assert r["info"]["trained_as"] == "feast+vfl" and r["info"]["method_asked"] == "feast"
    # the label holder asked the parties: insurer's own file releases its columns, telecom keeps them
    pols = r["info"]["deployment"]["policies"]
    assert pols["insurer"]["release_columns"] and not pols["telecom"]["release_columns"]
    assert "telecom keep(s) their columns" in r["info"]["trained_as_reason"]
    assert r["selection"]["n_kept"] <= 4 + len([c for c in r["selection"]["parties"]["bank"]["kept_columns"]])
    # each party saved its part under the model's name in its own folder; the label holder sent no path
    assert (site / "models" / "telecom" / "run1" / "telecom.pt").is_file()
    assert (site / "models" / "insurer" / "run1" / "insurer.pt").is_file()
    assert not (site / "holder" / "run1" / "telecom.pt").exists()


def test_raw_is_refused_naming_the_party_and_release_columns(site, servers):
    from verticalfs.deploy.holder import run_deployment

    with pytest.raises(PolicyError) as e:
        run_deployment(site / "deployment.toml", "raw", seed=0)
    msg = str(e.value)
    assert "\n" not in msg and "party 'telecom'" in msg and "release_columns = false" in msg, msg
    assert "[parties.telecom.policy]" in msg


@pytest.mark.parametrize("params,rule", [
    ({"secure": False, "epochs": 1}, "require_secure = true"),
    ({"secure": True, "key_bits": 1024, "insecure": True, "epochs": 1}, "min_key_bits = 2048"),
])
def test_the_label_holder_cannot_lower_a_partys_protection(site, servers, params, rule):
    from verticalfs.deploy.holder import run_deployment

    t0 = time.monotonic()
    with pytest.raises(PolicyError) as e:
        run_deployment(site / "deployment.toml", "fedsdg-fs", seed=0, params=params)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("party 'telecom' refuses") and rule in msg, msg
    assert time.monotonic() - t0 < 60  # refused at Join, before any key was made or any training


def test_a_message_over_the_limit_is_refused_before_it_is_buffered(site, servers):
    """300 MiB to telecom (limit 256 MiB): refused from its announced size; and sent as one gRPC
    message, past the chunking, refused by gRPC's own receive limit (one chunk). The party's RSS
    grows by less than 64 MiB, and it still answers afterwards."""
    import grpc

    from verticalfs.deploy.config import Deployment
    from verticalfs.transport.grpc.channel import UNARY, GrpcChannel

    procs, _ = servers
    pid = procs["telecom"].pid
    dep = Deployment.load(site / "deployment.toml")
    ch = GrpcChannel("active", dep.addresses, tls=dep.tls("active"), connect_timeout=20)
    try:
        ch.wait_ready(["telecom"])
        before = _rss_mib(pid)
        data = bytes(300 << 20)
        with pytest.raises(VerticalFSError) as refused:
            ch.call("active", "telecom", data)
        grown = _rss_mib(pid) - before
        assert grown < 64, f"telecom's RSS grew by {grown:.0f} MiB: it buffered the message"
        assert isinstance(refused.value, TransportError)
        assert re.search(r"party 'telecom' refuses a message of 300\.0 MiB.*max_message_mb", str(refused.value))
        ca, cert, key = dep.tls("active").read()
        raw = grpc.secure_channel(dep.addresses["telecom"], grpc.ssl_channel_credentials(ca, key, cert),
                                  options=[("grpc.max_send_message_length", -1),
                                           ("grpc.ssl_target_name_override", "telecom")])
        with pytest.raises(grpc.RpcError) as e:
            raw.unary_unary(UNARY)(data, metadata=(("vf-sender", "active"), ("vf-op", "call")), timeout=60)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
        raw.close()
        del data
        time.sleep(0.5)
        grown = _rss_mib(pid) - before
        assert grown < 64, f"telecom's RSS grew by {grown:.0f} MiB"
        from verticalfs.transport.messages import At, Hello, HelloRequest
        from verticalfs.transport.serde import decode_at, encode

        reply, _, _ = decode_at(ch.call("active", "telecom", encode(HelloRequest(), At("setup")).data))
        assert isinstance(reply, Hello)  # the party still answers
    finally:
        ch.close()


def test_cached_intersections_are_free_new_ones_are_counted(site, servers):
    """max_psi_requests (16 by default) counts new intersections: the 17th run against the label
    holder's cached PSI result is served (its Align repeats a set the party aligned: free); new
    intersections are charged until the refusal, which names the budget left."""
    from verticalfs.deploy.config import Deployment
    from verticalfs.deploy.holder import connect
    from verticalfs.psi import intersect_all

    dep = Deployment.load(site / "deployment.toml")
    for k in range(17):
        conn = connect(dep)
        try:
            assert k == 0 or conn.psi_cached == ["telecom", "insurer"]
        finally:
            conn.close()
    budget = json.loads((site / "state" / "telecom" / "psi-budget.json").read_text())
    used = len(budget["charges"])
    assert 2 <= used < 16  # one PSI and one Align per intersection the module made; none per cached run
    conn = connect(dep)
    try:
        # the label holder's ids: new subsets of 10, so new intersections (small ones: the ids a session
        # may claim, psi_ids_per_session, are a budget of their own, issue 50)
        ids = [str(i) for i in range(1, 121)]
        proxy = conn.federation.proxy("telecom")
        for k in range(16 - used):
            assert len(intersect_all([proxy], ids[k:k + 10]).ids) > 0
        with pytest.raises(PolicyError, match=r"party 'telecom' refuses to answer more PSI requests: it has answered "
                                              r"16 new intersections and alignments in the last 24 h, 0 of 16 left"):
            intersect_all([proxy], ids[20:30])
    finally:
        conn.close()
