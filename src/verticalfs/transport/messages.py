"""Messages: frozen dataclasses, one per kind of payload.

Every exchange between parties is an instance of a class decorated with :func:`message`. The
decorator registers the class under a 16-bit kind id derived from its qualified name (CRC-32 of
``module.ClassName``, folded to 16 bits) so that a method defines its messages in its own folder
without touching the core; a collision is reported at import time.

Field types that :mod:`verticalfs.transport.serde` can carry: ``None``, ``bool``, ``int`` (any
size), ``float``, ``str``, ``bytes``, :class:`numpy.ndarray` (any numeric dtype, exact), lists and
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
import zlib
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from verticalfs.exceptions import TransportError

T = TypeVar("T")

_REGISTRY: dict[int, type] = {}


def tensor_field(**kwargs: Any) -> Any:
    """A dataclass field whose float array is encoded with the channel's payload codec."""
    md = dict(kwargs.pop("metadata", {}) or {})
    md["tensor"] = True
    return dataclasses.field(metadata=md, **kwargs)


def kind_id_of(cls: type) -> int:
    h = zlib.crc32(f"{cls.__module__}.{cls.__qualname__}".encode())
    return ((h >> 16) ^ h) & 0xFFFF


def message(cls: type[T]) -> type[T]:
    """Class decorator: make ``cls`` a frozen dataclass and register it as a message kind."""
    if "__dataclass_fields__" not in cls.__dict__:  # not yet a dataclass itself (a base may be)
        cls = dataclasses.dataclass(frozen=True, eq=False)(cls)
    kid = kind_id_of(cls)
    other = _REGISTRY.get(kid)
    if other is not None and f"{other.__module__}.{other.__qualname__}" != f"{cls.__module__}.{cls.__qualname__}":
        raise TransportError(
            f"message kind id {kid} of {cls.__qualname__} collides with {other.__qualname__}; rename one"
        )
    fields = dataclasses.fields(cls)
    cls._vf_kind = kid  # type: ignore[attr-defined]
    cls._vf_fields = tuple(f.name for f in fields)  # type: ignore[attr-defined]
    cls._vf_tensor = tuple(bool(f.metadata.get("tensor")) for f in fields)  # type: ignore[attr-defined]
    cls._vf_types = tuple(_allowed_types(f.type, f.default is None) for f in fields)  # type: ignore[attr-defined]
    _REGISTRY[kid] = cls
    return cls


_TYPE_NAMES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (float, int), "bool": (bool,), "bytes": (bytes,),
    "np.ndarray": (np.ndarray,), "numpy.ndarray": (np.ndarray,), "ndarray": (np.ndarray,),
    "tuple": (tuple,), "list": (list,), "dict": (dict,), "None": (type(None),),
}


def _allowed_types(annotation: Any, none_default: bool = False) -> tuple[type, ...] | None:
    """The types a decoded field may have, from its annotation (``None``: anything, e.g. ``Any``);
    a field whose default is ``None`` may also be ``None``."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
    out: list[type] = [type(None)] if none_default else []
    for part in text.split("|"):
        name = part.strip().split("[", 1)[0].strip()
        allowed = _TYPE_NAMES.get(name)
        if allowed is None:
            return None  # Any, object, a message class, ...: not checked here
        out.extend(allowed)
    return tuple(dict.fromkeys(out))


def message_class(kind_id: int) -> type:
    try:
        return _REGISTRY[kind_id]
    except KeyError:
        raise TransportError(
            f"unknown message kind id {kind_id}; is the method that defines it imported on both sides?"
        ) from None


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def message_to_dict(msg: Any) -> dict:
    """A message as plain data (its kind by qualified name, its fields; nested messages too), e.g.
    a role's spec in a saved model."""
    fields = {}
    for name in type(msg)._vf_fields:
        v = getattr(msg, name)
        fields[name] = message_to_dict(v) if hasattr(type(v), "_vf_kind") else (list(v) if isinstance(v, tuple) else v)
    return {"kind": qualified_name(type(msg)), "fields": fields}


def message_from_dict(d: dict) -> Any:
    """Inverse of :func:`message_to_dict`; only registered message kinds are built."""
    if not isinstance(d, dict) or "kind" not in d or "fields" not in d:
        raise TransportError("not a saved message: expected {'kind': ..., 'fields': {...}}")
    cls = next((c for c in _REGISTRY.values() if qualified_name(c) == d["kind"]), None)
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


def kind_name(msg_or_cls: Any) -> str:
    cls = msg_or_cls if isinstance(msg_or_cls, type) else type(msg_or_cls)
    return cls.__name__


