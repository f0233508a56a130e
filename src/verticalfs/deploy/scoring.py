"""The party's side of using a saved model (:mod:`verticalfs.deploy.predict` is the label holder's):
the scoring messages, a deployed party's scoring (:class:`PartyScoring`, the handlers of those
messages, owned by the party), the open model at a party and its scoring file, indexed by id.

See :mod:`verticalfs.deploy.predict` for the exchange and what each side learns.
"""

from __future__ import annotations

import copy
import os
import secrets
import shutil
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from verticalfs.dispatch import Budget, Context, Handlers, Route, handles
from verticalfs.exceptions import ConfigError, DataError, ProtocolError
from verticalfs.names import LABEL_HOLDER
from verticalfs.transport.messages import At, message
from verticalfs.trust import private_tree

if TYPE_CHECKING:
    import pandas as pd

    from verticalfs.data.stream import IdLookup, StreamedTable
    from verticalfs.deploy.config import Deployment
    from verticalfs.party import PartyRuntime
    from verticalfs.psi import PsiParty

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
    ids: list[Any]
    split: str


@message("core.IdsStaged")
class IdsStaged:
    """Party -> label holder: positions in the request of ids its scoring file no longer holds (their
    rows are zeros, their scores dropped), and its file's version."""

    missing: np.ndarray
    version: int


SCORING_KINDS = (OpenModel, ScoringPsi, ScoringPsiOpen, ScoringPsiChunk, StageIds)


# ------------------------------------------------------------------------------- party side
def scoring_path(dep: Deployment, name: str) -> Path:
    """Party ``name``'s scoring file: its ``predict_file``, else its training ``file``."""
    e = dep.party(name)
    return e.predict_file if e.predict_file is not None else e.file


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

    def __init__(self, party: str, path: Path, *, id_column: str, read_options: dict[str, Any],
                 stream_above_mb: float | None = None) -> None:
        from verticalfs.data.stream import DEFAULT_STREAM_ABOVE_MB

        self.party, self.path, self.id_column, self.read_options = party, Path(path), id_column, read_options
        self.stream_above_mb = DEFAULT_STREAM_ABOVE_MB if stream_above_mb is None else float(stream_above_mb)
        self.version = 0
        self._stamp: tuple[int, int] | None = None
        self.frame: pd.DataFrame | None = None  # the in-memory path
        self.table: StreamedTable | None = None  # the streamed path: a StreamedTable, and its IdLookup
        self.lookup: IdLookup | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
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

    def _frame(self) -> pd.DataFrame:
        if self.frame is None:
            raise DataError(f"party {self.party!r}: its scoring file {str(self.path)!r} is not read")
        return self.frame

    @property
    def ids(self) -> np.ndarray:
        """Its ids as a numpy text array (file order in memory; sorted when streamed)."""
        if self.lookup is not None:
            return self.lookup.sorted
        out: np.ndarray = self._frame().index.to_numpy(dtype=str)
        return out

    @property
    def n_rows(self) -> int:
        return len(self.lookup) if self.lookup is not None else len(self._frame())

    def positions(self, ids: Any) -> np.ndarray:
        """The file row of each of ``ids`` (-1: not held)."""
        if self.lookup is not None:
            return self.lookup.positions(ids)
        out: np.ndarray = self._frame().index.get_indexer(ids)
        return out


