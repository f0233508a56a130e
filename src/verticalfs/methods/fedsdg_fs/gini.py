"""Gini impurity of a party's features (fedsdg-fs.md section IV-C, Algorithm 1), in the clear and
under Paillier.

A continuous feature is binned first (equal-frequency bins of
:func:`verticalfs.selection.discretize.discretize`, ``n_bins`` = 10; a column with fewer distinct
values gets fewer bins). With ``n_{ik}`` training rows of class ``k`` in bin ``i`` and
``n_i = sum_k n_{ik}``, the feature's Gini score is

    G(f) = sum_i (n_i / N) (1 - sum_k (n_{ik} / n_i)^2) = 1 - (1 / N) sum_i (sum_k n_{ik}^2) / n_i.

The paper squares the class fractions ``p_{ik} = n_{ik} / n_i`` under encryption; we square the
integer counts ``n_{ik}`` and divide by ``n_i`` afterwards (a plaintext scalar the party knows):
the same quantity with exact integers under encryption instead of fixed-point fractions. The
secure protocol (Algorithm 1 with the squaring protocol of Erkin et al. [33]) is split into the
pure functions below; :mod:`.role` and :mod:`.method` send their inputs and outputs as messages:

1. label holder: ``[[A]]``, the one-hot label matrix ``(N, c)``, one ciphertext per entry;
2. party: ``[[n_{jik}]]`` by summing ciphertexts per (feature, bin) (:func:`encrypted_counts`),
   masks ``r_{jik}`` (uniform ``mask_bits``-bit integers), sends ``[[u]] = [[n + r]]``;
3. label holder: decrypts ``u``, returns ``[[sum_k u_{jik}^2]]`` per (feature, bin)
   (:func:`squares_of_masked`; one ciphertext per bin rather than per class: the label holder
   already saw every ``u``, so the sum tells it nothing more and halves its encryptions for two
   classes);
4. party: ``[[sum_k n^2]] = [[sum_k u^2]] - sum_k 2 r [[u]] + sum_k r^2`` and
   ``[[G_j]] = 1 - sum_i [[sum_k n_{jik}^2]] / (N n_{ji})`` (:func:`encrypted_gini`), sent back;
5. label holder: decrypts ``G_j`` and returns it to the party (Algorithm 1 lines 12-13).

The label holder learns the masked counts (``mask_bits`` = 64 bits of mask on counts below ``N``:
statistical distance ``N / 2**64``, i.e. ``mask_bits - bits(N)`` hiding bits, at least 40 by
:func:`hiding_bits`'s check on both sides) and the Gini scores, as in the paper; the party learns
only ciphertexts and its scores. No label and no bin membership crosses in the clear.
"""

from __future__ import annotations

import os

import numpy as np

from verticalfs.crypto import EncryptedArray, PrivateKey
from verticalfs.selection.discretize import discretize

#: fractional bits of the plaintext factors 1 / (N n_i) in step 4
FACTOR_PRECISION = 60


