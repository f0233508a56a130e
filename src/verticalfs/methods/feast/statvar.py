"""Statistical variables: FEAST's merged representation of a party's selected features (feast.md
section 4.2, Figure 3).

The selected party divides its newly selected (discretised) features at random into
``ceil(|S|/m)`` groups of at most ``m`` features. For each group it takes the projection of the
sampled rows on the group's features with duplicate elimination (the "merged table"), numbers the
distinct combinations ``0, 1, ...`` in the order they first appear (the GID column), and replaces
each row by the GID of its combination. The columns of GIDs form ``V^t``. The numbering by first
appearance (not by sorted value) is what Figure 3 shows; it also hides the order of the bins.
"""

from __future__ import annotations

import numpy as np

from verticalfs.exceptions import DataError
from verticalfs.selection.info import joint_codes


def statistical_variable(codes) -> np.ndarray:
    """GIDs (first-appearance numbering) of the rows of one feature group ``(rows, k)`` -> ``(rows,)``."""
    codes = np.asarray(codes)
    if codes.ndim == 1:
        codes = codes[:, None]
    if codes.ndim != 2 or codes.shape[1] == 0:
        raise DataError(f"a feature group needs a (rows, k >= 1) code array, got shape {codes.shape}")
    j = joint_codes(*codes.T)
    _, first, inv = np.unique(j, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inv.reshape(-1)]


def random_groups(n: int, m: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random division of ``n`` features into ``ceil(n / m)`` groups of at most ``m`` (positions)."""
    if m < 1:
        raise DataError(f"merge parameter m must be at least 1, got {m}")
    perm = rng.permutation(n)
    return [perm[i:i + m] for i in range(0, n, m)]


def smallest_uint(max_value: int) -> np.dtype:
    """The smallest unsigned dtype holding ``0 .. max_value`` (what a code column costs on the wire)."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if max_value <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.uint64)


def statistical_variables(codes, groups: list[np.ndarray]) -> np.ndarray:
    """``V^t``: one GID column per group, ``(rows, len(groups))`` in the smallest unsigned dtype."""
    codes = np.asarray(codes)
    if not groups:
        return np.zeros((codes.shape[0], 0), dtype=np.uint8)
    V = np.stack([statistical_variable(codes[:, np.asarray(g, dtype=np.int64)]) for g in groups], 1)
    return V.astype(smallest_uint(int(V.max()) if V.size else 0))
