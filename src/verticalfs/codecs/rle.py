"""Run-length coding of sparse embeddings and masked gradients (sparsevfl.md §4.3 and §4.4).

A batch of ReLU embeddings ``E`` of shape ``(N, D)`` is traversed vertically (column by column,
``k = d * N + n``) or horizontally (row by row, ``k = n * D + d``) into a list of ``N * D`` values.
The forward message carries the non-zero values ``E'`` at ``Q`` bits and, for every maximal run of
non-zeros, its head index ``H`` and its end index ``T``. The backward message carries only the
masked gradient ``G'`` (the gradient at the positions the forward message transmitted), in the same
traversal order, because both sides keep the mask (§4.2, Algorithm 1 lines 9, 14, 22, 27).

Wire format of :func:`rle_encode` (little-endian, byte-aligned fields)
---------------------------------------------------------------------

Run-length form ("coded", :data:`CODED_HEADER_BYTES` = 13 bytes of header)::

    flags u8 | N u32 | D u32 | R u32 | E' (nnz values, Q bits each) | H, T (2R indices, q2 bits each)

Dense form (:data:`DENSE_HEADER_BYTES` = 9 bytes of header)::

    flags u8 | N u32 | D u32 | all N*D values at Q bits, row-major (C order)

``flags``: bit 0 = dense form, bit 1 = ``Q = 16`` (else 32), bit 2 = horizontal traversal (else
vertical); bits 3-7 are zero (a decoder rejects anything else). So the mode flag costs one byte,
shared with ``Q`` and the traversal order, which the decoder needs as well (:func:`rle_decode` takes
no parameters). Values are IEEE float32 (``Q = 32``) or float16 (``Q = 16``). The indices are
bit-packed most-significant bit first, all heads ``H_0 .. H_{R-1}`` followed by all ends
``T_0 .. T_{R-1}``; the last byte is padded with zero bits.

Choices where the paper is open or inconsistent (§4.3 / §4.4)
-------------------------------------------------------------

* ``q0`` and ``q1`` (the bits of ``N`` and ``D``): §4.3 writes ``q0 = ceil(log2 N)`` and
  ``q1 = ceil(log2 D)``. A receiver cannot read a field whose width depends on the value it holds
  (and for ``N`` a power of two, ``ceil(log2 N)`` bits cannot hold ``N``), so we use a fixed
  ``q0 = q1 = 32`` (u32).
* ``R`` (the number of runs, u32): not in the paper's list of "minimum information", which treats
  ``E'``, ``H`` and ``T`` as separately delimited arrays. In one byte string the receiver needs one
  count to split them (``|E'|`` then follows from the runs and is checked against the length).
* ``T``: the paper's tail index is "where zero values start", i.e. one past the run, which is
  ``N * D`` for a run reaching the end and then does not fit in ``q2 = ceil(log2(D N))`` bits. We
  store the *inclusive* end (tail - 1), which is in ``[0, N D - 1]`` and always fits in ``q2`` bits.
  (``N D = 1`` gives ``q2 = 0``: the indices cost nothing.) The public implementation stored the
  indices as int16 and overflowed once ``N D > 32767``; here the width is ``q2``, up to 32 bits, so
  a batch may have up to ``2**32`` elements.
* Dense fallback (§4.4): eq. 11 shows the coded form can be 3/2 times the dense one (alternating
  zeros) and the paper says coding "should be disabled" then. We decide per batch: the dense form is
  sent exactly when the coded bytes (header included) would be more than the dense bytes (header
  included); on a tie the coded form is sent. So ``len(rle_encode(a)) <= 9 + N D Q / 8`` always.
  (With ``q2``-bit indices the alternating case costs ``Q + 2 q2`` bits per pair of elements
  against ``2 Q`` dense, so it falls back only when ``2 q2 > Q``, not always as eq. 11 suggests.)
* Zeros are decided on the *transmitted* precision: ``a`` is first rounded to ``Q`` bits and the
  mask is ``rounded != 0`` (:func:`nonzero_mask`). A float32 value that underflows to 0 in float16
  is therefore not transmitted, and the receiver's mask (:func:`rle_decode`) always equals the
  sender's :func:`nonzero_mask`, in both forms. ``-0.0`` counts as zero (it decodes as ``+0.0``);
  NaN counts as non-zero.

Size versus equation 10
-----------------------

Equation 10 (one batch, forward) counts ``(|E'| + |H| + |T|) Q`` bits, i.e. it charges the indices
``Q`` bits each, while §4.3 gives them ``q2`` bits. :func:`rle_size_bits` follows §4.3
(``|E'| Q + 2 R q2``, the bits this codec really writes; ``index_bits=bits`` gives eq. 10
literally). Neither counts ``N``, ``D`` or ``R``. Then, exactly::

    len(rle_encode(a)) == rle_size_bytes(a) == min*(13 + ceil(rle_size_bits(a) / 8), 9 + N D Q / 8)

(``min*``: the coded size on a tie), because ``|E'| Q`` is a whole number of bytes and only the
index bits are padded. The backward message (:func:`encode_masked`) is exactly ``|E'| Q / 8``
bytes, eq. 10's second ``|E'|`` term, with no header.

Two :class:`~verticalfs.codecs.base.Codec` objects, ``rle32`` (id 16) and ``rle16`` (id 17), make the
forward form usable for any tensor field of any message (vertical traversal; a 1-D array is treated
as ``(N, 1)``, an array of more dimensions as ``(shape[0], rest)``). Through
:mod:`verticalfs.transport.serde` the ledger counts the codec's bytes (its 9- or 13-byte header
included) as payload, and the message costs 4 bytes more overhead than with a fixed-size codec
(the u32 length of a variable-size payload): ``TENSOR_MESSAGE_OVERHEAD + 4`` = 34 bytes for a 2-D
tensor.
"""

