"""``sefs``: SEFS (Lee, Imrie and van der Schaar, "Self-supervision enhanced feature selection with
correlated gates", ICLR 2022), the baseline of icafs.md section V-A, run over the federation.

SEFS, as the authors' code does it:

1. Self-supervision: gate vectors ``m`` drawn from a multivariate Bernoulli with selection
   probability ``p_mask`` and the features' correlation (a Gaussian copula: ``g = L eps`` with
   ``L`` the Cholesky factor of the correlation matrix, ``m = 1(Phi(g) < p_mask)``); the encoder
   sees ``x~ = m x + (1 - m) x_bar`` (``x_bar`` the feature means) and two decoders reconstruct
   ``x`` (squared error summed over features) and the mask ``1(x == x~)`` (cross-entropy, weight
   ``alpha``).
2. Supervision: learnable selection probabilities ``pi = sigmoid(logit)`` (logits start at 0),
   correlated relaxed-Bernoulli gates ``m = sigmoid(logit pi - logit(1 - pi) + log u - log(1 - u))``
   with ``u = Phi(L eps)``, the input ``x m`` (the authors' code replaces by zero here), the
   pretrained encoder of which only the last layer keeps learning, a linear predictor, and the loss
   ``CE + lam mean(pi)``. A feature is selected when ``pi > 0.5``.

Over the federation: each party pretrains its own encoder on its own columns with its own
correlation (nothing crosses in step 1: a party cannot see the correlation with another party's
columns, the one thing federated SEFS loses); in step 2 the party's gates and encoder are its
bottom model, the label holder's linear predictor its top model, and split learning carries
embeddings and gradients. ``lam mean(pi)`` over all features is the sum of each party's
``lam sum(pi_k) / d`` (``d`` travels in the spec), so it is a local term. At the end each party
removes the features with ``pi <= 0.5`` for real (exactly what the zero replacement did).

Both phases see the party's columns standardised by its own training rows (ours, issue 40: on
min-max-scaled columns, which vary by ~0.025 around their means, every ReLU unit of ``z`` was dead
after step 1 on a 30-class set, so step 2, which trains only the encoder's last layer, passed no
signal to the gates and the penalty removed every feature; ``benchmarks/icafs/README.md``, "SEFS on
many classes"). Zero in step 2 is then the feature's training mean, the replacement of step 1.

Defaults: the authors' tutorial (encoder: two hidden layers of 100, ReLU, ``z`` of 10 with a ReLU;
decoders the same; ``alpha`` 10, ``p_mask`` 0.5, ``lam`` 1, batch 32). Their runs stop on a
validation loss after up to 500,000 iterations at lr 1e-4; we budget 5,000 mini-batches per phase
(``steps``, ``ss_steps``; or ``epochs``, ``ss_epochs``) and use lr 1e-3 (ours): the selection
probabilities start at 0.5 and a shorter run leaves them near it, so that which features pass 0.5
at the end is noise (on breast cancer with noise columns, 30 epochs gave 0.48 test accuracy).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from verticalfs.exceptions import ConfigError
from verticalfs.methods.base import Method
from verticalfs.methods.registry import register
from verticalfs.nn.models import MLP, make_optimizer, seeded, train_scale
from verticalfs.params import Constraints, Interval
from verticalfs.party import handles
from verticalfs.training.batches import BatchPlan
from verticalfs.training.split import SplitRole, SplitSpec, SplitTrainer, TrainConfig
from verticalfs.transport.messages import At, message


@message("baselines.SEFSSpec")
class SEFSSpec(SplitSpec):
    """Label holder -> party, inside ``Join``: both phases' settings and ``d``, all parties' features."""

    alpha: float = 10.0
    p_mask: float = 0.5
    lam: float = 1.0
    ss_epochs: int = 100
    d_total: int = 1


@message("baselines.SEFSPretrain")
class SEFSPretrain:
    """Holder -> party, phase ``pretrain``: run the self-supervision phase on your own columns."""


@message("baselines.SEFSPretrained")
class SEFSPretrained:
    loss: float


@message("baselines.SEFSSelect")
class SEFSSelect:
    """Holder -> party, phase ``selection``: keep the features with ``pi > 0.5``."""


@message("baselines.SEFSSelected")
class SEFSSelected:
    n_features: int


def copula_factor(X: np.ndarray, jitter: float = 1e-3) -> torch.Tensor:
    """The lower Cholesky factor of the columns' correlation matrix (constant columns uncorrelated;
    a small ridge makes it positive definite when there are more columns than rows)."""
    X = np.asarray(X, dtype=np.float64)
    sd = X.std(0)
    Z = np.where(sd > 0, (X - X.mean(0)) / np.where(sd > 0, sd, 1), 0.0)
    R = Z.T @ Z / max(1, X.shape[0])
    np.fill_diagonal(R, 1.0)
    for k in range(8):  # more ridge until the factorisation succeeds
        try:
            return torch.from_numpy(np.linalg.cholesky(R + jitter * 10 ** k * np.eye(len(R)))).float()
        except np.linalg.LinAlgError:
            continue
    return torch.eye(len(R))


class SEFSRole(SplitRole):
    """A party of ``sefs``: its encoder, decoders (step 1), selection probabilities (step 2)."""

    spec: SEFSSpec
    #: its selection logits and its training columns' scale and copula factor, once set
    #: (``make_optimizer`` runs before ``__init__`` sets them; a party without training rows has none)
    logits: torch.nn.Parameter | None = None
    mu: torch.Tensor | None = None
    L: torch.Tensor | None = None

    def __init__(self, data, spec: SEFSSpec, ctx) -> None:
        super().__init__(data, spec, ctx)
        d = len(data.kept)
        self.logits = torch.nn.Parameter(torch.zeros(d))
        self.gen = torch.Generator().manual_seed(int(spec.seed) + 11)
        if "train" in data.splits:
            X = data.X("train")
            self.mu, self.sd = train_scale(X)
            self.xbar = torch.zeros(X.shape[1])  # the standardised columns' means
            self.L = copula_factor(X.numpy())
        self.optimizer = self.make_optimizer()

    def build_model(self, d_in: int) -> torch.nn.Module:
        s = self.spec
        return MLP(d_in, tuple(int(h) for h in s.hidden), int(s.embedding_dim), "relu", out_activation="relu")

    def make_optimizer(self, lr: float | None = None):
        s = self.spec  # step 2 trains the encoder's last layer and the selection probabilities
        params = list(self.model.output_layer.parameters()) + ([self.logits] if self.logits is not None else [])
        return make_optimizer(params, s.optimizer, s.lr if lr is None else lr, s.weight_decay)

    def pi(self) -> torch.Tensor:
        return torch.sigmoid(self.logits)

    def copula(self, rows: int) -> torch.Tensor:
        eps = torch.randn(rows, self.L.shape[0], generator=self.gen)
        return eps @ self.L.T  # rows of L eps

    def standardise(self, X: torch.Tensor) -> torch.Tensor:
        """The party's columns centred and scaled by its training rows (issue 40): min-max columns
        vary by ~0.025 and left every ReLU unit of ``z`` dead after step 1 on the 30-class set."""
        return (X - self.mu) / self.sd

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        X = self.standardise(X)
        if not self.model.training:
            return self.model(X * (self.pi() > 0.5).float())
        u = (0.5 * (1 + torch.erf(self.copula(X.shape[0]) / 2 ** 0.5))).clamp(1e-6, 1 - 1e-6)
        p = self.pi().clamp(1e-6, 1 - 1e-6)
        m = torch.sigmoid(torch.log(p) - torch.log1p(-p) + torch.log(u) - torch.log1p(-u))
        return self.model(X * m)

    def export(self) -> dict:
        """The bottom model plus what its forward pass needs: the standardisation and the
        selection probabilities."""
        out = super().export()
        out["sefs"] = {"mu": self.mu.clone(), "sd": self.sd.clone(), "logits": self.logits.detach().clone()}
        return out

    @classmethod
    def restore(cls, data, saved: dict, ctx) -> SEFSRole:
        role = super().restore(data, saved, ctx)
        extra = saved.get("sefs")
        if extra is not None:
            role.mu, role.sd = extra["mu"], extra["sd"]
            role.logits = torch.nn.Parameter(extra["logits"].clone())
        return role

    def local_loss(self) -> torch.Tensor:
        return float(self.spec.lam) * self.pi().sum() / max(1, int(self.spec.d_total))

    def feature_scores(self) -> np.ndarray:
        with torch.no_grad():
            return self.pi().numpy().astype(np.float64)

    @handles(SEFSPretrain)
    def on_pretrain(self, msg: SEFSPretrain, ctx) -> SEFSPretrained:
        s = self.spec
        X = self.standardise(self.data.X("train"))
        n, d = X.shape
        dec = seeded(int(s.seed) + 1, lambda: (MLP(int(s.embedding_dim), tuple(s.hidden), d, "relu"),
                                                 MLP(int(s.embedding_dim), tuple(s.hidden), d, "relu")))
        params = list(self.model.parameters()) + list(dec[0].parameters()) + list(dec[1].parameters())
        opt = make_optimizer(params, s.optimizer, s.lr, s.weight_decay)
        plan = BatchPlan(n, int(s.batch_size), int(s.shuffle_seed) + 1)
        self.model.train()
        loss = torch.zeros(())
        for epoch in range(int(s.ss_epochs)):
            for b in range(plan.n_batches):
                x = X.index_select(0, torch.from_numpy(plan.rows(epoch, b)))
                m = (0.5 * (1 + torch.erf(self.copula(x.shape[0]) / 2 ** 0.5)) < float(s.p_mask)).float()
                xt = m * x + (1 - m) * self.xbar
                target = (x == xt).float()
                z = self.model(xt)
                xh, mh = torch.sigmoid(dec[0](z)), torch.sigmoid(dec[1](z))
                loss = ((x - xh) ** 2).sum(1).mean() + float(s.alpha) * F.binary_cross_entropy(
                    mh, target, reduction="none").sum(1).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        self.optimizer = self.make_optimizer()
        return SEFSPretrained(loss=float(loss.item()))

    @handles(SEFSSelect)
    def on_select(self, msg: SEFSSelect, ctx) -> SEFSSelected:
        with torch.no_grad():
            keep = np.flatnonzero((self.pi() > 0.5).numpy())
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Initializing zero-element tensors")  # every feature went
            self.drop_inputs(keep)
        self.logits = torch.nn.Parameter(self.logits.detach()[torch.from_numpy(keep)].clone())
        self.L = self.L[torch.from_numpy(keep)][:, torch.from_numpy(keep)] if self.L is not None else None
        if self.mu is not None:
            k = torch.from_numpy(keep)
            self.mu, self.sd, self.xbar = self.mu[k], self.sd[k], self.xbar[k]
        self.optimizer = self.make_optimizer()
        return SEFSSelected(n_features=int(len(keep)))


@dataclass
class SEFSParams(TrainConfig):
    """SEFS over the federation (the authors' tutorial settings; see the module docstring).

    Parameters
    ----------
    epochs : int
        Epochs of the supervised phase (0: as many as ``steps`` mini-batches take).
    steps : int
        Mini-batches of the supervised phase when ``epochs`` is 0 (5,000).
    ss_epochs : int
        Epochs of each party's self-supervised phase (0: as many as ``ss_steps`` take).
    ss_steps : int
        Mini-batches of the self-supervised phase when ``ss_epochs`` is 0 (5,000).
    batch_size : int
        Mini-batch size of both phases (32).
    lr : float
        Adam's learning rate of both phases (1e-3; the authors' 1e-4 runs up to 500,000 iterations).
    hidden : tuple of int
        The encoder's (and decoders') hidden widths (100, 100).
    embedding_dim : int
        ``z``, the encoder's output per party (10).
    alpha : float
        Weight of the mask reconstruction in step 1 (10).
    p_mask : float
        Selection probability of step 1's gate vectors (0.5).
    lam : float
        Weight of ``mean(pi)`` in step 2 (1).
    """

    epochs: int = 0
    steps: int = 5000
    ss_epochs: int = 0
    ss_steps: int = 5000
    batch_size: int = 32
    lr: float = 1e-3
    hidden: tuple[int, ...] = (100, 100)
    embedding_dim: int = 10
    alpha: float = 10.0
    p_mask: float = 0.5
    lam: float = 1.0
    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "steps": [Interval(int, 0, None)],
        "ss_epochs": [Interval(int, 0, None)],
        "ss_steps": [Interval(int, 0, None)],
        "alpha": [Interval(float, 0, None)],
        "p_mask": [Interval(float, 0, 1, closed="neither")],
        "lam": [Interval(float, 0, None)],
    }


@register
class SEFS(Method):
    name = "sefs"
    summary = "SEFS (Lee et al. 2022): self-supervised pretraining with correlated gates, then supervised selection."
    paper = "icafs.md section V-A (SEFS, Lee, Imrie and van der Schaar 2022)"
    Params = SEFSParams
    Role = SEFSRole
    test_params = {"epochs": 3, "ss_epochs": 2, "batch_size": 64, "hidden": (16, 8)}

    def fit(self, fed) -> SEFS:
        p = self.params
        if fed.labels.task == "regression":
            raise ConfigError(f"{self.name}: classification only here (a linear predictor with cross-entropy)")
        if (not 0 < p.p_mask < 1 or p.alpha < 0 or p.lam < 0 or min(p.ss_epochs, p.epochs, p.steps, p.ss_steps) < 0
                or p.epochs == p.steps == 0):
            raise ConfigError(f"{self.name}: need 0 < p_mask < 1, alpha >= 0, lam >= 0, epochs, steps, ss_epochs, "
                              f"ss_steps >= 0 and epochs or steps > 0; got {p.p_mask}, {p.alpha}, {p.lam}, "
                              f"{p.epochs}, {p.steps}, {p.ss_epochs}, {p.ss_steps}")
        d = sum(len(v) for v in fed.feature_names().values())
        per_epoch = -(-fed.n_samples("train") // int(p.batch_size))
        config = TrainConfig.from_params(p)
        config.epochs = int(p.epochs) or -(-int(p.steps) // per_epoch)
        ss_epochs = int(p.ss_epochs) or -(-int(p.ss_steps) // per_epoch)
        trainer = SplitTrainer(fed, self.name, config, seed=self.seed, callbacks=self.callbacks,
                               entry_hook=self.entry_hook, codec=self.codec or "float32", spec_class=SEFSSpec,
                               spec_extra={"alpha": float(p.alpha), "p_mask": float(p.p_mask), "lam": float(p.lam),
                                           "ss_epochs": ss_epochs, "d_total": int(d)},
                               checkpoints=self.checkpoints)
        trainer.setup()
        at = At("pretrain", 0)
        losses = {q: float(fed.proxy(q).request(SEFSPretrain(), at, expect=SEFSPretrained).loss)
                  for q in trainer.parties}
        trainer.fit(phase="train")
        at = At("selection", trainer.epoch)
        kept = {q: int(fed.proxy(q).request(SEFSSelect(), at, expect=SEFSSelected).n_features)
                for q in trainer.parties}
        return self.finish_training(fed, trainer, {"pretrain_loss": losses, "features_kept": kept})


__all__ = ["SEFS", "SEFSParams"]
