"""Payload codecs for floating-point tensors carried in messages.

A codec turns one float array into bytes and back; :mod:`verticalfs.transport.serde` calls it for
every message field declared with :func:`verticalfs.transport.messages.tensor_field`. Each codec has a
one-byte id written on the wire, so a receiver decodes without knowing the sender's setting.

Built in: ``float32`` (exact for float32 tensors), ``float16`` (IEEE half precision) and ``int8``
(symmetric per-tensor scaling: ``q = round(x / s)``, ``s = max|x| / 127``; the scale travels as a
float32 in the payload). Later methods add theirs (run-length coding, top-k) with
:func:`register_codec`.
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

__all__ = [
    "Codec",
    "Float16Codec",
    "Float32Codec",
    "Int8Codec",
    "available_codecs",
    "codec_by_id",
    "get_codec",
    "register_codec",
]
