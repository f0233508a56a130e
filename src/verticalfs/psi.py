"""Private set intersection of the parties' ids (ECDH-PSI, OpenMined's ``openmined-psi``).

Before training, the label holder and each feature party align their rows without showing each
other ids outside the intersection. The protocol is OpenMined's ECDH-PSI (Apache-2.0, the
``deploy`` extra): the label holder, as PSI *client*, sends its ids hashed and blinded with its
secret key; the party, as *server*, re-blinds them with its own key and returns them with its own
blinded ids; the label holder unblinds and learns which of *its* ids the party holds, and nothing
else; the party learns only how many ids the label holder has. Both messages are verticalfs messages
(phase ``setup``), so their bytes are on the ledger.

With several parties the label holder runs PSI with all of them at once (one thread each, so the
set-up costs the slowest party, not the sum): it learns its intersection with each party, and every
feature party learns how many ids the label holder has. The intersection of those is what every
party aligns on; no feature party learns another party's ids.

PSI once (:class:`PsiCache`): before PSI the label holder asks each party for the *digest* of its
ids (:class:`IdsDigestRequest`): a keyed hash (HMAC-SHA256 with a secret the party keeps in its own
working folder) of its id set, which tells whether the set changed and nothing about the ids. The
label holder keeps each party's PSI result in its own working folder, keyed by the digest of its
own ids (in order), the party's name and digest, and the set of parties of the run; a later run, a
``--resume`` or a prediction on the same files takes the result from there, and a changed file (a
new digest) runs PSI again. A cache file holds positions in the label holder's own ids of those the
party holds (what PSI revealed to it, nothing more), written atomically, readable by its owner only.

The engine (openmined-psi's ECDH) is behind :class:`PsiServer` and :func:`intersect_with` (the
party's and the label holder's side of one exchange): another engine plugs in there.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from verticalfs.exceptions import ConfigError, ProtocolError, TransportError
from verticalfs.transport.messages import At, message

#: false-positive rate of the server's setup (RAW: exact, no Bloom filter)
FPR = 1e-9
SETUP = At("setup")


@message("core.PsiRequest")
class PsiRequest:
    """Label holder -> party: its blinded ids (an openmined-psi ``Request``) and their count."""

    request: bytes
    n: int


@message("core.PsiReply")
class PsiReply:
    """Party -> label holder: its blinded ids (``ServerSetup``) and the re-blinded request (``Response``)."""

    setup: bytes
    response: bytes


@message("core.IdsDigestRequest")
class IdsDigestRequest:
    """Label holder -> party, phase ``setup``: the digest of your ids (of your scoring file with
    ``scoring``), to reuse an earlier PSI result while they are unchanged."""

    scoring: bool = False


@message("core.IdsDigest")
class IdsDigest:
    """Party -> label holder: HMAC-SHA256 of its id set under a secret of its own (hex)."""

    digest: str


def _hashes(ids: Sequence) -> np.ndarray:
    """A 64-bit hash per id (as text), vectorised (pandas' SipHash with its fixed key)."""
    import pandas as pd

    return pd.util.hash_array(np.asarray(_as_text(ids), dtype=object))


def ids_digest(ids: Sequence, secret: bytes) -> str:
    """The digest of an id *set* (order-free) under ``secret``: what a party answers :class:`IdsDigestRequest` with."""
    return hmac.new(secret, np.sort(_hashes(ids)).tobytes(), hashlib.sha256).hexdigest()


def holder_digest(ids: Sequence) -> str:
    """The digest of the label holder's ids *in order* (a cached result holds positions in them)."""
    return hashlib.sha256(_hashes(ids).tobytes()).hexdigest()


def party_secret(folder: str | Path | None) -> bytes:
    """The party's digest secret: ``psi.key`` in its working ``folder`` (made on first use, mode
    0600), or a fresh one for this process without a folder (then nothing is reused across runs)."""
    if folder is None:
        return secrets.token_bytes(32)
    from verticalfs.utils.io import write_bytes_atomic

    path = Path(folder) / "psi.key"
    if not path.is_file():
        Path(folder).mkdir(parents=True, exist_ok=True, mode=0o700)
        write_bytes_atomic(path, secrets.token_bytes(32).hex().encode(), mode=0o600)
    return bytes.fromhex(path.read_text().strip())


class PsiCache:
    """The label holder's PSI results, one file per party and key, in ``folder`` (see the module docstring)."""

    VERSION = "psi-cache/1"

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def _path(self, holder: str, party: str, digest: str, peers: Sequence[str]) -> Path:
        key = json.dumps([self.VERSION, holder, party, digest, sorted(peers)])
        return self.folder / f"{party}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.npy"

    def get(self, holder: str, party: str, digest: str, peers: Sequence[str], n: int) -> np.ndarray | None:
        path = self._path(holder, party, digest, peers)
        try:
            idx = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            return None
        if idx.dtype != np.int64 or idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= n)):
            return None  # not one of ours: PSI again
        return idx

    def put(self, holder: str, party: str, digest: str, peers: Sequence[str], idx: np.ndarray) -> None:
        from verticalfs.utils.io import write_bytes_atomic

        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        buf = io.BytesIO()
        np.save(buf, np.asarray(idx, dtype=np.int64), allow_pickle=False)
        write_bytes_atomic(self._path(holder, party, digest, peers), buf.getvalue(), mode=0o600)


