"""The embedded default: every party in this process, every message still serialised and metered.

:class:`InProcessChannel` hands the encoded bytes of a message to the receiving party's
:class:`~verticalfs.transport.channel.Endpoint` and returns the encoded reply: nothing but bytes
crosses, exactly as over a network. With ``trace=True`` it keeps every ``(sender, receiver, bytes)``
for inspection (the privacy audit decodes them).
"""

from __future__ import annotations

from verticalfs.exceptions import ProtocolError, TransportError
from verticalfs.transport.channel import Channel, Endpoint


class InProcessChannel(Channel):
    """Delivers encoded messages to endpoints registered in this process."""

    def __init__(self, *, trace: bool = False) -> None:
        self._endpoints: dict[str, Endpoint] = {}
        self.trace = trace
        self.messages: list[tuple[str, str, bytes]] = []  # (sender, receiver, encoded) if trace

    def decoded(self) -> list[tuple[str, str, object]]:
        """The traced messages decoded: ``(sender, receiver, message)`` in order (for inspection)."""
        from verticalfs.transport.serde import decode

        return [(s, r, decode(d).msg) for s, r, d in self.messages]

    def register(self, endpoint: Endpoint) -> None:
        if endpoint.name in self._endpoints:
            raise TransportError(f"a party named {endpoint.name!r} is already on this channel")
        self._endpoints[endpoint.name] = endpoint

    @property
    def parties(self) -> list[str]:
        return list(self._endpoints)

    def _endpoint(self, receiver: str) -> Endpoint:
        try:
            return self._endpoints[receiver]
        except KeyError:
            raise TransportError(f"no party named {receiver!r} on this channel; parties: {self.parties}") from None

    def call(self, sender: str, receiver: str, data: bytes, *, batch: bool = False) -> bytes:
        ep = self._endpoint(receiver)
        if self.trace:
            self.messages.append((sender, receiver, data))
        reply = ep.receive(sender, data)
        if reply is None:
            raise ProtocolError(f"{receiver!r} sent no reply to a request from {sender!r}")
        if self.trace:
            self.messages.append((receiver, sender, reply))
        return reply

    def post(self, sender: str, receiver: str, data: bytes, *, batch: bool = False) -> None:
        ep = self._endpoint(receiver)
        if self.trace:
            self.messages.append((sender, receiver, data))
        reply = ep.receive(sender, data)
        if reply is not None:
            raise ProtocolError(f"{receiver!r} replied to a one-way message from {sender!r}")
