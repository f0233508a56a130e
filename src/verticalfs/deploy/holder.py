"""The label holder's side of a deployment: connect, intersect the ids, align the parties, run.

:func:`connect` does everything before a method runs, from the deployment file alone:

1. reads the label party's file (its labels, and its other columns as its own feature block,
   served by this process on the label party's address like any other party);
2. connects to every party (an unreachable one is an error naming it and its address within
   ``connect_timeout``);
3. intersects the ids with every feature party at once by ECDH-PSI (:mod:`verticalfs.psi`, phase
   ``setup``), or takes a party's result from the label holder's cache while its ids are unchanged;
4. asks each party its policy (:class:`~verticalfs.deploy.party.PolicyQuery`: whether it
   releases columns decides how a filter method is trained, :func:`federated_method`), orders the
   intersection as the in-process path does, codes the labels, draws the split
   (:func:`~verticalfs.data.vertical.split_indices`, stratified, with the run's seed) and sends
   each party :class:`~verticalfs.deploy.party.Align` (the aligned ids and each row's split);
5. learns the parties' schemas (prepared feature names) by the metered ``Hello``.

The result is a :class:`~verticalfs.federation.Federation` over gRPC and a label-holder *view* of
the data (labels, and per party only the public feature names) that :func:`verticalfs.run` takes
as it takes in-process data; :func:`run_deployment` does both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from verticalfs.data.stream import IdLookup
from verticalfs.data.user import _labels, _read_frames, _sort_ids
from verticalfs.data.vertical import SPLITS, LabelData, PartyData, PreparedData, split_indices
from verticalfs.deploy.config import Deployment
from verticalfs.deploy.party import Align, Aligned, DeployedParty, PolicyQuery, PolicyReport
from verticalfs.exceptions import ConfigError, DataError, TransportError, VerticalFSError
from verticalfs.federation import SETUP, Federation
from verticalfs.names import LABEL_HOLDER

if TYPE_CHECKING:
    from verticalfs.api import RunResult
    from verticalfs.configuration import PartyPolicy
    from verticalfs.data.table import Task
    from verticalfs.run_events import RunEvents
    from verticalfs.transport.grpc.party import NetworkedParty


@dataclass
class Connected:
    """A federation ready to run a method, and what the set-up found."""

    federation: Federation
    data: PreparedData  # the label holder's view: labels, and the parties' public feature names
    rows: dict[str, dict[str, int]] = field(default_factory=dict)  # party -> rows_in_file, rows_kept
    n_aligned: int = 0
    local: Any = None  # the label party's own feature block, served here
    channel: Any = None
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)  # party -> the policy it reported
    session: str = ""  # this run's session id at the parties (transport/grpc/party.py)
    psi_seconds: float = 0.0  # wall time of the private set intersection (all parties at once)
    psi_cached: list[str] = field(default_factory=list)  # parties whose intersection came from the cache

    def summary(self) -> str:
        lines = [f"{self.n_aligned} rows in every party's file (private set intersection):"]
        for p, r in self.rows.items():
            lines.append(f"  {p}: kept {r['rows_kept']} of {r['rows_in_file']} rows")
        return "\n".join(lines)

    def close(self) -> None:
        if self.channel is not None:
            if self.federation is not None:
                end_session(self.federation, self.federation.party_names)
            self.channel.close()
        if self.local is not None:
            stop_own_block(self.local)


def serve_own_block(dep: Deployment) -> NetworkedParty:
    """The label party's own feature block for one run, served by this run's process (started): on
    its address, or, when another run of the label party holds that address, on a free port of the
    same host, announced to the parties with each call of the run (its ``route``: their messages to
    the label party within this run go there). A run never uses another run's block: killing one
    run leaves every other run whole."""
    import sys

    lp = dep.label_party
    try:
        local = serve_party(dep, lp).start()
        local.route = None
        return local
    except TransportError as exc:
        if "cannot listen" not in str(exc):
            raise
    entry = dep.party(lp)
    local = serve_party(dep, lp, listen=f"{entry.listen.rpartition(':')[0]}:0").start()
    local.route = f"{entry.address.rpartition(':')[0]}:{local.server.port}"
    sys.stderr.write(f"party {lp}'s address {entry.listen} is in use (another run of this label party): this run "
                     f"serves {lp}'s columns at {local.route}\n")
    return local


def stop_own_block(local: NetworkedParty) -> None:
    """Stop the label party's block served for this run (no other run uses it)."""
    local.stop()


