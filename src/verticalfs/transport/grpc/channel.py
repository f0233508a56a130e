"""Encoded messages between processes over gRPC, with mutual TLS by default.

Two generic RPCs. A message of at most :data:`CHUNK` (1 MiB) bytes, nearly every message of a
run, goes as one gRPC message on ``/verticalfs.Transport/Call`` and its reply comes back as one
(a bidirectional stream costs more than the message at these sizes: ``benchmarks/network``). A
larger one is streamed on ``/verticalfs.Transport/Exchange`` in chunks of :data:`CHUNK` bytes, its
total size announced first (``vf-size`` metadata), and its reply streamed back the same way; the
reply to a small request (e.g. a whole split's embeddings) is one gRPC message.

Sizes are bounded by the receiver, before it buffers: a party's server takes gRPC messages of at
most one chunk (``grpc.max_receive_message_length``; gRPC refuses a larger one from its length
prefix) and refuses a stream whose announced size is over its ``max_message_bytes`` (the party
policy's ``max_message_mb``) before reading any chunk, or whose chunks come to more than announced;
a channel takes replies of at most its ``max_message_bytes``. The bytes are exactly what
:mod:`verticalfs.transport.serde` produced: the ledger records the same payload and overhead as
in-process (gRPC's framing and TLS come on top and are not on the ledger).

Who is talking: each call carries the sender's name (``vf-sender`` metadata) and, when the label
holder chose one, its run's session id (``vf-session``): an endpoint with ``receive_in`` keeps each
session's state apart and locks per session (:class:`~verticalfs.transport.grpc.party.NetworkedParty`),
any other endpoint handles one message at once. With TLS (the
default) the server accepts it only if the peer's certificate, signed by the agreed CA, names
that sender, and only senders in its ``peers`` list; the client checks the server's certificate
names the party it meant to reach. A handler's error is sent back with its type and message and
raised at the caller as the same verticalfs exception, naming the party; an unreachable party is
a :class:`~verticalfs.exceptions.TransportError` naming it and its address within ``connect_timeout``
seconds, never a hang (with the TLS handshake's cause when that is what failed: :func:`tls_failure`).

Failures during a run: a per-batch call has a deadline (``call_timeout``); a hung party is found by
unanswered keep-alive pings within 9 s (15 s on a loaded host); a call whose connection dropped before its reply came
back is sent again with the same id (``vf-call``: the channel's nonce and a sequence number), and
the party answers a repeated id from its cache of the last reply per caller channel, so nothing is
computed twice. :meth:`GrpcChannel.call_all` and :meth:`GrpcChannel.post_all` send one message to
each of several parties at once (``fan_out="concurrent"``, the default).
"""

from __future__ import annotations

import copy
import itertools
import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent import futures
from typing import Any

from verticalfs import exceptions as _exc
from verticalfs.exceptions import ConfigError, ProtocolError, TransportError
from verticalfs.transport.channel import Channel, Endpoint
from verticalfs.transport.grpc.tls import TLSFiles
from verticalfs.transport.grpc.wire import tcp_bytes

log = logging.getLogger("verticalfs.transport")

