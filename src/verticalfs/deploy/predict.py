"""Using a saved model where the data lives: federated batch prediction and online scoring.

``verticalfs predict --config deployment.toml --model DIR`` and ``verticalfs serve-model`` run at
the label party. ``DIR`` is the label holder's folder of the model (``run --save-model DIR``: its
``manifest.json`` and ``active.pt``); the parties are sent only the model's *name* (``DIR``'s last
component) and each reads its own part from its own model folder (``<model_dir>/<name>/<party>.pt``,
:func:`party_model_dir`). Nothing else of the model, and no path, crosses.

The exchange (every message metered on the ledger)::

    label holder                                 each party of the model
    OpenModel(name, method, sha256)   ------->   reads its part from its own folder (checksum), restores
                                      <-------   its role; indexes its scoring file by id (ModelOpened)
    ScoringPsi (ECDH-PSI, phase setup) ------>   answers with its scoring file's ids blinded
    StageIds(ids, split)  (phase predict) --->   prepares those rows with its saved preprocessing
                                      <-------   IdsStaged(missing positions, file version)
    the method's own inference messages, phase ``predict`` (embeddings of a split model; the
    selected columns of a filter method)

A party's *scoring file* is its ``predict_file`` in the deployment file, or its training ``file``
(scoring known ids). It is read once and kept indexed by id; a file whose size or modification time
changed is read again on the next request.

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

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from verticalfs.exceptions import ConfigError, DataError, ProtocolError
from verticalfs.names import LABEL_HOLDER
from verticalfs.transport.messages import At, message

#: the phase of inference messages on the ledger
PREDICT = At("predict")
SETUP = At("setup")


# ------------------------------------------------------------------------------------ messages
@message("core.OpenModel")
class OpenModel:
    """Label holder -> party, phase ``setup``: restore your part of the model called ``model`` (a
    plain name: the party finds ``<its model_dir>/<model>/<party>.pt`` itself), trained as
    ``method``, whose file has ``sha256`` (from the label holder's manifest)."""

    model: str
    method: str
    sha256: str


@message("core.ModelOpened")
class ModelOpened:
    """Party -> label holder: rows in its scoring file, and the file's version (reload count)."""

    rows_in_file: int
    version: int


@message("core.ScoringPsi")
class ScoringPsi:
    """Label holder -> party: a PSI request (:class:`~verticalfs.psi.PsiRequest`'s fields) over the
    ids of the party's *scoring* file (not its training file)."""

    request: bytes
    n: int


@message("core.StageIds")
class StageIds:
    """Label holder -> party, phase ``predict``: prepare the rows of ``ids`` (all from the PSI
    intersection) as split ``split`` of the open model, for the method's inference messages."""

    ids: list
    split: str


@message("core.IdsStaged")
class IdsStaged:
    """Party -> label holder: positions in the request of ids its scoring file no longer holds (their
    rows are zeros, their scores dropped), and its file's version."""

    missing: np.ndarray
    version: int


SCORING_KINDS = (OpenModel, ScoringPsi, StageIds)


# ------------------------------------------------------------------------------- party side
def model_root(dep, name: str) -> Path:
    """The folder under which party ``name`` of ``dep`` keeps its saved models, one sub-folder per
    model name: ``models/<party>`` beside the deployment file."""
    return Path(dep.path).parent / "models" / name


def scoring_path(dep, name: str) -> Path:
    """Party ``name``'s scoring file: its ``predict_file``, else its training ``file``."""
    e = dep.party(name)
    return e.predict_file if e.predict_file is not None else e.file


def party_model_dir(runtime) -> Path:
    """The folder under which party ``runtime`` keeps its saved models (set by :func:`enable_scoring`)."""
    d = getattr(runtime, "model_dir", None)
    if d is None:
        raise ConfigError(f"party {runtime.name!r} has no model folder")
    return Path(d)


def plain_name(name: str, party: str) -> str:
    """A model name from the label holder: a plain folder name, never a path."""
    if not name or name in (".", "..") or any(c in name for c in "/\\\x00"):
        raise ProtocolError(f"party {party!r} opens models only by a plain name (no path separator, no '..'), "
                            f"not {name!r}")
    return name


class ScoringFile:
    """A party's scoring file, indexed by id, read again when its size or modification time changes."""

    def __init__(self, party: str, path: Path, *, id_column: str, read_options: dict) -> None:
        self.party, self.path, self.id_column, self.read_options = party, Path(path), id_column, read_options
        self.version = 0
        self._stamp: tuple[int, int] | None = None
        self.frame = None
        self.refresh()

    def _stat(self) -> tuple[int, int]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise DataError(f"party {self.party!r}: its scoring file {str(self.path)!r} does not exist") from None
        return st.st_mtime_ns, st.st_size

    def refresh(self) -> bool:
        """Read the file again if it changed; True if it did."""
        from verticalfs.data.user import _read_frames

        stamp = self._stat()
        if stamp == self._stamp:
            return False
        frame = _read_frames({self.party: self.path}, id_column=self.id_column, **self.read_options)[self.party]
        self.frame = frame.set_index(self.id_column)
        self._stamp = stamp
        self.version += 1
        return True

    @property
    def ids(self) -> np.ndarray:
        return self.frame.index.to_numpy(dtype=str)


class Scoring:
    """The open model at a party: its restored role on its own LocalData, its saved preprocessing
    and its scoring file. Kept apart from the party's training state (``runtime.role``), so that a
    running training and scoring do not disturb each other's role."""

    def __init__(self, runtime, msg: OpenModel, ctx) -> None:
        from verticalfs.data.preprocess import PartyPreprocessor
        from verticalfs.model_files import load_party_file
        from verticalfs.party import LocalData

        name = plain_name(str(msg.model), runtime.name)
        path = party_model_dir(runtime) / name / f"{runtime.name}.pt"
        saved = load_party_file(path, expected_sha256=str(msg.sha256), party=runtime.name)
        if saved["method"] != msg.method:
            raise ProtocolError(f"party {runtime.name!r}: model {name!r} holds a {saved['method']!r} part, not "
                                f"{msg.method!r}")
        if saved.get("preprocessor") is None:
            raise ProtocolError(f"party {runtime.name!r}: model {name!r} has no saved preprocessing")
        self.name = name
        self.preprocessor = PartyPreprocessor.from_dict(saved["preprocessor"])
        self.file = runtime.scoring_file()
        self.data = LocalData(runtime.name, list(saved["feature_names"]), {})
        self.data.keep(saved["kept"])
        cls = runtime._role_class(str(msg.method))
        self.role = cls.restore(self.data, saved["role"], ctx)

    def stage(self, msg: StageIds) -> IdsStaged:
        ids = [str(i) for i in msg.ids]
        split = str(msg.split)
        if split in ("train", "val", "test"):
            raise ProtocolError(f"party {self.data.name!r}: scoring split may not be named {split!r}")
        self.file.refresh()
        frame = self.file.frame
        pos = frame.index.get_indexer(ids)
        missing = np.flatnonzero(pos < 0)
        rows = frame.iloc[np.where(pos < 0, 0, pos)] if len(frame) else frame.reindex(ids)
        X = self.preprocessor.transform(rows, where=str(self.file.path))
        if missing.size:
            X[missing] = 0.0
        self.data.put(split, X)
        return IdsStaged(missing=missing.astype(np.int64), version=self.file.version)


def scoring_handle(runtime, sender: str, msg: Any, at: At, node) -> Any:
    """The party's answer to a scoring message, or to a method message of phase ``predict`` (sent
    to the open model's role, not the training role)."""
    from verticalfs.party import Context
    from verticalfs.psi import PsiRequest, PsiServer

    if sender != LABEL_HOLDER:
        raise ProtocolError(f"party {runtime.name!r} accepts scoring messages only from the label holder, "
                            f"not {sender!r}")
    t = type(msg)
    if t is OpenModel:
        runtime.scoring = Scoring(runtime, msg, Context(node, at, sender))
        return ModelOpened(rows_in_file=len(runtime.scoring.file.frame), version=runtime.scoring.file.version)
    sc = runtime.scoring
    if sc is None:
        raise ProtocolError(f"party {runtime.name!r} received a scoring message before OpenModel")
    if t is ScoringPsi:
        sc.file.refresh()
        return PsiServer(sc.file.ids).reply(PsiRequest(request=msg.request, n=msg.n))
    if t is StageIds:
        return sc.stage(msg)
    return sc.role.handle(sender, msg, Context(node, at, sender))


def is_scoring(msg: Any, at: At) -> bool:
    return type(msg) in SCORING_KINDS or at.phase == PREDICT.phase


def enable_scoring(runtime, *, model_dir: Path, scoring_path: Path, read_options: dict) -> None:
    """Give a deployed party what it needs to score: its model folder and its scoring file
    (``predict_file`` or its training file; read when a model is first opened)."""
    runtime.scoring_enabled = True
    runtime.model_dir = Path(model_dir)
    runtime.scoring = None
    runtime._scoring_path = Path(scoring_path)
    runtime._scoring_file = None
    runtime._read_options = dict(read_options)

    def scoring_file() -> ScoringFile:
        if runtime._scoring_file is None:
            runtime._scoring_file = ScoringFile(runtime.name, runtime._scoring_path, id_column=runtime.id_column,
                                                read_options=runtime._read_options)
        return runtime._scoring_file

    runtime.scoring_file = scoring_file


# ------------------------------------------------------------------------- label-holder side
class _PhaseProxy:
    """A party proxy whose ``eval`` messages go at phase ``predict``, and whose PSI requests are
    over the party's scoring file (:class:`ScoringPsi`)."""

    __slots__ = ("name", "_proxy")

    def __init__(self, proxy) -> None:
        self.name = proxy.name
        self._proxy = proxy

    def _at(self, at: At) -> At:
        return At("predict", at.round, at.step) if at.phase == "eval" else at

    def request(self, msg: Any, at: At, expect=None) -> Any:
        from verticalfs.psi import PsiRequest

        if type(msg) is PsiRequest:
            msg = ScoringPsi(request=msg.request, n=msg.n)
        return self._proxy.request(msg, self._at(at), expect=expect)

    def send(self, msg: Any, at: At) -> None:
        self._proxy.send(msg, self._at(at))


class _PredictFederation:
    """The label holder's federation as a method's ``predict_from_holder`` sees it at inference."""

    def __init__(self, fed) -> None:
        self._fed = fed
        self._proxies = {p: _PhaseProxy(fed.proxy(p)) for p in fed.party_names}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fed, name)

    def proxy(self, name: str):
        try:
            return self._proxies[name]
        except KeyError:
            raise ConfigError(f"no party named {name!r}; parties are {list(self._proxies)}") from None

    @property
    def proxies(self) -> list:
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
        Deadline of one exchange with a party.
    """

    def __init__(self, dep, model_dir: str | Path, *, call_timeout: float | None = None) -> None:
        from verticalfs.data.vertical import LabelData
        from verticalfs.deploy.holder import serve_party
        from verticalfs.federation import Federation
        from verticalfs.methods import registry
        from verticalfs.model import read_manifest
        from verticalfs.model_files import load
        from verticalfs.transport.grpc.channel import GrpcChannel

        self.dep = dep
        model_dir = Path(model_dir)
        self.model_dir = model_dir
        self.name = model_dir.resolve().name
        man = read_manifest(model_dir)
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
        self._labels = lambda split, n: LabelData(
            y={split: np.zeros(n, dtype=np.float32 if self.task == "regression" else np.int64)},
            task=self.task, n_classes=self.n_classes, class_names=holder["class_names"] or None)
        lp = dep.label_party
        dep.check_keys(LABEL_HOLDER, lp)
        self.local = None
        self.channel = None
        self._lock = threading.Lock()
        try:
            if lp in self.parties:
                self.local = serve_party(dep, lp).start()
            self.channel = GrpcChannel(LABEL_HOLDER, dep.addresses, tls=dep.tls(LABEL_HOLDER), insecure=dep.insecure,
                                       connect_timeout=dep.connect_timeout, call_timeout=call_timeout)
            self.channel.wait_ready(self.parties)
            self.fed = Federation(self._labels("predict", 0), self.channel, self.parties)
            self.view = _PredictFederation(self.fed)
            self.versions: dict[str, int] = {}
            self.rows: dict[str, int] = {}
            for p in self.parties:
                entry = man["parties"][p]
                rep = self.fed.proxy(p).request(OpenModel(model=self.name, method=self.method.joined_as(),
                                                          sha256=str(entry["sha256"])), SETUP, expect=ModelOpened)
                self.versions[p], self.rows[p] = int(rep.version), int(rep.rows_in_file)
            self.intersect()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ ids
    def _own_ids(self) -> np.ndarray:
        """The label party's scoring ids: its own file, read here (the label holder is the label party)."""
        if self.local is not None:
            rt = self.local.runtime
            rt.scoring_file().refresh()
            return rt.scoring_file().ids
        from verticalfs.data.user import _read_frames

        dep = self.dep
        lp = dep.label_party
        f = _read_frames({lp: scoring_path(dep, lp)}, id_column=dep.id_column, na_values=dep.na_values,
                         delimiter=dep.delimiter, encoding=dep.encoding, max_bytes=1 << 30)[lp]
        return f[dep.id_column].to_numpy(dtype=str)

    def intersect(self) -> np.ndarray:
        """The ids every party of the model holds (PSI over the scoring files), in the natural order."""
        from verticalfs.data.user import _sort_ids
        from verticalfs.psi import intersect

        ids = self._own_ids()
        others = [self.view.proxy(p) for p in self.parties if p != self.dep.label_party]
        common = intersect(others, ids) if others else [str(i) for i in ids]
        self.known = _sort_ids(np.asarray(common, dtype=str)) if common else np.zeros(0, dtype=str)
        self._known_set = set(self.known.tolist())
        return self.known

    # ------------------------------------------------------------------ scoring
    def score(self, ids, split: str = "predict") -> Scores:
        """Scores of ``ids`` (any; the unknown ones are listed, never sent to a party)."""
        from verticalfs.methods.base import probabilities

        with self._lock:
            ids = [str(i) for i in ids]
            ask = [i for i in dict.fromkeys(ids) if i in self._known_set]
            unknown = [i for i in dict.fromkeys(ids) if i not in self._known_set]
            if not ask:
                return self._scores(np.zeros(0, dtype=str), self._empty(), unknown)
            lost = np.zeros(len(ask), dtype=bool)
            changed = False
            for p in self.parties:
                rep = self.fed.proxy(p).request(StageIds(ids=ask, split=split), PREDICT, expect=IdsStaged)
                miss = np.asarray(rep.missing, dtype=np.int64).reshape(-1)
                if miss.size and (miss.min() < 0 or miss.max() >= len(ask)):
                    raise ProtocolError(f"party {p!r} reported missing positions outside the request")
                lost[miss] = True
                if int(rep.version) != self.versions.get(p):
                    self.versions[p] = int(rep.version)
                    changed = True
            self.fed.labels = self._labels(split, len(ask))
            out = self.method.predict_from_holder(self.holder["holder"], self.view, split)
            probs = probabilities(out, self.task)
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

    def predict_all(self) -> dict:
        """Every id of the intersection scored (batch prediction); the result of
        :func:`verticalfs.model.predict`'s shape (``ids``, ``prediction``, ``probabilities``,
        ``classes``, ``communication``, ...)."""
        t0 = time.perf_counter()
        s = self.score(self.known, split="predict")
        return {"ids": s.ids, "prediction": s.prediction, "probabilities": s.probabilities, "classes": self.classes,
                "communication": self.fed.ledger.summary(), "method": self.manifest["method"],
                "unknown": s.unknown, "rows": dict(self.rows), "seconds": time.perf_counter() - t0, "warnings": []}

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.local is not None:
            self.local.stop()
            self.local = None

    def __enter__(self) -> DeployedModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def predict_deployment(dep, model_dir: str | Path) -> dict:
    """Batch prediction over a deployment (``verticalfs predict --config``): every id held by every
    party of the model, scored where the data lives."""
    with DeployedModel(dep, model_dir) as m:
        return m.predict_all()


__all__ = ["DeployedModel", "IdsStaged", "ModelOpened", "OpenModel", "Scores", "ScoringPsi", "StageIds",
           "predict_deployment"]
