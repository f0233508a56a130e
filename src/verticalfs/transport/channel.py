"""The :class:`Channel` interface and the :class:`Endpoint` protocol that parties implement.

Algorithm code talks to other parties only through a channel: :meth:`Channel.send` (one-way) and
:meth:`Channel.request` (a message and its reply). A channel serialises every message with
:mod:`verticalfs.transport.serde`, records it on its :class:`~verticalfs.transport.ledger.Ledger`
and delivers the *decoded copy*, so no object is shared between parties even in one process.
The phase and round written in the header come from :meth:`Channel.at`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any, Protocol

from verticalfs.codecs import Codec, get_codec
from verticalfs.transport.ledger import Ledger
from verticalfs.transport.serde import phase_id


class Endpoint(Protocol):
    """Anything that can receive messages: a party."""

    name: str

    def handle(self, sender: str, msg: Any) -> Any | None:
        """Process ``msg``; return the reply for a request, ``None`` for a one-way message."""


class Channel(ABC):
    """Carries messages between named parties and meters them on a ledger."""

    def __init__(self, *, codec: str | Codec = "float32", ledger: Ledger | None = None) -> None:
        self.codec = get_codec(codec)
        self.ledger = ledger if ledger is not None else Ledger()
        self.phase = "other"
        self.round = 0
        self.step = 0

    def set_position(self, phase: str | None = None, round: int | None = None, step: int | None = None) -> None:
        """Set the phase/round/step written on the following messages."""
        if phase is not None:
            phase_id(phase)  # validates
            self.phase = phase
        if round is not None:
            self.round = round
        if step is not None:
            self.step = step

    @contextmanager
    def at(self, phase: str, round: int | None = None, step: int = 0):
        """Context manager: messages sent inside carry this phase/round/step."""
        old = (self.phase, self.round, self.step)
        self.set_position(phase, self.round if round is None else round, step)
        try:
            yield self
        finally:
            self.phase, self.round, self.step = old

    @abstractmethod
    def send(self, sender: str, receiver: str, msg: Any) -> None:
        """One-way message."""

    @abstractmethod
    def request(self, sender: str, receiver: str, msg: Any) -> Any:
        """Send ``msg`` and return the receiver's reply (also metered)."""

    def broadcast(self, sender: str, receivers, msg: Any) -> None:
        for r in receivers:
            self.send(sender, r, msg)

    def close(self) -> None:  # noqa: B027  # pragma: no cover - nothing to release in-process
        """Release resources (sockets, processes) held by the channel."""
