"""Standard VFL training (less-vfl.md Appendix A, Algorithm 2), driven by the active party.

Per mini-batch: the active party asks every passive party for the embeddings of the agreed batch
(:class:`EmbedRequest` -> :class:`Embeddings`), runs its top model, updates it, and sends each party
the gradient of the loss with respect to that party's embeddings (:class:`Gradients`); each party
back-propagates it through its bottom model and updates. Mini-batches are agreed by index (both
sides derive the epoch's permutation from a shared seed, see :mod:`verticalfs.training.batches`).

After every epoch the active party evaluates on the test (and validation) split; the forward
embeddings this needs are sent in phase ``eval``.

Bytes per training epoch with float32 payloads: ``2 x N_train x sum(embedding_dim) x 4`` of payload
(embeddings up, gradients down), plus per batch and party one header-only request and the fixed
overhead of two tensor messages (see :mod:`verticalfs.transport.serde`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch
import torch.nn.functional as F

from verticalfs.data.vertical import ACTIVE
from verticalfs.evaluation.metrics import prediction_metrics
from verticalfs.exceptions import ConfigError
from verticalfs.nn.models import TopModel, make_optimizer, seeded
from verticalfs.training.batches import BatchPlan
from verticalfs.training.history import Callback, History, derive_seed
from verticalfs.transport.channel import Channel
from verticalfs.transport.messages import EmbedRequest, Gradients, ModelSpec, Ready


@dataclass
class TrainConfig:
    """Hyper-parameters of standard VFL training (shared by every method built on it).

    Parameters
    ----------
    epochs : int
        Communication epochs of training.
    batch_size : int
        Mini-batch size agreed by all parties.
    lr : float
        Learning rate of every party's optimizer (less-vfl.md section 5: Adam, 0.01).
    optimizer : {"adam", "adamw", "sgd"}
    weight_decay : float
    hidden : tuple of int
        Hidden widths of each party's bottom MLP (two hidden layers = the paper's 3-layer MLP).
    embedding_dim : int
        Embedding components per party.
    activation : str
        Hidden activation of the bottom MLPs (and of an MLP top model).
    top_hidden : tuple of int
        Hidden widths of the top model; empty = linear top model (less-vfl.md section 5).
    """

    epochs: int = 50
    batch_size: int = 256
    lr: float = 0.01
    optimizer: str = "adam"
    weight_decay: float = 0.0
    hidden: tuple[int, ...] = (64, 32)
    embedding_dim: int = 8
    activation: str = "relu"
    top_hidden: tuple[int, ...] = ()

    @classmethod
    def from_params(cls, params) -> TrainConfig:
        """The TrainConfig fields of any params dataclass that extends it."""
        return cls(**{f.name: getattr(params, f.name) for f in fields(cls)})

    def validate(self) -> None:
        if self.epochs < 0:
            raise ConfigError(f"epochs must be >= 0, got {self.epochs}")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.embedding_dim < 1:
            raise ConfigError(f"embedding_dim must be >= 1, got {self.embedding_dim}")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")


def loss_fn(task: str):
    if task == "regression":
        return lambda out, y: F.mse_loss(out.reshape(-1), y)
    return F.cross_entropy


class VFLTrainer:
    """Runs Algorithm 2 from the active party over a channel.

    Parameters
    ----------
    server : ActiveParty
        The label holder; its top model and optimizer live here.
    channel : Channel
        How the active party reaches the passive parties.
    parties : sequence of str
        Names of the passive parties, in the order their embeddings are concatenated.
    config : TrainConfig
    seed : int
        Seeds model initialisation (per party, derived) and the batch order.
    callbacks : sequence of Callback
    entry_hook : callable, optional
        ``hook(entry)`` may add fields to each history entry (e.g. ``spurious_removed``).
    """

    def __init__(self, server, channel: Channel, parties: Sequence[str], config: TrainConfig,
                 *, seed: int = 0, callbacks: Sequence[Callback] = (),
                 entry_hook: Callable[[dict], None] | None = None,
                 eval_splits: Sequence[str] = ("test", "val")) -> None:
        config.validate()
        self.server = server
        self.channel = channel
        self.parties = list(parties)
        self.config = config
        self.seed = seed
        self.callbacks = list(callbacks)
        self.entry_hook = entry_hook
        self.eval_splits = tuple(s for s in eval_splits if server.n_samples(s) > 0)
        self.history = History()
        self.epoch = 0  # communication epochs run so far, over all phases
        self.embedding_dims: dict[str, int] = {}
        self.loss = loss_fn(server.task)
        self.plan = BatchPlan(server.n_samples("train"), config.batch_size, derive_seed(seed, "batches"))

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        """Send each party its :class:`ModelSpec`; build the top model on the reported sizes."""
        c = self.config
        with self.channel.at("setup", 0):
            for p in self.parties:
                spec = ModelSpec(
                    hidden=tuple(c.hidden), embedding_dim=c.embedding_dim, activation=c.activation,
                    optimizer=c.optimizer, lr=c.lr, weight_decay=c.weight_decay,
                    seed=derive_seed(self.seed, "model", p), batch_size=c.batch_size,
                    shuffle_seed=self.plan.shuffle_seed,
                )
                ready = self.channel.request(ACTIVE, p, spec)
                assert isinstance(ready, Ready)
                if ready.n_samples.get("train") != self.server.n_samples("train"):
                    raise ConfigError(
                        f"party {p!r} has {ready.n_samples.get('train')} training rows, the active party "
                        f"{self.server.n_samples('train')}; align the parties by id first"
                    )
                self.embedding_dims[p] = ready.embedding_dim
        self.build_top()

    def build_top(self) -> None:
        c = self.config
        d = sum(self.embedding_dims[p] for p in self.parties)
        out = self.server.labels.n_outputs
        self.server.top = seeded(derive_seed(self.seed, "model", ACTIVE),
                                 lambda: TopModel(d, c.top_hidden, out, c.activation))
        self.rebuild_top_optimizer()

    def rebuild_top_optimizer(self) -> None:
        c = self.config
        self.server.optimizer = make_optimizer(self.server.top.parameters(), c.optimizer, c.lr, c.weight_decay)

    # ---------------------------------------------------------------- training
    def train_epoch(self, phase: str = "train") -> float:
        """One epoch of Algorithm 2; returns the mean training loss."""
        ch, server, parties = self.channel, self.server, self.parties
        top, opt, y_all = server.top, server.optimizer, server.y["train"]
        epoch = self.epoch
        top.train()
        loss_f = self.loss
        request, send = ch.request, ch.send
        perf = time.perf_counter
        total, n_seen, t_active = 0.0, 0, 0.0
        for b in range(self.plan.n_batches):
            ch.set_position(phase, epoch, b)
            req = EmbedRequest("train", epoch, b, True)
            embs = [request(ACTIVE, p, req).values for p in parties]
            t0 = perf()
            rows = self.plan.rows(epoch, b)
            # One leaf for the concatenated embeddings: the gradient of each party's block is a
            # column slice of its gradient (exactly what autograd through torch.cat would give).
            if len(embs) > 1:
                H = torch.from_numpy(np.concatenate(embs, 1)).requires_grad_(True)
            else:
                H = torch.from_numpy(embs[0]).requires_grad_(True)
            out = top(H)
            loss = loss_f(out, y_all.index_select(0, torch.from_numpy(rows)))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            G = H.grad.numpy()
            total += loss.item() * len(rows)
            n_seen += len(rows)
            t_active += perf() - t0
            start = 0
            for p, e in zip(parties, embs, strict=True):
                stop = start + e.shape[1]
                send(ACTIVE, p, Gradients(G[:, start:stop] if len(embs) > 1 else G))
                start = stop
        self.channel.ledger.add_compute(ACTIVE, phase, epoch, t_active)
        return total / max(1, n_seen)

    def predict(self, split: str, phase: str = "eval") -> np.ndarray:
        """Top-model output on a whole split (embeddings requested in ``phase``)."""
        with self.channel.at(phase, self.epoch):
            req = EmbedRequest(split, self.epoch, -1, False)
            embs = [self.channel.request(ACTIVE, p, req).values for p in self.parties]
        self.server.top.eval()
        with torch.no_grad():
            H = torch.cat([torch.from_numpy(e) for e in embs], 1)
            return self.server.top(H).numpy()

    def evaluate(self, splits: Sequence[str] | None = None) -> dict[str, float]:
        """Test metrics by name, validation metrics as ``val_<name>``."""
        res: dict[str, float] = {}
        labels = self.server.labels
        for s in splits or self.eval_splits:
            m = prediction_metrics(labels.task, labels.y[s], self.predict(s), labels.n_classes)
            prefix = "" if s == "test" else f"{s}_"
            res.update({prefix + k: v for k, v in m.items()})
        return res

    def record(self, phase: str, train_loss: float | None, **extra) -> dict:
        """Evaluate and append a history entry for the epoch just finished."""
        led = self.channel.ledger
        entry = {"epoch": self.epoch, "phase": phase}
        if train_loss is not None:
            entry["train_loss"] = train_loss
        entry.update(self.evaluate())
        entry.update(extra)
        entry["bytes"] = led.total_bytes - led.bytes_where(phase="eval")
        entry["bytes_total"] = led.total_bytes
        if self.entry_hook is not None:
            self.entry_hook(entry)
        self.history.append(entry)
        for cb in self.callbacks:
            cb.on_epoch_end(self, entry)
        return entry

    def fit(self, epochs: int | None = None, phase: str = "train",
            after_epoch: Callable[[VFLTrainer], None] | None = None) -> History:
        """Run ``epochs`` epochs (default ``config.epochs``) of Algorithm 2 in ``phase``."""
        epochs = self.config.epochs if epochs is None else epochs
        for cb in self.callbacks:
            cb.on_train_begin(self, epochs, phase)
        try:
            for _ in range(epochs):
                loss = self.train_epoch(phase)
                if after_epoch is not None:
                    after_epoch(self)
                self.epoch += 1
                self.record(phase, loss)
        finally:
            for cb in self.callbacks:
                cb.on_train_end(self)
        return self.history