from __future__ import annotations

import struct
from math import gcd
from typing import NamedTuple

import numpy as np

from verticalfs.codecs.base import Codec, expansion_limit, register_codec
from verticalfs.exceptions import ConfigError, TransportError

__all__ = [
    "CODED_HEADER_BYTES",
    "DENSE_HEADER_BYTES",
    "MAX_ELEMENTS",
    "RLE16Codec",
    "RLE32Codec",
    "RLEHeader",
    "decode_masked",
    "encode_masked",
    "index_bits",
    "masked_values",
    "pack_bits",
    "nonzero_mask",
    "rle_decode",
    "rle_encode",
    "rle_header",
    "rle_size_bits",
    "rle_size_bytes",
    "unmask",
    "unpack_bits",
]

_FLAG_DENSE = 0x01
_FLAG_Q16 = 0x02
_FLAG_HORIZONTAL = 0x04
_FLAG_RESERVED = 0xF8

_HEAD = struct.Struct("<BII")  # flags, N (q0 = 32 bits), D (q1 = 32 bits)
_RUNS = struct.Struct("<I")  # R, coded form only
DENSE_HEADER_BYTES = _HEAD.size  # 9
CODED_HEADER_BYTES = _HEAD.size + _RUNS.size  # 13
MAX_ELEMENTS = 2**32  # N * D limit: indices fit in q2 <= 32 bits, R in a u32

_VALUE_DTYPES = {32: np.dtype("<f4"), 16: np.dtype("<f2")}
_ORDERS = ("vertical", "horizontal")
_U64 = np.uint64


class RLEHeader(NamedTuple):
    """The header of an :func:`rle_encode` byte string (see the module docstring)."""

    n: int
    d: int
    bits: int
    order: str
    dense: bool
    runs: int  # R; 0 for the dense form

    @property
    def nbytes(self) -> int:
        return DENSE_HEADER_BYTES if self.dense else CODED_HEADER_BYTES


# ----------------------------------------------------------------------------------- validation


def _value_dtype(bits: object) -> np.dtype:
    ok = isinstance(bits, (int, np.integer)) and not isinstance(bits, (bool, np.bool_))
    dt = _VALUE_DTYPES.get(int(bits)) if ok else None
    if dt is None:
        raise ConfigError(f"bits (the value width Q of sparsevfl.md §4.3) must be 16 or 32, got {bits!r}")
    return dt


def _is_vertical(order: object) -> bool:
    if order not in _ORDERS:
        raise ConfigError(
            f"order must be 'vertical' (column-major traversal) or 'horizontal' (row-major), got {order!r}"
        )
    return order == "vertical"


