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


class _Writer:
    __slots__ = ("parts", "payload", "codec")

    def __init__(self, codec: Codec):
        self.parts: list[bytes] = []
        self.payload = 0
        self.codec = codec

    def value(self, v: Any, tensor: bool = False) -> None:
        p = self.parts
        if v is None:
            p.append(bytes((_T_NONE,)))
        elif isinstance(v, (bool, np.bool_)):
            p.append(bytes((_T_BOOL, 1 if v else 0)))
        elif isinstance(v, (int, np.integer)):
            v = int(v)
            if -(2**63) <= v < 2**63:
                p.append(bytes((_T_INT,)) + _I64.pack(v))
            else:
                n = (v.bit_length() + 8) // 8
                raw = v.to_bytes(n, "little", signed=True)
                p.append(bytes((_T_BIGINT,)) + _U32.pack(n))
                p.append(raw)
                self.payload += n
        elif isinstance(v, (float, np.floating)):
            p.append(bytes((_T_FLOAT,)) + _F64.pack(float(v)))
        elif isinstance(v, str):
            b = v.encode()
            p.append(bytes((_T_STR,)) + _U32.pack(len(b)) + b)
        elif isinstance(v, (bytes, bytearray, memoryview)):
            b = bytes(v)
            p.append(bytes((_T_BYTES,)) + _U32.pack(len(b)))
            p.append(b)
            self.payload += len(b)
        elif isinstance(v, np.ndarray):
            self.array(v, tensor)
        elif hasattr(v, "detach") and hasattr(v, "numpy"):  # a torch tensor
            self.array(v.detach().cpu().numpy(), tensor)
        elif isinstance(v, (list, tuple)):
            p.append(bytes((_T_LIST if isinstance(v, list) else _T_TUPLE,)) + _U32.pack(len(v)))
            for x in v:
                self.value(x, tensor)
        elif isinstance(v, dict):
            p.append(bytes((_T_DICT,)) + _U32.pack(len(v)))
            for k, x in v.items():
                if not isinstance(k, str):
                    raise TransportError(f"dict keys in messages must be str, got {type(k).__name__}")
                self.value(k)
                self.value(x, tensor)
        else:
            raise TransportError(f"cannot serialise a value of type {type(v).__name__} in a message")

    def array(self, a: np.ndarray, tensor: bool) -> None:
        if a.ndim > 255:
            raise TransportError(f"array with {a.ndim} dimensions cannot be sent")
        shape = b"".join(_U32.pack(s) for s in a.shape)
        if tensor and a.dtype.kind == "f":
            data = self.codec.encode(a)
            head = _ARR.pack(self.codec.id, 0, a.ndim)
            if self.codec.fixed_size(a.size) is None:
                shape += _U32.pack(len(data))
        else:
            dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
            dt = np.dtype(dt.str) if dt.kind != "b" else np.dtype("|b1")
            code = _DTYPE_CODE.get(dt)
            if code is None:
                raise TransportError(f"arrays of dtype {a.dtype} cannot be sent; convert to a numeric dtype")
            data = np.ascontiguousarray(a, dtype=dt).tobytes()
            head = _ARR.pack(_RAW, code, a.ndim)
        self.parts.append(bytes((_T_ARRAY,)) + head + shape)
        self.parts.append(data)
        self.payload += len(data)


def encode(msg: Any, *, phase: str = "other", round: int = 0, step: int = 0, codec: str | Codec = "float32") -> Encoded:
    """Serialise ``msg`` (an instance of a registered message class)."""
    cls = type(msg)
    kid = getattr(cls, "_vf_kind", None)
    if kid is None:
        raise TransportError(f"{cls.__name__} is not a registered message; decorate it with @message")
    w = _Writer(get_codec(codec))
    for name, tensor in zip(cls._vf_fields, cls._vf_tensor):
        w.value(getattr(msg, name), tensor)
    body = b"".join(w.parts)
    head = HEADER.pack(MAGIC, VERSION, phase_id(phase), kid, round & 0xFFFFFFFF, step & 0xFFFFFFFF, len(body))
    return Encoded(head + body, w.payload)


@dataclass(frozen=True)
class Decoded:
    msg: Any
    phase: str
    round: int
    step: int


def decode(data: bytes) -> Decoded:
    """Inverse of :func:`encode`."""
    mv = memoryview(data)
    if len(mv) < HEADER_SIZE:
        raise TransportError(f"truncated message: {len(mv)} bytes, header alone is {HEADER_SIZE}")
    magic, ver, ph, kid, rnd, step, blen = HEADER.unpack_from(mv, 0)
    if magic != MAGIC or ver != VERSION:
        raise TransportError(f"not a verticalfs v{VERSION} message (magic {magic!r}, version {ver})")
    if HEADER_SIZE + blen != len(mv):
        raise TransportError(f"message body is {len(mv) - HEADER_SIZE} bytes, header says {blen}")
    cls = message_class(kid)
    r = _Reader(mv, HEADER_SIZE)
    vals = [r.value() for _ in cls._vf_fields]
    if r.pos != len(mv):
        raise TransportError(f"{cls.__name__}: {len(mv) - r.pos} trailing bytes after the last field")
    return Decoded(cls(*vals), PHASES[ph] if ph < len(PHASES) else "other", rnd, step)


class _Reader:
    __slots__ = ("mv", "pos")

    def __init__(self, mv: memoryview, pos: int):
        self.mv = mv
        self.pos = pos

    def _take(self, n: int) -> memoryview:
        if self.pos + n > len(self.mv):
            raise TransportError("truncated message body")
        out = self.mv[self.pos : self.pos + n]
        self.pos += n
        return out

    def _u32(self) -> int:
        return _U32.unpack(self._take(4))[0]

    def value(self) -> Any:
        tag = self._take(1)[0]
        if tag == _T_NONE:
            return None
        if tag == _T_BOOL:
            return bool(self._take(1)[0])
        if tag == _T_INT:
            return _I64.unpack(self._take(8))[0]
        if tag == _T_BIGINT:
            n = self._u32()
            return int.from_bytes(self._take(n), "little", signed=True)
        if tag == _T_FLOAT:
            return _F64.unpack(self._take(8))[0]
        if tag == _T_STR:
            return bytes(self._take(self._u32())).decode()
        if tag == _T_BYTES:
            return bytes(self._take(self._u32()))
        if tag == _T_ARRAY:
            cid, code, ndim = _ARR.unpack(self._take(3))
            shape = tuple(_U32.unpack(self._take(4))[0] for _ in range(ndim))
            size = int(np.prod(shape)) if ndim else 1
            if cid == _RAW:
                dt = _DTYPES[code]
                raw = self._take(size * dt.itemsize)
                return np.frombuffer(raw, dtype=dt).copy().reshape(shape)
            codec = codec_by_id(cid)
            nbytes = codec.fixed_size(size)
            if nbytes is None:
                nbytes = self._u32()
            return codec.decode(self._take(nbytes), size).reshape(shape)
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