SERVICE = "verticalfs.Transport"
METHOD = f"/{SERVICE}/Exchange"
#: one request of at most CHUNK bytes, one reply (of up to gRPC's own 2 GiB cap): the fast path
UNARY = f"/{SERVICE}/Call"
#: bytes per streamed chunk
CHUNK = 1 << 20
#: the largest message a party accepts by default (the party policy's ``max_message_mb``; the
#: run-length decoder bounds what a message expands to separately)
MAX_MESSAGE_BYTES = 256 << 20
#: gRPC's own cap on one message (bytes): nothing may be set above it
_GRPC_CAP = (1 << 31) - 1
#: the deadline of a per-batch call by default (seconds; ``call_timeout`` of the deployment file)
CALL_TIMEOUT = 30.0
#: a lost connection or a reply that never came back (``UNAVAILABLE``) is retried this many times,
#: after RETRY_BACKOFF, twice that, ... seconds; the party answers a repeated call from its cache
RETRIES, RETRY_BACKOFF = 3, 0.2
#: fan-out modes of :class:`GrpcChannel`
FAN_OUT = ("concurrent", "sequential")
#: test-only fault injection: ``VERTICALFS_TEST_DROP_REPLY=Gradients:3,EmbedRequest:5`` makes a party
#: server handle the 3rd Gradients message and the 5th EmbedRequest it receives and then drop their
#: replies (the caller sees a lost connection and retries)
DROP_REPLY_ENV = "VERTICALFS_TEST_DROP_REPLY"
#: a party server keeps the last reply of this many callers' channels (a few label-holder sessions
#: and the peers), to answer a repeated call; an older channel's reply is dropped
_CACHED_CHANNELS = 8
#: keep-alive: a ping every KEEPALIVE_S seconds, answered within KEEPALIVE_TIMEOUT_S, else the connection
#: is dropped and its calls fail naming the party ("stopped answering"): a hung or stopped party is
#: found within their sum (9 s; the guide promises 15 s, the rest is margin for a loaded host)
KEEPALIVE_S, KEEPALIVE_TIMEOUT_S = 5.0, 4.0
#: a lost connection is tried again after 0.5 s, then at most every RECONNECT_MAX_S seconds (gRPC's
#: default grows to 120 s: a party back after a minute was reached only a minute or two later)
RECONNECT_MAX_S = 2.0
_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1),
            ("grpc.keepalive_time_ms", int(KEEPALIVE_S * 1e3)),
            ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT_S * 1e3)),
            ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_pings_without_data", 0),
            ("grpc.http2.ping_timeout_ms", int(KEEPALIVE_TIMEOUT_S * 1e3)),
            ("grpc.initial_reconnect_backoff_ms", 500), ("grpc.min_reconnect_backoff_ms", 500),
            ("grpc.max_reconnect_backoff_ms", int(RECONNECT_MAX_S * 1e3))]
#: the server accepts the clients' keep-alive pings (every 5 s) also while a handler computes; it binds
#: its port alone (gRPC's default SO_REUSEPORT lets a second process bind the same port, and the kernel
#: then splits the connections between the two: a second `party serve` or label holder took half)
_SERVER_OPTIONS = [*_OPTIONS, ("grpc.http2.min_ping_interval_without_data_ms", 4_000),
                   ("grpc.http2.max_ping_strikes", 0), ("grpc.so_reuseport", 0)]


def _limited(options: list[tuple[str, Any]], max_receive: int) -> list[tuple[str, Any]]:
    """``options`` with ``grpc.max_receive_message_length`` set to ``max_receive`` bytes."""
    return [(k, v) for k, v in options if k != "grpc.max_receive_message_length"] + [
        ("grpc.max_receive_message_length", int(min(max_receive, _GRPC_CAP)))]


def _too_large(who: str, size: int, limit: int, sender: str) -> str:
    return (f"TransportError: party {who!r} refuses a message of {size / 2**20:.1f} MiB from {sender!r}: over its "
            f"limit of {limit / 2**20:g} MiB (max_message_mb of its [policy])")


#: the gRPC channel options of :class:`GrpcChannel` (unlimited message sizes, keep-alive every 5 s),
#: for a bare gRPC endpoint that is to be compared with this transport on equal terms
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = tuple(_OPTIONS)


def _grpc() -> Any:  # grpc has no type hints: its module, servers, channels and contexts are Any
    try:
        import grpc
    except ImportError:  # pragma: no cover - the deploy extra
        raise ConfigError("networked runs need grpcio and cryptography: pip install 'verticalfs[deploy]'") from None
    return grpc


