"""Private set intersection of the parties' ids: two ECDH-PSI engines behind the same functions.

Before training, the label holder and each feature party align their rows without showing each
other ids outside the intersection. Two engines speak the same idea (each side raises the hashed
ids to a secret exponent; ``H(x)^ab = H(y)^ba`` only when ``x = y``):

- ``"ristretto255"`` (the default where installed): ECDH over the ristretto255 group of libsodium
  (through ``rbcl``, MIT, which bundles libsodium: PyNaCl does not expose ristretto255). The ids are
  hashed to the group by ``crypto_core_ristretto255_from_hash`` of a domain-separated SHA-512 and
  blinded by ``crypto_scalarmult_ristretto255`` with a secret scalar from the OS entropy (libsodium's
  ``crypto_core_ristretto255_scalar_random``); nothing of the group arithmetic is ours. Streamed in
  chunks (:class:`PsiOpen`, then one :class:`PsiChunk` / :class:`PsiChunkReply` per chunk), with
  the scalar multiplications spread over worker threads on both sides, so memory stays bounded
  (the label holder keeps 16 bytes per id of either side, the party nothing per id beyond a
  permutation) and both sides compute at once.
- ``"openmined"``: OpenMined's ``openmined-psi`` (Apache-2.0; P-256), one request and one reply
  (:class:`PsiRequest`, :class:`PsiReply`), each side on one core.

What each side learns is the same with either engine: the label holder, as *client*, learns which of
*its* ids the party holds and how many ids the party has; the party learns only how many ids the
label holder has. The party's blinded ids reach the label holder in a random order (OS entropy),
so where a matching id sits in the party's file does not leak. Every message is a verticalfs
message (phase ``setup``), so its bytes are on the ledger, and every value decoded from the peer is
checked (lengths, counts, valid group encodings) before use.

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

Choose the engine with ``engine=`` (``"auto"``: ristretto255 if ``rbcl`` is installed, else
openmined-psi) or the deployment file's ``psi_engine``; a party answers either.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import io
import json
import math
import os
import secrets
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from verticalfs.exceptions import ConfigError, ProtocolError, TransportError
from verticalfs.transport.messages import At, message

#: false-positive rate of the server's setup (RAW: exact, no Bloom filter)
FPR = 1e-9
SETUP = At("setup")

#: the engines, in order of preference for ``"auto"``
ENGINES = ("ristretto255", "openmined")
#: what to install for each engine
INSTALL = {"ristretto255": "pip install rbcl", "openmined": "pip install openmined-psi"}
#: blinded ids per streamed chunk (the label holder's choice; a party caps it at MAX_CHUNK): 512 KiB
#: requests and 1 MiB replies, small enough for both sides to overlap their work chunk by chunk
CHUNK = 16_384
MAX_CHUNK = 1 << 18
#: the most ids one side may declare (a count from the peer above it is refused)
MAX_IDS = 1 << 32
#: group element size, and the bytes of each double-blinded element the label holder compares
POINT = 32
DIGEST = 16
#: hash-to-group domain: SHA-512(DOMAIN || utf-8 id) -> crypto_core_ristretto255_from_hash
DOMAIN = b"verticalfs/psi/ristretto255/v1\x00"


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


@message("core.PsiOpen")
class PsiOpen:
    """Label holder -> party: a streamed PSI over ``group`` (``"ristretto255"``) of ``n`` ids, in
    chunks of at most ``chunk`` blinded ids."""

    group: str
    n: int
    chunk: int


@message("core.PsiOpened")
class PsiOpened:
    """Party -> label holder: its id count and the chunk size it accepts (at most the one asked)."""

    n: int
    chunk: int


@message("core.PsiChunk")
class PsiChunk:
    """Label holder -> party: chunk ``index`` of its blinded ids (32 bytes each; empty once all are
    sent, while the party's own chunks are still due)."""

    index: int
    points: bytes


@message("core.PsiChunkReply")
class PsiChunkReply:
    """Party -> label holder: the chunk's ids blinded again by the party's scalar (same order), and
    the next chunk of the party's own blinded ids (empty once all are sent)."""

    points: bytes
    own: bytes


PSI_OPENS = (PsiRequest, PsiOpen)  # the requests a party's policy counts
PSI_KINDS = (PsiRequest, PsiOpen, PsiChunk)  # every request a party answers for PSI


@message("core.IdsDigestRequest")
class IdsDigestRequest:
    """Label holder -> party, phase ``setup``: the digest of your ids (of your scoring file with
    ``scoring``), to reuse an earlier PSI result while they are unchanged."""

    scoring: bool = False


@message("core.IdsDigest")
class IdsDigest:
    """Party -> label holder: HMAC-SHA256 of its id set under a secret of its own (hex)."""

    digest: str


def _hashes(ids: Sequence, step: int = 1 << 16) -> np.ndarray:
    """A 64-bit hash per id (as text), vectorised (pandas' SipHash with its fixed key); a numpy
    ``str`` array is hashed a slice at a time (its Python strings exist a slice at a time)."""
    import pandas as pd

    if isinstance(ids, np.ndarray) and ids.dtype.kind in "US":
        out = np.empty(len(ids), dtype=np.uint64)
        for a in range(0, len(ids), step):  # (UTF-8 bytes, the ray engine's ids: hashed as their text)
            part = ids[a:a + step] if ids.dtype.kind == "U" else np.char.decode(ids[a:a + step], "utf-8")
            out[a:a + step] = pd.util.hash_array(part.astype(object))
        return out
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

    ids: list[str]  # a numpy str array when the ids were given as one (intersect_all's text_array)
    seconds: float
    cached: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------ engines
def _psi():
    try:
        import private_set_intersection.python as psi
    except ImportError:  # pragma: no cover - the deploy extra
        raise ConfigError("private set intersection needs openmined-psi: pip install 'verticalfs[deploy]'") from None
    return psi


def _rbcl():
    try:
        import rbcl
    except ImportError:  # pragma: no cover - the deploy extra
        raise ConfigError("the ristretto255 PSI engine needs rbcl (libsodium): pip install 'verticalfs[deploy]' "
                          "or pip install rbcl; or choose psi_engine = \"openmined\"") from None
    _forget_extracted_library()
    return rbcl


def _forget_extracted_library() -> None:
    """Remove the copy of libsodium that rbcl's import writes to the temporary directory.

    rbcl 1.1 writes its bundled libsodium (2.8 MB) to a new ``tempfile.NamedTemporaryFile(delete=False)``
    on every import and loads it from there, and never removes it: every party process, CLI run and
    test worker that used the ristretto255 engine left one in ``/tmp`` (1.8 GB of them on our
    development machine in a day). The library is mapped by then, so on POSIX the file can be
    unlinked at once (the mapping stays valid); on Windows a loaded DLL cannot be removed and the
    file is left, as rbcl leaves it."""
    mod = sys.modules.get("rbcl._sodium")
    path = getattr(mod, "lib_path", None)
    if not isinstance(path, str) or os.name != "posix":
        return
    try:
        os.unlink(path)
    except FileNotFoundError:  # already removed (a second import of the module returns the same one)
        pass
    mod.lib_path = None  # type: ignore[union-attr]


def installed(engine: str) -> bool:
    """Whether ``engine``'s library is installed here (found, not imported: importing rbcl has a cost)."""
    module = "rbcl" if engine == "ristretto255" else "private_set_intersection"
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def resolve_engine(engine: str | None = None) -> str:
    """``engine`` checked (``None`` or ``"auto"``: the first installed of :data:`ENGINES`)."""
    if engine is None or engine == "auto":
        for e in ENGINES:
            if installed(e):
                return e
        raise ConfigError("private set intersection needs rbcl or openmined-psi: pip install 'verticalfs[deploy]'")
    if engine not in ENGINES:
        raise ConfigError(f"unknown PSI engine {engine!r}; choose one of {list(ENGINES)} or \"auto\"")
    if not installed(engine):
        raise ConfigError(f"the PSI engine {engine!r} is not installed: {INSTALL[engine]} (or pip install "
                          "'verticalfs[deploy]'), or choose psi_engine = \"auto\"")
    return engine


def _as_text(ids) -> list[str]:
    return [i.decode("utf-8") if isinstance(i, bytes) else str(i) for i in ids]


# ------------------------------------------------------------------ ristretto255 primitives
def _utf8(i) -> bytes:
    """An id's UTF-8 bytes: ``bytes`` (a numpy ``S`` element: the ray engine's fixed-width ids) as
    they are, anything else as its text."""
    return i if isinstance(i, bytes) else str(i).encode()


def hash_to_group(ids) -> list[bytes]:
    """Each id (as text) mapped to ristretto255: from_hash(SHA-512(DOMAIN || utf-8 id))."""
    rb = _rbcl()
    from_hash, sha = rb.crypto_core_ristretto255_from_hash, hashlib.sha512
    return [from_hash(sha(DOMAIN + _utf8(i)).digest()) for i in ids]


def blind_ids(key: bytes, ids) -> bytes:
    """``ids`` hashed to the group and multiplied by ``key``: 32 bytes each, concatenated."""
    rb = _rbcl()
    mul, from_hash, sha = rb.crypto_scalarmult_ristretto255, rb.crypto_core_ristretto255_from_hash, hashlib.sha512
    return b"".join([mul(key, from_hash(sha(DOMAIN + _utf8(i)).digest())) for i in ids])


def reblind_points(key: bytes, points: bytes, keep: int = POINT, first: int = 0) -> bytes:
    """Each 32-byte encoding in ``points`` multiplied by ``key`` (the first ``keep`` bytes of each
    product kept). An encoding that is not a ristretto255 element raises ``ValueError`` naming its
    position (``first``: the position of the first)."""
    mul = _rbcl().crypto_scalarmult_ristretto255
    out = []
    for k in range(0, len(points), POINT):
        try:
            out.append(mul(key, points[k:k + POINT])[:keep])
        except RuntimeError:  # libsodium refuses a non-canonical or invalid encoding (or the identity)
            raise ValueError(f"element {first + k // POINT} is not a valid ristretto255 encoding") from None
    return b"".join(out)


def _workers(workers: int | None) -> int:
    return max(1, int(workers if workers is not None else os.environ.get("VERTICALFS_PSI_WORKERS", 0)
                      or min(2, os.cpu_count() or 1)))


def _executor(workers: int, parallel: str) -> Executor:
    if parallel == "processes":
        import multiprocessing

        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    if parallel == "ray":  # the party's Ray cluster (verticalfs.engine.ray): each shard of a chunk a task
        from verticalfs.engine.ray import RayExecutor

        return RayExecutor()
    if parallel != "threads":
        raise ConfigError(f"parallel must be 'threads', 'processes' or 'ray', not {parallel!r}")
    return ThreadPoolExecutor(workers, thread_name_prefix="psi")  # libsodium runs without the GIL (ctypes)


def _spread(pool: Executor, workers: int, fn, key: bytes, items, step: int = 1, keep: int = POINT
            ) -> list[Future]:
    """``fn(key, part)`` over ``workers`` parts of ``items``: ids (``step`` 1), or the 32-byte
    elements of a ``bytes`` (``step`` 32; ``fn`` is :func:`reblind_points`, keeping ``keep`` bytes)."""
    n = len(items) // step
    per = max(1, math.ceil(n / workers))
    if step == 1:
        return [pool.submit(fn, key, items[i:i + per]) for i in range(0, max(n, 1), per)]
    return [pool.submit(fn, key, items[i * step:(i + per) * step], keep, i) for i in range(0, max(n, 1), per)]


def _joined(futures: list[Future]) -> bytes:
    return b"".join(f.result() for f in futures)


def _check_points(blob, what: str, most: int) -> int:
    """The number of 32-byte elements in the peer's ``blob`` (bytes, a multiple of 32, at most ``most``)."""
    if not isinstance(blob, bytes) or len(blob) % POINT:
        raise TransportError(f"{what}: {type(blob).__name__} of {len(blob) if isinstance(blob, bytes) else '?'} "
                             f"bytes is not a sequence of {POINT}-byte group elements")
    k = len(blob) // POINT
    if k > most:
        raise TransportError(f"{what}: {k} elements where at most {most} are due")
    return k


def _count(v, what: str, hi: int) -> int:
    if type(v) is not int or not 0 <= v <= hi:
        raise TransportError(f"{what} is {v!r}, not a count in [0, {hi}]")
    return v


class StreamServer:
    """The party's side of one streamed ristretto255 PSI (a fresh scalar per :class:`PsiOpen`)."""

    def __init__(self, ids: Sequence, msg: PsiOpen, *, workers: int | None = None, parallel: str = "threads") -> None:
        if msg.group != "ristretto255":
            raise TransportError(f"PSI over group {msg.group!r} is not supported (ristretto255 is)")
        self.n_peer = _count(msg.n, "PsiOpen.n", MAX_IDS)
        self.chunk = min(_count(msg.chunk, "PsiOpen.chunk", 1 << 62), MAX_CHUNK)
        if self.chunk < 1:
            raise TransportError("PsiOpen.chunk is 0")
        rb = _rbcl()
        self.ids = ids
        self._key = rb.crypto_core_ristretto255_scalar_random()  # libsodium's randombytes (OS entropy)
        # the order in which the party's blinded ids go out: a uniform permutation from OS entropy
        self._order = np.argsort(np.frombuffer(os.urandom(8 * len(ids)), dtype=np.uint64), kind="stable")
        self.workers = _workers(workers)
        self._pool = _executor(self.workers, parallel)
        self.index = self.received = self.sent = 0
        self._lock = threading.Lock()
        self._ahead = self._own(0)

    def _own(self, start: int) -> list[Future]:
        part = self._order[start:start + self.chunk]
        if not len(part):
            return []
        sel = [self.ids[int(i)] for i in part] if not isinstance(self.ids, np.ndarray) else self.ids[part]
        return _spread(self._pool, self.workers, blind_ids, self._key, sel)

    def opened(self) -> PsiOpened:
        return PsiOpened(n=len(self.ids), chunk=self.chunk)

    def reply(self, msg: PsiChunk) -> PsiChunkReply:
        with self._lock:
            if type(msg.index) is not int or msg.index != self.index:
                raise TransportError(f"PSI chunk {msg.index!r} arrived where chunk {self.index} is due")
            k = _check_points(msg.points, f"PSI chunk {self.index}", min(self.chunk, self.n_peer - self.received))
            try:
                again = _joined(_spread(self._pool, self.workers, reblind_points, self._key, msg.points, POINT))
            except ValueError as exc:
                raise TransportError(f"malformed PSI chunk {self.index}: {exc}") from None
            own = _joined(self._ahead)
            self.sent += len(own) // POINT
            self._ahead = self._own(self.sent)
            self.index += 1
            self.received += k
            if self.received >= self.n_peer and self.sent >= len(self.ids):
                self.close()
            return PsiChunkReply(points=again, own=own)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class PsiParty:
    """A party's answers to PSI requests of either engine, over its ``ids`` (it keeps the state of
    one streamed intersection at a time: a new :class:`PsiOpen` replaces it)."""

    def __init__(self, ids: Sequence, *, workers: int | None = None, parallel: str = "threads") -> None:
        self.ids = ids
        self.workers, self.parallel = workers, parallel
        self._stream: StreamServer | None = None

    def reply(self, msg: Any) -> Any:
        t = type(msg)
        if t is PsiRequest:
            return PsiServer(self.ids).reply(msg)
        if t is PsiOpen:
            if self._stream is not None:
                self._stream.close()
            self._stream = StreamServer(self.ids, msg, workers=self.workers, parallel=self.parallel)
            return self._stream.opened()
        if t is PsiChunk:
            if self._stream is None:
                raise TransportError("a PSI chunk arrived before PsiOpen")
            return self._stream.reply(msg)
        raise TransportError(f"{t.__name__} is not a PSI request")


def _intersect_stream(proxy, ids: Sequence, *, chunk: int = CHUNK, workers: int | None = None,
                      parallel: str = "threads") -> np.ndarray:
    """The label holder's side of a streamed ristretto255 PSI with one party."""
    rb = _rbcl()
    key = rb.crypto_core_ristretto255_scalar_random()
    n = len(ids)
    who = f"party {getattr(proxy, 'name', '?')!r}"
    opened = proxy.request(PsiOpen(group="ristretto255", n=n, chunk=int(chunk)), SETUP, expect=PsiOpened)
    n_party = _count(opened.n, f"{who}'s PsiOpened.n", MAX_IDS)
    c = _count(opened.chunk, f"{who}'s PsiOpened.chunk", chunk)
    if c < 1:
        raise TransportError(f"{who} accepts chunks of 0 ids")
    rounds = max(math.ceil(n / c), math.ceil(n_party / c))
    mine = np.zeros((n, DIGEST), np.uint8)
    theirs = np.zeros((n_party, DIGEST), np.uint8)
    w = _workers(workers)
    pool = _executor(w, parallel)
    try:
        def blind(i):
            return _spread(pool, w, blind_ids, key, ids[i * c:(i + 1) * c]) if i * c < n else []

        ahead = [blind(0), blind(1)]
        again: list[tuple[int, list[Future]]] = []
        got = 0
        for i in range(rounds):
            pts = _joined(ahead.pop(0))
            ahead.append(blind(i + 2))
            reply = proxy.request(PsiChunk(index=i, points=pts), SETUP, expect=PsiChunkReply)
            k = len(pts) // POINT
            if _check_points(reply.points, f"{who}'s PSI reply {i}", k) != k:
                raise TransportError(f"{who}'s PSI reply {i} has {len(reply.points) // POINT} elements for {k} sent")
            if k:
                mine[i * c:i * c + k] = np.frombuffer(reply.points, np.uint8).reshape(k, POINT)[:, :DIGEST]
            due = min(c, n_party - got)
            if _check_points(reply.own, f"{who}'s PSI reply {i}", due) != due:
                raise TransportError(f"{who}'s PSI reply {i} carries {len(reply.own) // POINT} of its ids where "
                                     f"{due} are due")
            if due:
                again.append((got, _spread(pool, w, reblind_points, key, reply.own, POINT, keep=DIGEST)))
                got += due
            while again and (len(again) > 2 or all(f.done() for f in again[0][1])):  # a few chunks in memory
                _store(theirs, *again.pop(0), who)
        for start, fs in again:
            _store(theirs, start, fs, who)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return _members(mine, theirs)


def _store(theirs: np.ndarray, start: int, futures: list[Future], who: str) -> None:
    try:
        blob = _joined(futures)
    except ValueError as exc:
        raise TransportError(f"{who} sent a malformed PSI reply: {exc}") from None
    k = len(blob) // DIGEST
    theirs[start:start + k] = np.frombuffer(blob, np.uint8).reshape(k, DIGEST)


def _members(mine: np.ndarray, theirs: np.ndarray, block: int = 1 << 20) -> np.ndarray:
    """Positions of the rows of ``mine`` that are rows of ``theirs`` (16-byte values): ``theirs``
    sorted in place, ``mine`` searched in it a block at a time (no copy of either side)."""
    if not len(mine) or not len(theirs):
        return np.zeros(0, np.int64)
    a = mine.view(f"S{DIGEST}").ravel()
    b = theirs.view(f"S{DIGEST}").ravel()
    b.sort()
    hits = [np.zeros(0, np.int64)]
    for s in range(0, len(a), block):
        part = a[s:s + block]
        pos = np.minimum(np.searchsorted(b, part), len(b) - 1)
        hits.append(np.flatnonzero(b[pos] == part) + s)
    return np.concatenate(hits)


# ------------------------------------------------------------------------------ openmined-psi
class PsiServer:
    """The party's side with openmined-psi: answers :class:`PsiRequest` with its own ids (a fresh key per run)."""

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


def _intersect_openmined(proxy, ids: Sequence) -> np.ndarray:
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


def intersect_with(proxy, ids: Sequence, *, engine: str | None = None, chunk: int = CHUNK,
                   workers: int | None = None, parallel: str = "threads") -> np.ndarray:
    """The label holder's side with one party (``proxy``): the sorted indices into ``ids`` of those
    the party holds. ``engine``: see :func:`resolve_engine`; ``chunk``, ``workers`` (default: the
    cores, at most 2; ``$VERTICALFS_PSI_WORKERS``) and ``parallel`` (``"threads"`` or
    ``"processes"``) are the ristretto255 engine's."""
    if resolve_engine(engine) == "openmined":
        return _intersect_openmined(proxy, ids)
    return _intersect_stream(proxy, ids, chunk=chunk, workers=workers, parallel=parallel)


def intersect(proxies: Sequence, ids: Sequence, *, cache: PsiCache | None = None, engine: str | None = None,
              **kw: Any) -> list[str]:
    """The ids (as text) that the label holder and every party behind ``proxies`` hold, in the
    label holder's order (see the module docstring for what each learns)."""
    return intersect_all(proxies, ids, cache=cache, engine=engine, **kw).ids


def intersect_all(proxies: Sequence, ids: Sequence, *, cache: PsiCache | None = None,
                  concurrent: bool = True, engine: str | None = None, text_array: bool = False,
                  **kw: Any) -> Intersection:
    """:func:`intersect` with its wall time and which parties' results came from ``cache``: PSI with
    every party not cached at once (``concurrent``; one thread each), the results cached. ``engine``
    and ``kw``: see :func:`intersect_with`. ``text_array``: the ids are kept, and the result given, as a
    numpy ``str`` array (a few bytes an id, not a Python string each: the label holder of a million
    rows), checked unique by sorting."""
    t0 = time.perf_counter()
    if text_array:
        current = np.asarray(ids)
        if current.dtype.kind != "U":
            current = current.astype(str)
        s = np.sort(current)
        unique = not (s[1:] == s[:-1]).any()
        del s
    else:
        current = _as_text(ids)
        unique = len(set(current)) == len(current)
    if not unique:
        raise ConfigError("the label holder's ids are not unique; PSI needs one row per id")
    engine = resolve_engine(engine)
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
            runs = {p.name: pool.submit(intersect_with, p, current, engine=engine, **kw) for p in todo}
            found.update({name: f.result() for name, f in runs.items()})
    else:
        found.update({p.name: intersect_with(p, current, engine=engine, **kw) for p in todo})
    if cache is not None:
        for p in todo:
            if p.name in digests:
                cache.put(mine, p.name, digests[p.name], peers, found[p.name])
    keep = np.ones(len(current), dtype=bool)
    for idx in found.values():
        held = np.zeros(len(current), dtype=bool)
        held[idx] = True
        keep &= held
    common = current[np.flatnonzero(keep)] if text_array else [current[i] for i in np.flatnonzero(keep)]
    return Intersection(ids=common, seconds=time.perf_counter() - t0, cached=cached)


def answer(msg: Any, ids: Sequence, secret: bytes, *, party: str, psi: PsiParty | None = None) -> Any:
    """A party's answer to a PSI message over its ``ids`` (:class:`IdsDigestRequest`, or any of
    :data:`PSI_KINDS` through ``psi``, the party's :class:`PsiParty`, which keeps a streamed run's state)."""
    if type(msg) is IdsDigestRequest:
        return IdsDigest(digest=ids_digest(ids, secret))
    if isinstance(msg, PSI_KINDS):
        return (psi or PsiParty(ids)).reply(msg)
    raise TransportError(f"party {party!r}: unexpected {type(msg).__name__} during PSI")


def private_intersection(holder_ids: Sequence, party_ids: Mapping[str, Sequence], *,
                         cache: PsiCache | None = None, secrets_: Mapping[str, bytes] | None = None,
                         engine: str | None = None, **kw: Any) -> tuple[list[str], object]:
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
        party = PsiParty(ids)

        def handle(sender, msg, at, node, ids=ids, secret=secret, name=name, psi=party):
            if sender != LABEL_HOLDER:
                raise TransportError(f"unexpected {type(msg).__name__} from {sender!r} during PSI")
            return answer(msg, ids, secret, party=name, psi=psi)

        channel.register(Node(name, channel, Ledger(), handle))
    holder = Node(LABEL_HOLDER, channel, ledger)
    channel.register(holder)
    out = intersect_all([PartyProxy(holder, p) for p in party_ids], holder_ids, cache=cache, concurrent=False,
                        engine=engine, **kw)
    return out.ids, ledger