def bin_codes(X: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-frequency bin codes ``(n, d)`` (int64, dense ``0..b_j - 1`` per column)."""
    if X.shape[1] == 0:
        return np.zeros(X.shape, dtype=np.int64)
    return np.asarray(discretize(X, "equal-frequency", int(n_bins)), dtype=np.int64)


def bin_sizes(codes: np.ndarray, n_bins: int) -> np.ndarray:
    """``n_{ji}``: rows per (feature, bin), ``(d, n_bins)``."""
    n, d = codes.shape
    flat = (np.arange(d, dtype=np.int64)[None, :] * n_bins + codes).ravel()
    return np.bincount(flat, minlength=d * n_bins).reshape(d, n_bins)


def class_counts(codes: np.ndarray, y: np.ndarray, n_classes: int, n_bins: int) -> np.ndarray:
    """``n_{jik}``: rows of class ``k`` per (feature, bin), ``(d, n_bins, n_classes)``, in the clear."""
    n, d = codes.shape
    flat = ((np.arange(d, dtype=np.int64)[None, :] * n_bins + codes) * n_classes + np.asarray(y, np.int64)[:, None])
    return np.bincount(flat.ravel(), minlength=d * n_bins * n_classes).reshape(d, n_bins, n_classes)


def gini_from_counts(counts: np.ndarray) -> np.ndarray:
    """``G(f_j) = 1 - (1 / N) sum_i (sum_k n_{jik}^2) / n_{ji}`` from ``(d, bins, classes)`` counts."""
    counts = np.asarray(counts, dtype=np.float64)
    n_i = counts.sum(2)
    N = n_i.sum(1)
    sq = (counts ** 2).sum(2)
    frac = np.divide(sq, n_i, out=np.zeros_like(sq), where=n_i > 0)
    return 1.0 - frac.sum(1) / np.where(N > 0, N, 1.0)


def gini_clear(X: np.ndarray, y: np.ndarray, n_classes: int, n_bins: int = 10) -> np.ndarray:
    """The Gini score of every column of ``X`` with labels ``y`` (the plaintext path)."""
    codes = bin_codes(X, n_bins)
    return gini_from_counts(class_counts(codes, y, n_classes, n_bins))


def class_codes(y, task: str, n_classes: int | None, target_bins: int = 2) -> tuple[np.ndarray, int]:
    """Class codes of the training labels and their number; a regression target is cut into
    ``target_bins`` equal-frequency classes (fedsdg-fs.md Table I lists FRIEDMAN, a regression task,
    with 2 classes: the Gini impurity and the F statistic need classes; ours, documented)."""
    y = np.asarray(y)
    if task != "regression":
        return y.astype(np.int64), int(n_classes)
    edges = np.quantile(y.astype(np.float64), np.linspace(0, 1, int(target_bins) + 1)[1:-1])
    codes = np.searchsorted(np.unique(edges), y, side="right").astype(np.int64)
    return codes, int(codes.max()) + 1 if codes.size else 1


# ------------------------------------------------------------------------- secure steps
def hiding_bits(mask_bits: int, n_rows: int) -> int:
    """Hiding bits of ``mask_bits``-bit masks on class counts of at most ``n_rows``."""
    return int(mask_bits) - max(1, int(n_rows)).bit_length()


def floor_message(mask_bits: int, n_rows: int) -> str:
    need = 40 + max(1, int(n_rows)).bit_length()
    return (f"mask_bits {mask_bits} hides the class counts of {n_rows} training rows by "
            f"{hiding_bits(mask_bits, n_rows)} bits, below the floor of 40; raise mask_bits to {need} or more")


def random_masks(shape, bits: int) -> np.ndarray:
    """Uniform integers in ``[0, 2**bits)`` from the operating system's CSPRNG (object array)."""
    count = int(np.prod(shape, dtype=np.int64))
    words = -(-int(bits) // 64)
    raw = np.frombuffer(os.urandom(8 * words * count), dtype="<u8").reshape(count, words)
    out = np.zeros(count, dtype=object)
    for w in range(words):
        out = out + raw[:, w].astype(object) * (1 << (64 * w))
    if bits % 64:
        out = out % (1 << int(bits))
    return out.reshape(shape)


def encrypted_counts(enc_onehot: EncryptedArray, codes: np.ndarray, n_bins: int) -> EncryptedArray:
    """Step 2: ``[[n_{jik}]]`` ``(d, n_bins, c)`` from ``[[A]]`` ``(N, c)`` and the party's bin codes."""
    return enc_onehot.group_sum(codes, int(n_bins))


def mask_counts(counts: EncryptedArray, bits: int) -> tuple[EncryptedArray, np.ndarray]:
    """Step 2: ``([[n + r]], r)`` with fresh masks ``r``."""
    r = random_masks(counts.shape, bits)
    return counts.add_mantissas(r), r


def squares_of_masked(private_key: PrivateKey, masked: EncryptedArray) -> EncryptedArray:
    """Step 3 (label holder): decrypt ``u`` ``(d, bins, c)``, return ``[[sum_k u^2]]`` ``(d, bins)``."""
    u = masked.decrypt_mantissas(private_key)
    q = (u * u).sum(axis=2)
    return EncryptedArray.encrypt(private_key, np.asarray(q, dtype=object), precision=0)


def encrypted_gini(squares: EncryptedArray, masked: EncryptedArray, r: np.ndarray, sizes: np.ndarray) -> EncryptedArray:
    """Step 4 (party): ``[[G_j]]`` ``(d,)`` from ``[[sum_k u^2]]``, its own ``[[u]]``, masks and bin sizes.

    ``[[sum_k n^2]] = [[sum_k u^2]] + sum_k (-2 r)[[u]] + sum_k r^2``, then
    ``[[G_j]] = 1 - sum_i [[sum_k n^2]] * (1 / (N n_{ji}))`` (empty bins weigh 0).
    """
    cross = masked.mul(-2 * r, precision=0).sum(axis=2)  # (d, bins)
    r2 = (r * r).sum(axis=2)
    sq = (squares + cross).add_mantissas(r2)  # exact [[sum_k n_{jik}^2]]
    sizes = np.asarray(sizes, dtype=np.float64)
    N = sizes.sum(1, keepdims=True)
    factor = np.divide(1.0, N * sizes, out=np.zeros_like(sizes), where=sizes > 0)
    return 1 - sq.mul(factor, precision=FACTOR_PRECISION).sum(axis=1)