def _chunks(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    if not data:
        yield b""
    for i in range(0, len(data), CHUNK):
        yield bytes(view[i:i + CHUNK])


#: the insecure-mode warning has been printed in this process (it is printed once per process)
_insecure_warned = False
INSECURE_WARNING = ("WARNING: insecure mode: no TLS, traffic and identities are not protected (messages travel "
                    "in the clear and any process that reaches an address can claim to be any party); for local "
                    "experiments only")


def _insecure_warning(who: str) -> None:
    """Print :data:`INSECURE_WARNING` on stderr, once per process (a server and a channel both ask)."""
    global _insecure_warned
    if _insecure_warned:
        return
    _insecure_warned = True
    sys.stderr.write(f"{INSECURE_WARNING} [{who}]\n")
    sys.stderr.flush()


class PartyServer:
    """Serve one party's endpoint (its :class:`~verticalfs.transport.node.Node`) on ``address``.

    Parameters
    ----------
    endpoint : Endpoint
        What received messages are handed to (one at a time: a party handles one message at once).
    address : str
        ``host:port`` to listen on (port 0: any free port; see :attr:`port`).
    tls : TLSFiles or None
        This party's TLS material; ``None`` only with ``insecure=True``.
    peers : iterable of str
        The parties allowed to send to this one (names as in their certificates).
    max_message_bytes : int
        The largest message accepted (default :data:`MAX_MESSAGE_BYTES`): a larger one is refused
        before it is buffered (see the module docstring).
    """

    def __init__(self, endpoint: Endpoint, address: str, *, tls: TLSFiles | None, peers: Iterable[str],
                 insecure: bool = False, max_workers: int = 4, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        grpc = _grpc()
        if tls is None and not insecure:
            raise ConfigError(f"party {endpoint.name!r}: no TLS material; give the CA, certificate and key, or "
                              "--insecure for a local experiment")
        if tls is None:
            _insecure_warning(f"party {endpoint.name!r}")
        self.endpoint = endpoint
        self.peers = frozenset(peers)
        self.tls = tls
        self._lock = threading.Lock()
        #: the last reply per (sender, channel nonce): a repeated call (same ``vf-call`` id, sent
        #: again after its reply was lost) is answered from here, never handled twice
        self._replies: dict[tuple[str, str], tuple[str, bytes | None]] = {}
        self._drop = _drop_spec(os.environ.get(DROP_REPLY_ENV, ""))  # test-only fault injection
        self._seen_kinds: dict[str, int] = {}
        self.max_message_bytes = int(max_message_bytes)
        # one gRPC message is at most a chunk (a longer message is streamed), and never over the limit
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers),
                                   options=_limited(_SERVER_OPTIONS, min(self.max_message_bytes, CHUNK + 1024)))
        handlers = {"Exchange": grpc.stream_stream_rpc_method_handler(self._exchange),
                    "Call": grpc.unary_unary_rpc_method_handler(self._call)}
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        try:
            if tls is not None:
                ca, cert, key = tls.read()
                creds = grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)
                self.port = self._server.add_secure_port(address, creds)
            else:
                self.port = self._server.add_insecure_port(address)
        except RuntimeError:  # gRPC's "Failed to bind"
            self.port = 0
        if self.port == 0:
            raise TransportError(f"party {endpoint.name!r} cannot listen on {address!r} (in use or not an address "
                                 "of this host)")
        self.address = address.rsplit(":", 1)[0] + f":{self.port}"

    def start(self) -> PartyServer:
        self._server.start()
        return self

    def wait(self) -> None:
        self._server.wait_for_termination()

    def stop(self, grace: float | None = 1.0) -> None:
        self._server.stop(grace).wait()

    def _check_sender(self, context: Any) -> tuple[str, str]:
        md = dict(context.invocation_metadata())
        sender, op = md.get("vf-sender", ""), md.get("vf-op", "")
        if self.tls is not None:
            names = {n.decode() for n in context.auth_context().get("x509_common_name", [])}
            if sender not in names:
                self._refuse(context, f"the sender claims to be {sender!r} but its certificate names {sorted(names)}")
        if sender not in self.peers:
            self._refuse(context, f"{sender!r} is not a peer of party {self.endpoint.name!r} "
                                  f"(its peers: {sorted(self.peers)})")
        return sender, op

    def _refuse(self, context: Any, why: str) -> None:
        """Refuse a sender: logged here with the peer's address, and told to the caller."""
        log.warning("party %r refused a message from %s: %s", self.endpoint.name, context.peer(), why)
        context.abort(_grpc().StatusCode.PERMISSION_DENIED, f"PermissionError: {why}")

    def _handle(self, context: Any, sender: str, op: str, data: bytes) -> bytes | None:
        grpc = _grpc()
        md = dict(context.invocation_metadata())
        call_id = md.get("vf-call", "")
        nonce, _, _ = call_id.partition(":")
        receive_in = getattr(self.endpoint, "receive_in", None)
        drop = False
        try:
            reply: bytes | None
            with self._lock:
                seen = self._replies.get((sender, nonce)) if call_id else None
            if seen is not None and seen[0] == call_id:  # a retry: its reply was lost on the way
                log.warning("party %r: %s sent call %s again (its reply was lost); answered from the cache",
                            self.endpoint.name, sender, call_id)
                reply = seen[1]
            else:
                t_handle = time.perf_counter()
                if receive_in is not None:  # the endpoint keeps sessions apart and locks each itself
                    reply = receive_in(md.get("vf-session", ""), sender, data, context.peer(),
                                       start=md.get("vf-start", "1") != "0", route=md.get("vf-route", ""))
                else:
                    with self._lock:
                        reply = self.endpoint.receive(sender, data)
                # how long the party took (decoding, handling, encoding), for the caller's breakdown of a
                # round trip (serve-model's Server-Timing): the rest is gRPC, TLS and the network
                context.set_trailing_metadata((("vf-handled-us", str(int((time.perf_counter() - t_handle) * 1e6))),))
                with self._lock:
                    if call_id:  # (a channel's calls come one at a time: its nonce keys its last reply)
                        self._replies.pop((sender, nonce), None)
                        self._replies[(sender, nonce)] = (call_id, reply)
                        while len(self._replies) > _CACHED_CHANNELS:  # the oldest channels' last replies go
                            del self._replies[next(iter(self._replies))]
                    if self._drop:
                        drop = self._fault(data)
        except _exc.VerticalFSError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - reported to the caller with its type, never a silent hang
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        if drop:  # test-only: handled, its reply lost on the way back
            context.abort(grpc.StatusCode.UNAVAILABLE, f"injected fault: {self.endpoint.name!r} dropped its reply to "
                          f"{call_id} ({DROP_REPLY_ENV})")
        if op == "call" and reply is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"ProtocolError: {self.endpoint.name!r} has no reply")
        return reply

    def _fault(self, data: bytes) -> bool:
        """Test-only (:data:`DROP_REPLY_ENV`): is this the n-th message of a kind whose reply is dropped?"""
        from verticalfs.transport.serde import decode

        kind = type(decode(data).msg).__name__
        self._seen_kinds[kind] = n = self._seen_kinds.get(kind, 0) + 1
        return (kind, n) in self._drop

    def _call(self, request: bytes, context: Any) -> bytes:
        """The fast path: a request of at most :data:`CHUNK` bytes in one gRPC message."""
        sender, op = self._check_sender(context)
        if len(request) > min(CHUNK, self.max_message_bytes):
            context.abort(_grpc().StatusCode.RESOURCE_EXHAUSTED,
                          f"TransportError: {len(request)} bytes from {sender!r} on the one-message path")
        reply = self._handle(context, sender, op, request)
        return b"" if reply is None else reply

    def _exchange(self, request_iterator: Iterator[bytes], context: Any) -> Iterator[bytes]:
        grpc = _grpc()
        sender, op = self._check_sender(context)
        limit, who = self.max_message_bytes, self.endpoint.name
        declared = dict(context.invocation_metadata()).get("vf-size", "")
        if not declared.isdigit():
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"TransportError: a streamed message from {sender!r} without its size (vf-size)")
        total = int(declared)
        if total > limit:  # refused before a byte of it is read
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, _too_large(who, total, limit, sender))
        parts: list[bytes] = []
        size = 0
        for chunk in request_iterator:
            size += len(chunk)
            if size > total:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"TransportError: {sender!r} streamed more than the {total} bytes it announced")
            parts.append(chunk)
        reply = self._handle(context, sender, op, b"".join(parts))
        if reply is not None:
            yield from _chunks(reply)


