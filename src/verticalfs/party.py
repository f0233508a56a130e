"""The party side of every protocol: a party's own data, its messaging, and the *role* it plays in a run.

A feature-holding party is a :class:`PartyRuntime`: it owns its prepared columns
(:class:`LocalData`, nothing else) and a messaging :class:`~verticalfs.transport.node.Node`. It
answers four core kinds itself (:class:`~verticalfs.transport.messages.HelloRequest` with its
schema, :class:`~verticalfs.transport.messages.SupportRequest` with the features it still uses,
:class:`~verticalfs.transport.messages.KeepFeatures` to narrow them (between the methods of a
pipeline), :class:`~verticalfs.transport.messages.Join`) and hands everything else to its current
:class:`Role`. The features it keeps carry over from one role to the next.

A role is one method's part at one party for one run: typed state, its own models, and one handler
method per message kind, marked with :func:`handles`. The label holder creates it with a metered
``Join(method, spec)``: the runtime looks the method's role class up with the ``role_for`` it was
built with (the method registry's, :func:`verticalfs.methods.registry.party_roles`: this module
knows no method) and builds ``Role(data, spec, ctx)``. Several roles may handle the same message
kind differently (the split-learning roles of SparseVFL and of plain VFL both answer
:class:`~verticalfs.transport.messages.EmbedRequest`), and a role may keep as many models and
pending graphs as its method needs.

Every message a party answers, the runtime's own kinds and the role's alike, is a handler declared
with :func:`handles`, and with it who may send it and which policy rules guard it
(:mod:`verticalfs.dispatch`). By default a kind is accepted only from the label holder; a handler
declared with ``handles(Kind, peers=True)`` also accepts it from other feature parties. The party
resolves a message to its declaration and hands it through one chain of layers before the
handler runs: the sender, any Paillier public key it carries (``min_key_bits``), the request
budget (PSI and ``Align`` counts), the policy rules declared with the handler
(``handles(GatherColumns, policy="release_columns")``) and, at ``Join``, what the method's spec
asks (:meth:`Role.policy_rules`, :meth:`Role.key_bits`). A message the protocol does not expect,
or from a sender it does not allow, is a :class:`~verticalfs.exceptions.ProtocolError` naming the
party, the sender and the kind; a refusal of the policy
(:class:`~verticalfs.configuration.PartyPolicy`: in-process permissive, in a deployment the party's
``[policy]``) is a :class:`~verticalfs.exceptions.PolicyError` naming the party, the rule and the
key to change. The name a model is saved under is checked by its handler.

:class:`LocalProxy` lets a non-federated reference (``central``) drive the same roles in one
process without messages.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import torch

from verticalfs import trust
from verticalfs.codecs import get_codec
from verticalfs.configuration import PartyPolicy
from verticalfs.dispatch import (
    DEFAULT_MODS,
    POLICY_RULES,
    Budget,
    Call,
    Context,
    Handlers,
    Mod,
    Route,
    answer,
    check_key_bits,
    handles,
    policy_allows,
    refusal,
    require,
)
from verticalfs.exceptions import PolicyError, ProtocolError
from verticalfs.model_files import load_party_file, save_party_file
from verticalfs.names import LABEL_HOLDER
from verticalfs.persist.files import party_persist
from verticalfs.psi import PSI_KINDS, PSI_OPENS, PsiParty
from verticalfs.transport.ledger import Ledger
from verticalfs.transport.messages import (
    Ack,
    At,
    Coded,
    EndSession,
    Hello,
    HelloRequest,
    Join,
    KeepFeatures,
    LoadModel,
    ModelSaved,
    Persist,
    SaveModel,
    SupportReport,
    SupportRequest,
    TrafficReport,
    TrafficRequest,
    check_protocol,
    kind_name,
)
from verticalfs.transport.node import Node

if TYPE_CHECKING:
    from verticalfs.data.vertical import PartyData
    from verticalfs.transport.channel import Channel

__all__ = ["POLICY_RULES", "Context", "LocalData", "LocalProxy", "PartyRuntime", "Role", "handles", "policy_allows",
           "refusal"]


class LocalData:
    """One party's own prepared columns, per split, and the features it still uses.

    Parameters
    ----------
    name : str
    feature_names : list of str
        The party's prepared feature names (all of them, also those no longer used).
    X : dict
        Split name -> array ``(rows, features)``; stored as float32 torch tensors.
    """

    def __init__(self, name: str, feature_names: Sequence[str], X: dict[str, np.ndarray],
                 sources: Sequence[str] | None = None) -> None:
        self.name = name
        self.feature_names = list(feature_names)
        self.sources = list(self.feature_names if sources is None else sources)
        self._X_all = {s: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)) for s, a in X.items()}
        # the splits held in memory-mapped files (a party of millions of rows, data/stream.py): their
        # kept columns go to memory-mapped files too, not to a copy in memory
        self._mapped = {s: a for s, a in X.items() if isinstance(a, np.memmap) and a.dtype == np.float32}
        self._kept_files: dict[str, str | None] = {}  # split -> the file of its kept columns (memory-mapped)
        self.kept = np.arange(len(self.feature_names))
        self._X = dict(self._X_all)
        self._X_src: dict[str, np.ndarray] = dict(self._mapped)  # split -> the memory map behind _X[split]

    @classmethod
    def of(cls, data: PartyData) -> LocalData:
        """From a :class:`~verticalfs.data.vertical.PartyData`."""
        return cls(data.name, data.feature_names, data.X, data.sources)

    @property
    def splits(self) -> list[str]:
        return list(self._X_all)

    def X(self, split: str) -> torch.Tensor:
        """The columns still in use, for ``split``."""
        try:
            return self._X[split]
        except KeyError:
            raise ProtocolError(f"party {self.name!r} has no split {split!r}; splits are {self.splits}") from None

    def X_all(self, split: str) -> torch.Tensor:
        """Every prepared column, for ``split``."""
        try:
            return self._X_all[split]
        except KeyError:
            raise ProtocolError(f"party {self.name!r} has no split {split!r}; splits are {self.splits}") from None

    def n_samples(self, split: str = "train") -> int:
        return int(self.X_all(split).shape[0])

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    @property
    def kept_feature_names(self) -> list[str]:
        return [self.feature_names[i] for i in self.kept]

    def keep(self, indices: Sequence[int] | np.ndarray) -> None:
        """Use only the prepared features ``indices`` from now on."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_features):
            raise ProtocolError(f"party {self.name!r}: feature indices {idx.tolist()} outside its "
                                f"{self.n_features} features")
        self.kept = idx
        t = torch.as_tensor(idx)
        maps = {s: self._kept_map(s, idx) for s in self._X_all if s in self._mapped}
        self._X = {s: (torch.from_numpy(maps[s]) if s in maps else X.index_select(1, t).contiguous())
                   for s, X in self._X_all.items()}
        self._X_src = {s: m for s, m in maps.items() if isinstance(m, np.memmap)}  # (a new dict, as below)

    def batch(self, split: str, rows: np.ndarray) -> torch.Tensor:
        """Rows ``rows`` of the columns still in use, for ``split``: from a memory-mapped split read
        in ascending order with the pages released after each piece (data/stream.py's ``read_rows``;
        an epoch's random mini-batches otherwise leave the whole matrix resident between two passes
        of the page releaser), the same values as ``X(split)[rows]``."""
        src = self._X_src.get(split)
        if isinstance(src, np.memmap):
            from verticalfs.data.stream import read_rows

            return torch.from_numpy(read_rows(src, rows))
        return self.X(split).index_select(0, torch.from_numpy(np.asarray(rows, dtype=np.int64)))

    def _kept_map(self, split: str, idx: np.ndarray) -> np.ndarray:
        """Columns ``idx`` of a memory-mapped split, in a memory-mapped file beside it (the one
        written for the previous selection of that split removed)."""
        from verticalfs.data.stream import select_columns

        old = self._kept_files.get(split)
        out = select_columns(self._mapped[split], idx)
        # a new dict, not an update: a session's shallow copy of the party keeps its own
        self._kept_files = {**self._kept_files, split: out.filename if isinstance(out, np.memmap) else None}
        if old is not None:
            Path(old).unlink(missing_ok=True)  # (an open map of it stays valid)
        return out

    def fork(self) -> LocalData:
        """A view of the same columns with its own kept features and splits (a session's own rows:
        replacing or narrowing them leaves this one as it is)."""
        out = copy.copy(self)
        out._X_all = dict(self._X_all)
        out._X = dict(self._X)
        return out

    def put(self, split: str, X: np.ndarray) -> None:
        """Set (or replace) the rows of ``split``: every prepared column of ``X`` (e.g. rows staged
        for scoring with a saved model), the kept ones in use."""
        t = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
        if t.ndim != 2 or t.shape[1] != self.n_features:
            raise ProtocolError(f"party {self.name!r}: rows of shape {tuple(t.shape)} for {self.n_features} features")
        self._X_all[split] = t
        self._mapped = {s: a for s, a in self._mapped.items() if s != split}  # (a new dict, as above)
        self._X_src = {s: a for s, a in self._X_src.items() if s != split}
        self._X[split] = t.index_select(1, torch.as_tensor(self.kept)).contiguous()

    def keep_positions(self, positions: Sequence[int] | np.ndarray) -> None:
        """Keep positions ``positions`` of the features *currently* in use."""
        self.keep(self.kept[np.asarray(positions, dtype=np.int64)])

    def support(self) -> np.ndarray:
        """Bool mask over the prepared features: still in use."""
        m = np.zeros(self.n_features, dtype=bool)
        m[self.kept] = True
        return m


