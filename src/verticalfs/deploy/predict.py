"""Using a saved model where the data lives: federated batch prediction and online scoring.

``verticalfs predict --config deployment.toml --model DIR`` and ``verticalfs serve-model`` run at
the label party. ``DIR`` is the label holder's folder of the model (``run --save-model DIR``: its
``manifest.json`` and ``active.pt``); the parties are sent only the model's *name* (``DIR``'s last
component) and each reads its own part from its own model folder (``<model_dir>/<name>/<party>.pt``,
its policy's ``model_dir``). Nothing else of the model, and no path, crosses.

The exchange (every message metered on the ledger)::

    label holder                                 each party of the model
    OpenModel(name, method, sha256)   ------->   reads its part from its own folder (checksum), restores
                                      <-------   its role; indexes its scoring file by id (ModelOpened)
    ScoringPsiOpen/Chunk or ScoringPsi ------>   answers with its scoring file's ids blinded (ECDH-PSI,
      (phase setup; the deployment's psi_engine)  phase setup; counted by its policy's PSI limits)
    StageIds(model, ids, split) (predict) --->   prepares those rows with its saved preprocessing
                                      <-------   IdsStaged(missing positions, file version)
    the method's own inference messages, phase ``predict`` (embeddings of a split model; the
    selected columns of a filter method), naming the split staged

A party keeps several models open by name, and every label-holder session (a ``DeployedModel``)
stages its rows under split names of its own, so that a ``serve-model`` and a nightly ``predict``
against the same parties do not mix rows or models.

A party's *scoring file* is its ``predict_file`` in the deployment file, or its training ``file``
(scoring known ids). It is read once and kept indexed by id; a file whose size or modification time
changed is read again on the next request. A file of at least the deployment's ``stream_above_mb``
is read in pieces and prepared once per open model into a memory-mapped matrix
(:class:`~verticalfs.deploy.scoring.ScoringFile`), as training prepares a large file.

What each side learns: the label holder learns the intersection of the ids (as in training, by
PSI) and what the method sends at inference. It asks the parties only about ids in that
intersection: an id outside it is answered "unknown" by the label holder alone, so no party
learns which unknown ids were asked for, and the label holder learns nothing about a party's ids
beyond PSI. A party learns which of the intersection's ids are scored, and when. If a party's file
changed and an id of the intersection is no longer in it, the party says so (``missing``; the
label holder would learn the same from PSI again) and the id is reported unknown; the label holder
re-runs PSI when a party's file version changes, before its next batch.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from verticalfs.deploy.scoring import (
    PREDICT,
    SETUP,
    IdsStaged,
    ModelOpened,
    OpenModel,
    ScoringPsi,
    ScoringPsiChunk,
    ScoringPsiOpen,
    StageIds,
    scoring_path,
)
from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.names import LABEL_HOLDER
from verticalfs.transport.messages import At
from verticalfs.transport.node import request_all

if TYPE_CHECKING:
    from verticalfs.data.vertical import LabelData
    from verticalfs.deploy.config import Deployment
    from verticalfs.federation import Federation
    from verticalfs.transport.grpc.channel import GrpcChannel
    from verticalfs.transport.node import PartyProxy

# ------------------------------------------------------------------------- label-holder side
#: ids per round to the parties in batch prediction (bounds the size of one message)
BATCH_CHUNK = 100_000


class _PhaseProxy:
    """A party proxy whose ``eval`` messages go at phase ``predict``, and whose PSI requests are
    over the party's scoring file (:class:`ScoringPsi` for openmined-psi, :class:`ScoringPsiOpen`
    and :class:`ScoringPsiChunk` for the streamed ristretto255 engine)."""

    __slots__ = ("name", "_proxy")

    def __init__(self, proxy: PartyProxy) -> None:
        self.name = proxy.name
        self._proxy = proxy

    def _at(self, at: At) -> At:
        return At("predict", at.round, at.step) if at.phase == "eval" else at

    def _rewrite(self, msg: Any, at: At) -> tuple[Any, At]:
        from verticalfs.psi import IdsDigestRequest, PsiChunk, PsiOpen, PsiRequest

        t = type(msg)
        if t is PsiRequest:  # openmined-psi
            msg = ScoringPsi(request=msg.request, n=msg.n)
        elif t is PsiOpen:  # the streamed ristretto255 engine (its replies are PSI's own)
            msg = ScoringPsiOpen(group=msg.group, n=msg.n, chunk=msg.chunk)
        elif t is PsiChunk:
            msg = ScoringPsiChunk(index=msg.index, points=msg.points)
        elif type(msg) is IdsDigestRequest:
            msg = IdsDigestRequest(scoring=True)
        return msg, self._at(at)

    def request(self, msg: Any, at: At, expect: type | tuple[type, ...] | None = None) -> Any:
        msg, at = self._rewrite(msg, at)
        return self._proxy.request(msg, at, expect=expect)

    def send(self, msg: Any, at: At) -> None:
        self._proxy.send(*self._rewrite(msg, at))

    def route(self) -> tuple[Any, str, Callable[[Any, At], tuple[Any, At]]]:
        """For :func:`~verticalfs.transport.node.request_all`: the party's proxy's node, this proxy's rewriting."""
        node, name, _ = self._proxy.route()
        return node, name, self._rewrite


