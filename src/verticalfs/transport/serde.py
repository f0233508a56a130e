"""Message <-> bytes. Bytes are made only here and in :mod:`verticalfs.codecs` (tensor codecs, and
the fixed-width integers the crypto layer uses for ciphertexts).

Wire format of one message (all little-endian)::

    header (22 bytes): magic b"VF" | version u8 | phase u8 | kind u16 | round u32 | step u32
                       | body length u32 | CRC-32 u32 of the header's first 18 bytes and the body
    body: the dataclass fields in declaration order, each a 1-byte type tag followed by its value

Field encodings: None (tag only); bool (1 byte); int (8 bytes, or a length-prefixed big integer);
float (8 bytes); str and bytes (u32 length + data); ndarray (codec id u8, dtype code u8, ndim u8,
ndim x u32 shape, a u32 length for variable-size codecs, then the data); a 1-D numpy ``str`` array
(u32 count, u32 width, then each item's UTF-8 padded with NUL bytes to the width); list/tuple (u32 count +
items); dict (u32 count + str key/value pairs); a nested message (u16 kind + its fields, at most
:data:`MAX_DEPTH` levels of nesting of lists, dicts and messages).

Float arrays in tensor fields are encoded with the codec the sender chose for that value
(:func:`verticalfs.transport.messages.coded`), float32 for a bare array; the codec id travels with
the value, so the receiver needs no setting to decode it.

**Payload vs. overhead.** The ledger records two numbers per message: ``payload`` = the bytes of
array data (after the codec; including an int8 scale), ``bytes`` fields and big-integer digits;
``overhead`` = everything else (the 22-byte header, tags, shapes, scalars, strings). For an
:class:`~verticalfs.transport.messages.Embeddings` or
:class:`~verticalfs.transport.messages.Gradients` message of a 2-D float32 tensor the overhead is
exactly :data:`TENSOR_MESSAGE_OVERHEAD` = 22 + 1 + 3 + 2 x 4 = 34 bytes.

**Decoding is safe against hostile bytes** (the decoder faces another organisation's messages):
every failure is a :class:`~verticalfs.exceptions.TransportError`; the CRC-32 covers the header
(kind, phase, round, step, length) and the body and is checked first, so a corrupted message is an
error, never a silently different message or position (version 3; version 2 left the header
out); every declared length is checked against the bytes actually received before anything is
allocated; nesting is bounded (:data:`MAX_DEPTH`); the items of lists, tuples, dicts and nested
messages are bounded per byte of message (:func:`item_budget`: a message of ``b`` bytes decodes at
most ``65,536 + b / 8`` items, a container or nested message counting :data:`CONTAINER_ITEM`
items and an array :data:`ARRAY_ITEM`), so decoding costs time linear in the message's size with a
small constant (``benchmarks/transport/hostile_decoding.py``); an array whose codec can expand (run-length codes: an all-zero batch is tiny on the wire)
is refused above ``max_elements`` values: the shape the receiver expects where it knows it (the
label holder sets it from the batch size and embedding widths agreed at set-up, a split-learning
party from its batch size and embedding width), else :func:`expansion_limit` of the message's
size (at most :data:`EXPANSION` values per byte of message, at least :data:`MIN_EXPANDED`); and
each field's type is checked against the message class's annotation.

:func:`encode` / :func:`decode` are the public entry points; the messaging layer calls
:func:`encode_at` / :func:`decode_at` (same bytes, no wrapper objects) on its hot path.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from verticalfs.codecs import Codec, codec_by_id, get_codec
from verticalfs.codecs.base import EXPANSION, MIN_EXPANDED, expansion_limit
from verticalfs.exceptions import TransportError
from verticalfs.transport.messages import PHASES, At, Coded, message_class

MAGIC = b"VF"
#: frame version: 3 = the CRC-32 covers the header too (2: the body only)
VERSION = 3
HEADER = struct.Struct("<2sBBHIIII")
HEADER_SIZE = HEADER.size  # 22
_CRC_AT = HEADER_SIZE - 4  # the CRC field ends the header; it covers everything before and after it
TENSOR_MESSAGE_OVERHEAD = HEADER_SIZE + 1 + 3 + 2 * 4
#: items a message may decode besides one per :data:`BYTES_PER_ITEM` bytes of it
MIN_ITEMS = 1 << 16
#: bytes of message per decoded item beyond :data:`MIN_ITEMS`
BYTES_PER_ITEM = 8
#: what a container (list, tuple, dict) or a nested message costs of the item budget (building
#: one costs the decoder about as much as four scalars)
CONTAINER_ITEM = 4
#: ... an array inside a container (about eight scalars' time) ...
ARRAY_ITEM = 8
#: ... and an array in an expanding (run-length) code inside a container
CODED_ITEM = 64

_PHASE_ID = {p: i for i, p in enumerate(PHASES)}
#: nesting limit of lists, tuples, dicts and messages inside a message (a decoder guard)
MAX_DEPTH = 32

(_T_NONE, _T_BOOL, _T_INT, _T_BIGINT, _T_FLOAT, _T_STR, _T_BYTES, _T_ARRAY, _T_LIST, _T_DICT, _T_TUPLE,
 _T_MSG, _T_TEXT) = range(13)
_TEXT = struct.Struct("<BII")  # a text array: tag + count u32 + width u32 (bytes of the longest, UTF-8)
_STRUCT_TEXT = struct.Struct("<II")
_TEXT_SLICE = 1 << 16  # items of a non-ASCII text array encoded or decoded at once
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_ARR = struct.Struct("<BBB")

_DTYPES = [np.dtype(t) for t in ("<f4", "<f8", "<f2", "<i8", "<i4", "<i2", "|i1", "<u8", "<u4", "<u2", "|u1", "|b1")]
_DTYPE_CODE = {d: i for i, d in enumerate(_DTYPES)}
_RAW = 0  # codec id 0: exact bytes in the array's own dtype


def item_budget(nbytes: int) -> int:
    """The items a message of ``nbytes`` bytes may decode inside lists, tuples, dicts and nested
    messages (a container or message counts :data:`CONTAINER_ITEM`, an array :data:`ARRAY_ITEM`):
    ``MIN_ITEMS + nbytes / BYTES_PER_ITEM``."""
    return MIN_ITEMS + int(nbytes) // BYTES_PER_ITEM


def frame_crc(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32 a frame carries: of its header before the CRC field, then of its body."""
    mv = memoryview(data)
    return zlib.crc32(mv[HEADER_SIZE:], zlib.crc32(mv[:_CRC_AT]))