class Scoring:
    """The open model at a party: its restored role on its own LocalData, its saved preprocessing
    and its scoring file. Kept apart from the party's training state (``runtime.role``), so that a
    running training and scoring do not disturb each other's role."""

    def __init__(self, scoring: PartyScoring, msg: OpenModel, ctx: Context) -> None:
        from verticalfs.data.preprocess import PartyPreprocessor
        from verticalfs.model_files import load_party_file
        from verticalfs.party import LocalData

        party = scoring.party
        name = plain_name(str(msg.model), party.name)
        if not party.allows_method(str(msg.method)):
            raise ProtocolError(f"party {party.name!r} does not take part in method {msg.method!r}; it allows "
                                f"{sorted(party._allowed or ())}")
        folder = party.model_folder(name)  # the party policy's model_dir / name, as SaveModel wrote it
        path = folder / f"{party.name}.pt"
        saved = load_party_file(path, expected_sha256=str(msg.sha256), party=party.name,
                                secret=party.model_secret())  # only its own parts (own_models_only)
        if saved["method"] != msg.method:
            raise ProtocolError(f"party {party.name!r}: model {name!r} holds a {saved['method']!r} part, not "
                                f"{msg.method!r}")
        if saved.get("preprocessor") is None:
            raise ProtocolError(f"party {party.name!r}: model {name!r} has no saved preprocessing")
        self.name, self.method, self.sha256 = name, str(msg.method), str(msg.sha256)
        self.preprocessor = PartyPreprocessor.from_dict(saved["preprocessor"])
        self.file = scoring.file()
        self.data = LocalData(party.name, list(saved["feature_names"]), {})
        self.data.keep(saved["kept"])
        cls = party.role_class(str(msg.method))
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
        if table is None:
            raise DataError(f"party {pp.party!r}: its scoring file {str(self.file.path)!r} is not read in pieces")
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
        private_tree(out)  # the party's prepared rows: 0600 in a 0700 folder
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


def is_scoring(msg: Any, at: At | None) -> bool:
    """A scoring message, or any message of phase ``predict`` (a saved model's inference)."""
    return type(msg) in SCORING_KINDS or (at is not None and at.phase == PREDICT.phase)


def _ids(ids: np.ndarray) -> Sequence[Any]:
    """A numpy text array of ids where PSI takes a sequence (it indexes and measures them alike)."""
    return cast("Sequence[Any]", ids)


def _split_of(msg: Any) -> Any:
    """The split a method's inference message names (its ``split`` field: ``EmbedRequest``,
    ``GatherColumns``, ...); ``None`` if it names none."""
    return getattr(msg, "split", None)


class _Unstaged:
    """The route of a method's message of phase ``predict`` whose split no :class:`StageIds`
    prepared (not a message kind: it answers every such message with a refusal)."""


class _Shared:
    """What every session of a party shares for scoring: the open models, the staged splits, the
    lock that serialises scoring, the scoring file (read when a model is first opened)."""

    def __init__(self) -> None:
        self.models: dict[str, Scoring] = {}  # name -> Scoring, in the order opened
        self.splits: dict[str, Scoring] = {}  # staged split -> Scoring
        self.lock = threading.Lock()
        self.file: ScoringFile | None = None


#: the models a party had open, in its working folder: opened again when it starts
#: (:meth:`PartyScoring.restore_open_models`)
OPEN_MODELS = "open-models.json"


