"""``central``: the same split architecture trained in one process on pooled data, no messages.

The reference for the overhead of federation (time per epoch) and for accuracy. The bottom models,
top model, initialisation (same derived seeds), optimizers (one per party, as in VFL) and batch
order are exactly those of ``vfl``; only the messages are gone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from verticalfs.data.vertical import ACTIVE
from verticalfs.evaluation.metrics import prediction_metrics
from verticalfs.methods.base import Method
from verticalfs.methods.baselines.vfl import VFLParams
from verticalfs.methods.registry import register
from verticalfs.nn.models import BottomMLP, TopModel, make_optimizer, seeded
from verticalfs.training.batches import BatchPlan
from verticalfs.training.history import History, derive_seed, final_metrics
from verticalfs.training.vfl import loss_fn


@dataclass
class CentralParams(VFLParams):
    """Centralised training of the split architecture (same parameters as ``vfl``).

    Parameters
    ----------
    epochs : int
        Training epochs (default 50).
    """


@register
class Central(Method):
    name = "central"
    summary = "Reference: the VFL architecture trained in one process on pooled data (no messages)."
    paper = "(reference, not federated)"
    Params = CentralParams
    needs_pooled_data = True

    def fit(self, fed) -> Central:
        data = fed.pooled_data()
        c = self.params
        names = data.party_names
        bottoms = [
            seeded(derive_seed(self.seed, "model", p.name),
                   lambda p=p: BottomMLP(p.n_features, c.hidden, c.embedding_dim, c.activation))
            for p in data.parties
        ]
        lab = data.labels
        top = seeded(derive_seed(self.seed, "model", ACTIVE),
                     lambda: TopModel(c.embedding_dim * len(names), c.top_hidden, lab.n_outputs, c.activation))
        opts = [make_optimizer(m.parameters(), c.optimizer, c.lr, c.weight_decay) for m in bottoms]
        opts.append(make_optimizer(top.parameters(), c.optimizer, c.lr, c.weight_decay))
        X = {s: [torch.from_numpy(p.X[s]) for p in data.parties] for s in ("train", "val", "test")}
        y = {s: torch.from_numpy(np.asarray(v)) for s, v in lab.y.items()}
        n = len(y["train"])
        plan = BatchPlan(n, c.batch_size, derive_seed(self.seed, "batches"))
        loss_f = loss_fn(lab.task)
        modules = [*bottoms, top]

        def forward(xs):
            return top(torch.cat([m(x) for m, x in zip(bottoms, xs, strict=True)], 1))

        history = History()
        t_train = 0.0
        for cb in self.callbacks:
            cb.on_train_begin(self, c.epochs, "train")
        for epoch in range(c.epochs):
            t0 = time.perf_counter()
            for m in modules:
                m.train()
            total = 0.0
            for b in range(plan.n_batches):
                rows = torch.as_tensor(plan.rows(epoch, b))
                out = forward([x[rows] for x in X["train"]])
                loss = loss_f(out, y["train"][rows])
                for o in opts:
                    o.zero_grad(set_to_none=True)
                loss.backward()
                for o in opts:
                    o.step()
                total += float(loss.detach()) * len(rows)
            entry = {"epoch": epoch + 1, "phase": "train", "train_loss": total / n}
            for m in modules:
                m.eval()
            with torch.no_grad():
                for s in ("test", "val"):
                    if len(y[s]) == 0:
                        continue
                    met = prediction_metrics(lab.task, lab.y[s], forward(X[s]).numpy(), lab.n_classes)
                    entry.update({(k if s == "test" else f"{s}_{k}"): v for k, v in met.items()})
            t_train += time.perf_counter() - t0
            entry["bytes"] = 0
            entry["bytes_total"] = 0
            if self.entry_hook is not None:
                self.entry_hook(entry)
            history.append(entry)
            for cb in self.callbacks:
                cb.on_epoch_end(self, entry)
        for cb in self.callbacks:
            cb.on_train_end(self)
        self.history_ = history
        self.metrics_ = final_metrics(history)
        self.support_ = {p.name: np.ones(p.n_features, dtype=bool) for p in data.parties}
        self.info_ = {"train_seconds": t_train}
        return self
