"""The label holder's view of one run: its labels, a proxy per party, and the ledger.

A method's ``fit(fed)`` sees only this: :attr:`Federation.labels` (the label holder's own data),
:meth:`Federation.proxy` (one :class:`~verticalfs.transport.node.PartyProxy` per feature party,
every call carrying its phase, round and step) and :attr:`Federation.ledger` (every byte that
crossed). What the parties hold is learnt through messages: their schema by a metered
:class:`~verticalfs.transport.messages.Hello` exchange (:meth:`Federation.schema`), their selection
by :class:`~verticalfs.transport.messages.SupportRequest` (:meth:`Federation.collect_support`).
So a method runs unchanged whether the parties live in this process (:meth:`Federation.in_process`)
or in other processes behind a networked channel.

Two doors are *instrumentation*, not protocol, available only when the federation was built in
this process from pooled data, and say so in their names: :meth:`Federation.pooled_data` (for the
non-federated references ``central`` and ``cfeast``, and evaluation) and
:meth:`Federation.observe_support` (the evaluator's per-epoch ``spurious_removed``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from verticalfs import method_registry as registry
from verticalfs.configuration import PartyPolicy
from verticalfs.data.vertical import LabelData, PreparedData
from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.names import LABEL_HOLDER
from verticalfs.party import LocalProxy, PartyRuntime, Role
from verticalfs.transport.channel import Channel
from verticalfs.transport.inprocess import InProcessChannel
from verticalfs.transport.ledger import Ledger
from verticalfs.transport.messages import (
    At,
    Hello,
    HelloRequest,
    Join,
    SupportReport,
    SupportRequest,
    TrafficReport,
    TrafficRequest,
    check_protocol,
)
from verticalfs.transport.node import Node, PartyProxy

SETUP = At("setup")
REPORT = At("report")
AUDIT = At("audit")


class Federation:
    """The label holder of one run, connected to the feature parties by ``channel``.

    Parameters
    ----------
    labels : LabelData
        The label holder's own data: the labels of every split.
    channel : Channel
        Carries encoded messages to the parties.
    party_names : sequence of str
        The feature parties, in the order their embeddings are concatenated.
    ledger : Ledger, optional
        Where the label holder's node records every message (a new one by default).
    """

    def __init__(self, labels: LabelData, channel: Channel, party_names: Sequence[str], *,
                 ledger: Ledger | None = None) -> None:
        names = [str(p) for p in party_names]
        if len(set(names)) != len(names) or LABEL_HOLDER in names:
            raise ConfigError(f"party names must be unique and not {LABEL_HOLDER!r}, got {names}")
        self.labels = labels
        self.channel = channel
        self.ledger = ledger if ledger is not None else Ledger()
        self.node = Node(LABEL_HOLDER, channel, self.ledger)
        self.party_names = names
        self._proxies = {p: PartyProxy(self.node, p) for p in names}
        self._schema: dict[str, Hello] | None = None
        self._local: _Local | None = None
        #: parties on other hosts save a model under its name in their own model folder (their
        #: policy's ``model_dir``): ``SaveModel`` then carries the folder's name, never a path
        self.model_names_only = False
        #: the feature party whose columns the label holder holds itself (a deployment's label party
        #: serving its own feature block), if any: methods may treat it as the label holder's own
        self.own_party: str | None = None
        #: what each party reported it checks (a deployment's TrustReport, issue 50); none in-process
        self.party_rules: dict[str, dict[str, Any]] = {}
        #: party -> (embedding width asked, width proposed within its floors)
        self.embedding_floors: dict[str, tuple[int, int]] = {}

    # ----------------------------------------------------------------- building
    @classmethod
    def in_process(cls, data: PreparedData, *, trace: bool = False,
                   roles: Mapping[str, type[Role]] | None = None, policy: PartyPolicy | None = None) -> Federation:
        """Every party of ``data`` in this process, each given only its own columns, behind an
        :class:`~verticalfs.transport.inprocess.InProcessChannel` (bytes only).

        ``roles`` maps method names to party role classes for methods that are not registered
        (e.g. one defined in a test); registered methods are found in the registry. ``policy``:
        every party's (default :meth:`~verticalfs.configuration.PartyPolicy.permissive`, an
        experiment's); the label holder learns the rules it reports as a deployment's parties
        report them (``party_rules``: e.g. it then sends the label proofs a party verifies).
        """
        channel = InProcessChannel(trace=trace)
        ledger = Ledger()
        role_for = registry.party_roles()
        if roles:
            extra, registered = dict(roles), role_for

            def role_for(method: str) -> type[Role]:
                return extra[method] if method in extra else registered(method)

        runtimes = [PartyRuntime(p, role_for=role_for, policy=policy) for p in data.parties]
        for r in runtimes:
            channel.register(r.connect(channel, ledger))
        fed = cls(data.labels, channel, [r.name for r in runtimes], ledger=ledger)
        channel.register(fed.node)
        fed._local = _Local(data, {r.name: r for r in runtimes})
        if policy is not None:
            from verticalfs.trust import TRUST_KEYS

            fed.party_rules = {r.name: {k: getattr(policy, k) for k in TRUST_KEYS} for r in runtimes}
        return fed

    # ------------------------------------------------------------------- views
    @property
    def label_holder(self) -> str:
        return LABEL_HOLDER

    @property
    def task(self) -> str:
        return self.labels.task

    @property
    def n_classes(self) -> int:
        return self.labels.n_classes

    def n_samples(self, split: str = "train") -> int:
        return len(self.labels.y[split])

    def proxy(self, name: str) -> PartyProxy:
        try:
            return self._proxies[name]
        except KeyError:
            raise ConfigError(f"no party named {name!r}; parties are {self.party_names}") from None

    @property
    def proxies(self) -> list[PartyProxy]:
        return [self._proxies[p] for p in self.party_names]

    # ---------------------------------------------------------------- protocol
    def schema(self) -> dict[str, Hello]:
        """Each party's public schema (feature names, rows per split), asked once (phase ``setup``).

        A party whose Hello announces another protocol major version than
        :data:`~verticalfs.transport.messages.PROTOCOL_VERSION` is refused (:class:`ProtocolError`)."""
        if self._schema is None:
            out = {}
            for p in self.party_names:
                hello = self._proxies[p].request(HelloRequest(), SETUP, expect=Hello)
                check_protocol(hello.protocol, peer=f"party {p!r}", me="this label holder")
                for s, n in self.labels.y.items():
                    if int(hello.n_samples.get(s, -1)) != len(n):
                        raise ConfigError(
                            f"party {p!r} has {hello.n_samples.get(s)} {s} rows, the label holder {len(n)}; "
                            "align the parties by id first")
                out[p] = hello
            self._schema = out
        return self._schema

    def feature_names(self) -> dict[str, list[str]]:
        """Prepared feature names per party (from the schema exchange)."""
        return {p: list(h.feature_names) for p, h in self.schema().items()}

    def join(self, method: str, spec: Any | Mapping[str, Any], *, expect: type | None = None,
             at: At = SETUP) -> dict[str, Any]:
        """Send ``Join(method, spec)`` to every party (``spec`` one message, or one per party);
        return the replies by party."""
        replies = {}
        for p in self.party_names:
            s = spec[p] if isinstance(spec, Mapping) else spec
            s = self._within_floors(p, s, at)
            replies[p] = self._proxies[p].request(Join(method=method, spec=s), at, expect=expect)
        return replies

    def _within_floors(self, party: str, spec: Any, at: At) -> Any:
        """``spec`` with its embedding no wider than ``party`` accepts (its reported
        ``max_embedding_fraction`` of the features it uses, asked by a ``SupportRequest``; issue 50):
        the top model is built on the widths the parties report, so a narrower embedding is a
        proposal the party accepts instead of a refusal. Unchanged in-process (no rules reported)."""
        import dataclasses
        import math

        frac = self.party_rules.get(party, {}).get("max_embedding_fraction")
        # a split model's spec (verticalfs.training.split.SplitSpec, recognised by its field: the
        # federation sits below the training code)
        if frac is None or not dataclasses.is_dataclass(spec) or isinstance(spec, type) \
                or "embedding_dim" not in {f.name for f in dataclasses.fields(spec)}:
            return spec
        kept = len(self._proxies[party].request(SupportRequest(), at, expect=SupportReport).kept)
        top = int(math.floor(float(frac) * kept + 1e-9))
        width = int(dataclasses.asdict(spec)["embedding_dim"])
        if 1 <= top < width:
            self.embedding_floors[party] = (width, top)
            return dataclasses.replace(spec, embedding_dim=top)
        return spec

    def collect_support(self, at: At = REPORT) -> dict[str, np.ndarray]:
        """Ask every party which features it still uses; a bool mask per party."""
        return self.collect_support_and_scores(at)[0]

    def collect_support_and_scores(self, at: At = REPORT) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Ask every party which features it still uses and its score of each (one
        :class:`~verticalfs.transport.messages.SupportRequest` per party): a bool mask per party,
        and per party that reports scores a score per prepared feature (NaN for removed ones)."""
        names = self.feature_names()
        out = {}
        scores: dict[str, np.ndarray] = {}
        for p in self.party_names:
            rep = self._proxies[p].request(SupportRequest(), at, expect=SupportReport)
            kept = np.asarray(rep.kept, dtype=np.int64).reshape(-1)
            if kept.size and (kept.min() < 0 or kept.max() >= len(names[p])):
                raise ProtocolError(f"party {p!r} reported feature indices outside its {len(names[p])} features")
            m = np.zeros(len(names[p]), dtype=bool)
            m[kept] = True
            out[p] = m
            if rep.scores is not None:
                sc = np.asarray(rep.scores, dtype=np.float64).reshape(-1)
                if sc.shape != kept.shape:
                    raise ProtocolError(f"party {p!r} reported {sc.size} scores for {kept.size} kept features")
                full = np.full(len(names[p]), np.nan)
                full[kept] = sc
                scores[p] = full
        return out, scores

    def collect_peer_traffic(self, at: At = AUDIT) -> int:
        """Networked runs: ask every party for the party-to-party messages it sent (phase ``audit``)
        and add them to this ledger, so the ledger is complete as in-process; returns how many.

        In-process every node records on the one ledger already, so this asks nothing. A report is
        another party's bytes: each record is checked (known receiver, not the label holder, sizes
        >= 0) before it is added.
        """
        if self.is_local:
            return 0
        added = 0
        for p in self.party_names:
            rep = self._proxies[p].request(TrafficRequest(), at, expect=TrafficReport)
            cols = [rep.receivers, rep.phases, rep.kinds, np.asarray(rep.rounds).reshape(-1),
                    np.asarray(rep.steps).reshape(-1), np.asarray(rep.payload).reshape(-1),
                    np.asarray(rep.overhead).reshape(-1)]
            n = len(cols[0])
            if any(len(c) != n for c in cols):
                raise ProtocolError(f"party {p!r} sent a traffic report with columns of different lengths")
            if n and (min(int(cols[5].min()), int(cols[6].min())) < 0):
                raise ProtocolError(f"party {p!r} reported negative message sizes")
            others = set(self.party_names) - {p}
            for r, ph, k, rd, st, pay, ov in zip(*cols, strict=True):
                if r not in others:
                    raise ProtocolError(f"party {p!r} reported a message to {r!r}, which is not another "
                                        f"feature party ({sorted(others)})")
                self.ledger.record(p, str(r), str(ph), str(k), int(rd), int(st), int(pay), int(ov))
            added += n
        return added

    def mark(self, at: At) -> None:
        """Record the label holder's own compute since its last message at ``at`` (for work that
        sends nothing, e.g. local epochs of a top model on uploaded features)."""
        self.node.mark(at)

    def restrict(self, party_names: Sequence[str]) -> Federation:
        """The same run (node, ledger, schema) seen with only ``party_names`` taking part, e.g. after
        an earlier method of a pipeline left some parties without features."""
        names = [p for p in self.party_names if p in set(party_names)]
        sub = copy.copy(self)
        sub.party_names = names
        sub._proxies = {p: self._proxies[p] for p in names}
        if self._schema is not None:
            sub._schema = {p: self._schema[p] for p in names}
        return sub

    def limit_tensor_elements(self, n: int) -> None:
        """Refuse received coded arrays of more than ``n`` values before decoding them (the label
        holder knows the largest tensor its protocol expects, e.g. a whole split's embeddings)."""
        self.node.max_elements = int(n)

    def close(self) -> None:
        self.channel.close()

    # ---------------------------------------------------------- instrumentation
    def _need_local(self, what: str) -> _Local:
        if self._local is None:
            raise ConfigError(f"{what} needs the pooled data, which only a federation built in this process "
                              "(Federation.in_process) has")
        return self._local

    def pooled_data(self) -> PreparedData:
        """Instrumentation: the pooled data (for the non-federated references and evaluation only)."""
        return self._need_local("pooled_data()").data

    def observe_support(self) -> dict[str, np.ndarray]:
        """Instrumentation: each party's current support, read without a message (evaluator only)."""
        loc = self._need_local("observe_support()")
        return {p: loc.runtimes[p].data.support() for p in self.party_names}

    def local_runtime(self, name: str) -> PartyRuntime:
        """Instrumentation for tests: the in-process party ``name`` itself (never for protocol code)."""
        return self._need_local("local_runtime()").runtimes[name]

    @property
    def is_local(self) -> bool:
        return self._local is not None


