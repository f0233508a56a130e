"""A whole run through a channel that passes only bytes, with the parties in another process.

The label holder (this process) holds the labels and a :class:`~verticalfs.federation.Federation`
over :class:`PipeChannel`; the feature parties live in a child process started with ``spawn``
(no memory shared), each with its own columns. Between the two only ``bytes`` cross. The run must
give exactly the metrics, history, selection and ledger records of the in-process run: nothing a
method uses depends on the parties sharing the label holder's memory.
"""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

import verticalfs
from verticalfs.exceptions import ProtocolError, TransportError
from verticalfs.federation import Federation
from verticalfs.transport.channel import Channel


def _parties_main(conn, parties) -> None:  # runs in the child process
    import torch

    from verticalfs.methods.registry import party_roles
    from verticalfs.party import PartyRuntime
    from verticalfs.transport.inprocess import InProcessChannel
    from verticalfs.transport.ledger import Ledger

    torch.set_num_threads(1)

    def fresh():
        channel, ledger = InProcessChannel(), Ledger()  # party-to-party messages stay in the child
        runtimes = {p.name: PartyRuntime(p, role_for=party_roles()) for p in parties}
        for r in runtimes.values():
            channel.register(r.connect(channel, ledger))
        return runtimes

    runtimes = fresh()
    while True:
        op, sender, receiver, data = conn.recv()
        if op == "stop":
            return
        if op == "reset":
            runtimes = fresh()
            conn.send(("ok", None))
            continue
        try:
            reply = runtimes[receiver].node.receive(sender, data)
            conn.send(("ok", reply))
        except Exception as exc:  # noqa: BLE001 - sent back as a typed error
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class PipeChannel(Channel):
    """Encoded messages over a pipe to the parties' process; asserts that only bytes cross."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.n_bytes = 0

    def _send(self, op: str, sender: str, receiver: str, data: bytes):
        assert type(data) is bytes
        self.n_bytes += len(data)
        self.conn.send((op, sender, receiver, data))
        status, reply = self.conn.recv()
        if status == "error":
            raise ProtocolError(f"party {receiver!r}: {reply}")
        assert reply is None or type(reply) is bytes
        return reply

    def call(self, sender: str, receiver: str, data: bytes, *, batch: bool = False) -> bytes:
        reply = self._send("call", sender, receiver, data)
        if reply is None:
            raise TransportError(f"{receiver!r} sent no reply")
        self.n_bytes += len(reply)
        return reply

    def post(self, sender: str, receiver: str, data: bytes, *, batch: bool = False) -> None:
        if self._send("post", sender, receiver, data) is not None:
            raise TransportError(f"{receiver!r} replied to a one-way message")


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, seed=0)


@pytest.fixture(scope="module")
def parties_process(data):
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_parties_main, args=(there, data.parties), daemon=True)
    proc.start()
    yield here
    here.send(("stop", "", "", b""))
    proc.join(timeout=30)
    if proc.is_alive():
        proc.kill()


def records(ledger):
    """Every record but the networked run's own phase ``audit`` (it asks the parties for their
    party-to-party traffic, which in-process is on the shared ledger already)."""
    return [(r.sender, r.receiver, r.phase, r.kind, r.round, r.step, r.payload, r.overhead)
            for r in ledger.records() if r.phase != "audit"]


@pytest.mark.slow
@pytest.mark.parametrize("method,params", [
    ("vfl", {"epochs": 3, "batch_size": 64, "hidden": (16, 8)}),
    ("sparsevfl-16", {"epochs": 3, "batch_size": 64}),
])
def test_run_through_bytes_only_channel_equals_in_process(data, parties_process, method, params):
    parties_process.send(("reset", "", "", b""))
    assert parties_process.recv() == ("ok", None)
    channel = PipeChannel(parties_process)
    fed = Federation(data.labels, channel, data.party_names)  # the label holder: labels only
    remote = verticalfs.run(method, data, seed=0, params=params, federation=fed)
    local = verticalfs.run(method, data, seed=0, params=params)
    assert remote.metrics == local.metrics
    assert remote.history == local.history
    assert remote.selection == local.selection
    assert records(remote.federation.ledger) == records(local.federation.ledger)
    assert channel.n_bytes == remote.federation.ledger.total_bytes  # every byte that crossed is metered
    assert not fed.is_local
    with pytest.raises(Exception, match="pooled data"):
        fed.pooled_data()


def test_remote_error_is_typed_not_a_hang(data, parties_process):
    """A message the party's role does not expect comes back as a typed error naming the party."""
    parties_process.send(("reset", "", "", b""))
    parties_process.recv()
    from verticalfs.transport.messages import At, Gradients

    fed = Federation(data.labels, PipeChannel(parties_process), data.party_names)
    with pytest.raises(ProtocolError, match="before any Join"):
        fed.proxy(data.party_names[0]).send(Gradients(np.zeros((2, 2), np.float32)), At("train"))
