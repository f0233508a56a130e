"""Message serialisation: every field type round-trips; payload/overhead accounting."""

from __future__ import annotations

import dataclasses
import struct
import zlib

import numpy as np
import pytest
import torch

from verticalfs.exceptions import TransportError
from verticalfs.training.split import SplitSpec as ModelSpec
from verticalfs.transport import (
    HEADER_SIZE,
    PHASES,
    TENSOR_MESSAGE_OVERHEAD,
    Embeddings,
    EmbedRequest,
    Gradients,
    Ready,
    SupportReport,
    decode,
    encode,
    message,
    tensor_field,
)
from verticalfs.transport.serde import seal


@message("tests.serde.AnyValue")
class AnyValue:
    """Test message: one field of any type."""

    value: object


@message("tests.serde.TwoTensors")
class TwoTensors:
    """Test message: a tensor field and a plain array field."""

    t: np.ndarray = tensor_field()
    plain: np.ndarray = None


def rt(value, **kw):
    enc = encode(AnyValue(value), **kw)
    return decode(enc.data).msg.value, enc


def assert_same(a, b):
    """Deep equality with exact dtype/shape checks for arrays."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    else:
        assert type(a) is type(b)
        assert a == b


class TestScalars:
    @pytest.mark.parametrize("value", [
        None, True, False, 0, -1, 7, 2**63 - 1, -(2**63), 2**64 + 5, -(2**70) - 3, 10**40,
        0.0, -1.5, 1e300, float("inf"), "", "héllo ✓", b"", b"\x00\xffabc", bytearray(b"xy"),
    ])
    def test_roundtrip(self, value):
        out, _ = rt(value)
        if isinstance(value, bytearray):
            value = bytes(value)
        assert_same(value, out)

    def test_nan(self):
        out, _ = rt(float("nan"))
        assert out != out

    def test_numpy_scalars_become_python(self):
        out, _ = rt(np.int32(5))
        assert out == 5 and type(out) is int
        out, _ = rt(np.float32(0.5))
        assert out == 0.5 and type(out) is float
        out, _ = rt(np.bool_(True))
        assert out is True

    def test_big_int_digits_are_payload(self):
        _, small = rt(5)
        _, big = rt(2**64)
        assert small.payload == 0
        # 2**64 needs 9 bytes (plus a sign bit): (65 + 8) // 8
        assert big.payload == 9

    def test_unsupported_type_raises(self):
        with pytest.raises(TransportError, match="set"):
            encode(AnyValue({1, 2}))

    def test_non_str_dict_key_raises(self):
        with pytest.raises(TransportError, match="str"):
            encode(AnyValue({1: "a"}))


class TestArrays:
    @pytest.mark.parametrize("dtype", ["<f4", "<f8", "<f2", "<i8", "<i4", "<i2", "i1", "<u8", "<u4", "<u2", "u1", "?"])
    @pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 4), (2, 0, 3), (2, 3, 4)])
    def test_roundtrip_exact(self, dtype, shape):
        rng = np.random.default_rng(0)
        a = np.asarray(rng.standard_normal(shape) * 100).astype(dtype)
        assert isinstance(a, np.ndarray) and a.shape == shape
        out, enc = rt(a)
        assert_same(a, out)
        assert enc.payload == a.nbytes
        assert out.flags.writeable

    def test_big_endian_and_non_contiguous(self):
        a = np.arange(12, dtype=">i4").reshape(3, 4)[:, ::2]
        out, _ = rt(a)
        np.testing.assert_array_equal(out, a)
        assert out.dtype == np.dtype("<i4")

    def test_object_array_rejected(self):
        with pytest.raises(TransportError, match="dtype"):
            encode(AnyValue(np.array(["a", 1], dtype=object)))

    def test_text_array_round_trip(self):
        """Since protocol 1.2 a 1-D numpy str array travels as fixed-width UTF-8 (Align's ids):
        back as the same str array, non-ASCII and empty items included."""
        a = np.array(["c1", "été", "", "x" * 30, "日本"])
        out, _ = rt(a)
        assert out.dtype.kind == "U"
        np.testing.assert_array_equal(out, a)
        data = encode(AnyValue(a)).data
        assert len(data) == HEADER_SIZE + 9 + 5 * 30  # tag, count, width, 5 items of 30 bytes: no per-item tag
        out, _ = rt(np.array([], dtype=str))
        assert out.dtype.kind == "U" and out.shape == (0,)

    def test_text_array_hostile(self):
        with pytest.raises(TransportError, match="1-D"):
            encode(AnyValue(np.array([["a"]])))
        data = bytearray(encode(AnyValue(np.array(["ab", "cd"]))).data)
        data[-1] = 0xFF  # not UTF-8
        with pytest.raises(TransportError, match="UTF-8"):
            decode(seal(data))
        data = bytearray(encode(AnyValue(np.array(["ab", "cd"]))).data)
        i = data.index(b"ab") - 8  # the count: a million items claimed in 4 bytes
        data[i:i + 4] = struct.pack("<I", 1_000_000)
        with pytest.raises(TransportError, match="truncated"):
            decode(seal(data))

    def test_torch_tensor_is_sent_as_array(self):
        t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        out, _ = rt(t)
        np.testing.assert_array_equal(out, t.numpy())

    def test_nested(self):
        value = {"a": [1, 2.5, None, (np.arange(3), "x")], "b": {"c": (True, b"z", [])},
                 "d": [np.zeros((0,), dtype=np.int64), np.float64(2.0)]}
        out, _ = rt(value)
        expected = dict(value)
        expected["d"] = [value["d"][0], 2.0]
        assert_same(expected, out)

    def test_tuple_and_list_are_distinguished(self):
        out, _ = rt([(1, 2), [3]])
        assert isinstance(out, list) and isinstance(out[0], tuple) and isinstance(out[1], list)


class TestTensorFields:
    @pytest.fixture
    def x(self):
        return np.random.default_rng(3).standard_normal((10, 4)).astype(np.float32)

    def test_tensor_field_uses_codec(self, x):
        sizes = {}
        for name in ("float32", "float16", "int8"):
            enc = encode(Embeddings(x), codec=name)
            sizes[name] = enc.payload
            out = decode(enc.data).msg.values
            assert out.shape == x.shape and out.dtype == np.float32
            if name == "float32":
                np.testing.assert_array_equal(out, x)
            else:
                assert not np.array_equal(out, x)
                np.testing.assert_allclose(out, x, atol=np.abs(x).max() / 127)
        assert sizes == {"float32": 4 * x.size, "float16": 2 * x.size, "int8": 4 + x.size}

    def test_plain_arrays_stay_exact_with_int8(self, x):
        plain = x * 1.2345
        enc = encode(TwoTensors(x, plain), codec="int8")
        out = decode(enc.data).msg
        np.testing.assert_array_equal(out.plain, plain)
        assert out.plain.dtype == np.float32
        assert not np.array_equal(out.t, x)
        assert enc.payload == (4 + x.size) + plain.nbytes

    def test_int_arrays_in_tensor_field_stay_exact(self):
        a = np.arange(10, dtype=np.int64)
        out = decode(encode(TwoTensors(a, None), codec="int8").data).msg
        assert_same(a, out.t)

    def test_float64_tensor_becomes_float32(self, x):
        out = decode(encode(Gradients(x.astype(np.float64))).data).msg.values
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, x)

    def test_float16_tensor_with_float16_codec(self, x):
        out = decode(encode(Gradients(x), codec="float16").data).msg.values
        np.testing.assert_array_equal(out, x.astype(np.float16).astype(np.float32))

    def test_empty_tensor(self):
        e = np.zeros((0, 8), dtype=np.float32)
        for name in ("float32", "float16", "int8"):
            out = decode(encode(Embeddings(e), codec=name).data).msg.values
            assert out.shape == (0, 8)


class TestAccounting:
    @pytest.mark.parametrize("shape", [(1, 1), (256, 8), (17, 3), (0, 8)])
    @pytest.mark.parametrize("cls", [Embeddings, Gradients])
    def test_tensor_message_overhead_is_documented_constant(self, cls, shape):
        a = np.ones(shape, dtype=np.float32)
        enc = encode(cls(a), phase="train", round=3, step=9)
        assert enc.payload == 4 * a.size
        assert enc.overhead == TENSOR_MESSAGE_OVERHEAD == 34
        assert enc.size == len(enc.data) == enc.payload + enc.overhead

    def test_header_size(self):
        assert HEADER_SIZE == 22

    def test_embed_request_is_all_overhead(self):
        enc = encode(EmbedRequest("train", 1, 2, True))
        assert enc.payload == 0
        # header + str(tag, u32, 5 bytes) + 2 ints (tag + 8) + bool (tag + 1)
        assert enc.overhead == HEADER_SIZE + (1 + 4 + 5) + 2 * 9 + 2

    def test_every_byte_is_payload_or_overhead(self):
        msgs = [
            ModelSpec((64, 32), 8, "relu", "adam", 0.01, 0.0, 1, 256, 2),
            Ready(8, 8, {"train": 100, "val": 10}),
            SupportReport(np.arange(5)),
            AnyValue([b"abcd", np.zeros(3, dtype=np.int8), 2**80]),
        ]
        for m in msgs:
            enc = encode(m)
            assert enc.payload + enc.overhead == len(enc.data)
        assert encode(msgs[2]).payload == 5 * 8
        assert encode(msgs[3]).payload == 4 + 3 + (81 + 8) // 8

    def test_header_fields(self):
        enc = encode(Embeddings(np.zeros((2, 2), np.float32)), phase="eval", round=7, step=11)
        d = decode(enc.data)
        assert (d.phase, d.round, d.step) == ("eval", 7, 11)
        magic, ver, ph, kid, rnd, step, blen, crc = struct.unpack_from("<2sBBHIIII", enc.data)
        assert magic == b"VF" and ver == 3 and PHASES[ph] == "eval" and (rnd, step) == (7, 11)
        assert kid == Embeddings._vf_kind and blen == len(enc.data) - HEADER_SIZE
        assert crc == zlib.crc32(enc.data[HEADER_SIZE:], zlib.crc32(enc.data[:HEADER_SIZE - 4]))

    def test_unknown_phase_raises(self):
        with pytest.raises(TransportError, match="phase"):
            encode(Embeddings(np.zeros(1, np.float32)), phase="warmup")

    def test_message_roundtrip_preserves_class_and_fields(self):
        m = ModelSpec((64, 32), 8, "relu", "adam", 0.01, 0.0, 1, 256, 2, 0.9)
        out = decode(encode(m).data).msg
        assert type(out) is ModelSpec
        assert dataclasses.astuple(out) == dataclasses.astuple(m)

    def test_unregistered_class_raises(self):
        @dataclasses.dataclass
        class NotAMessage:
            x: int = 1

        with pytest.raises(TransportError, match="@message"):
            encode(NotAMessage())


class TestCorruptData:
    @pytest.fixture
    def data(self) -> bytes:
        return encode(Ready(3, 8, {"train": 10}), phase="setup").data

    def test_truncated_header(self, data):
        with pytest.raises(TransportError, match="truncated"):
            decode(data[:10])

    @pytest.mark.parametrize("cut", [1, 5, 20])
    def test_truncated_body(self, data, cut):
        with pytest.raises(TransportError):
            decode(data[:-cut])

    def test_truncated_body_with_fixed_length(self, data):
        # body length in the header agrees with the (shortened) body: the fields themselves are cut
        body = data[HEADER_SIZE:-3]
        head = bytearray(data[:HEADER_SIZE])
        struct.pack_into("<I", head, 14, len(body))
        with pytest.raises(TransportError, match="truncated"):
            decode(reseal(bytes(head) + body))

    def test_trailing_bytes(self, data):
        body = data[HEADER_SIZE:] + b"\x00"
        head = bytearray(data[:HEADER_SIZE])
        struct.pack_into("<I", head, 14, len(body))
        with pytest.raises(TransportError, match="trailing"):
            decode(reseal(bytes(head) + body))

    def test_bad_magic(self, data):
        with pytest.raises(TransportError, match="magic"):
            decode(b"XX" + data[2:])

    def test_bad_version(self, data):
        with pytest.raises(TransportError):
            decode(data[:2] + bytes([99]) + data[3:])

    def test_unknown_kind_id(self, data):
        known = {m._vf_kind for m in (Ready, Embeddings, Gradients, EmbedRequest, ModelSpec)}
        kid = next(k for k in range(1, 2**16) if k not in known and k not in _registered())
        bad = bytearray(data)
        struct.pack_into("<H", bad, 4, kid)
        with pytest.raises(TransportError, match="unknown message kind"):
            decode(reseal(bad))

    def test_unknown_field_tag(self):
        data = bytearray(encode(AnyValue(None)).data)
        data[HEADER_SIZE] = 200
        with pytest.raises(TransportError, match="tag"):
            decode(reseal(data))

    def test_unknown_codec_id(self):
        data = bytearray(encode(Embeddings(np.zeros((1, 1), np.float32))).data)
        data[HEADER_SIZE + 1] = 250  # codec id byte after the array tag
        with pytest.raises(TransportError, match="codec"):
            decode(reseal(data))

    def test_array_longer_than_body(self):
        data = bytearray(encode(Embeddings(np.zeros((2, 2), np.float32))).data)
        struct.pack_into("<I", data, HEADER_SIZE + 4, 1000)  # first shape entry
        with pytest.raises(TransportError, match="truncated"):
            decode(reseal(data))

    def test_every_header_byte_is_covered(self):
        """Every byte of the header, changed in any bit, is an error: the CRC-32 covers the kind,
        phase, round and step too, so a corrupted header never decodes as another message or
        another position (version 2 left the header outside the CRC)."""
        data = encode(EmbedRequest("train", 3, 5, True), phase="train", round=3, step=5).data
        for i in range(HEADER_SIZE):
            for bit in range(8):
                bad = bytearray(data)
                bad[i] ^= 1 << bit
                with pytest.raises(TransportError):
                    decode(bytes(bad))

    def test_header_only_changes_are_caught_by_the_crc(self):
        """A changed round, step or phase (valid values, the body intact) is refused as corrupted;
        the same change sealed with a new CRC decodes (the check is the CRC, not a field check)."""
        data = bytearray(encode(Ready(3, 8, {"train": 10}), phase="setup").data)
        for off, fmt, value in ((6, "<I", 7), (10, "<I", 9), (3, "<B", 2)):
            bad = bytearray(data)
            struct.pack_into(fmt, bad, off, value)
            with pytest.raises(TransportError, match="CRC"):
                decode(bytes(bad))
            assert decode(seal(bad)).msg.n_features == 3  # the same change, sealed: decodes

    def test_frame_size_is_unchanged(self):
        enc = encode(Embeddings(np.zeros((4, 3), np.float32)))
        assert enc.size == HEADER_SIZE + 1 + 3 + 2 * 4 + 4 * 12

    def test_corrupted_body_is_an_error(self):
        """A flipped bit anywhere in the body fails the CRC-32: never silently different numbers."""
        data = encode(Embeddings(np.arange(12, dtype=np.float32).reshape(3, 4))).data
        for i in range(HEADER_SIZE, len(data)):
            bad = bytearray(data)
            bad[i] ^= 0x10
            with pytest.raises(TransportError, match="CRC"):
                decode(bytes(bad))


def reseal(data) -> bytes:
    """``data`` with its header's CRC-32 recomputed over the (tampered) header and body: for tests
    of the parser behind the integrity check."""
    return seal(data)


def _registered():
    from verticalfs.transport.messages import _REGISTRY

    return set(_REGISTRY)