def new_session() -> str:
    """A session id for one run at the parties (chosen by the label holder)."""
    import secrets

    return secrets.token_hex(6)


def end_session(fed: Federation, parties: Sequence[str]) -> None:
    """Tell each party the run is over (it frees the session's place); a party already gone is skipped."""
    from verticalfs.exceptions import VerticalFSError
    from verticalfs.transport.messages import Ack, EndSession

    for p in parties:
        try:
            fed.proxy(p).request(EndSession(), SETUP, expect=Ack)
        except VerticalFSError:
            pass


def serve_party(dep: Deployment, name: str, *, max_bytes: int | None = None,
                checkpoint_dir: str | Path | None = None, policy: PartyPolicy | None = None,
                engine: str | None = None, ray_address: str | None = None,
                listen: str | None = None) -> NetworkedParty:
    """The :class:`~verticalfs.transport.grpc.party.NetworkedParty` of party ``name`` (not started):
    its file read and checked now; its checkpoints in ``checkpoint_dir`` (default: the deployment's);
    its ``policy`` (default: its ``[parties.<name>.policy]``, see :func:`party_policy`); files up to
    ``max_bytes`` (default: the deployment's ``max_file_mb``); its ``engine`` and ``ray_address``
    (default: its table's keys; :mod:`verticalfs.engine`); listening on ``listen`` (default: its
    ``listen`` address)."""
    from verticalfs.transport.grpc.party import NetworkedParty

    e = dep.party(name)
    dep.check_keys(name)
    policy = party_policy(dep, name) if policy is None else policy
    runtime = DeployedParty(name, e.file, id_column=dep.id_column,
                            label_column=dep.label_column if name == dep.label_party else None,
                            categorical=e.categorical, na_values=dep.na_values, delimiter=dep.delimiter,
                            encoding=dep.encoding, max_bytes=dep.max_bytes if max_bytes is None else max_bytes,
                            checkpoint_dir=checkpoint_dir if checkpoint_dir is not None else dep.checkpoint_dir(name),
                            policy=policy, state_dir=dep.state_dir(name), stream_above_mb=dep.stream_above_mb,
                            engine=engine or e.engine, ray_address=ray_address or e.ray_address, table=e.table,
                            work_dir=e.work_dir, datetime=e.datetime)
    from verticalfs.deploy.scoring import scoring_path

    runtime.enable_scoring(scoring_path(dep, name))
    party = NetworkedParty(runtime, e.listen if listen is None else listen, tls=dep.tls(name),
                           addresses=dep.addresses, insecure=dep.insecure, connect_timeout=dep.connect_timeout)
    runtime.sessions_view = party.session_table  # its StatusQuery reports the server's sessions
    return party


def party_policy(dep: Deployment, name: str, override: str | Path | None = None) -> PartyPolicy:
    """The effective policy of party ``name``: its ``[parties.<name>.policy]`` with the keys of the
    policy file ``override`` (``party serve --policy``) in place. The label party's own feature
    block, served by the label holder's process, releases its columns and sees its labels: both
    are already at the label holder."""
    from verticalfs.configuration import PartyPolicy, read_policy

    pol = dep.party(name).policy
    if override is not None:
        pol = read_policy(override, pol)
    if name == dep.label_party:  # its columns and labels are the label holder's own: nothing to guard from it
        # (and no PSI budget: what it would guard is the label holder's own)
        loose = PartyPolicy.permissive()
        pol = pol.model_copy(update={"release_columns": True, "accept_labels": True, "max_psi_requests": 2**62, **{
            k: getattr(loose, k) for k in ("own_randomness", "min_hidden_layers", "max_embedding_fraction", "min_lr",
                                           "max_lr", "min_batch_size", "max_batch_size", "verify_labels",
                                           "min_label_rows", "min_bin_rows", "allow_findings", "own_models_only",
                                           "stage_psi_ids_only")}})
    return pol