@dataclass
class Intersection:
    """The ids every party holds (label holder's order), PSI's wall time, and the parties whose
    result came from the cache."""

    ids: list[str]
    seconds: float
    cached: list[str] = field(default_factory=list)


def _psi():
    try:
        import private_set_intersection.python as psi
    except ImportError:  # pragma: no cover - the deploy extra
        raise ConfigError("private set intersection needs openmined-psi: pip install 'verticalfs[deploy]'") from None
    return psi


def _as_text(ids) -> list[str]:
    return [str(i) for i in ids]


class PsiServer:
    """The party's side: answers :class:`PsiRequest` with its own ids (a fresh key per run)."""

    def __init__(self, ids: Sequence) -> None:
        psi = _psi()
        self.ids = _as_text(ids)
        self._server = psi.server.CreateWithNewKey(True)

    def reply(self, msg: PsiRequest) -> PsiReply:
        psi = _psi()
        if not 0 <= msg.n <= 1 << 32:
            raise TransportError(f"PSI request declares {msg.n} ids")
        try:
            req = psi.Request()
            req.ParseFromString(msg.request)
            if len(req.encrypted_elements) != int(msg.n):  # the count a party's policy bounds is the real one
                raise ValueError(f"it declares {msg.n} ids and holds {len(req.encrypted_elements)}")
            setup = self._server.CreateSetupMessage(FPR, int(msg.n), self.ids, psi.DataStructure.RAW)
            response = self._server.ProcessRequest(req)
        except Exception as exc:  # noqa: BLE001 - another party's bytes: any failure is a TransportError
            raise TransportError(f"malformed PSI request: {exc}") from None
        return PsiReply(setup=setup.SerializeToString(), response=response.SerializeToString())


def intersect_with(proxy, ids: Sequence) -> np.ndarray:
    """The label holder's side with one party (``proxy``): the indices into ``ids`` of those the party holds."""
    psi = _psi()
    items = _as_text(ids)
    client = psi.client.CreateWithNewKey(True)
    req = client.CreateRequest(items)
    reply = proxy.request(PsiRequest(request=req.SerializeToString(), n=len(items)), SETUP, expect=PsiReply)
    try:
        setup = psi.ServerSetup()
        setup.ParseFromString(reply.setup)
        response = psi.Response()
        response.ParseFromString(reply.response)
        idx = client.GetIntersection(setup, response)
    except Exception as exc:  # noqa: BLE001 - another party's bytes
        raise TransportError(f"party {proxy.name!r} sent a malformed PSI reply: {exc}") from None
    return np.unique(np.asarray(idx, dtype=np.int64))


def intersect(proxies: Sequence, ids: Sequence, *, cache: PsiCache | None = None) -> list[str]:
    """The ids (as text) that the label holder and every party behind ``proxies`` hold, in the
    label holder's order (see the module docstring for what each learns)."""
    return intersect_all(proxies, ids, cache=cache).ids


