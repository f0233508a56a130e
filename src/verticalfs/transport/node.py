"""One party's messaging: serialise, meter, send through a channel; receive, decode, dispatch.

Every party, the label holder included, talks through a :class:`Node`. It hands every message to
:mod:`verticalfs.transport.serde` and is the only place where bytes are recorded on the
:class:`~verticalfs.transport.ledger.Ledger`, so algorithm code never counts bytes itself.

Metering rule (one record per message on a shared ledger; a complete record of the label holder's
star on its own ledger when every party runs elsewhere):

- the label holder records every message it sends and every reply it receives;
- any other party records the messages it sends to parties other than the label holder, and the
  replies to its requests (party-to-party messages, e.g. FEAST's statistical variables, which the
  label holder never sees).

The payload of a received message is counted by the decoder exactly as the encoder counts it.

Compute time (:mod:`verticalfs.transport.bandwidth` estimates wall time from it): a party's node
records the time its handler took as that party's compute in the message's phase and round. The
label holder's node records the time *between* its exchanges (its own work: the top model, key
generation, encryption, decryption, selection logic, ...) as the label holder's compute at the
position of the message that follows, or of :meth:`Node.mark` for work that ends without one; the
time spent waiting for a party is not counted there (it is that party's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any

from verticalfs.exceptions import ProtocolError
from verticalfs.names import LABEL_HOLDER
from verticalfs.transport.channel import BATCH_PHASES, Channel
from verticalfs.transport.ledger import Ledger
from verticalfs.transport.messages import At, kind_name
from verticalfs.transport.serde import decode_at, encode_at

#: ``handler(sender, msg, at, node) -> reply or None``: what a node does with a received message
Handler = Callable[[str, Any, At, "Node"], Any]


class Node:
    """Messaging of the party ``name`` over ``channel``, metered on ``ledger``.

    Parameters
    ----------
    name : str
        This party's name.
    channel : Channel
        Carries the encoded messages.
    ledger : Ledger
        Where this node records what it sends (and, for the label holder, receives).
    handler : callable, optional
        Called for every message received; its return value is the reply (``None`` for one-way
        messages). A node without a handler refuses incoming messages.
    """

    def __init__(self, name: str, channel: Channel, ledger: Ledger, handler: Handler | None = None) -> None:
        self.name = name
        self.channel = channel
        self.ledger = ledger
        self.handler = handler
        self._hub = name == LABEL_HOLDER
        self._clock = perf_counter()  # the label holder's: end of its last exchange
        self._last_at: At | None = None
        self._records = threading.Lock()  # requests from several threads record one at a time
        #: the most values a received run-length coded (expanding) array may decode to: the shape
        #: this party expects where it knows it; ``None``: bounded by the message's size
        #: (:func:`~verticalfs.transport.serde.expansion_limit`)
        self.max_elements: int | None = None

    # ------------------------------------------------------------ own compute
    def mark(self, at: At) -> None:
        """The label holder's compute since its last exchange, recorded at ``at``."""
        if self._hub:
            now = perf_counter()
            self.ledger.add_compute(self.name, at.phase, at.round, now - self._clock)
            self._clock = now
            self._last_at = at

    def flush(self) -> None:
        """Record the label holder's compute since its last exchange at that exchange's position
        (e.g. an evaluation classifier trained after the last message)."""
        if self._hub and self._last_at is not None:
            self.mark(self._last_at)

    def reset_clock(self) -> None:
        """Start counting the label holder's compute from now (the start of a run)."""
        self._clock = perf_counter()

    # ------------------------------------------------------------------ sending
    def request(self, receiver: str, msg: Any, at: At) -> Any:
        """Send ``msg`` to ``receiver`` at ``at``; return its decoded reply. Several threads may
        request at once (e.g. PSI with every party): the records are then in completion order."""
        if self._hub:
            with self._records:
                self.mark(at)
        data, payload = encode_at(msg, at)
        led = self.ledger
        meter = self._hub or receiver != LABEL_HOLDER
        with self._records:
            if meter:
                led.record(self.name, receiver, at.phase, type(msg).__name__, at.round, at.step, payload,
                           len(data) - payload)
        raw = self.channel.call(self.name, receiver, data, batch=at.phase in BATCH_PHASES)
        reply, rat, rpay = decode_at(raw, self.max_elements)
        with self._records:
            if meter:
                led.record(receiver, self.name, rat.phase, type(reply).__name__, rat.round, rat.step, rpay,
                           len(raw) - rpay)
            if self._hub:
                self._clock = perf_counter()
        return reply

    def send(self, receiver: str, msg: Any, at: At) -> None:
        """Send the one-way message ``msg`` to ``receiver`` at ``at``."""
        if self._hub:
            self.mark(at)
        data, payload = encode_at(msg, at)
        if self._hub or receiver != LABEL_HOLDER:
            self.ledger.record(self.name, receiver, at.phase, type(msg).__name__, at.round, at.step,
                               payload, len(data) - payload)
        self.channel.post(self.name, receiver, data, batch=at.phase in BATCH_PHASES)
        if self._hub:
            self._clock = perf_counter()

    # ------------------------------------------------------------------ fan-out
    def request_all(self, requests: Sequence[tuple[str, Any]], at: At) -> list[Any]:
        """Send each ``(receiver, msg)`` at ``at``; their decoded replies in the same order.

        Over a channel whose :attr:`~verticalfs.transport.channel.Channel.concurrent` is false (the
        in-process one) this is :meth:`request` in turn, so everything is recorded exactly as
        before. Over a concurrent one the requests are encoded here in order, sent at once
        (:meth:`~verticalfs.transport.channel.Channel.call_all`), and once every reply is in, each
        request and its reply are recorded in the order given: the ledger is the same whichever
        party answers first.
        """
        if len(requests) < 2 or not self.channel.concurrent:
            return [self.request(r, m, at) for r, m in requests]
        if self._hub:
            self.mark(at)
        encoded = [encode_at(m, at) for _, m in requests]
        raws = self.channel.call_all(self.name, [(r, e[0]) for (r, _), e in zip(requests, encoded, strict=True)],
                                     batch=at.phase in BATCH_PHASES)
        led = self.ledger
        out = []
        decoded = [decode_at(raw, self.max_elements) for raw in raws]
        with self._records:  # (other threads may record at once: one run's sessions, PSI)
            for (receiver, msg), (data, payload), raw, (reply, rat, rpay) in zip(requests, encoded, raws, decoded,
                                                                                  strict=True):
                if self._hub or receiver != LABEL_HOLDER:
                    led.record(self.name, receiver, at.phase, type(msg).__name__, at.round, at.step, payload,
                               len(data) - payload)
                    led.record(receiver, self.name, rat.phase, type(reply).__name__, rat.round, rat.step, rpay,
                               len(raw) - rpay)
                out.append(reply)
            if self._hub:
                self._clock = perf_counter()
        return out

    def send_all(self, messages: Sequence[tuple[str, Any]], at: At) -> None:
        """Send each one-way ``(receiver, msg)`` at ``at`` (at once over a concurrent channel, recorded
        in the order given; in turn otherwise, see :meth:`request_all`)."""
        if len(messages) < 2 or not self.channel.concurrent:
            for r, m in messages:
                self.send(r, m, at)
            return
        if self._hub:
            self.mark(at)
        encoded = [encode_at(m, at) for _, m in messages]
        self.channel.post_all(self.name, [(r, e[0]) for (r, _), e in zip(messages, encoded, strict=True)],
                              batch=at.phase in BATCH_PHASES)
        with self._records:
            for (receiver, msg), (data, payload) in zip(messages, encoded, strict=True):
                if self._hub or receiver != LABEL_HOLDER:
                    self.ledger.record(self.name, receiver, at.phase, type(msg).__name__, at.round, at.step,
                                       payload, len(data) - payload)
            if self._hub:
                self._clock = perf_counter()

    # ---------------------------------------------------------------- receiving
    def receive(self, sender: str, data: bytes) -> bytes | None:
        """The :class:`~verticalfs.transport.channel.Endpoint` side: decode, handle, encode the reply."""
        msg, at, payload = decode_at(data, self.max_elements)
        if self.handler is None:
            raise ProtocolError(f"party {self.name!r} accepts no messages, got {kind_name(msg)} from {sender!r}")
        if self._hub:  # a party-initiated message to the label holder
            self.ledger.record(sender, self.name, at.phase, type(msg).__name__, at.round, at.step, payload,
                               len(data) - payload)
        t0 = perf_counter()
        reply = self.handler(sender, msg, at, self)
        self.ledger.add_compute(self.name, at.phase, at.round, perf_counter() - t0)
        if reply is None:
            return None
        out, rpay = encode_at(reply, at)
        if self._hub:
            self.ledger.record(self.name, sender, at.phase, type(reply).__name__, at.round, at.step, rpay,
                               len(out) - rpay)
        return out