class Role(Handlers):
    """One method's part at one party for one run (see the module docstring).

    Subclasses mark handler methods with :func:`handles`; the runtime calls ``handler(msg, ctx)``
    (after its layers checked the sender and the policy, :mod:`verticalfs.dispatch`) and sends back
    what it returns (``None`` for a one-way message). ``__init__(data, spec, ctx)`` receives the
    party's :class:`LocalData`, the ``spec`` of the ``Join`` and the context; :meth:`joined` is the
    reply to the ``Join``.
    """

    #: attributes a checkpoint leaves out (:class:`~verticalfs.transport.messages.Persist`): caches
    #: the role rebuilds from its state (e.g. a batch plan); ``data`` and ``spec`` are never saved
    transient: ClassVar[tuple[str, ...]] = ()
    #: spec fields that seed randomness only this party uses (its model's initialisation, its own
    #: networks): replaced by OS entropy under the policy's ``own_randomness`` (:func:`verticalfs.trust.own_seeds`)
    party_seeds: ClassVar[tuple[str, ...]] = ()
    #: a party seed whose consumer takes fewer than 63 bits (numpy's and scikit-learn's: 32)
    party_seed_bits: ClassVar[dict[str, int]] = {}
    #: the party's training is DP-SGD it accounts for itself (a policy's ``max_epsilon`` admits it)
    dp_capable: ClassVar[bool] = False

    # ------------------------------------------------------------------ policy
    @classmethod
    def policy_rules(cls, spec: Any) -> tuple[str, ...]:
        """The rules of :data:`POLICY_RULES` joining with ``spec`` needs (checked at ``Join``,
        before the role is built): e.g. ``("accept_labels",)`` for a method whose protocol sends
        the labels. Default none."""
        return ()

    @classmethod
    def key_bits(cls, spec: Any) -> int | None:
        """The size of the Paillier keys the party would make for ``spec`` (checked against
        ``min_key_bits`` at ``Join``); ``None`` when it makes none. Default none."""
        return None

    def __init__(self, data: LocalData, spec: Any, ctx: Context) -> None:
        self.data = data
        self.spec = spec

    def joined(self) -> Any:
        """The reply to the ``Join`` that created this role."""
        return Ack()

    def feature_scores(self) -> np.ndarray | None:
        """A score per kept feature for the final report (default none)."""
        return None

    # -------------------------------------------------------------------- saving
    def export(self) -> dict[str, Any]:
        """The role's state for a saved model: tensors, numbers, strings, lists and dicts only (it is
        loaded with ``torch.load(weights_only=True)``). A role that cannot be saved says so."""
        raise ProtocolError(f"{type(self).__name__} (party {self.name!r}) cannot be saved as a model")

    @classmethod
    def restore(cls, data: LocalData, saved: dict[str, Any], ctx: Context) -> Role:
        """The role rebuilt from :meth:`export`'s output, on ``data`` (its kept features restored)."""
        raise ProtocolError(f"{cls.__name__} cannot be restored from a saved model")

    @property
    def name(self) -> str:
        return self.data.name