def _matrix(a: object, name: str) -> np.ndarray:
    if hasattr(a, "detach") and hasattr(a, "numpy"):  # a torch tensor
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    if a.ndim != 2:
        raise ConfigError(
            f"{name} must be a 2-D (N, D) batch, got shape {a.shape}; reshape it, e.g. a.reshape(len(a), -1)"
        )
    if a.dtype.kind not in "biuf":
        raise ConfigError(f"{name} must hold real numbers, got dtype {a.dtype}")
    n, d = a.shape
    if n >= MAX_ELEMENTS or d >= MAX_ELEMENTS or n * d > MAX_ELEMENTS:
        raise ConfigError(
            f"{name} has shape {a.shape}: run-length coding supports at most 2**32 elements per batch; "
            "split the batch"
        )
    return a


def _mask_of(mask: object, name: str = "mask") -> np.ndarray:
    m = _matrix(mask, name)
    if m.dtype != np.bool_:
        raise ConfigError(f"{name} must be a bool array, got dtype {m.dtype}; pass e.g. values != 0")
    return m


def index_bits(n_elements: int) -> int:
    """``q2 = ceil(log2(N D))`` of §4.3: the bits of one run index (0 for ``N D <= 1``)."""
    return _q2(n_elements)


def _q2(n_elements: int) -> int:
    return max(int(n_elements) - 1, 0).bit_length()  # == ceil(log2(n)) for n >= 1


def nonzero_mask(a: np.ndarray, *, bits: int = 32) -> np.ndarray:
    """The positions :func:`rle_encode` transmits: ``a`` rounded to ``Q`` bits, then ``!= 0``.

    The sender keeps this mask for the backward direction (:func:`encode_masked`); the receiver
    gets the same mask from :func:`rle_decode`.
    """
    dt = _value_dtype(bits)
    return _round(_matrix(a, "a"), dt) != 0