class GrpcChannel(Channel):
    """The sending side: one gRPC connection per party this party talks to.

    Parameters
    ----------
    name : str
        The party using this channel (its certificate must name it).
    addresses : mapping
        ``{party name: "host:port"}`` of the parties it may send to.
    tls : TLSFiles or None
        This party's TLS material (``None`` only with ``insecure=True``).
    connect_timeout : float
        Seconds to wait for a party to be reachable before a :class:`TransportError` names it (and,
        when the TLS handshake is what failed, its cause: unknown CA, wrong party name, expired).
    call_timeout : float or None
        Deadline of one per-batch exchange (phases ``train``, ``pretrain``, ``eval``,
        ``predict``; default :data:`CALL_TIMEOUT`; ``None``: none).
    setup_timeout : float or None
        Deadline of any other exchange (PSI, set-up, selection; default none). Whatever the
        deadlines, a dead party is detected at once by its closed connection, and a hung one
        (stopped, cut off) by unanswered keep-alive pings within 9 s (15 s on a loaded host).
    retries : int
        A call whose connection was lost before its reply came (``UNAVAILABLE``) is sent again up
        to this many times, after ``backoff``, 2 x ``backoff``, ... seconds. Every call carries a
        sequence number: the party answers a repeated call with the reply it already computed, so
        a retry never computes (or advances a party's state) twice.
    fan_out : "concurrent" or "sequential"
        How :meth:`call_all` and :meth:`post_all` send one message to several parties: at once
        (the default: a round costs the slowest party) or one after another (for comparison).
    max_message_bytes : int
        The largest reply accepted (default :data:`MAX_MESSAGE_BYTES`).
    session : str, optional
        The run's session id, sent with every call (``vf-session``; see :meth:`for_session`).
    """

    def __init__(self, name: str, addresses: Mapping[str, str], *, tls: TLSFiles | None, insecure: bool = False,
                 connect_timeout: float = 10.0, call_timeout: float | None = CALL_TIMEOUT,
                 setup_timeout: float | None = None, retries: int = RETRIES, backoff: float = RETRY_BACKOFF,
                 fan_out: str = "concurrent", max_message_bytes: int = MAX_MESSAGE_BYTES,
                 session: str | None = None) -> None:
        grpc = _grpc()
        if tls is None and not insecure:
            raise ConfigError(f"{name!r}: no TLS material; give the CA, certificate and key, or --insecure for a "
                              "local experiment")
        if tls is None:
            _insecure_warning(name)
        if fan_out not in FAN_OUT:
            raise ConfigError(f"fan_out must be one of {FAN_OUT}, got {fan_out!r}")
        self.name = name
        self.addresses = dict(addresses)
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.setup_timeout = setup_timeout
        self.retries, self.backoff = max(0, int(retries)), float(backoff)
        self.fan_out = fan_out
        self.concurrent = fan_out == "concurrent"
        self._tls = tls
        #: every call's id: this channel's nonce and a sequence number (``vf-call`` metadata)
        self._nonce = secrets.token_hex(8)
        self._seq = itertools.count(1)
        self._pool: futures.ThreadPoolExecutor | None = None
        self.max_message_bytes = int(max_message_bytes)
        self._options = _limited(_OPTIONS, self.max_message_bytes)
        self._creds: Any = None
        if tls is not None:
            ca, cert, key = tls.read()
            self._creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
        self._channels: dict[tuple[str, str], Any] = {}
        self._states: dict[tuple[str, str], Any] = {}  # the connections' gRPC connectivity, as they report it
        self._calls: dict[tuple[str, str], tuple[Any, Any]] = {}  # (streaming, unary) callables per (party, address)
        self._lock = threading.Lock()
        self.session = session
        #: parties this channel's session has started at (its first call to each says so: ``vf-start``;
        #: a party that does not know the session then knows it restarted or forgot it)
        self._started: set[str] = set()
        #: ``{party: "host:port"}`` announced with every call (``vf-route``): where this run serves a
        #: party's block when not at its address (the label party's own block of a second run)
        self.routes: dict[str, str] = {}
        #: ``on_call(party, round_trip_s, party_handling_s or None)`` after each one-message call (timing)
        self.on_call: Any = None

    def for_session(self, session: str, routes: Mapping[str, str] | None = None) -> GrpcChannel:
        """This channel's connections, its calls tagged with ``session`` (a party's messages to its
        peers within one of the label holder's runs), a peer reached at ``routes`` instead of its
        address. Close the channel it came from, not this view."""
        view = copy.copy(self)  # shares the connections, the callables and their lock
        view.session = session
        view._started = set()
        if routes:
            view.addresses = {**self.addresses, **routes}
        return view

    def route(self, party: str, address: str) -> None:
        """Reach ``party`` at ``address`` (its block served by this run elsewhere than its address),
        and tell every party so with each call (their messages to ``party`` within this session go there)."""
        self.addresses[party] = address
        self.routes[party] = address

    def restart(self, party: str) -> None:
        """The next call to ``party`` starts this channel's session there again (after the party
        restarted: its state of the session is lost, and the caller sets it up anew), on a new
        connection (connected within ``connect_timeout``, or a :class:`TransportError` naming it)."""
        with self._lock:
            self._started.discard(party)
            # a new connection, tried at once (the old one's reconnect backoff may be seconds away)
            key = (party, self.addresses.get(party, ""))
            self._calls.pop(key, None)
            old = self._channels.pop(key, None)
            self._states.pop(key, None)
        if old is not None:
            old.close()

    def reachable(self, party: str, timeout: float = 1.0) -> bool:
        """Whether ``party``'s address accepts a TCP connection now (a cheap probe before a call)."""
        import socket

        host, _, port = self.addresses.get(party, ":").rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return True
        except (OSError, ValueError):
            return False

    def connectivity(self, party: str) -> str:
        """The gRPC state of the connection to ``party`` (``READY``, ``CONNECTING``, ``IDLE``,
        ``TRANSIENT_FAILURE``; ``NONE`` before the first call)."""
        state = self._states.get((party, self.addresses.get(party, "")))
        return "NONE" if state is None else str(state.name)

    def _call(self, receiver: str) -> tuple[Any, Any]:
        addr = self.addresses.get(receiver, "")
        call = self._calls.get((receiver, addr))
        if call is not None:
            return call
        grpc = _grpc()
        with self._lock:
            if (receiver, addr) in self._calls:
                return self._calls[(receiver, addr)]
            if receiver not in self.addresses:
                raise TransportError(f"{self.name!r} has no address for party {receiver!r}; known: "
                                     f"{sorted(self.addresses)}")
            if self._creds is not None:
                ch = grpc.secure_channel(addr, self._creds,
                                         options=[*self._options, ("grpc.ssl_target_name_override", receiver)])
            else:
                ch = grpc.insecure_channel(addr, options=self._options)
            try:
                grpc.channel_ready_future(ch).result(timeout=self.connect_timeout)
            except grpc.FutureTimeoutError:
                ch.close()
                cause = None if self._tls is None else tls_failure(addr, receiver, self._tls)
                if cause is not None:
                    exc = TransportError(f"party {receiver!r} at {addr}: the TLS handshake failed: {cause}")
                else:
                    exc = TransportError(f"party {receiver!r} at {addr} is not reachable within "
                                         f"{self.connect_timeout:g} s (is `verticalfs party serve` running there?)")
                exc.party = receiver
                raise exc from None
            self._channels[(receiver, addr)] = ch
            ch.subscribe(lambda state, key=(receiver, addr): self._states.__setitem__(key, state))
            self._calls[(receiver, addr)] = (ch.stream_stream(METHOD), ch.unary_unary(UNARY))
            return self._calls[(receiver, addr)]

    def wait_ready(self, parties: Iterable[str]) -> None:
        """Connect to every party in ``parties`` now; a :class:`TransportError` names the first unreachable one."""
        for p in parties:
            self._call(p)

    def _attempt(self, receiver: str, op: str, data: bytes, md: tuple[tuple[str, str], ...],
                 timeout: float | None) -> bytes | None:
        stream, unary = self._call(receiver)
        if len(data) <= CHUNK:  # one gRPC message each way (a post's reply is empty)
            if self.on_call is None:
                reply: bytes = unary(data, metadata=md, timeout=timeout)
            else:  # timed: the round trip, and the party's own share of it (its vf-handled-us)
                t0 = time.perf_counter()
                reply, call = unary.with_call(data, metadata=md, timeout=timeout)
                rtt = time.perf_counter() - t0
                handled = dict(call.trailing_metadata() or ()).get("vf-handled-us", "")
                self.on_call(receiver, rtt, int(handled) / 1e6 if handled.isdigit() else None)
            return reply if reply or op == "call" else None
        parts, size = [], 0
        replies = stream(_chunks(data), metadata=md, timeout=timeout)
        for part in replies:
            size += len(part)
            if size > self.max_message_bytes:
                replies.cancel()
                raise TransportError(f"{receiver!r} sent a reply over {self.name!r}'s limit of "
                                     f"{self.max_message_bytes / 2**20:g} MiB (max_message_mb of its [policy])")
            parts.append(part)
        return b"".join(parts) if parts else None

    def _exchange(self, op: str, sender: str, receiver: str, data: bytes, batch: bool = False) -> bytes | None:
        grpc = _grpc()
        timeout = self.call_timeout if batch else self.setup_timeout
        md: tuple[tuple[str, str], ...] = (("vf-sender", sender), ("vf-op", op), ("vf-size", str(len(data))),
                                            ("vf-call", f"{self._nonce}:{next(self._seq)}"))
        if self.session:
            # until a call of the session reaches the party's handler (a reply, or its handler's error),
            # every call may start the session there (a refused one, "busy", did not)
            first = receiver not in self._started
            md += (("vf-session", self.session), ("vf-start", "1" if first else "0"))
            if self.routes:
                md += (("vf-route", ",".join(f"{p}={a}" for p, a in sorted(self.routes.items()))),)
        delay = self.backoff
        for attempt in range(self.retries + 1):
            try:
                reply = self._attempt(receiver, op, data, md, timeout)
                if self.session and first:
                    with self._lock:
                        self._started.add(receiver)
                return reply
            except grpc.RpcError as err:
                if attempt < self.retries and _retriable(err):
                    log.warning("party %r at %s: %s; retrying in %.1f s (%d of %d)", receiver,
                                self.addresses[receiver], err.details(), delay, attempt + 1, self.retries)
                    time.sleep(delay)
                    delay *= 2
                    continue
                exc = _remote_error(err, receiver, self.addresses[receiver], timeout)
                if self.session and first and not isinstance(exc, TransportError):  # its handler ran
                    with self._lock:
                        self._started.add(receiver)
                exc.party = receiver  # which party (serve-model's health, recovery)
                raise exc from None
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def call(self, sender: str, receiver: str, data: bytes, *, batch: bool = False) -> bytes:
        reply = self._exchange("call", sender, receiver, data, batch)
        if reply is None:
            raise ProtocolError(f"{receiver!r} sent no reply to a request from {sender!r}")
        return reply

    def post(self, sender: str, receiver: str, data: bytes, *, batch: bool = False) -> None:
        if self._exchange("post", sender, receiver, data, batch) is not None:
            raise ProtocolError(f"{receiver!r} replied to a one-way message from {sender!r}")

    def _all(self, fn: Any, sender: str, items: Sequence[tuple[str, bytes]], batch: bool) -> list[Any]:
        """``fn(sender, receiver, data, batch=batch)`` for every item at once (sequentially when
        :attr:`fan_out` is ``"sequential"``); the results in order. The first failure is raised as
        soon as it happens (naming its party), without waiting for the others."""
        if not self.concurrent or len(items) < 2:
            return [fn(sender, r, d, batch=batch) for r, d in items]
        for r, _ in items:  # connect (or fail naming the party) before anything is sent
            self._call(r)
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = futures.ThreadPoolExecutor(max(2, len(self.addresses)),
                                                            thread_name_prefix=f"verticalfs-{self.name}-fan-out")
        pending = [self._pool.submit(fn, sender, r, d, batch=batch) for r, d in items]
        done, _ = futures.wait(pending, return_when=futures.FIRST_EXCEPTION)
        for f in pending:  # the first failure in party order among those finished
            if f in done and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]
        return [f.result() for f in pending]

    def call_all(self, sender: str, requests: Sequence[tuple[str, bytes]], *, batch: bool = False) -> list[bytes]:
        return self._all(self.call, sender, requests, batch)

    def post_all(self, sender: str, messages: Sequence[tuple[str, bytes]], *, batch: bool = False) -> None:
        self._all(self.post, sender, messages, batch)

    def wire_bytes(self) -> int | None:
        """Bytes on the wire so far between this party and the parties it called (TCP payload: verticalfs
        bytes plus gRPC framing and TLS; both directions), from the kernel's counters
        (:mod:`.wire`); ``None`` where they cannot be read."""
        r = tcp_bytes(self.addresses.values())
        return None if r is None else r[0] + r[1]

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()
        self._channels.clear()
        self._calls.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


