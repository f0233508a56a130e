"""Vectorised Paillier arithmetic on numpy-shaped arrays of ciphertexts.

An :class:`EncryptedArray` is a shape, one fixed-point exponent (:mod:`verticalfs.crypto.encoding`)
and an object array of ciphertext integers modulo ``n**2``. The homomorphic operations are

- ``a + b`` (ciphertexts: product mod ``n**2``), ``a + x`` (plaintext: times ``1 + m n``),
  ``-a`` (modular inverse), ``a - b``;
- ``a * x`` (plaintext, elementwise or scalar: ``c**m``), :meth:`EncryptedArray.dot` (vector
  against a plaintext matrix), :meth:`EncryptedArray.sum` and :meth:`EncryptedArray.group_sum`.

Big-integer work cannot use numpy's machine arithmetic, so element-wise operations run as numpy
ufuncs over object arrays (``np.frompyfunc``: one C-level loop, one gmpy2 call per element) and
sums per group as one sorted ``reduceat``. :meth:`EncryptedArray.dot` and
:meth:`EncryptedArray.group_sum` avoid one exponentiation per element: ``dot`` is a bucketed
multi-exponentiation (Pippenger's method): the plaintext mantissas are cut into windows of ``w``
bits, the ciphertexts are multiplied per (column, window, digit) bucket with one ``reduceat``, and
each window's buckets are combined by running products, so a column of ``n`` rows costs about
``ceil(bits / w) * (n + 2**(w+1))`` modular multiplications instead of ``~1.5 n bits``.

Ciphertexts serialise at a fixed width of ``ceil(bits(n**2) / 8)`` bytes each, big-endian
(:meth:`EncryptedArray.to_bytes`); the shape and exponent travel as separate (small) fields.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from verticalfs.codecs.integers import pack_uints, unpack_uints
from verticalfs.crypto._bigint import mpz, powmod
from verticalfs.crypto.encoding import (
    as_numeric,
    default_precision,
    mantissas,
    to_float,
    to_residues,
)
from verticalfs.crypto.keys import PrivateKey, PublicKey
from verticalfs.exceptions import CryptoError


def _ones(shape: Any) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    out.fill(mpz(1))
    return out


def _obj(values: Sequence[Any], shape: Any) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    shaped: np.ndarray = out.reshape(shape)
    return shaped


class _Ops:
    """The vectorised modular operations of one key (cached on the key)."""

    def __init__(self, pub: PublicKey) -> None:
        n2, n = pub._n2_big, pub._n_big
        self.mulmod = np.frompyfunc(lambda a, b: a * b % n2, 2, 1)
        self.powmod = np.frompyfunc(lambda c, k: powmod(c, int(k), n2), 2, 1)
        # plaintext m (a residue mod n) -> g^m = 1 + m n mod n^2
        self.gpow = np.frompyfunc(lambda m: (mpz(m) * n + 1) % n2, 1, 1)


def _ops(pub: PublicKey) -> _Ops:
    ops = pub._mulmod
    if not isinstance(ops, _Ops):
        ops = pub._mulmod = _Ops(pub)
    return ops


def group_products(pub: PublicKey, cts: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Product mod ``n**2`` of ``cts`` per group ``codes`` (1-D, ints in ``[0, n_groups)``).

    One stable sort and one ``reduceat``; an empty group is the trivial encryption of zero (1).
    """
    out = _ones(n_groups)
    if cts.size == 0:
        return out
    order = np.argsort(codes, kind="stable")
    sc = codes[order]
    starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
    out[sc[starts]] = _ops(pub).mulmod.reduceat(cts[order], starts)
    return out


