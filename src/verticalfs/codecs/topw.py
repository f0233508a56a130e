"""Top-W gradient sparsification (TOP-W of sparsevfl.md section 5, after Lin et al. / Wangni et al.).

:func:`topw_encode` keeps the ``W`` entries of largest magnitude of a whole ``(N, D)`` batch and
returns their flat row-major positions, bit-packed at ``q2 = ceil(log2(N D))`` bits each (the index
width sparsevfl.md section 4.3 uses for run positions: the same accounting as the run-length code
TOP-W is compared with, rather than int32), and their values (the caller codes them, e.g. as
float16 for TOP-W-16). Positions are sorted, so the bytes do not depend on how the selection was
computed. If ``W >= N D`` every value is sent in row-major order and no position.
:func:`topw_decode` is the inverse (zeros elsewhere); it checks every position is inside the batch.
"""

from __future__ import annotations

import numpy as np

from verticalfs.codecs.rle import index_bits, pack_bits, unpack_bits
from verticalfs.exceptions import ConfigError, TransportError


def topw_encode(g: np.ndarray, w: int) -> tuple[bytes, np.ndarray]:
    """``(packed positions, values)`` of the ``w`` largest-magnitude entries of ``g``."""
    if int(w) < 1:
        raise ConfigError(f"W must be >= 1, got {w}")
    flat = np.ascontiguousarray(g, dtype=np.float32).reshape(-1)
    size = flat.size
    k = min(int(w), size)
    if k == size:
        return b"", flat
    idx = np.argpartition(np.abs(flat), size - k)[size - k:]
    idx.sort()  # canonical order: the same bytes whatever argpartition returns
    return pack_bits(idx, index_bits(size)), flat[idx]


def topw_decode(positions: bytes | memoryview, values: np.ndarray, n: int, d: int) -> np.ndarray:
    """The dense ``(n, d)`` float32 gradient from :func:`topw_encode`'s output."""
    size = int(n) * int(d)
    vals = np.asarray(values, dtype=np.float32).reshape(-1)
    if len(positions) == 0:
        if vals.size != size:
            raise TransportError(f"top-W batch of {n}x{d} without positions needs {size} values, got {vals.size}")
        return vals.reshape(n, d).copy()
    if vals.size >= size:
        raise TransportError(f"top-W batch of {n}x{d} with positions carries {vals.size} values (>= {size})")
    idx = unpack_bits(positions, vals.size, index_bits(size))
    if idx.size and idx.max() >= size:
        raise TransportError(f"top-W position {int(idx.max())} outside a batch of {size} entries")
    out = np.zeros(size, dtype=np.float32)
    out[idx] = vals
    return out.reshape(n, d)
