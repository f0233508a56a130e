"""Run-length codec of SparseVFL (sparsevfl.md §4.3/§4.4): round trips, sizes, fallback, errors."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from verticalfs.codecs import codec_by_id, get_codec, rle
from verticalfs.codecs.rle import (
    CODED_HEADER_BYTES,
    DENSE_HEADER_BYTES,
    decode_masked,
    encode_masked,
    index_bits,
    nonzero_mask,
    rle_decode,
    rle_encode,
    rle_header,
    rle_size_bits,
    rle_size_bytes,
)
from verticalfs.exceptions import ConfigError, TransportError
from verticalfs.transport import (
    TENSOR_MESSAGE_OVERHEAD,
    Embeddings,
    Gradients,
    decode,
    encode,
    message,
    tensor_field,
)

ORDERS = ("vertical", "horizontal")
BITS = (32, 16)
VDT = {32: np.float32, 16: np.float16}


def batch(shape, zeros: float, seed: int = 0) -> np.ndarray:
    """ReLU-like batch: positive values with a random fraction ``zeros`` of exact zeros."""
    rng = np.random.default_rng(seed)
    a = (rng.random(shape) + 0.01).astype(np.float32)
    a[rng.random(shape) < zeros] = 0
    return a


def traversed(a: np.ndarray, order: str) -> np.ndarray:
    return a.flatten(order="F" if order == "vertical" else "C")


def independent_counts(a: np.ndarray, order: str, bits: int) -> tuple[int, int, int, int]:
    """(nnz, runs, q2, N*D) without the codec's helpers: heads are non-zeros after a zero/start."""
    m = traversed(a.astype(VDT[bits]) != 0, order)
    prev = np.concatenate(([False], m[:-1]))
    runs = int(np.sum(m & ~prev))
    nd = a.size
    q2 = math.ceil(math.log2(nd)) if nd > 1 else 0
    return int(m.sum()), runs, q2, nd


def expected_len(a: np.ndarray, order: str, bits: int) -> tuple[int, bool]:
    """(bytes, dense?) from equation 10 with q2-bit indices plus the documented headers."""
    nnz, runs, q2, nd = independent_counts(a, order, bits)
    eq10_bits = nnz * bits + (runs + runs) * q2  # |E'| Q + (|H| + |T|) q2
    coded = 13 + math.ceil(eq10_bits / 8)
    dense = 9 + nd * bits // 8
    return (dense, True) if coded > dense else (coded, False)


def checkerboard(n: int, d: int, order: str) -> np.ndarray:
    """Zeros and non-zeros alternating in traversal order (the worst case of eq. 11)."""
    flat = np.where(np.arange(n * d) % 2 == 0, 1.5, 0.0).astype(np.float32)
    return flat.reshape((d, n)).T.copy() if order == "vertical" else flat.reshape(n, d)


CASES = {
    "1x1-zero": (np.zeros((1, 1), np.float32)),
    "1x1-one": (np.full((1, 1), 2.5, np.float32)),
    "4x2": batch((4, 2), 0.5, 1),
    "one-row": batch((1, 37), 0.6, 2),
    "one-column": batch((53, 1), 0.6, 3),
    "17x3": batch((17, 3), 0.3, 4),
    "all-zero": np.zeros((64, 8), np.float32),
    "no-zeros": batch((64, 8), 0.0, 5),
    "mostly-zero": batch((256, 8), 0.97, 6),
    "half": batch((1024, 8), 0.5, 7),
    "90pct": batch((1024, 8), 0.9, 8),
    "4096x16-beyond-int16": batch((4096, 16), 0.8, 9),
    "last-element-only": np.pad(np.ones((1, 1), np.float32), ((4095, 0), (15, 0))),
    "empty-rows": np.zeros((0, 8), np.float32),
    "empty-cols": np.zeros((5, 0), np.float32),
}


