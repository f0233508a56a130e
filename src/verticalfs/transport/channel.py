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
from collections.abc import Sequence
from typing import Protocol

#: the phases whose requests are per-batch calls (a networked channel gives them its batch deadline)
BATCH_PHASES = frozenset({"train", "pretrain", "eval", "predict"})


class Endpoint(Protocol):
    """What a channel delivers to: one party's receiving side."""

    name: str

    def receive(self, sender: str, data: bytes) -> bytes | None:
        """Handle one encoded message from ``sender``; the encoded reply, or ``None`` if one-way."""


class Channel(ABC):
    """Moves encoded messages between named parties.

    ``batch=True`` marks a per-batch call (phases :data:`BATCH_PHASES`): a networked channel gives
    it its batch deadline, other calls (PSI, set-up, selection) their own.

    :meth:`call_all` and :meth:`post_all` are the fan-out seam: one message to each of several
    parties. Here (and in-process) they are sequential, in the order given, so that everything
    recorded while they run is recorded in that order; a channel whose :attr:`concurrent` is true
    sends them at once (a round then costs the slowest party, not the sum) and the caller records
    them in the order given after every reply is in.
    """

    #: :meth:`call_all` and :meth:`post_all` overlap their exchanges
    concurrent: bool = False
    #: the run's session id at the parties, when the channel carries one (networked runs); a run
    #: keeps its checkpoints under it (:class:`~verticalfs.training.checkpoint.Checkpointer`)
    session: str | None = None

    @abstractmethod
    def call(self, sender: str, receiver: str, data: bytes, *, batch: bool = False) -> bytes:
        """Deliver a request and return the receiver's encoded reply."""

    @abstractmethod
    def post(self, sender: str, receiver: str, data: bytes, *, batch: bool = False) -> None:
        """Deliver a one-way message (in order per sender and receiver)."""

    def call_all(self, sender: str, requests: Sequence[tuple[str, bytes]], *, batch: bool = False) -> list[bytes]:
        """Deliver each ``(receiver, data)`` request; the replies in the same order (sequential here)."""
        return [self.call(sender, r, d, batch=batch) for r, d in requests]

    def post_all(self, sender: str, messages: Sequence[tuple[str, bytes]], *, batch: bool = False) -> None:
        """Deliver each ``(receiver, data)`` one-way message (sequential here); returns when all are delivered."""
        for r, d in messages:
            self.post(sender, r, d, batch=batch)

    def close(self) -> None:  # noqa: B027 - nothing to release in-process
        """Release resources (sockets, processes) held by the channel."""

    def wire_bytes(self) -> int | None:
        """Bytes the label holder's links carried on the wire (framing and TLS included), for a
        networked channel that can measure them; ``None`` (the default) where nothing crosses a
        wire (in-process: the ledger's payload and overhead are the whole cost)."""
        return None