def connect(dep: Deployment, *, seed: int = 0, call_timeout: float | None = None, events: Any = None,
            on_policies: Any = None) -> Connected:
    """Steps 1-5 of the module docstring (each party's policy is asked first, right after it is
    reached: ``on_policies(policies)`` is told them before the private set intersection).
    ``events`` (a :class:`~verticalfs.run_events.RunEvents`) hears the ``psi`` and ``align`` phases."""
    from contextlib import nullcontext

    from verticalfs.psi import PsiCache, intersect_all

    def phase(name: str) -> Any:
        return nullcontext() if events is None else events.phase(name)

    lp = dep.label_party
    entry = dep.party(lp)
    dep.check_keys(LABEL_HOLDER, lp)
    ids, labels, all_columns = _label_frame(dep, lp, entry.file)
    own_features = [c for c in all_columns if c not in (dep.id_column, dep.label_column)]
    names = [p for p in dep.parties if p != lp or own_features]
    out = Connected(federation=None, data=None, session=new_session())  # type: ignore[arg-type]
    try:
        if own_features:
            out.local = serve_own_block(dep)
        channel = dep.channel(call_timeout=call_timeout, max_message_bytes=entry.policy.max_message_bytes,
                              session=out.session)
        if out.local is not None and out.local.route is not None:  # its block elsewhere than its address
            channel.route(lp, out.local.route)
        out.channel = channel
        channel.wait_ready(names)
        fed = Federation(LabelData(y={s: np.zeros(0) for s in SPLITS}, task="binary", n_classes=2), channel, names)
        out.federation = fed  # (ends the session at the parties on close, also after a failure)
        if events is not None:
            events.ledger = fed.ledger
        for p in names:  # each party's own policy (its --policy file may override the deployment file's)
            if p != lp:
                pol = fed.proxy(p).request(PolicyQuery(), SETUP, expect=PolicyReport)
                out.policies[p] = {"release_columns": bool(pol.release_columns),
                                   "accept_labels": bool(pol.accept_labels),
                                   "require_secure": bool(pol.require_secure), "min_key_bits": int(pol.min_key_bits),
                                   "methods": [str(m) for m in pol.methods]}
                out.policies[p].update(trust_rules(fed.proxy(p)))
        fed.party_rules = {p: dict(pol) for p, pol in out.policies.items()}  # what each party checks (issue 50)
        if on_policies is not None:
            on_policies(dict(out.policies))
        # the ids as a numpy text array end to end (PSI, the lookup of the labels, Align): a few bytes
        # an id, not a Python string each
        # a large label file's ids come sorted with their file rows (an IdLookup: no file-order copy,
        # no second sort to find the labels of the intersection)
        look = ids if isinstance(ids, IdLookup) else None
        with phase("psi"):
            psi = intersect_all([fed.proxy(p) for p in names if p != lp],
                                cast("Sequence[Any]", ids if look is None else look.sorted),
                                cache=PsiCache(dep.state_dir(LABEL_HOLDER)), engine=dep.psi_engine, text_array=True)
        out.psi_seconds, out.psi_cached = psi.seconds, psi.cached
        if not len(psi.ids):
            raise DataError(f"no id in column {dep.id_column!r} is held by every party; check that the files "
                            "use the same ids (compared as text: '007' and '7' differ)")
        common = _sort_ids(np.asarray(psi.ids))
        if look is None:  # (the ids in file order: their lookup only now, after the PSI)
            look = IdLookup(cast("np.ndarray", ids))
        y_raw = labels.iloc[look.positions(common)]
        del ids, look
        y, task, class_names = _labels(y_raw.reset_index(drop=True), dep.task, entry.file, dep.label_column)
        name = Path(entry.file).name
        idx = split_indices(y, task, seed=seed, test_size=dep.test_size, val_size=dep.val_size, name=name)
        codes = np.zeros(len(common), dtype=np.int8)
        for k, s in enumerate(SPLITS):
            codes[idx[s]] = k
        align = Align(ids=common, split=codes, scaling=dep.scaling, impute=dep.impute)
        with phase("align"):
            for p in names:
                rep = fed.proxy(p).request(align, SETUP, expect=Aligned)
                out.rows[p] = {"rows_in_file": int(rep.rows_in_file), "rows_kept": int(rep.rows_kept)}
        out.rows.setdefault(lp, {"rows_in_file": len(labels), "rows_kept": len(common)})
        ys = {s: y[idx[s]] for s in SPLITS}
        if task == "regression":
            ys = {s: v.astype(np.float32) for s, v in ys.items()}
        fed.labels = LabelData(y=ys, task=cast("Task", task),
                               n_classes=0 if task == "regression" else len(class_names or []), class_names=class_names)
        schema = fed.schema()
        parties = [PartyData(name=p, feature_names=list(h.feature_names), X={},
                             sources=None if h.sources is None else list(h.sources)) for p, h in schema.items()]
        out.data = PreparedData(name=name, parties=parties, labels=fed.labels,
                                ground_truth={p.name: np.zeros(p.n_features, dtype=bool) for p in parties},
                                ids={s: np.asarray(common[idx[s]]) for s in SPLITS},
                                warnings=_named_like_label(parties, dep))
        fed.model_names_only = True
        fed.own_party = lp if own_features else None
        out.federation = fed
        out.n_aligned = len(common)
        return out
    except BaseException:
        out.close()
        raise


