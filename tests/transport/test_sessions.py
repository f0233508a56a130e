"""Sessions at a networked party: each label-holder run's state apart, a bounded number at once.

One party served in this process over real gRPC with mutual TLS on 127.0.0.1; two label-holder
channels with their own session ids (the runs of two label-holder processes). Two whole runs at
once against real party processes are in ``tests/deploy/test_deployment.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

import verticalfs  # noqa: E402
from verticalfs.configuration import PartyPolicy  # noqa: E402
from verticalfs.exceptions import ProtocolError, TransportError  # noqa: E402
from verticalfs.federation import Federation  # noqa: E402
from verticalfs.names import LABEL_HOLDER  # noqa: E402
from verticalfs.transport.grpc import GrpcChannel, TLSFiles, make_certs  # noqa: E402
from verticalfs.transport.messages import (  # noqa: E402
    Ack,
    At,
    EndSession,
    Hello,
    HelloRequest,
    KeepFeatures,
    SupportReport,
    SupportRequest,
)

SETUP = At("setup")


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=2, seed=0)


@pytest.fixture(scope="module")
def certs(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("certs")
    make_certs([LABEL_HOLDER, *data.party_names], folder)
    return folder


def _party(data, certs, max_sessions: int):
    from verticalfs.methods.registry import party_roles
    from verticalfs.party import PartyRuntime
    from verticalfs.transport.grpc.party import NetworkedParty

    p = data.parties[0]
    policy = PartyPolicy.permissive().model_copy(update={"max_sessions": max_sessions})
    party = NetworkedParty(PartyRuntime(p, role_for=party_roles(), policy=policy), "127.0.0.1:0",
                           tls=TLSFiles.in_folder(certs, p.name))
    party.set_addresses({p.name: party.server.address})
    return party.start()


def _holder(data, certs, party, session: str):
    """A label holder's run with its own session id."""
    ch = GrpcChannel(LABEL_HOLDER, {party.name: party.server.address}, tls=TLSFiles.in_folder(certs, LABEL_HOLDER),
                     connect_timeout=5, session=session)
    return Federation(data.labels, ch, [party.name]).proxy(party.name), ch


def test_each_session_keeps_its_own_state(data, certs):
    party = _party(data, certs, max_sessions=2)
    a, ca = _holder(data, certs, party, "run-a")
    b, cb = _holder(data, certs, party, "run-b")
    try:
        n = len(a.request(HelloRequest(), SETUP, expect=Hello).feature_names)
        assert n > 2
        # run a narrows the party's features; run b, at the same party at the same time, still has them all
        a.request(KeepFeatures(indices=np.array([0, 1])), SETUP, expect=SupportReport)
        assert b.request(SupportRequest(), SETUP, expect=SupportReport).kept.tolist() == list(range(n))
        assert a.request(SupportRequest(), SETUP, expect=SupportReport).kept.tolist() == [0, 1]
        assert set(party.sessions) == {"run-a", "run-b"}
        a.request(EndSession(), SETUP, expect=Ack)
        assert set(party.sessions) == {"run-b"}  # run a's place is free again
        # a feature party cannot open a session (only the label holder starts one)
        with pytest.raises(ProtocolError, match="only the label holder starts one"):
            party.receive_in("run-c", "party2", b"", "ipv4:127.0.0.1:1")
    finally:
        ca.close()
        cb.close()
        party.stop()


def test_a_run_beyond_the_limit_is_refused_as_busy(data, certs):
    party = _party(data, certs, max_sessions=1)
    a, ca = _holder(data, certs, party, "run-a")
    b, cb = _holder(data, certs, party, "run-b")
    try:
        a.request(HelloRequest(), SETUP, expect=Hello)
        with pytest.raises(TransportError, match=r"busy with session run-a, started at \d{4}-\d\d-\d\dT[\d:]+Z by "
                                                 r"active \(ipv4:127\.0\.0\.1:\d+\).*max_sessions"):
            b.request(HelloRequest(), SETUP, expect=Hello)
        a.request(SupportRequest(), SETUP, expect=SupportReport)  # the first run goes on undisturbed
        a.request(EndSession(), SETUP, expect=Ack)
        b.request(HelloRequest(), SETUP, expect=Hello)  # once it ended, the next run is served
    finally:
        ca.close()
        cb.close()
        party.stop()


def test_a_route_to_another_host_or_an_unknown_party_is_refused(data, certs):
    """A label holder may announce where its run serves a party's block (vf-route), but only another
    port on that party's own host (its certificate is checked there as everywhere)."""
    party = _party(data, certs, max_sessions=2)
    try:
        party.set_addresses({party.name: party.server.address, "party2": "127.0.0.1:7002"})
        for route in ("party2=10.0.0.9:7002", "nobody=127.0.0.1:7003", "party2=127.0.0.1:x"):
            with pytest.raises(ProtocolError, match="refuses the route"):
                party.receive_in(f"run-{route}", LABEL_HOLDER, b"", "ipv4:127.0.0.1:1", route=route)
        assert party._routes("party2=127.0.0.1:7010") == {"party2": "127.0.0.1:7010"}
        # a routed session's messages to party2 go to the route; other sessions' to its address
        routed = party._session("run-r", LABEL_HOLDER, "ipv4:127.0.0.1:1", True, "party2=127.0.0.1:7010")
        plain = party._session("run-p", LABEL_HOLDER, "ipv4:127.0.0.1:1", True, "")
        assert routed.runtime.node.channel.addresses["party2"] == "127.0.0.1:7010"
        assert plain.runtime.node.channel.addresses["party2"] == "127.0.0.1:7002"
        assert party.channel.addresses["party2"] == "127.0.0.1:7002"
        # a later message of a session this party does not know: it restarted or forgot it, said as such
        with pytest.raises(TransportError, match="has no session 'run-z': it restarted"):
            party.receive_in("run-z", LABEL_HOLDER, b"", "ipv4:127.0.0.1:1", start=False)
    finally:
        party.stop()
