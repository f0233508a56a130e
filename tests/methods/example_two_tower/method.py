"""``two-tower``: each party runs two bottom models on its own columns; both embeddings are sent,
requested and back-propagated separately (two pending graphs), and each party adds an L1 penalty
on its towers' input layers to the loss it back-propagates (a local regulariser)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from verticalfs.methods.base import Method
from verticalfs.methods.baselines.vfl import VFLParams
from verticalfs.nn.models import make_optimizer, seeded
from verticalfs.party import Context, handles
from verticalfs.training.split import SplitRole, SplitSpec, SplitTrainer, TrainConfig
from verticalfs.transport.messages import At, Embeddings, message, tensor_field

TOWERS = (0, 1)


@message("two_tower.TowerSpec")
class TowerSpec(SplitSpec):
    """The split spec plus the party-side L1 weight."""

    l1: float = 0.0


@message("two_tower.TowerRequest")
class TowerRequest:
    """Label holder -> party: the embeddings of ``tower`` for a batch (or a whole split)."""

    tower: int
    split: str
    epoch: int
    batch: int
    train: bool = True


@message("two_tower.TowerGradients")
class TowerGradients:
    """Label holder -> party, one-way: the gradient for ``tower``'s last training batch."""

    tower: int
    values: np.ndarray = tensor_field()


class TwoTowerRole(SplitRole):
    """Two models, two optimizers, two pending graphs, and an L1 term at the party."""

    spec: TowerSpec

    def __init__(self, data, spec: TowerSpec, ctx: Context) -> None:
        super().__init__(data, spec, ctx)  # tower 0 is the split role's own model
        self.models = [self.model, seeded(int(spec.seed) + 1, lambda: self.build_model(len(data.kept)))]
        self.optimizers = [self.optimizer, make_optimizer(self.models[1].parameters(), spec.optimizer, spec.lr)]
        self.pendings: list[torch.Tensor | None] = [None, None]
        self._tower = 0

    def local_loss(self) -> torch.Tensor | None:
        lam = float(self.spec.l1)
        if lam <= 0:
            return None
        return lam * self.models[self._tower].input_layer.weight.abs().sum()

    @handles(TowerRequest)
    def on_tower_request(self, msg: TowerRequest, ctx: Context) -> Embeddings:
        model = self.models[msg.tower]
        X = self.rows(msg.split, msg.epoch, msg.batch)
        if msg.train:
            model.train()
            out = model(X)
            self.pendings[msg.tower] = out
            return Embeddings(out.detach().numpy())
        model.eval()
        with torch.no_grad():
            return Embeddings(model(X).numpy())

    @handles(TowerGradients)
    def on_tower_gradients(self, msg: TowerGradients, ctx: Context) -> None:
        out, self.pendings[msg.tower] = self.pendings[msg.tower], None
        self._tower = msg.tower
        self.model, self.optimizer = self.models[msg.tower], self.optimizers[msg.tower]
        try:
            self.step(out, self.decode_backward(msg, out))  # the core's step: local loss included
        finally:
            self.model, self.optimizer = self.models[0], self.optimizers[0]
        return None


class TwoTowerTrainer(SplitTrainer):
    """The label holder's side: both towers' embeddings concatenated per party."""

    def __init__(self, *args, l1: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.l1 = l1

    def spec_for(self, party: str) -> TowerSpec:
        return TowerSpec(**{**vars(super().spec_for(party)), "l1": self.l1})

    def setup(self) -> None:
        super().setup()
        self.embedding_dims = {p: 2 * d for p, d in self.embedding_dims.items()}  # two towers each
        self.build_top()

    def _tower_blocks(self, split, epoch, batch, train, at, n_rows) -> list[np.ndarray]:
        blocks = []
        for p in self.parties:
            towers = [self.fed.proxy(p).request(TowerRequest(t, split, epoch, batch, train), at,
                                                expect=Embeddings).values for t in TOWERS]
            blocks.append(np.concatenate(towers, 1))
            assert blocks[-1].shape == (n_rows, self.embedding_dims[p])
        return blocks

    def forward_batch(self, epoch, batch, at, n_rows):
        return self._tower_blocks("train", epoch, batch, True, at, n_rows)

    def backward_batch(self, G, at) -> None:
        start = 0
        for p in self.parties:
            half = self.embedding_dims[p] // 2
            for t in TOWERS:
                g = np.ascontiguousarray(G[:, start + t * half:start + (t + 1) * half])
                self.fed.proxy(p).send(TowerGradients(t, g), at)
            start += 2 * half

    def embeddings(self, split, phase="eval"):
        blocks = self._tower_blocks(split, self.epoch, -1, False, At(phase, self.epoch), self.n_samples(split))
        return np.concatenate(blocks, 1)


@dataclass
class TwoTowerParams(VFLParams):
    """Two towers per party.

    Parameters
    ----------
    l1 : float
        Party-side L1 weight on each tower's input layer.
    """

    l1: float = 0.0


class TwoTower(Method):
    name = "two-tower"
    summary = "Test-only: two bottom models per party and a party-side L1 regulariser."
    Params = TwoTowerParams
    Role = TwoTowerRole
    test_params = {"epochs": 2, "batch_size": 64, "hidden": (8,)}

    def fit(self, fed) -> TwoTower:
        p = self.params
        trainer = TwoTowerTrainer(fed, self.name, TrainConfig.from_params(p), seed=self.seed,
                                  callbacks=self.callbacks, entry_hook=self.entry_hook, l1=p.l1,
                                  checkpoints=self.checkpoints)
        trainer.setup()
        trainer.fit()
        return self.finish_training(fed, trainer)