# --------------------------------------------------------------------------- position
#: protocol phases, in the order of a typical run (their index is written in every message header)
PHASES: tuple[str, ...] = ("setup", "pretrain", "selection", "train", "eval", "report", "other", "checkpoint", "audit")
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


def coded(array, codec) -> Coded:
    """Mark ``array`` (numpy or torch, float) to be encoded with ``codec`` (name or instance).

    ``Embeddings(coded(h, "float16"))``: the receiver decodes a float32 array of the same shape.
    """
    return Coded(array, codec)


# --------------------------------------------------------------------------- core kinds
@message
class HelloRequest:
    """Label holder -> party, phase ``setup``: announce your schema."""


@message
class Hello:
    """Party -> label holder: the party's public schema, no data: its prepared feature names and the
    number of rows it holds per split (after id alignment), and the user's column behind each
    prepared feature where they differ (one-hot levels; ``None`` when every feature is its own column)."""

    feature_names: list
    n_samples: dict
    sources: list | None = None


@message
class Join:
    """Label holder -> party, phase ``setup``: take part in a run of ``method`` with ``spec``.

    The party creates the method's role (its state, models and handlers for this run) from the
    method registry and answers with the role's reply to ``spec`` (:class:`Ready` for split
    learning, :class:`Ack` otherwise). ``spec`` is a message of the method's own kind.
    """

    method: str
    spec: Any


@message
class Ready:
    """Party -> label holder, reply to a split-learning :class:`Join`: the party's sizes (no data)."""

    n_features: int
    embedding_dim: int
    n_samples: dict


@message
class EmbedRequest:
    """Label holder -> party: send the embeddings of mini-batch ``batch`` of ``epoch`` on ``split``.

    ``batch = -1`` asks for the whole split (evaluation, or one-shot uploads such as LESS-VFL's).
    ``train=True`` keeps the autograd graph for the :class:`Gradients` that follow.
    """

    split: str
    epoch: int
    batch: int
    train: bool = True


@message
class Embeddings:
    """Party -> label holder: embeddings ``(rows, width)`` in the codec the role chose."""

    values: np.ndarray = tensor_field()


@message
class Gradients:
    """Label holder -> party: the loss gradient for the embeddings last sent (its shape and codec
    are the method's: dense ``(rows, width)``, or the values at the non-zero embedding entries)."""

    values: np.ndarray = tensor_field()


@message
class Checkpoint:
    """Label holder -> party, one-way: ``save`` the current model state, or ``restore`` the saved
    one (e.g. the best-validation checkpoint)."""

    action: str


@message
class Ack:
    """An empty reply."""


@message
class SupportRequest:
    """Label holder -> party: report the features the party still uses."""


@message
class KeepFeatures:
    """Label holder -> party: use only the prepared features ``indices`` from now on (e.g. the
    selection of an earlier method in a pipeline); the reply is the party's support report."""

    indices: np.ndarray


@message
class SaveModel:
    """Label holder -> party, phase ``report``: save your part of the trained model (your
    preprocessing, kept features and role state) as ``<directory>/<party>.pt`` on your side."""

    directory: str


@message
class ModelSaved:
    """Party -> label holder: the file a party wrote and its SHA-256 (for the model's manifest)."""

    file: str
    sha256: str


@message
class LoadModel:
    """Label holder -> party, phase ``setup``: restore your role of a saved model from ``file``
    (on your side), refusing it unless its SHA-256 is ``sha256``."""

    method: str
    file: str
    sha256: str


@message
class SupportReport:
    """Party -> label holder: indices (into the party's prepared features) still in use and, where
    the party's role has one, a score per kept feature (e.g. the weight norm of its input group)."""

    kept: np.ndarray
    scores: np.ndarray | None = None


@message
class TrafficRequest:
    """Label holder -> party, phase ``audit`` (networked runs): report the messages you sent to other
    feature parties since your last report (the label holder never sees them on its own links)."""


@message
class TrafficReport:
    """Party -> label holder: its ledger records of party-to-party messages, one entry per message."""

    receivers: list
    phases: list
    kinds: list
    rounds: np.ndarray
    steps: np.ndarray
    payload: np.ndarray
    overhead: np.ndarray


@message
class Persist:
    """Label holder -> party, phase ``checkpoint``: ``save`` your state as checkpoint ``tag`` of run
    ``run``, or ``load`` it (:mod:`verticalfs.training.checkpoint`). The party writes in its own
    checkpoint folder; nothing but this request and an :class:`Ack` crosses."""

    action: str
    run: str
    tag: str
