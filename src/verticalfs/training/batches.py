"""Mini-batches agreed by sample index: every party derives the same permutation locally."""

from __future__ import annotations

import numpy as np


def epoch_permutation(n: int, shuffle_seed: int, epoch: int) -> np.ndarray:
    """The sample order of ``epoch``: ``default_rng([shuffle_seed, epoch]).permutation(n)``."""
    return np.random.default_rng([shuffle_seed, epoch]).permutation(n)


def n_batches(n: int, batch_size: int) -> int:
    return max(1, -(-n // batch_size))


def batch_slice(perm: np.ndarray, batch: int, batch_size: int) -> np.ndarray:
    return perm[batch * batch_size : (batch + 1) * batch_size]


class BatchPlan:
    """Caches the permutation of the current epoch; ``rows(epoch, batch)`` gives the batch's rows."""

    def __init__(self, n: int, batch_size: int, shuffle_seed: int) -> None:
        self.n = n
        self.batch_size = batch_size
        self.shuffle_seed = shuffle_seed
        self._epoch: int | None = None
        self._perm: np.ndarray | None = None

    @property
    def n_batches(self) -> int:
        return n_batches(self.n, self.batch_size)

    def rows(self, epoch: int, batch: int) -> np.ndarray:
        if epoch != self._epoch or self._perm is None:  # (both are set together)
            self._perm = epoch_permutation(self.n, self.shuffle_seed, epoch)
            self._epoch = epoch
        return batch_slice(self._perm, batch, self.batch_size)