def _round(a: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``a`` at Q bits; beyond float16's range a value becomes +-inf (as the float16 codec does)."""
    with np.errstate(over="ignore"):
        return np.asarray(a, dtype=dt)


# -------------------------------------------------------------------------------- bit packing


# Two packers, the same bits. Small arrays: a (count, 32) matrix of bits through np.unpackbits /
# np.packbits (no Python loop, 32 bytes of temporary per value). Large arrays: 64-bit words built with
# shifts, looping over the <= 64 bit positions of a repeating block (each step vectorised over all
# blocks), which needs no per-bit temporary. The switch is where the loop's fixed cost stops
# dominating (measured: a few microseconds per position against ~10 ns per value).
_BLOCKS_FROM = 128  # use the word packer from this many blocks on


def _layout(count: int, width: int) -> tuple[int, int, int]:
    """Block layout of ``count`` values of ``width`` bits in big-endian uint64 words.

    The bit offsets repeat every ``L = 64 / gcd(width, 64)`` values, which fill exactly
    ``W = width / gcd(width, 64)`` words, so the values are viewed as a ``(K, L)`` array of blocks
    and the words as ``(K, W)``. Returns ``(K, L, W)``.
    """
    g = gcd(width, 64)
    per_block = 64 // g
    return -(-count // per_block), per_block, width // g


def _pack_bits(idx: np.ndarray, width: int) -> bytes:
    """Pack unsigned integers (< 2**width <= 2**32) at ``width`` bits each, MSB first, zero-padded."""
    count = idx.size
    if count == 0 or width == 0:
        return b""
    k, per_block, nwords = _layout(count, width)
    if k < _BLOCKS_FROM:
        bits = np.unpackbits(idx.astype(">u4").view(np.uint8).reshape(count, 4), axis=1)
        return np.packbits(bits[:, 32 - width :]).tobytes()
    vals = np.zeros(k * per_block, dtype=_U64)
    vals[:count] = idx
    vals = vals.reshape(k, per_block)
    words = np.zeros((k, nwords), dtype=_U64)
    for j in range(per_block):  # bit positions in a block, not elements
        pos = j * width
        w, shift = pos >> 6, 64 - width - (pos & 63)
        if shift >= 0:  # the value fits in word w
            words[:, w] |= vals[:, j] << _U64(shift)
        else:  # its top bits end word w, the rest opens word w + 1
            words[:, w] |= vals[:, j] >> _U64(-shift)
            words[:, w + 1] |= vals[:, j] << _U64(64 + shift)
    return words.astype(">u8").tobytes()[: (count * width + 7) // 8]


def _unpack_bits(buf: np.ndarray, count: int, width: int) -> np.ndarray:
    """Inverse of :func:`_pack_bits` for a uint8 buffer of exactly ``ceil(count * width / 8)`` bytes."""
    if count == 0 or width == 0:
        return np.zeros(count, dtype=_U64)
    k, per_block, nwords = _layout(count, width)
    if k < _BLOCKS_FROM:
        bits = np.zeros((count, 32), dtype=np.uint8)
        bits[:, 32 - width :] = np.unpackbits(buf, count=count * width).reshape(count, width)
        return np.packbits(bits, axis=1).view(">u4").reshape(count).astype(_U64)
    padded = np.zeros(k * nwords * 8, dtype=np.uint8)
    padded[: buf.size] = buf
    words = padded.view(">u8").astype(_U64).reshape(k, nwords)
    vals = np.empty((k, per_block), dtype=_U64)
    for j in range(per_block):  # bit positions in a block, not elements
        pos = j * width
        w, off = pos >> 6, pos & 63
        v = (words[:, w] << _U64(off)) >> _U64(64 - width)
        if off + width > 64:
            v |= words[:, w + 1] >> _U64(128 - width - off)
        vals[:, j] = v
    return vals.reshape(-1)[:count]


# ------------------------------------------------------------------------------------- runs


def _runs(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Heads and inclusive ends of the maximal runs of True in the 1-D bool array ``m``."""
    if m.size == 0:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
    change = np.flatnonzero(np.diff(m)) + 1  # np.diff of bool is !=: a head or one past an end
    bounds = np.concatenate(([0] if m[0] else [], change, [m.size] if m[-1] else [])).astype(np.intp)
    return bounds[0::2], bounds[1::2] - 1  # they alternate, starting with a head


def _traverse(q: np.ndarray, vertical: bool) -> np.ndarray:
    return q.T.ravel() if vertical else q.ravel()


def _untraverse(flat: np.ndarray, n: int, d: int, vertical: bool) -> np.ndarray:
    if vertical:
        return np.ascontiguousarray(flat.reshape(d, n).T)
    return flat.reshape(n, d)


def _coded_nbytes(nnz: int, runs: int, size: int, vbytes: int) -> int:
    return CODED_HEADER_BYTES + nnz * vbytes + (2 * runs * _q2(size) + 7) // 8


# --------------------------------------------------------------------------------- forward


def rle_encode(a: np.ndarray, *, bits: int = 32, order: str = "vertical") -> bytes:
    """Run-length code one batch of embeddings (sparsevfl.md §4.3), or send it dense (§4.4).

    Parameters
    ----------
    a : ndarray of shape (N, D)
        Real values, typically ReLU outputs. Rounded to ``Q`` bits first; zeros of the rounded
        values are not transmitted.
    bits : {32, 16}
        ``Q``: values travel as float32 or float16.
    order : {"vertical", "horizontal"}
        Traversal: column-major (``k = d N + n``, the paper's default) or row-major.

    Returns
    -------
    bytes
        The format in the module docstring; the dense form whenever the coded form would be longer,
        so the length is at most ``9 + N D Q / 8``. ``len`` equals :func:`rle_size_bytes`.

    Raises
    ------
    ConfigError
        ``a`` not 2-D or not real, more than ``2**32`` elements, ``bits`` not 16/32, unknown ``order``.
    """
    vdt = _value_dtype(bits)
    vertical = _is_vertical(order)
    a = _matrix(a, "a")
    n, d = a.shape
    size = n * d
    flags = (_FLAG_Q16 if bits == 16 else 0) | (0 if vertical else _FLAG_HORIZONTAL)
    q = _round(a, vdt)
    flat = _traverse(q, vertical)
    m = flat != 0
    heads, ends = _runs(m)
    runs = heads.size
    nnz = int(np.count_nonzero(m))
    dense_nbytes = DENSE_HEADER_BYTES + size * vdt.itemsize
    if _coded_nbytes(nnz, runs, size, vdt.itemsize) > dense_nbytes:
        return _HEAD.pack(flags | _FLAG_DENSE, n, d) + q.tobytes()  # tobytes: C order
    idx = _pack_bits(np.concatenate((heads, ends)), _q2(size))
    return b"".join((_HEAD.pack(flags, n, d), _RUNS.pack(runs), flat[m].tobytes(), idx))


def rle_header(data: bytes | memoryview) -> RLEHeader:
    """Read and check the header of an :func:`rle_encode` byte string (not the body)."""
    buf = memoryview(data)
    if buf.nbytes < DENSE_HEADER_BYTES:
        raise TransportError(
            f"run-length data truncated: {buf.nbytes} bytes, the header alone is {DENSE_HEADER_BYTES}"
        )
    flags, n, d = _HEAD.unpack_from(buf, 0)
    if flags & _FLAG_RESERVED:
        raise TransportError(f"run-length data corrupt: unknown flag bits in header byte {flags:#04x}")
    dense = bool(flags & _FLAG_DENSE)
    runs = 0
    if not dense:
        if buf.nbytes < CODED_HEADER_BYTES:
            raise TransportError(
                f"run-length data truncated: {buf.nbytes} bytes, the coded header is {CODED_HEADER_BYTES}"
            )
        (runs,) = _RUNS.unpack_from(buf, DENSE_HEADER_BYTES)
    if n * d > MAX_ELEMENTS:
        raise TransportError(f"run-length data corrupt: header says N={n}, D={d} (more than 2**32 elements)")
    return RLEHeader(
        n, d, 16 if flags & _FLAG_Q16 else 32, "horizontal" if flags & _FLAG_HORIZONTAL else "vertical", dense, runs
    )


#: runs and elements decoded per chunk: bound the decoder's temporaries (a few hundred KB)
#: whatever N * D is
_RUN_CHUNK = 8192
_ELEMENT_CHUNK = 16384


def _unpack_bits_at(buf: np.ndarray, start: int, count: int, width: int) -> np.ndarray:
    """``count`` integers of ``width`` bits starting at integer ``start`` of an MSB-first packing."""
    if count == 0 or width == 0:
        return np.zeros(count, dtype=np.int64)
    bit0 = start * width
    lo, shift = bit0 >> 3, bit0 & 7
    hi = (bit0 + count * width + 7) >> 3
    bits = np.unpackbits(buf[lo:hi])[shift:shift + count * width].reshape(count, width)
    padded = np.zeros((count, 32), dtype=np.uint8)
    padded[:, 32 - width:] = bits
    return np.packbits(padded, axis=1).view(">u4").reshape(count).astype(np.int64)


def _decode_values(data: bytes | memoryview, max_elements: int | None) -> tuple[np.ndarray, RLEHeader]:
    """The ``(N, D)`` float32 values (C order) of a run-length code, every check before allocating.

    Memory: the ``N * D`` float32 output plus temporaries bounded by the chunk sizes, whatever the
    message claims.
    """
    h = rle_header(data)
    n, d, size = h.n, h.d, h.n * h.d
    if max_elements is None:
        max_elements = expansion_limit(memoryview(data).nbytes)
    if size > max_elements:
        raise TransportError(f"run-length data claims N={n} x D={d} = {size} values, more than the receiver "
                             f"accepts ({max_elements}); raise the limit only if that shape is expected")
    raw = np.frombuffer(data, dtype=np.uint8)
    vdt = _VALUE_DTYPES[h.bits]
    vb = vdt.itemsize
    vertical = h.order == "vertical"
    if h.dense:
        expected = DENSE_HEADER_BYTES + size * vb
        if raw.size != expected:
            raise TransportError(
                f"run-length data (dense form, N={n}, D={d}, Q={h.bits}) has {raw.size} bytes, expected {expected}"
            )
        return raw[DENSE_HEADER_BYTES:].view(vdt).astype(np.float32).reshape(n, d), h
    runs = h.runs
    if runs > (size + 1) // 2:
        raise TransportError(f"run-length data corrupt: {runs} runs cannot occur in N*D = {size} elements")
    q2 = _q2(size)
    nidx = (2 * runs * q2 + 7) // 8
    nval = raw.size - CODED_HEADER_BYTES - nidx
    if nval < 0 or nval % vb:
        raise TransportError(
            f"run-length data truncated or corrupt: {raw.size} bytes do not hold the header, {runs} runs "
            f"at q2={q2} bits and a whole number of {h.bits}-bit values"
        )
    nnz = nval // vb
    if nnz > size:
        raise TransportError(f"run-length data corrupt: {nnz} values in N*D = {size} elements")
    idx_buf = raw[raw.size - nidx:]
    pad = nidx * 8 - 2 * runs * q2
    if pad and idx_buf[-1] & ((1 << pad) - 1):
        raise TransportError("run-length data corrupt: non-zero padding bits after the run indices")
    vals = raw[CODED_HEADER_BYTES:CODED_HEADER_BYTES + nval].view(vdt)
    out = np.zeros(size, dtype=np.float32)  # C order (N, D), filled in place: no transposed copy

    def place(k: np.ndarray, v: np.ndarray) -> None:
        """Values ``v`` at traversal positions ``k``."""
        out[(k % n) * d + k // n if vertical else k] = v

    filled, prev_end = 0, -2
    for r0 in range(0, runs, _RUN_CHUNK):  # chunks of runs, each vectorised
        kr = min(_RUN_CHUNK, runs - r0)
        heads = _unpack_bits_at(idx_buf, r0, kr, q2)
        ends = _unpack_bits_at(idx_buf, runs + r0, kr, q2)
        if (np.any(ends < heads) or ends[-1] >= size or heads[0] <= prev_end + 1
                or np.any(heads[1:] <= ends[:-1] + 1)):
            raise TransportError(
                f"run-length data corrupt: run indices are out of range [0, {size}) or not ordered, disjoint runs"
            )
        lengths = ends - heads + 1
        cum = np.cumsum(lengths)
        if filled + int(cum[-1]) > nnz:
            raise TransportError(f"run-length data corrupt: the runs cover more than the {nnz} values sent")
        g0 = 0
        while g0 < kr:  # groups of runs covering at most _ELEMENT_CHUNK elements
            base = int(cum[g0 - 1]) if g0 else 0
            g1 = int(np.searchsorted(cum, base + _ELEMENT_CHUNK, side="right"))
            if g1 <= g0:  # one run longer than a chunk: by elements
                h0, length = int(heads[g0]), int(lengths[g0])
                for off in range(0, length, _ELEMENT_CHUNK):
                    m = min(_ELEMENT_CHUNK, length - off)
                    v = vals[filled + base + off:filled + base + off + m]
                    if np.count_nonzero(v) != m:
                        raise TransportError("run-length data corrupt: a transmitted value is zero")
                    place(h0 + off + np.arange(m, dtype=np.int64), v)
                g0 += 1
                continue
            hs, ls = heads[g0:g1], lengths[g0:g1]
            total = int(cum[g1 - 1]) - base
            v = vals[filled + base:filled + base + total]
            if np.count_nonzero(v) != total:
                raise TransportError("run-length data corrupt: a transmitted value is zero")
            place(np.repeat(hs - (cum[g0:g1] - ls - base), ls) + np.arange(total, dtype=np.int64), v)
            g0 = g1
        filled += int(cum[-1])
        prev_end = int(ends[-1])
    if filled != nnz:
        raise TransportError(f"run-length data corrupt: the runs cover {filled} elements but {nnz} values were sent")
    return out.reshape(n, d), h


def rle_decode(data: bytes | memoryview, *, max_elements: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`rle_encode`.

    Parameters
    ----------
    data : bytes
        An :func:`rle_encode` byte string (untrusted: every length and index is checked).
    max_elements : int, optional
        Refuse a code whose ``N * D`` exceeds this before allocating anything (an all-zero batch
        is legitimately tiny on the wire, so its declared shape must be bounded by what the
        receiver expects). Default: :func:`~verticalfs.codecs.base.expansion_limit` of
        ``len(data)`` (256 values per byte, at least 65,536).

    Returns
    -------
    values : ndarray of shape (N, D), float32
        Zeros where nothing was transmitted; bit-exact for ``Q = 32``, float16-rounded for 16.
    mask : ndarray of shape (N, D), bool
        The transmitted non-zeros (``values != 0``: a transmitted value is never zero); equal to
        the sender's :func:`nonzero_mask`, which is what both sides keep for :func:`encode_masked`.

    Raises
    ------
    TransportError
        Truncated or corrupt data (bad flags, lengths, run indices out of range or out of order,
        a zero among the transmitted values), or a shape above ``max_elements``.
    """
    values, _ = _decode_values(data, max_elements)
    return values, values != 0


# -------------------------------------------------------------------------------- backward


def encode_masked(
    values: np.ndarray, mask: np.ndarray, *, bits: int = 32, order: str = "vertical"
) -> bytes:
    """Masked-gradient message (§4.2/§4.3): ``values[mask]`` in traversal order at ``Q`` bits.

    No header and no indices: the receiver kept ``mask`` from the forward message. The length is
    ``count_nonzero(mask) * Q / 8`` bytes.

    Parameters
    ----------
    values : ndarray of shape (N, D)
        E.g. the gradient of the loss with respect to the embeddings.
    mask : bool ndarray of shape (N, D)
        The transmitted positions of the forward message (:func:`nonzero_mask` /
        :func:`rle_decode`).
    bits, order
        As in :func:`rle_encode`; the receiver must pass the same to :func:`decode_masked`.
    """
    vdt = _value_dtype(bits)
    return _round(masked_values(values, mask, order=order), vdt).tobytes()


def masked_values(values: np.ndarray, mask: np.ndarray, *, order: str = "vertical") -> np.ndarray:
    """``values[mask]`` in traversal order, as a 1-D array (the masked gradient of §4.2 before its
    values are coded at ``Q`` bits by a float codec; :func:`encode_masked` is the same at ``Q``)."""
    vertical = _is_vertical(order)
    values = _matrix(values, "values")
    mask = _mask_of(mask)
    if mask.shape != values.shape:
        raise ConfigError(f"mask has shape {mask.shape} but values have shape {values.shape}; they must match")
    return values.T[mask.T] if vertical else values[mask]


def unmask(vals: np.ndarray, mask: np.ndarray, *, order: str = "vertical") -> np.ndarray:
    """Inverse of :func:`masked_values`: an ``(N, D)`` float32 array, zeros outside ``mask``."""
    vertical = _is_vertical(order)
    mask = _mask_of(mask)
    vals = np.asarray(vals).reshape(-1)
    nnz = int(np.count_nonzero(mask))
    if vals.size != nnz:
        raise TransportError(f"masked gradient has {vals.size} values, but the mask of shape {mask.shape} "
                             f"selects {nnz}; sender and receiver masks differ")
    if vertical:
        out_t = np.zeros(mask.shape[::-1], dtype=np.float32)
        out_t[mask.T] = vals
        return np.ascontiguousarray(out_t.T)
    out = np.zeros(mask.shape, dtype=np.float32)
    out[mask] = vals
    return out


def pack_bits(values: np.ndarray, width: int) -> bytes:
    """Pack unsigned integers below ``2**width`` (``width <= 32``) at ``width`` bits each, most
    significant bit first, the last byte zero-padded: ``ceil(len(values) * width / 8)`` bytes."""
    v = np.asarray(values)
    if v.size and (int(v.min()) < 0 or (width < 64 and int(v.max()) >> width)):
        raise ConfigError(f"values do not fit in {width} bits")
    return _pack_bits(v.astype(_U64).reshape(-1), int(width))


def unpack_bits(data: bytes | memoryview, count: int, width: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: ``count`` integers (int64)."""
    need = (count * width + 7) // 8
    buf = np.frombuffer(data, dtype=np.uint8)
    if buf.size != need:
        raise TransportError(f"packed integers: {buf.size} bytes, expected {need} for {count} x {width} bits")
    return _unpack_bits(buf, count, width).astype(np.int64)


def decode_masked(
    data: bytes | memoryview, mask: np.ndarray, *, bits: int = 32, order: str = "vertical"
) -> np.ndarray:
    """Inverse of :func:`encode_masked`: an ``(N, D)`` float32 array, zeros outside ``mask``."""
    vdt = _value_dtype(bits)
    mask = _mask_of(mask)
    raw = np.frombuffer(data, dtype=np.uint8)
    nnz = int(np.count_nonzero(mask))
    if raw.size != nnz * vdt.itemsize:
        raise TransportError(
            f"masked data has {raw.size} bytes, but the mask of shape {mask.shape} selects {nnz} values "
            f"({nnz * vdt.itemsize} bytes at Q={bits}); sender and receiver masks or bits differ"
        )
    return unmask(raw.view(vdt), mask, order=order)


# ------------------------------------------------------------------------------------ sizes


def _size_inputs(mask: np.ndarray, bits: int, order: str) -> tuple[np.ndarray, int, int, int]:
    """(flat mask in traversal order, runs, nnz, value bytes) for a bool mask or a values array."""
    vdt = _value_dtype(bits)
    vertical = _is_vertical(order)
    m = _matrix(mask, "mask")
    if m.dtype != np.bool_:
        m = _round(m, vdt) != 0  # values: the same rounding as rle_encode
    flat = _traverse(m, vertical)
    runs = int(flat[0]) + int(np.count_nonzero(flat[1:] > flat[:-1])) if flat.size else 0  # heads
    return flat, runs, int(np.count_nonzero(flat)), vdt.itemsize


def rle_size_bits(
    mask: np.ndarray, *, bits: int = 32, order: str = "vertical", index_bits: int | None = None
) -> int:
    """Equation 10 for one batch, forward direction: ``|E'| Q + (|H| + |T|) q2`` bits.

    Parameters
    ----------
    mask : ndarray of shape (N, D)
        The transmitted positions (bool), or the values themselves (rounded to ``Q`` bits and
        compared with 0, as :func:`rle_encode` does).
    bits : {32, 16}
        ``Q``.
    order : {"vertical", "horizontal"}
        Traversal; the number of runs ``R = |H| = |T|`` depends on it.
    index_bits : int, optional
        Bits per index; default ``q2 = ceil(log2(N D))`` as in §4.3, which is what the codec writes.
        Eq. 10 as printed charges ``Q`` bits per index: pass ``index_bits=bits`` for that.

    Notes
    -----
    Excludes ``N``, ``D``, ``R`` and the flag byte (as eq. 10 does) and ignores the dense fallback;
    see :func:`rle_size_bytes` for the bytes actually sent.
    """
    flat, runs, nnz, vb = _size_inputs(mask, bits, order)
    if index_bits is not None and (not isinstance(index_bits, (int, np.integer)) or index_bits < 0):
        raise ConfigError(f"index_bits must be a non-negative int or None (q2), got {index_bits!r}")
    width = _q2(flat.size) if index_bits is None else int(index_bits)
    return nnz * 8 * vb + 2 * runs * width


def rle_size_bytes(mask: np.ndarray, *, bits: int = 32, order: str = "vertical") -> int:
    """``len(rle_encode(a, bits=bits, order=order))`` for ``a`` with this mask (or for ``a`` itself).

    ``13 + ceil(rle_size_bits / 8)`` (coded form) if that is at most ``9 + N D Q / 8`` (dense form),
    else the latter. Exact, since ``|E'| Q`` is a whole number of bytes and only the ``2 R q2``
    index bits are padded to a byte.
    """
    flat, runs, nnz, vb = _size_inputs(mask, bits, order)
    coded = _coded_nbytes(nnz, runs, flat.size, vb)
    dense = DENSE_HEADER_BYTES + flat.size * vb
    return coded if coded <= dense else dense


# ------------------------------------------------------------------------------------ codecs


class _RLECodec(Codec):
    """Forward run-length form for a message's tensor field.

    ``order`` is the traversal the *encoder* uses (vertical by default); it is written in the
    flags, so one registered instance decodes both.
    """

    bits: int

    def __init__(self, order: str = "vertical") -> None:
        _is_vertical(order)  # validates
        self.order = order

    def encode(self, a: np.ndarray) -> bytes:
        a = np.asarray(a)
        if a.ndim != 2:  # 1-D: a column (N, 1); 0-D: (1, 1); more: (shape[0], rest)
            rows = a.shape[0] if a.ndim else 1
            a = a.reshape(rows, int(np.prod(a.shape[1:], dtype=np.int64)))
        return rle_encode(a, bits=self.bits, order=self.order)

    def decode(self, data: memoryview, size: int) -> np.ndarray:
        h = rle_header(data)
        if h.bits != self.bits:
            raise TransportError(f"codec {self.name!r} received run-length data with Q={h.bits}")
        if h.n * h.d != size:
            raise TransportError(
                f"codec {self.name!r}: data holds N={h.n} x D={h.d} values, the message shape {size}"
            )
        # serde checked ``size`` against the receiver's limit before calling
        values, _ = _decode_values(data, size)
        return values.reshape(-1)  # C order: a view, no copy


class RLE32Codec(_RLECodec):
    """``rle32``: run-length coded float32 values (sparsevfl.md §4.3), dense if that is shorter."""

    name = "rle32"
    id = 16
    bits = 32


class RLE16Codec(_RLECodec):
    """``rle16``: run-length coded float16 values (SPARSEVFL-16), dense if that is shorter."""

    name = "rle16"
    id = 17
    bits = 16


for _c in (RLE32Codec(), RLE16Codec()):
    register_codec(_c)
