"""Messages: frozen dataclasses, one per kind of payload.

Every exchange between parties is an instance of a class decorated with :func:`message`, which
gives the kind its **stable wire name**: ``@message("sparsevfl.TopWGradients")``. The name, not the
module the class lives in, identifies the kind: its 16-bit kind id on the wire is derived from the
name alone (:func:`kind_id_of`), and saved models refer to message kinds by it
(:func:`message_to_dict`), so moving or renaming a Python file changes neither the wire format nor
what a saved model means. A method defines its messages in its own folder without touching the
core. Names are ``namespace.Name``: ``core`` for the core's kinds (transport, training, deploy,
PSI, the filter base), otherwise the method's package (``feast``, ``less_vfl``, ...). A missing or
malformed name, a name given twice, or two names whose ids collide are refused at import time.
Renaming a kind or giving it another name changes the protocol (``tests/transport/test_wire_names.py``
pins every name and id).

Both ends of a run speak :data:`PROTOCOL_VERSION` (major, minor), announced in :class:`Hello`
(party -> label holder) and :class:`Join` (label holder -> party); a peer with another major
version is refused with a :class:`~verticalfs.exceptions.ProtocolError` naming both versions
(:func:`check_protocol`), a different minor version is accepted.

Field types that :mod:`verticalfs.transport.serde` can carry: ``None``, ``bool``, ``int`` (any
size), ``float``, ``str``, ``bytes``, :class:`numpy.ndarray` (any numeric dtype, exact; or 1-D of
dtype ``str``, sent as fixed-width UTF-8 since protocol 1.2), lists and
tuples of these, ``dict`` with ``str`` keys, and instances of other message classes (nested, e.g.
the method-specific spec inside :class:`Join`).

Float tensors in fields declared with :func:`tensor_field` go through a payload codec
(:mod:`verticalfs.codecs`). The codec is chosen per value by the code that creates the message:
``Embeddings(coded(h, "rle16"))`` sends ``h`` run-length coded at 16 bits; a bare array is sent as
float32 (exact for float32 tensors). The receiver gets a plain float32 array either way: the codec
id travels with the value.

Where a message sits in the protocol travels with it too: every message is sent with an :class:`At`
(phase, round, step) that serde writes into its header and the ledger records.
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from verticalfs.exceptions import ProtocolError, TransportError

T = TypeVar("T")

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # typing.dataclass_transform is Python 3.11+; it only informs type checkers

    def dataclass_transform(**_: Any) -> Callable[[T], T]:
        return lambda f: f

#: the version of the message protocol, ``(major, minor)``, announced in :class:`Hello` and
#: :class:`Join`; separate from the package version. Bump the minor for a compatible addition (a new
#: message kind, say), the major for anything an older peer would misread (a kind's fields, ids,
#: encodings): a peer with another major is refused.
# 1.1: PSI digests, EndSession, the streamed PSI kinds; 1.2: numpy text arrays (Align's ids, compact:
# a party of 1.1 cannot decode them, a party of 1.2 still takes Align's ids as a list of str); 1.3: the
# streamed PSI over a party's scoring file (ScoringPsiOpen, ScoringPsiChunk); 1.4: SecureBoost's kinds
# (secureboost.*)
# 1.5: issue 50's LabelProof and TrustQuery / TrustReport (a party of 1.4 runs none of its checks and
# answers no TrustQuery)
# 1.6: the gates' penalty path (fedsdg_fs.GatePenalty)
# 1.7: group lasso's penalty path (baselines.GroupLassoPenalty)
# 2.0: fields added to existing kinds, which a 1.x peer would misread (fields are positional):
# the MI filters' ``estimator`` (feast.ScoreRequest, feast.LabelScoresRequest), ICAFS's ``rank`` (ICAFSSpec);
# a 1.x peer is refused by version instead of failing inside a decode
PROTOCOL_VERSION: tuple[int, int] = (2, 0)

# message classes are typed type[Any]: their _vf_* attributes are set by @message
_REGISTRY: dict[int, type[Any]] = {}  # kind id -> class
_BY_NAME: dict[str, type[Any]] = {}  # wire name -> class
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


def tensor_field(**kwargs: Any) -> Any:
    """A dataclass field whose float array is encoded with the channel's payload codec."""
    md = dict(kwargs.pop("metadata", {}) or {})
    md["tensor"] = True
    return dataclasses.field(metadata=md, **kwargs)


