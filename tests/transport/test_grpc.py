"""Every party in its own process, over gRPC with mutual TLS on 127.0.0.1.

The tests start the party processes themselves (``spawn``: nothing shared) and stop them. A
networked run must give the in-process run's metrics, selection and ledger payload bytes for the
same seed; a killed party is an error naming it; a certificate from another CA is refused.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

import verticalfs  # noqa: E402
from verticalfs.exceptions import ProtocolError, TransportError  # noqa: E402
from verticalfs.federation import Federation  # noqa: E402
from verticalfs.names import LABEL_HOLDER  # noqa: E402
from verticalfs.transport.grpc import GrpcChannel, TLSFiles, make_certs  # noqa: E402


def _ids(name: str) -> list[str]:
    """Each party's customer ids: party k holds ids k*100 .. 999 (the label holder 0 .. 799)."""
    k = int(name[-1])
    return [f"c{i}" for i in range(k * 100, 1000)]


def _party_main(party_data, certs, conn) -> None:  # runs in a child process
    import torch

    from verticalfs.methods.registry import party_roles
    from verticalfs.party import PartyRuntime
    from verticalfs.transport.grpc.party import NetworkedParty

    torch.set_num_threads(1)
    tls = TLSFiles.in_folder(certs, party_data.name)
    party = NetworkedParty(PartyRuntime(party_data, ids=_ids(party_data.name), role_for=party_roles()), "127.0.0.1:0",
                           tls=tls)
    conn.send(party.server.address)
    party.set_addresses(conn.recv())
    party.start()
    conn.send("ready")
    conn.recv()  # any message: stop
    party.stop()


class Deployment:
    """Party processes on 127.0.0.1, each with its own certificate; the label holder is this process."""

    def __init__(self, data, certs):
        ctx = mp.get_context("spawn")
        self.procs, conns = {}, {}
        for p in data.parties:
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_party_main, args=(p, str(certs), there), daemon=True)
            proc.start()
            self.procs[p.name], conns[p.name] = proc, here
        self.addresses = {name: c.recv() for name, c in conns.items()}
        for c in conns.values():
            c.send(self.addresses)
        for c in conns.values():
            assert c.recv() == "ready"
        self.conns = conns
        self.certs = certs

    def federation(self, labels, party_names, tls=None, **kw) -> Federation:
        channel = GrpcChannel(LABEL_HOLDER, self.addresses, tls=tls or TLSFiles.in_folder(self.certs, LABEL_HOLDER),
                              **kw)
        return Federation(labels, channel, party_names)

    def stop(self):
        for name, c in self.conns.items():
            if self.procs[name].is_alive():
                try:
                    c.send("stop")
                except OSError:
                    pass
        for proc in self.procs.values():
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("certs")
    make_certs([LABEL_HOLDER, "party1", "party2", "party3"], folder)
    return folder


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


@pytest.fixture(scope="module")
def deployment(data, certs):
    """One set of party processes for the whole module (starting them costs seconds each): the
    tests below use it in file order; the last one kills a party."""
    dep = Deployment(data, certs)
    yield dep
    dep.stop()


def hello(fed, party):
    from verticalfs.transport.messages import At, Hello, HelloRequest

    return fed.proxy(party).request(HelloRequest(), At("setup"), expect=Hello)


def payloads(ledger):
    """Every record but the networked run's own phase ``audit`` (it asks the parties for their
    party-to-party traffic, which in-process is on the shared ledger already)."""
    return [(r.sender, r.receiver, r.phase, r.kind, r.round, r.step, r.payload, r.overhead)
            for r in ledger.records() if r.phase != "audit"]


@pytest.mark.slow
@pytest.mark.parametrize("method,params", [  # less-vfl last: it removes columns at the parties
    ("vfl", {"epochs": 2, "batch_size": 64, "hidden": (16, 8)}),
    ("sparsevfl-16", {"epochs": 2, "batch_size": 64}),
    # the default protocol (the validation choice's CandidateEmbeddings / KeepCandidate cross too),
    # with small lambdas so that every party keeps columns for the tests after this one
    ("less-vfl", {"epochs": 3, "hidden": (16, 8), "pretrain_epochs": 1, "lambda_s": 0.001, "lambdas_m": (0.005, 0.01)}),
])
def test_networked_run_equals_in_process(data, deployment, method, params):
    fed = deployment.federation(data.labels, data.party_names)
    remote = verticalfs.run(method, data, seed=0, params=params, federation=fed)
    fed.channel.close()
    local = verticalfs.run(method, data, seed=0, params=params)
    if method == "less-vfl":
        kinds = {r.kind for r in remote.federation.ledger.records()}
        assert {"CandidateEmbeddings", "KeepCandidate"} <= kinds
        assert all(m.any() for m in remote.method_obj.support_.values())
    assert remote.metrics == local.metrics
    assert remote.selection == local.selection
    assert payloads(remote.federation.ledger) == payloads(local.federation.ledger)


