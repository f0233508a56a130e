"""Messages: frozen dataclasses, one per kind of payload.

Every exchange between parties is an instance of a class decorated with :func:`message`. The
decorator registers the class under a 16-bit kind id derived from its qualified name (CRC-32 of
``module.ClassName``, folded to 16 bits) so that a method defines its messages in its own folder
without touching the core; a collision is reported at import time.

Field types that :mod:`verticalfs.transport.serde` can carry: ``None``, ``bool``, ``int`` (any
size), ``float``, ``str``, ``bytes``, :class:`numpy.ndarray` (any numeric dtype, exact), lists and
tuples of these, and ``dict`` with ``str`` keys. Fields declared with :func:`tensor_field` hold
float tensors that go through the channel's payload codec (float32, float16, int8, ...).
"""

from __future__ import annotations

import dataclasses
import zlib
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
    if not dataclasses.is_dataclass(cls):
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
    _REGISTRY[kid] = cls
    return cls


def message_class(kind_id: int) -> type:
    try:
        return _REGISTRY[kind_id]
    except KeyError:
        raise TransportError(
            f"unknown message kind id {kind_id}; is the method that defines it imported on both sides?"
        ) from None


def kind_name(msg_or_cls: Any) -> str:
    cls = msg_or_cls if isinstance(msg_or_cls, type) else type(msg_or_cls)
    return cls.__name__


# --------------------------------------------------------------------------- core kinds
@message
class ModelSpec:
    """Active -> passive at set-up: how to build the bottom model and agree on mini-batches.

    Mini-batches are agreed by sample index: both sides draw the permutation of epoch ``e`` from
    ``numpy.random.default_rng([shuffle_seed, e])``, so no index list travels per batch.
    """

    hidden: tuple
    embedding_dim: int
    activation: str
    optimizer: str
    lr: float
    weight_decay: float
    seed: int
    batch_size: int
    shuffle_seed: int
    momentum: float = 0.0


@message
class Ready:
    """Passive -> active reply to :class:`ModelSpec`: the party's sizes (no data)."""

    n_features: int
    embedding_dim: int
    n_samples: dict


@message
class EmbedRequest:
    """Active -> passive: send the embeddings of mini-batch ``batch`` of ``epoch`` on ``split``.

    ``batch = -1`` asks for the whole split (evaluation, or one-shot uploads such as LESS-VFL's).
    ``train=True`` keeps the autograd graph for the :class:`Gradients` that follow.
    """

    split: str
    epoch: int
    batch: int
    train: bool = True


@message
class Embeddings:
    """Passive -> active: embeddings ``(rows, embedding_dim)``."""

    values: np.ndarray = tensor_field()


@message
class Gradients:
    """Active -> passive: the loss gradient with respect to the embeddings last sent."""

    values: np.ndarray = tensor_field()


@message
class Ack:
    """An empty reply."""


@message
class SupportRequest:
    """Active -> passive: report the features still in the party's model."""


@message
class SupportReport:
    """Passive -> active: indices (into the party's prepared features) still used by its model."""

    kept: np.ndarray