class _PredictFederation:
    """The label holder's federation as a method's ``predict_from_holder`` sees it at inference."""

    def __init__(self, fed: Federation) -> None:
        self._fed = fed
        self._proxies = {p: _PhaseProxy(fed.proxy(p)) for p in fed.party_names}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fed, name)

    def proxy(self, name: str) -> _PhaseProxy:
        try:
            return self._proxies[name]
        except KeyError:
            raise ConfigError(f"no party named {name!r}; parties are {list(self._proxies)}") from None

    @property
    def proxies(self) -> list[_PhaseProxy]:
        return list(self._proxies.values())


@dataclass
class Scores:
    """Scores of a batch: ``ids`` scored (in order), their ``probabilities`` (values for
    regression), ``prediction``, and the ``unknown`` ids (not held by every party)."""

    ids: np.ndarray
    probabilities: np.ndarray | None
    prediction: np.ndarray
    unknown: list[str] = field(default_factory=list)


class DeployedModel:
    """A saved model opened over a deployment, at the label party (see the module docstring).

    Parameters
    ----------
    dep : Deployment
    model_dir : path
        The label holder's folder of the model (its manifest and ``active.pt``); the parties are
        sent its name only.
    call_timeout : float, optional
        Deadline of one per-batch exchange with a party (default: the deployment file's ``call_timeout``).
    expected_sha256 : str, optional
        The manifest's SHA-256 printed when the model was saved: another manifest is refused.
    """

    def __init__(self, dep: Deployment, model_dir: str | Path, *, call_timeout: float | None = None,
                 expected_sha256: str | None = None) -> None:
        from verticalfs.deploy.holder import serve_own_block
        from verticalfs.federation import Federation
        from verticalfs.methods import registry
        from verticalfs.model import read_manifest
        from verticalfs.model_files import load

        self.dep = dep
        model_dir = Path(model_dir)
        self.model_dir = model_dir
        self.name = model_dir.resolve().name
        man = read_manifest(model_dir, expected_sha256=expected_sha256)
        self.manifest = man
        self.parties = list(man["parties"])
        unknown = [p for p in self.parties if p not in dep.parties]
        if unknown:
            raise ConfigError(f"the model in {str(model_dir)!r} was trained with parties {self.parties}; "
                              f"{unknown} are not in {str(dep.path)!r}")
        self.method = registry.get(str(man["method"]))
        holder_path = model_dir / man["label_holder"]["file"]
        holder = load(holder_path, man["label_holder"]["sha256"], "the label holder")
        if holder.get("method") != man["method"]:
            raise ConfigError(f"{str(holder_path)!r} holds a {holder.get('method')!r} model, the manifest says "
                              f"{man['method']!r}; the folder was changed after saving (save the model again)")
        self.holder = holder
        self.task, self.n_classes = holder["task"], int(holder["n_classes"])
        self.classes = list(holder["class_names"] or [str(i) for i in range(self.n_classes)])
        self._class_names = holder["class_names"] or None
        lp = dep.label_party
        dep.check_keys(LABEL_HOLDER, lp)
        self.local = None
        self.channel = None
        self.fed: Any = None  # the label holder's federation, once the parties are reached
        self._lock = threading.Lock()
        self._session = secrets.token_hex(6)  # this session at the parties, and its staged splits' names
        try:
            if lp in self.parties:
                self.local = serve_own_block(dep)
            self.channel = dep.channel(call_timeout=call_timeout, session=self._session)
            if self.local is not None and self.local.route is not None:  # its block elsewhere than its address
                self.channel.route(lp, self.local.route)
            self.channel.wait_ready(self.parties)
            self.fed = Federation(self._labels("predict", 0), self.channel, self.parties)
            self.view = _PredictFederation(self.fed)
            self.versions: dict[str, int] = {}
            self.rows: dict[str, int] = {}
            #: the breakdown of the latest batch's time (seconds): see :meth:`score`
            self.timing: dict[str, float] = {}
            for p in self.parties:
                self._open(p)
            self.intersect()
        except BaseException:
            self.close()
            raise

    def _open(self, p: str) -> bool:
        """Open the model at party ``p`` (again); whether its scoring file's version changed."""
        rep = self.fed.proxy(p).request(OpenModel(model=self.name, method=self.method.joined_as(),
                                                  sha256=str(self.manifest["parties"][p]["sha256"])), SETUP,
                                        expect=ModelOpened)
        changed = self.versions.get(p) not in (None, int(rep.version))
        self.versions[p], self.rows[p] = int(rep.version), int(rep.rows_in_file)
        return changed

    def reopen(self, party: str) -> None:
        """Set this session up again at ``party`` (after it restarted, or forgot the session): a new
        session there, the model opened again, PSI again if its scoring file changed (from the
        cache while the files are unchanged). Raises what the party or the connection raises."""
        with self._lock:
            self._channel().restart(party)
            if self._open(party):
                self.intersect()

    #: the errors after which :meth:`score` sets a party up again and tries once more: the party
    #: restarted (its session, or its open model, is gone)
    LOST = ("has no session", "is not open (OpenModel first")

    # ------------------------------------------------------------------ ids
    def _own_ids(self) -> np.ndarray:
        """The label party's scoring ids (a numpy text array): its own file, read here (the label
        holder is the label party); a file of at least ``stream_above_mb`` MiB by its id column alone
        (:class:`~verticalfs.data.stream.StreamedTable`), as training reads it."""
        if self.local is not None:
            from verticalfs.deploy.party import DeployedParty

            rt = self.local.runtime
            if not isinstance(rt, DeployedParty) or rt.scoring is None:
                raise ConfigError(f"party {self.dep.label_party!r}'s own block served here scores no model")
            with rt.scoring.lock:  # its server's threads may be preparing from it
                f = rt.scoring.file()
                f.refresh()
                return f.ids
        from verticalfs.data.stream import StreamedTable, file_bytes
        from verticalfs.data.user import _check_size, _read_frames

        dep = self.dep
        lp = dep.label_party
        path = Path(scoring_path(dep, lp))
        if file_bytes(path) >= dep.stream_above_mb * 2**20:
            if path.is_file():
                _check_size(lp, path, dep.max_bytes)
            table = StreamedTable(lp, path, id_column=dep.id_column, na_values=dep.na_values, delimiter=dep.delimiter,
                                  encoding=dep.encoding)
            try:
                ids: np.ndarray = table.id_lookup().sorted
                return ids
            finally:
                table.close()
        f = _read_frames({lp: path}, id_column=dep.id_column, na_values=dep.na_values,
                         delimiter=dep.delimiter, encoding=dep.encoding, max_bytes=dep.max_bytes)[lp]
        own: np.ndarray = f[dep.id_column].to_numpy(dtype=str)
        return own

    def _labels(self, split: str, n: int) -> LabelData:
        """The labels a method's prediction sees: ``n`` placeholder rows of ``split`` (none is read)."""
        from verticalfs.data.vertical import LabelData

        return LabelData(y={split: np.zeros(n, dtype=np.float32 if self.task == "regression" else np.int64)},
                         task=self.task, n_classes=self.n_classes, class_names=self._class_names)

    def intersect(self, fresh: bool = False) -> np.ndarray:
        """The ids every party of the model holds (PSI over the scoring files), in the natural order
        (``fresh``: PSI again even where the cache holds a result, e.g. for a party that stages only
        ids of a scoring PSI it answered, and has none on record)."""
        from verticalfs.data.user import _sort_ids
        from verticalfs.psi import PsiCache, intersect_all

        ids = np.asarray(self._own_ids())
        if ids.dtype.kind != "U":
            ids = ids.astype(str) if len(ids) else np.zeros(0, dtype=str)
        others = [self.view.proxy(p) for p in self.parties if p != self.dep.label_party]
        # the deployment's engine, as training's PSI (holder.connect); the ids a text array end to end
        cache = None if fresh else PsiCache(self.dep.state_dir(LABEL_HOLDER))
        psi = intersect_all(others, cast("Sequence[Any]", ids), cache=cache,
                            engine=self.dep.psi_engine, text_array=True) if others else None
        common = np.asarray(psi.ids if psi is not None else ids)
        if common.dtype.kind != "U":
            common = common.astype(str) if len(common) else np.zeros(0, dtype=str)
        self.psi_seconds = 0.0 if psi is None else psi.seconds
        self.psi_cached = [] if psi is None else psi.cached
        self.known = _sort_ids(common) if len(common) else np.zeros(0, dtype=str)
        # membership by binary search in a sorted copy (not a set of Python strings)
        self._known_sorted = np.sort(self.known)
        known: np.ndarray = self.known
        return known

    def _is_known(self, ids: np.ndarray) -> np.ndarray:
        """Which of ``ids`` (a numpy text array) are in the intersection."""
        ks = self._known_sorted
        if not len(ks) or not len(ids):
            return np.zeros(len(ids), dtype=bool)
        j = np.minimum(np.searchsorted(ks, ids), len(ks) - 1)
        hit: np.ndarray = ks[j] == ids
        return hit

    # ------------------------------------------------------------------ scoring
    def score(self, ids: Any, split: str = "predict") -> Scores:
        """Scores of ``ids`` (any; the unknown ones are listed, never sent to a party).

        A party that restarted since (its session or its open model gone: :attr:`LOST`) is set up
        again (:meth:`reopen`) and the batch sent once more. :attr:`timing` is then the breakdown of
        the batch's time, in seconds: ``stage`` (the round of ``StageIds``: the parties prepare the
        rows), ``infer`` (the method's inference round and the label holder's model), and per party
        ``rtt.<party>.<round>`` (the round trip) and ``party.<party>.<round>`` (the party's own share:
        decoding, its work, encoding; the rest is gRPC, TLS and the network), rounds ``stage`` and
        ``infer``. A party that answers that an id is outside its last scoring PSI (the label holder's
        PSI came from its cache) is intersected with again, without the cache, and the batch sent once
        more."""
        from verticalfs.exceptions import VerticalFSError

        try:
            return self._score(ids, split)
        except VerticalFSError as exc:
            if "last scoring PSI" in str(exc):
                # a party stages only ids of its last scoring PSI (issue 50): ours came from the cache
                # (a party without a PSI on record, or whose file came back to a version cached earlier)
                with self._lock:
                    self.intersect(fresh=True)
                return self._score(ids, split)
            party = exc.party
            if party is None or not any(t in str(exc) for t in self.LOST):
                raise
        self.reopen(party)
        return self._score(ids, split)

    def _channel(self) -> GrpcChannel:
        if self.channel is None:
            raise ConfigError(f"model {self.name!r} is closed")
        return self.channel

    def _score(self, ids: Any, split: str) -> Scores:
        from verticalfs.methods.base import probabilities

        channel = self._channel()
        with self._lock:
            ids = np.asarray(ids)
            ids = ids.astype(str) if len(ids) else np.zeros(0, dtype=str)
            _, first = np.unique(ids, return_index=True)
            ids = ids[np.sort(first)]  # each id once, in the order first asked
            hit = self._is_known(ids)
            ask, unknown = ids[hit].tolist(), ids[~hit].tolist()
            if not ask:
                return self._scores(np.zeros(0, dtype=str), self._empty(), unknown)
            lost = np.zeros(len(ask), dtype=bool)
            changed = False
            split = f"{split}-{self._session}"  # this session's own rows at the parties
            stage = StageIds(model=self.name, ids=ask, split=split)
            calls: list[tuple[str, float, float | None]] = []
            channel.on_call = lambda *c: calls.append(c)  # (list.append: safe from the fan-out's threads)
            t0 = time.perf_counter()
            try:
                reps = request_all([(self.fed.proxy(p), stage) for p in self.parties], PREDICT, expect=IdsStaged)
            finally:
                channel.on_call = None
            t1 = time.perf_counter()
            staged = len(calls)
            for p, rep in zip(self.parties, reps, strict=True):
                miss = np.asarray(rep.missing, dtype=np.int64).reshape(-1)
                if miss.size and (miss.min() < 0 or miss.max() >= len(ask)):
                    raise ProtocolError(f"party {p!r} reported missing positions outside the request")
                lost[miss] = True
                if int(rep.version) != self.versions.get(p):
                    self.versions[p] = int(rep.version)
                    changed = True
            self.fed.labels = self._labels(split, len(ask))
            channel.on_call = lambda *c: calls.append(c)
            try:
                out = self.method.predict_from_holder(self.holder["holder"], self.view, split)
            finally:
                channel.on_call = None
            probs = probabilities(out, self.task)
            t2 = time.perf_counter()
            timing = {"stage": t1 - t0, "infer": t2 - t1}
            for k, (p, rtt, handled) in enumerate(calls):
                rnd = "stage" if k < staged else "infer"
                timing[f"rtt.{p}.{rnd}"] = timing.get(f"rtt.{p}.{rnd}", 0.0) + rtt
                if handled is not None:
                    timing[f"party.{p}.{rnd}"] = timing.get(f"party.{p}.{rnd}", 0.0) + handled
            self.timing = timing
            if changed:  # a party's file changed: align again before the next batch
                self.intersect()
            keep = ~lost
            asked = np.asarray(ask, dtype=str)
            return self._scores(asked[keep], probs[keep], unknown + asked[lost].tolist())

    def _empty(self) -> np.ndarray:
        return np.zeros(0) if self.task == "regression" else np.zeros((0, len(self.classes)))

    def _scores(self, ids: np.ndarray, probs: np.ndarray, unknown: list[str]) -> Scores:
        if self.task == "regression":
            return Scores(ids=ids, probabilities=None, prediction=probs, unknown=unknown)
        pred = np.asarray(self.classes, dtype=object)[probs.argmax(1)] if len(ids) else np.zeros(0, dtype=object)
        return Scores(ids=ids, probabilities=probs, prediction=pred, unknown=unknown)

    def predict_all(self, chunk: int = BATCH_CHUNK) -> dict[str, Any]:
        """Every id of the intersection scored (batch prediction), ``chunk`` ids per round to the
        parties; the result of :func:`verticalfs.model.predict`'s shape (``ids``, ``prediction``,
        ``probabilities``, ``classes``, ``communication``, ...)."""
        if not self.known.size:
            raise ConfigError("no id is held by every party of the model; nothing to predict (the ids are compared "
                              "as text: '007' and '7' differ)")
        t0 = time.perf_counter()
        parts = [self.score(self.known[k:k + chunk], split="predict") for k in range(0, len(self.known), chunk)]
        s = parts[0] if len(parts) == 1 else Scores(
            ids=np.concatenate([q.ids for q in parts]),
            probabilities=None if parts[0].probabilities is None else np.concatenate([q.probabilities for q in parts]),
            prediction=np.concatenate([q.prediction for q in parts]), unknown=[u for q in parts for u in q.unknown])
        return {"ids": s.ids, "prediction": s.prediction, "probabilities": s.probabilities, "classes": self.classes,
                "communication": self.fed.ledger.summary(), "method": self.manifest["method"],
                "unknown": s.unknown, "rows": dict(self.rows), "seconds": time.perf_counter() - t0, "warnings": [],
                "psi_s": self.psi_seconds, "psi_cached": list(self.psi_cached)}

    def close(self) -> None:
        if self.channel is not None:
            fed = self.fed
            if fed is not None:
                from verticalfs.deploy.holder import end_session

                end_session(fed, self.parties)
            self.channel.close()
            self.channel = None
        if self.local is not None:
            from verticalfs.deploy.holder import stop_own_block

            stop_own_block(self.local)
            self.local = None

    def __enter__(self) -> DeployedModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def predict_deployment(dep: Deployment, model_dir: str | Path, *, expected_sha256: str | None = None,
                       callbacks: Sequence[Any] = ()) -> dict[str, Any]:
    """Batch prediction over a deployment (``verticalfs predict --config``): every id held by every
    party of the model, scored where the data lives. ``callbacks``: as for :func:`verticalfs.run`
    (the events: the start, the ``setup`` phase (opening the model, the scoring PSI), the
    ``predict`` phase, the end)."""
    from verticalfs.model import read_manifest
    from verticalfs.run_events import events_of, failing

    _, events = events_of(callbacks)
    name = Path(model_dir).resolve().name
    parties = [p for p in dep.parties if p != dep.label_party]
    with failing(events, kind="predict", dataset=name, mode="deployment", parties=parties,
                 label_party=dep.label_party):
        if events is not None:
            man = read_manifest(Path(model_dir), expected_sha256=expected_sha256)
            events.start(kind="predict", method=str(man["method"]), dataset=name, mode="deployment",
                         parties=list(man["parties"]), label_party=dep.label_party)
        opened = None if events is None else events.phase_start("setup")
        m = DeployedModel(dep, model_dir, expected_sha256=expected_sha256)
        with m:
            if events is not None and opened is not None:
                events.ledger = m.fed.ledger
                events.phase_end(opened)  # (its bytes: the model's ledger from its first message)
            with nullcontext() if events is None else events.phase("predict"):
                out = m.predict_all()
            if events is not None:
                events.end("ok")
            return out


__all__ = ["DeployedModel", "IdsStaged", "ModelOpened", "OpenModel", "Scores", "ScoringPsi", "StageIds",
           "predict_deployment"]
