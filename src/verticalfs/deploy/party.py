"""A party of a deployment: its own file, read and checked at start, aligned when the label holder says.

``verticalfs party serve --config deployment.toml --name telecom`` builds a :class:`DeployedParty`
behind a :class:`~verticalfs.transport.grpc.party.NetworkedParty` and waits. Per run the label holder

1. runs private set intersection with it (:mod:`verticalfs.psi`): the party answers with its ids
   blinded, and learns only how many ids the label holder has;
2. sends :class:`Align`: the ids every party holds (a subset of this party's own ids, in the
   agreed order) and the split of each row (train / validation / test). The party keeps those rows
   of its file, fits its preprocessing on its own training rows
   (:func:`~verticalfs.data.vertical.prepare_block`, exactly what the in-process path runs) and
   answers :class:`Aligned` with how many rows it kept;
3. runs the method: the party's role answers as in-process.

What the party sends over the whole run is its schema (prepared feature names, row counts), what
the method's protocol sends (embeddings, scores, ...), and its PSI reply; never its raw columns.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from verticalfs import method_registry as registry
from verticalfs.configuration import PartyPolicy
from verticalfs.data.choices import IMPUTATIONS, SCALINGS
from verticalfs.data.stream import DEFAULT_STREAM_ABOVE_MB, file_bytes
from verticalfs.data.user import (
    _check_size,
    _read_frames,
    feature_columns,
    handle_datetimes,
    party_block,
    streamed_datetimes,
)
from verticalfs.data.vertical import SPLITS, prepare_block
from verticalfs.deploy.scoring import PartyScoring, is_scoring
from verticalfs.dispatch import Budget, Context, Handlers, Route, handles
from verticalfs.exceptions import DataError, ProtocolError
from verticalfs.party import LocalData, PartyRuntime
from verticalfs.psi import IdsDigest, IdsDigestRequest
from verticalfs.transport.messages import At, message
from verticalfs.trust import TRUST_KEYS, PsiState, private_tree, psi_limit

if TYPE_CHECKING:
    import pandas as pd

    from verticalfs.engine import PartyTable
    from verticalfs.transport.node import Node


@message("core.Align")
class Align:
    """Label holder -> party, phase ``setup``: keep the rows with these ``ids`` in this order;
    ``split[i]`` is row i's split (0 train, 1 validation, 2 test). Preprocessing: ``scaling`` and
    ``impute``, fitted on the party's own training rows."""

    ids: list[Any] | np.ndarray  # a numpy str array since protocol 1.2 (compact on the wire), a list of str before
    split: np.ndarray
    scaling: str
    impute: str


@message("core.Aligned")
class Aligned:
    """Party -> label holder: rows in its file, rows kept, prepared features."""

    rows_in_file: int
    rows_kept: int
    n_features: int


@message("core.PolicyQuery")
class PolicyQuery:
    """Label holder -> party, phase ``setup``: which policy do you apply (so that the label holder
    proposes only what the party accepts, e.g. no column gathering)?"""


@message("core.PolicyReport")
class PolicyReport:
    """Party -> label holder: the rules of its effective policy that shape a run (the party still
    checks every request itself)."""

    release_columns: bool
    accept_labels: bool
    require_secure: bool
    min_key_bits: int
    methods: list[str]


@message("core.StatusQuery")
class StatusQuery:
    """Label holder -> party, phase ``setup``: how are you (``verticalfs board`` over a deployment
    file)? Answered with :class:`StatusReport`; the query's own session ends with the answer."""


@message("core.StatusReport")
class StatusReport:
    """Party -> label holder: its version, the rows of its file, the label holder's sessions it
    keeps (``id``, ``started``, ``idle_s``: one dict each; at most ``max_sessions``), and the saved
    models it has open for scoring (by name). Nothing of its data beyond what ``Aligned`` tells."""

    version: str
    rows_in_file: int
    sessions: list[Any]
    max_sessions: int
    models: list[Any]


@message("core.TrustQuery")
class TrustQuery:
    """Label holder -> party, phase ``setup`` (protocol 1.5): which of issue 50's checks do you run
    (so that the label holder proposes specs within the party's floors and sends the proofs it
    verifies)?"""


