"""The embedded default: every party in this process, every message still serialised and metered."""

from __future__ import annotations

import time
from typing import Any

from verticalfs.codecs import Codec
from verticalfs.exceptions import ProtocolError, TransportError
from verticalfs.transport.channel import Channel, Endpoint
from verticalfs.transport.ledger import Ledger
from verticalfs.transport.messages import kind_name
from verticalfs.transport.serde import decode, encode


class InProcessChannel(Channel):
    """Delivers each message by serialising it, recording it, decoding it and calling the receiver.

    The receiver's handling time is measured and added to the ledger as that party's compute
    time in the current phase/round (used by :mod:`verticalfs.transport.bandwidth`).
    """

    def __init__(self, *, codec: str | Codec = "float32", ledger: Ledger | None = None,
                 trace: bool = False) -> None:
        super().__init__(codec=codec, ledger=ledger)
        self._endpoints: dict[str, Endpoint] = {}
        self.trace = trace
        self.messages: list[tuple[str, str, Any]] = []  # (sender, receiver, decoded msg) if trace

    def register(self, endpoint: Endpoint) -> None:
        if endpoint.name in self._endpoints:
            raise TransportError(f"a party named {endpoint.name!r} is already on this channel")
        self._endpoints[endpoint.name] = endpoint

    @property
    def parties(self) -> list[str]:
        return list(self._endpoints)

    def _carry(self, sender: str, receiver: str, msg: Any) -> Any:
        enc = encode(msg, phase=self.phase, round=self.round, step=self.step, codec=self.codec)
        self.ledger.record(sender, receiver, self.phase, kind_name(msg), self.round, self.step,
                           enc.payload, enc.overhead)
        out = decode(enc.data).msg
        if self.trace:
            self.messages.append((sender, receiver, out))
        return out

    def _deliver(self, sender: str, receiver: str, msg: Any) -> Any:
        try:
            ep = self._endpoints[receiver]
        except KeyError:
            raise TransportError(f"no party named {receiver!r} on this channel; parties: {self.parties}") from None
        copy = self._carry(sender, receiver, msg)
        t0 = time.perf_counter()
        reply = ep.handle(sender, copy)
        self.ledger.add_compute(receiver, self.phase, self.round, time.perf_counter() - t0)
        return reply

    def send(self, sender: str, receiver: str, msg: Any) -> None:
        reply = self._deliver(sender, receiver, msg)
        if reply is not None:
            raise ProtocolError(
                f"{receiver!r} replied {kind_name(reply)} to the one-way message {kind_name(msg)}"
            )

    def request(self, sender: str, receiver: str, msg: Any) -> Any:
        reply = self._deliver(sender, receiver, msg)
        if reply is None:
            raise ProtocolError(f"{receiver!r} sent no reply to {kind_name(msg)} from {sender!r}")
        return self._carry(receiver, sender, reply)
