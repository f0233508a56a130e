"""Payload codecs: round trips and the registry."""

from __future__ import annotations

import numpy as np
import pytest

from verticalfs.codecs import available_codecs, codec_by_id, get_codec, register_codec
from verticalfs.codecs.base import Float32Codec, Int8Codec
from verticalfs.exceptions import ConfigError, TransportError


def roundtrip(codec, a: np.ndarray) -> np.ndarray:
    data = codec.encode(a)
    fixed = codec.fixed_size(a.size)
    if fixed is not None:
        assert len(data) == fixed
    return codec.decode(memoryview(data), a.size).reshape(a.shape)


@pytest.fixture
def values() -> np.ndarray:
    rng = np.random.default_rng(1)
    return (rng.standard_normal((64, 8)) * 3).astype(np.float32)


class TestRoundTrips:
    def test_float32_is_exact(self, values):
        out = roundtrip(get_codec("float32"), values)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, values)

    def test_float32_writes_4_bytes_per_value(self, values):
        assert len(get_codec("float32").encode(values)) == 4 * values.size

    def test_float32_decode_is_writable_copy(self, values):
        data = get_codec("float32").encode(values)
        out = get_codec("float32").decode(memoryview(data), values.size)
        out[0] = 123.0  # must not raise (read-only buffer) and must not alias the bytes
        assert get_codec("float32").decode(memoryview(data), values.size)[0] == values.reshape(-1)[0]

    def test_float16_within_half_precision(self, values):
        out = roundtrip(get_codec("float16"), values)
        assert out.dtype == np.float32
        # half precision: 10 mantissa bits -> relative rounding error <= 2**-11
        np.testing.assert_allclose(out, values, rtol=2.0**-11, atol=0)
        np.testing.assert_array_equal(out, values.astype(np.float16).astype(np.float32))
        assert len(get_codec("float16").encode(values)) == 2 * values.size

    def test_int8_error_at_most_half_scale(self, values):
        codec = get_codec("int8")
        out = roundtrip(codec, values)
        scale = np.abs(values).max() / 127.0
        assert np.max(np.abs(out - values)) <= scale / 2 * (1 + 1e-5)
        assert len(codec.encode(values)) == 4 + values.size
        # the extreme value is represented (almost) exactly
        i = np.unravel_index(np.argmax(np.abs(values)), values.shape)
        assert out[i] == pytest.approx(values[i], rel=1e-6)

    @pytest.mark.parametrize("name", ["float32", "float16", "int8"])
    def test_zero_tensor(self, name):
        z = np.zeros((5, 3), dtype=np.float32)
        out = roundtrip(get_codec(name), z)
        np.testing.assert_array_equal(out, z)
        assert np.all(np.isfinite(out))

    @pytest.mark.parametrize("name", ["float32", "float16", "int8"])
    def test_empty_tensor(self, name):
        e = np.zeros((0, 4), dtype=np.float32)
        out = roundtrip(get_codec(name), e)
        assert out.shape == (0, 4)

    def test_float64_input_is_sent_as_float32(self):
        a = np.array([0.1, 1 / 3], dtype=np.float64)
        out = roundtrip(get_codec("float32"), a)
        np.testing.assert_array_equal(out, a.astype(np.float32))

    @pytest.mark.parametrize("name,nbytes", [("float32", 7), ("float16", 3), ("int8", 2)])
    def test_wrong_length_raises(self, name, nbytes):
        with pytest.raises(TransportError):
            get_codec(name).decode(memoryview(b"\0" * nbytes), 2)


class TestRegistry:
    def test_builtins_registered(self):
        assert {"float32", "float16", "int8"} <= set(available_codecs())
        assert get_codec("int8").id == 3 and codec_by_id(3) is get_codec("int8")

    def test_unknown_name_lists_names(self):
        with pytest.raises(ConfigError) as exc:
            get_codec("bfloat7")
        msg = str(exc.value)
        assert "bfloat7" in msg
        for name in ("float32", "float16", "int8"):
            assert name in msg

    def test_codec_instance_passes_through(self):
        c = get_codec("float16")
        assert get_codec(c) is c

    def test_unknown_id_raises_transport_error(self):
        with pytest.raises(TransportError, match="250"):
            codec_by_id(250)

    def test_reregistering_same_class_is_idempotent(self):
        assert register_codec(Float32Codec()) is get_codec("float32")

    def test_clash_raises(self):
        class Clash(Int8Codec):
            name = "float32"

        with pytest.raises(ConfigError, match="clashes"):
            register_codec(Clash())
        assert get_codec("float32").id == 1

    def test_id_out_of_range(self):
        class Bad(Float32Codec):
            name = "bad-id"
            id = 0

        with pytest.raises(ConfigError):
            register_codec(Bad())
        assert "bad-id" not in available_codecs()