def trust_rules(proxy: Any) -> dict[str, Any]:
    """The rules of issue 50 a party checks (:class:`~verticalfs.deploy.party.TrustReport`); a party
    of protocol 1.3 or older runs none of them (``{}``)."""
    from verticalfs.deploy.party import TrustQuery, TrustReport
    from verticalfs.exceptions import ProtocolError

    try:
        rep = proxy.request(TrustQuery(), SETUP, expect=TrustReport)
    except ProtocolError:
        return {}
    return {str(k): v for k, v in dict(rep.rules).items()}


def _label_frame(dep: Deployment, lp: str, path: Path) -> tuple[np.ndarray | IdLookup, pd.Series, list[str]]:
    """The label party's ids (a numpy text array, file order), its labels (a series named after the
    label column, file order), and its file's columns. A file at least ``stream_above_mb`` large is
    not read whole: only its id and label columns (its features are served by its own
    :class:`~verticalfs.deploy.party.DeployedParty`, which reads them in pieces), and its ids are
    given as an :class:`~verticalfs.data.stream.IdLookup` (sorted, with their file rows)."""
    from verticalfs.data.stream import StreamedTable, file_bytes

    ids: np.ndarray | IdLookup | None = None
    labels: pd.Series | None = None
    if file_bytes(path) >= dep.stream_above_mb * 2**20:
        table = StreamedTable(lp, path, id_column=dep.id_column, na_values=dep.na_values, delimiter=dep.delimiter,
                              encoding=dep.encoding)
        try:
            columns = list(table.columns)
            if dep.label_column in columns:
                ids = table.id_lookup()
                labels = table.column(dep.label_column).rename(dep.label_column)
        finally:
            table.close()
    else:
        frame = _read_frames({lp: path}, id_column=dep.id_column, na_values=dep.na_values,
                             delimiter=dep.delimiter, encoding=dep.encoding, max_bytes=dep.max_bytes)[lp]
        columns = list(frame.columns)
        if dep.label_column in columns:
            ids = frame[dep.id_column].to_numpy(dtype=str)
            labels = frame[dep.label_column].reset_index(drop=True)
    if dep.label_column not in columns:
        cols = [c for c in columns if c != dep.id_column]
        raise DataError(f"party {lp!r}: label column {dep.label_column!r} is not in {str(path)!r}; its "
                        f"columns are {cols}. Fix label_column or label_party in {str(dep.path)!r}")
    assert ids is not None and labels is not None  # (read with the label column)
    return ids, labels, columns


def _named_like_label(parties: Sequence[PartyData], dep: Deployment) -> list[str]:
    """A party's column named like the label (the label holder sees only names: a party whose file is
    the label party's would serve the label as a feature)."""
    from verticalfs.data.user import named_like

    out = []
    for p in parties:
        cols = [c for c in dict.fromkeys(p.sources or p.feature_names) if named_like(c, dep.label_column)]
        for c in cols:
            out.append(f"party {p.name!r} serves a column {c!r} named like the label column {dep.label_column!r} "
                       f"of {dep.label_party!r}; if it is a copy of the label (e.g. its file in {str(dep.path)!r} is "
                       "the label party's), the model learns the answer from it: drop the column or fix its file")
    return out


#: the split model a filter method's selection is trained with when the parties keep their columns
FEDERATED_TRAINER = "vfl"