def test_refusals_and_a_party_that_dies(data, certs, deployment, tmp_path):
    """One deployment: a certificate of another CA and a party's certificate claiming to be the label
    holder are refused; an unexpected message is a typed error naming the party; a party killed
    mid-training stops the run with an error naming it; an unreachable party is named with its address."""
    import threading

    other = tmp_path / "other"
    make_certs([LABEL_HOLDER], other)
    dep = deployment
    try:
        # the client trusts our CA but presents a certificate of another CA: the handshake fails
        forged = TLSFiles(ca=certs / "ca.pem", cert=other / f"{LABEL_HOLDER}.pem", key=other / f"{LABEL_HOLDER}.key")
        fed = Federation(data.labels, GrpcChannel(LABEL_HOLDER, dep.addresses, tls=forged, connect_timeout=3),
                         data.party_names)
        with pytest.raises(TransportError, match="party1"):
            hello(fed, "party1")
        # a valid certificate of a party claiming to be the label holder: refused by name
        spoof = TLSFiles.in_folder(certs, "party2")
        fed = Federation(data.labels, GrpcChannel(LABEL_HOLDER, dep.addresses, tls=spoof, connect_timeout=3),
                         data.party_names)
        with pytest.raises(TransportError, match="certificate names"):
            hello(fed, "party1")
        # a message the party's role does not expect: a typed error naming the party
        from verticalfs.transport.messages import At, Gradients

        fed = dep.federation(data.labels, data.party_names)
        with pytest.raises(ProtocolError, match="^party 'party1' received Gradients"):
            fed.proxy("party1").send(Gradients(np.zeros((2, 2), np.float32)), At("train"))
        # PSI across the processes: exactly the overlap, on the ledger in phase setup
        from verticalfs.psi import intersect

        holder_ids = [f"c{i}" for i in range(800)]
        asks = {"openmined": ("PsiRequest",), "ristretto255": ("PsiOpen", "PsiChunk")}  # the rest are replies
        for engine in ("openmined", "ristretto255"):
            n_before = len(list(fed.ledger.records()))
            out = intersect([fed.proxy(p) for p in data.party_names], holder_ids, engine=engine)
            assert out == [f"c{i}" for i in range(300, 800)]
            psi_recs = list(fed.ledger.records())[n_before:]
            # with every party at once (the records in the order the exchanges completed): each exchange once per party
            kinds = {"openmined": ("PsiRequest", "PsiReply"),
                     "ristretto255": ("PsiOpen", "PsiOpened", "PsiChunk", "PsiChunkReply")}[engine]
            assert sorted((r.kind, r.receiver if r.kind in asks[engine] else r.sender) for r in psi_recs) == sorted(
                (k, p) for p in data.party_names for k in kinds)
            assert {r.phase for r in psi_recs} == {"setup"}
        # party2 dies while the run is training (it cannot finish 500 epochs in 3 s)
        killed = []
        timer = threading.Timer(3.0, lambda: (dep.procs["party2"].kill(), killed.append(time.perf_counter())))
        timer.start()
        with pytest.raises(TransportError, match="party 'party2' at 127.0.0.1:[0-9]+ is gone"):
            verticalfs.run("vfl", data, seed=0, params={"epochs": 500, "batch_size": 16}, federation=fed)
        assert killed and time.perf_counter() - killed[0] < 15
        timer.cancel()
    finally:
        dep.stop()
    ch = GrpcChannel(LABEL_HOLDER, dep.addresses, tls=TLSFiles.in_folder(certs, LABEL_HOLDER), connect_timeout=1)
    with pytest.raises(TransportError, match=r"party 'party1' at 127\.0\.0\.1:\d+ is not reachable within 1 s"):
        hello(Federation(data.labels, ch, data.party_names), "party1")


def test_certs_make_command(tmp_path):
    import stat

    from cryptography import x509
    from typer.testing import CliRunner

    from verticalfs.cli import app

    r = CliRunner().invoke(app, ["certs", "make", "--parties", "bank,telecom", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["active.key", "active.pem", "bank.key", "bank.pem", "ca.key", "ca.pem", "telecom.key", "telecom.pem"]
    assert stat.S_IMODE((tmp_path / "bank.key").stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate((tmp_path / "bank.pem").read_bytes())
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert cert.subject.rfc4514_string() == "CN=bank"
    r = CliRunner().invoke(app, ["certs", "make", "--parties", "bank,ba nk", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "distinct and made of letters" in r.output