class RequestCount:
    """The party's PSI budget (:class:`~verticalfs.budget.PsiBudget`, made on first use), one for the
    party, shared by its sessions (:meth:`PartyRuntime.fork`)."""

    __slots__ = ("budget",)

    def __init__(self) -> None:
        self.budget: Any = None


#: the budget of PSI requests (one per intersection, whichever the engine): the ids asked about
PSI_BUDGET = Budget("PSI requests", lambda msg: int(msg.n))


def _join_guard(call: Call) -> None:
    """The policy checks of a ``Join``: the method (``methods``), the rules its role needs for the
    spec (:meth:`Role.policy_rules`) and the size of the keys it would make (``min_key_bits``)."""
    party: PartyRuntime = call.target
    msg: Join = call.msg
    method = str(msg.method)
    allowed = party.policy.methods
    if allowed != "all" and method not in allowed:
        raise refusal(party.name, "methods", list(allowed), f"join method {method!r}", "add the method to allow it")
    cls = party.role_class(method)
    for rule in cls.policy_rules(msg.spec):
        require(party, rule, f"{POLICY_RULES[rule]} (method {method!r})")
    bits = cls.key_bits(msg.spec)
    if bits is not None:
        check_key_bits(party, int(bits), f"make {int(bits)}-bit Paillier keys (method {method!r})")
    # what the party checks in the spec itself (issue 50): open findings, DP, a bottom model's floors
    trust.check_finding(party.policy, party.name, method, msg.spec)
    trust.check_dp(party.policy, party.name, method, cls.dp_capable, msg.spec)
    trust.check_split_spec(party.policy, party.name, method, msg.spec, len(party.data.kept))


