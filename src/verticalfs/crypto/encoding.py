"""Fixed-point encoding of numbers as Paillier plaintexts.

Scheme
------
An array is encoded with one binary exponent for all its elements: a value ``x`` becomes the
integer *mantissa* ``m = round(x * 2**precision)`` (round half to even, NumPy's ``rint``), and the
array carries ``exponent = -precision`` so that ``x ~= m * 2**exponent``. Integer arrays are
encoded exactly with ``precision = 0`` by default. The absolute rounding error is at most
``2**-(precision + 1)``; the default of 32 fractional bits for floats gives ``1.2e-10``.

A mantissa is a plaintext modulo ``n``: a negative ``m`` is stored as ``n - |m|`` (``m % n``).
Valid mantissas lie in ``[-max_int, max_int]`` with ``max_int = n // 3``: residues in
``[0, max_int]`` decode as positive, those in ``[n - max_int, n)`` as negative, and anything in
between is an *overflow* (a homomorphic sum or product left the representable range and wrapped
around modulo ``n``), reported as :class:`~verticalfs.exceptions.CryptoError` rather than returned
as a plausible wrong number. This is python-paillier's convention (``max_int = n // 3``).

Exponents under homomorphic operations: adding two arrays aligns them to the smaller exponent
(the other is multiplied by ``2**diff`` under encryption); multiplying by a plaintext encoded with
``p`` fractional bits adds ``-p`` to the exponent; sums keep it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from verticalfs.exceptions import CryptoError

#: fractional bits of a float array encrypted without an explicit precision
DEFAULT_PRECISION = 32
#: fractional bits of a float plaintext multiplied into a ciphertext without an explicit precision
DEFAULT_PLAIN_PRECISION = 24
_INT64_SAFE = 2**62


def default_precision(values: np.ndarray, plain: bool = False) -> int:
    """0 for integer/bool arrays, else :data:`DEFAULT_PRECISION` (or the plaintext default)."""
    if values.dtype.kind in "iub" or values.dtype == object:
        return 0
    return DEFAULT_PLAIN_PRECISION if plain else DEFAULT_PRECISION


def as_numeric(values: Any, what: str = "values") -> np.ndarray:
    """``values`` as a numeric numpy array (object arrays must hold Python ints)."""
    a = np.asarray(values)
    if a.dtype == object:
        if not all(isinstance(v, (int, np.integer)) for v in a.ravel().tolist()):
            raise CryptoError(f"{what}: an object array must hold Python ints; got "
                              f"{a.ravel()[:3].tolist()}...")
        return a
    if a.dtype.kind not in "biuf":
        raise CryptoError(f"{what}: cannot encode dtype {a.dtype}; pass a numeric array")
    return a


def mantissas(values: Any, precision: int, max_int: int | None = None, what: str = "values") -> np.ndarray:
    """Signed integer mantissas ``round(values * 2**precision)``.

    Returns an ``int64`` array when every mantissa fits comfortably (``|m| < 2**62``), else an
    object array of Python ints (exact at any size). Raises :class:`CryptoError` for NaN/inf and,
    when ``max_int`` is given, for a mantissa outside ``[-max_int, max_int]``.
    """
    if precision < 0:
        raise CryptoError(f"{what}: precision must be >= 0 fractional bits, got {precision}")
    out: np.ndarray
    a = as_numeric(values, what)
    if a.dtype.kind == "f":
        a = a.astype(np.float64, copy=False)
        if not np.all(np.isfinite(a)):
            raise CryptoError(f"{what}: cannot encode NaN or infinite values")
        scaled = np.rint(np.ldexp(a, precision))
        big = float(np.max(np.abs(scaled))) if scaled.size else 0.0
        if big < _INT64_SAFE:
            out = scaled.astype(np.int64)
        else:
            out = np.array([int(v) for v in scaled.ravel().tolist()], dtype=object).reshape(a.shape)
    elif a.dtype == object:
        out = a * (1 << precision) if precision else a
    else:
        a = a.astype(np.int64)
        big = int(np.max(np.abs(a))) if a.size else 0
        if big << precision < _INT64_SAFE:
            out = a << precision
        else:
            out = a.astype(object) * (1 << precision)
    if max_int is not None and out.size:
        if out.dtype != object:
            top = int(np.max(np.abs(out)))
        else:
            top = max(abs(int(v)) for v in out.ravel().tolist())
        if top > max_int:
            raise CryptoError(
                f"{what}: the largest mantissa has {top.bit_length()} bits but the key encodes at most "
                f"{max_int.bit_length()} bits (n // 3); lower the precision ({precision} fractional "
                f"bits), scale the values down or use a longer key")
    return out


def to_residues(m: np.ndarray, n: int) -> list[int]:
    """Mantissas as plaintexts modulo ``n`` (negative ``m`` -> ``n - |m|``), a flat list."""
    return [int(v) % n for v in np.asarray(m).ravel().tolist()]


def from_residues(ms: Iterable[Any], n: int, max_int: int) -> list[int]:
    """Decrypted plaintexts (in ``[0, n)``) back to signed mantissas; overflow -> CryptoError."""
    out: list[int] = []
    lo = n - max_int
    for v in ms:
        v = int(v)
        if v <= max_int:
            out.append(v)
        elif v >= lo:
            out.append(v - n)
        else:
            raise CryptoError(
                "overflow: a decrypted plaintext lies outside [-n/3, n/3]; a homomorphic sum or "
                "product exceeded the key's plaintext range and wrapped around modulo n. Lower the "
                "precision of the operands or use a longer key")
    return out


def to_float(m: np.ndarray, exponent: int) -> np.ndarray:
    """``m * 2**exponent`` as float64 (correctly rounded, exact big-int division)."""
    m = np.asarray(m)
    if m.dtype != object:
        return np.ldexp(m.astype(np.float64), exponent)
    flat = m.ravel().tolist()
    if exponent <= 0:
        scale = 1 << -exponent
        vals = [v / scale for v in flat]
    else:
        vals = [float(v << exponent) for v in flat]
    return np.asarray(vals, dtype=np.float64).reshape(m.shape)
