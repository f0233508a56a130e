"""``icafs``: ICAFS (Jin et al., icafs.md): federated conditional synthesis, then an ensemble of
gated selectors on the concatenated embeddings learnt on synthetic rows and applied to real ones.

Stage 1 (Algorithm 1, phase ``pretrain``): :mod:`.synthesis`. Stages 2 and 3 (Algorithm 2, phase
``train``): every mini-batch, the parties' encoders embed a batch of their synthetic rows; the
label holder's :class:`~.gates.SelectorEnsemble` learns its gates, predictors (and, through the
gradients it sends back, the encoders) from loss (5) on the synthetic labels; then the parties
embed a batch of real rows, the gates are frozen as indicators (equation 6) and loss (7) trains the
predictors and the encoders. The label holder is the paper's "targeted client as the server": no
label leaves it.

Which features (issue item 3; the mapping is ours): a component is kept when in at least half of
the real training rows some selector's indicator gate is open; each party then ranks its input
features against its kept components and keeps its top ``select_ratio`` for real (phase
``selection``); ``refit_epochs`` more epochs of stage 3 train on those features alone, and the
metrics reported are of that model (section V-B evaluates the selected features by training on
them).

The ranking (``rank``; issue 53, ours): by default (``explained``) the share of each feature's
variance, over the party's training rows, that its kept components explain linearly once the
feature's own first-order contribution to them is taken out (:func:`~.role.explained_scores`):
whether the *other* features make the components carry what this one carries. An independent
noise column scores ~0 whatever its weights. Until issue 53 (``path``) the weights of each
feature's paths to the kept components (:func:`~.role.path_scores`): on ``multiclass-synth`` they
put the injected noise at a mean rank percentile of .57-.60 against .44-.46 for the real columns
(chance .5). A likely cause (not isolated): Adam moves every weight by about the learning rate
whatever its gradient, and the encoder uses noise columns to fit its training rows. Measured
against the rule from the same trained models (``benchmarks/icafs/ranking_designs.py``; the table
in ``benchmarks/icafs/README.md``, "Which input features (issue 53)"): gradient x input and
gradient sensitivity of the loss under indicator gates, on training or on validation rows (the
latter would need the label holder to send the gradients of validation rows: a new message), the
first-order and the measured loss increase when a column is set to its mean, and the plain R^2 on
the components. At the defaults, seed 0, 3 parties, +50 % noise columns, before (``path``) ->
after (accuracy, share of the noise removed; vfl): breast cancer .982, 80 % -> .947, 100 % (.956);
digits .939, 100 % -> .922, 94 % (.947); USPS (3,000 rows) .928, 96 % -> .933, 100 % (.930);
``multiclass-synth`` .640, 63 % -> .677, 100 % (.527); ``digit-images`` .899, 79 % -> .917, 100 %
(.917) (docs/methods/icafs.md says how each was run). The rule needs no message beyond :class:`~.messages.SelectFeatures` and the
party's own rows: what the party tells the label holder is, as before, the count it keeps (and,
in the run's report, which features and their scores).

Ablations (Table VI, ``variant``): ``fixed-temp`` (``tau = 1``), ``embedding`` (an MLP on the
embeddings instead of the gates, trained like the gates on synthetic then real rows), ``no-fs``
(no selection module and no synthetic stage: a linear predictor on the embeddings, real rows only).

DP-SGD (Table V, ``dp_epsilon``; :mod:`.dp` states it exactly, the result's ``info["dp"]`` too):
each party's encoder on its real-row steps, Poisson-sampled batches, noise from OS entropy. It is
per party and per real training row, and only as if each row's gradient depended on that row
alone: stage 1, the critic features and embeddings of real rows, the synthetic-row steps, the top
model and the selection are not covered, so the run is not ``(epsilon, delta)``-DP.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from verticalfs.exceptions import ConfigError
from verticalfs.methods.base import Method, expect_holder_kind
from verticalfs.methods.icafs import dp as dpsgd
from verticalfs.methods.icafs.dp import dp_noise_multiplier  # noqa: F401  (its home until 2026-11-26)
from verticalfs.methods.icafs.gates import SelectorEnsemble
from verticalfs.methods.icafs.messages import (
    CodeGradients,
    CriticFeatures,
    CriticGradients,
    CriticRequest,
    FeaturesSelected,
    GeneratorGradients,
    GeneratorRequest,
    ICAFSSpec,
    SelectFeatures,
    Synthesize,
    Synthesized,
)
from verticalfs.methods.icafs.role import SYNTHETIC, ICAFSRole
from verticalfs.methods.icafs.stage1 import Stage1Cache
from verticalfs.methods.icafs.synthesis import HolderSynthesis, _block
from verticalfs.methods.registry import register
from verticalfs.nn.models import TopModel, load_shaped
from verticalfs.params import Constraints, Interval, Options
from verticalfs.training.batches import BatchPlan
from verticalfs.training.history import derive_seed
from verticalfs.training.split import SplitTrainer, TrainConfig, saved_embeddings
from verticalfs.transport.messages import At
from verticalfs.transport.node import request_all, send_all

VARIANTS = ("icafs", "fixed-temp", "embedding", "no-fs")


@dataclass
class ICAFSParams(TrainConfig):
    """ICAFS: federated synthesis, gated selectors on synthetic rows, training on real rows.

    Parameters
    ----------
    epochs : int
        Epochs of stages 2 and 3, ``T`` of equation (3) (100; the paper gives none).
    batch_size : int
        Mini-batch size of real and synthetic rows (64).
    lr : float
        Adam's learning rate of the encoders, gates and predictors (section V-C: 0.003).
    hidden : tuple of int
        The encoders' two hidden widths (section V-F: a three-layer perceptron; 64 each, ours).
    embedding_dim : int
        Embedding components per party (8).
    n_selectors : int
        ``N``, selectors in the ensemble (5, section V-L's choice).
    beta : float
        Weight of the gate penalty of equations (5) and (7) (section V-C: 1.2).
    gamma : float
        Final temperature of equation (3) (section V-C: up to 200).
    variant : str
        ``icafs``, or an ablation of Table VI: ``fixed-temp``, ``embedding``, ``no-fs``.
    select_ratio : float
        Share of each party's input features kept at the end (0.5, as the FedSDG-FS and VFLFS
        baselines keep).
    rank : str
        How each party ranks its input features against the kept components (ours; icafs.md
        selects components only): ``explained`` (the default since issue 53: the share of each
        feature's variance the kept components explain, :func:`~.role.explained_scores`) or
        ``path`` (the weights of its paths to them, :func:`~.role.path_scores`, the rule until
        then). Measured in the module docstring.
    refit_epochs : int
        Epochs of stage 3 on the selected features alone after the selection (10).
    synth_steps : int
        Iterations of Algorithm 1 (250; the paper gives none: "the number of iterations is small", section V-M).
    synth_batch : int
        Rows per synthesis iteration (500, CTGAN's; at most the training rows).
    n_synthetic : int
        Synthetic rows made at the end of stage 1 (0: as many as training rows).
    code_dim : int
        Width of the label holder's code per party (64).
    feature_dim : int
        Width of each party's critic features (32).
    channels : int
        Filters of the 3x3 convolutions of the synthesis networks (8; section V-E gives no number).
    arch : str
        ``conv`` (section V-E: 3x3 convolutions of stride 2 down in the critic, transposed ones up in
        the generator, for a party's record wider than 32 x 32; a narrower one keeps its full
        resolution, as ``conv-full``; the default since 2026-11-26), ``conv-full`` (the same four 3x3
        layers at the record's full resolution, the default until then, ~15x the cost of a stage-1
        iteration on ALLAML) or ``mlp`` (:mod:`.networks`).
    gan_lr : float
        Adam's learning rate of the synthesis networks (1e-3; CTGAN's 2e-4 learnt the label too slowly
        in 250 iterations, see :mod:`.synthesis`).
    max_modes : int
        Modes of each continuous column's variational Gaussian mixture (CTGAN's 10).
    critic_norm : str
        How each party's critic is kept tame: ``spectral`` (every weight spectrally normalised, the
        default) or ``layernorm`` (its output features LayerNorm-ed, the earlier default).
    aux_weight : float
        Weight of an auxiliary classifier on the label holder's critic (AC-GAN; 1); 0: none.
    dp_epsilon : float
        0: off; else DP-SGD (Opacus) on each party's encoder for its steps on real training rows
        (stages 2-3 and the refit), the real rows' batches Poisson-sampled at ``batch_size / n``,
        with the noise multiplier for which Opacus's RDP accountant gives ``(dp_epsilon,
        dp_delta)`` per party over those steps, with respect to adding or removing one real
        training row; noise from the operating system's entropy, never from ``seed`` (Table V:
        5, 10; the issue adds 20). This is *not* a guarantee for the run: it holds only if the
        gradient the label holder returns for a row depended on that row alone, and stage 1 (the
        GAN on the real rows), the critic features and the embeddings of real rows, the
        encoder's steps on synthetic rows, the top model and the selection are computed from the
        real rows without noise. The exact statement is in ``methods/icafs/dp.py`` and in the
        result's ``info["dp"]``.
    dp_delta : float
        delta of the DP-SGD accounting (Table V: 1e-5).
    dp_clip : float
        Per-sample gradient norm bound of DP-SGD (1.0).
    """

    epochs: int = 100
    batch_size: int = 64
    lr: float = 0.003
    hidden: tuple[int, ...] = (64, 64)
    embedding_dim: int = 8
    n_selectors: int = 5
    beta: float = 1.2
    gamma: float = 200.0
    variant: str = "icafs"
    select_ratio: float = 0.5
    rank: str = "explained"
    refit_epochs: int = 10
    synth_steps: int = 250
    synth_batch: int = 500
    n_synthetic: int = 0
    code_dim: int = 64
    feature_dim: int = 32
    channels: int = 8
    arch: str = "conv"
    gan_lr: float = 1e-3
    max_modes: int = 10
    critic_norm: str = "spectral"
    aux_weight: float = 1.0
    dp_epsilon: float = 0.0
    dp_delta: float = 1e-5
    dp_clip: float = 1.0

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "embedding_dim": [Interval(int, 1, None)],
        "n_selectors": [Interval(int, 1, None)],
        "beta": [Interval(float, 0, None)],
        "gamma": [Interval(float, 1, None)],
        "variant": [Options(*VARIANTS)],
        "select_ratio": [Interval(float, 0, 1, closed="right")],
        "rank": [Options("explained", "path")],
        "refit_epochs": [Interval(int, 0, None)],
        "synth_steps": [Interval(int, 0, None)],
        "synth_batch": [Interval(int, 1, None)],
        "n_synthetic": [Interval(int, 0, None)],
        "code_dim": [Interval(int, 1, None)],
        "feature_dim": [Interval(int, 1, None)],
        "channels": [Interval(int, 1, None)],
        "arch": [Options("conv", "conv-full", "mlp")],
        "gan_lr": [Interval(float, 0, None, closed="neither")],
        "max_modes": [Interval(int, 1, None)],
        "critic_norm": [Options("layernorm", "spectral")],
        "aux_weight": [Interval(float, 0, None)],
        "dp_epsilon": [Interval(float, 0, None)],
        "dp_delta": [Interval(float, 0, 1, closed="neither")],
        "dp_clip": [Interval(float, 0, None, closed="neither")],
    }


class PlainTop(nn.Module):
    """The ablations' predictor without gates, with the ensemble's call signature."""

    def __init__(self, p: int, n_outputs: int, hidden: tuple) -> None:
        super().__init__()
        self.net = TopModel(p, hidden, n_outputs, "relu")

    def forward(self, z, t=0.0, T=1.0, hard=False):
        return self.net(z), None


class ICAFSTrainer(SplitTrainer):
    """Algorithm 2 from the label holder (Algorithm 1 first, :meth:`synthesize`)."""

    def __init__(self, fed, method: str, params: ICAFSParams, *, seed: int, dp_noise: float = 0.0, **kwargs) -> None:
        self.params = params
        super().__init__(fed, method, TrainConfig.from_params(params), seed=seed, spec_class=ICAFSSpec,
                         spec_extra={"code_dim": int(params.code_dim), "feature_dim": int(params.feature_dim),
                                     "channels": int(params.channels), "arch": str(params.arch),
                                     "gan_lr": float(params.gan_lr), "max_modes": int(params.max_modes),
                                     "critic_norm": str(params.critic_norm),
                                     "synth_shuffle_seed": derive_seed(seed, "synthetic batches"),
                                     "dp_noise": float(dp_noise), "dp_clip": float(params.dp_clip),
                                     "rank": str(params.rank)}, **kwargs)
        self.use_synthetic = params.variant != "no-fs"
        self.y_syn: torch.Tensor | None = None
        self.synth_plan: BatchPlan | None = None
        self.stage_epochs = int(params.epochs)
        self.refitting = False
        self._t, self._T = 0, max(1, self.stage_epochs)  # position in the temperature schedule (on_epoch_begin)
        self.synthesis_info: dict = {}
        if dp_noise > 0:  # DP-SGD: the real rows' batches are Poisson samples, as the accountant assumes
            self.plan = dpsgd.PoissonPlan(self.plan.n, self.plan.batch_size, self.plan.shuffle_seed)

    def spec_for(self, party: str) -> ICAFSSpec:
        spec = super().spec_for(party)
        return dataclasses.replace(spec, synth_seed=derive_seed(self.seed, "synthesis", party))

    def make_top(self, d_in: int) -> nn.Module:
        p = self.params
        if p.variant in ("icafs", "fixed-temp"):
            return SelectorEnsemble(d_in, self.n_outputs, int(p.n_selectors), 1.0 if p.variant == "fixed-temp" else float(p.gamma))
        return PlainTop(d_in, self.n_outputs, tuple(p.hidden[-1:]) if p.variant == "embedding" else ())

    # ------------------------------------------------------------ stage 1
    def synthesize(self) -> None:
        """Algorithm 1 over the transport; every party ends holding its synthetic block.

        This loop is not an epoch of split training, so it does not run in
        :meth:`~verticalfs.training.split.SplitTrainer.train_epoch`: its ``synth_steps`` iterations
        are GAN steps, each drawing ``synth_batch`` real rows at random (no pass over the training
        rows, no agreed batch order), and each is two steps with their own messages and models, a
        critic step (:class:`CriticRequest` -> :class:`CriticFeatures`, :class:`CriticGradients`)
        and a generator step (:class:`GeneratorRequest`, :class:`GeneratorGradients` ->
        :class:`CodeGradients`), on the label holder's code generator and critic head rather than the
        top model on the parties' embeddings.
        """
        p, fed = self.params, self.fed
        t0 = time.perf_counter()
        b0 = self.ledger.total_bytes
        y = self.labels.y["train"].astype(np.int64)
        hs = HolderSynthesis(y, self.labels.n_classes, self.parties, code_dim=p.code_dim, feature_dim=p.feature_dim,
                             lr=p.gan_lr, batch_size=p.synth_batch, aux_weight=p.aux_weight,
                             seed=derive_seed(self.seed, "synthesis"))
        n, B = len(y), hs.batch
        n_syn = int(p.n_synthetic) or n
        self.fed.limit_tensor_elements(max(self.n_samples(s) for s in self.y) * max(self.embedding_dims.values())
                                       + n_syn * max(p.code_dim, p.feature_dim))
        proxies = [fed.proxy(q) for q in self.parties]
        losses = []
        for t in range(int(p.synth_steps)):
            at = At("pretrain", t)
            # critic step (Algorithm 1 lines 7-8 and 13-14)
            rows = np.sort(hs.rng.choice(n, B, replace=False)).astype(np.int64)
            yf = hs.labels(B)
            with torch.no_grad():
                codes = hs.split(hs.codes(yf, train=True))
            reps = request_all([(px, CriticRequest(rows=rows, codes=codes[k])) for k, px in enumerate(proxies)], at,
                               expect=CriticFeatures)
            Hr = hs.features([r.real for r in reps], B, "critic features of real rows")
            Hf = hs.features([r.fake for r in reps], B, "critic features of synthetic rows")
            loss_d = hs.critic_loss(Hr, y[rows], Hf, yf)
            hs.opt_d.zero_grad(set_to_none=True)
            loss_d.backward()
            hs.opt_d.step()
            gr, gf = hs.split_grad(Hr.grad), hs.split_grad(Hf.grad)
            send_all([(px, CriticGradients(real=gr[k], fake=gf[k])) for k, px in enumerate(proxies)], at)
            # generator step (lines 7, 9 and 13, 15)
            yg = hs.labels(B)
            C = hs.codes(yg, train=True)
            codes = hs.split(C)
            reps = request_all([(px, GeneratorRequest(codes=codes[k])) for k, px in enumerate(proxies)], at,
                               expect=CriticFeatures)
            Hf = hs.features([r.fake for r in reps], B, "critic features of synthetic rows")
            loss_g = hs.generator_loss(Hf, yg)
            loss_g.backward()
            g = hs.split_grad(Hf.grad)
            back = [r.codes for r in request_all([(px, GeneratorGradients(fake=g[k])) for k, px in enumerate(proxies)],
                                                 at, expect=CodeGradients)]
            GC = torch.cat([_block(c, (B, p.code_dim), "code gradients", q) for q, c in zip(self.parties, back, strict=True)], 1)
            hs.opt_g.zero_grad(set_to_none=True)
            C.backward(GC)
            hs.opt_g.step()
            losses.append((loss_d.item(), loss_g.item()))
            for cb in self.callbacks:
                cb.on_stage_step(self, "synthesis", t + 1, int(p.synth_steps))
        # the synthetic rows (line 17): labels at the training class frequencies
        at = At("pretrain", int(p.synth_steps))
        y_syn = hs.labels(n_syn)
        with torch.no_grad():
            codes = hs.split(hs.codes(y_syn, train=False))
        for k, (q, px) in enumerate(zip(self.parties, proxies, strict=True)):
            rep = px.request(Synthesize(codes=codes[k]), at, expect=Synthesized)
            if int(rep.n_rows) != n_syn:
                raise ConfigError(f"party {q!r} made {rep.n_rows} synthetic rows, expected {n_syn}")
        self.adopt_synthesis(y_syn, {"synthesis_seconds": time.perf_counter() - t0,
                                     "synthesis_bytes": int(self.ledger.total_bytes - b0),
                                     "synthesis_rows": n_syn,
                                     "synthesis_last_losses": list(losses[-1]) if losses else []})
        self.synthesis_holder = hs

    def adopt_synthesis(self, y_syn, info: dict) -> None:
        """Take ``y_syn`` as the labels of the synthetic rows (the parties' blocks, in the same row
        order, are each party's: :meth:`ICAFSRole.adopt_synthetic`), with the batch order of stage 2
        and ``info`` for :attr:`synthesis_info`. Algorithm 1 ends here, and so does a caller that
        kept the labels of an earlier run of the same stage 1 or puts others in their place."""
        y_syn = np.asarray(y_syn)
        if y_syn.ndim != 1 or len(y_syn) == 0 or y_syn.min() < 0 or y_syn.max() >= self.labels.n_classes:
            raise ConfigError(f"{self.method}: synthetic labels must be one class index in [0, "
                              f"{self.labels.n_classes}) per synthetic row, got shape {y_syn.shape}")
        p, n_syn = self.params, len(y_syn)
        self.fed.limit_tensor_elements(max(self.n_samples(s) for s in self.y) * max(self.embedding_dims.values())
                                       + n_syn * max(p.code_dim, p.feature_dim))
        self.y_syn = torch.from_numpy(y_syn.astype(np.int64))
        self.synth_plan = BatchPlan(n_syn, self.config.batch_size, derive_seed(self.seed, "synthetic batches"))
        self.synthesis_info = dict(info)

    # ------------------------------------------------------ stages 2 and 3
    def _blocks(self, split: str, epoch: int, batch: int, at: At, n: int) -> torch.Tensor:
        blocks = self.forward_batch(epoch, batch, at, n, split=split)
        return torch.from_numpy(np.concatenate(blocks, 1) if len(blocks) > 1 else blocks[0]).requires_grad_(True)

    def on_epoch_begin(self, phase: str) -> None:
        """The epoch's position ``t`` of ``T`` in the temperature schedule of equation (3)."""
        self._t, self._T = min(self.epoch, self.stage_epochs), max(1, self.stage_epochs)

    def train_step(self, at: At, rows: np.ndarray, y: torch.Tensor) -> float:
        """One batch of Algorithm 2: a step on a batch of synthetic rows (lines 4-10; not when
        refitting or in the ``no-fs`` ablation), then a step on the real rows ``rows`` with the gates
        frozen as indicators (lines 12-16). Returns loss (7) on the real rows."""
        top, opt, p = self.top, self.optimizer, self.params
        epoch, b = at.round, at.step
        t, T = self._t, self._T
        if self.use_synthetic and not self.refitting:  # Algorithm 2 lines 4-10
            sp = self.synth_plan
            sb = b % sp.n_batches
            srows = sp.rows(epoch, sb)
            H = self._blocks(SYNTHETIC, epoch, sb, at, len(srows))
            logits, alpha = top(H, t, T)
            loss = F.cross_entropy(logits, self.y_syn.index_select(0, torch.from_numpy(srows)))
            if alpha is not None:
                loss = loss + SelectorEnsemble.penalty(alpha, p.beta)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            self.check_loss(loss.item(), at)
            self.backward_batch(H.grad.numpy(), at)
        # lines 12-16: indicator gates, frozen; predictors and encoders learn from real rows
        if len(rows) == 0:  # an empty Poisson sample (DP-SGD): no step; its share of delta is counted (dp.py)
            return 0.0
        H = self._blocks("train", epoch, b, at, len(rows))
        logits, alpha = top(H, t, T, hard=True)
        loss = F.cross_entropy(logits, y)
        value = loss.item() + (float(SelectorEnsemble.penalty(alpha, p.beta)) if alpha is not None else 0.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # the penalty of (7) is constant in every parameter under indicator gates
        if isinstance(top, SelectorEnsemble):
            top.w.grad = None
        opt.step()
        self.check_loss(value, at)
        self.backward_batch(H.grad.numpy(), at)
        return value

    def begin_refit(self) -> None:
        """Stage 3 on the selected features alone from here on: real rows only (no synthetic step),
        with a fresh optimizer of the top model."""
        self.refitting = True
        self.rebuild_top_optimizer()

    def output(self, H: np.ndarray) -> np.ndarray:
        top = self.top
        top.eval()
        with torch.no_grad():
            return top(torch.from_numpy(np.ascontiguousarray(H, dtype=np.float32)), hard=True)[0].numpy()

    def entry_extras(self) -> dict:
        if isinstance(self.top, SelectorEnsemble):
            return {"temperature": self.top.temperature(min(self.epoch, self.stage_epochs), max(1, self.stage_epochs))}
        return {}

    # ------------------------------------------------------------ selection
    def kept_components(self) -> np.ndarray:
        """Components open for some selector in at least half of the real training rows."""
        if not isinstance(self.top, SelectorEnsemble):
            return np.ones(sum(self.embedding_dims[q] for q in self.parties), dtype=bool)
        H = torch.from_numpy(self.embeddings("train", phase="selection"))
        with torch.no_grad():
            return (self.top.selected(H) >= 0.5).numpy()

    def select_features(self) -> dict:
        kept = self.kept_components()
        at = At("selection", self.epoch)
        start, per = 0, {}
        for q in self.parties:
            d = self.embedding_dims[q]
            rep = self.fed.proxy(q).request(SelectFeatures(components=kept[start:start + d].copy(),
                                                           ratio=float(self.params.select_ratio)), at,
                                            expect=FeaturesSelected)
            per[q] = int(rep.n_features)
            start += d
        return {"components_kept": int(kept.sum()), "components": int(kept.size), "features_kept": per}


def saved_top_output(holder: dict, H: np.ndarray) -> np.ndarray:
    """A saved ICAFS model's output on concatenated embeddings ``H`` (indicator gates, equation 6)."""
    variant = holder.get("variant")
    if variant not in VARIANTS:
        raise ConfigError(f"the saved ICAFS model names an unknown variant {variant!r}")
    p = sum(int(d) for d in holder["embedding_dims"].values())
    c = int(holder["n_outputs"])
    if variant in ("icafs", "fixed-temp"):
        top = SelectorEnsemble(p, c, int(holder["n_selectors"]))
    else:
        top = PlainTop(p, c, tuple(holder["hidden"][-1:]) if variant == "embedding" else ())
    load_shaped(top, holder["top_state"])
    top.eval()
    with torch.no_grad():
        return top(torch.from_numpy(np.ascontiguousarray(H, dtype=np.float32)), hard=True)[0].numpy()


@register
class ICAFS(Method):
    """ICAFS (icafs.md Algorithms 1 and 2); with ``dp_epsilon``, DP-SGD on each party's encoder's
    real-row steps, stated with what it does not cover in ``info_["dp"]`` (:mod:`.dp`)."""

    name = "icafs"
    summary = ("ICAFS: federated conditional WGAN-GP synthesis, an ensemble of gated selectors on the concatenated "
               "embeddings learnt on synthetic rows, training on real rows.")
    paper = "icafs.md (Jin et al., Algorithms 1 and 2)"
    Params = ICAFSParams
    Role = ICAFSRole
    test_params = {"epochs": 3, "hidden": (16, 8), "synth_steps": 3, "synth_batch": 64, "channels": 4,
                   "code_dim": 8, "feature_dim": 8, "refit_epochs": 1, "max_modes": 3}

    def __init__(self, *, stage1_cache: Stage1Cache | None = None, **kwargs) -> None:
        """``stage1_cache``: a :class:`~.stage1.Stage1Cache` through which in-process runs that would
        compute the same stage 1 compute it once (:mod:`.stage1`); the rest as :class:`Method`."""
        super().__init__(**kwargs)
        if stage1_cache is not None and not isinstance(stage1_cache, Stage1Cache):
            raise ConfigError(f"{self.name}: stage1_cache must be a Stage1Cache, got {type(stage1_cache).__name__}")
        self.stage1_cache = stage1_cache

    def check(self, fed) -> None:
        p = self.params
        if fed.labels.task == "regression":
            raise ConfigError(f"{self.name}: the synthesis is conditioned on class labels; the task is {fed.labels.task!r} "
                              "(use a classification target)")
        if p.variant not in VARIANTS:
            raise ConfigError(f"{self.name}: variant must be one of {VARIANTS}, got {p.variant!r}")
        if p.rank not in ("explained", "path"):
            raise ConfigError(f"{self.name}: rank must be 'explained' or 'path', got {p.rank!r}")
        if p.arch not in ("conv", "conv-full", "mlp"):
            raise ConfigError(f"{self.name}: arch must be 'conv', 'conv-full' or 'mlp', got {p.arch!r}")
        if p.critic_norm not in ("layernorm", "spectral"):
            raise ConfigError(f"{self.name}: critic_norm must be 'layernorm' or 'spectral', got {p.critic_norm!r}")
        if not 0.0 <= float(p.aux_weight) < float("inf"):
            raise ConfigError(f"{self.name}: aux_weight must be a finite number >= 0, got {p.aux_weight!r}")
        if len(p.hidden) != 2:
            raise ConfigError(f"{self.name}: the encoders are three-layer perceptrons (section V-F): give two hidden "
                              f"widths, got hidden={p.hidden}")
        for name in ("n_selectors", "synth_batch", "code_dim", "feature_dim", "channels", "max_modes"):
            if int(getattr(p, name)) < 1:
                raise ConfigError(f"{self.name}: {name} must be >= 1, got {getattr(p, name)}")
        if (p.synth_steps < 0 or p.n_synthetic < 0 or p.refit_epochs < 0 or not 0 < p.select_ratio <= 1
                or p.beta < 0 or not p.gamma >= 1 or not p.gan_lr > 0):
            raise ConfigError(f"{self.name}: need synth_steps, n_synthetic, refit_epochs >= 0, 0 < select_ratio <= 1, "
                              f"beta >= 0, gamma >= 1 and gan_lr > 0; got {p.synth_steps}, {p.n_synthetic}, "
                              f"{p.refit_epochs}, {p.select_ratio}, {p.beta}, {p.gamma}, {p.gan_lr}")
        if fed.n_samples("train") < 2:
            raise ConfigError(f"{self.name}: needs at least 2 training rows")
        if p.dp_epsilon < 0 or not 0 < p.dp_delta < 1 or not p.dp_clip > 0:
            raise ConfigError(f"{self.name}: need dp_epsilon >= 0 (0 = off), 0 < dp_delta < 1 and dp_clip > 0; got "
                              f"{p.dp_epsilon}, {p.dp_delta}, {p.dp_clip}")
        if p.dp_epsilon > 0:
            try:
                import opacus  # noqa: F401
            except ImportError:
                raise ConfigError(f"{self.name}: dp_epsilon needs Opacus: pip install 'verticalfs[dp]'") from None
            spent = dpsgd.empty_batch_delta(p, fed.n_samples("train"))
            if spent > p.dp_delta / 2:
                raise ConfigError(f"{self.name}: with batch_size={p.batch_size} of {fed.n_samples('train')} training rows, "
                                  f"empty Poisson batches would take {spent:.3g} of dp_delta={p.dp_delta}; raise "
                                  "batch_size or dp_delta")
        if self.stage1_cache is not None:
            self.stage1_cache.check(fed)

    def fit(self, fed) -> ICAFS:
        self.check(fed)
        p = self.params
        dp, noise = {}, 0.0
        if p.dp_epsilon > 0:
            n = fed.n_samples("train")
            noise, steps = dpsgd.dp_noise_multiplier(p, n)
            dp = {"dp": dpsgd.guarantee(p, n, len(fed.party_names), noise, steps)}
        trainer = ICAFSTrainer(fed, self.name, p, seed=self.seed, callbacks=self.callbacks,
                               entry_hook=self.entry_hook, codec=self.codec or "float32",
                               dp_noise=noise, checkpoints=self.checkpoints)
        trainer.setup()
        if trainer.use_synthetic:
            if self.stage1_cache is None:
                trainer.synthesize()
            else:
                self.stage1_cache.synthesize(trainer)
        trainer.fit(phase="train")
        sel = trainer.select_features()
        trainer.begin_refit()
        if p.refit_epochs:
            trainer.fit(epochs=int(p.refit_epochs), phase="train")
        self.finish_training(fed, trainer, {**trainer.synthesis_info, **sel, **dp})
        return self

    # --------------------------------------------------------- saved models
    def export_holder(self) -> dict:
        """The label holder's part of a saved model (kind ``"icafs"``): the parties' embedding
        widths, the variant and the gated selectors' (or plain top model's) state."""
        trainer = self.trainer_
        if trainer is None or trainer.top is None:
            raise ConfigError(f"{self.name} has no model to save (fit it first)")
        p = self.params
        return {"kind": "icafs", "parties": list(trainer.parties),
                "embedding_dims": {q: int(d) for q, d in trainer.embedding_dims.items()},
                "variant": str(p.variant), "n_selectors": int(p.n_selectors),
                "hidden": [int(h) for h in p.hidden], "n_outputs": int(trainer.n_outputs),
                "top_state": {k: v.detach().clone() for k, v in trainer.top.state_dict().items()}}

    @classmethod
    def predict_from_holder(cls, holder: dict, fed, split: str) -> np.ndarray:
        """Every party's embeddings, then the saved selectors under indicator gates (equation 6)."""
        expect_holder_kind(holder, "icafs", cls.name)
        return saved_top_output(holder, saved_embeddings(holder, fed, split))


__all__ = ["ICAFS", "ICAFSParams", "ICAFSTrainer", "VARIANTS"]