def _drop_spec(text: str) -> set[tuple[str, int]]:
    """``"Gradients:3,EmbedRequest:5"`` as ``{("Gradients", 3), ("EmbedRequest", 5)}`` (:data:`DROP_REPLY_ENV`)."""
    out = set()
    for item in text.split(","):
        kind, _, n = item.strip().partition(":")
        if kind and n.isdigit():
            out.add((kind, int(n)))
    return out


def _retriable(err: Any) -> bool:
    """A lost connection or a lost reply (``UNAVAILABLE``), but not a party that stopped answering
    keep-alive pings (hung: reported at once) and not an error the party sent."""
    grpc = _grpc()
    details = (err.details() or "").lower()
    return bool(err.code() == grpc.StatusCode.UNAVAILABLE and "ping" not in details and "keepalive" not in details)


#: OpenSSL's verification messages and alerts, as what they mean for a deployment
_TLS_CAUSES = (
    ("unable to get local issuer", "unknown CA: its certificate is not signed by this party's CA (the two use "
                                   "different ca.pem files)"),
    ("self-signed certificate", "unknown CA: its certificate is not signed by this party's CA (the two use "
                                "different ca.pem files)"),
    ("self signed certificate", "unknown CA: its certificate is not signed by this party's CA (the two use "
                                "different ca.pem files)"),
    ("certificate signature failure", "unknown CA: its certificate's signature does not verify with this party's CA "
                                      "(the two use different ca.pem files)"),
    ("certificate has expired", "expired certificate: its certificate has expired (sign a new one: "
                                "`verticalfs certs sign`)"),
    ("certificate is not yet valid", "certificate not yet valid (check both hosts' clocks)"),
    ("hostname mismatch", "wrong party name: its certificate does not name the party it was meant to be"),
    ("alert_unknown_ca", "it refused this party's certificate: unknown CA (the two use different ca.pem files)"),
    ("alert_certificate_expired", "it refused this party's certificate: expired (sign a new one)"),
    ("alert_bad_certificate", "it refused this party's certificate (bad certificate: not signed by its CA, or "
                              "not naming this party)"),
    ("alert_certificate_unknown", "it refused this party's certificate (certificate unknown)"),
    ("alert_decrypt_error", "it refused this party's certificate (its signature does not verify: unknown CA)"),
    ("alert_handshake_failure", "it refused the handshake (handshake failure)"),
)