def seal(data: bytes | bytearray | memoryview) -> bytes:
    """``data`` with its header's body length and CRC-32 set to match it (for tests and tools that
    build frames by hand)."""
    b = bytearray(data)
    struct.pack_into("<I", b, _CRC_AT - 4, len(b) - HEADER_SIZE)
    struct.pack_into("<I", b, _CRC_AT, frame_crc(b))
    return bytes(b)


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
_TAG_MSG = struct.Struct("<BH")  # nested message: tag + kind id
_SHAPES: dict[int, struct.Struct] = {}  # ndim -> "<" + "I" * ndim
_ARRAY_HEADS: dict[tuple[int, bool], struct.Struct] = {}  # (ndim, length prefix) -> array head
_FLOAT32 = get_codec("float32")


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
    __slots__ = ("parts", "payload", "codec", "depth")

    def __init__(self, codec: Codec):
        self.parts: list[bytes] = []
        self.payload = 0
        self.codec = codec
        self.depth = 0

    def value(self, v: Any, tensor: bool = False) -> None:
        if type(v) is np.ndarray:  # the common case first
            self.array(v, tensor)
            return
        if type(v) is Coded:
            self.coded(v)
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
            self._enter()
            p.append(_TAG_LEN.pack(_T_LIST if isinstance(v, list) else _T_TUPLE, len(v)))
            for x in v:
                self.value(x, tensor)
            self.depth -= 1
        elif isinstance(v, dict):
            self._enter()
            p.append(_TAG_LEN.pack(_T_DICT, len(v)))
            for k, x in v.items():
                if not isinstance(k, str):
                    raise TransportError(f"dict keys in messages must be str, got {type(k).__name__}")
                self.value(k)
                self.value(x, tensor)
            self.depth -= 1
        elif hasattr(type(v), "_vf_kind"):  # a nested message
            self._enter()
            cls = type(v)
            p.append(_TAG_MSG.pack(_T_MSG, cls._vf_kind))
            for name, t in zip(cls._vf_fields, cls._vf_tensor, strict=True):
                self.value(getattr(v, name), t)
            self.depth -= 1
        else:
            raise TransportError(f"cannot serialise a value of type {type(v).__name__} in a message")

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise TransportError(f"message nests lists, dicts or messages more than {MAX_DEPTH} levels deep")

    def coded(self, c: Coded) -> None:
        a = c.array
        if hasattr(a, "detach") and hasattr(a, "numpy"):
            a = a.detach().cpu().numpy()
        a = np.asarray(a)
        if a.dtype.kind != "f":
            raise TransportError(f"coded() takes a float array, got dtype {a.dtype}")
        self.array(a, True, get_codec(c.codec))

    def text(self, a: np.ndarray) -> None:
        """A 1-D numpy ``str`` array: each item UTF-8, padded with NUL bytes to the longest (numpy's
        fixed-width bytes); a few bytes an item instead of a tagged ``str`` each (ids of a million rows)."""
        if a.ndim != 1:
            raise TransportError(f"a text array is sent 1-D, got shape {a.shape}")
        try:  # ASCII (most ids): numpy's own cast, no Python string per item
            b = a.astype(f"S{max(a.dtype.itemsize // 4, 1)}")
        except UnicodeEncodeError:  # UTF-8 a slice at a time, padded to the longest
            parts = [np.char.encode(a[k:k + _TEXT_SLICE], "utf-8") for k in range(0, len(a), _TEXT_SLICE)]
            b = np.concatenate(parts).astype(f"S{max(x.dtype.itemsize for x in parts)}")
        width = max(b.dtype.itemsize, 1)
        data = np.ascontiguousarray(b, dtype=f"S{width}").tobytes()
        self.parts.append(_TEXT.pack(_T_TEXT, a.shape[0], width))
        self.parts.append(data)
        self.payload += len(data)

    def array(self, a: np.ndarray, tensor: bool, codec: Codec | None = None) -> None:
        if a.dtype.kind == "U":
            self.text(a)
            return
        ndim = a.ndim
        if ndim > 255:
            raise TransportError(f"array with {ndim} dimensions cannot be sent")
        if tensor and a.dtype.kind == "f":
            codec = codec or self.codec
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


