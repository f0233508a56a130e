"""A deployment's failure behaviour, with real `verticalfs party serve` processes, mutual TLS and real
certificates on 127.0.0.1.

- a reply lost on the way back (a party's test-only fault injection drops it after handling the
  call) is retried, and the party answers the repeat from its cache: the run's metrics are those
  of a run without the fault (a Gradients post handled twice would step the party's model twice);
- a party stopped with SIGSTOP is reported within 15 s, by name;
- TLS failures say their cause at the label holder (unknown CA, wrong party name, expired
  certificate); a refused sender is logged by the party with the peer's address.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("private_set_intersection")

from tests.deploy.test_deployment import PARTIES, _files, _free_port, _listening, _stop  # noqa: E402
from verticalfs.deploy.config import Deployment  # noqa: E402
from verticalfs.exceptions import TransportError  # noqa: E402
from verticalfs.transport.grpc.channel import DROP_REPLY_ENV  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("deploy_failures")]
PARAMS = {"epochs": 2, "batch_size": 64, "hidden": (16, 8)}
#: the messages to telecom whose replies are lost (in the first run): a training batch's embeddings
#: request, and another batch's gradients (a Gradients post handled twice steps telecom's model twice)
DROPPED = ("EmbedRequest:3", "Gradients:5")


def _start(site: Path, name: str, env: dict | None = None, config: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "verticalfs", "party", "serve", "--config",
                             str(config or site / "deployment.toml"), "--name", name], cwd=site, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("failures")
    files = _files(root)
    subprocess.run([sys.executable, "-m", "verticalfs", "certs", "make", "--parties", ",".join(PARTIES),
                    "--out", str(root / "certs")], check=True, capture_output=True)
    lines = ['label_party = "bank"', 'label_column = "default"', 'id_column = "customer_id"', 'certs = "certs"',
             "connect_timeout = 3"]
    for p in PARTIES:
        lines += [f"[parties.{p}]", f'address = "127.0.0.1:{_free_port()}"', f'file = "{files[p].name}"',
                  # the label holder's seeds and embedding widths, as the in-process reference (issue 50)
                  f"[parties.{p}.policy]", "own_randomness = false", "max_embedding_fraction = 1.0"]
    (root / "deployment.toml").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def servers(site):
    started = {"telecom": _start(site, "telecom", {DROP_REPLY_ENV: ",".join(DROPPED)}),
               "insurer": _start(site, "insurer")}
    procs = {p: _listening(proc, p) for p, proc in started.items()}
    yield procs
    for p in procs.values():
        _stop(p)


def _output(proc: subprocess.Popen, wait_for: str | None = None, timeout: float = 20.0) -> str:
    """What ``proc`` printed, once stopped; with ``wait_for``, not stopped before a line containing
    it arrives (or ``timeout`` seconds pass): a party logs some events after its peer has moved on."""
    lines: list[str] = []
    reader = None
    if wait_for is not None:
        def read() -> None:
            for line in proc.stdout:
                lines.append(line)
                if wait_for in line:
                    break

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
    _stop(proc)
    if reader is not None:
        reader.join(10)  # the process has exited: the reader meets the end of its output
    return "".join(lines) + proc.stdout.read()


def test_a_lost_reply_is_retried_and_answered_from_the_party_cache(site, servers, caplog):
    from verticalfs.deploy.holder import connect, run_deployment

    dep = Deployment.load(site / "deployment.toml")
    # PSI once before (both runs then take the ids from the label holder's cache): the two runs'
    # ledgers differ only if the retries changed something
    connect(dep).close()
    with caplog.at_level(logging.WARNING, logger="verticalfs.transport"):
        faulty = run_deployment(dep, "vfl", seed=0, params=PARAMS)
    assert faulty.info["deployment"]["psi_cached"] == ["telecom", "insurer"]
    retried = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retried) == len(DROPPED) and all("telecom" in m and "dropped" in m for m in retried), retried
    clean = run_deployment(dep, "vfl", seed=0, params=PARAMS)  # telecom's call count is past the faults now
    assert faulty.metrics == clean.metrics
    assert faulty.history == clean.history
    assert faulty.communication["total_bytes"] == clean.communication["total_bytes"]  # a retry is not on the ledger


def test_a_stopped_party_is_reported_by_name_within_15_seconds(site, servers):
    """SIGSTOP: the party's process keeps its connection open and answers nothing; unanswered keep-alive
    pings (every 5 s, 4 s to answer) name it within 9 s on an idle host: the guide promises 15 s."""
    from verticalfs.deploy.holder import connect
    from verticalfs.federation import SETUP
    from verticalfs.transport.messages import Hello, HelloRequest

    conn = connect(Deployment.load(site / "deployment.toml"))
    proc = servers["insurer"]
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        # the signal is delivered asynchronously: wait until the kernel shows the process stopped, so that
        # no request slips through before it (CI once saw this request answered: "DID NOT RAISE")
        stat = Path(f"/proc/{proc.pid}/stat")
        deadline = time.monotonic() + 5
        while stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        t = time.perf_counter()
        with pytest.raises(TransportError, match=r"party 'insurer' at 127\.0\.0\.1:\d+ stopped answering"):
            conn.federation.proxy("insurer").request(HelloRequest(), SETUP, expect=Hello)  # no deadline: keep-alive
        assert time.perf_counter() - t < 15
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        conn.close()


# ----------------------------------------------------------------------------------------------- TLS
def _tls_site(site: Path, name: str, certs: Path) -> Path:
    """A copy of the deployment file in which ``insurer`` uses the TLS folder ``certs`` (and a port of
    its own: the module's insurer may be serving)."""
    text = (site / "deployment.toml").read_text()
    head, _, tail = text.partition("[parties.insurer]\n")
    tail = re.sub(r'address = "127\.0\.0\.1:\d+"', f'address = "127.0.0.1:{_free_port()}"', tail, count=1)
    path = site / f"{name}.toml"
    path.write_text(head + "[parties.insurer]\n" + f'certs = "{certs.name}"\n' + tail)
    return path


def _expired_certificate(src: Path, out: Path, party: str) -> None:
    """``out`` as ``src``, with ``party``'s certificate replaced by one (same CA) that expired a year ago."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from verticalfs.transport.grpc.ca import key_pem, party_certificate, subject_alt_names, write_pem

    shutil.copytree(src, out)
    ca_key = serialization.load_pem_private_key((src / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((src / "ca.pem").read_bytes())
    k = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, party)])
    san = x509.SubjectAlternativeName(subject_alt_names(party, ("localhost", "127.0.0.1")))
    past = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=400)
    cert = party_certificate(subject, k.public_key(), san, ca_key, ca_cert.subject, 30, past)
    (out / f"{party}.pem").unlink()
    (out / f"{party}.key").unlink()
    write_pem(out / f"{party}.pem", cert.public_bytes(serialization.Encoding.PEM), False)
    write_pem(out / f"{party}.key", key_pem(k), True)


def _wrong_ca(site: Path, out: Path) -> None:
    from verticalfs.transport.grpc import make_certs

    make_certs(list(PARTIES), out)  # another CA (of the same name): nobody else trusts it


def _wrong_name(site: Path, out: Path) -> None:
    """insurer serves telecom's certificate (signed by the right CA, naming another party)."""
    shutil.copytree(site / "certs", out)
    for ext in ("pem", "key"):
        (out / f"insurer.{ext}").unlink()
        shutil.copy2(out / f"telecom.{ext}", out / f"insurer.{ext}")


@pytest.mark.parametrize(("case", "cause"), [
    ("wrong_ca", r"unknown CA: "),
    ("wrong_name", r"wrong party name: .*insurer"),
    ("expired", r"expired certificate: "),
])
def test_a_tls_failure_is_reported_with_its_cause(site, case, cause):

    certs = site / f"certs_{case}"
    if not certs.exists():
        {"wrong_ca": _wrong_ca, "wrong_name": _wrong_name,
         "expired": lambda s, o: _expired_certificate(s / "certs", o, "insurer")}[case](site, certs)
    path = _tls_site(site, case, certs)
    proc = _listening(_start(site, "insurer", config=path), "insurer")
    try:
        dep = Deployment.load(path)  # the label holder's own certificates are the right ones
        dep.parties = {p: e for p, e in dep.parties.items() if p != "telecom"}  # only insurer to reach
        with pytest.raises(TransportError, match=r"party 'insurer' at 127\.0\.0\.1:\d+: the TLS handshake failed: "
                                                 + cause) as err:
            dep.channel().wait_ready(["insurer"])
        assert "not reachable" not in str(err.value)
    finally:
        # the party logs the failed handshake when the label holder's alert reaches it: the alert of
        # its diagnosis handshake (tls_failure; gRPC's own attempts close without one), sent just
        # before the error is raised, so the party may not have read it yet
        out = _output(proc, wait_for="Handshake failed" if case == "wrong_ca" else None)
    if case == "wrong_ca":  # the party side: its TLS stack logs the failed handshake, with OpenSSL's reason
        assert "Handshake failed" in out, out


def test_a_refused_sender_is_logged_by_the_party_with_its_address(site, servers):
    from verticalfs.federation import SETUP
    from verticalfs.transport.grpc import GrpcChannel, TLSFiles
    from verticalfs.transport.ledger import Ledger
    from verticalfs.transport.messages import HelloRequest
    from verticalfs.transport.node import Node

    dep = Deployment.load(site / "deployment.toml")
    # the label holder's certificate, claiming to be the bank's feature block
    channel = GrpcChannel("bank", {"insurer": dep.addresses["insurer"]},
                          tls=TLSFiles.in_folder(site / "certs", "active"), connect_timeout=3)
    try:
        with pytest.raises(TransportError, match="refused the message: the sender claims to be 'bank'"):
            Node("bank", channel, Ledger()).request("insurer", HelloRequest(), SETUP)
    finally:
        channel.close()
    out = _output(servers["insurer"])
    line = next((ln for ln in out.splitlines() if "refused a message from" in ln), "")
    assert "claims to be 'bank'" in line and "127.0.0.1:" in line, out