class PartyRuntime(Handlers):
    """A feature party: its :class:`LocalData`, its messaging node and the role of the current run.

    Every message reaches it through :meth:`handle`: resolved to its declared route
    (:meth:`resolve`: the runtime's own kinds below, else the current role's), then handed through
    the party's layers (``mods``, :data:`~verticalfs.dispatch.DEFAULT_MODS`: sender, key size,
    request budget, policy) to its handler (:mod:`verticalfs.dispatch`).

    Parameters
    ----------
    data : PartyData or LocalData
        The party's own prepared columns (nothing else).
    role_for : callable, optional
        ``role_for(method) -> Role class``: the roles this party can take, e.g.
        :func:`verticalfs.methods.registry.party_roles` (which also registers every method's
        message kinds, so that they decode before the first ``Join``). The party does not know the
        methods itself; without ``role_for`` it joins no method.
    allowed_methods : sequence of str, optional
        Methods this party agrees to join (default: any registered method).
    ids : sequence, optional
        The party's row ids, for the label holder's private set intersection
        (:mod:`verticalfs.psi`); without them the party refuses PSI requests.
    checkpoint_dir : path, optional
        Where this party keeps its end-of-epoch checkpoints (:mod:`verticalfs.training.checkpoint`).
    policy : PartyPolicy, optional
        What the party agrees to do (default :meth:`PartyPolicy.permissive`, the in-process
        path's); see the module docstring.
    mods : sequence of callables, optional
        The layers every message passes before its handler (default
        :data:`~verticalfs.dispatch.DEFAULT_MODS`); ``[*DEFAULT_MODS, my_layer]`` adds one.
    """

    #: its working folder (a deployed party's: its PSI budget, open models, secret); ``None``: none
    state_dir: Path | None = None
    #: its secret for the MACs of saved model parts when it has no working folder (this process's)
    _model_secret: bytes | None = None

    def __init__(self, data: Any, *, role_for: Callable[[str], type[Role]] | None = None,
                 allowed_methods: Sequence[str] | None = None, ids: Sequence[Any] | np.ndarray | None = None,
                 checkpoint_dir: str | Path | None = None, policy: PartyPolicy | None = None,
                 mods: Sequence[Mod] | None = None) -> None:
        self.data = data if isinstance(data, LocalData) else LocalData.of(data)
        self.name = self.data.name
        self.role: Role | None = None
        self.method: str | None = None
        #: its fitted preprocessing (saved with a model): a PartyData's, or none for bare LocalData
        self.preprocessor: Any = None if isinstance(data, LocalData) else data.preprocessor
        self.node: Node | None = None
        self._role_for = role_for
        self._allowed = None if allowed_methods is None else set(allowed_methods)
        self.ids = ids
        self.checkpoint_dir = checkpoint_dir
        self.policy = PartyPolicy.permissive() if policy is None else policy
        self.mods: list[Mod] = list(DEFAULT_MODS if mods is None else mods)
        #: the ids the label holder claimed (PSI requests, per day, the last scoring PSI): shared by
        #: every session of the party (:meth:`fork`; issue 50); per session: ``psi_session_ids``
        self._requests = RequestCount()  # the PSI budget of new intersections (verticalfs.budget)
        self.psi_state = trust.PsiState()
        self.psi_session_ids = 0
        self._psi: PsiParty | None = None  # this party's answers to PSI (either engine)
        #: keyword arguments of its :class:`PsiParty` (where its blinding runs: verticalfs.engine)
        self.psi_options: dict[str, Any] = {}
        self._reported = 0  # peer-traffic records already reported to the label holder
        self.session_over = False  # set by EndSession: the label holder's run is over

    @property
    def psi_requests(self) -> int:
        """New intersections (PSI requests, ``Align``s of new id sets) charged within the policy's
        window (bounded by ``max_psi_requests``)."""
        return int(self.psi_budget.used())

    @psi_requests.setter
    def psi_requests(self, n: int) -> None:
        """Keep only the last ``n`` charges of the window (0: a new window)."""
        b = self.psi_budget
        b.charges = b.charges[len(b.charges) - int(n):] if n else []

    @property
    def psi_budget(self) -> Any:
        """The party's :class:`~verticalfs.budget.PsiBudget` (one per party, shared by its sessions;
        kept in its working folder ``state_dir`` when it has one)."""
        if self._requests.budget is None:
            from verticalfs.budget import PsiBudget

            self._requests.budget = PsiBudget(self.name, self.policy, self.state_dir)
        return self._requests.budget

    def connect(self, channel: Channel, ledger: Ledger) -> Node:
        """Attach a messaging node on ``channel`` (the node is the channel's endpoint for this party)."""
        self.node = Node(self.name, channel, ledger, self.handle)
        return self.node

    def fork(self) -> PartyRuntime:
        """A session's own copy of this party (:mod:`verticalfs.transport.grpc.party`): its own view
        of the rows (kept features, splits), no role and no node yet; the file read at start, the
        policy, the layers and the PSI state (request count, ids per day, last scoring PSI) are
        shared; the ids claimed in the session are its own."""
        rt = copy.copy(self)
        rt.data = self.data.fork()
        rt.role, rt.method, rt.node = None, None, None
        rt._reported = 0
        rt.session_over = False
        rt.psi_session_ids = 0
        return rt

    # ------------------------------------------------------------------ dispatch
    def handle(self, sender: str, msg: Any, at: At | None, node: Node | None) -> Any:
        """Answer ``msg`` from ``sender`` (the node's handler): resolve its route, then the layers, then the handler."""
        target, route, what = self.resolve(sender, msg, at)
        return answer(Call(self, sender, msg, at, node, route, target, what), self.mods)

    def resolve(self, sender: str, msg: Any, at: At | None) -> tuple[Handlers, Route, str]:
        """The route of ``msg`` (a :class:`ProtocolError` for a kind the party does not answer): the
        object whose handler answers it, its declaration, and what that is (for refusals)."""
        t = type(msg)
        route = self.routes.get(t)
        if route is not None:
            return self, route, f"party {self.name!r}"
        if self.role is None:
            raise ProtocolError(f"party {self.name!r} received {kind_name(msg)} from {sender!r} before any Join")
        route = self.role.routes.get(t)
        if route is None:
            raise ProtocolError(f"party {self.name!r} ({type(self.role).__name__}) does not expect {kind_name(msg)} "
                                f"from {sender!r}")
        return self.role, route, f"{self.method!r}"

    # ------------------------------------------------------------------ the runtime's own kinds
    @handles(*(k for k in PSI_KINDS if k not in PSI_OPENS))
    def on_psi(self, msg: Any, ctx: Context) -> Any:
        """Private set intersection over the party's ids (either engine, :mod:`verticalfs.psi`);
        its opening requests draw on the PSI budget (:meth:`on_psi_open`)."""
        if self.ids is None:
            raise ProtocolError(f"party {self.name!r} answers PSI requests only when it was given its ids")
        if self._psi is None:
            self._psi = PsiParty(cast("Sequence[Any]", self.ids), **self.psi_options)  # (a numpy text array, or a list)
        return self._psi.reply(msg)

    @handles(*PSI_OPENS, budget=PSI_BUDGET)
    def on_psi_open(self, msg: Any, ctx: Context) -> Any:
        """The request that opens an intersection (one per intersection, counted by the policy)."""
        return self.on_psi(msg, ctx)

    @handles(Persist)
    def on_persist(self, msg: Persist, ctx: Context) -> Ack:
        return party_persist(self, msg)

    @handles(EndSession)
    def on_end_session(self, msg: EndSession, ctx: Context) -> Ack:
        """The label holder's run is over: the networked party then drops this session's state
        (transport/grpc/party.py)."""
        self.session_over = True
        return Ack()

    @handles(TrafficRequest)
    def on_traffic_request(self, msg: TrafficRequest, ctx: Context) -> TrafficReport:
        return self._traffic()

    @handles(SaveModel)
    def on_save_model(self, msg: SaveModel, ctx: Context) -> ModelSaved:
        return self._save(msg)

    @handles(LoadModel)
    def on_load_model(self, msg: LoadModel, ctx: Context) -> Ack:
        return self._load(msg, ctx)

    @handles(HelloRequest)
    def on_hello_request(self, msg: HelloRequest, ctx: Context) -> Hello:
        d = self.data
        return Hello(feature_names=list(d.feature_names), n_samples={s: d.n_samples(s) for s in d.splits},
                     sources=None if d.sources == d.feature_names else list(d.sources))

    @handles(KeepFeatures)
    def on_keep_features(self, msg: KeepFeatures, ctx: Context) -> SupportReport:
        self.data.keep(msg.indices)
        self.role = None  # a role built on the old columns must not go on
        return SupportReport(kept=np.asarray(self.data.kept, dtype=np.int64))

    @handles(SupportRequest)
    def on_support_request(self, msg: SupportRequest, ctx: Context) -> SupportReport:
        scores = self.role.feature_scores() if self.role is not None else None
        return SupportReport(kept=np.asarray(self.data.kept, dtype=np.int64),
                             scores=None if scores is None else np.asarray(scores, dtype=np.float32))

    @handles(Join, guard=_join_guard)
    def on_join(self, msg: Join, ctx: Context) -> Any:
        method = str(msg.method)
        check_protocol(msg.protocol, peer=f"party {self.name!r} refuses the Join: the label holder",
                       me=f"party {self.name!r}")
        if not self.allows_method(method):
            raise ProtocolError(f"party {self.name!r} does not take part in method {method!r}; it allows "
                                f"{sorted(self._allowed or ())}")
        cls = self.role_class(method)
        # the party's own Paillier choices and its own randomness (issue 50; in-process: the spec's)
        spec = trust.own_seeds(self.policy, cls.party_seeds, cls.party_seed_bits,
                               trust.paillier_choice(self.policy, msg.spec))
        self.role = cls(self.data, spec, ctx)
        self.method = method
        return self.role.joined()

    # ------------------------------------------------------------------ policy
    def psi_rows(self) -> int:
        """The party's own rows (of its training file): the unit of the ``"auto"`` PSI limits."""
        return len(self.ids) if self.ids is not None else self.data.n_samples("train")

    def count_request(self, what: str, n_ids: int, *, rows: int | None = None, charge: bool = True,
                      key: str | None = None) -> bool:
        """One more PSI (or alignment) request of ``n_ids`` ids: within the policy's limits, or
        refused. ``rows``: the rows of the file the request is over (default :meth:`psi_rows`), the
        unit of the ``"auto"`` limits; ``charge``: the ids count against the session's and the day's
        budget (a PSI's claimed ids; an ``Align`` charges its ids only when refused,
        :meth:`charge_ids`); ``key`` names an id set aligned before, a request the window's budget
        does not charge (:class:`~verticalfs.budget.PsiBudget`). Returns whether the window's budget
        was charged."""
        pol = self.policy
        rows = self.psi_rows() if rows is None else int(rows)
        most = trust.psi_limit(pol, "max_psi_ids", rows)
        if n_ids > most:
            raise refusal(self.name, "max_psi_ids", trust._limit_text(pol, "max_psi_ids", rows),
                          f"answer a request with {n_ids} ids", "raise it to allow larger requests")
        if charge:
            self._within_budget(n_ids, rows)
        budget = self.psi_budget
        budget.policy = self.policy  # (the party's policy now: a session's copy shares the budget)
        charged: bool = budget.charge(what, n_ids, key=key)
        if charge:
            self.charge_ids(n_ids)
        return charged

    def _within_budget(self, n_ids: int, rows: int) -> None:
        pol = self.policy
        session = trust.psi_limit(pol, "psi_ids_per_session", rows)
        if self.psi_session_ids + n_ids > session:
            raise refusal(self.name, "psi_ids_per_session", trust._limit_text(pol, "psi_ids_per_session", rows),
                          f"answer {n_ids} more ids in this session (the label holder has claimed "
                          f"{self.psi_session_ids})", "start another session, or raise it")
        day = trust.psi_limit(pol, "psi_ids_per_day", rows)
        used = self.psi_state.day_ids()
        if used + n_ids > day:
            raise refusal(self.name, "psi_ids_per_day", trust._limit_text(pol, "psi_ids_per_day", rows),
                          f"answer {n_ids} more ids today (label holders have claimed {used})",
                          "wait for tomorrow (UTC), or raise it")

    def charge_ids(self, n_ids: int) -> None:
        """``n_ids`` ids claimed by the label holder, counted against the session's and the day's budget."""
        self.psi_session_ids += int(n_ids)
        self.psi_state.charge_day(int(n_ids))

    def allows_method(self, method: str) -> bool:
        """Whether the party was built to take part in ``method`` (``allowed_methods``)."""
        return self._allowed is None or method in self._allowed

    def role_class(self, method: str) -> type[Role]:
        """The role class this party builds for ``method``."""
        if self._role_for is None:
            raise ProtocolError(f"party {self.name!r} was built without role_for, so it can take part in no method "
                                f"({method!r} asked); build it with role_for=verticalfs.methods.registry.party_roles()")
        return self._role_for(method)

    def _traffic(self) -> TrafficReport:
        """The peer messages this party recorded since its last report (its node's ledger holds only
        those: the label holder records everything on its own links)."""
        rows = list(self.node.ledger.records())[self._reported:] if self.node is not None else []
        self._reported += len(rows)
        return TrafficReport(receivers=[r.receiver for r in rows], phases=[r.phase for r in rows],
                             kinds=[r.kind for r in rows],
                             rounds=np.asarray([r.round for r in rows], dtype=np.int64),
                             steps=np.asarray([r.step for r in rows], dtype=np.int64),
                             payload=np.asarray([r.payload for r in rows], dtype=np.int64),
                             overhead=np.asarray([r.overhead for r in rows], dtype=np.int64))

    # ------------------------------------------------------------------ saved models
    def model_folder(self, name: str) -> Path:
        """Where a model called ``name`` is saved: with the policy's ``model_dir``, ``name`` is a
        plain name (no separator, no ``..``) and the folder ``<model_dir>/<name>``; without it (the
        in-process path, one process for every party) ``name`` is the folder itself."""
        root = self.policy.model_dir
        if root is None:
            return Path(name)
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
            raise PolicyError(f"party {self.name!r} saves models only under a plain name in its model_dir "
                              f"{str(root)!r}, not {name!r} (no path separator, no '..'; the label holder sends "
                              "the name of the --save-model folder)")
        return Path(root).expanduser() / name

    def model_secret(self) -> bytes | None:
        """The party's own secret for the MACs of its saved parts (``own_models_only``): ``model.key``
        in its working folder (``state_dir``), else one for this process; ``None`` when the policy
        does not ask for it."""
        if not self.policy.own_models_only:
            return None
        folder = self.state_dir
        if folder is not None:
            return trust.secret_file(folder, "model.key")
        if self._model_secret is None:
            import secrets

            self._model_secret = secrets.token_bytes(32)
        return self._model_secret

    def _save(self, msg: SaveModel) -> ModelSaved:
        if self.role is None or self.method is None:
            raise ProtocolError(f"party {self.name!r} has no trained role to save")
        file, sha = save_party_file(self.model_folder(str(msg.directory)), self.name, secret=self.model_secret(),
                                    content={
            "method": self.method, "party": self.name, "feature_names": list(self.data.feature_names),
            "kept": [int(i) for i in self.data.kept],
            "preprocessor": None if self.preprocessor is None else self.preprocessor.to_dict(),
            "role": self.role.export(),
        })
        return ModelSaved(file=file, sha256=sha)

    def _load(self, msg: LoadModel, ctx: Context) -> Ack:
        path = Path(msg.file)
        root = self.policy.model_dir
        if root is not None:  # a name, as for SaveModel: <model_dir>/<name>/<party>.pt
            path = self.model_folder(path.parent.name) / path.name
        saved = load_party_file(path, expected_sha256=msg.sha256, party=self.name, secret=self.model_secret())
        if saved["method"] != msg.method:
            raise ProtocolError(f"party {self.name!r}: {msg.file!r} holds a {saved['method']!r} model, not {msg.method!r}")
        if list(saved["feature_names"]) != list(self.data.feature_names):
            raise ProtocolError(f"party {self.name!r}: the rows given have features {self.data.feature_names[:5]}..., "
                                f"the model was trained on {list(saved['feature_names'])[:5]}...")
        self.data.keep(saved["kept"])
        cls = self.role_class(str(msg.method))
        self.role = cls.restore(self.data, saved["role"], ctx)
        self.method = str(msg.method)
        return Ack()