def encode(msg: Any, at: At | None = None, *, phase: str = "other", round: int = 0, step: int = 0,
           codec: str | Codec = "float32") -> Encoded:
    """Serialise ``msg`` (an instance of a registered message class) at position ``at`` (or
    ``phase``/``round``/``step``); ``codec`` is the codec of bare float arrays in tensor fields."""
    if at is not None:
        phase, round, step = at.phase, at.round, at.step
    return Encoded(*encode_parts(msg, phase_id(phase), round, step, get_codec(codec)))


def encode_at(msg: Any, at: At) -> tuple[bytes, int]:
    """The messaging layer's entry point: ``(data, payload bytes)`` of ``msg`` at ``at``."""
    return encode_parts(msg, _PHASE_ID[at.phase], at.round, at.step, _FLOAT32)


def encode_parts(msg: Any, pid: int, round: int, step: int, codec: Codec = _FLOAT32) -> tuple[bytes, int]:
    """:func:`encode` for a phase id and a codec instance: ``(data, payload bytes)``.

    The hot path; it skips the argument checks :func:`encode` does.
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
        elif t is Coded and tensor:
            if w is None:
                w = _Writer(codec)
                w.parts = parts
            w.coded(v)
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
    head = HEADER.pack(MAGIC, VERSION, pid, kid, round & 0xFFFFFFFF, step & 0xFFFFFFFF, blen, 0)
    crc = zlib.crc32(memoryview(head)[:_CRC_AT])
    for b in parts:
        crc = zlib.crc32(b, crc)
    parts[0] = head[:_CRC_AT] + _U32.pack(crc)
    return b"".join(parts), payload


@dataclass(frozen=True)
class Decoded:
    msg: Any
    phase: str
    round: int
    step: int

    @property
    def at(self) -> At:
        return At(self.phase, self.round, self.step)


def decode(data: bytes, *, max_elements: int | None = None) -> Decoded:
    """Inverse of :func:`encode`; every failure is a :class:`TransportError`.

    ``max_elements``: the most values an expanding (run-length coded) array may decode to, from the
    shape the receiver expects; ``None``: :func:`expansion_limit` of the message's size.
    """
    msg, ph, rnd, step, _ = decode_parts(data, max_elements)
    return Decoded(msg, PHASES[ph], rnd, step)


def decode_at(data: bytes, max_elements: int | None = None) -> tuple[Any, At, int]:
    """The messaging layer's entry point: ``(message, position, payload bytes)``.

    The payload is counted exactly as :func:`encode` counts it, so the receiver of a message can
    meter it without trusting a figure from the sender.
    """
    msg, ph, rnd, step, payload = decode_parts(data, max_elements)
    return msg, At(PHASES[ph], rnd, step), payload


def decode_parts(data: bytes, max_elements: int | None = None) -> tuple[Any, int, int, int, int]:
    """:func:`decode` without the wrapper: ``(msg, phase id, round, step, payload bytes)``."""
    try:
        return _decode(data, max_elements)
    except TransportError:
        raise
    except RecursionError:
        raise TransportError("message nests too deeply to decode") from None
    except MemoryError:
        raise TransportError("message would not fit in memory when decoded") from None
    except Exception as exc:  # noqa: BLE001 - hostile bytes: anything else is a malformed message
        raise TransportError(f"malformed message: {type(exc).__name__}: {exc}") from None


def _decode(data: object, max_elements: int | None) -> tuple[Any, int, int, int, int]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TransportError(f"a message is bytes, got {type(data).__name__}")
    mv = memoryview(data)
    end = len(mv)
    if max_elements is None:
        max_elements = expansion_limit(end)
    if end < HEADER_SIZE:
        raise TransportError(f"truncated message: {end} bytes, header alone is {HEADER_SIZE}")
    magic, ver, ph, kid, rnd, step, blen, crc = HEADER.unpack_from(mv, 0)
    if magic != MAGIC or ver != VERSION:
        raise TransportError(f"not a verticalfs v{VERSION} message (magic {magic!r}, version {ver})")
    if HEADER_SIZE + blen != end:
        raise TransportError(f"message body is {end - HEADER_SIZE} bytes, header says {blen}")
    if zlib.crc32(mv[HEADER_SIZE:], zlib.crc32(mv[:_CRC_AT])) != crc:
        raise TransportError("message (header or body) does not match its CRC-32: corrupted in transit")
    if ph >= len(PHASES):
        raise TransportError(f"message header has phase id {ph}; known phases are 0..{len(PHASES) - 1}")
    cls = message_class(kid)
    pos = HEADER_SIZE
    vals: list[Any] = []
    payload = 0
    budget = item_budget(end)
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
                    if size > max_elements:
                        raise TransportError(f"{cls.__name__}: {_too_large(shape, size, max_elements, end)}")
                    (nbytes,) = _U32.unpack_from(mv, pos)
                    pos += 4
                if pos + nbytes > end:
                    raise TransportError("truncated message body")
                vals.append(codec.decode(mv[pos : pos + nbytes], size).reshape(shape))
                pos += nbytes
                payload += nbytes
            elif tag == _T_INT:
                vals.append(_I64.unpack_from(mv, pos + 1)[0])
                pos += 9
            elif tag == _T_BOOL:
                vals.append(bool(mv[pos + 1]))
                pos += 2
            else:
                r = _Reader(mv, pos, max_elements, budget)
                vals.append(r.value())
                pos = r.pos
                payload += r.payload
                budget = r.budget
    except (struct.error, IndexError):
        raise TransportError("truncated message body") from None
    if pos != end:
        raise TransportError(f"{cls.__name__}: {end - pos} trailing bytes after the last field")
    check_types(cls, vals)
    return cls(*vals), ph, rnd, step, payload


def _too_large(shape: tuple[int, ...], size: int, limit: int, nbytes: int) -> str:
    why = ("the shape it expects" if limit != expansion_limit(nbytes) else
           f"{EXPANSION} per byte of a {nbytes}-byte message, at least {MIN_EXPANDED}, as it expects no shape")
    return (f"a coded array of shape {tuple(shape)} ({size} values) exceeds the {limit} values the receiver "
            f"accepts ({why})")


def check_types(cls: type[Any], vals: list[Any]) -> None:
    """Each decoded field against the type its message class declares (untrusted input)."""
    for name, allowed, v in zip(cls._vf_fields, cls._vf_types, vals, strict=True):
        if allowed is not None and not isinstance(v, allowed):
            want = " or ".join(sorted(t.__name__ for t in allowed))
            raise TransportError(f"{cls.__name__}.{name}: expected {want}, got {type(v).__name__}")


class _Reader:
    __slots__ = ("mv", "pos", "end", "depth", "payload", "max_elements", "budget")

    def __init__(self, mv: memoryview, pos: int, max_elements: int, budget: int):
        self.mv = mv
        self.pos = pos
        self.end = len(mv)
        self.depth = 0
        self.payload = 0
        self.max_elements = max_elements
        self.budget = budget  # items left (see item_budget)

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise TransportError(f"message nests lists, dicts or messages more than {MAX_DEPTH} levels deep")

    def _spend(self, items: int) -> None:
        b = self.budget - items
        if b < 0:
            raise TransportError(f"message holds more items than its {self.end} bytes allow "
                                 f"({item_budget(self.end)} items, a list, dict or message counting "
                                 f"{CONTAINER_ITEM}, an array {ARRAY_ITEM}): refused as too costly to decode")
        self.budget = b

    def _take(self, n: int) -> memoryview:
        pos = self.pos
        if pos + n > self.end:
            raise TransportError("truncated message body")
        self.pos = pos + n
        return self.mv[pos : pos + n]

    def _unpack(self, s: struct.Struct) -> tuple[Any, ...]:
        pos = self.pos
        if pos + s.size > self.end:
            raise TransportError("truncated message body")
        self.pos = pos + s.size
        return s.unpack_from(self.mv, pos)

    def _u32(self) -> int:
        n: int = self._unpack(_U32)[0]
        return n

    def value(self) -> Any:
        if self.pos >= self.end:
            raise TransportError("truncated message body")
        tag = self.mv[self.pos]
        self.pos += 1
        if tag == _T_ARRAY:
            if self.depth:  # inside a container: top-level fields are few and fixed
                self._spend(ARRAY_ITEM if self.mv[self.pos] == _RAW else CODED_ITEM)
            return self.array()
        if tag == _T_NONE:
            return None
        if tag == _T_BOOL:
            return bool(self._take(1)[0])
        if tag == _T_INT:
            return self._unpack(_I64)[0]
        if tag == _T_BIGINT:
            n = self._u32()
            self.payload += n
            return int.from_bytes(self._take(n), "little", signed=True)
        if tag == _T_FLOAT:
            return self._unpack(_F64)[0]
        if tag == _T_STR:
            raw = bytes(self._take(self._u32()))
            try:
                return raw.decode()
            except UnicodeDecodeError:
                raise TransportError("a str field is not valid UTF-8") from None
        if tag == _T_BYTES:
            n = self._u32()
            self.payload += n
            return bytes(self._take(n))
        if tag in (_T_LIST, _T_TUPLE):
            n = self._u32()
            if n > self.end - self.pos:  # every item takes at least one byte
                raise TransportError(f"a list claims {n} items in {self.end - self.pos} bytes")
            self._spend(CONTAINER_ITEM + n)
            self._enter()
            items = [self.value() for _ in range(n)]
            self.depth -= 1
            return items if tag == _T_LIST else tuple(items)
        if tag == _T_DICT:
            n = self._u32()
            if 2 * n > self.end - self.pos:  # every key and value takes at least one byte
                raise TransportError(f"a dict claims {n} entries in {self.end - self.pos} bytes")
            self._spend(CONTAINER_ITEM + 2 * n)
            self._enter()
            out = {}
            for _ in range(n):
                k = self.value()
                if type(k) is not str:
                    raise TransportError(f"dict keys in messages are str, got {type(k).__name__}")
                out[k] = self.value()
            self.depth -= 1
            return out
        if tag == _T_TEXT:
            if self.depth:
                self._spend(ARRAY_ITEM)
            return self.text()
        if tag == _T_MSG:
            (kid,) = self._unpack(_U16)
            cls = message_class(kid)
            self._spend(CONTAINER_ITEM + len(cls._vf_fields))
            self._enter()
            vals = [self.value() for _ in cls._vf_fields]
            self.depth -= 1
            check_types(cls, vals)
            return cls(*vals)
        raise TransportError(f"unknown field tag {tag} in message")

    def text(self) -> np.ndarray:
        """A text array (see :meth:`_Writer.text`): decoded to a numpy ``str`` array, at most 4 bytes
        of it per byte received (numpy's UCS-4), so its size is bounded by the message's."""
        n, width = self._unpack(_STRUCT_TEXT)
        if width < 1:
            raise TransportError("a text array of width 0")
        raw = self._take(n * width)
        self.payload += len(raw)
        b = np.frombuffer(raw, dtype=f"S{width}")
        if not n:
            return np.zeros(0, dtype="<U1")
        if int(np.frombuffer(raw, dtype=np.uint8).max()) < 0x80:  # ASCII: numpy's own cast
            return b.astype(f"U{width}")
        out = np.empty(n, dtype=f"U{width}")  # UTF-8 a slice at a time (a Python string per item of it)
        try:
            for k in range(0, n, _TEXT_SLICE):
                out[k:k + _TEXT_SLICE] = np.char.decode(b[k:k + _TEXT_SLICE], "utf-8")
        except UnicodeDecodeError:
            raise TransportError("a text array is not valid UTF-8") from None
        return out

    def array(self) -> np.ndarray:
        cid, code, ndim = self._unpack(_ARR)
        shape: tuple[int, ...] = self._unpack(_shape_struct(ndim))
        size = 1
        for s in shape:
            size *= s
        if cid == _RAW:
            if code >= len(_DTYPES):
                raise TransportError(f"unknown dtype code {code} in message")
            dt = _DTYPES[code]
            raw = self._take(size * dt.itemsize)
            self.payload += len(raw)
            out: np.ndarray = np.frombuffer(raw, dtype=dt).reshape(shape).copy()
            return out
        codec = codec_by_id(cid)
        nbytes = codec.fixed_size(size)
        if nbytes is None:
            if size > self.max_elements:
                raise TransportError(_too_large(shape, size, self.max_elements, self.end))
            nbytes = self._u32()
        self.payload += nbytes
        return codec.decode(self._take(nbytes), size).reshape(shape)
