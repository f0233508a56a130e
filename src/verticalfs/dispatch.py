"""One way in at a party: every message kind it answers is a declared handler, checked by one chain of layers.

A party answers messages for several owners: the runtime itself (its schema, ``Join``, the
features it keeps, PSI, checkpoints, saved models, its traffic), a deployed party (``Align``, its
policy, the digest of its ids), a deployed party's scoring (a saved model's inference) and the
role of the current run (a method's messages). Each owner declares its handlers with
:func:`handles`, and with each handler *who may send it* (the label holder only, or the other
feature parties too) and *which rules of the party's policy guard it* (:data:`POLICY_RULES`), and
the request budget it draws on. These declarations, :class:`Route` objects, are the one table of
what a party answers (:attr:`Handlers.routes`).

A received message is resolved to its route (the runtime's own, then the role's; a deployed
party's scoring first when the message is a scoring one) and handed, as a :class:`Call`, through
the party's layers (:data:`DEFAULT_MODS`) before the handler runs. A layer ("mod", as in Flower's
client mods) is ``mod(call, call_next) -> reply``: it checks what it checks and calls
``call_next(call)``, or raises. The layers here:

1. :func:`check_sender`: the sender is one the route allows (a :class:`ProtocolError` otherwise);
2. :func:`check_public_key`: a Paillier public key carried by the message is at least the
   policy's ``min_key_bits``;
3. :func:`check_budget`: a request that draws on a budget (PSI, ``Align``) is within the
   policy's ``max_psi_ids`` and ``max_psi_requests``, and its ids within the session's and the
   day's (``psi_ids_per_session``, ``psi_ids_per_day``);
4. :func:`check_bounds`: the work a message asks (its ``n_bins``, its ``n_classes``) within the
   policy's ``max_bins`` and ``max_classes``;
5. :func:`check_policy`: the policy allows every rule the route declares (and what its guard
   asks, e.g. ``Join``'s method, the keys it would make, a bottom model's floors and the method's
   open findings: :mod:`verticalfs.trust`).

Adding a layer is one line: append it to :data:`DEFAULT_MODS` (every party), or give a party
``mods=[*DEFAULT_MODS, my_layer]``. A refusal is a :class:`~verticalfs.exceptions.PolicyError`
naming the party, the rule and the key to change (:func:`refusal`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from verticalfs.configuration import PartyPolicy
from verticalfs.exceptions import PolicyError, ProtocolError
from verticalfs.names import LABEL_HOLDER
from verticalfs.transport.messages import At, kind_name

if TYPE_CHECKING:
    from verticalfs.transport.node import Node

_Handler = TypeVar("_Handler", bound=Callable[..., Any])

#: the policy rules a request may need: what the party must allow, in words (for the refusal)
POLICY_RULES = {
    "release_columns": "send raw columns to the label holder",
    "accept_labels": "receive the labels in the clear",
    "require_secure": "run the plaintext mode of a method that has a secure mode",
}

class Context:
    """What a handler may do besides replying: message other parties, at the current position."""

    __slots__ = ("at", "sender", "policy", "_node")

    def __init__(self, node: Node | None, at: At, sender: str, policy: PartyPolicy | None = None) -> None:
        self._node = node
        self.at = at
        self.sender = sender
        #: the policy of the party answering (limits a role applies itself, e.g. the trees' minimum
        #: rows per bin and per node); the permissive one when none was given
        self.policy = PartyPolicy.permissive() if policy is None else policy

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


# ------------------------------------------------------------------------------------ declarations
@dataclass(frozen=True)
class Budget:
    """A request budget a handler draws on: ``what`` names the requests in a refusal (``"PSI
    requests"``, ``"alignments"``), ``ids(msg)`` is how many ids one request asks about.
    ``rows(target)``: the rows of the file the request is over (the unit of the policy's ``"auto"``
    limits; default the party's own); ``charge``: the ids count against the session's and the day's
    budget (a PSI's claimed ids; an ``Align``, within the intersection, only when it is refused)."""

    what: str
    ids: Callable[[Any], int]
    #: ``rows(target)``: the rows of the file the request is over (the unit of the ``"auto"`` limits;
    #: default the party's training rows); ``charge``: its ids count against the ids' budgets
    rows: Callable[[Any], int] | None = None
    charge: bool = True
    #: ``key(party, msg)``: the key of the id set asked about, when a repeat of a set already
    #: answered is free (``Align``: :mod:`verticalfs.budget`); ``None``: every request is charged
    key: Callable[[Any, Any], str | None] | None = None


@dataclass(frozen=True)
class Route:
    """The declaration of one message kind a party answers (see the module docstring).

    Attributes
    ----------
    kind : type
        The message kind.
    handler : str
        The name of the handler method on its owner: ``handler(msg, ctx) -> reply or None``.
    owner : str
        The class that declares it (``PartyRuntime``, ``DeployedParty``, ``PartyScoring`` or a
        role class).
    peers : bool
        Whether other feature parties may send it too (default: the label holder only).
    policy : tuple of str
        Rules of :data:`POLICY_RULES` the party's policy must allow before the handler runs.
    guard : callable or None
        ``guard(call)``: further policy checks that depend on the message (``Join``: the method and
        the keys it would make), run by :func:`check_policy` after ``policy``.
    budget : Budget or None
        The request budget the kind draws on (:func:`check_budget`).
    """

    kind: type
    handler: str
    owner: str
    peers: bool = False
    policy: tuple[str, ...] = ()
    guard: Callable[[Call], None] | None = None
    budget: Budget | None = None

    @property
    def senders(self) -> str:
        """Who may send the kind, in words."""
        return "the label holder or another feature party" if self.peers else "the label holder"

    def allows(self, sender: str) -> bool:
        return self.peers or sender == LABEL_HOLDER


@dataclass(frozen=True)
class _Mark:
    kinds: tuple[type, ...]
    peers: bool
    policy: tuple[str, ...]
    guard: Callable[[Call], None] | None
    budget: Budget | None


_MARKS: dict[Callable[..., Any], _Mark] = {}


def handles(*kinds: type, peers: bool = False, policy: str | Sequence[str] = (),
            guard: Callable[[Call], None] | None = None,
            budget: Budget | None = None) -> Callable[[_Handler], _Handler]:
    """Declare a method of a :class:`Handlers` class (a role, a runtime, a deployed party's
    scoring) as the handler of message ``kinds``: ``fn(self, msg, ctx)``.

    ``peers=True`` also accepts the kinds from other feature parties (default: the label holder only).
    ``policy``: rules of :data:`POLICY_RULES` the party's policy must allow before the handler runs
    (``"release_columns"`` for a handler that sends raw columns, ``"accept_labels"`` for one that
    receives labels in the clear, ``"require_secure"`` for a plaintext mode). ``guard(call)``:
    policy checks that depend on the message; ``budget``: the request budget the kinds draw on.
    """
    if not kinds or not all(isinstance(k, type) for k in kinds):
        raise ValueError(f"handles(...) takes message classes, got {kinds!r}")
    rules = (policy,) if isinstance(policy, str) else tuple(policy)
    unknown = [r for r in rules if r not in POLICY_RULES]
    if unknown:
        raise ValueError(f"handles(policy=...): unknown rules {unknown}; use {sorted(POLICY_RULES)}")

    def deco(fn: _Handler) -> _Handler:
        _MARKS[fn] = _Mark(tuple(kinds), bool(peers), rules, guard, budget)
        return fn

    return deco


class Handlers:
    """Base of a class whose methods answer messages, declared with :func:`handles`.

    :attr:`routes` (per class, inherited and extended by subclasses) maps each message kind to its
    :class:`Route`; a subclass that overrides a handler method keeps its declaration.
    """

    routes: ClassVar[dict[type, Route]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table: dict[type, Route] = {}
        for base in reversed(cls.__mro__[1:]):
            if issubclass(base, Handlers):
                table.update(base.routes)
        for name, fn in vars(cls).items():
            mark = _MARKS.get(fn) if callable(fn) else None
            if mark is not None:
                for k in mark.kinds:
                    table[k] = Route(k, name, cls.__name__, mark.peers, mark.policy, mark.guard, mark.budget)
        cls.routes = table


# ------------------------------------------------------------------------------------------ a call
class Party(Protocol):
    """What the layers need of the party answering (a :class:`~verticalfs.party.PartyRuntime`)."""

    name: str
    policy: PartyPolicy
    method: str | None

    def count_request(self, what: str, n_ids: int, *, rows: int | None = None, charge: bool = True,
                      key: str | None = None) -> bool: ...


@dataclass
class Call:
    """One message being answered: the party, the sender, the message and its position, the route
    it was resolved to, the object whose handler answers it and what that is (for refusals:
    ``"method 'feast'"``, ``"model 'churn'"``)."""

    party: Party
    sender: str
    msg: Any
    at: At | None
    node: Node | None
    route: Route
    target: Any
    what: str

    def context(self) -> Context:
        return Context(self.node, self.at if self.at is not None else At("other"), self.sender, self.party.policy)


#: a layer: ``mod(call, call_next) -> reply``
Mod = Callable[[Call, Callable[[Call], Any]], Any]


def answer(call: Call, mods: Sequence[Mod]) -> Any:
    """Hand ``call`` through ``mods`` in order, then to its handler; the handler's reply."""

    def step(i: int, c: Call) -> Any:
        if i == len(mods):
            handler: Callable[[Any, Context], Any] = getattr(c.target, c.route.handler)
            return handler(c.msg, c.context())
        return mods[i](c, lambda nxt: step(i + 1, nxt))

    return step(0, call)


# ------------------------------------------------------------------------------------------ layers
def check_sender(call: Call, call_next: Callable[[Call], Any]) -> Any:
    """The sender is one the route allows: the label holder (or, for ``peers`` routes, another party)."""
    if not call.route.allows(call.sender):
        raise ProtocolError(f"party {call.party.name!r} accepts {kind_name(call.msg)} only from "
                            f"{call.route.senders}, not from {call.sender!r}")
    return call_next(call)


def public_key_of(msg: Any) -> bytes | None:
    """The Paillier public key ``msg`` carries in its ``public_key`` field (``None`` if it has none)."""
    pk = getattr(msg, "public_key", None)  # any kind may carry one: the layer checks them all
    return bytes(pk) if isinstance(pk, (bytes, bytearray)) and pk else None


def check_key_bits(party: Party, bits: int, what: str) -> None:
    """A key of ``bits`` is at least the policy's ``min_key_bits`` (a few bits of slack)."""
    least = int(party.policy.min_key_bits)
    if bits < least - 8:  # a modulus of "2048 bits" may be a few bits shorter
        raise refusal(party.name, "min_key_bits", least, what, f"ask for keys of {least} bits or more, or lower it")


def check_public_key(call: Call, call_next: Callable[[Call], Any]) -> Any:
    """A Paillier public key sent to the party (any message's ``public_key`` field) is at least
    ``min_key_bits`` long."""
    pk = public_key_of(call.msg)
    if pk is not None:
        bits = int.from_bytes(pk, "big").bit_length()
        check_key_bits(call.party, bits, f"use a {bits}-bit Paillier key ({kind_name(call.msg)})")
    return call_next(call)


def check_budget(call: Call, call_next: Callable[[Call], Any]) -> Any:
    """A request that draws on a budget (PSI, ``Align``) is counted, within the policy's limits."""
    b = call.route.budget
    if b is not None:
        rows = None if b.rows is None else int(b.rows(call.target))
        key = None if b.key is None else b.key(call.party, call.msg)
        call.party.count_request(b.what, int(b.ids(call.msg)), rows=rows, charge=b.charge, key=key)
    return call_next(call)


def bin_bounds(policy: PartyPolicy | None, party: str, n_bins: int, what: str) -> int:
    """``n_bins`` asked by the label holder, within the policy's ``max_bins``."""
    n_bins = int(n_bins)
    if policy is not None and n_bins > policy.max_bins:
        raise refusal(party, "max_bins", policy.max_bins, f"bin its features into {n_bins} bins ({what})",
                      "ask for fewer bins, or raise it")
    return n_bins


def class_bounds(policy: PartyPolicy | None, party: str, n_classes: int, what: str) -> int:
    """``n_classes`` asked by the label holder, within the policy's ``max_classes``."""
    n_classes = int(n_classes)
    if policy is not None and n_classes > policy.max_classes:
        raise refusal(party, "max_classes", policy.max_classes, f"sum labels of {n_classes} classes ({what})",
                      "ask for fewer classes, or raise it")
    return n_classes


def check_bounds(call: Call, call_next: Callable[[Call], Any]) -> Any:
    """The work a message asks of the party within its policy (issue 50): a ``n_bins`` field at most
    ``max_bins``, a ``n_classes`` field at most ``max_classes``, whatever the kind."""
    policy = call.party.policy
    what = f"{kind_name(call.msg)} of {call.what}"
    n_bins = getattr(call.msg, "n_bins", None)
    if isinstance(n_bins, int) and not isinstance(n_bins, bool):
        bin_bounds(policy, call.party.name, n_bins, what)
    n_classes = getattr(call.msg, "n_classes", None)
    if isinstance(n_classes, int) and not isinstance(n_classes, bool):
        class_bounds(policy, call.party.name, n_classes, what)
    return call_next(call)


def check_policy(call: Call, call_next: Callable[[Call], Any]) -> Any:
    """The party's policy allows every rule the route declares, and its guard passes."""
    for rule in call.route.policy:
        require(call.party, rule, f"{POLICY_RULES[rule]} ({kind_name(call.msg)} of {call.what})")
    if call.route.guard is not None:
        call.route.guard(call)
    return call_next(call)


#: the layers every party runs before a handler, in order (see the module docstring)
DEFAULT_MODS: tuple[Mod, ...] = (check_sender, check_public_key, check_budget, check_bounds, check_policy)


# ------------------------------------------------------------------------------------------ policy
def policy_allows(policy: PartyPolicy, rule: str) -> bool:
    """Whether ``policy`` allows what ``rule`` (a key of :data:`POLICY_RULES`) guards."""
    if rule == "require_secure":
        return not policy.require_secure
    return bool(getattr(policy, rule))


def require(party: Party, rule: str, what: str) -> None:
    """Refuse ``what`` unless ``party``'s policy allows ``rule``."""
    if not policy_allows(party.policy, rule):
        fix = "set it to false" if rule == "require_secure" else "set it to true"
        raise refusal(party.name, rule, getattr(party.policy, rule), what, f"to allow it, {fix}")


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
