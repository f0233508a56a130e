"""Codec interface, registry and the float32 / float16 / int8 codecs."""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from verticalfs.exceptions import ConfigError, TransportError

#: the most values an expanding (run-length coded) array may decode to per byte received, when the
#: receiver states no expected shape: 1 KiB of float32 per byte
EXPANSION = 256
#: ... and at least this many values (256 KiB of float32; an all-zero 1,024 x 64 batch is 13 bytes)
MIN_EXPANDED = 1 << 16


def expansion_limit(nbytes: int) -> int:
    """The most values an expanding code of ``nbytes`` bytes (or in a message of ``nbytes``) may
    decode to when the receiver states no expected shape: ``max(MIN_EXPANDED, EXPANSION * nbytes)``."""
    return max(MIN_EXPANDED, EXPANSION * int(nbytes))


_F32 = struct.Struct("<f")
_LE_F4 = np.dtype("<f4")


class Codec(ABC):
    """Encode a floating-point array's *values* to bytes (the shape travels separately).

    Subclasses set ``name`` and a unique one-byte ``id`` and implement :meth:`encode` and
    :meth:`decode`. ``decode`` returns a float32 array of ``size`` elements.
    """

    name: ClassVar[str]
    id: ClassVar[int]

    def fixed_size(self, size: int) -> int | None:
        """Encoded length for ``size`` values, or ``None`` if it depends on the values.

        For variable-size codecs the serialiser writes a 4-byte length before the data.
        """
        return None

    @abstractmethod
    def encode(self, a: np.ndarray) -> bytes: ...

    @abstractmethod
    def decode(self, data: memoryview, size: int) -> np.ndarray: ...


class Float32Codec(Codec):
    name = "float32"
    id = 1

    def fixed_size(self, size: int) -> int:
        return 4 * size

    def encode(self, a: np.ndarray) -> bytes:
        if not isinstance(a, np.ndarray) or a.dtype != _LE_F4:
            a = np.asarray(a, dtype=_LE_F4)
        return a.tobytes()  # C order, one copy even for a non-contiguous view

    def decode(self, data: memoryview, size: int) -> np.ndarray:
        if len(data) != 4 * size:
            raise TransportError(f"float32 payload has {len(data)} bytes, expected {4 * size}")
        return np.frombuffer(data, dtype="<f4").astype(np.float32, copy=True)


class Float16Codec(Codec):
    name = "float16"
    id = 2

    def fixed_size(self, size: int) -> int:
        return 2 * size

    def encode(self, a: np.ndarray) -> bytes:
        return np.ascontiguousarray(a, dtype="<f2").tobytes()

    def decode(self, data: memoryview, size: int) -> np.ndarray:
        if len(data) != 2 * size:
            raise TransportError(f"float16 payload has {len(data)} bytes, expected {2 * size}")
        return np.frombuffer(data, dtype="<f2").astype(np.float32)


class Int8Codec(Codec):
    """Symmetric per-tensor int8 quantisation; the scale is a float32 prefix of the payload."""

    name = "int8"
    id = 3

    def fixed_size(self, size: int) -> int:
        return 4 + size

    def encode(self, a: np.ndarray) -> bytes:
        a = np.asarray(a, dtype=np.float32)
        m = float(np.max(np.abs(a))) if a.size else 0.0
        scale = m / 127.0 if m > 0 else 1.0
        q = np.clip(np.rint(a / scale), -127, 127).astype(np.int8)
        return _F32.pack(scale) + q.tobytes()

    def decode(self, data: memoryview, size: int) -> np.ndarray:
        if len(data) != 4 + size:
            raise TransportError(f"int8 payload has {len(data)} bytes, expected {4 + size}")
        (scale,) = _F32.unpack_from(data, 0)
        if not np.isfinite(scale):
            raise TransportError(f"int8 payload has a non-finite scale ({scale}); the sender's values were "
                                 "not finite")
        return np.frombuffer(data, dtype=np.int8, offset=4).astype(np.float32) * np.float32(scale)


_BY_NAME: dict[str, Codec] = {}
_BY_ID: dict[int, Codec] = {}


def register_codec(codec: Codec) -> Codec:
    """Add a codec instance to the registry (unique name and id)."""
    if not 1 <= codec.id <= 255:
        raise ConfigError(f"codec {codec.name!r}: id must be in 1..255, got {codec.id}")
    if codec.name in _BY_NAME or codec.id in _BY_ID:
        other = _BY_NAME.get(codec.name) or _BY_ID.get(codec.id)
        if type(other) is type(codec):
            return other
        raise ConfigError(f"codec {codec.name!r} (id {codec.id}) clashes with {other.name!r}")
    _BY_NAME[codec.name] = codec
    _BY_ID[codec.id] = codec
    return codec


def get_codec(name: str | Codec) -> Codec:
    """Codec by name; unknown names raise :class:`ConfigError` listing the valid ones."""
    if isinstance(name, Codec):
        return name
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ConfigError(f"unknown codec {name!r}; available: {sorted(_BY_NAME)}") from None


def codec_by_id(i: int) -> Codec:
    try:
        return _BY_ID[i]
    except KeyError:
        raise TransportError(f"message uses codec id {i}, which this process does not know") from None


def available_codecs() -> list[str]:
    return sorted(_BY_NAME)


for _c in (Float32Codec(), Float16Codec(), Int8Codec()):
    register_codec(_c)