def _unwrap(msg: Any) -> Any:
    """A copy of ``msg`` as the receiver would decode it, without serialising: coded arrays are
    encoded and decoded with their codec (float32 values are passed as they are)."""
    changes = {}
    for f in fields(msg):
        v = getattr(msg, f.name)
        if type(v) is Coded:
            a = v.array.detach().cpu().numpy() if isinstance(v.array, torch.Tensor) else np.asarray(v.array)
            codec = get_codec(v.codec)
            if codec.name == "float32" and a.dtype == np.float32:
                changes[f.name] = a
            else:
                changes[f.name] = codec.decode(memoryview(codec.encode(a)), a.size).reshape(a.shape)
    return replace(msg, **changes) if changes else msg


class LocalProxy:
    """Drives a :class:`PartyRuntime` in this process without messages: the same interface as
    :class:`~verticalfs.transport.node.PartyProxy`, no serialisation, nothing on any ledger.

    Only for references that are not federated by definition (``central``): the parties' roles run
    as they would in a federation, the bytes are simply not sent.
    """

    __slots__ = ("name", "_runtime")

    def __init__(self, runtime: PartyRuntime) -> None:
        self.name = runtime.name
        self._runtime = runtime

    def request(self, msg: Any, at: At, expect: type | tuple[type, ...] | None = None) -> Any:
        reply = self._runtime.handle(LABEL_HOLDER, _unwrap(msg), at, None)
        if reply is None:
            raise ProtocolError(f"party {self.name!r} sent no reply to {kind_name(msg)}")
        reply = _unwrap(reply)
        if expect is not None and not isinstance(reply, expect):
            raise ProtocolError(f"party {self.name!r} answered {kind_name(msg)} with {kind_name(reply)}")
        return reply

    def send(self, msg: Any, at: At) -> None:
        if self._runtime.handle(LABEL_HOLDER, _unwrap(msg), at, None) is not None:
            raise ProtocolError(f"party {self.name!r} replied to the one-way message {kind_name(msg)}")


def clone_state(module: torch.nn.Module) -> dict[str, Any]:
    """A deep copy of a module's state (for checkpoints)."""
    return copy.deepcopy(module.state_dict())