def federated_method(dep: Deployment, method: str, params: Mapping[str, Any] | None, *,
                     keeping: list[str] | None = None) -> tuple[str, dict[str, Any] | None, str | None]:
    """The method a deployment runs for ``method``: a filter method (``feast``, ``mi``, FATE's ...,
    or a pipeline ending in one) trains its evaluation classifier on raw columns gathered at the
    label holder, which a party's policy refuses by default (``release_columns = false``); unless
    every feature party's policy in ``dep`` releases them, the method becomes ``<method>+vfl``:
    the parties still select, then the label holder trains a split model on the selected columns
    (the parameters given go to the selecting stage, ``epochs`` to ``vfl``). ``raw`` selects
    nothing, so it is not converted (and the parties refuse it). ``keeping``: the parties that
    keep their columns, as they reported it (default: from ``dep``'s policies). Returns the
    method, its parameters and why it changed (``None``: unchanged)."""
    from verticalfs.methods import registry
    from verticalfs.methods.filter import FilterMethod
    from verticalfs.methods.pipeline import Pipeline

    cls = registry.get(method)
    last = cls.stage_classes[-1] if issubclass(cls, Pipeline) else cls
    keep = ([n for n, e in dep.parties.items() if n != dep.label_party and not e.policy.release_columns]
            if keeping is None else list(keeping))
    if not issubclass(last, FilterMethod) or last.selects_all or not keep:
        return method, None if params is None else dict(params), None
    new = f"{method}+{FEDERATED_TRAINER}"
    out = dict(params or {})
    if not issubclass(cls, Pipeline):
        out = {(k if k == "epochs" else f"{method}.{k}"): v for k, v in out.items()}
    stages = (list(zip(cls.stage_names, cls.stage_classes, strict=True)) if issubclass(cls, Pipeline)
              else [(method, cls)])
    for name, stage in stages:  # n_select="auto" gathers the candidates' columns to choose N: refused here
        if not issubclass(stage, FilterMethod) or stage.selects_all:
            continue
        n = out.get(f"{name}.n_select", stage.Params.__dataclass_fields__["n_select"].default)
        if isinstance(n, str) and n.strip().lower() == "auto":
            raise ConfigError(f"{name}: n_select='auto' (its default) chooses N on the label holder's validation rows "
                              f"with the candidates' columns, which {', '.join(keep)} keep(s) (release_columns = "
                              f"false); give the number of features to select (--param n_select=N"
                              f"{'' if name == method else f', or {name}.n_select=N'}), or let the parties release "
                              "their columns")
    why = (f"{method} trains its classifier on raw columns gathered at the label holder, and {', '.join(keep)} "
           f"keep(s) their columns (release_columns = false): the parties selected with {method}, then a split "
           f"model ({FEDERATED_TRAINER}) was trained federatedly on the selected columns")
    return new, out, why


#: what a party that went away (killed, restarted, stopped, cut off) is reported as: the run waits for it
GONE = ("is gone or unreachable", "stopped answering", "has no session", "is not reachable within",
        "did not answer within")
#: a run waits for parties that went away at most this many times
MAX_REJOINS = 10


class _HeldFailure:
    """The run's events for one attempt of :func:`run_deployment`: a failure is held (the run may
    wait for the party and go on), everything else reaches the events."""

    def __init__(self, events: Any) -> None:
        object.__setattr__(self, "_events", events)
        object.__setattr__(self, "failed", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._events, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._events, name, value)

    def fail(self, exc: BaseException) -> None:
        object.__setattr__(self, "failed", exc)


