"""One feature party as a networked process: its runtime behind a :class:`PartyServer`.

Sessions: every label-holder run (a training run, a ``predict``, a ``serve-model``) carries a
session id that the label holder chooses (``vf-session`` on each call, see
:mod:`.channel`). The party keeps each session's state apart: a session gets its own copy of the
runtime (its aligned rows, its role, its messaging node and peer ledger; the file read at start,
the policy, its PSI counts and the open scoring models are shared), and its own lock, so two runs
proceed side by side and neither resets the other. At most the policy's ``max_sessions`` are kept
at once: a run beyond them is refused before any work with "busy with session X, started at T by
<sender> (<address>)". A session ends with the label holder's ``EndSession``, or is forgotten after
``session_idle_s`` without a message (a label holder that died). Calls without a session id (a
bare channel, e.g. tests and the network benchmark) share the runtime itself, as one session.

Only the first call of a session may start it (``vf-start``): a later call of a session this party
does not know is refused with "has no session ...: it restarted", which the label holder takes as
the party having lost the run's state (it waits for the party and sets the run up again,
:func:`verticalfs.deploy.holder.run_deployment`; ``serve-model`` opens the model again). With
``vf-route`` the label holder says where its run serves a party's block when not at that party's
address (a second run of the label party): the session's messages to that peer go there; only
another port on the peer's own host is accepted.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from verticalfs.exceptions import ProtocolError, TransportError
from verticalfs.names import LABEL_HOLDER
from verticalfs.transport.grpc.channel import GrpcChannel, PartyServer
from verticalfs.transport.grpc.tls import TLSFiles
from verticalfs.transport.ledger import Ledger

if TYPE_CHECKING:
    from verticalfs.party import PartyRuntime

#: sessions a party keeps at once without a policy (the policy's ``max_sessions``)
MAX_SESSIONS = 4
#: seconds without a message after which a session is forgotten (the policy's ``session_idle_s``)
SESSION_IDLE_S = 900.0


@dataclass
class Session:
    """One label-holder run at this party: its runtime, its lock, who started it and when."""

    id: str
    runtime: Any
    by: str
    peer: str
    started: float = field(default_factory=time.time)  # wall clock, for the busy message
    last: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started))
        return f"session {self.id or '(none)'}, started at {when} by {self.by} ({self.peer})"


class NetworkedParty:
    """A :class:`~verticalfs.party.PartyRuntime` listening on ``address``.

    It accepts messages from the label holder and from the other parties named in ``addresses``
    (party-to-party messages, e.g. FEAST's statistical variables, go straight to the peer) and
    records what it sends to peers on its own ledger (the node's metering rule). Its largest
    message, received or as a peer's reply, is the runtime's policy's ``max_message_mb``.
    """

    #: where a run's own block of the label party is reached when not at its address (set by the
    #: run that serves it, :func:`verticalfs.deploy.holder.serve_own_block`); ``None``: at its address
    route: str | None = None

    def __init__(self, runtime: PartyRuntime, address: str, *, tls: TLSFiles | None,
                 addresses: Mapping[str, str] | None = None, peers: Sequence[str] = (), insecure: bool = False,
                 connect_timeout: float = 10.0) -> None:
        from verticalfs.utils.memory import IdleTrimmer, limit_arenas

        limit_arenas()  # before the server's threads: one heap to reuse and to trim (utils/memory.py)
        self.runtime = runtime
        policy = runtime.policy
        self.max_message_bytes = policy.max_message_bytes
        #: gives the memory of a burst of requests back once it is over (utils/memory.py)
        self.trimmer = IdleTrimmer()
        self.ledger = Ledger(compute_rounds=False)  # bounded whatever rounds the headers claim
        self._tls, self._insecure, self._timeout = tls, insecure, connect_timeout
        self.channel: GrpcChannel | None = None
        self.name = runtime.name  # before the server, which names this party (e.g. in the insecure warning)
        self.max_sessions = int(policy.max_sessions)
        self.session_idle_s = float(policy.session_idle_s)
        self.sessions: dict[str, Session] = {}
        self.started = time.time()
        self._sessions_lock = threading.Lock()
        # a worker per session and one for its party-to-party messages, plus one to refuse the next run
        self.server = PartyServer(self, address, tls=tls, peers={LABEL_HOLDER, *peers}, insecure=insecure,
                                  max_message_bytes=self.max_message_bytes,
                                  max_workers=max(4, 2 * self.max_sessions + 1))
        if addresses is not None:
            self.set_addresses(addresses)

    def set_addresses(self, addresses: Mapping[str, str]) -> None:
        """Where the other parties listen (for party-to-party messages)."""
        others = {p: a for p, a in addresses.items() if p != self.name}
        self.server.peers = frozenset({LABEL_HOLDER, *others})
        self.channel = GrpcChannel(self.name, others, tls=self._tls, insecure=self._insecure,
                                   connect_timeout=self._timeout, max_message_bytes=self.max_message_bytes)
        self.runtime.connect(self.channel, self.ledger)

    def receive(self, sender: str, data: bytes) -> bytes | None:
        """One message without a session id (the runtime itself)."""
        return self.receive_in("", sender, data, "")

    def receive_in(self, session: str, sender: str, data: bytes, peer: str, *, start: bool = True,
                   route: str = "") -> bytes | None:
        """One message of ``session`` (the :class:`PartyServer` calls this, unlocked). ``start``: the
        label holder's first message of the session (a later one for a session this party does not
        know means it lost the session's state: restarted, or forgot it after ``session_idle_s``);
        ``route``: ``"party=host:port,..."``, where this session's run serves a party's block."""
        s = self._session(session, sender, peer, start, route)
        try:
            with s.lock:
                s.last = time.monotonic()
                node = s.runtime.node
                if node is None:  # the server starts after set_addresses(), which connects the runtime
                    raise RuntimeError("set_addresses() first")
                reply: bytes | None = node.receive(sender, data)
                s.last = time.monotonic()
                if s.runtime.session_over:
                    self._end(s)
                return reply
        finally:
            self.trimmer.touch()

    def _session(self, sid: str, sender: str, peer: str, start: bool = True, route: str = "") -> Session:
        """The session ``sid``, started now if the label holder asks and there is room."""
        with self._sessions_lock:
            s = self.sessions.get(sid)
            if s is not None:
                return s
            if sid and sender != LABEL_HOLDER:  # a peer's message belongs to a run the label holder started here
                raise ProtocolError(f"party {self.name!r} has no session {sid!r} (a message from {sender!r}); "
                                    "only the label holder starts one")
            if sid and not start:  # its state (alignment, role, open models' rows) is gone: say so, not "no Join"
                raise TransportError(f"party {self.name!r} has no session {sid!r}: it restarted (started at "
                                     f"{time.strftime('%H:%M:%S', time.localtime(self.started))}) or forgot the "
                                     f"session (session_idle_s = {self.session_idle_s:g}) since the run began; the "
                                     "run's state at this party is lost")
            now = time.monotonic()
            for old in [o for o in self.sessions.values() if now - o.last > self.session_idle_s]:
                if not old.lock.locked():
                    self._log(f"forgets {old.describe()}: no message for {now - old.last:.0f} s "
                              f"(session_idle_s = {self.session_idle_s:g})")
                    del self.sessions[old.id]
            if len(self.sessions) >= self.max_sessions:
                held = "; ".join(o.describe() for o in sorted(self.sessions.values(), key=lambda o: o.started))
                self._log(f"refuses session {sid!r} of {sender} ({peer}): busy")
                raise TransportError(f"party {self.name!r} is busy with {held}; it serves at most "
                                     f"{self.max_sessions} session(s) at once (max_sessions of its [policy]): run "
                                     "again when that run has ended")
            s = Session(sid, self._runtime_for(sid, self._routes(route)), sender, peer)
            self.sessions[sid] = s
            return s

    def _routes(self, route: str) -> dict[str, str]:
        """The label holder's ``vf-route``: a peer's block served elsewhere for this session, on the
        same host as its address in the deployment file (only the port may differ: its certificate
        is checked as always)."""
        out: dict[str, str] = {}
        known = self.channel.addresses if self.channel is not None else {}
        for item in filter(None, route.split(",")):
            party, _, addr = item.partition("=")
            if party == self.name:  # (where this very block is served)
                continue
            if party not in known or addr.rpartition(":")[0] != known[party].rpartition(":")[0] or \
                    not addr.rpartition(":")[2].isdigit():
                raise ProtocolError(f"party {self.name!r} refuses the route {item!r}: only another port on the "
                                    f"host of a known peer's address ({known.get(party, 'none')})")
            out[party] = addr
        return out

    def _runtime_for(self, sid: str, routes: dict[str, str] | None = None) -> Any:
        base = self.runtime
        if not sid:
            base.session_over = False
            return base
        rt = base.fork()  # the file read at start, the policy, the scoring models: shared
        if self.channel is None:
            raise RuntimeError("set_addresses() first")
        rt.connect(self.channel.for_session(sid, routes), Ledger(compute_rounds=False))
        return rt

    def session_table(self) -> tuple[list[dict[str, Any]], int]:
        """The sessions kept now (``id``, ``started`` as UTC ISO time, ``idle_s``; sessions already
        over left out) and the most kept at once: what a status query reports."""
        now = time.monotonic()
        with self._sessions_lock:
            kept = [s for s in self.sessions.values() if not s.runtime.session_over]
        rows = [{"id": s.id or "(none)", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s.started)),
                 "idle_s": round(now - s.last, 1)} for s in sorted(kept, key=lambda s: s.started)]
        return rows, self.max_sessions

    def _end(self, s: Session) -> None:
        with self._sessions_lock:
            if self.sessions.get(s.id) is s:
                del self.sessions[s.id]

    def _log(self, text: str) -> None:
        sys.stderr.write(f"party {self.name}: {text}\n")
        sys.stderr.flush()

    def start(self) -> NetworkedParty:
        if self.runtime.node is None:
            raise RuntimeError("set_addresses() first")
        self.server.start()
        self.trimmer.start()
        return self

    def stop(self) -> None:
        self.trimmer.stop()
        self.server.stop()
        if self.channel is not None:
            self.channel.close()
