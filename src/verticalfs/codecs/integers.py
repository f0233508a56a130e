"""Fixed-width unsigned integers (ciphertexts, moduli, residues) to bytes and back.

Paillier ciphertexts are integers below ``n**2``; on the wire each takes exactly
``ceil(bits(n**2) / 8)`` bytes, big-endian (:meth:`verticalfs.crypto.EncryptedArray.to_bytes`
uses this), so the ledger's payload of a message of ``k`` ciphertexts is ``k`` times that width.
"""

from __future__ import annotations

from collections.abc import Iterable

from verticalfs.exceptions import TransportError


def pack_uints(values: Iterable[int], width: int) -> bytes:
    """Each value big-endian in exactly ``width`` bytes (``OverflowError`` if one does not fit)."""
    w = int(width)
    return b"".join(int(v).to_bytes(w, "big") for v in values)


def unpack_uints(data: bytes | memoryview, width: int, count: int | None = None) -> list[int]:
    """Inverse of :func:`pack_uints`; with ``count`` the length is checked against it."""
    data = bytes(data)
    w = int(width)
    if w < 1 or len(data) % w:
        raise TransportError(f"{len(data)} bytes is not a whole number of {w}-byte integers")
    if count is not None and len(data) != count * w:
        raise TransportError(f"expected {count} integers of {w} bytes ({count * w} bytes), got {len(data)}")
    return [int.from_bytes(data[i : i + w], "big") for i in range(0, len(data), w)]
