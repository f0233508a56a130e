"""Message <-> bytes: the only place where bytes are produced.

Wire format of one message (all little-endian)::

    header (18 bytes): magic b"VF" | version u8 | phase u8 | kind u16 | round u32 | step u32 | body length u32
    body: the dataclass fields in declaration order, each a 1-byte type tag followed by its value

Field encodings: None (tag only); bool (1 byte); int (8 bytes, or a length-prefixed big integer);
float (8 bytes); str and bytes (u32 length + data); ndarray (codec id u8, dtype code u8, ndim u8,
ndim x u32 shape, a u32 length for variable-size codecs, then the data); list/tuple (u32 count + items); dict (u32 count + str key/value
pairs).

**Payload vs. overhead.** The ledger records two numbers per message: ``payload`` = the bytes of
array data (after the codec; including an int8 scale), ``bytes`` fields and big-integer digits;
``overhead`` = everything else (the 18-byte header, tags, shapes, scalars, strings). For an
:class:`~verticalfs.transport.messages.Embeddings` or
:class:`~verticalfs.transport.messages.Gradients` message of a 2-D float32 tensor the overhead is
exactly :data:`TENSOR_MESSAGE_OVERHEAD` = 18 + 1 + 3 + 2 x 4 = 30 bytes.

:func:`encode` / :func:`decode` are the public entry points; channels call :func:`encode_parts` /
:func:`decode_parts` (same bytes, no wrapper objects) on their hot path.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from verticalfs.codecs import Codec, codec_by_id, get_codec
from verticalfs.exceptions import TransportError
from verticalfs.transport.messages import message_class

MAGIC = b"VF"
VERSION = 1
HEADER = struct.Struct("<2sBBHIII")
HEADER_SIZE = HEADER.size  # 18
TENSOR_MESSAGE_OVERHEAD = HEADER_SIZE + 1 + 3 + 2 * 4

PHASES: tuple[str, ...] = ("setup", "pretrain", "selection", "train", "eval", "report", "other")
_PHASE_ID = {p: i for i, p in enumerate(PHASES)}

_T_NONE, _T_BOOL, _T_INT, _T_BIGINT, _T_FLOAT, _T_STR, _T_BYTES, _T_ARRAY, _T_LIST, _T_DICT, _T_TUPLE = range(11)
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_ARR = struct.Struct("<BBB")

_DTYPES = [np.dtype(t) for t in ("<f4", "<f8", "<f2", "<i8", "<i4", "<i2", "|i1", "<u8", "<u4", "<u2", "|u1", "|b1")]
_DTYPE_CODE = {d: i for i, d in enumerate(_DTYPES)}
_RAW = 0  # codec id 0: exact bytes in the array's own dtype


def phase_id(phase: str) -> int:
    try:
        return _PHASE_ID[phase]
    except KeyError:
        raise TransportError(f"unknown phase {phase!r}; use one of {PHASES}") from None


@dataclass(frozen=True)
class Encoded:
    """A serialised message and its size split into payload and overhead."""

    data: bytes
    payload: int

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def overhead(self) -> int:
        return len(self.data) - self.payload


# Pre-built byte strings and structs: the serialiser runs for every message, so it avoids
# building small ``bytes`` objects and ``Struct`` instances per call.
_TAG_NONE = bytes((_T_NONE,))
_TAG_TRUE = bytes((_T_BOOL, 1))
_TAG_FALSE = bytes((_T_BOOL, 0))
_TAG_INT = struct.Struct("<Bq")
_TAG_FLOAT = struct.Struct("<Bd")
_TAG_LEN = struct.Struct("<BI")  # str, bytes, big int, list, tuple, dict: tag + u32
_SHAPES: dict[int, struct.Struct] = {}  # ndim -> "<" + "I" * ndim
_ARRAY_HEADS: dict[tuple[int, bool], struct.Struct] = {}
_CODEC_TYPES: set[type] = set()  # Codec subclasses seen by encode()  # (ndim, length prefix) -> array head


def _shape_struct(ndim: int) -> struct.Struct:
    s = _SHAPES.get(ndim)
    if s is None:
        s = _SHAPES[ndim] = struct.Struct("<" + "I" * ndim)
    return s


def _array_head(ndim: int, with_length: bool) -> struct.Struct:
    """tag u8 | codec id u8 | dtype code u8 | ndim u8 | ndim x u32 shape [| u32 data length]."""
    key = (ndim, with_length)
    s = _ARRAY_HEADS.get(key)
    if s is None:
        s = _ARRAY_HEADS[key] = struct.Struct("<BBBB" + "I" * (ndim + with_length))
    return s


def _raw_dtype(a: np.ndarray) -> tuple[int, np.dtype]:
    dt = a.dtype
    if dt.byteorder == ">":
        dt = dt.newbyteorder("<")
    dt = np.dtype(dt.str) if dt.kind != "b" else np.dtype("|b1")
    code = _DTYPE_CODE.get(dt)
    if code is None:
        raise TransportError(f"arrays of dtype {a.dtype} cannot be sent; convert to a numeric dtype")
    return code, dt


class _Writer:
    __slots__ = ("parts", "payload", "codec")

    def __init__(self, codec: Codec):
        self.parts: list[bytes] = []
        self.payload = 0
        self.codec = codec

    def value(self, v: Any, tensor: bool = False) -> None:
        if type(v) is np.ndarray:  # the common case first
            self.array(v, tensor)
            return
        p = self.parts
        if v is None:
            p.append(_TAG_NONE)
        elif isinstance(v, (bool, np.bool_)):
            p.append(_TAG_TRUE if v else _TAG_FALSE)
        elif isinstance(v, (int, np.integer)):
            v = int(v)
            if -(2**63) <= v < 2**63:
                p.append(_TAG_INT.pack(_T_INT, v))
            else:
                n = (v.bit_length() + 8) // 8
                p.append(_TAG_LEN.pack(_T_BIGINT, n))
                p.append(v.to_bytes(n, "little", signed=True))
                self.payload += n
        elif isinstance(v, (float, np.floating)):
            p.append(_TAG_FLOAT.pack(_T_FLOAT, float(v)))
        elif isinstance(v, str):
            b = v.encode()
            p.append(_TAG_LEN.pack(_T_STR, len(b)))
            p.append(b)
        elif isinstance(v, (bytes, bytearray, memoryview)):
            b = bytes(v)
            p.append(_TAG_LEN.pack(_T_BYTES, len(b)))
            p.append(b)
            self.payload += len(b)
        elif isinstance(v, np.ndarray):
            self.array(v, tensor)
        elif hasattr(v, "detach") and hasattr(v, "numpy"):  # a torch tensor
            self.array(v.detach().cpu().numpy(), tensor)
        elif isinstance(v, (list, tuple)):
            p.append(_TAG_LEN.pack(_T_LIST if isinstance(v, list) else _T_TUPLE, len(v)))
            for x in v:
                self.value(x, tensor)
        elif isinstance(v, dict):
            p.append(_TAG_LEN.pack(_T_DICT, len(v)))
            for k, x in v.items():
                if not isinstance(k, str):
                    raise TransportError(f"dict keys in messages must be str, got {type(k).__name__}")
                self.value(k)
                self.value(x, tensor)
        else:
            raise TransportError(f"cannot serialise a value of type {type(v).__name__} in a message")

    def array(self, a: np.ndarray, tensor: bool) -> None:
        ndim = a.ndim
        if ndim > 255:
            raise TransportError(f"array with {ndim} dimensions cannot be sent")
        if tensor and a.dtype.kind == "f":
            codec = self.codec
            data = codec.encode(a)
            if codec.fixed_size(a.size) is None:
                head = _array_head(ndim, True).pack(_T_ARRAY, codec.id, 0, ndim, *a.shape, len(data))
            else:
                head = _array_head(ndim, False).pack(_T_ARRAY, codec.id, 0, ndim, *a.shape)
        else:
            code, dt = _raw_dtype(a)
            data = np.ascontiguousarray(a, dtype=dt).tobytes()
            head = _array_head(ndim, False).pack(_T_ARRAY, _RAW, code, ndim, *a.shape)
        self.parts.append(head)
        self.parts.append(data)
        self.payload += len(data)


def encode(msg: Any, *, phase: str = "other", round: int = 0, step: int = 0, codec: str | Codec = "float32") -> Encoded:
    """Serialise ``msg`` (an instance of a registered message class)."""
    pid = _PHASE_ID.get(phase)
    if pid is None:
        pid = phase_id(phase)  # raises
    if type(codec) not in _CODEC_TYPES:  # a name, or a codec class not seen yet
        codec = get_codec(codec)
        _CODEC_TYPES.add(type(codec))
    return Encoded(*encode_parts(msg, pid, round, step, codec))


def encode_parts(msg: Any, pid: int, round: int, step: int, codec: Codec) -> tuple[bytes, int]:
    """:func:`encode` for a phase id and a codec instance: ``(data, payload bytes)``.

    The channels' hot path; it skips the argument checks :func:`encode` does.
    """
    cls = type(msg)
    kid = getattr(cls, "_vf_kind", None)
    if kid is None:
        raise TransportError(f"{cls.__name__} is not a registered message; decorate it with @message")
    parts: list[bytes] = [b""]  # the header's place
    payload = 0
    w = None
    for name, tensor in zip(cls._vf_fields, cls._vf_tensor, strict=True):
        v = getattr(msg, name)
        t = type(v)
        # fast paths for the common field types; everything else goes through _Writer
        if t is np.ndarray and tensor and v.dtype.kind == "f" and v.ndim <= 255:
            data = codec.encode(v)
            if codec.fixed_size(v.size) is None:
                parts.append(_array_head(v.ndim, True).pack(_T_ARRAY, codec.id, 0, v.ndim, *v.shape, len(data)))
            else:
                parts.append(_array_head(v.ndim, False).pack(_T_ARRAY, codec.id, 0, v.ndim, *v.shape))
            parts.append(data)
            payload += len(data)
        elif t is int and -(2**63) <= v < 2**63:
            parts.append(_TAG_INT.pack(_T_INT, v))
        elif t is str:
            b = v.encode()
            parts.append(_TAG_LEN.pack(_T_STR, len(b)))
            parts.append(b)
        elif t is bool:
            parts.append(_TAG_TRUE if v else _TAG_FALSE)
        else:
            if w is None:
                w = _Writer(codec)
                w.parts = parts
            w.value(v, tensor)
    if w is not None:
        payload += w.payload
    blen = 0
    for b in parts:
        blen += len(b)
    parts[0] = HEADER.pack(MAGIC, VERSION, pid, kid, round & 0xFFFFFFFF, step & 0xFFFFFFFF, blen)
    return b"".join(parts), payload


@dataclass(frozen=True)
class Decoded:
    msg: Any
    phase: str
    round: int
    step: int


def decode(data: bytes) -> Decoded:
    """Inverse of :func:`encode`."""
    msg, ph, rnd, step = decode_parts(data)
    return Decoded(msg, PHASES[ph] if ph < len(PHASES) else "other", rnd, step)


def decode_parts(data: bytes) -> tuple[Any, int, int, int]:
    """:func:`decode` without the :class:`Decoded` wrapper: ``(msg, phase id, round, step)``."""
    mv = memoryview(data)
    end = len(mv)
    if end < HEADER_SIZE:
        raise TransportError(f"truncated message: {end} bytes, header alone is {HEADER_SIZE}")
    magic, ver, ph, kid, rnd, step, blen = HEADER.unpack_from(mv, 0)
    if magic != MAGIC or ver != VERSION:
        raise TransportError(f"not a verticalfs v{VERSION} message (magic {magic!r}, version {ver})")
    if HEADER_SIZE + blen != end:
        raise TransportError(f"message body is {end - HEADER_SIZE} bytes, header says {blen}")
    cls = message_class(kid)
    pos = HEADER_SIZE
    vals = []
    try:
        for _ in cls._vf_fields:
            tag = mv[pos]
            # fast paths for the common field types; everything else goes through _Reader
            if tag == _T_ARRAY and mv[pos + 1] != _RAW:
                cid, _, ndim = _ARR.unpack_from(mv, pos + 1)
                shape = _shape_struct(ndim).unpack_from(mv, pos + 4)
                pos += 4 + 4 * ndim
                size = 1
                for n in shape:
                    size *= n
                codec = codec_by_id(cid)
                nbytes = codec.fixed_size(size)
                if nbytes is None:
                    (nbytes,) = _U32.unpack_from(mv, pos)
                    pos += 4
                if pos + nbytes > end:
                    raise TransportError("truncated message body")
                vals.append(codec.decode(mv[pos : pos + nbytes], size).reshape(shape))
                pos += nbytes
            elif tag == _T_INT:
                vals.append(_I64.unpack_from(mv, pos + 1)[0])
                pos += 9
            elif tag == _T_BOOL:
                vals.append(bool(mv[pos + 1]))
                pos += 2
            else:
                r = _Reader(mv, pos)
                vals.append(r.value())
                pos = r.pos
    except (struct.error, IndexError):
        raise TransportError("truncated message body") from None
    if pos != end:
        raise TransportError(f"{cls.__name__}: {end - pos} trailing bytes after the last field")
    return cls(*vals), ph, rnd, step


class _Reader:
    __slots__ = ("mv", "pos", "end")

    def __init__(self, mv: memoryview, pos: int):
        self.mv = mv
        self.pos = pos
        self.end = len(mv)

    def _take(self, n: int) -> memoryview:
        pos = self.pos
        if pos + n > self.end:
            raise TransportError("truncated message body")
        self.pos = pos + n
        return self.mv[pos : pos + n]

    def _unpack(self, s: struct.Struct) -> tuple:
        pos = self.pos
        if pos + s.size > self.end:
            raise TransportError("truncated message body")
        self.pos = pos + s.size
        return s.unpack_from(self.mv, pos)

    def _u32(self) -> int:
        return self._unpack(_U32)[0]

    def value(self) -> Any:
        if self.pos >= self.end:
            raise TransportError("truncated message body")
        tag = self.mv[self.pos]
        self.pos += 1
        if tag == _T_ARRAY:
            return self.array()
        if tag == _T_NONE:
            return None
        if tag == _T_BOOL:
            return bool(self._take(1)[0])
        if tag == _T_INT:
            return self._unpack(_I64)[0]
        if tag == _T_BIGINT:
            n = self._u32()
            return int.from_bytes(self._take(n), "little", signed=True)
        if tag == _T_FLOAT:
            return self._unpack(_F64)[0]
        if tag == _T_STR:
            return bytes(self._take(self._u32())).decode()
        if tag == _T_BYTES:
            return bytes(self._take(self._u32()))
        if tag in (_T_LIST, _T_TUPLE):
            n = self._u32()
            items = [self.value() for _ in range(n)]
            return items if tag == _T_LIST else tuple(items)
        if tag == _T_DICT:
            n = self._u32()
            out = {}
            for _ in range(n):
                k = self.value()
                out[k] = self.value()
            return out
        raise TransportError(f"unknown field tag {tag} in message")

    def array(self) -> np.ndarray:
        cid, code, ndim = self._unpack(_ARR)
        shape = self._unpack(_shape_struct(ndim))
        size = 1
        for s in shape:
            size *= s
        if cid == _RAW:
            if code >= len(_DTYPES):
                raise TransportError(f"unknown dtype code {code} in message")
            dt = _DTYPES[code]
            raw = self._take(size * dt.itemsize)
            return np.frombuffer(raw, dtype=dt).reshape(shape).copy()
        codec = codec_by_id(cid)
        nbytes = codec.fixed_size(size)
        if nbytes is None:
            nbytes = self._u32()
        return codec.decode(self._take(nbytes), size).reshape(shape)
