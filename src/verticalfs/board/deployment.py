"""A deployment's parties as the board shows them: asked through the protocol, never read from disk.

The board runs beside the label holder (on the label party's host) and asks every party of the
deployment file, over the same gRPC channel and with the same certificate as the label holder's
runs (the file's TLS material for the identity ``active``):

- whether it answers at all (a :class:`~verticalfs.exceptions.TransportError` names why not: not
  listening, the TLS handshake, a refusal);
- its policy (:class:`~verticalfs.deploy.party.PolicyQuery`, as a run asks it);
- its status (:class:`~verticalfs.deploy.party.StatusQuery`): its version, the rows of its file,
  the sessions of the label holder's runs it keeps and the saved models it has open.

Both questions go in one session of their own (a fresh session id), which the party ends with its
answer: the board takes a session place for the time of one answer. A party busy with as many
sessions as its policy allows refuses it, and the refusal (which names the sessions) is what the
board shows. Nothing else of a party is read: its file, its policy file and its models stay on its
host.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

#: seconds to wait for a party to answer the board (the deployment file's own timeouts are for runs)
CONNECT_TIMEOUT = 3.0
CALL_TIMEOUT = 5.0
#: an answer is reused for this many seconds (a page polls every few seconds)
CACHE_S = 2.0


class DeploymentStatus:
    """The parties of the deployment file ``path`` and their answers (see the module docstring)."""

    def __init__(self, path: str | Path, *, insecure: bool = False) -> None:
        from verticalfs.deploy.config import Deployment
        from verticalfs.names import LABEL_HOLDER

        self.path = Path(path)
        self.dep = Deployment.load(path, insecure=insecure)
        self.dep.check_keys(LABEL_HOLDER)  # the label holder's key, refused now if others may read it
        self._lock = threading.Lock()
        self._cache: tuple[float, dict[str, Any]] | None = None

    def describe(self) -> dict[str, Any]:
        """What the file says (no party asked)."""
        d = self.dep
        return {"file": str(self.path), "label_party": d.label_party, "tls": not d.insecure,
                "parties": [{"name": n, "address": e.address,
                             "role": "label party" if n == d.label_party else "feature party"}
                            for n, e in d.parties.items()]}

    def status(self) -> dict[str, Any]:
        """Every party's answer now (or at most :data:`CACHE_S` seconds ago)."""
        with self._lock:
            if self._cache is not None and time.monotonic() - self._cache[0] < CACHE_S:
                return self._cache[1]
            names = list(self.dep.parties)
            with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
                answers = list(pool.map(self._ask, names))
            out = {"checked": time.time(), "parties": answers}
            self._cache = (time.monotonic(), out)
            return out

    def _ask(self, name: str) -> dict[str, Any]:
        from verticalfs.deploy.holder import new_session
        from verticalfs.deploy.party import PolicyQuery, PolicyReport, StatusQuery, StatusReport
        from verticalfs.exceptions import VerticalFSError
        from verticalfs.federation import SETUP
        from verticalfs.names import LABEL_HOLDER
        from verticalfs.transport.ledger import Ledger
        from verticalfs.transport.node import Node, PartyProxy

        entry = self.dep.party(name)
        out: dict[str, Any] = {"name": name, "address": entry.address, "reachable": False, "error": None,
                               "policy": None, "status": None}
        t0 = time.monotonic()
        channel = None
        try:
            channel = self.dep.channel(LABEL_HOLDER, call_timeout=CALL_TIMEOUT, session=new_session())
            channel.connect_timeout = min(channel.connect_timeout, CONNECT_TIMEOUT)
            channel.setup_timeout = CALL_TIMEOUT  # the queries are set-up calls: never wait without end
            channel.retries = 0
            proxy = PartyProxy(Node(LABEL_HOLDER, channel, Ledger()), name)
            pol = proxy.request(PolicyQuery(), SETUP, expect=PolicyReport)
            out["reachable"] = True
            out["policy"] = {"release_columns": bool(pol.release_columns), "accept_labels": bool(pol.accept_labels),
                             "require_secure": bool(pol.require_secure), "min_key_bits": int(pol.min_key_bits),
                             "methods": [str(m) for m in pol.methods]}
            st = proxy.request(StatusQuery(), SETUP, expect=StatusReport)
            out["status"] = {"version": str(st.version), "rows_in_file": int(st.rows_in_file),
                             "max_sessions": int(st.max_sessions), "models": [str(m) for m in st.models],
                             "sessions": [{"id": str(s.get("id")), "started": str(s.get("started")),
                                           "idle_s": s.get("idle_s")} for s in st.sessions if isinstance(s, dict)]}
        except VerticalFSError as exc:
            out["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())
            out["reachable"] = out["reachable"] or "busy" in str(exc)
        finally:
            if channel is not None:
                channel.close()
        out["seconds"] = round(time.monotonic() - t0, 3)
        return out