def kind_id_of(name: str) -> int:
    """The 16-bit kind id of the wire name ``name`` (CRC-32 of the name, folded to 16 bits)."""
    h = zlib.crc32(name.encode())
    return ((h >> 16) ^ h) & 0xFFFF


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass_transform(frozen_default=True, eq_default=False, field_specifiers=(dataclasses.field, tensor_field))
def message(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: make the class a frozen dataclass and register it as the message kind
    ``name``, its stable wire name (``"namespace.Name"``, e.g. ``@message("sparsevfl.TopWGradients")``).

    The kind id on the wire is derived from ``name`` only. A missing or malformed name, a name
    already taken by another class, and a name whose id collides with another kind's are
    :class:`~verticalfs.exceptions.TransportError` at import time.
    """
    if isinstance(name, type):  # bare @message above a class
        raise TransportError(
            f"@message needs the kind's stable wire name: write @message(\"<namespace>.{name.__name__}\") above "
            f"class {name.__qualname__} in {name.__module__} (the name, not the module path, identifies the kind "
            "on the wire and in saved models)")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise TransportError(f"message wire name {name!r} is not of the form 'namespace.Name' (letters, digits, "
                             "underscores, separated by dots), e.g. @message(\"mymethod.Scores\")")

    def register(cls: type[T]) -> type[T]:
        if "__dataclass_fields__" not in cls.__dict__:  # not yet a dataclass itself (a base may be)
            cls = dataclasses.dataclass(frozen=True, eq=False)(cls)
        same = _BY_NAME.get(name)
        if same is not None and _where(same) != _where(cls):
            raise TransportError(f"message wire name {name!r} of {_where(cls)} is already the name of "
                                 f"{_where(same)}; give one of them another name")
        kid = kind_id_of(name)
        other = _REGISTRY.get(kid)
        taken = getattr(other, "_vf_name", name)
        if other is not None and taken != name:
            raise TransportError(f"message wire name {name!r} of {_where(cls)} has kind id {kid}, like "
                                 f"{taken!r} of {_where(other)}; choose another name for one of them")
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]  # cls is a dataclass by now
        cls._vf_kind = kid  # type: ignore[attr-defined]
        cls._vf_name = name  # type: ignore[attr-defined]
        cls._vf_fields = tuple(f.name for f in fields)  # type: ignore[attr-defined]
        cls._vf_tensor = tuple(bool(f.metadata.get("tensor")) for f in fields)  # type: ignore[attr-defined]
        cls._vf_types = tuple(_allowed_types(f.type, f.default is None) for f in fields)  # type: ignore[attr-defined]
        _REGISTRY[kid] = cls
        _BY_NAME[name] = cls
        return cls

    return register


def registered_kinds() -> dict[str, int]:
    """Every registered message kind: ``{wire name: kind id}`` (of the modules imported so far)."""
    return dict(sorted((wire_name(cls), kid) for kid, cls in _REGISTRY.items()))


_TYPE_NAMES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (float, int), "bool": (bool,), "bytes": (bytes,),
    "np.ndarray": (np.ndarray,), "numpy.ndarray": (np.ndarray,), "ndarray": (np.ndarray,),
    "tuple": (tuple,), "list": (list,), "dict": (dict,), "None": (type(None),),
}


def _allowed_types(annotation: Any, none_default: bool = False) -> tuple[type, ...] | None:
    """The types a decoded field may have, from its annotation (``None``: anything, e.g. ``Any``);
    a field whose default is ``None`` may also be ``None``."""
    text = annotation if isinstance(annotation, str) else (
        annotation.__name__ if isinstance(annotation, type) else repr(annotation))
    out: list[type] = [type(None)] if none_default else []
    for part in text.split("|"):
        name = part.strip().split("[", 1)[0].strip()
        allowed = _TYPE_NAMES.get(name)
        if allowed is None:
            return None  # Any, object, a message class, ...: not checked here
        out.extend(allowed)
    return tuple(dict.fromkeys(out))


def message_class(kind_id: int) -> type[Any]:
    try:
        return _REGISTRY[kind_id]
    except KeyError:
        raise TransportError(
            f"unknown message kind id {kind_id}; is the method that defines it imported on both sides, and do "
            f"both sides speak protocol {_fmt(PROTOCOL_VERSION)} (the same verticalfs version)?"
        ) from None


def wire_name(msg_or_cls: Any) -> str:
    """The stable wire name of a message or message class (e.g. ``"core.Hello"``)."""
    cls = msg_or_cls if isinstance(msg_or_cls, type) else type(msg_or_cls)
    name = getattr(cls, "_vf_name", None)
    if name is None:
        raise TransportError(f"{cls.__name__} is not a registered message; decorate it with @message")
    return str(name)


def message_to_dict(msg: Any) -> dict[str, Any]:
    """A message as plain data (its kind by wire name, its fields; nested messages too), e.g. a
    role's spec in a saved model."""
    fields: dict[str, Any] = {}
    for name in type(msg)._vf_fields:
        v = getattr(msg, name)
        fields[name] = message_to_dict(v) if hasattr(type(v), "_vf_kind") else (list(v) if isinstance(v, tuple) else v)
    return {"kind": wire_name(msg), "fields": fields}


def message_from_dict(d: dict[str, Any]) -> Any:
    """Inverse of :func:`message_to_dict`; only registered message kinds are built."""
    if not isinstance(d, dict) or "kind" not in d or "fields" not in d:
        raise TransportError("not a saved message: expected {'kind': ..., 'fields': {...}}")
    cls = _BY_NAME.get(d["kind"]) if isinstance(d["kind"], str) else None
    if cls is None:
        raise TransportError(f"unknown message kind {d['kind']!r}; is the method that defines it installed?")
    vals = {}
    for name in cls._vf_fields:
        if name not in d["fields"]:
            continue
        v = d["fields"][name]
        if isinstance(v, dict) and set(v) == {"kind", "fields"}:
            v = message_from_dict(v)
        elif isinstance(v, list) and isinstance(cls.__dataclass_fields__[name].default, tuple):
            v = tuple(v)
        vals[name] = v
    return cls(**vals)


def _fmt(version: Any) -> str:
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else repr(version)


def check_protocol(version: Any, *, peer: str, me: str) -> tuple[int, int]:
    """Accept a peer's announced protocol ``version`` (from its :class:`Hello` or :class:`Join`) if
    its major version is ours, else raise a :class:`~verticalfs.exceptions.ProtocolError` naming
    both: ``"party 'telecom' speaks protocol 2.0, this label holder 1.0; ..."``. ``peer`` and
    ``me`` name the two sides in that sentence. A different minor version is accepted."""
    if not (isinstance(version, tuple) and len(version) == 2
            and all(type(v) is int and 0 <= v < 1 << 16 for v in version)):
        raise ProtocolError(f"{peer} announces protocol version {version!r}, not a (major, minor) pair; {me} speaks "
                            f"verticalfs protocol {_fmt(PROTOCOL_VERSION)}")
    if version[0] != PROTOCOL_VERSION[0]:
        raise ProtocolError(f"{peer} speaks protocol {_fmt(version)}, {me} {_fmt(PROTOCOL_VERSION)}; install "
                            "matching verticalfs versions")
    return version


def kind_name(msg_or_cls: Any) -> str:
    """The class name of a message (what the ledger and error messages show; not unique across
    methods: :func:`wire_name` is)."""
    cls = msg_or_cls if isinstance(msg_or_cls, type) else type(msg_or_cls)
    return cls.__name__


# --------------------------------------------------------------------------- position
#: protocol phases, in the order of a typical run (their index is written in every message header)
PHASES: tuple[str, ...] = ("setup", "pretrain", "selection", "train", "eval", "report", "other", "checkpoint", "audit",
                               "predict")
_PHASE_SET = frozenset(PHASES)


@dataclass(frozen=True, slots=True)
class At:
    """Where a message sits in the protocol: ``phase``, ``round`` (an epoch or a protocol round) and
    ``step`` (a mini-batch). Passed with every message; written into its header; recorded on the
    ledger. A party's reply and the messages it sends while handling a message carry the position
    of that message.
    """

    phase: str
    round: int = 0
    step: int = 0

    def __post_init__(self) -> None:
        if self.phase not in _PHASE_SET:
            raise TransportError(f"unknown phase {self.phase!r}; use one of {PHASES}")

    def with_step(self, step: int) -> At:
        return At(self.phase, self.round, step)


# ----------------------------------------------------------------------------- coded values
@dataclass(frozen=True, slots=True)
class Coded:
    """A float array to be sent with a given payload codec (see :func:`coded`)."""

    array: Any
    codec: Any  # a codec name or a verticalfs.codecs.Codec instance


def coded(array: Any, codec: Any) -> Any:
    """Mark ``array`` (numpy or torch, float) to be encoded with ``codec`` (name or instance).

    ``Embeddings(coded(h, "float16"))``: the receiver decodes a float32 array of the same shape.
    Returns a :class:`Coded`, typed ``Any``: it stands in for the array of a tensor field (declared
    ``np.ndarray``, what the receiver gets).
    """
    return Coded(array, codec)


# --------------------------------------------------------------------------- core kinds
@message("core.HelloRequest")
class HelloRequest:
    """Label holder -> party, phase ``setup``: announce your schema."""


@message("core.Hello")
class Hello:
    """Party -> label holder: the party's public schema, no data: its prepared feature names and the
    number of rows it holds per split (after id alignment), and the user's column behind each
    prepared feature where they differ (one-hot levels; ``None`` when every feature is its own column),
    and the :data:`PROTOCOL_VERSION` the party speaks (the label holder refuses another major)."""

    feature_names: list[Any]
    n_samples: dict[str, Any]
    sources: list[Any] | None = None
    protocol: tuple[Any, ...] = PROTOCOL_VERSION


@message("core.Join")
class Join:
    """Label holder -> party, phase ``setup``: take part in a run of ``method`` with ``spec``.

    The party creates the method's role (its state, models and handlers for this run) from the
    method registry and answers with the role's reply to ``spec`` (:class:`Ready` for split
    learning, :class:`Ack` otherwise). ``spec`` is a message of the method's own kind. ``protocol``
    is the :data:`PROTOCOL_VERSION` the label holder speaks (the party refuses another major).
    """

    method: str
    spec: Any
    protocol: tuple[Any, ...] = PROTOCOL_VERSION


@message("core.Ready")
class Ready:
    """Party -> label holder, reply to a split-learning :class:`Join`: the party's sizes (no data)."""

    n_features: int
    embedding_dim: int
    n_samples: dict[str, Any]


@message("core.EmbedRequest")
class EmbedRequest:
    """Label holder -> party: send the embeddings of mini-batch ``batch`` of ``epoch`` on ``split``.

    ``batch = -1`` asks for the whole split (evaluation, or one-shot uploads such as LESS-VFL's).
    ``train=True`` keeps the autograd graph for the :class:`Gradients` that follow.
    """

    split: str
    epoch: int
    batch: int
    train: bool = True


@message("core.Embeddings")
class Embeddings:
    """Party -> label holder: embeddings ``(rows, width)`` in the codec the role chose."""

    values: np.ndarray = tensor_field()


@message("core.Gradients")
class Gradients:
    """Label holder -> party: the loss gradient for the embeddings last sent (its shape and codec
    are the method's: dense ``(rows, width)``, or the values at the non-zero embedding entries)."""

    values: np.ndarray = tensor_field()


@message("core.Checkpoint")
class Checkpoint:
    """Label holder -> party, one-way: ``save`` the current model state, or ``restore`` the saved
    one (e.g. the best-validation checkpoint)."""

    action: str


@message("core.Ack")
class Ack:
    """An empty reply."""


@message("core.SupportRequest")
class SupportRequest:
    """Label holder -> party: report the features the party still uses."""


@message("core.KeepFeatures")
class KeepFeatures:
    """Label holder -> party: use only the prepared features ``indices`` from now on (e.g. the
    selection of an earlier method in a pipeline); the reply is the party's support report."""

    indices: np.ndarray


@message("core.SaveModel")
class SaveModel:
    """Label holder -> party, phase ``report``: save your part of the trained model (your
    preprocessing, kept features and role state) as ``<directory>/<party>.pt`` on your side."""

    directory: str


@message("core.ModelSaved")
class ModelSaved:
    """Party -> label holder: the file a party wrote and its SHA-256 (for the model's manifest)."""

    file: str
    sha256: str


@message("core.LoadModel")
class LoadModel:
    """Label holder -> party, phase ``setup``: restore your role of a saved model from ``file``
    (on your side), refusing it unless its SHA-256 is ``sha256``."""

    method: str
    file: str
    sha256: str


@message("core.SupportReport")
class SupportReport:
    """Party -> label holder: indices (into the party's prepared features) still in use and, where
    the party's role has one, a score per kept feature (e.g. the weight norm of its input group)."""

    kept: np.ndarray
    scores: np.ndarray | None = None


@message("core.TrafficRequest")
class TrafficRequest:
    """Label holder -> party, phase ``audit`` (networked runs): report the messages you sent to other
    feature parties since your last report (the label holder never sees them on its own links)."""


@message("core.TrafficReport")
class TrafficReport:
    """Party -> label holder: its ledger records of party-to-party messages, one entry per message."""

    receivers: list[Any]
    phases: list[Any]
    kinds: list[Any]
    rounds: np.ndarray
    steps: np.ndarray
    payload: np.ndarray
    overhead: np.ndarray


@message("core.Persist")
class Persist:
    """Label holder -> party, phase ``checkpoint``: ``save`` your state as checkpoint ``tag`` of run
    ``run``, ``load`` it, or ``clear`` the run's checkpoints once it completed
    (:mod:`verticalfs.training.checkpoint`). The party writes in its own checkpoint folder; nothing
    but this request and an :class:`Ack` crosses."""

    action: str
    run: str
    tag: str


@message("core.EndSession")
class EndSession:
    """Label holder -> party: the run of this session (the call's ``vf-session``) is over; the
    party forgets the session's state and frees its place (``max_sessions`` of its policy)."""
