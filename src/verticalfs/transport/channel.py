"""The :class:`Channel` interface (encoded messages between named parties) and :class:`Endpoint`.

A channel moves *bytes* and nothing else: it cannot see party objects, and it keeps no notion of
where in the protocol a message sits (that is in each message's header, see
:class:`~verticalfs.transport.messages.At`). Serialisation and metering happen one layer up, in
:class:`~verticalfs.transport.node.Node`, which every party (the label holder included) uses to
talk through a channel. So a method runs unchanged over the in-process channel and over a
networked one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol


class Endpoint(Protocol):
    """What a channel delivers to: one party's receiving side."""

    name: str

    def receive(self, sender: str, data: bytes) -> bytes | None:
        """Handle one encoded message from ``sender``; the encoded reply, or ``None`` if one-way."""


class Channel(ABC):
    """Moves encoded messages between named parties."""

    @abstractmethod
    def call(self, sender: str, receiver: str, data: bytes) -> bytes:
        """Deliver a request and return the receiver's encoded reply."""

    @abstractmethod
    def post(self, sender: str, receiver: str, data: bytes) -> None:
        """Deliver a one-way message (in order per sender and receiver)."""

    def close(self) -> None:  # noqa: B027 - nothing to release in-process
        """Release resources (sockets, processes) held by the channel."""

    def wire_bytes(self) -> int | None:
        """Bytes the label holder's links carried on the wire (framing and TLS included), for a
        networked channel that can measure them; ``None`` (the default) where nothing crosses a
        wire (in-process: the ledger's payload and overhead are the whole cost)."""
        return None
