"""The party's side of ICAFS: its part of the federated synthesis (:mod:`.synthesis`), its encoder
(the split bottom model: icafs.md section V-F's three-layer perceptron with ReLU), its synthetic
block as a ``synthetic`` split for stage 2, and the selection of its input features at the end.

The party holds its own columns, its synthetic block, ``G_k``, ``D_k`` and its encoder; the label
holder never sees a real row, a synthetic block, or a weight of these.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.methods.icafs import dp
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
from verticalfs.methods.icafs.synthesis import PartySynthesis
from verticalfs.party import Context, handles, refusal
from verticalfs.training.batches import BatchPlan
from verticalfs.training.split import SplitRole, check_batch
from verticalfs.trust import dp_steps_allowed

SYNTHETIC = "synthetic"


def path_scores(model, components: np.ndarray) -> np.ndarray:
    """Per input feature, the L2 norm over the kept ``components`` of ``|W_L| ... |W_1|`` (the
    absolute weights of every path from the feature to a kept component): icafs.md ranks embedding
    components only; this mapping to input features is ours."""
    with torch.no_grad():
        layers = model.linears
        A = layers[-1].weight.abs()[torch.from_numpy(np.flatnonzero(components))]
        for lin in reversed(layers[:-1]):
            A = A @ lin.weight.abs()
        return torch.linalg.vector_norm(A, dim=0).numpy().astype(np.float64)


def explained_scores(model, X: torch.Tensor, components: np.ndarray, own: bool = False,
                     block: int = 1 << 14) -> np.ndarray:
    """Per input feature ``j``, the share of its variance over the rows ``X`` that the kept
    embedding ``components`` explain linearly once the feature's own contribution to them is taken
    out: ``c_j' C_HH^+ c_j / var_j``, with ``C_HH`` the covariance of the kept components of
    ``model(X)``, ``var_j`` the feature's variance (0 for a constant feature) and ``c_j`` the
    components' covariance with the feature minus, to first order, the part that runs through the
    feature itself: ``cov(H, x_j) - mean_r(dH_r/dx_rj (x_rj - mean_j)^2)``. ``own=True`` keeps that
    part (the plain R^2 of the feature on the components). icafs.md ranks embedding components only;
    this mapping to input features is ours (issue 53; why this rule, and what was measured against
    it, in :mod:`.method`).

    What it measures: whether the feature carries the signal the label holder's gates kept,
    judged by the *other* features. A feature the components are built from, or one that shares
    variance with what they carry (a redundant copy, a neighbouring pixel, another feature whose
    mean follows the class), keeps a large share. An independent noise column is independent of
    everything else the components are made of, so its share is ~0 (of the order ``k / n``) however
    large its weights. The weights (:func:`path_scores`) ranked noise columns near chance on
    ``multiclass-synth`` (likely because Adam moves every weight by about the learning rate whatever
    its gradient, and the encoder uses noise columns to fit its training rows). A feature that
    alone carries a signal no other feature shares scores low too: the rule trades that case for
    noise columns.

    Two passes over ``X`` in blocks of ``block`` rows (means, then sums of products in float64, the
    Jacobian's diagonal terms by one backward pass per kept component), so a party of millions of
    rows (a memory-mapped split) holds one block's activations at a time."""
    cols = torch.from_numpy(np.flatnonzero(components))
    n, d, k = X.shape[0], X.shape[1], len(cols)
    if n < 2 or k == 0:
        return np.zeros(d)
    mx = torch.zeros(d, dtype=torch.float64)
    for a in range(0, n, block):
        mx += X[a:a + block].double().sum(0)
    mx /= n
    sxx = torch.zeros(d, dtype=torch.float64)
    sh, shh, shx = (torch.zeros(k, dtype=torch.float64), torch.zeros(k, k, dtype=torch.float64),
                    torch.zeros(k, d, dtype=torch.float64))
    through = torch.zeros(k, d, dtype=torch.float64)  # sum_r dH_rc/dx_rj (x_rj - mean_j)^2
    was_training = model.training
    model.eval()
    try:
        for a in range(0, n, block):
            Xb = X[a:a + block].detach().clone().requires_grad_(not own)
            with torch.set_grad_enabled(not own):
                Hb = model(Xb).index_select(1, cols)
            Xc = Xb.detach().double() - mx
            if not own:
                for c in range(k):
                    (g,) = torch.autograd.grad(Hb[:, c].sum(), Xb, retain_graph=c < k - 1)
                    through[c] += (g.double() * Xc * Xc).sum(0)
            Hd = Hb.detach().double()
            sxx += (Xc * Xc).sum(0)
            sh += Hd.sum(0)
            shh += Hd.T @ Hd
            shx += Hd.T @ Xc
    finally:
        model.train(was_training)
    mh = sh / n
    var = sxx / n
    chh = shh / n - torch.outer(mh, mh)
    chx = shx / n - through / n  # (X is centred: the components' mean drops out)
    explained = (chx * (torch.linalg.pinv(chh, hermitian=True, rtol=1e-10) @ chx)).sum(0)
    # a constant feature (variance 0 up to rounding) explains nothing and is explained by nothing
    live = var > 1e-12 * torch.clamp(var.max(), min=1e-300)
    share = torch.where(live, explained / torch.where(live, var, torch.ones_like(var)), torch.zeros_like(var))
    return share.clamp(0.0, 1.0).numpy()


class ICAFSRole(SplitRole):
    """A party of ``icafs`` (and of its ablations)."""

    spec: ICAFSSpec
    party_seeds = ("seed", "synth_seed")  # its encoder and its synthesis networks
    party_seed_bits = {"synth_seed": 32}  # (its synthesis seeds numpy and scikit-learn: 32 bits)
    dp_capable = True  # DP-SGD on its encoder's real-row steps (a policy's max_epsilon admits it)
    #: its DP-SGD module (made at the first real-row step with ``dp_epsilon > 0``)
    dp_module: Any = None

    def __init__(self, data, spec: ICAFSSpec, ctx: Context) -> None:
        super().__init__(data, spec, ctx)
        self.synth: PartySynthesis | None = None
        self.synthetic: torch.Tensor | None = None
        self.synth_plan: BatchPlan | None = None
        self.scores: np.ndarray | None = None
        #: the path scores of all of the party's inputs when it selected (its ranking; None before)
        self.ranking_scores: np.ndarray | None = None
        self._split = "train"
        self.dp_optimizer = None
        #: noisy steps the party's own accountant allows (its policy's max_epsilon; None: no limit)
        self.dp_steps_left: int | None = None
        self._max_eps: float | None = None  # the party's max_epsilon, for its refusal
        if float(spec.dp_noise) > 0:
            # the real rows' batches: Poisson samples, as the accountant assumes (dp.PoissonPlan)
            self.plan = dp.PoissonPlan(self.plan.n, int(spec.batch_size), int(spec.shuffle_seed))
            self._make_private()
            policy = ctx.policy
            if policy is not None:
                self._max_eps = policy.max_epsilon
                self.dp_steps_left = dp_steps_allowed(policy, self.name, float(spec.dp_noise), self.plan.rate,
                                                      self.plan.n_batches)

    # ------------------------------------------------------------ DP-SGD
    def _make_private(self) -> None:
        """Table V's DP-SGD on the encoder's steps on real rows: Opacus's per-sample gradients and
        its optimizer (clipping at ``dp_clip``, Gaussian noise of ``dp_noise`` times that, Opacus's
        ``secure_mode`` noise). The label holder chose ``dp_noise`` for the run's epsilon; the
        noise comes from the operating system's entropy (:func:`.dp.noise_generator`, reseeded
        before every step in :meth:`step`), never from the seed in the spec. The steps on
        synthetic rows use the plain optimizer: they are not DP (see :mod:`.dp`)."""
        try:
            from opacus import GradSampleModule
            from opacus.optimizers import DPOptimizer
        except ImportError as exc:  # pragma: no cover - opacus is in the dev extra
            raise ProtocolError(f"party {self.name!r}: DP-SGD needs Opacus: pip install 'verticalfs[dp]'") from exc
        s = self.spec
        old = self.dp_module
        if old is not None:
            old._close()
        self.dp_module = GradSampleModule(self.model, loss_reduction="mean")
        self.dp_optimizer = DPOptimizer(self.make_optimizer(), noise_multiplier=float(s.dp_noise),
                                        max_grad_norm=float(s.dp_clip), expected_batch_size=int(s.batch_size),
                                        generator=dp.noise_generator(), secure_mode=True)

    def step(self, out: torch.Tensor, g: torch.Tensor) -> None:
        if self.dp_optimizer is None:
            return super().step(out, g)
        private = self._split == "train"
        opt = self.dp_optimizer if private else self.optimizer
        self.dp_optimizer.zero_grad(set_to_none=True)
        self.optimizer.zero_grad(set_to_none=True)
        with warnings.catch_warnings():  # the inputs need no gradient: Opacus's hooks say so each step
            warnings.filterwarnings("ignore", "Full backward hook is firing")
            out.backward(g)
        if private:
            if self.dp_steps_left is not None:  # the party's own accountant (max_epsilon), not the label holder's
                if self.dp_steps_left <= 0:
                    self.dp_optimizer.zero_grad(set_to_none=True)
                    raise refusal(self.name, "max_epsilon", "its value" if self._max_eps is None else self._max_eps,
                                  "take another noisy step: its accountant's epsilon would exceed the policy",
                                  "end the training, or raise it")
                self.dp_steps_left -= 1
            self.dp_optimizer.generator.manual_seed(dp.noise_seed())  # a fresh key from OS entropy
        opt.step()
        if not private:
            self.dp_optimizer.zero_grad(set_to_none=True)  # per-sample gradients of synthetic rows
        self.post_step()

    # ------------------------------------------------------------ stage 1
    def _synthesis(self) -> PartySynthesis:
        if self.synth is None:
            s = self.spec
            self.synth = PartySynthesis(self.data.X("train").numpy().astype(np.float64), name=self.name,
                                        code_dim=s.code_dim, feature_dim=s.feature_dim, channels=s.channels,
                                        arch=s.arch, lr=s.gan_lr, max_modes=s.max_modes, seed=int(s.synth_seed),
                                        critic_norm=s.critic_norm)
        return self.synth

    @handles(CriticRequest)
    def on_critic_request(self, msg: CriticRequest, ctx: Context) -> CriticFeatures:
        real, fake = self._synthesis().critic_features(msg.rows, msg.codes)
        return CriticFeatures(real=real, fake=fake)

    @handles(CriticGradients)
    def on_critic_gradients(self, msg: CriticGradients, ctx: Context) -> None:
        self._synthesis().critic_step(msg.real, msg.fake)
        return None

    @handles(GeneratorRequest)
    def on_generator_request(self, msg: GeneratorRequest, ctx: Context) -> CriticFeatures:
        fake = self._synthesis().generator_features(msg.codes)
        return CriticFeatures(real=np.zeros((0, fake.shape[1]), dtype=np.float32), fake=fake)

    @handles(GeneratorGradients)
    def on_generator_gradients(self, msg: GeneratorGradients, ctx: Context) -> CodeGradients:
        return CodeGradients(codes=self._synthesis().generator_step(msg.fake))

    @handles(Synthesize)
    def on_synthesize(self, msg: Synthesize, ctx: Context) -> Synthesized:
        X = self._synthesis().synthesize(msg.codes)
        self.adopt_synthetic(torch.from_numpy(X))
        return Synthesized(n_rows=int(X.shape[0]))

    def adopt_synthetic(self, X: torch.Tensor) -> None:
        """Take ``X`` (rows x the columns in use, as ``data.X("train")`` the synthesis fitted) as this
        party's synthetic block for stage 2, with its batch order. Algorithm 1 ends here, and so
        does a caller that kept the block of an earlier run of the same stage 1 or puts another
        block in its place."""
        if X.ndim != 2 or X.shape[1] != len(self.data.kept):
            raise ConfigError(f"party {self.name!r}: a synthetic block of shape {tuple(X.shape)} for its "
                              f"{len(self.data.kept)} columns in use; give one row per synthetic row and one "
                              "column per column in use")
        self.synthetic = X
        self.synth_plan = BatchPlan(X.shape[0], int(self.spec.batch_size), int(self.spec.synth_shuffle_seed))

    # ------------------------------------------------------ stages 2 and 3
    def rows(self, split: str, epoch: int, batch: int) -> torch.Tensor:
        self._split = split
        if split != SYNTHETIC:
            return super().rows(split, epoch, batch)
        if self.synthetic is None:
            raise ProtocolError(f"party {self.name!r}: synthetic rows asked for before the synthesis (Synthesize)")
        X = self.synthetic
        if batch >= 0:
            check_batch(self.name, split, batch, self.synth_plan)
            X = X.index_select(0, torch.from_numpy(self.synth_plan.rows(epoch, batch)))
        return X

    @handles(SelectFeatures)
    def on_select_features(self, msg: SelectFeatures, ctx: Context) -> FeaturesSelected:
        comp = np.asarray(msg.components)
        width = int(self.model.n_outputs)
        if comp.dtype != bool or comp.shape != (width,):
            raise ProtocolError(f"party {self.name!r}: SelectFeatures.components must be a bool mask of {width} "
                                f"embedding components, got {comp.dtype} {comp.shape}")
        ratio = float(msg.ratio)
        if not 0 < ratio <= 1:
            raise ProtocolError(f"party {self.name!r}: SelectFeatures.ratio must lie in (0, 1], got {ratio}")
        comp = comp if comp.any() else np.ones(width, dtype=bool)
        rank = str(self.spec.rank)
        if rank == "explained":  # the default since issue 53 (ours): explained_scores
            dpm = self.dp_module
            if dpm is not None:  # DP-SGD's per-sample hooks: not for the scoring's backward passes
                dpm.disable_hooks()
            try:
                scores = explained_scores(self.model, self.data.X("train"), comp)
            finally:
                if dpm is not None:
                    dpm.enable_hooks()
        elif rank == "path":  # the rule until then: the weights' paths
            scores = path_scores(self.model, comp)
        else:
            raise ProtocolError(f"party {self.name!r}: ICAFSSpec.rank must be 'explained' or 'path', got {rank!r}")
        self.ranking_scores = scores  # of every input, before the selection (benchmarks/icafs/noise_ranking.py)
        d = len(scores)
        k = max(1, int(round(ratio * d)))
        keep = np.sort(np.argsort(-scores, kind="stable")[:k])
        self.scores = scores[keep]
        self.drop_inputs(keep)
        if self.synthetic is not None:
            self.synthetic = self.synthetic[:, torch.from_numpy(keep)].contiguous()
        if self.dp_optimizer is not None:
            self._make_private()  # the input layer is new: per-sample hooks and state again
        return FeaturesSelected(n_features=int(len(keep)))

    def feature_scores(self) -> np.ndarray | None:
        """The ranking scores of the kept features (:func:`explained_scores`, or :func:`path_scores`
        with ``rank="path"``), once the party has selected."""
        return self.scores