def _as_is(msg: Any, at: At) -> tuple[Any, At]:
    return msg, at


class PartyProxy:
    """The label holder's handle on one party: every call carries its protocol position.

    Algorithms reach parties only through proxies (in the spirit of Flower's ``ClientProxy``), so
    the same code runs over the in-process channel and over a network.
    """

    __slots__ = ("name", "_node")

    def __init__(self, node: Node, name: str) -> None:
        self.name = name
        self._node = node

    def request(self, msg: Any, at: At, expect: type | tuple[type, ...] | None = None) -> Any:
        """Send ``msg`` at ``at`` and return the reply; with ``expect``, a reply of another kind is a
        :class:`~verticalfs.exceptions.ProtocolError` naming the party."""
        return _check_reply(self.name, msg, self._node.request(self.name, msg, at), expect)

    def send(self, msg: Any, at: At) -> None:
        """Send the one-way message ``msg`` at ``at``."""
        self._node.send(self.name, msg, at)

    def route(self) -> tuple[Node, str, Callable[[Any, At], tuple[Any, At]]]:
        """For :func:`request_all`: this proxy's node and party, its messages sent as they are."""
        return self._node, self.name, _as_is

    def __repr__(self) -> str:
        return f"PartyProxy({self.name!r})"


_Route = tuple[Node, str, Callable[[Any, At], tuple[Any, At]]]


