"""How the embeddings and gradients of one batch become bytes, per method (sparsevfl.md sections 4.3, 5).

A :class:`Coding` fixes one coding per direction and is agreed at set-up (it travels in
:class:`~verticalfs.methods.sparsevfl.messages.CodedSpec`), so no per-message flag is needed: both
sides know the batch's rows ``N`` (agreed by index) and every party's embedding width ``D``.

Forward (passive -> active, the embedding batch ``E_m``, shape ``(N, D)``):

- ``float32`` / ``float16``: the dense matrix, row-major (ORIGINAL, DIM-k, Q-16);
- ``int8``: symmetric per-tensor int8 with a float32 scale (Q-8, the core ``int8`` codec);
- ``rle``: run-length coding (:func:`verticalfs.codecs.rle.rle_encode`) with ``bits`` (Q) and the
  traversal ``order``; the codec falls back to the dense matrix when that is smaller (section 4.4).

Backward (active -> passive, the gradient batch ``G_m``):

- ``float32`` / ``float16`` / ``int8``: dense, as above;
- ``masked``: only the entries whose embedding entry was non-zero (section 4.2), no positions: both
  sides hold the mask (the passive party from its own embeddings, the active party from decoding);
- ``topw``: the ``top_w`` entries of largest magnitude of the whole batch gradient with their flat
  row-major positions (TOP-W, sparsevfl.md section 5 after Lin et al. / Wangni et al.).
  Positions are packed at ``q2 = ceil(log2(N D))`` bits each, the index width sparsevfl.md section
  4.3 uses for run positions (choice: the same accounting as the run-length code it is compared
  with, rather than int32). Values use ``bits`` (16 -> float16, as TOP-W-16). If
  ``top_w >= N D`` every value is sent in row-major order without positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verticalfs.codecs import get_codec, rle
from verticalfs.exceptions import ConfigError, ProtocolError

FORWARD_CODINGS = ("float32", "float16", "int8", "rle")
BACKWARD_CODINGS = ("float32", "float16", "int8", "masked", "topw")
ORDERS = ("vertical", "horizontal")

_F4 = np.dtype("<f4")
_F2 = np.dtype("<f2")


def pack_uint(values: np.ndarray, bits: int) -> bytes:
    """Pack non-negative integers below ``2**bits`` at ``bits`` bits each (LSB first)."""
    v = np.asarray(values, dtype=np.uint64)
    shifts = np.arange(bits, dtype=np.uint64)
    b = ((v[:, None] >> shifts[None, :]) & np.uint64(1)).astype(np.uint8)
    return np.packbits(b.reshape(-1), bitorder="little").tobytes()


def unpack_uint(data: bytes | memoryview, count: int, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_uint`: ``count`` integers (int64)."""
    need = (count * bits + 7) // 8
    if len(data) < need:
        raise ProtocolError(f"packed positions: {len(data)} bytes, need {need} for {count} x {bits} bits")
    b = np.unpackbits(np.frombuffer(data, dtype=np.uint8, count=need), count=count * bits, bitorder="little")
    weights = (np.int64(1) << np.arange(bits, dtype=np.int64))
    return b.reshape(count, bits).astype(np.int64) @ weights


def _dense_encode(kind: str, a: np.ndarray) -> bytes:
    if kind == "float32":
        return np.ascontiguousarray(a, dtype=_F4).tobytes()
    if kind == "float16":
        return np.ascontiguousarray(a, dtype=_F2).tobytes()
    return get_codec("int8").encode(a)


def _dense_decode(kind: str, data: bytes, n: int, d: int) -> np.ndarray:
    size = n * d
    if kind == "float32":
        if len(data) != 4 * size:
            raise ProtocolError(f"float32 batch of {n}x{d} needs {4 * size} bytes, got {len(data)}")
        return np.frombuffer(data, dtype=_F4).reshape(n, d).copy()  # writable, for torch
    if kind == "float16":
        if len(data) != 2 * size:
            raise ProtocolError(f"float16 batch of {n}x{d} needs {2 * size} bytes, got {len(data)}")
        return np.frombuffer(data, dtype=_F2).astype(np.float32).reshape(n, d)
    return get_codec("int8").decode(memoryview(data), size).reshape(n, d)


