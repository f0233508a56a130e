"""The party's side of using a saved model (:mod:`verticalfs.deploy.predict` is the label holder's):
the scoring messages, the open model at a party and its scoring file, indexed by id.

See :mod:`verticalfs.deploy.predict` for the exchange and what each side learns.
"""

from __future__ import annotations

import os
import threading
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
    intersection) as split ``split`` of the open model ``model``, for the method's inference
    messages (which name ``split``; a session's split names are its own)."""

    model: str
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
        allowed = runtime._allowed
        if allowed is not None and msg.method not in allowed:
            raise ProtocolError(f"party {runtime.name!r} does not take part in method {msg.method!r}; it allows "
                                f"{sorted(allowed)}")
        folder = runtime.model_folder(name)  # the party policy's model_dir / name, as SaveModel wrote it
        path = folder / f"{runtime.name}.pt"
        saved = load_party_file(path, expected_sha256=str(msg.sha256), party=runtime.name)
        if saved["method"] != msg.method:
            raise ProtocolError(f"party {runtime.name!r}: model {name!r} holds a {saved['method']!r} part, not "
                                f"{msg.method!r}")
        if saved.get("preprocessor") is None:
            raise ProtocolError(f"party {runtime.name!r}: model {name!r} has no saved preprocessing")
        self.name, self.method, self.sha256 = name, str(msg.method), str(msg.sha256)
        self.preprocessor = PartyPreprocessor.from_dict(saved["preprocessor"])
        self.file = runtime.scoring_file()
        self.data = LocalData(runtime.name, list(saved["feature_names"]), {})
        self.data.keep(saved["kept"])
        cls = runtime._role_class(str(msg.method))
        self.role = cls.restore(self.data, saved["role"], ctx)
        self._version = -1
        self._prepare()

    def _prepare(self) -> None:
        """Every row of the scoring file prepared once with the saved preprocessing (row by row
        independent: the same floats as preparing any subset), again when the file changed."""
        self.file.refresh()
        if self._version == self.file.version:
            return
        frame = self.file.frame
        self.X = self.preprocessor.transform(frame, where=str(self.file.path))
        self.index = frame.index
        self._version = self.file.version

    def stage(self, msg: StageIds) -> IdsStaged:
        ids = [str(i) for i in msg.ids]
        split = str(msg.split)
        if split in ("train", "val", "test"):
            raise ProtocolError(f"party {self.data.name!r}: scoring split may not be named {split!r}")
        self._prepare()
        pos = self.index.get_indexer(ids)
        missing = np.flatnonzero(pos < 0)
        X = self.X[np.where(pos < 0, 0, pos)] if len(self.X) else np.zeros((len(ids), self.X.shape[1]), np.float32)
        if missing.size:
            X[missing] = 0.0
        self.data.put(split, X)
        return IdsStaged(missing=missing.astype(np.int64), version=self.file.version)


#: models a party keeps open at once (the least recently opened is closed first)
MAX_OPEN_MODELS = 8
#: staged splits a party keeps (each label-holder session stages under its own split names)
MAX_SPLITS = 16


def scoring_handle(runtime, sender: str, msg: Any, at: At, node) -> Any:
    """The party's answer to a scoring message, or to a method message of phase ``predict`` (sent
    to the role of the open model whose rows that message's split names, never the training role).

    Several label-holder sessions may score at once (a ``serve-model`` and a nightly ``predict``):
    models are kept open by name, and each session stages its rows under split names of its own."""
    if sender != LABEL_HOLDER:
        raise ProtocolError(f"party {runtime.name!r} accepts scoring messages only from the label holder, "
                            f"not {sender!r}")
    with runtime.scoring_lock:
        return _scoring_handle(runtime, sender, msg, at, node)


def _scoring_handle(runtime, sender: str, msg: Any, at: At, node) -> Any:
    from verticalfs.party import Context
    from verticalfs.psi import PsiRequest, PsiServer

    t = type(msg)
    models, splits = runtime.scoring_models, runtime.scoring_splits
    if t is OpenModel:
        sc = models.get(str(msg.model))
        if sc is None or sc.sha256 != msg.sha256 or sc.method != msg.method:
            sc = Scoring(runtime, msg, Context(node, at, sender))
        models.pop(sc.name, None)
        models[sc.name] = sc
        while len(models) > MAX_OPEN_MODELS:
            models.pop(next(iter(models)))
        sc.file.refresh()
        return ModelOpened(rows_in_file=len(sc.file.frame), version=sc.file.version)
    if t is ScoringPsi:
        runtime.count_request("PSI requests", int(msg.n))  # the party policy's PSI limits, as for training's PSI
        f = runtime.scoring_file()
        f.refresh()
        return PsiServer(f.ids).reply(PsiRequest(request=msg.request, n=msg.n))
    if t is StageIds:
        sc = models.get(str(msg.model))
        if sc is None:
            raise ProtocolError(f"party {runtime.name!r}: model {msg.model!r} is not open (OpenModel first; a party "
                                f"keeps {MAX_OPEN_MODELS} models open)")
        rep = sc.stage(msg)
        splits.pop(str(msg.split), None)
        splits[str(msg.split)] = sc
        while len(splits) > MAX_SPLITS:
            old, owner = next(iter(splits.items()))
            splits.pop(old)
            owner.data.put(old, np.zeros((0, owner.data.n_features), dtype=np.float32))
        return rep
    split = getattr(msg, "split", None)
    sc = splits.get(split) if isinstance(split, str) else None
    if sc is None:
        raise ProtocolError(f"party {runtime.name!r} received {t.__name__} at phase predict for split {split!r}, "
                            "which no StageIds prepared")
    for rule in sc.role._policy.get(t, ()):  # the party policy's rules, as for training
        runtime._require(rule, f"{rule} ({t.__name__} of model {sc.name!r})")
    return sc.role.handle(sender, msg, Context(node, at, sender))


def is_scoring(msg: Any, at: At) -> bool:
    return type(msg) in SCORING_KINDS or at.phase == PREDICT.phase


def enable_scoring(runtime, *, model_dir: Path, scoring_path: Path, read_options: dict) -> None:
    """Give a deployed party what it needs to score: its model folder and its scoring file
    (``predict_file`` or its training file; read when a model is first opened)."""
    runtime.scoring_enabled = True
    runtime.model_dir = Path(model_dir)
    runtime.scoring_models = {}  # name -> Scoring, in the order opened
    runtime.scoring_splits = {}  # staged split -> Scoring
    runtime.scoring_lock = threading.Lock()
    runtime._scoring_path = Path(scoring_path)
    runtime._scoring_file = None
    runtime._read_options = dict(read_options)

    def scoring_file() -> ScoringFile:
        if runtime._scoring_file is None:
            runtime._scoring_file = ScoringFile(runtime.name, runtime._scoring_path, id_column=runtime.id_column,
                                                read_options=runtime._read_options)
        return runtime._scoring_file

    runtime.scoring_file = scoring_file