class _Local:
    """What an in-process federation keeps for instrumentation (never given to a method's protocol)."""

    def __init__(self, data: PreparedData, runtimes: dict[str, PartyRuntime]) -> None:
        self.data = data
        self.runtimes = runtimes


class LocalFederation:
    """The non-federated reference: every party's role driven in this process *without messages*.

    Same interface as :class:`Federation` for :class:`~verticalfs.training.split.SplitTrainer`
    (``labels``, ``party_names``, ``proxy``, ``join``, ``ledger``), but the proxies are
    :class:`~verticalfs.party.LocalProxy` objects: nothing is serialised and nothing is recorded on
    :attr:`ledger`. Only ``central`` uses it, on pooled data: the same model, the same arithmetic,
    the messages gone.
    """

    #: every party is in this process: a model is saved in the folder given (see Federation)
    model_names_only = False
    #: (not a :meth:`Federation.in_process` federation: no instrumentation)
    is_local = False

    def __init__(self, data: PreparedData) -> None:
        self.labels = data.labels
        self.ledger = Ledger()
        self.party_names = list(data.party_names)
        role_for = registry.party_roles()
        self.runtimes = {p.name: PartyRuntime(p, role_for=role_for) for p in data.parties}
        self._proxies = {p: LocalProxy(r) for p, r in self.runtimes.items()}
        self.party_rules: dict[str, dict[str, Any]] = {}  # (no party reports rules without messages)

    def proxy(self, name: str) -> LocalProxy:
        return self._proxies[name]

    def limit_tensor_elements(self, n: int) -> None:
        """Nothing is decoded without messages."""

    def mark(self, at: At) -> None:
        """Nothing is metered without messages."""

    def schema(self) -> dict[str, Hello]:
        """The parties' schemas, read locally (nothing is sent)."""
        return {p: self._proxies[p].request(HelloRequest(), SETUP, expect=Hello) for p in self.party_names}

    def join(self, method: str, spec: Any, *, expect: type | None = None, at: At = SETUP) -> dict[str, Any]:
        return {p: self._proxies[p].request(Join(method=method, spec=spec[p] if isinstance(spec, Mapping) else spec),
                                            at, expect=expect) for p in self.party_names}