def tls_failure(address: str, server_name: str, tls: TLSFiles, timeout: float = 5.0) -> str | None:
    """Why a TLS handshake with the party ``server_name`` at ``address`` fails, in words (with
    OpenSSL's own text), or ``None`` if it succeeds or nothing answers there.

    gRPC reports a failed handshake only as a channel that never becomes ready; this repeats the
    handshake with Python's :mod:`ssl` and the same files, to say which side refused what: the
    party's certificate not signed by our CA, not naming ``server_name``, or expired; or the party
    refusing ours (its alert arrives with the first read under TLS 1.3).
    """
    import socket
    import ssl

    host, _, port = address.rpartition(":")
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(cafile=str(tls.ca))
        ctx.load_cert_chain(str(tls.cert), str(tls.key))
        ctx.set_alpn_protocols(["h2"])
    except (OSError, ssl.SSLError, ValueError) as exc:
        return f"this party's own TLS files do not load ({exc})"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock, \
                ctx.wrap_socket(sock, server_hostname=server_name) as s:
            s.settimeout(timeout)
            try:
                s.recv(1)  # the server's HTTP/2 preface, or its alert refusing our certificate
            except TimeoutError:
                return None
    except ssl.SSLCertVerificationError as exc:
        text = str(exc.verify_message or exc)
        return _tls_cause(text, f"{server_name!r}'s certificate: {text}")
    except ssl.SSLError as exc:
        text = str(exc.reason or exc)
        return _tls_cause(text, f"TLS error: {exc}")
    except (OSError, ValueError):
        return None
    return None


