"""Reusing ICAFS's stage 1 (Algorithm 1) across in-process runs that would compute the same one.

Algorithm 1 reads only the training rows, the labels, the run's seed (every random stream of it is
derived from that seed), the parties and the synthesis settings (``synth_*``, ``n_synthetic``,
``code_dim``, ``feature_dim``, ``channels``, ``arch``, ``gan_lr``, ``max_modes``, ``critic_norm``,
``aux_weight``). Runs that differ only in stages 2-3 (DP-SGD on the encoders, Table VI's
``fixed-temp`` and ``embedding`` top models, the epochs) make the same synthetic rows, so a study
that runs several of them can compute stage 1 once::

    cache = Stage1Cache()
    for eps in (0.0, 20.0, 10.0):
        m = create("icafs", seed=0, dp_epsilon=eps, stage1_cache=cache)
        m.fit(Federation.in_process(data))   # the first run computes stage 1, the others restore it

A restored run is the run that computes it again (same metrics and support; tested); its ledger
has no stage-1 messages and its ``info_`` says ``synthesis_reused: 1`` (the other ``synthesis_*``
figures are those of the run that computed it).

In-process federations only (:meth:`~verticalfs.federation.Federation.in_process`): the cache keeps
each party's synthetic block and gives it back to the same party of a later run in this process. In
a deployment each party would keep its own block and nothing would move; no such option exists
there (each party's process is its own).
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import torch

from verticalfs.exceptions import ConfigError

#: the settings of :class:`~verticalfs.methods.icafs.method.ICAFSParams` that Algorithm 1 reads
SYNTHESIS_PARAMS = ("synth_steps", "synth_batch", "n_synthetic", "code_dim", "feature_dim", "channels", "arch",
                    "gan_lr", "max_modes", "critic_norm", "aux_weight")


@dataclasses.dataclass(frozen=True)
class Stage1:
    """One computed stage 1: each party's synthetic block (rows x that party's columns in use when
    it was made), the synthetic rows' labels (the label holder's) and the run's ``synthesis_*``
    figures."""

    blocks: dict[str, torch.Tensor]
    labels: np.ndarray
    info: dict


class Stage1Cache:
    """Keeps the last ``size`` stage 1s computed through it, by what they depend on (module docstring).

    Give it to :class:`~verticalfs.methods.icafs.method.ICAFS` as ``stage1_cache``. :attr:`last` is
    the stage 1 the latest run through the cache used (computed or restored), for a study's own
    measurements of the synthetic rows.
    """

    def __init__(self, size: int = 1) -> None:
        if int(size) < 1:
            raise ConfigError(f"Stage1Cache: size must be >= 1, got {size!r}")
        self.size = int(size)
        self.entries: dict[str, Stage1] = {}
        self.last: Stage1 | None = None

    def clear(self) -> None:
        """Forget every kept stage 1."""
        self.entries.clear()
        self.last = None

    def __len__(self) -> int:
        return len(self.entries)

    @staticmethod
    def check(fed) -> None:
        """The cache needs an in-process federation (it moves each party's block between runs)."""
        if not fed.is_local:
            raise ConfigError("icafs: stage1_cache works with in-process federations only (Federation.in_process); "
                              "in a deployment each party keeps its own synthetic block: leave stage1_cache out")

    @staticmethod
    def key(trainer) -> str:
        """What stage 1 of ``trainer``'s run depends on, as a digest: the training rows of every
        party (read in this process), the training labels, the seed, the parties and the synthesis
        settings."""
        h = hashlib.blake2b(digest_size=20)
        p = trainer.params
        h.update(repr((int(trainer.seed), tuple(trainer.parties), int(trainer.labels.n_classes),
                       {k: getattr(p, k) for k in SYNTHESIS_PARAMS})).encode())
        y = np.ascontiguousarray(trainer.labels.y["train"])
        h.update(str((y.dtype, y.shape)).encode() + y.tobytes())
        for q in trainer.parties:
            X = trainer.fed.local_runtime(q).role.data.X("train").numpy()
            h.update(f"{q}:{X.dtype}:{X.shape}".encode() + np.ascontiguousarray(X).tobytes())
        return h.hexdigest()

    def synthesize(self, trainer) -> bool:
        """Stage 1 of ``trainer``'s run: restored when kept (True), else computed and kept (False)."""
        fed = trainer.fed
        self.check(fed)
        key = self.key(trainer)
        kept = self.entries.get(key)
        if kept is None:
            trainer.synthesize()
            kept = Stage1(blocks={q: fed.local_runtime(q).role.synthetic.clone() for q in trainer.parties},
                          labels=trainer.y_syn.numpy().copy(), info=dict(trainer.synthesis_info))
            self.entries[key] = kept
            while len(self.entries) > self.size:
                self.entries.pop(next(iter(self.entries)))
            self.last = kept
            return False
        for q in trainer.parties:
            fed.local_runtime(q).role.adopt_synthetic(kept.blocks[q].clone())
        trainer.adopt_synthesis(kept.labels, {**kept.info, "synthesis_reused": 1})
        self.last = kept
        return True


__all__ = ["SYNTHESIS_PARAMS", "Stage1", "Stage1Cache"]