class PartyScoring(Handlers):
    """A deployed party's scoring: the handlers of the scoring messages, owned by the party
    (:class:`~verticalfs.deploy.party.DeployedParty`'s ``scoring``).

    It answers :class:`OpenModel`, the scoring PSI and :class:`StageIds`, and routes a method's
    message of phase ``predict`` to the role of the open model whose rows that message's split
    names, never to the training role (:meth:`resolve`). Several label-holder sessions may score at
    once (a ``serve-model`` and a nightly ``predict``): models are kept open by name, and each
    session stages its rows under split names of its own. A session's copy (:meth:`fork`) shares
    the open models, the staged splits, the lock and the scoring file; its streamed scoring PSI is
    its own.

    Parameters
    ----------
    party : PartyRuntime
        The party it belongs to (its name, policy, allowed methods, model folder and roles).
    scoring_path : path
        Its scoring file (``predict_file`` or its training file).
    id_column : str
    read_options : dict
        How to read the file (as its training file).
    stream_above_mb : float, optional
        Files from this size on are read in pieces (default: the library's).
    """

    def __init__(self, party: PartyRuntime, *, scoring_path: Path, id_column: str,
                 read_options: dict[str, Any], stream_above_mb: float | None = None) -> None:
        self.party = party
        self.path = Path(scoring_path)
        self.id_column = id_column
        self.read_options = dict(read_options)
        self.stream_above_mb = stream_above_mb
        self._shared = _Shared()
        self.psi: PsiParty | None = None  # this session's streamed scoring PSI

    def fork(self, party: PartyRuntime) -> PartyScoring:
        """The scoring of ``party``, a session's copy of this one's party (see the class docstring)."""
        out = copy.copy(self)
        out.party, out.psi = party, None
        return out

    @property
    def lock(self) -> threading.Lock:
        return self._shared.lock

    @property
    def models(self) -> dict[str, Scoring]:
        return self._shared.models

    @property
    def splits(self) -> dict[str, Scoring]:
        return self._shared.splits

    def file(self) -> ScoringFile:
        """The scoring file, indexed by id (read on first use; :meth:`ScoringFile.refresh` reads it again)."""
        sh = self._shared
        if sh.file is None:
            sh.file = ScoringFile(self.party.name, self.path, id_column=self.id_column,
                                  read_options=self.read_options, stream_above_mb=self.stream_above_mb)
        return sh.file

    # ------------------------------------------------------------------ routing
    def resolve(self, sender: str, msg: Any, at: At | None) -> tuple[Handlers, Route, str]:
        """The route of a scoring message (:func:`is_scoring`), under :attr:`lock`: a scoring kind's
        own, or for a method's message of phase ``predict`` the route its open model's role declares."""
        t = type(msg)
        route = self.routes.get(t)
        if route is not None:
            return self, route, f"party {self.party.name!r}"
        split = _split_of(msg)
        sc = self.splits.get(split) if isinstance(split, str) else None
        if sc is None:
            return self, self.routes[_Unstaged], f"party {self.party.name!r}"
        route = sc.role.routes.get(t)
        if route is None:
            raise ProtocolError(f"party {self.party.name!r} ({type(sc.role).__name__}, model {sc.name!r}) does not "
                                f"expect {t.__name__} from {sender!r}")
        return sc.role, route, f"model {sc.name!r}"

    # ------------------------------------------------------------------ handlers
    @handles(OpenModel)
    def on_open_model(self, msg: OpenModel, ctx: Context) -> ModelOpened:
        models = self.models
        sc = models.get(str(msg.model))
        if sc is None or sc.sha256 != msg.sha256 or sc.method != msg.method:
            sc = Scoring(self, msg, ctx)
        # a model closed removes its prepared matrix's folder (rows it staged are copies: they stay)
        old = models.pop(sc.name, None)
        if old is not None and old is not sc:
            old.close()
        models[sc.name] = sc
        while len(models) > MAX_OPEN_MODELS:
            models.pop(next(iter(models))).close()
        self.remember_open()
        sc.file.refresh()
        return ModelOpened(rows_in_file=sc.file.n_rows, version=sc.file.version)

    def remember_open(self) -> None:
        """The open models' names, methods and checksums in the party's working folder
        (:data:`OPEN_MODELS`), for :meth:`restore_open_models` after a restart."""
        folder = self.party.state_dir
        if folder is None:
            return
        from verticalfs.utils.io import write_json_atomic

        Path(folder).mkdir(parents=True, exist_ok=True, mode=0o700)
        write_json_atomic(Path(folder) / OPEN_MODELS, [{"model": sc.name, "method": sc.method, "sha256": sc.sha256}
                                                       for sc in self.models.values()])

    def restore_open_models(self, log: Any = None) -> list[str]:
        """Open again the models the party had open before it stopped (its working folder's
        :data:`OPEN_MODELS`), each checked as ``OpenModel`` checks it: a restarted party scores at
        once, without waiting for the label holder to open them. A model that no longer opens (its
        file removed or changed) is skipped, with a line to ``log``. Returns the names opened."""
        import json

        folder = self.party.state_dir
        path = None if folder is None else Path(folder) / OPEN_MODELS
        if path is None or not path.is_file():
            return []
        try:
            entries = [e for e in json.loads(path.read_text()) if isinstance(e, dict)]
        except (OSError, ValueError):
            return []
        opened = []
        for e in entries[-MAX_OPEN_MODELS:]:
            try:
                msg = OpenModel(model=str(e["model"]), method=str(e["method"]), sha256=str(e["sha256"]))
                with self.lock:
                    sc = Scoring(self, msg, Context(None, SETUP, LABEL_HOLDER))
                    self.models[sc.name] = sc
                opened.append(sc.name)
            except (KeyError, ConfigError, DataError, ProtocolError, OSError) as exc:
                if log is not None:
                    log(f"does not open model {e.get('model')!r} again: {exc}")
        return opened

    # the party policy's PSI limits, as for training's PSI ("auto": in rows of the scoring file)
    @handles(ScoringPsi, ScoringPsiOpen, budget=Budget("PSI requests", lambda m: int(m.n),
                                                       rows=lambda scoring: scoring.file().n_rows))
    def on_scoring_psi(self, msg: ScoringPsi | ScoringPsiOpen, ctx: Context) -> Any:
        """PSI over the scoring file's ids (the party policy's PSI limits count it, as training's PSI);
        the party records the ids it offers (:func:`check_stage`)."""
        from verticalfs.psi import PsiOpen, PsiParty, PsiRequest, PsiServer

        f = self.file()
        f.refresh()
        self.party.psi_state.offer(f.ids)  # StageIds stages only these (check_stage)
        if isinstance(msg, ScoringPsi):  # openmined-psi
            return PsiServer(_ids(f.ids)).reply(PsiRequest(request=msg.request, n=msg.n))
        # the streamed ristretto255 engine over the scoring file's ids (a numpy text array); the state
        # of one run per session (a session's scoring is its own copy, :meth:`fork`)
        self.psi = PsiParty(_ids(f.ids))
        return self.psi.reply(PsiOpen(group=msg.group, n=msg.n, chunk=msg.chunk))

    @handles(ScoringPsiChunk)
    def on_scoring_psi_chunk(self, msg: ScoringPsiChunk, ctx: Context) -> Any:
        from verticalfs.psi import PsiChunk

        if self.psi is None:
            raise ProtocolError(f"party {self.party.name!r}: a scoring PSI chunk arrived before ScoringPsiOpen")
        return self.psi.reply(PsiChunk(index=msg.index, points=msg.points))

    @handles(StageIds)
    def on_stage_ids(self, msg: StageIds, ctx: Context) -> IdsStaged:
        sc = self.models.get(str(msg.model))
        if sc is None:
            raise ProtocolError(f"party {self.party.name!r}: model {msg.model!r} is not open (OpenModel first; a "
                                f"party keeps {MAX_OPEN_MODELS} models open)")
        check_stage(self.party, msg.ids)
        rep = sc.stage(msg)
        splits = self.splits
        splits.pop(str(msg.split), None)
        splits[str(msg.split)] = sc
        while len(splits) > MAX_SPLITS:
            old, owner = next(iter(splits.items()))
            splits.pop(old)
            owner.data.put(old, np.zeros((0, owner.data.n_features), dtype=np.float32))
        return rep

    @handles(_Unstaged)
    def on_unstaged(self, msg: Any, ctx: Context) -> None:
        """A method's message of phase ``predict`` whose split no :class:`StageIds` prepared."""
        raise ProtocolError(f"party {self.party.name!r} received {type(msg).__name__} at phase predict for split "
                            f"{_split_of(msg)!r}, which no StageIds prepared")