def _tls_cause(text: str, fallback: str) -> str:
    low = text.lower()
    for key, cause in _TLS_CAUSES:
        if key in low:
            return f"{cause} [{text}]"
    return fallback


def _remote_error(err: Any, receiver: str, address: str, timeout: float | None = None) -> _exc.VerticalFSError:
    """A gRPC failure as the verticalfs exception the party raised, or a TransportError naming it."""
    grpc = _grpc()
    code, details = err.code(), err.details() or ""
    if code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INTERNAL, grpc.StatusCode.PERMISSION_DENIED,
                grpc.StatusCode.RESOURCE_EXHAUSTED) and ": " in details:
        kind, text = details.split(": ", 1)
        cls = getattr(_exc, kind, None)
        if isinstance(cls, type) and issubclass(cls, _exc.VerticalFSError):
            named = f"party {receiver!r}"
            return cls(text if text.startswith(named) else f"{named}: {text}")
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return TransportError(f"party {receiver!r} at {address} refused the message: {text}")
        return ProtocolError(f"party {receiver!r} failed: {details}")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:  # gRPC's own size limit (no verticalfs error to raise)
        return TransportError(f"party {receiver!r} at {address}: a message over a receiver's size limit "
                              f"(max_message_mb of the receiver's [policy]): {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        within = "the deadline" if timeout is None else f"{timeout:g} s"
        return TransportError(f"party {receiver!r} at {address} did not answer within {within} (call_timeout of "
                              "the deployment file); is it overloaded or hung?")
    low = details.lower()
    if code == grpc.StatusCode.UNAVAILABLE and ("ping" in low or "keepalive" in low):
        return TransportError(f"party {receiver!r} at {address} stopped answering (no reply to keep-alive pings: "
                              f"its process is hung or stopped, or the network to it is cut) ({details})")
    return TransportError(f"party {receiver!r} at {address} is gone or unreachable ({code.name}: {details})")