def intersect_all(proxies: Sequence, ids: Sequence, *, cache: PsiCache | None = None,
                  concurrent: bool = True) -> Intersection:
    """:func:`intersect` with its wall time and which parties' results came from ``cache``: PSI with
    every party not cached at once (``concurrent``; one thread each), the results cached."""
    t0 = time.perf_counter()
    current = _as_text(ids)
    if len(set(current)) != len(current):
        raise ConfigError("the label holder's ids are not unique; PSI needs one row per id")
    found: dict[str, np.ndarray] = {}
    digests: dict[str, str] = {}
    peers = [p.name for p in proxies]
    mine = holder_digest(current) if cache is not None else ""
    if cache is not None:
        for proxy in proxies:
            try:
                digests[proxy.name] = str(proxy.request(IdsDigestRequest(), SETUP, expect=IdsDigest).digest)
            except ProtocolError:  # a party of protocol 1.0 has no digest: PSI every time with it
                continue
            hit = cache.get(mine, proxy.name, digests[proxy.name], peers, len(current))
            if hit is not None:
                found[proxy.name] = hit
    cached = list(found)
    todo = [p for p in proxies if p.name not in found]
    if concurrent and len(todo) > 1:
        with ThreadPoolExecutor(len(todo), thread_name_prefix="verticalfs-psi") as pool:
            runs = {p.name: pool.submit(intersect_with, p, current) for p in todo}
            found.update({name: f.result() for name, f in runs.items()})
    else:
        found.update({p.name: intersect_with(p, current) for p in todo})
    if cache is not None:
        for p in todo:
            if p.name in digests:
                cache.put(mine, p.name, digests[p.name], peers, found[p.name])
    keep = np.ones(len(current), dtype=bool)
    for idx in found.values():
        held = np.zeros(len(current), dtype=bool)
        held[idx] = True
        keep &= held
    return Intersection(ids=[current[i] for i in np.flatnonzero(keep)], seconds=time.perf_counter() - t0,
                        cached=cached)


def answer(msg: Any, ids: Sequence, secret: bytes, *, party: str) -> Any:
    """A party's answer to a PSI message over its ``ids`` (:class:`PsiRequest` or :class:`IdsDigestRequest`)."""
    if type(msg) is IdsDigestRequest:
        return IdsDigest(digest=ids_digest(ids, secret))
    if type(msg) is PsiRequest:
        return PsiServer(ids).reply(msg)
    raise TransportError(f"party {party!r}: unexpected {type(msg).__name__} during PSI")


def private_intersection(holder_ids: Sequence, party_ids: Mapping[str, Sequence], *,
                         cache: PsiCache | None = None,
                         secrets_: Mapping[str, bytes] | None = None) -> tuple[list[str], object]:
    """PSI in one process over the metered in-process channel (the same messages as networked;
    the parties one after the other, so that the ledger's order is fixed).

    Returns the intersection (label holder's order) and the ledger of the PSI messages. With
    ``cache`` (and each party's digest secret in ``secrets_``), results are reused as networked.
    """
    from verticalfs.names import LABEL_HOLDER
    from verticalfs.transport.inprocess import InProcessChannel
    from verticalfs.transport.ledger import Ledger
    from verticalfs.transport.node import Node, PartyProxy

    channel, ledger = InProcessChannel(), Ledger()
    for name, ids in party_ids.items():
        secret = (secrets_ or {}).get(name) or os.urandom(32)

        def handle(sender, msg, at, node, ids=ids, secret=secret, name=name):
            if sender != LABEL_HOLDER:
                raise TransportError(f"unexpected {type(msg).__name__} from {sender!r} during PSI")
            return answer(msg, ids, secret, party=name)

        channel.register(Node(name, channel, Ledger(), handle))
    holder = Node(LABEL_HOLDER, channel, ledger)
    channel.register(holder)
    out = intersect_all([PartyProxy(holder, p) for p in party_ids], holder_ids, cache=cache, concurrent=False)
    return out.ids, ledger
