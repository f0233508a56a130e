"""``central``: the same split architecture trained in one process on pooled data, no messages.

The reference for the overhead of federation (time per epoch) and for accuracy. It runs exactly
``vfl``'s loop and party roles (same bottom models, top model, derived seeds, one optimizer per
party, batch order) over a :class:`~verticalfs.federation.LocalFederation`: the roles are called
directly, so nothing is serialised and nothing is sent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from verticalfs.federation import LocalFederation
from verticalfs.methods.baselines.vfl import VFL, VFLParams
from verticalfs.methods.registry import register


@dataclass
class CentralParams(VFLParams):
    """Centralised training of the split architecture (same parameters as ``vfl``).

    Parameters
    ----------
    epochs : int
        Training epochs (default 50).
    """


@register
class Central(VFL):
    name = "central"
    summary = "Reference: the VFL architecture trained in one process on pooled data (no messages)."
    paper = "(reference, not federated)"
    Params = CentralParams
    needs_pooled_data = True
    codec_policy = "none"

    def cannot_save(self) -> str | None:
        return ("a non-federated reference trained on pooled data: no party holds a part of its model, so it "
                "cannot be saved as a federated model")

    def fit(self, fed) -> Central:
        data = fed.pooled_data()
        local = LocalFederation(data)
        trainer = self.make_trainer(local)
        t0 = time.perf_counter()
        trainer.setup()
        trainer.fit(phase="train")
        self.trainer_ = trainer
        self.history_ = trainer.history
        self.metrics_ = trainer.finish()
        self.support_ = {p.name: np.ones(p.n_features, dtype=bool) for p in data.parties}
        self.info_ = {"train_seconds": time.perf_counter() - t0}
        return self