def run_deployment(dep: Deployment | str | Path, method: str, *, seed: int = 0,
                   params: Mapping[str, Any] | None = None, codec: str | None = None, callbacks: Sequence[Any] = (),
                   progress: bool | None = None, save_model: str | Path | None = None, threads: int | None = 1,
                   checkpoint_dir: str | Path | None = None, resume: bool = False) -> RunResult:
    """Run ``method`` over a deployment from the label party's host; returns the
    :class:`~verticalfs.api.RunResult` (its ``info["deployment"]`` says how many rows each party kept).

    ``callbacks`` as for :func:`verticalfs.run`; the events start once the parties' policies are
    known (``run_start`` carries them, and the method the policies let run), then the ``psi`` and
    ``align`` phases, then the method's. ``progress``: deprecated, as for :func:`verticalfs.run`.

    A party that goes away mid-run (killed, restarted, stopped: a :class:`TransportError` naming
    it, :data:`GONE`) is waited for, up to the deployment's ``rejoin_window`` seconds (a warning
    event says so); once it answers again the run sets every party up again (a new session; PSI
    from the cache, so only digests cross) and continues from its last checkpoint (``checkpoints``
    set; else from the method's start), ending with the metrics of an uninterrupted run.
    ``info["deployment"]["rejoined"]`` lists each such wait."""
    from verticalfs.api import run_observed, with_progress
    from verticalfs.run_events import RunEvents, split_callbacks

    if not isinstance(dep, Deployment):
        dep = Deployment.load(dep)
    asked = method
    hooks, sinks = split_callbacks(with_progress(callbacks, progress, method, dep.task or "binary"))
    events = RunEvents(sinks) if sinks else None
    chosen: dict[str, Any] = {}

    def started(policies: dict[str, dict[str, Any]]) -> None:
        keeping = [p for p, pol in policies.items() if not pol["release_columns"]]
        chosen["method"], chosen["params"], chosen["why"] = federated_method(dep, asked, params, keeping=keeping)
        if events is not None:
            events.start(method=chosen["method"], dataset=Path(dep.party(dep.label_party).file).name,
                         parties=[p for p in dep.parties if p != dep.label_party], label_party=dep.label_party,
                         mode="deployment", seed=seed, params=dict(chosen["params"] or {}), policies=policies)

    ckdir = checkpoint_dir if checkpoint_dir is not None else dep.checkpoint_dir(LABEL_HOLDER)
    rejoined: list[dict[str, Any]] = []
    mode: bool | str = resume
    conn: Connected | None = None
    try:
        conn = connect(dep, seed=seed, events=events, on_policies=started)
        while True:
            attempt = None if events is None else _HeldFailure(events)
            try:
                method, run_params, why = chosen["method"], chosen["params"], chosen["why"]
                res = run_observed(method, conn.data, hooks=hooks, events=cast("RunEvents | None", attempt),
                                   seed=seed, params=run_params,
                                   codec=codec, bandwidths_mbps=(10.0, 100.0), data_config=None,
                                   federation=conn.federation, threads=threads, save_model=save_model,
                                   checkpoint_dir=ckdir, resume=mode if ckdir is not None else False)
                break
            except VerticalFSError as exc:
                party = exc.party
                if (not isinstance(exc, TransportError) or party is None or party == dep.label_party
                        or dep.rejoin_window <= 0 or not any(t in str(exc) for t in GONE)
                        or len(rejoined) >= MAX_REJOINS):
                    raise
                conn.close()
                conn = None
                conn = _rejoin(dep, seed, exc, party, rejoined, events)
                mode = "if-any"  # this run's last checkpoint, if an epoch completed
        res.info["deployment"] = {"file": str(dep.path), "n_aligned": conn.n_aligned, "rows": conn.rows,
                                  "policies": conn.policies, "session": conn.session,
                                  "psi_cached": conn.psi_cached, "rejoined": rejoined}
        res.timings["psi_s"] = conn.psi_seconds  # apart from the method's time (total_seconds)
        res.info["trained_as"] = method
        if conn.federation is not None and conn.federation.embedding_floors:  # issue 50: within the parties' floors
            res.info["embedding_floors"] = {p: {"asked": a, "proposed": b}
                                            for p, (a, b) in conn.federation.embedding_floors.items()}
        if why is not None:
            res.info["trained_as_reason"] = why
            res.info["method_asked"] = asked
        return res
    except BaseException as exc:
        if events is not None and not events.ended:
            events.start(method=asked, mode="deployment", seed=seed, label_party=dep.label_party,
                         parties=[p for p in dep.parties if p != dep.label_party])
            events.fail(exc)
        raise
    finally:
        if conn is not None:
            conn.close()


def _rejoin(dep: Deployment, seed: int, exc: Exception, party: str, log: list[dict[str, Any]],
            events: Any = None) -> Connected:
    """Wait up to ``dep.rejoin_window`` seconds for ``party`` (gone with ``exc``) to answer again,
    then connect afresh; a :class:`TransportError` naming it if it does not come back in time."""
    import sys
    import time

    t0 = time.monotonic()
    deadline = t0 + dep.rejoin_window
    waiting = f"{exc}; waiting up to {dep.rejoin_window:g} s for party {party!r} to come back (rejoin_window of " \
              "the deployment file)"
    sys.stderr.write(waiting.replace("; waiting up to", "\nwaiting up to") + "\n")
    sys.stderr.flush()
    if events is not None:
        events.warning(waiting)
    while True:
        try:
            conn = connect(dep, seed=seed, events=events)
        except TransportError as again:
            if time.monotonic() >= deadline:
                raise TransportError(f"{exc}; it did not come back within {dep.rejoin_window:g} s (rejoin_window of "
                                     f"the deployment file; last: {again})") from None
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            continue
        waited = time.monotonic() - t0
        log.append({"party": party, "error": str(exc), "waited_s": round(waited, 1)})
        sys.stderr.write(f"party {party!r} answers again after {waited:.1f} s: the run continues from its last "
                         "checkpoint\n")
        sys.stderr.flush()
        return conn
