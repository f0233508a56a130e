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

By default a role accepts messages only from the label holder; a handler declared with
``handles(Kind, peers=True)`` also accepts them from other feature parties. Anything else is a
:class:`~verticalfs.exceptions.ProtocolError` naming the party, the sender and the kind: a message the
protocol does not expect is rejected, never executed.

Every runtime has a :class:`~verticalfs.configuration.PartyPolicy` (in-process: permissive; in a
deployment: the party's ``[policy]``) that it checks before any work: at ``Join`` the method's name
and what its spec asks (:meth:`Role.policy_rules`, :meth:`Role.key_bits`), for every message any
Paillier public key it carries (``min_key_bits``) and the rules its handler was declared with
(``handles(GatherColumns, policy="release_columns")``), PSI request counts, and the name a model is
saved under. A refusal is a :class:`~verticalfs.exceptions.PolicyError` naming the party, the rule
and the key to change.

:class:`LocalProxy` lets a non-federated reference (``central``) drive the same roles in one
process without messages.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np
import torch

from verticalfs.codecs import get_codec
from verticalfs.configuration import PartyPolicy
from verticalfs.exceptions import PolicyError, ProtocolError
from verticalfs.model_files import load_party_file, save_party_file
from verticalfs.names import LABEL_HOLDER
from verticalfs.psi import PSI_KINDS, PSI_OPENS, PsiParty
from verticalfs.training.checkpoint import party_persist
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
    from verticalfs.transport.channel import Channel

_Handler = TypeVar("_Handler", bound=Callable[..., Any])


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

    @classmethod
    def of(cls, data: Any) -> LocalData:
        """From a :class:`~verticalfs.data.vertical.PartyData`."""
        return cls(data.name, data.feature_names, data.X, getattr(data, "sources", None))

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
        self._X = {s: (torch.from_numpy(self._kept_map(s, idx)) if s in self._mapped
                       else X.index_select(1, t).contiguous()) for s, X in self._X_all.items()}

    def _kept_map(self, split: str, idx: np.ndarray) -> np.ndarray:
        """Columns ``idx`` of a memory-mapped split, in a memory-mapped file beside it (the one
        written for the previous selection of that split removed)."""
        from verticalfs.data.stream import select_columns

        old = self._kept_files.get(split)
        out = select_columns(self._mapped[split], idx)
        # a new dict, not an update: a session's shallow copy of the party keeps its own
        self._kept_files = {**self._kept_files, split: getattr(out, "filename", None)}
        if old is not None:
            Path(old).unlink(missing_ok=True)  # (an open map of it stays valid)
        return out

    def put(self, split: str, X: np.ndarray) -> None:
        """Set (or replace) the rows of ``split``: every prepared column of ``X`` (e.g. rows staged
        for scoring with a saved model), the kept ones in use."""
        t = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
        if t.ndim != 2 or t.shape[1] != self.n_features:
            raise ProtocolError(f"party {self.name!r}: rows of shape {tuple(t.shape)} for {self.n_features} features")
        self._X_all[split] = t
        self._mapped = {s: a for s, a in self._mapped.items() if s != split}  # (a new dict, as above)
        self._X[split] = t.index_select(1, torch.as_tensor(self.kept)).contiguous()

    def keep_positions(self, positions: Sequence[int] | np.ndarray) -> None:
        """Keep positions ``positions`` of the features *currently* in use."""
        self.keep(self.kept[np.asarray(positions, dtype=np.int64)])

    def support(self) -> np.ndarray:
        """Bool mask over the prepared features: still in use."""
        m = np.zeros(self.n_features, dtype=bool)
        m[self.kept] = True
        return m


class Context:
    """What a handler may do besides replying: message other parties, at the current position."""

    __slots__ = ("at", "sender", "_node")

    def __init__(self, node: Node | None, at: At, sender: str) -> None:
        self._node = node
        self.at = at
        self.sender = sender

    def _need_node(self) -> Node:
        if self._node is None:
            raise ProtocolError("this party has no channel to other parties (a local reference run)")
        return self._node

    def send(self, receiver: str, msg: Any) -> None:
        """One-way message to another party, at the position of the message being handled."""
        self._need_node().send(receiver, msg, self.at)

    def request(self, receiver: str, msg: Any) -> Any:
        """Request to another party, at the position of the message being handled."""
        return self._need_node().request(receiver, msg, self.at)

    def expect_elements(self, n: int) -> None:
        """The most values a run-length coded array this party receives next may decode to (the
        shape it expects, e.g. its pending embeddings' gradient); else its message's size bounds it."""
        if self._node is not None:
            self._node.max_elements = int(n)


#: the policy rules a request may need: what the party must allow, in words (for the refusal)
POLICY_RULES = {
    "release_columns": "send raw columns to the label holder",
    "accept_labels": "receive the labels in the clear",
    "require_secure": "run the plaintext mode of a method that has a secure mode",
}


def handles(*kinds: type, peers: bool = False,
            policy: str | tuple[str, ...] = ()) -> Callable[[_Handler], _Handler]:
    """Mark a :class:`Role` method as the handler of message ``kinds``: ``fn(self, msg, ctx)``.

    ``peers=True`` also accepts the kinds from other feature parties (default: the label holder only).
    ``policy``: rules of :data:`POLICY_RULES` the party's policy must allow before the handler runs
    (``"release_columns"`` for a handler that sends raw columns, ``"accept_labels"`` for one that
    receives labels in the clear, ``"require_secure"`` for a plaintext mode).
    """
    rules = (policy,) if isinstance(policy, str) else tuple(policy)
    unknown = [r for r in rules if r not in POLICY_RULES]
    if unknown:
        raise ValueError(f"handles(policy=...): unknown rules {unknown}; use {sorted(POLICY_RULES)}")

    def deco(fn: _Handler) -> _Handler:
        fn._vf_handles = (kinds, peers)  # type: ignore[attr-defined]  # a mark on the function object
        fn._vf_policy = rules  # type: ignore[attr-defined]
        return fn

    return deco


def policy_allows(policy: PartyPolicy, rule: str) -> bool:
    """Whether ``policy`` allows what ``rule`` (a key of :data:`POLICY_RULES`) guards."""
    if rule == "require_secure":
        return not policy.require_secure
    return bool(getattr(policy, rule))


def refusal(party: str, rule: str, value: Any, what: str, fix: str) -> PolicyError:
    """The one line of a refusal: the party, what it refuses, the rule, the key to change."""
    return PolicyError(f"party {party!r} refuses to {what}: its policy has {rule} = {_toml(value)} "
                       f"({fix}: key {rule} of [parties.{party}.policy] or of its --policy file)")


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return f"{v}"


class Role:
    """One method's part at one party for one run (see the module docstring).

    Subclasses mark handler methods with :func:`handles`; the runtime calls ``handler(msg, ctx)``
    and sends back what it returns (``None`` for a one-way message). ``__init__(data, spec, ctx)``
    receives the party's :class:`LocalData`, the ``spec`` of the ``Join`` and the context;
    :meth:`joined` is the reply to the ``Join``.
    """

    _handlers: ClassVar[dict[type, tuple[str, bool]]] = {}
    #: message kind -> the policy rules its handler needs (``handles(..., policy=...)``)
    _policy: ClassVar[dict[type, tuple[str, ...]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table: dict[type, tuple[str, bool]] = {}
        rules: dict[type, tuple[str, ...]] = {}
        for base in reversed(cls.__mro__[1:]):
            table.update(getattr(base, "_handlers", {}))
            rules.update(getattr(base, "_policy", {}))
        for name, fn in vars(cls).items():
            marks = getattr(fn, "_vf_handles", None)
            if marks is not None:
                kinds, peers = marks
                for k in kinds:
                    table[k] = (name, peers)
                    rules[k] = getattr(fn, "_vf_policy", ())
        cls._handlers = table
        cls._policy = rules

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

    def handle(self, sender: str, msg: Any, ctx: Context) -> Any:
        entry = self._handlers.get(type(msg))
        if entry is None:
            raise ProtocolError(f"party {self.data.name!r} ({type(self).__name__}) does not expect "
                                f"{kind_name(msg)} from {sender!r}")
        name, peers = entry
        if sender != LABEL_HOLDER and not peers:
            raise ProtocolError(f"party {self.data.name!r} accepts {kind_name(msg)} only from the label "
                                f"holder, not from {sender!r}")
        return getattr(self, name)(msg, ctx)

    @property
    def name(self) -> str:
        return self.data.name


class PartyRuntime:
    """A feature party: its :class:`LocalData`, its messaging node and the role of the current run.

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
    """

    def __init__(self, data: Any, *, role_for: Callable[[str], type[Role]] | None = None,
                 allowed_methods: Sequence[str] | None = None, ids: Sequence[Any] | None = None,
                 checkpoint_dir: str | Path | None = None, policy: PartyPolicy | None = None) -> None:
        self.data = data if isinstance(data, LocalData) else LocalData.of(data)
        self.name = self.data.name
        self.role: Role | None = None
        self.method: str | None = None
        self.preprocessor = getattr(data, "preprocessor", None)
        self.node: Node | None = None
        self._role_for = role_for
        self._allowed = None if allowed_methods is None else set(allowed_methods)
        self.ids = ids
        self.checkpoint_dir = checkpoint_dir
        self.policy = PartyPolicy.permissive() if policy is None else policy
        self.psi_requests = 0  # PSI requests answered (bounded by the policy's max_psi_requests)
        self._psi: PsiParty | None = None  # this party's answers to PSI (either engine)
        self._reported = 0  # peer-traffic records already reported to the label holder
        self.session_over = False  # set by EndSession: the label holder's run is over

    def connect(self, channel: Channel, ledger: Ledger) -> Node:
        """Attach a messaging node on ``channel`` (the node is the channel's endpoint for this party)."""
        self.node = Node(self.name, channel, ledger, self.handle)
        return self.node

    def handle(self, sender: str, msg: Any, at: At, node: Node | None) -> Any:
        t = type(msg)
        self._check_public_key(msg)
        if t in PSI_KINDS:
            if sender != LABEL_HOLDER or self.ids is None:
                raise ProtocolError(f"party {self.name!r} answers PSI requests only from the label holder and "
                                    "only when it was given its ids")
            if t in PSI_OPENS:  # one request per intersection, whichever the engine
                self.count_request("PSI requests", int(msg.n))
            if self._psi is None:
                self._psi = PsiParty(self.ids)
            return self._psi.reply(msg)
        if t is Persist:
            if sender != LABEL_HOLDER:
                raise ProtocolError(f"party {self.name!r} accepts Persist only from the label holder")
            return party_persist(self, msg)
        if t is EndSession:  # the networked party then drops this session's state (transport/grpc/party.py)
            if sender != LABEL_HOLDER:
                raise ProtocolError(f"party {self.name!r} accepts EndSession only from the label holder")
            self.session_over = True
            return Ack()
        if t is TrafficRequest:
            if sender != LABEL_HOLDER:
                raise ProtocolError(f"party {self.name!r} reports its traffic only to the label holder")
            return self._traffic()
        if t is SaveModel or t is LoadModel:
            if sender != LABEL_HOLDER:
                raise ProtocolError(f"party {self.name!r} accepts {kind_name(msg)} only from the label holder")
            return self._save(msg) if t is SaveModel else self._load(msg, Context(node, at, sender))
        if t is HelloRequest or t is Join or t is SupportRequest or t is KeepFeatures:
            if sender != LABEL_HOLDER:
                raise ProtocolError(f"party {self.name!r} accepts {kind_name(msg)} only from the label holder, "
                                    f"not from {sender!r}")
            if t is HelloRequest:
                d = self.data
                return Hello(feature_names=list(d.feature_names), n_samples={s: d.n_samples(s) for s in d.splits},
                             sources=None if d.sources == d.feature_names else list(d.sources))
            if t is KeepFeatures:
                self.data.keep(msg.indices)
                self.role = None  # a role built on the old columns must not go on
            if t is KeepFeatures:
                return SupportReport(kept=np.asarray(self.data.kept, dtype=np.int64))
            if t is SupportRequest:
                scores = self.role.feature_scores() if self.role is not None else None
                return SupportReport(kept=np.asarray(self.data.kept, dtype=np.int64),
                                     scores=None if scores is None else np.asarray(scores, dtype=np.float32))
            return self._join(msg, Context(node, at, sender))
        if self.role is None:
            raise ProtocolError(f"party {self.name!r} received {kind_name(msg)} from {sender!r} before any Join")
        for rule in self.role._policy.get(t, ()):
            self._require(rule, f"{POLICY_RULES[rule]} ({kind_name(msg)} of {self.method!r})")
        return self.role.handle(sender, msg, Context(node, at, sender))

    # ------------------------------------------------------------------ policy
    def _require(self, rule: str, what: str) -> None:
        if not policy_allows(self.policy, rule):
            fix = "set it to false" if rule == "require_secure" else "set it to true"
            raise refusal(self.name, rule, getattr(self.policy, rule), what, f"to allow it, {fix}")

    def _check_public_key(self, msg: Any) -> None:
        """A Paillier public key sent to this party (any message's ``public_key`` field) must be at
        least ``min_key_bits`` long."""
        pk = getattr(msg, "public_key", None)
        if isinstance(pk, (bytes, bytearray)) and pk:
            bits = int.from_bytes(bytes(pk), "big").bit_length()
            self._check_bits(bits, f"use a {bits}-bit Paillier key ({kind_name(msg)})")

    def _check_bits(self, bits: int, what: str) -> None:
        least = int(self.policy.min_key_bits)
        if bits < least - 8:  # a modulus of "2048 bits" may be a few bits shorter
            raise refusal(self.name, "min_key_bits", least, what, f"ask for keys of {least} bits or more, or lower it")

    def count_request(self, what: str, n_ids: int) -> None:
        """One more PSI (or alignment) request of ``n_ids`` ids: within the policy's limits, or refused."""
        pol = self.policy
        if n_ids > pol.max_psi_ids:
            raise refusal(self.name, "max_psi_ids", pol.max_psi_ids, f"answer a request with {n_ids} ids",
                          "raise it to allow larger requests")
        if self.psi_requests >= pol.max_psi_requests:
            raise refusal(self.name, "max_psi_requests", pol.max_psi_requests,
                          f"answer more {what} (it has answered {self.psi_requests} since it started)",
                          "restart the party or raise it")
        self.psi_requests += 1

    def _join(self, msg: Join, ctx: Context) -> Any:
        method = str(msg.method)
        check_protocol(msg.protocol, peer=f"party {self.name!r} refuses the Join: the label holder",
                       me=f"party {self.name!r}")
        if self._allowed is not None and method not in self._allowed:
            raise ProtocolError(f"party {self.name!r} does not take part in method {method!r}; it allows "
                                f"{sorted(self._allowed)}")
        allowed = self.policy.methods
        if allowed != "all" and method not in allowed:
            raise refusal(self.name, "methods", list(allowed), f"join method {method!r}", "add the method to allow it")
        cls = self._role_class(method)
        for rule in cls.policy_rules(msg.spec):
            self._require(rule, f"{POLICY_RULES[rule]} (method {method!r})")
        bits = cls.key_bits(msg.spec)
        if bits is not None:
            self._check_bits(int(bits), f"make {int(bits)}-bit Paillier keys (method {method!r})")
        self.role = cls(self.data, msg.spec, ctx)
        self.method = str(msg.method)
        return self.role.joined()

    def _role_class(self, method: str) -> type[Role]:
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

    def _save(self, msg: SaveModel) -> ModelSaved:
        if self.role is None or self.method is None:
            raise ProtocolError(f"party {self.name!r} has no trained role to save")
        file, sha = save_party_file(self.model_folder(str(msg.directory)), self.name, {
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
        saved = load_party_file(path, expected_sha256=msg.sha256, party=self.name)
        if saved["method"] != msg.method:
            raise ProtocolError(f"party {self.name!r}: {msg.file!r} holds a {saved['method']!r} model, not {msg.method!r}")
        if list(saved["feature_names"]) != list(self.data.feature_names):
            raise ProtocolError(f"party {self.name!r}: the rows given have features {self.data.feature_names[:5]}..., "
                                f"the model was trained on {list(saved['feature_names'])[:5]}...")
        self.data.keep(saved["kept"])
        cls = self._role_class(str(msg.method))
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
            a = v.array.detach().cpu().numpy() if hasattr(v.array, "detach") else np.asarray(v.array)
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