def check_roundtrip(a: np.ndarray, bits: int, order: str) -> bytes:
    data = rle_encode(a, bits=bits, order=order)
    values, mask = rle_decode(data)
    q = a.astype(VDT[bits])
    assert values.dtype == np.float32 and values.shape == a.shape
    assert mask.dtype == np.bool_ and mask.shape == a.shape
    assert values.flags.c_contiguous and mask.flags.c_contiguous
    np.testing.assert_array_equal(mask, q != 0)
    np.testing.assert_array_equal(mask, nonzero_mask(a, bits=bits))
    # bit-exact against the Q-bit rounding (Q = 32: the input itself)
    np.testing.assert_array_equal(values.view(np.uint32), q.astype(np.float32).view(np.uint32))
    exp, dense = expected_len(a, order, bits)
    assert len(data) == exp == rle_size_bytes(a, bits=bits, order=order)
    assert len(data) <= DENSE_HEADER_BYTES + a.size * bits // 8
    h = rle_header(data)
    assert (h.n, h.d, h.bits, h.order, h.dense) == (*a.shape, bits, order, dense)
    return data


class TestRoundTrip:
    @pytest.mark.parametrize("order", ORDERS)
    @pytest.mark.parametrize("bits", BITS)
    @pytest.mark.parametrize("name", list(CASES))
    def test_cases(self, name, bits, order):
        check_roundtrip(CASES[name], bits, order)

    @pytest.mark.parametrize("order", ORDERS)
    @pytest.mark.parametrize("bits", BITS)
    def test_large_sparse_batch(self, bits, order):
        a = batch((65536, 64), 0.9, 10)
        data = check_roundtrip(a, bits, order)
        h = rle_header(data)
        assert not h.dense and h.runs > 32767
        assert len(data) < 0.4 * a.size * bits // 8  # ~(0.1 Q + 0.18 x 22) / Q

    @pytest.mark.parametrize("order", ORDERS)
    def test_property_loop_over_seeds(self, order):
        rng = np.random.default_rng(123)
        for seed in range(60):
            shape = (int(rng.integers(1, 80)), int(rng.integers(1, 12)))
            zeros = float(rng.choice([0.0, 0.1, 0.5, 0.9, 0.99, 1.0]))
            a = batch(shape, zeros, seed)
            if seed % 3 == 0:  # ReLU of a normal, with negatives clipped and a few huge values
                a = np.maximum(np.random.default_rng(seed).standard_normal(shape) * 1e3, 0).astype(np.float32)
            for bits in BITS:
                check_roundtrip(a, bits, order)

    def test_float16_rounding_and_underflow(self):
        a = np.array([[1.0 + 2.0**-12, 1e-9], [0.0, 70000.0]], dtype=np.float32)
        values, mask = rle_decode(rle_encode(a, bits=16))
        # 1 + 2**-12 rounds to 1 in float16; 1e-9 underflows to 0 and is not transmitted
        np.testing.assert_array_equal(mask, [[True, False], [False, True]])
        assert values[0, 0] == 1.0 and values[0, 1] == 0.0 and np.isinf(values[1, 1])
        np.testing.assert_array_equal(nonzero_mask(a, bits=16), mask)
        assert nonzero_mask(a, bits=32)[0, 1]

    def test_nan_is_transmitted_and_negative_zero_is_zero(self):
        a = np.array([[np.nan, -0.0, 3.0]], dtype=np.float32)
        values, mask = rle_decode(rle_encode(a))
        assert np.isnan(values[0, 0]) and mask.tolist() == [[True, False, True]]

    def test_float64_and_torch_input(self):
        torch = pytest.importorskip("torch")
        a = batch((9, 4), 0.5, 11)
        assert rle_encode(a.astype(np.float64)) == rle_encode(a)
        assert rle_encode(torch.from_numpy(a)) == rle_encode(a)

    def test_order_changes_runs_as_in_table2(self):
        # one column all zero (the 4th dimension in Figure 4): vertical keeps it one long zero run,
        # horizontal breaks every row (the last run of a row joins the first of the next)
        a = batch((512, 8), 0.0, 12)
        a[:, 3] = 0
        v, h = (rle_header(rle_encode(a, order=o)).runs for o in ORDERS)
        assert v == 2 and h == 513
        assert rle_size_bytes(a, order="vertical") < rle_size_bytes(a, order="horizontal")


