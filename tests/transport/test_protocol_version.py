"""The protocol version in Hello and Join: a peer speaking another major version is refused, by name
and with both versions; another minor version is accepted.

In-process (the real :class:`InProcessChannel`, bytes only) and over gRPC with mutual TLS between
this process and a party process on 127.0.0.1. The mismatching side is built here, test-only: a
party runtime that announces another version in its Hello (the library has no switch for it), and
``Join`` messages constructed with another ``protocol`` against the real party server.
"""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

from verticalfs.data.vertical import LabelData
from verticalfs.exceptions import ProtocolError, TransportError
from verticalfs.federation import Federation
from verticalfs.methods.registry import party_roles
from verticalfs.names import LABEL_HOLDER
from verticalfs.party import LocalData, PartyRuntime
from verticalfs.transport import PROTOCOL_VERSION
from verticalfs.transport.inprocess import InProcessChannel
from verticalfs.transport.ledger import Ledger
from verticalfs.transport.messages import At, Hello, Join

MAJOR, MINOR = PROTOCOL_VERSION
OURS = f"{MAJOR}.{MINOR}"
NEXT_MAJOR = (MAJOR + 1, 0)
NEXT_MINOR = (MAJOR, MINOR + 7)
SETUP = At("setup")
ROWS = 6


class AnnouncingRuntime(PartyRuntime):
    """A party whose Hello announces ``protocol`` (a peer of another release, for these tests only)."""

    def __init__(self, data, protocol, **kw):
        super().__init__(data, **kw)
        self.protocol = protocol

    def handle(self, sender, msg, at, node):
        reply = super().handle(sender, msg, at, node)
        if isinstance(reply, Hello):
            reply = Hello(feature_names=reply.feature_names, n_samples=reply.n_samples, sources=reply.sources,
                          protocol=self.protocol)
        return reply


def _telecom() -> LocalData:
    rng = np.random.default_rng(0)
    return LocalData("telecom", ["minutes", "roaming"], {"train": rng.normal(size=(ROWS, 2))})


def _labels() -> LabelData:
    return LabelData(y={"train": np.arange(ROWS) % 2}, task="binary", n_classes=2)


def _in_process(runtime: PartyRuntime) -> Federation:
    channel, ledger = InProcessChannel(), Ledger()
    channel.register(runtime.connect(channel, ledger))
    fed = Federation(_labels(), channel, [runtime.name], ledger=ledger)
    channel.register(fed.node)
    return fed


# ------------------------------------------------------------------------------------ in-process
def test_label_holder_refuses_a_party_of_another_major_in_process():
    fed = _in_process(AnnouncingRuntime(_telecom(), NEXT_MAJOR, role_for=party_roles()))
    with pytest.raises(ProtocolError) as err:
        fed.schema()
    assert str(err.value) == (f"party 'telecom' speaks protocol {NEXT_MAJOR[0]}.0, this label holder {OURS}; "
                              "install matching verticalfs versions")
    # the Hello crossed (and is on the ledger), nothing after it
    assert [r.kind for r in fed.ledger.records()] == ["HelloRequest", "Hello"]


def test_party_refuses_a_join_of_another_major_in_process():
    runtime = PartyRuntime(_telecom(), role_for=party_roles())
    fed = _in_process(runtime)
    fed.schema()  # same version: accepted
    with pytest.raises(ProtocolError) as err:
        fed.proxy("telecom").request(Join(method="mi", spec=None, protocol=NEXT_MAJOR), SETUP)
    assert str(err.value) == (f"party 'telecom' refuses the Join: the label holder speaks protocol "
                              f"{NEXT_MAJOR[0]}.0, party 'telecom' {OURS}; install matching verticalfs versions")
    assert runtime.role is None and runtime.method is None  # refused before any role was built


def test_another_minor_version_is_accepted_in_process():
    runtime = AnnouncingRuntime(_telecom(), NEXT_MINOR, role_for=party_roles())
    fed = _in_process(runtime)
    assert fed.schema()["telecom"].protocol == NEXT_MINOR
    reply = fed.proxy("telecom").request(Join(method="mi", spec=None, protocol=NEXT_MINOR), SETUP)
    assert type(reply).__name__ == "Ack" and runtime.method == "mi"


@pytest.mark.parametrize("announced", [(MAJOR,), (MAJOR, MINOR, 0), (MAJOR, "0"), (MAJOR, -1), (MAJOR, 1 << 16)])
def test_a_malformed_version_is_refused(announced):
    fed = _in_process(AnnouncingRuntime(_telecom(), announced, role_for=party_roles()))
    with pytest.raises(ProtocolError, match=r"^party 'telecom' announces protocol version .* not a \(major, minor\) "
                                            rf"pair; this label holder speaks verticalfs protocol {OURS}$"):
        fed.schema()


@pytest.mark.parametrize("announced", [[MAJOR, MINOR], "1.0", None])
def test_a_version_that_is_not_a_tuple_is_refused_by_the_decoder(announced):
    fed = _in_process(AnnouncingRuntime(_telecom(), announced, role_for=party_roles()))
    with pytest.raises(TransportError, match=r"Hello\.protocol: expected tuple"):
        fed.schema()


# ------------------------------------------------------------------------------------ over gRPC
def _party_main(certs, protocol, conn) -> None:  # runs in a child process
    import torch

    from verticalfs.transport.grpc import TLSFiles
    from verticalfs.transport.grpc.party import NetworkedParty

    torch.set_num_threads(1)
    party = NetworkedParty(AnnouncingRuntime(_telecom(), protocol, role_for=party_roles()), "127.0.0.1:0",
                           tls=TLSFiles.in_folder(certs, "telecom"), addresses={})
    party.start()
    conn.send(party.server.address)
    conn.recv()  # any message: stop
    party.stop()


def test_major_mismatch_is_refused_over_grpc_both_ways(tmp_path):
    """A party process whose Hello announces the next major: the label holder refuses it; the real
    party server refuses a Join of the next major and accepts one of another minor."""
    pytest.importorskip("grpc")
    pytest.importorskip("cryptography")
    from verticalfs.transport.grpc import GrpcChannel, TLSFiles, make_certs

    make_certs([LABEL_HOLDER, "telecom"], tmp_path)
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_party_main, args=(str(tmp_path), NEXT_MAJOR, there), daemon=True)
    proc.start()
    try:
        assert here.poll(120), "the party process did not start"
        address = here.recv()
        channel = GrpcChannel(LABEL_HOLDER, {"telecom": address}, tls=TLSFiles.in_folder(tmp_path, LABEL_HOLDER))
        fed = Federation(_labels(), channel, ["telecom"])
        with pytest.raises(ProtocolError) as err:
            fed.schema()
        assert str(err.value) == (f"party 'telecom' speaks protocol {NEXT_MAJOR[0]}.0, this label holder {OURS}; "
                                  "install matching verticalfs versions")
        proxy = fed.proxy("telecom")
        with pytest.raises(ProtocolError) as err:
            proxy.request(Join(method="mi", spec=None, protocol=NEXT_MAJOR), SETUP)
        assert str(err.value) == (f"party 'telecom' refuses the Join: the label holder speaks protocol "
                                  f"{NEXT_MAJOR[0]}.0, party 'telecom' {OURS}; install matching verticalfs versions")
        reply = proxy.request(Join(method="mi", spec=None, protocol=NEXT_MINOR), SETUP)
        assert type(reply).__name__ == "Ack"
        channel.close()
    finally:
        here.send("stop")
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