def check_stage(runtime: Any, ids: Any) -> None:
    """``StageIds`` names only ids the party offered in its last scoring PSI (issue 50): the label
    holder learned from that PSI which of its ids the party holds, so an honest request names
    nothing else, and ``missing`` (an id the file no longer holds) says nothing the label holder
    could not learn by PSI again. A request with another id is refused whole, without saying
    which, and its ids count against the policy's PSI budget (``psi_ids_per_session``,
    ``psi_ids_per_day``): ``StageIds`` is no membership oracle beyond the PSI the policy allows."""
    from verticalfs.trust import in_sorted

    if not runtime.policy.stage_psi_ids_only:
        return
    offered = runtime.psi_state.offered()
    if offered is None:
        raise ProtocolError(f"party {runtime.name!r} stages only ids of its last scoring PSI, and it has answered "
                            "none: run the scoring PSI first (verticalfs predict and serve-model do)")
    ids = np.asarray([str(i) for i in ids], dtype=str) if len(ids) else np.zeros(0, dtype=str)
    if not in_sorted(offered, ids).all():
        runtime.charge_ids(len(ids))
        raise ProtocolError(f"party {runtime.name!r} refuses StageIds: it names ids outside the party's last scoring "
                            f"PSI ({len(ids)} ids counted against its PSI budget)")