@message("core.TrustReport")
class TrustReport:
    """Party -> label holder: the keys of its policy that shape what the label holder must send
    (``verify_labels``, the bottom model's floors, ``max_bins`` ...), by name. The party still
    checks every request itself."""

    rules: dict[str, Any]


#: the party's notes on its own data (extreme values, constant columns), on its host's log
log = logging.getLogger("verticalfs.data")


class DeployedParty(PartyRuntime):
    """A feature party serving its own file (see the module docstring).

    Parameters
    ----------
    name : str
    path : path
        The party's file (``.csv``, ``.csv.gz``, ``.parquet``), with the id column.
    id_column : str
    label_column : str, optional
        Given for the label party's own feature block: the label is not a feature.
    categorical : list of str or "auto"
    na_values, delimiter, encoding : as for :func:`~verticalfs.data.load_party_files`.
    policy : PartyPolicy, optional
        What the party agrees to do (default: :class:`~verticalfs.configuration.PartyPolicy`'s
        safe defaults).
    engine : {"local", "ray"}
        Where the party reads, prepares and PSI-blinds its table (:mod:`verticalfs.engine`): its
        own process, or a Ray cluster (``ray_address``; default: a Ray instance on this host). The
        label holder sees the same messages either way.
    table : str, optional
        Where the ray engine reads the table when not ``path`` (a folder, or a URI such as
        ``s3://bucket/table/``).
    work_dir : path, optional
        The working folder of a table read in pieces (shared with the Ray workers); default: a
        new temporary folder.
    """

    def __init__(self, name: str, path: str | Path, *, id_column: str = "id", label_column: str | None = None,
                 categorical: Sequence[str] | str = (), na_values: Any = None, delimiter: str = ",",
                 encoding: str = "utf-8", max_bytes: int = 1 << 30, allowed_methods: Sequence[str] | None = None,
                 checkpoint_dir: str | Path | None = None, policy: PartyPolicy | None = None,
                 state_dir: str | Path | None = None, stream: bool | None = None,
                 stream_above_mb: float = DEFAULT_STREAM_ABOVE_MB, engine: str = "local",
                 ray_address: str | None = None, table: str | None = None,
                 work_dir: str | Path | None = None, datetime: str = "refuse") -> None:
        path = Path(path)
        from verticalfs.data.preprocess import PartyPreprocessor
        from verticalfs.engine import check_engine, open_table

        check_engine(engine)
        if engine != "local":  # the table on another engine (verticalfs.engine): always in pieces
            stream = True
        if stream is None:  # a large table is read in pieces (data/stream.py), a small one in memory
            stream = file_bytes(path) >= stream_above_mb * 2**20
        self.table: PartyTable | None = None  # its table read in pieces (a StreamedTable, or on an engine)
        self.engine = engine
        self.frame: pd.DataFrame | None = None
        self._lookup: Any = None  # an IdLookup, or the ray engine's memory-mapped SortedIds
        auto = isinstance(categorical, str)
        if stream:
            if engine == "local" and path.is_file():
                _check_size(name, path, max_bytes)
            # ``table``: where the engine reads it (a URI pyarrow reads), when not the local ``path``
            source = table if table is not None else path
            tab = open_table(engine, name, source, id_column=id_column, ray_address=ray_address, work_dir=work_dir,
                             **({"na_values": na_values, "delimiter": delimiter, "encoding": encoding}
                                if engine == "local" else {}))
            self._finalizer = weakref.finalize(self, tab.close)
            schema = tab.schema_frame()
            dates: dict[str, str] = {}  # derived date columns (none in pieces: refused or dropped)
            skip = {id_column, label_column, *([] if auto else categorical)}
            schema = schema.drop(columns=streamed_datetimes(name, tab, schema, path, skip=skip, how=datetime))
            cols, cats = feature_columns(name, schema, path, id_column=id_column,
                                         label_column=label_column, declared=[] if auto else list(categorical),
                                         auto=auto)
            tab.check_values(cols, cats)  # before anyone connects
            # its ids sorted, with their rows (an IdLookup, or the ray engine's memory-mapped SortedIds)
            lookup = tab.id_lookup()
            self.table, self._lookup = tab, lookup
            ids: np.ndarray = lookup.sorted  # its ids for the PSI (a set: the order does not matter)
            n_rows = len(lookup)
        else:
            frame = _read_frames({name: path}, id_column=id_column, na_values=na_values, delimiter=delimiter,
                                 encoding=encoding, max_bytes=max_bytes)[name]
            frame, dates = handle_datetimes(name, frame, path, id_column=id_column, label_column=label_column,
                                            declared=[] if auto else list(categorical), how=datetime)
            cols, cats = feature_columns(name, frame, path, id_column=id_column, label_column=label_column,
                                         declared=[] if auto else list(categorical), auto=auto)
        if not cols:
            raise DataError(f"party {name!r}: {str(path)!r} holds no feature column besides the id and label "
                            "(a label file without features is read by `verticalfs run`, it serves nothing)")
        if not stream:
            PartyPreprocessor.check_values(name, frame[cols], cats, where=str(path))  # before anyone connects
            indexed = frame.set_index(id_column)[cols]
            self.frame = indexed
            ids, n_rows = indexed.index.to_numpy(dtype=str), len(indexed)
        self.path, self.id_column = path, id_column
        self.stream_above_mb = float(stream_above_mb)  # its scoring file's rule too (deploy/scoring.py)
        self.read_options = {"na_values": na_values, "delimiter": delimiter, "encoding": encoding,
                             "max_bytes": max_bytes}
        self.columns, self.categorical, self.dates = cols, cats, dates
        self.n_rows = n_rows  # rows in its file
        self._aligned_dir: Path | None = None  # its streamed matrices' folder (the latest alignment)
        super().__init__(LocalData(name, [], {}), ids=ids,
                         role_for=registry.party_roles(), allowed_methods=allowed_methods,
                         checkpoint_dir=checkpoint_dir,
                         policy=PartyPolicy.model_validate({}) if policy is None else policy)
        on = self.table.psi_executor() if self.table is not None else None
        if on is not None:  # the PSI blinding on the engine's workers (verticalfs.engine.ray.RayExecutor)
            self.psi_options = {"workers": on[1], "parallel": engine}
        self.aligned = False
        #: its scoring of saved models (:meth:`enable_scoring`); ``None``: it scores nothing
        self.scoring: PartyScoring | None = None
        self.psi_state = PsiState(state_dir)  # its PSI budget per day and last scoring PSI survive a restart
        #: the party's working folder (its PSI digest secret, ``psi.key``)
        self.state_dir = None if state_dir is None else Path(state_dir)
        self._secret: bytes | None = None
        self._digests: dict[tuple[bool, int], str] = {}
        #: the sessions its server keeps (set by the server: transport/grpc/party.py), for StatusQuery
        self.sessions_view: Callable[[], tuple[list[dict[str, Any]], int]] | None = None

    def enable_scoring(self, scoring_path: str | Path, *, stream_above_mb: float | None = None) -> PartyScoring:
        """Score saved models over ``scoring_path`` (its ``predict_file``, or its training file; read
        when a model is first opened), streamed from ``stream_above_mb`` MiB (default: the party's own
        setting, as for its training file)."""
        self.scoring = PartyScoring(self, scoring_path=Path(scoring_path), id_column=self.id_column,
                                    read_options=self.read_options,
                                    stream_above_mb=self.stream_above_mb if stream_above_mb is None
                                    else stream_above_mb)
        return self.scoring

    def fork(self) -> DeployedParty:
        """A session's own copy (:meth:`PartyRuntime.fork`): not aligned yet; its scoring shares the
        open models, its scoring PSI is its own."""
        rt = super().fork()
        assert isinstance(rt, DeployedParty)
        rt.aligned = False
        rt.scoring = None if self.scoring is None else self.scoring.fork(rt)
        return rt

    def _digest(self, scoring: bool) -> IdsDigest:
        """The keyed digest of the ids of its training file (or scoring file), computed once per file version."""
        from verticalfs.psi import ids_digest, party_secret

        version = 0
        if scoring:
            if self.scoring is None:
                raise ProtocolError(f"party {self.name!r} has no scoring file")
            # under the scoring lock: a streamed file read again removes the previous version's
            # working folder, which an open model may be preparing into
            with self.scoring.lock:
                f = self.scoring.file()
                f.refresh()
                version, ids = f.version, f.ids
        key = (scoring, version)
        if key not in self._digests:
            if self._secret is None:
                self._secret = party_secret(self.state_dir)
            self._digests[key] = ids_digest(cast("Sequence[Any]", ids if scoring else self.ids), self._secret)
        return IdsDigest(digest=self._digests[key])

    # ------------------------------------------------------------------ dispatch
    def handle(self, sender: str, msg: Any, at: At | None, node: Node | None) -> Any:
        """As :meth:`PartyRuntime.handle`; a scoring message (:func:`~verticalfs.deploy.scoring.is_scoring`)
        is resolved and answered under the scoring lock (sessions share the open models)."""
        if self.scoring is not None and is_scoring(msg, at):
            with self.scoring.lock:
                return super().handle(sender, msg, at, node)
        return super().handle(sender, msg, at, node)

    def resolve(self, sender: str, msg: Any, at: At | None) -> tuple[Handlers, Route, str]:
        """A scoring message's route is its scoring's (:meth:`PartyScoring.resolve`), else as
        :meth:`PartyRuntime.resolve`."""
        if self.scoring is not None and is_scoring(msg, at):
            return self.scoring.resolve(sender, msg, at)
        return super().resolve(sender, msg, at)

    @handles(IdsDigestRequest)
    def on_ids_digest_request(self, msg: IdsDigestRequest, ctx: Context) -> IdsDigest:
        return self._digest(bool(msg.scoring))

    @handles(PolicyQuery)
    def on_policy_query(self, msg: PolicyQuery, ctx: Context) -> PolicyReport:
        pol = self.policy
        return PolicyReport(release_columns=pol.release_columns, accept_labels=pol.accept_labels,
                            require_secure=pol.require_secure, min_key_bits=int(pol.min_key_bits),
                            methods=["all"] if pol.methods == "all" else list(pol.methods))

    @handles(TrustQuery)
    def on_trust_query(self, msg: TrustQuery, ctx: Context) -> TrustReport:
        return TrustReport(rules={k: getattr(self.policy, k) for k in TRUST_KEYS})

    # the ids of an Align are within the label holder's intersection: they count against the ids'
    # budgets only when refused (some not held: one bit about them, issue 50); a repeat of an id set
    # already aligned on the same file is a free request (verticalfs.budget)
    @handles(Align, budget=Budget("alignments", lambda m: len(m.ids), charge=False,
                                  key=lambda party, m: party.align_key(m.ids)))
    def on_align(self, msg: Align, ctx: Context) -> Aligned:
        rep = self._align(msg)
        key = self.align_key(msg.ids)
        if key is not None:
            self.psi_budget.remember(key)  # the same set again (a cached intersection) is free
        return rep

    def align_key(self, ids: Any) -> str | None:
        """The key of an ``Align``'s id list for the PSI budget (:mod:`verticalfs.budget`): a keyed
        hash of this party's ids digest (its file) and the ids in the order sent (the label holder
        sends an intersection in its one natural order), hashed in place (no copy of the ids).
        ``None`` (charged, never free) before the label holder asked the digest of its ids, or
        over ``max_psi_ids`` (refused anyway)."""
        import hashlib
        import hmac

        from verticalfs.psi import party_secret

        digest = self._digests.get((False, 0))
        if digest is None or len(ids) > psi_limit(self.policy, "max_psi_ids", self.psi_rows()):
            return None
        if self._secret is None:  # (a session's copy of the runtime: the party's one secret)
            self._secret = party_secret(self.state_dir)
        h = hmac.new(self._secret, digest.encode(), hashlib.sha256)
        if isinstance(ids, np.ndarray):
            h.update(str(ids.dtype).encode() + b"\x00")
            h.update(np.ascontiguousarray(ids).view(np.uint8).data)
        else:
            for i in ids:
                h.update(str(i).encode() + b"\x00")
        return h.hexdigest()

    @handles(StatusQuery)
    def on_status_query(self, msg: StatusQuery, ctx: Context) -> StatusReport:
        self.session_over = True  # a status query is a session of its own: ended with the answer
        return self._status()

    def _status(self) -> StatusReport:
        from verticalfs.version import __version__

        sessions, most = self.sessions_view() if self.sessions_view is not None else ([], 0)
        models: list[str] = []
        if self.scoring is not None:
            with self.scoring.lock:  # (sessions open and close models meanwhile)
                models = [str(m) for m in self.scoring.models]
        return StatusReport(version=__version__, rows_in_file=int(self.n_rows), sessions=sessions,
                            max_sessions=int(most), models=models)

    def psi_rows(self) -> int:
        return int(self.n_rows)

    def _align(self, msg: Align) -> Aligned:
        # (counted by the alignments budget before it runs, verticalfs.dispatch)
        # a text array since protocol 1.2 (serde's compact text array), a list of str before
        if isinstance(msg.ids, np.ndarray) and (msg.ids.dtype.kind != "U" or msg.ids.ndim != 1):
            raise ProtocolError(f"party {self.name!r}: Align's ids are a 1-D text array, got dtype {msg.ids.dtype} "
                                f"of shape {msg.ids.shape}")
        ids = msg.ids if isinstance(msg.ids, np.ndarray) else [str(i) for i in msg.ids]
        codes = np.asarray(msg.split).reshape(-1)
        if codes.shape[0] != len(ids):
            raise ProtocolError(f"party {self.name!r}: Align gives {len(ids)} ids but {codes.shape[0]} split codes")
        if len(ids) and (int(codes.min()) < 0 or int(codes.max()) > 2):
            raise ProtocolError(f"party {self.name!r}: split codes must be 0, 1 or 2")
        if msg.scaling not in SCALINGS or msg.impute not in IMPUTATIONS or msg.impute == "auto":
            raise ProtocolError(f"party {self.name!r}: unknown scaling {msg.scaling!r} or imputation {msg.impute!r}")
        if self._lookup is not None:  # sorted, not a set of Python strings
            pos = self._lookup.positions(ids)
            if len(pos) > 1 and (pos >= 0).all():  # an id listed twice: a row marked twice (1 byte a row)
                seen = np.zeros(self.n_rows, dtype=bool)
                seen[pos] = True
                if int(np.count_nonzero(seen)) != len(pos):
                    raise ProtocolError(f"party {self.name!r}: Align lists an id twice")
                del seen
        elif self.frame is not None:
            if len(set(ids)) != len(ids):
                raise ProtocolError(f"party {self.name!r}: Align lists an id twice")
            pos = self.frame.index.get_indexer(ids)
        else:  # (a party holds its table in memory or in pieces)
            raise ProtocolError(f"party {self.name!r} holds no table")
        if (pos < 0).any():  # how many (or which) would make Align a membership oracle
            self.charge_ids(len(ids))
            raise ProtocolError(f"party {self.name!r}: some of the ids to align are not in its file; the label "
                                "holder's intersection is wrong")
        if self.table is not None:  # in pieces: memory-mapped float32 matrices in its working folder
            # a folder of its own per alignment: several sessions (each a copy of this runtime) may
            # align at once; a session's earlier folder is removed (its open maps stay valid)
            out = self.table.work_dir / f"aligned-{secrets.token_hex(6)}"
            pp, maps = self.table.prepare(pos, codes, self.columns, self.categorical, scaling=msg.scaling,
                                          impute=msg.impute, splits=SPLITS, out_dir=out)
            private_tree(out)  # its prepared rows: 0600 in a 0700 folder
            self.data = LocalData(self.name, pp.feature_names, maps, pp.sources)
            self.preprocessor = pp
            if self._aligned_dir is not None:
                shutil.rmtree(self._aligned_dir, ignore_errors=True)
            self._aligned_dir = out
        else:
            assert self.frame is not None  # (checked above)
            rows = self.frame.iloc[pos].reset_index(drop=True)
            block = party_block(self.name, rows, self.columns, self.categorical, self.path, self.dates)
            idx = {s: np.flatnonzero(codes == k) for k, s in enumerate(SPLITS)}
            prepared = prepare_block(block, idx, scaling=msg.scaling, impute=msg.impute)
            self.data = LocalData.of(prepared)
            self.preprocessor = prepared.preprocessor
        for w in self.preprocessor.warnings:  # its own columns: said here, on its own host (issue 53)
            log.warning(w)
        self.role, self.method = None, None
        self.aligned = True
        return Aligned(rows_in_file=self.n_rows, rows_kept=len(pos), n_features=len(self.data.feature_names))
