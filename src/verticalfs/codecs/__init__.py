"""Payload codecs for floating-point tensors carried in messages.

A codec turns one float array into bytes and back; :mod:`verticalfs.transport.serde` calls it for
every message field declared with :func:`verticalfs.transport.messages.tensor_field`. Each codec has a
one-byte id written on the wire, so a receiver decodes without knowing the sender's setting.

Built in: ``float32`` (exact for float32 tensors), ``float16`` (IEEE half precision) and ``int8``
(symmetric per-tensor scaling: ``q = round(x / s)``, ``s = max|x| / 127``; the scale travels as a
float32 in the payload), ``rle32`` / ``rle16`` (run-length coding of sparse embeddings, sparsevfl.md
§4.3, with a dense fallback). Two gradient forms build on them: masked gradients
(:func:`masked_values` / :func:`unmask`: only the values at the non-zero embedding entries, both
sides holding the mask, sparsevfl.md §4.2) and top-W sparsification (:mod:`verticalfs.codecs.topw`).
:mod:`verticalfs.codecs.integers` writes fixed-width integers (Paillier ciphertexts and moduli).
This package and :mod:`verticalfs.transport.serde` are the only places where bytes are made.
Later methods add codecs with :func:`register_codec`.
"""

from __future__ import annotations

from verticalfs.codecs.base import (
    Codec,
    Float16Codec,
    Float32Codec,
    Int8Codec,
    available_codecs,
    codec_by_id,
    get_codec,
    register_codec,
)
from verticalfs.codecs.rle import (
    RLE16Codec,
    RLE32Codec,
    decode_masked,
    encode_masked,
    masked_values,
    nonzero_mask,
    rle_decode,
    rle_encode,
    rle_size_bits,
    rle_size_bytes,
    unmask,
)
from verticalfs.codecs.topw import topw_decode, topw_encode

__all__ = [
    "Codec",
    "Float16Codec",
    "Float32Codec",
    "Int8Codec",
    "RLE16Codec",
    "RLE32Codec",
    "available_codecs",
    "codec_by_id",
    "decode_masked",
    "encode_masked",
    "get_codec",
    "masked_values",
    "nonzero_mask",
    "register_codec",
    "rle_decode",
    "rle_encode",
    "rle_size_bits",
    "rle_size_bytes",
    "topw_decode",
    "topw_encode",
    "unmask",
]
