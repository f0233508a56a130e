"""The fan-out seam: one message to several parties (``request_all`` / ``send_all``).

Over gRPC (concurrent by default) the parties handle their messages at the same time; with
``fan_out="sequential"`` and in-process one after another. Either way the replies come back in the
order asked and the ledger records each request and its reply in that order, so the ledger does
not depend on which party answers first. A failing party is named at once.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from verticalfs.exceptions import ProtocolError, TransportError  # noqa: E402
from verticalfs.names import LABEL_HOLDER  # noqa: E402
from verticalfs.transport.grpc import GrpcChannel, PartyServer, TLSFiles, make_certs  # noqa: E402
from verticalfs.transport.inprocess import InProcessChannel  # noqa: E402
from verticalfs.transport.ledger import Ledger  # noqa: E402
from verticalfs.transport.messages import Ack, At, Embeddings, EmbedRequest  # noqa: E402
from verticalfs.transport.node import Node, PartyProxy, request_all, send_all  # noqa: E402

PARTIES = ("p1", "p2", "p3")
AT = At("train", 1, 2)


class _Slow:
    """A party handler that holds each message ``delay[name]`` seconds and notes when it ran."""

    def __init__(self, delay: dict[str, float]) -> None:
        self.delay = delay
        self.spans: dict[str, list[tuple[float, float]]] = {p: [] for p in delay}
        self.posts: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, sender, msg, at, node):
        t0 = time.monotonic()
        time.sleep(self.delay[node.name])
        with self._lock:
            self.spans[node.name].append((t0, time.monotonic()))
        if isinstance(msg, EmbedRequest):
            if node.name == "p3" and msg.batch == 99:
                raise ProtocolError("p3 refuses batch 99")
            return Embeddings(np.full((2, 3), float(PARTIES.index(node.name)), dtype=np.float32))
        self.posts.append(node.name)
        return None


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    certs = tmp_path_factory.mktemp("certs")
    make_certs([LABEL_HOLDER, *PARTIES], certs)
    # the first party is the slowest: concurrent replies arrive in the reverse of the order asked
    handler = _Slow({"p1": 0.3, "p2": 0.15, "p3": 0.05})
    out = {}
    for p in PARTIES:
        node = Node(p, GrpcChannel(p, {}, tls=TLSFiles.in_folder(certs, p)), Ledger(), handler)
        out[p] = PartyServer(node, "127.0.0.1:0", tls=TLSFiles.in_folder(certs, p), peers={LABEL_HOLDER}).start()
    yield certs, handler, {p: s.address for p, s in out.items()}
    for s in out.values():
        s.stop()


def _holder(certs, addresses, mode):
    channel = GrpcChannel(LABEL_HOLDER, addresses, tls=TLSFiles.in_folder(certs, LABEL_HOLDER), fan_out=mode)
    node = Node(LABEL_HOLDER, channel, Ledger())
    return channel, node, [PartyProxy(node, p) for p in PARTIES]


def _overlap(spans) -> bool:
    """Every party started before the first one (the slowest) finished."""
    return max(s[0] for s in spans) < spans[0][1]


@pytest.mark.parametrize("mode", ["concurrent", "sequential"])
def test_fan_out_over_grpc(servers, mode):
    certs, handler, addresses = servers
    channel, node, proxies = _holder(certs, addresses, mode)
    try:
        channel.wait_ready(PARTIES)
        for s in handler.spans.values():
            s.clear()
        handler.posts.clear()
        reps = request_all([(px, EmbedRequest("train", 1, 2, True)) for px in proxies], AT, expect=Embeddings)
        assert [float(r.values[0, 0]) for r in reps] == [0.0, 1.0, 2.0]  # in the order asked
        last = [handler.spans[p][-1] for p in PARTIES]
        # concurrent: every party handled its message while the others did; sequential: one after another
        assert _overlap(last) == (mode == "concurrent")
        send_all([(px, Ack()) for px in proxies], AT)
        assert sorted(handler.posts) == sorted(PARTIES)
        assert _overlap([handler.spans[p][-1] for p in PARTIES]) == (mode == "concurrent")
        rows = [(r.sender, r.receiver, r.kind, r.round, r.step) for r in node.ledger.records()]
        expected = []
        for p in PARTIES:  # each request and its reply, in party order, whoever answered first
            expected += [(LABEL_HOLDER, p, "EmbedRequest", 1, 2), (p, LABEL_HOLDER, "Embeddings", 1, 2)]
        expected += [(LABEL_HOLDER, p, "Ack", 1, 2) for p in PARTIES]
        assert rows == expected
        # a party's error is raised naming it
        with pytest.raises(ProtocolError, match="p3"):
            request_all([(px, EmbedRequest("train", 1, 99, True)) for px in proxies], AT, expect=Embeddings)
    finally:
        channel.close()


def test_in_process_fan_out_is_the_sequential_order():
    """In-process, request_all is request in turn: the same records as a loop, and the parties
    run one after another (nothing overlaps)."""
    handler = _Slow({p: 0.01 for p in PARTIES})
    ledgers = []
    for fan in (True, False):
        channel, led = InProcessChannel(), Ledger()
        for p in PARTIES:
            channel.register(Node(p, channel, led, handler))
        hub = Node(LABEL_HOLDER, channel, led)
        channel.register(hub)
        proxies = [PartyProxy(hub, p) for p in PARTIES]
        req = EmbedRequest("train", 1, 2, True)
        if fan:
            request_all([(px, req) for px in proxies], AT, expect=Embeddings)
            send_all([(px, Ack()) for px in proxies], AT)
        else:
            for px in proxies:
                px.request(req, AT, expect=Embeddings)
            for px in proxies:
                px.send(Ack(), AT)
        ledgers.append(list(led.records()))
    assert ledgers[0] == ledgers[1]
    assert not _overlap([handler.spans[p][-1] for p in PARTIES])


def test_an_unreachable_party_is_named_before_anything_is_sent(servers):
    certs, handler, addresses = servers
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    channel = GrpcChannel(LABEL_HOLDER, {**addresses, "p2": dead}, tls=TLSFiles.in_folder(certs, LABEL_HOLDER),
                          connect_timeout=1)
    node = Node(LABEL_HOLDER, channel, Ledger())
    n = sum(len(v) for v in handler.spans.values())
    try:
        with pytest.raises(TransportError, match="party 'p2' at 127.0.0.1"):
            request_all([(PartyProxy(node, p), EmbedRequest("train", 1, 2, True)) for p in PARTIES], AT)
    finally:
        channel.close()
    assert sum(len(v) for v in handler.spans.values()) == n  # no party was sent anything
    assert len(node.ledger) == 0


def test_a_batch_call_has_a_deadline_and_a_setup_call_has_none(servers):
    """``call_timeout`` bounds a per-batch call (phase train) and names the party; a set-up call
    of the same duration is not cut (PSI and set-up may legitimately take minutes)."""
    certs, handler, addresses = servers
    channel = GrpcChannel(LABEL_HOLDER, addresses, tls=TLSFiles.in_folder(certs, LABEL_HOLDER), call_timeout=0.1)
    node = Node(LABEL_HOLDER, channel, Ledger())
    try:
        channel.wait_ready(["p1"])
        with pytest.raises(TransportError, match=r"party 'p1' at 127\.0\.0\.1:\d+ did not answer within 0\.1 s"):
            node.request("p1", EmbedRequest("train", 1, 2, True), AT)  # p1 takes 0.3 s
        rep = node.request("p1", EmbedRequest("train", 1, 2, True), At("setup"))
        assert isinstance(rep, Embeddings)
    finally:
        channel.close()
