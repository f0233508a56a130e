"""The party's side of using a saved model (:mod:`verticalfs.deploy.predict` is the label holder's):
the scoring messages, the open model at a party and its scoring file, indexed by id.

See :mod:`verticalfs.deploy.predict` for the exchange and what each side learns.
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
import weakref
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
    """Label holder -> party: an openmined-psi request (:class:`~verticalfs.psi.PsiRequest`'s fields)
    over the ids of the party's *scoring* file (not its training file); the streamed ristretto255
    engine's are :class:`ScoringPsiOpen` and :class:`ScoringPsiChunk`."""

    request: bytes
    n: int


@message("core.ScoringPsiOpen")
class ScoringPsiOpen:
    """Label holder -> party: a streamed ristretto255 PSI (:class:`~verticalfs.psi.PsiOpen`'s
    fields) over the ids of the party's *scoring* file; answered with a
    :class:`~verticalfs.psi.PsiOpened`."""

    group: str
    n: int
    chunk: int


@message("core.ScoringPsiChunk")
class ScoringPsiChunk:
    """Label holder -> party: a chunk of the streamed scoring PSI (:class:`~verticalfs.psi.PsiChunk`'s
    fields); answered with a :class:`~verticalfs.psi.PsiChunkReply`."""

    index: int
    points: bytes


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


SCORING_KINDS = (OpenModel, ScoringPsi, ScoringPsiOpen, ScoringPsiChunk, StageIds)


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
    """A party's scoring file, indexed by id, read again when its size or modification time changes.

    A file of at least ``stream_above_mb`` MiB (the training file's rule, :class:`DeployedParty`) is
    not read into memory: it is a :class:`~verticalfs.data.stream.StreamedTable` (in a working
    folder of its own, removed when the file is read again or the party stops) and its ids an
    :class:`~verticalfs.data.stream.IdLookup` (sorted, with their file rows); each open model
    prepares it once into a memory-mapped matrix (:class:`Scoring`). A smaller file is a pandas
    frame indexed by id, as before.
    """

    def __init__(self, party: str, path: Path, *, id_column: str, read_options: dict,
                 stream_above_mb: float | None = None) -> None:
        from verticalfs.data.stream import DEFAULT_STREAM_ABOVE_MB

        self.party, self.path, self.id_column, self.read_options = party, Path(path), id_column, read_options
        self.stream_above_mb = DEFAULT_STREAM_ABOVE_MB if stream_above_mb is None else float(stream_above_mb)
        self.version = 0
        self._stamp: tuple[int, int] | None = None
        self.frame = None  # the in-memory path
        self.table = None  # the streamed path: a StreamedTable, and its IdLookup
        self.lookup = None
        self._finalizer = None
        self.refresh()

    def _stat(self) -> tuple[int, int]:
        """The file's modification time and size; a folder of Parquet files': the latest of its
        files' and its own, and their total size (a file rewritten in place leaves the folder's own
        time as it was)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise DataError(f"party {self.party!r}: its scoring file {str(self.path)!r} does not exist") from None
        if not self.path.is_dir():
            return st.st_mtime_ns, st.st_size
        stats = [f.stat() for f in self.path.rglob("*") if f.is_file()]
        return max([st.st_mtime_ns] + [f.st_mtime_ns for f in stats]), sum(f.st_size for f in stats)

    @property
    def streamed(self) -> bool:
        return self.table is not None

    def refresh(self) -> bool:
        """Read the file again if it changed; True if it did."""
        from verticalfs.data.stream import StreamedTable, file_bytes
        from verticalfs.data.user import _check_size, _read_frames

        stamp = self._stat()
        if stamp == self._stamp:
            return False
        opts = self.read_options
        if file_bytes(self.path) >= self.stream_above_mb * 2**20:
            if self.path.is_file() and opts.get("max_bytes") is not None:
                _check_size(self.party, self.path, int(opts["max_bytes"]))
            table = StreamedTable(self.party, self.path, id_column=self.id_column, na_values=opts.get("na_values"),
                                  delimiter=opts.get("delimiter", ","), encoding=opts.get("encoding", "utf-8"))
            try:
                lookup = table.id_lookup()
            except BaseException:
                table.close()
                raise
            self._close()
            self.table, self.lookup, self.frame = table, lookup, None
            self._finalizer = weakref.finalize(self, table.close)
        else:
            frame = _read_frames({self.party: self.path}, id_column=self.id_column, **opts)[self.party]
            self._close()
            self.frame = frame.set_index(self.id_column)
        self._stamp = stamp
        self.version += 1
        return True

    def _close(self) -> None:
        """The streamed table of the previous version removed (maps still open on its files stay valid)."""
        if self._finalizer is not None:
            self._finalizer()
        self.table = self.lookup = self._finalizer = None

    @property
    def ids(self) -> np.ndarray:
        """Its ids as a numpy text array (file order in memory; sorted when streamed)."""
        return self.lookup.sorted if self.streamed else self.frame.index.to_numpy(dtype=str)

    @property
    def n_rows(self) -> int:
        return len(self.lookup) if self.streamed else len(self.frame)

    def positions(self, ids) -> np.ndarray:
        """The file row of each of ``ids`` (-1: not held)."""
        if self.streamed:
            return self.lookup.positions(ids)
        return self.frame.index.get_indexer(ids)


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
        self._out: Path | None = None  # the streamed matrix's folder
        self._prepare()

    def _prepare(self) -> None:
        """Every row of the scoring file prepared once with the saved preprocessing (row by row
        independent: the same floats as preparing any subset), again when the file changed: in
        memory for a small file, into a float32 memory-mapped file in the streamed table's working
        folder for a large one (a pass per group of columns, :func:`~verticalfs.data.stream.transform_streamed`)."""
        self.file.refresh()
        if self._version == self.file.version:
            return
        if self.file.streamed:
            self.X = self._prepare_streamed()
        else:
            self.X = self.preprocessor.transform(self.file.frame, where=str(self.file.path))
        self._version = self.file.version

    def _prepare_streamed(self) -> np.ndarray:
        from verticalfs.data.stream import transform_streamed

        table, pp = self.file.table, self.preprocessor
        need = list(pp.numeric) + list(pp.categorical)
        missing = [c for c in need if c not in table.columns]
        if missing:  # before the pass over the file
            raise DataError(f"party {pp.party!r}: columns {missing} are missing in {str(self.file.path)!r}; the "
                            f"model was trained with {need}")
        want = set(need)
        cols = [c for c in table.columns if c in want]  # file order, as training reads them
        out = table.work_dir / f"scoring-{self.name}-{secrets.token_hex(6)}"
        maps = transform_streamed(table, pp, None, None, cols, list(pp.categorical), splits=("scoring",),
                                  out_dir=out)  # every row, in file order
        if self._out is not None:  # the previous version's matrix (an open map of it stays valid)
            shutil.rmtree(self._out, ignore_errors=True)
        self._out = out
        return maps["scoring"]

    def close(self) -> None:
        """Its prepared matrix's folder removed (streamed path)."""
        if self._out is not None:
            shutil.rmtree(self._out, ignore_errors=True)
            self._out = None

    def stage(self, msg: StageIds) -> IdsStaged:
        from verticalfs.data.stream import read_rows

        split = str(msg.split)
        if split in ("train", "val", "test"):
            raise ProtocolError(f"party {self.data.name!r}: scoring split may not be named {split!r}")
        self._prepare()
        ids = np.asarray([str(i) for i in msg.ids], dtype=str) if len(msg.ids) else np.zeros(0, dtype=str)
        pos = self.file.positions(ids)
        missing = np.flatnonzero(pos < 0)
        if len(self.X):  # the requested rows only (read from the memory map a piece at a time when streamed)
            X = read_rows(self.X, np.where(pos < 0, 0, pos))
        else:
            X = np.zeros((len(ids), self.X.shape[1]), np.float32)
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
    from verticalfs.psi import PsiChunk, PsiOpen, PsiParty, PsiRequest, PsiServer

    t = type(msg)
    models, splits = runtime.scoring_models, runtime.scoring_splits
    if t is OpenModel:
        sc = models.get(str(msg.model))
        if sc is None or sc.sha256 != msg.sha256 or sc.method != msg.method:
            sc = Scoring(runtime, msg, Context(node, at, sender))
        # a model closed removes its prepared matrix's folder (rows it staged are copies: they stay)
        old = models.pop(sc.name, None)
        if old is not None and old is not sc:
            old.close()
        models[sc.name] = sc
        while len(models) > MAX_OPEN_MODELS:
            models.pop(next(iter(models))).close()
        sc.file.refresh()
        return ModelOpened(rows_in_file=sc.file.n_rows, version=sc.file.version)
    if t is ScoringPsi or t is ScoringPsiOpen:
        runtime.count_request("PSI requests", int(msg.n))  # the party policy's PSI limits, as for training's PSI
        f = runtime.scoring_file()
        f.refresh()
        if t is ScoringPsi:  # openmined-psi
            return PsiServer(f.ids).reply(PsiRequest(request=msg.request, n=msg.n))
        # the streamed ristretto255 engine over the scoring file's ids (a numpy text array); the state
        # of one run per session (a session's runtime is its own copy, transport/grpc/party.py)
        runtime._scoring_psi = PsiParty(f.ids)
        return runtime._scoring_psi.reply(PsiOpen(group=msg.group, n=msg.n, chunk=msg.chunk))
    if t is ScoringPsiChunk:
        psi = getattr(runtime, "_scoring_psi", None)
        if psi is None:
            raise ProtocolError(f"party {runtime.name!r}: a scoring PSI chunk arrived before ScoringPsiOpen")
        return psi.reply(PsiChunk(index=msg.index, points=msg.points))
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


def enable_scoring(runtime, *, model_dir: Path, scoring_path: Path, read_options: dict,
                   stream_above_mb: float | None = None) -> None:
    """Give a deployed party what it needs to score: its model folder and its scoring file
    (``predict_file`` or its training file; read when a model is first opened), streamed from
    ``stream_above_mb`` MiB (default: the party's own setting, as for its training file)."""
    if stream_above_mb is None:
        stream_above_mb = getattr(runtime, "stream_above_mb", None)
    runtime.scoring_enabled = True
    runtime.model_dir = Path(model_dir)
    runtime.scoring_models = {}  # name -> Scoring, in the order opened
    runtime.scoring_splits = {}  # staged split -> Scoring
    runtime.scoring_lock = threading.Lock()
    runtime._scoring_path = Path(scoring_path)
    runtime._scoring_file = None
    runtime._read_options = dict(read_options)
    runtime._scoring_psi = None

    def scoring_file() -> ScoringFile:
        if runtime._scoring_file is None:
            runtime._scoring_file = ScoringFile(runtime.name, runtime._scoring_path, id_column=runtime.id_column,
                                                read_options=runtime._read_options,
                                                stream_above_mb=stream_above_mb)
        return runtime._scoring_file

    runtime.scoring_file = scoring_file
