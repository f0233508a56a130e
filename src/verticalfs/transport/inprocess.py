"""The embedded default: every party in this process, every message still serialised and metered."""

from __future__ import annotations

from time import perf_counter
from typing import Any

from verticalfs.codecs import Codec, get_codec
from verticalfs.exceptions import ProtocolError, TransportError
from verticalfs.transport.channel import Channel, Endpoint
from verticalfs.transport.ledger import Ledger
from verticalfs.transport.messages import kind_name
from verticalfs.transport.serde import _CODEC_TYPES, _PHASE_ID, decode_parts, encode_parts, phase_id


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
        phase, rnd, step = self.phase, self.round, self.step
        pid = _PHASE_ID.get(phase)
        if pid is None:
            pid = phase_id(phase)  # raises
        codec = self.codec
        if type(codec) not in _CODEC_TYPES:  # e.g. a name assigned after construction
            codec = self.codec = get_codec(codec)
            _CODEC_TYPES.add(type(codec))
        data, payload = encode_parts(msg, pid, rnd, step, codec)
        self.ledger.record(sender, receiver, phase, type(msg).__name__, rnd, step, payload, len(data) - payload)
        out = decode_parts(data)[0]
        if self.trace:
            self.messages.append((sender, receiver, out))
        return out

    def _deliver(self, sender: str, receiver: str, msg: Any) -> Any:
        try:
            ep = self._endpoints[receiver]
        except KeyError:
            raise TransportError(f"no party named {receiver!r} on this channel; parties: {self.parties}") from None
        copy = self._carry(sender, receiver, msg)
        t0 = perf_counter()
        reply = ep.handle(sender, copy)
        self.ledger.add_compute(receiver, self.phase, self.round, perf_counter() - t0)
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