class TestFormat:
    def test_bytes_of_a_small_example(self):
        # N = 4, D = 2, vertical traversal: [0, 1, 2, 0 | 0, 0, 3, 4] -> runs [1, 2] and [6, 7]
        a = np.array([[0, 0], [1, 0], [2, 3], [0, 4]], dtype=np.float32)
        data = rle_encode(a)
        q2 = 3  # ceil(log2(8))
        bits = "".join(format(v, f"0{q2}b") for v in (1, 6, 2, 7))  # heads, then inclusive ends
        bits += "0" * (-len(bits) % 8)
        idx = int(bits, 2).to_bytes(len(bits) // 8, "big")
        assert data == struct.pack("<BIII", 0, 4, 2, 2) + struct.pack("<4f", 1, 2, 3, 4) + idx
        # horizontal + float16: flags bit 1 (Q = 16) and bit 2 (horizontal); [0,0,1,0,2,3,0,4]
        data = rle_encode(a, bits=16, order="horizontal")
        bits = "".join(format(v, "03b") for v in (2, 4, 7, 2, 5, 7))
        bits += "0" * (-len(bits) % 8)
        idx = int(bits, 2).to_bytes(len(bits) // 8, "big")
        assert data == struct.pack("<BIII", 6, 4, 2, 3) + np.array([1, 2, 3, 4], "<f2").tobytes() + idx

    @pytest.mark.parametrize("order", ORDERS)
    @pytest.mark.parametrize("shape", [(3, 5), (16, 16), (100, 7), (4096, 16)])
    def test_index_bits_layout_matches_bit_string(self, shape, order):
        a = batch(shape, 0.7, 13)
        data = rle_encode(a, order=order)
        h = rle_header(data)
        assert not h.dense
        m = traversed(a != 0, order)
        ch = np.flatnonzero(np.diff(np.concatenate(([0], m.astype(int), [0]))))
        heads, ends = ch[0::2], ch[1::2] - 1
        q2 = index_bits(a.size)
        assert q2 == math.ceil(math.log2(a.size))
        s = "".join(format(int(v), f"0{q2}b") for v in np.concatenate((heads, ends)))
        s += "0" * (-len(s) % 8)
        nidx = len(s) // 8
        assert data[len(data) - nidx :] == int(s, 2).to_bytes(nidx, "big")
        assert data[CODED_HEADER_BYTES : len(data) - nidx] == traversed(a, order)[m].astype("<f4").tobytes()

    def test_dense_form_is_row_major(self):
        a = batch((5, 3), 0.0, 20)  # no zeros: the coded form is the dense one plus indices
        assert rle_encode(a) == struct.pack("<BII", 1, 5, 3) + a.astype("<f4").tobytes()
        assert rle_encode(a, order="horizontal", bits=16) == struct.pack("<BII", 7, 5, 3) + a.astype("<f2").tobytes()


class TestBitPacking:
    @pytest.mark.parametrize("width", [1, 3, 8, 13, 16, 22, 31, 32])
    @pytest.mark.parametrize("count", [1, 2, 5, 63, 64, 65, 1000, 9000, 40000])
    def test_both_packers_match_a_bit_string(self, width, count):
        # small counts take the unpackbits path, large ones the uint64 word path (rle._BLOCKS_FROM)
        rng = np.random.default_rng(width * 1000 + count)
        x = rng.integers(0, 2**width, count, dtype=np.uint64)
        x[0] = 2**width - 1
        s = "".join(format(int(v), f"0{width}b") for v in x)
        s += "0" * (-len(s) % 8)
        packed = rle._pack_bits(x, width)
        assert packed == int(s, 2).to_bytes(len(s) // 8, "big")
        out = rle._unpack_bits(np.frombuffer(packed, np.uint8), count, width)
        np.testing.assert_array_equal(out, x)

    def test_both_paths_are_exercised(self):
        assert rle._layout(1000, 13)[0] < rle._BLOCKS_FROM <= rle._layout(9000, 13)[0]
        assert rle._layout(40000, 32)[0] >= rle._BLOCKS_FROM


class TestSizes:
    @pytest.mark.parametrize("order", ORDERS)
    @pytest.mark.parametrize("bits", BITS)
    @pytest.mark.parametrize("name", ["4x2", "17x3", "half", "90pct", "mostly-zero", "4096x16-beyond-int16"])
    def test_equation_10(self, name, bits, order):
        a = CASES[name]
        nnz, runs, q2, _ = independent_counts(a, order, bits)
        mask = nonzero_mask(a, bits=bits)
        assert rle_size_bits(mask, bits=bits, order=order) == nnz * bits + 2 * runs * q2
        assert rle_size_bits(a, bits=bits, order=order) == nnz * bits + 2 * runs * q2
        # eq. 10 as printed charges Q bits per index
        assert rle_size_bits(mask, bits=bits, order=order, index_bits=bits) == (nnz + 2 * runs) * bits
        data = rle_encode(a, bits=bits, order=order)
        if not rle_header(data).dense:
            eq10 = rle_size_bits(mask, bits=bits, order=order)
            assert len(data) == CODED_HEADER_BYTES + math.ceil(eq10 / 8)
        assert len(data) == rle_size_bytes(mask, bits=bits, order=order)

    def test_public_implementation_int16_overflow_case(self):
        # N*D = 65536 needs 16-bit indices 0..65535: int16 (max 32767) overflowed there
        a = np.zeros((4096, 16), np.float32)
        a[-1, -1] = 1.0
        a[0, 0] = 2.0
        data = rle_encode(a)
        assert rle_header(data).runs == 2 and index_bits(a.size) == 16
        assert len(data) == 13 + 2 * 4 + 4 * 16 // 8
        np.testing.assert_array_equal(rle_decode(data)[0], a)


class TestDenseFallback:
    @pytest.mark.parametrize("order", ORDERS)
    @pytest.mark.parametrize(
        "shape,bits,dense",
        [((1024, 8), 16, True), ((65536, 2), 32, True), ((1024, 8), 32, False), ((3, 5), 32, False)],
    )
    def test_alternating_zeros(self, shape, bits, order, dense):
        # Eq. 11's worst case: per pair of elements the coded form costs Q + 2 q2 bits against 2 Q
        # dense, so it is longer exactly when 2 q2 > Q (q2 = 13 for 8192, 17 for 131072 elements).
        a = checkerboard(*shape, order)
        data = check_roundtrip(a, bits, order)
        assert rle_header(data).dense == dense
        if dense:
            assert len(data) == DENSE_HEADER_BYTES + a.size * bits // 8

    def test_no_zeros_send_dense_all_zero_sends_coded(self):
        assert rle_header(rle_encode(np.ones((32, 4), np.float32))).dense
        h = rle_header(rle_encode(np.zeros((32, 4), np.float32)))
        assert not h.dense and h.runs == 0

    def test_chosen_exactly_when_coding_is_larger(self):
        # N D = 65536 (q2 = 16), Q = 32: coded = 13 + 4 (ND - z) + 4 R, dense = 9 + 4 ND
        a = np.ones((4096, 16), np.float32)
        a[0, 0] = a[-1, -1] = 0  # z = 2, R = 1: equal sizes -> coded
        data = rle_encode(a)
        assert not rle_header(data).dense and len(data) == 9 + 4 * a.size
        b = np.ones((4096, 16), np.float32)
        b[0, 0] = 0  # z = 1, R = 1: coded is 4 bytes more -> dense
        data = rle_encode(b)
        assert rle_header(data).dense and len(data) == 9 + 4 * a.size
        assert rle_size_bytes(b) == 9 + 4 * a.size

    def test_rule_over_random_masks(self):
        rng = np.random.default_rng(7)
        seen = set()
        for seed in range(200):
            shape = (int(rng.integers(1, 9)), int(rng.integers(1, 9)))
            a = batch(shape, float(rng.random()), seed)
            for bits in BITS:
                data = rle_encode(a, bits=bits)
                exp, dense = expected_len(a, "vertical", bits)
                assert rle_header(data).dense == dense and len(data) == exp
                seen.add(dense)
        assert seen == {True, False}


class TestMasked:
    @pytest.mark.parametrize("order", ORDERS)
    @pytest.mark.parametrize("bits", BITS)
    @pytest.mark.parametrize("name", ["4x2", "one-row", "one-column", "half", "all-zero", "no-zeros", "empty-rows"])
    def test_roundtrip(self, name, bits, order):
        emb = CASES[name]
        grad = np.random.default_rng(1).standard_normal(emb.shape).astype(np.float32)
        _, mask = rle_decode(rle_encode(emb, bits=bits, order=order))  # the receiver's mask
        data = encode_masked(grad, nonzero_mask(emb, bits=bits), bits=bits, order=order)  # sender's
        assert len(data) == mask.sum() * bits // 8  # eq. 10's second |E'| Q term, no header
        out = decode_masked(data, mask, bits=bits, order=order)
        assert out.dtype == np.float32 and out.shape == emb.shape and out.flags.c_contiguous
        np.testing.assert_array_equal(out, np.where(mask, grad.astype(VDT[bits]), 0).astype(np.float32))

    @pytest.mark.parametrize("order", ORDERS)
    def test_same_value_order_as_forward(self, order):
        a = batch((300, 6), 0.6, 14)
        data = rle_encode(a, order=order)
        nnz = int((a != 0).sum())
        assert data[CODED_HEADER_BYTES : CODED_HEADER_BYTES + 4 * nnz] == encode_masked(a, a != 0, order=order)

    def test_large(self):
        a = batch((65536, 64), 0.9, 15)
        mask = a != 0
        g = np.random.default_rng(2).standard_normal(a.shape).astype(np.float32)
        out = decode_masked(encode_masked(g, mask), mask)
        np.testing.assert_array_equal(out, np.where(mask, g, 0))

    def test_errors(self):
        g = np.ones((4, 3), np.float32)
        mask = np.ones((4, 3), bool)
        with pytest.raises(ConfigError, match="shape"):
            encode_masked(g, np.ones((3, 4), bool))
        with pytest.raises(ConfigError, match="bool"):
            encode_masked(g, np.ones((4, 3)))
        with pytest.raises(ConfigError, match="2-D"):
            decode_masked(b"", np.ones(4, bool))
        data = encode_masked(g, mask)
        with pytest.raises(TransportError, match="selects 11 values"):
            decode_masked(data, mask & (np.arange(12).reshape(4, 3) != 5))
        with pytest.raises(TransportError):
            decode_masked(data, mask, bits=16)
        with pytest.raises(ConfigError, match="order"):
            decode_masked(data, mask, order="diagonal")


class TestErrors:
    @pytest.mark.parametrize("bad", [np.ones(4), np.ones((2, 2, 2)), np.float32(1.0)])
    def test_not_2d(self, bad):
        with pytest.raises(ConfigError, match="2-D"):
            rle_encode(bad)

    @pytest.mark.parametrize("bits", [8, 64, True, 32.0, "32"])
    def test_bits(self, bits):
        with pytest.raises(ConfigError, match="bits"):
            rle_encode(np.ones((2, 2)), bits=bits)
        with pytest.raises(ConfigError, match="bits"):
            rle_size_bits(np.ones((2, 2), bool), bits=bits)

    def test_order_and_dtype(self):
        with pytest.raises(ConfigError, match="order"):
            rle_encode(np.ones((2, 2)), order="diagonal")
        with pytest.raises(ConfigError, match="real"):
            rle_encode(np.ones((2, 2), complex))

    def test_numpy_int_bits_accepted(self):
        a = batch((5, 5), 0.5)
        assert rle_encode(a, bits=np.int64(16)) == rle_encode(a, bits=16)

    @pytest.mark.parametrize("name", ["4x2", "half", "no-zeros"])
    def test_every_truncation_and_extension_raises(self, name):
        data = rle_encode(CASES[name])
        for k in range(len(data)):
            with pytest.raises(TransportError):
                rle_decode(data[:k])
        with pytest.raises(TransportError):
            rle_decode(data + b"\0")

    def test_corrupt_headers_and_indices(self):
        a = batch((64, 8), 0.7, 16)
        data = bytearray(rle_encode(a))
        h = rle_header(bytes(data))
        for flags in (0x08, 0x80):
            bad = bytearray(data)
            bad[0] |= flags
            with pytest.raises(TransportError, match="flag"):
                rle_decode(bytes(bad))
        bad = bytearray(data)
        struct.pack_into("<I", bad, 9, 10**6)  # too many runs for N*D
        with pytest.raises(TransportError, match="runs"):
            rle_decode(bytes(bad))
        bad = bytearray(data)
        struct.pack_into("<I", bad, 1, 65)  # N changed: index width and counts no longer fit
        with pytest.raises(TransportError):
            rle_decode(bytes(bad))
        bad = bytearray(data)
        bad[-((2 * h.runs * 9 + 7) // 8)] ^= 0xFF  # the first head's top bits
        with pytest.raises(TransportError, match="corrupt"):
            rle_decode(bytes(bad))
        with pytest.raises(TransportError, match="2\\*\\*32"):
            rle_decode(struct.pack("<BII", 1, 2**20, 2**20))

    def test_nonzero_padding_bits(self):
        a = np.array([[0, 0], [1, 0], [2, 3], [0, 4]], dtype=np.float32)  # 12 index bits: 4 pad
        data = bytearray(rle_encode(a))
        data[-1] |= 0x01
        with pytest.raises(TransportError, match="padding"):
            rle_decode(bytes(data))

    def test_too_many_elements(self):
        big = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(2**17, 2**16), strides=(0, 0))
        with pytest.raises(ConfigError, match="2\\*\\*32"):
            rle_encode(big)


@message("tests.rle.RLETestTensors")
class RLETestTensors:
    """Test message: tensor fields of several ranks."""

    one: np.ndarray = tensor_field()
    three: np.ndarray = tensor_field()


class TestRegisteredCodecs:
    def test_registry(self):
        assert get_codec("rle32").id == 16 and codec_by_id(17) is get_codec("rle16")
        assert get_codec("rle32").fixed_size(100) is None

    @pytest.mark.parametrize("name,bits", [("rle32", 32), ("rle16", 16)])
    @pytest.mark.parametrize("cls", [Embeddings, Gradients])
    @pytest.mark.parametrize("shape,zeros", [((256, 8), 0.8), ((17, 3), 0.5), ((64, 4), 0.0), ((0, 8), 0.5)])
    def test_through_serde(self, cls, name, bits, shape, zeros):
        x = batch(shape, zeros, 17)
        enc = encode(cls(x), codec=name, phase="train")
        out = decode(enc.data).msg.values
        assert out.dtype == np.float32 and out.shape == x.shape
        np.testing.assert_array_equal(out, x.astype(VDT[bits]).astype(np.float32))
        assert enc.payload == len(rle_encode(x, bits=bits))
        assert enc.overhead == TENSOR_MESSAGE_OVERHEAD + 4  # + the u32 length of a variable-size codec

    def test_other_ranks_and_float64(self):
        one = batch((50, 1), 0.5, 18)[:, 0].astype(np.float64)
        three = batch((6, 20), 0.5, 19).reshape(6, 4, 5)
        out = decode(encode(RLETestTensors(one, three), codec="rle32").data).msg
        np.testing.assert_array_equal(out.one, one.astype(np.float32))
        np.testing.assert_array_equal(out.three, three)
        assert get_codec("rle32").encode(one) == rle_encode(one.reshape(-1, 1))
        assert get_codec("rle32").encode(np.float32(3.0)) == rle_encode(np.full((1, 1), 3.0))

    def test_codec_decode_checks(self):
        data = rle_encode(batch((4, 4), 0.5), bits=16)
        with pytest.raises(TransportError, match="Q=16"):
            get_codec("rle32").decode(memoryview(data), 16)
        with pytest.raises(TransportError, match="shape"):
            get_codec("rle16").decode(memoryview(data), 15)
        assert get_codec("rle16").decode(memoryview(data), 16).shape == (16,)