def _window(n: int, bits: int) -> int:
    """Window width minimising ``ceil(bits / w) * (n + 2**(w + 1))``."""
    best, best_cost = 1, math.inf
    for w in range(1, min(bits, 16) + 1):
        cost = -(-bits // w) * (n + 2 ** (w + 1)) + bits
        if cost < best_cost:
            best, best_cost = w, cost
    return best


def multi_exp(pub: PublicKey, cts: np.ndarray, K: np.ndarray) -> np.ndarray:
    """``prod_i cts[i] ** K[i, j]`` mod ``n**2`` for every column ``j`` (``K``: int64 >= 0, (n, d)).

    Pippenger's bucket method, vectorised over columns and windows (see the module docstring).
    """
    n, d = K.shape
    ops = _ops(pub)
    top = int(K.max()) if K.size else 0
    if top == 0:
        return _ones(d)
    bits = top.bit_length()
    w = _window(n, bits)
    T = -(-bits // w)
    B = 1 << w
    shifts = (w * np.arange(T, dtype=np.int64))[:, None, None]
    digits = (K[None, :, :] >> shifts) & (B - 1)  # (T, n, d)
    tj = np.arange(T, dtype=np.int64)[:, None, None] * d + np.arange(d, dtype=np.int64)[None, None, :]
    group = tj * B
    codes = (group + digits).transpose(0, 2, 1).reshape(-1)  # order (t, j, i)
    rows = np.tile(np.arange(n), T * d)
    keep = digits.transpose(0, 2, 1).reshape(-1) != 0
    buckets = group_products(pub, cts[rows[keep]], codes[keep], T * d * B).reshape(T * d, B)
    # window value prod_v bucket_v^v by running products: run = prod_{u >= v} bucket_u
    run, acc = _ones(T * d), _ones(T * d)
    for v in range(B - 1, 0, -1):
        run = ops.mulmod(run, buckets[:, v])
        acc = ops.mulmod(acc, run)
    W = acc.reshape(T, d)
    res: np.ndarray = W[T - 1]
    for t in range(T - 2, -1, -1):  # Horner over windows: res = res^(2^w) * W_t
        for _ in range(w):
            res = ops.mulmod(res, res)
        res = ops.mulmod(res, W[t])
    return res


def unpack_slots(values: Any, sizes: Any, slot_bits: int) -> list[int]:
    """Inverse of :meth:`EncryptedArray.pack` on the decrypted mantissas: the runs' values, flat."""
    sizes = [int(s) for s in np.asarray(sizes).ravel()]
    values = [int(v) for v in values]
    if len(values) != len(sizes):
        raise CryptoError(f"unpack_slots: {len(values)} packed values for {len(sizes)} runs")
    mask = (1 << int(slot_bits)) - 1
    out: list[int] = []
    for v, k in zip(values, sizes, strict=True):
        if v < 0 or v >> (int(slot_bits) * k):
            raise CryptoError("unpack_slots: a packed value does not fit its slots (negative or overflowing)")
        out.extend((v >> (int(slot_bits) * (k - 1 - i))) & mask for i in range(k))
    return out


class EncryptedArray:
    """An array of Paillier ciphertexts with one fixed-point exponent.

    Attributes
    ----------
    public_key : PublicKey
    exponent : int
        Plaintext value = mantissa * 2**exponent (``-precision``).
    shape : tuple of int
    """

    __slots__ = ("public_key", "exponent", "_c")
    __array_ufunc__ = None  # numpy defers ``ndarray + EncryptedArray`` etc. to our reflected methods

    def __init__(self, public_key: PublicKey, ciphertexts: np.ndarray, exponent: int = 0) -> None:
        self.public_key = public_key
        self._c = ciphertexts
        self.exponent = int(exponent)

    # ---------------------------------------------------------------- basics
    @property
    def shape(self) -> tuple[int, ...]:
        return self._c.shape

    @property
    def ndim(self) -> int:
        return self._c.ndim

    @property
    def size(self) -> int:
        return self._c.size

    def __len__(self) -> int:
        return len(self._c)

    def __repr__(self) -> str:
        return (f"EncryptedArray(shape={self.shape}, exponent={self.exponent}, "
                f"key={self.public_key.bits} bits)")

    @property
    def nbytes(self) -> int:
        """Serialised size: ``size * ciphertext_bytes``."""
        return self.size * self.public_key.ciphertext_bytes

    def ciphertexts(self) -> list[int]:
        """The ciphertext integers, flat in C order."""
        return [int(c) for c in self._c.ravel().tolist()]

    def _new(self, c: np.ndarray, exponent: int | None = None) -> EncryptedArray:
        return EncryptedArray(self.public_key, c, self.exponent if exponent is None else exponent)

    def __getitem__(self, idx: Any) -> EncryptedArray:
        c = self._c[idx]
        if not isinstance(c, np.ndarray):
            c = _obj([c], ())
        return self._new(c)

    def with_exponent(self, exponent: int) -> EncryptedArray:
        """The same ciphertexts read at another fixed-point ``exponent`` (no cryptographic work):
        e.g. after multiplying by integer mantissas that themselves carry ``k`` fractional bits,
        the true exponent is ``self.exponent - k``."""
        return self._new(self._c, int(exponent))

    def reshape(self, *shape: Any) -> EncryptedArray:
        return self._new(self._c.reshape(*shape))

    def ravel(self) -> EncryptedArray:
        return self._new(self._c.ravel())

    # ------------------------------------------------------------ encryption
    @classmethod
    def encrypt(cls, key: PublicKey | PrivateKey, values: Any, precision: int | None = None) -> EncryptedArray:
        """Encrypt ``values`` (any shape) under ``key``.

        Parameters
        ----------
        key : PublicKey or PrivateKey
            A private key encrypts under its public key (the ``python`` back end then uses the CRT).
        values : array-like of numbers
        precision : int, optional
            Fractional bits of the fixed-point encoding; default 0 for integers, 32 for floats.
        """
        priv = key if isinstance(key, PrivateKey) else None
        pub = priv.public_key if priv is not None else key
        if not isinstance(pub, PublicKey):
            raise CryptoError(f"encrypt: expected a PublicKey or PrivateKey, got {type(key).__name__}")
        a = as_numeric(values, "encrypt")
        prec = default_precision(a) if precision is None else int(precision)
        m = mantissas(a, prec, pub.max_int, "encrypt")
        res = to_residues(m, pub.n)
        ops = _ops(pub)
        nude = ops.gpow(_obj(res, (len(res),))) if res else np.empty(0, dtype=object)
        rn = _obj(pub.obfuscators(len(res), priv), (len(res),))
        c = ops.mulmod(nude, rn) if res else nude
        return cls(pub, np.asarray(c, dtype=object).reshape(a.shape), -prec)

    def decrypt_mantissas(self, private_key: PrivateKey) -> np.ndarray:
        """The exact signed integer mantissas (object array); the value is ``m * 2**exponent``."""
        self._check_key(private_key)
        m = private_key.decrypt_mantissas(self._c.ravel().tolist())
        return _obj(m, self.shape)

    def decrypt(self, private_key: PrivateKey) -> np.ndarray:
        """Decrypt to float64 (overflow -> CryptoError)."""
        return to_float(self.decrypt_mantissas(private_key), self.exponent)

    def _check_key(self, private_key: PrivateKey) -> None:
        if not isinstance(private_key, PrivateKey) or private_key.public_key.n != self.public_key.n:
            raise CryptoError("decrypt: the private key does not belong to the key these values were "
                              "encrypted under")

    def rerandomize(self) -> EncryptedArray:
        """Same plaintexts, fresh randomness (times new obfuscators, from the key's pool first).

        Call it on every homomorphic result before it goes back to the key holder: the key holder
        made the inputs' obfuscators, so without fresh ones it reads the other side's multipliers
        (bin memberships, feature values, weights) out of the result's randomness."""
        rn = _obj(self.public_key.obfuscators(self.size), self.shape)
        return self._new(_ops(self.public_key).mulmod(self._c, rn) if self.size else self._c.copy())

    # ------------------------------------------------------------ arithmetic
    def _plain(self, other: Any, precision: int | None, what: str) -> tuple[np.ndarray, int]:
        a = as_numeric(other, what)
        prec = default_precision(a, plain=True) if precision is None else int(precision)
        return mantissas(a, prec, self.public_key.max_int, what), prec

    def _same_key(self, other: EncryptedArray) -> None:
        if other.public_key.n != self.public_key.n:
            raise CryptoError("cannot combine ciphertexts encrypted under different keys")

    def rescale(self, exponent: int) -> EncryptedArray:
        """The same values at a lower (finer) ``exponent``: the mantissas times
        ``2**(self.exponent - exponent)``."""
        if exponent > self.exponent:
            raise CryptoError(f"rescale: cannot raise the exponent from {self.exponent} to {exponent} "
                              f"(that would round under encryption)")
        if exponent == self.exponent:
            return self
        k = 1 << (self.exponent - exponent)
        c = _ops(self.public_key).powmod(self._c, k) if self.size else self._c
        return self._new(np.asarray(c, dtype=object).reshape(self.shape), exponent)

    def __add__(self, other: Any) -> EncryptedArray:
        ops = _ops(self.public_key)
        if isinstance(other, EncryptedArray):
            self._same_key(other)
            e = min(self.exponent, other.exponent)
            a, b = self.rescale(e), other.rescale(e)
            return EncryptedArray(self.public_key, np.asarray(ops.mulmod(a._c, b._c), dtype=object), e)
        if self.exponent > 0:
            raise CryptoError("add: plaintexts can only be added to arrays with exponent <= 0")
        # the plaintext is encoded at this array's precision (rounded to it)
        m = mantissas(as_numeric(other, "add"), -self.exponent, self.public_key.max_int, "add")
        m = np.broadcast_to(np.asarray(m), self.shape)
        res = _obj(to_residues(m, self.public_key.n), self.shape)
        c = ops.mulmod(self._c, ops.gpow(res))
        return self._new(np.asarray(c, dtype=object))

    __radd__ = __add__

    def add_mantissas(self, m: Any) -> EncryptedArray:
        """Add plaintext integer mantissas ``m`` (same shape, at this array's exponent) exactly."""
        m = np.broadcast_to(np.asarray(m), self.shape)
        if m.dtype.kind not in "iuO":
            raise CryptoError(f"add_mantissas: expected integers, got dtype {m.dtype}")
        flat = [int(v) for v in m.ravel().tolist()]
        if flat and max(abs(v) for v in flat) > self.public_key.max_int:
            raise CryptoError("add_mantissas: a mantissa exceeds the key's plaintext range (n // 3)")
        ops = _ops(self.public_key)
        res = _obj([v % self.public_key.n for v in flat], self.shape)
        return self._new(np.asarray(ops.mulmod(self._c, ops.gpow(res)), dtype=object).reshape(self.shape))

    def __neg__(self) -> EncryptedArray:
        return self * -1

    def __sub__(self, other: Any) -> EncryptedArray:
        if isinstance(other, EncryptedArray):
            return self + (-other)
        return self + (-np.asarray(other))

    def __rsub__(self, other: Any) -> EncryptedArray:
        return (-self) + other  # type: ignore[no-any-return]

    def __mul__(self, other: Any) -> EncryptedArray:
        return self.mul(other)

    __rmul__ = __mul__

    def mul(self, other: Any, precision: int | None = None) -> EncryptedArray:
        """Elementwise (broadcast) product with a plaintext array or scalar.

        ``precision`` = fractional bits of the plaintext's encoding (default 0 for integers, 24
        for floats); the result's exponent is ``self.exponent - precision``.
        """
        if isinstance(other, EncryptedArray):
            raise CryptoError("Paillier cannot multiply two ciphertexts; multiply by a plaintext")
        m, prec = self._plain(other, precision, "mul")
        c, mm = np.broadcast_arrays(self._c, np.asarray(m, dtype=object))
        out = _ops(self.public_key).powmod(c, mm) if c.size else np.empty(c.shape, dtype=object)
        return self._new(np.asarray(out, dtype=object).reshape(c.shape), self.exponent - prec)

    def sum(self, axis: int | None = None) -> EncryptedArray:
        """Sum over ``axis`` (all elements if None)."""
        ops = _ops(self.public_key)
        c = self._c.ravel() if axis is None else self._c
        ax = 0 if axis is None else axis
        if c.shape[ax] == 0:
            out = _ones(tuple(s for i, s in enumerate(c.shape) if i != ax % c.ndim))
        else:
            out = ops.mulmod.reduce(c, axis=ax)
        if not isinstance(out, np.ndarray):
            out = _obj([out], ())
        return self._new(np.asarray(out, dtype=object))

    def dot(self, X: Any, precision: int | None = None) -> EncryptedArray:
        """``self @ X`` for an encrypted vector ``(n,)`` and a plaintext ``(n,)`` or ``(n, d)``.

        The hetero-LR gradient ``[[d]]^T X``. ``precision`` = fractional bits of ``X`` (default 0
        for integer ``X``, 24 for floats); the result's exponent is ``self.exponent - precision``.
        """
        if self.ndim != 1:
            raise CryptoError(f"dot: the encrypted operand must be a vector, got shape {self.shape}")
        X = as_numeric(X, "dot")
        vec = X.ndim == 1
        X2 = X.reshape(-1, 1) if vec else X
        if X2.ndim != 2 or X2.shape[0] != self.shape[0]:
            raise CryptoError(f"dot: shapes {self.shape} and {X.shape} do not align (need (n,) and (n, d))")
        K, prec = self._plain(X2, precision, "dot")
        pub = self.public_key
        if K.dtype == object:  # mantissas past 2**62: one exponentiation per element
            out = self.reshape(-1, 1).mul(np.asarray(K, dtype=object), precision=0).sum(axis=0)._c
        else:
            pos = multi_exp(pub, self._c, np.maximum(K, 0))
            if (K < 0).any():
                neg = multi_exp(pub, self._c, np.maximum(-K, 0))
                ops = _ops(pub)
                out = ops.mulmod(pos, ops.powmod(neg, -1))
            else:
                out = pos
        out = np.asarray(out, dtype=object)
        return self._new(out.reshape(()) if vec else out, self.exponent - prec)

    def group_sum(self, codes: Any, n_groups: int) -> EncryptedArray:
        """Sums of the rows of ``self`` per group.

        Parameters
        ----------
        codes : int array ``(n,)`` or ``(n, k)``
            Group of each row (in ``[0, n_groups)``); with ``k`` columns, ``k`` independent groupings
            (e.g. the bins of ``k`` features).
        n_groups : int

        Returns
        -------
        EncryptedArray of shape ``(n_groups, *self.shape[1:])`` for 1-D codes, ``(k, n_groups,
        *self.shape[1:])`` for 2-D codes. An empty group holds the trivial encryption of 0.
        """
        codes = np.asarray(codes)
        if codes.dtype.kind not in "iu":
            raise CryptoError(f"group_sum: codes must be integers, got dtype {codes.dtype}")
        if self.ndim == 0 or codes.shape[0] != self.shape[0] or codes.ndim not in (1, 2):
            raise CryptoError(f"group_sum: codes of shape {codes.shape} do not match rows of {self.shape}")
        n_groups = int(n_groups)
        if codes.size and (codes.min() < 0 or codes.max() >= n_groups):
            raise CryptoError(f"group_sum: codes must lie in [0, {n_groups}), got "
                              f"[{codes.min()}, {codes.max()}]")
        n = self.shape[0]
        rest = self.shape[1:]
        m = int(np.prod(rest)) if rest else 1
        C = codes.reshape(n, -1).astype(np.int64)
        k = C.shape[1]
        # element (i, col, j): group (col * n_groups + code) * m + j; ciphertext i * m + j
        gid = ((np.arange(k, dtype=np.int64)[None, :, None] * n_groups + C[:, :, None]) * m
               + np.arange(m, dtype=np.int64)[None, None, :])  # (n, k, m)
        cell = np.arange(n, dtype=np.int64)[:, None] * m + np.arange(m)  # (n, m) ciphertext index
        src = np.broadcast_to(cell[:, None, :], gid.shape)
        flat = self._c.reshape(n * m)
        out = group_products(self.public_key, flat[src.reshape(-1)], gid.reshape(-1), k * n_groups * m)
        shape = ((k,) if codes.ndim == 2 else ()) + (n_groups,) + rest
        return self._new(out.reshape(shape))

    def pack(self, sizes: Any, slot_bits: int) -> EncryptedArray:
        """Pack consecutive runs of a vector into one ciphertext each ("cipher compression").

        ``sizes`` splits ``self`` (1-D) into runs; a run ``[[m_1]], ..., [[m_K]]`` becomes
        ``[[sum_k m_k * 2**(slot_bits * (K - k))]]`` (Horner: ``acc <- acc**(2**slot_bits) * c_k``), so
        the key holder decrypts one ciphertext per run and reads the values back with
        :func:`unpack_slots`. Valid for mantissas in ``[0, 2**slot_bits)`` whose packed value stays
        below ``n // 3`` (the caller sizes the runs; FATE's ``CipherCompressor``).
        """
        if self.ndim != 1:
            raise CryptoError(f"pack: expects a vector, got shape {self.shape}")
        sizes = np.asarray(sizes, dtype=np.int64)
        if (sizes < 1).any() or int(sizes.sum()) != self.size:
            raise CryptoError(f"pack: run sizes must be >= 1 and add up to {self.size}, got {sizes.tolist()}")
        if int(sizes.max(initial=0)) * int(slot_bits) >= self.public_key.max_int.bit_length():
            raise CryptoError(f"pack: {int(sizes.max())} slots of {slot_bits} bits exceed the key's "
                              f"plaintext range")
        ops = _ops(self.public_key)
        starts = np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64)
        acc = self._c[starts].copy()
        shift = 1 << int(slot_bits)
        for k in range(1, int(sizes.max(initial=1))):
            sel = np.flatnonzero(sizes > k)
            acc[sel] = ops.mulmod(ops.powmod(acc[sel], shift), self._c[starts[sel] + k])
        return self._new(acc)

    # --------------------------------------------------------- serialisation
    def to_bytes(self) -> bytes:
        """Ciphertexts in C order, each ``ciphertext_bytes`` wide, big-endian."""
        return pack_uints(self._c.ravel().tolist(), self.public_key.ciphertext_bytes)

    @classmethod
    def from_bytes(cls, public_key: PublicKey, data: bytes, shape: Sequence[int] | None = None,
                   exponent: int = 0) -> EncryptedArray:
        """Inverse of :meth:`to_bytes` (checks the length and that every value is below ``n**2``)."""
        w = public_key.ciphertext_bytes
        data = bytes(data)
        if len(data) % w:
            raise CryptoError(f"from_bytes: {len(data)} bytes is not a multiple of the {w}-byte ciphertext "
                              f"width of this key; was it encrypted under another key?")
        k = len(data) // w
        shape = (k,) if shape is None else tuple(int(s) for s in shape)
        if int(np.prod(shape)) != k:
            raise CryptoError(f"from_bytes: {k} ciphertexts cannot have shape {shape}")
        n2 = public_key.nsquare
        vals = [mpz(v) for v in unpack_uints(data, w)]
        if vals and (max(vals) >= n2 or min(vals) <= 0):
            raise CryptoError("from_bytes: a ciphertext is not in [1, n**2); wrong key or corrupted data")
        return cls(public_key, _obj(vals, shape), exponent)