@dataclass(frozen=True)
class Coding:
    """One coding per direction (see the module docstring).

    Parameters
    ----------
    forward : {"float32", "float16", "int8", "rle"}
    backward : {"float32", "float16", "int8", "masked", "topw"}
    bits : {32, 16}
        Q of sparsevfl.md: width of the values of the ``rle``, ``masked`` and ``topw`` codings.
    order : {"vertical", "horizontal"}
        Traversal of the run-length code (section 4.3; vertical = column by column).
    top_w : int
        W of the ``topw`` coding.
    """

    forward: str = "float32"
    backward: str = "float32"
    bits: int = 32
    order: str = "vertical"
    top_w: int = 1024

    def __post_init__(self) -> None:
        if self.forward not in FORWARD_CODINGS:
            raise ConfigError(f"forward coding must be one of {FORWARD_CODINGS}, got {self.forward!r}")
        if self.backward not in BACKWARD_CODINGS:
            raise ConfigError(f"backward coding must be one of {BACKWARD_CODINGS}, got {self.backward!r}")
        if self.bits not in (16, 32):
            raise ConfigError(f"bits (Q) must be 16 or 32, got {self.bits!r}")
        if self.order not in ORDERS:
            raise ConfigError(f"order must be one of {ORDERS}, got {self.order!r}")
        if self.top_w < 1:
            raise ConfigError(f"top_w (W) must be >= 1, got {self.top_w!r}")
        if self.backward == "masked" and self.forward != "rle":
            raise ConfigError("masked gradients need the run-length forward coding (forward='rle')")

    @property
    def needs_mask(self) -> bool:
        """True if the backward coding uses the embedding's non-zero mask."""
        return self.backward == "masked"

    # ------------------------------------------------------------------ forward
    def encode_embeddings(self, h: np.ndarray) -> bytes:
        """The passive party's side of the forward message."""
        if self.forward == "rle":
            return rle.rle_encode(h, bits=self.bits, order=self.order)
        return _dense_encode(self.forward, h)

    def decode_embeddings(self, data: bytes, n: int, d: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The active party's side: ``(values (n, d) float32, non-zero mask or None)``."""
        if self.forward == "rle":
            values, mask = rle.rle_decode(data)
            if values.shape != (n, d):
                raise ProtocolError(f"run-length batch decodes to {values.shape}, expected {(n, d)}")
            return values, mask
        return _dense_decode(self.forward, data, n, d), None

    def encode_embeddings_keep_mask(self, h: np.ndarray) -> tuple[bytes, np.ndarray | None]:
        """:meth:`encode_embeddings` plus the mask the passive party keeps for masked gradients.

        The mask is :func:`verticalfs.codecs.rle.nonzero_mask` (the values rounded to ``bits``,
        then ``!= 0``), which is exactly the mask the receiver decodes, even where a value
        underflows to zero in float16. ``h`` is rounded once and the rounded copy is coded (the
        codec's own rounding is then a no-op). ``None`` if the backward coding needs no mask.
        """
        if not self.needs_mask:
            return self.encode_embeddings(h), None
        q = np.asarray(h, dtype=self._value_dtype())
        return rle.rle_encode(q, bits=self.bits, order=self.order), q != 0

    # ----------------------------------------------------------------- backward
    def encode_gradients(self, g: np.ndarray, mask: np.ndarray | None) -> bytes:
        """The active party's side of the backward message for one party's block ``g``."""
        b = self.backward
        if b == "masked":
            if mask is None:
                raise ProtocolError("masked gradients need the embedding mask of the same batch")
            return rle.encode_masked(g, mask, bits=self.bits, order=self.order)
        if b == "topw":
            return self._encode_topw(g)
        return _dense_encode(b, g)

    def decode_gradients(self, data: bytes, n: int, d: int, mask: np.ndarray | None) -> np.ndarray:
        """The passive party's side: the dense ``(n, d)`` float32 gradient (zeros where not sent)."""
        b = self.backward
        if b == "masked":
            if mask is None:
                raise ProtocolError("masked gradients arrived but the party kept no mask for the batch")
            g = rle.decode_masked(data, mask, bits=self.bits, order=self.order)
        elif b == "topw":
            g = self._decode_topw(data, n, d)
        else:
            g = _dense_decode(b, data, n, d)
        if g.shape != (n, d):
            raise ProtocolError(f"gradient batch decodes to {g.shape}, expected {(n, d)}")
        return g

    def _value_dtype(self) -> np.dtype:
        return _F2 if self.bits == 16 else _F4

    def _encode_topw(self, g: np.ndarray) -> bytes:
        flat = np.ascontiguousarray(g, dtype=np.float32).reshape(-1)
        size = flat.size
        k = min(self.top_w, size)
        vdt = self._value_dtype()
        if k == size:
            return flat.astype(vdt).tobytes()
        idx = np.argpartition(np.abs(flat), size - k)[size - k:]
        idx.sort()  # canonical order: the same bytes whatever argpartition returns
        return pack_uint(idx, rle.index_bits(size)) + flat[idx].astype(vdt).tobytes()

    def _decode_topw(self, data: bytes, n: int, d: int) -> np.ndarray:
        size = n * d
        k = min(self.top_w, size)
        vdt = self._value_dtype()
        if k == size:
            if len(data) != size * vdt.itemsize:
                raise ProtocolError(f"top-W batch of {n}x{d}: {len(data)} bytes, expected {size * vdt.itemsize}")
            return np.frombuffer(data, dtype=vdt).astype(np.float32).reshape(n, d)
        q = rle.index_bits(size)
        ib = (k * q + 7) // 8
        if len(data) != ib + k * vdt.itemsize:
            raise ProtocolError(f"top-W batch of {n}x{d}, W={k}: {len(data)} bytes, expected {ib + k * vdt.itemsize}")
        idx = unpack_uint(memoryview(data)[:ib], k, q)
        if idx.size and idx.max() >= size:
            raise ProtocolError(f"top-W position {int(idx.max())} outside a batch of {size} entries")
        out = np.zeros(size, dtype=np.float32)
        out[idx] = np.frombuffer(data, dtype=vdt, offset=ib, count=k)
        return out.reshape(n, d)