def _one_node(items: Sequence[tuple[Any, Any]], at: At) -> tuple[Node, list[tuple[str, Any]], At] | None:
    """If every proxy of ``items`` (``(proxy, msg)``) sends through the same node and its messages
    land at the same position: that node, the ``(party, msg)`` pairs as it sends them, and the
    position; else ``None`` (e.g. a local reference's proxies, which send no messages)."""
    routes: list[_Route] = []
    for px, _ in items:
        route = getattr(px, "route", None)
        if route is None:
            return None
        routes.append(route())
    if not routes or any(r[0] is not routes[0][0] for r in routes):
        return None
    rewritten = [r[2](m, at) for r, (_, m) in zip(routes, items, strict=True)]
    positions = {a for _, a in rewritten}
    if len(positions) != 1:
        return None
    return routes[0][0], [(r[1], m) for r, (m, _) in zip(routes, rewritten, strict=True)], positions.pop()


def _check_reply(name: str, msg: Any, reply: Any, expect: type | tuple[type, ...] | None) -> Any:
    if expect is not None and not isinstance(reply, expect):
        want = " or ".join(k.__name__ for k in (expect if isinstance(expect, tuple) else (expect,)))
        raise ProtocolError(f"party {name!r} answered {kind_name(msg)} with {kind_name(reply)}; expected {want}")
    return reply


def request_all(requests: Sequence[tuple[Any, Any]], at: At,
                expect: type | tuple[type, ...] | None = None) -> list[Any]:
    """The fan-out seam for algorithm code: send each ``(proxy, msg)`` at ``at``; the replies in the
    same order (with ``expect``, a reply of another kind is a :class:`ProtocolError` naming its party).

    Proxies of one label holder's node go through :meth:`Node.request_all` (at once over a
    concurrent channel, recorded in the order given); any other proxy (a local reference's) is
    asked in turn.
    """
    one = _one_node(requests, at)
    if one is None:
        return [px.request(m, at, expect=expect) for px, m in requests]
    node, pairs, where = one
    replies = node.request_all(pairs, where)
    return [_check_reply(px.name, m, rep, expect) for (px, m), rep in zip(requests, replies, strict=True)]


def send_all(messages: Sequence[tuple[Any, Any]], at: At) -> None:
    """Send each one-way ``(proxy, msg)`` at ``at`` (see :func:`request_all`)."""
    one = _one_node(messages, at)
    if one is None:
        for px, m in messages:
            px.send(m, at)
        return
    node, pairs, where = one
    node.send_all(pairs, where)
