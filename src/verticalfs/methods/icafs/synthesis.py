"""ICAFS stage 1: federated conditional WGAN-GP synthesis (icafs.md section IV-A, Algorithm 1).

Algorithm 1 trains, per client, a local generator ``G_k`` and discriminator ``D_k`` on the client's
real columns, and at the server a global generator ``G_s`` and discriminator ``D_s`` on the
concatenation ``[x~_1, ..., x~_K, y~]`` of the clients' synthetic blocks with the labels used to
synthesise them; stage 2 uses synthetic rows of *all* clients together with synthetic labels. For
those rows to be rows (one synthetic individual across the clients, with a label that goes with
its features), and for labels to condition the synthesis while "real rows and real labels never
leave their owner", we read the algorithm as GTV (Zhao et al. 2023, the paper's reference [31],
which section IV-A names as its inspiration):

- The label holder's ``G_s`` maps noise ``xi`` and the conditional vector (the one-hot synthetic
  label ``y~``) to one code per client; client ``k``'s ``G_k`` turns its code into its block
  ``x~_k`` (section V-E's 4-layer convolutional generator, CTGAN's output activations) in the
  mode-specific representation of its own columns (:class:`~.transform.ModeSpecificNormalizer`).
  So the blocks of one row share ``xi`` and ``y~``.
- Client ``k``'s ``D_k`` (section V-E's convolutional critic) maps a block, real or synthetic, to
  features; the label holder's ``D_s`` scores the concatenated features with the label: the real
  label for real rows (drawn uniformly, the same rows at every client), ``y~`` for synthetic ones.
  WGAN-GP: the critic maximises ``E[D(real)] - E[D(fake)]`` (lines 8 and 14), the generators
  minimise ``-E[D(fake)]`` (lines 9 and 15); the gradient penalty is taken on ``D_s``'s input (the
  concatenated features and the label). WGAN-GP's own penalty is on the critic's input (the
  records) and needs a second-order exchange across the parties (``||grad_x D||^2 = sum_k
  ||J_k^T g_k||^2`` with ``g_k`` from ``D_s``, and its derivative back through both), several times
  a party's critic step. Instead (``critic_norm="spectral"``, the default) every weight of ``D_k``
  is spectrally normalised (Miyato et al. 2018), which bounds each layer's gain locally with one
  power iteration per step, and ``D_s`` carries an auxiliary classifier (AC-GAN, Odena et al.
  2017; ``aux_weight`` 1): cross-entropy of the real labels on real rows for the critic, of the
  synthetic labels on synthetic rows for the generators, both at the label holder. The
  alternative ``critic_norm="layernorm"`` (``D_k``'s output features LayerNorm-ed) bounds the
  features, not the gradients, so it does not hold the whole critic Lipschitz. Adam runs at
  ``gan_lr`` (1e-3, above CTGAN's 2e-4). The measurements behind these choices are in
  ``benchmarks/icafs/README.md`` ("Stage 1's critic: the measurements behind the defaults").
- Each iteration updates the clients' parts (Step 1) and the label holder's parts (Step 2) from
  the same losses. At the end the label holder draws the synthetic labels (the training class
  frequencies) and codes; every client makes its block, decodes it to its own columns
  (:meth:`~.transform.ModeSpecificNormalizer.inverse_transform`) and keeps it: stage 2's
  ``X~_k``. The label holder keeps ``Y~``.

What crosses (all on the ledger, phase ``pretrain``): codes of synthetic rows (holder -> party),
critic features of real and synthetic blocks (party -> holder), their gradients (holder ->
party), gradients for the codes (party -> holder), and indices of real training rows drawn
uniformly. No real row, no real label, no synthetic block leaves its owner.

Interpretations beyond the GTV reading (ours): CTGAN's training-by-sampling over a client's own
columns is not used for the conditional vector, because the real rows of one critic batch must be
the same rows at every client; a client choosing rows by its own columns' categories would be
unaligned, and the label holder choosing them by class would tell the clients which rows share a
class (how often a row is drawn reveals its class frequency). The conditional vector is the label,
which only the label holder sees. Adam with betas ``(0.5, 0.9)`` (CTGAN's) at ``lr = 1e-3`` (CTGAN's
2e-4 learnt the label too slowly for 250 iterations, above); batch 500; gradient-penalty weight 10.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from verticalfs.exceptions import ProtocolError
from verticalfs.methods.icafs.networks import Critic, Generator, gradient_penalty
from verticalfs.methods.icafs.transform import ModeSpecificNormalizer
from verticalfs.nn.models import seeded

#: Adam's betas of every synthesis network (CTGAN's)
BETAS = (0.5, 0.9)


def _block(a, shape: tuple, what: str, party: str) -> torch.Tensor:
    """An untrusted float block as float32, its shape and finiteness checked."""
    a = np.asarray(a)
    if a.dtype.kind != "f" or tuple(a.shape) != tuple(shape):
        raise ProtocolError(f"ICAFS synthesis, party {party!r}: {what} must be a float array of shape {shape}, got "
                            f"{a.dtype} {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ProtocolError(f"ICAFS synthesis, party {party!r}: {what} holds NaN or infinite values")
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


class PartySynthesis:
    """A client's side of Algorithm 1: its representation, ``G_k``, ``D_k`` and their optimizers."""

    def __init__(self, X: np.ndarray, *, name: str, code_dim: int, feature_dim: int, channels: int, arch: str,
                 lr: float, max_modes: int, seed: int, critic_norm: str = "spectral") -> None:
        self.name = name
        if critic_norm not in ("layernorm", "spectral"):
            raise ProtocolError(f"ICAFS synthesis, party {name!r}: critic_norm must be 'layernorm' or 'spectral', "
                                f"got {critic_norm!r}")
        self.code_dim, self.feature_dim = int(code_dim), int(feature_dim)
        self.norm = ModeSpecificNormalizer(max_modes=max_modes, seed=seed).fit(X)
        self.Z = torch.from_numpy(self.norm.transform(X))
        pos, alphas = 0, []
        for c in self.norm.columns:
            if c.kind == "continuous":
                alphas.append(pos)
            pos += c.width
        self.alpha_idx = torch.as_tensor(alphas, dtype=torch.long)
        self.spans = self.norm.spans()
        # every one-hot position, in the order of the blocks (spans), and the same positions grouped
        # by block width: the output activations are one softmax per width over a rows x blocks x
        # width view (a handful of widths, <= max_modes + categories; no loop over columns, no
        # scatter), written back by one index_copy (a loop over blocks is slow for thousands of
        # columns, and each slice assignment copies the whole gradient in backward)
        starts = np.array([a for a, _ in self.spans], dtype=np.int64)
        widths = np.array([w for _, w in self.spans], dtype=np.int64)
        seg = np.repeat(np.arange(len(widths)), widths)
        first = np.cumsum(widths) - widths  # each block's first entry in the span-ordered noise
        self.onehot_idx = torch.from_numpy(starts[seg] + np.arange(len(seg)) - first[seg])
        pos, noise_j, self.groups = [], [], []
        for w in np.unique(widths):
            blocks = np.flatnonzero(widths == w)
            self.groups.append((int(sum(len(p) for p in pos)), len(blocks), int(w)))
            pos.append((starts[blocks, None] + np.arange(w)).ravel())
            noise_j.append((first[blocks, None] + np.arange(w)).ravel())
        self.soft_pos = torch.from_numpy(np.concatenate(pos) if pos else np.zeros(0, np.int64))
        self.soft_noise = torch.from_numpy(np.concatenate(noise_j) if noise_j else np.zeros(0, np.int64))
        width = self.norm.output_width
        self.G = seeded(seed, lambda: Generator(self.code_dim, 0, width, arch=arch, hidden=channels))
        self.D = seeded(seed + 1, lambda: Critic(width, 0, arch=arch, hidden=channels, out_dim=self.feature_dim,
                                                 spectral=critic_norm == "spectral"))
        self.opt_g = torch.optim.Adam(self.G.parameters(), lr=lr, betas=BETAS)
        self.opt_d = torch.optim.Adam(self.D.parameters(), lr=lr, betas=BETAS)
        self.gen = torch.Generator().manual_seed(seed + 2)  # Gumbel noise of the output activations
        self.pending: tuple | None = None
        self.synthetic: np.ndarray | None = None

    def _activate(self, raw: torch.Tensor) -> torch.Tensor:
        """CTGAN's output activations: tanh on each continuous column's scalar, a Gumbel softmax
        (temperature 0.2) on each one-hot block."""
        out = self._scalars(raw)
        if len(self.soft_pos):
            n = raw.shape[0]
            z = (raw.index_select(1, self.soft_pos) + self._gumbel(n).index_select(1, self.soft_noise)) / 0.2
            parts = [F.softmax(z[:, o:o + b * w].reshape(n, b, w), -1).reshape(n, b * w) for o, b, w in self.groups]
            out = out.index_copy(1, self.soft_pos, torch.cat(parts, 1))
        return out

    def _gumbel(self, n: int) -> torch.Tensor:
        """Standard Gumbel noise for ``n`` rows, one value per one-hot entry in block order:
        ``-log E`` with ``E = -log U`` exponential (``U`` uniform, kept away from 0; 4x faster than
        ``Tensor.exponential_``)."""
        u = torch.rand((n, len(self.onehot_idx)), generator=self.gen).clamp_(min=1e-12)
        return u.log_().neg_().log_().neg_()

    def _scalars(self, raw: torch.Tensor) -> torch.Tensor:
        """``raw`` with tanh on each continuous column's scalar."""
        if not len(self.alpha_idx):
            return raw
        return raw.index_copy(1, self.alpha_idx, torch.tanh(raw.index_select(1, self.alpha_idx)))

    def _codes(self, codes) -> torch.Tensor:
        a = np.asarray(codes)
        return _block(a, (a.shape[0] if a.ndim == 2 else -1, self.code_dim), "codes", self.name)

    # ------------------------------------------------------------ critic step
    def critic_features(self, rows, codes) -> tuple[np.ndarray, np.ndarray]:
        rows = np.asarray(rows)
        n = self.Z.shape[0]
        if rows.dtype.kind not in "iu" or rows.ndim != 1 or (rows.size and (rows.min() < 0 or rows.max() >= n)):
            raise ProtocolError(f"ICAFS synthesis, party {self.name!r}: rows must be int indices in [0, {n})")
        c = self._codes(codes)
        self.G.train()
        self.D.train()
        with torch.no_grad():
            fake = self._activate(self.G(c))
        real = self.Z.index_select(0, torch.from_numpy(rows.astype(np.int64)))
        h = self.D(torch.cat([real, fake]))  # one pass: the critic treats rows independently
        hr, hf = h[: len(rows)], h[len(rows):]
        self.pending = ("critic", hr, hf)
        return hr.detach().numpy(), hf.detach().numpy()

    def critic_step(self, g_real, g_fake) -> None:
        kind, hr, hf = self._take("critic")
        gr = _block(g_real, tuple(hr.shape), "critic gradient (real)", self.name)
        gf = _block(g_fake, tuple(hf.shape), "critic gradient (fake)", self.name)
        self.opt_d.zero_grad(set_to_none=True)
        torch.autograd.backward([hr, hf], [gr, gf])
        self.opt_d.step()

    # --------------------------------------------------------- generator step
    def generator_features(self, codes) -> np.ndarray:
        c = self._codes(codes).requires_grad_(True)
        self.D.requires_grad_(False)  # the generator's loss flows through D_k without its weights' gradients
        try:
            h = self.D(self._activate(self.G(c)))
        finally:
            self.D.requires_grad_(True)
        self.pending = ("generator", c, h)
        return h.detach().numpy()

    def generator_step(self, g_fake) -> np.ndarray:
        kind, c, h = self._take("generator")
        g = _block(g_fake, tuple(h.shape), "generator gradient", self.name)
        self.opt_g.zero_grad(set_to_none=True)
        h.backward(g)
        self.opt_g.step()
        return c.grad.numpy()

    def _take(self, kind: str) -> tuple:
        p = self.pending
        if p is None or p[0] != kind:
            raise ProtocolError(f"ICAFS synthesis, party {self.name!r}: gradients for a {kind} step arrived "
                                "without its forward pass")
        self.pending = None
        return p

    # ------------------------------------------------------------------ end
    def synthesize(self, codes) -> np.ndarray:
        """The synthetic block of ``codes``, decoded to the party's columns (one-hot blocks by
        their largest entry, as the normaliser's inverse does).

        CTGAN's ``sample`` draws each mode through its Gumbel softmax first (a draw from the
        generator's mode distribution, not its most likely mode); the most likely mode is kept
        here (ours; compared in ``benchmarks/icafs/README.md``)."""
        c = self._codes(codes)
        self.G.eval()
        with torch.no_grad():
            raw = self._scalars(self.G(c))
        self.synthetic = self.norm.inverse_transform(raw.numpy()).astype(np.float32)
        return self.synthetic


class ProjectionCritic(nn.Module):
    """``D_s``: the parties' concatenated critic features ``h`` and the one-hot label ``y`` (the
    last ``n_classes`` columns of its input) to ``psi(phi(h)) + <E y, phi(h)>``, the projection
    conditioning of Miyato and Koyama (2018) (ours: icafs.md does not describe ``D_s``; a label
    concatenated to the input learnt the class dependence far more slowly on breast cancer)."""

    def __init__(self, d: int, n_classes: int, hidden: int) -> None:
        super().__init__()
        self.d = int(d)
        self.phi = nn.Sequential(nn.Linear(d, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, hidden), nn.LeakyReLU(0.2))
        self.psi = nn.Linear(hidden, 1)
        self.embed = nn.Linear(n_classes, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.phi(x[:, :self.d])
        return self.psi(f) + (self.embed(x[:, self.d:]) * f).sum(1, keepdim=True)


class HolderSynthesis:
    """The label holder's side of Algorithm 1: ``G_s`` (noise and label to one code per party) and
    ``D_s`` (the parties' critic features and the label to a Wasserstein score)."""

    def __init__(self, y: np.ndarray, n_classes: int, parties: list[str], *, code_dim: int, feature_dim: int,
                 noise_dim: int = 128, hidden: int = 256, lr: float = 1e-3, batch_size: int = 500,
                 gp_weight: float = 10.0, aux_weight: float = 1.0, seed: int = 0) -> None:
        self.y = np.asarray(y, dtype=np.int64)
        self.c = int(n_classes)
        self.parties = list(parties)
        self.code_dim, self.feature_dim, self.noise_dim = int(code_dim), int(feature_dim), int(noise_dim)
        K = len(self.parties)
        self.G = seeded(seed, lambda: nn.Sequential(
            nn.Linear(self.noise_dim + self.c, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, K * self.code_dim)))
        self.D = seeded(seed + 1, lambda: ProjectionCritic(K * self.feature_dim, self.c, hidden))
        # AC-GAN's auxiliary classifier on D_s's features (Odena et al. 2017), off at aux_weight 0
        self.aux_weight = float(aux_weight)
        self.classifier = seeded(seed + 4, lambda: nn.Linear(hidden, self.c))
        self.opt_g = torch.optim.Adam(self.G.parameters(), lr=lr, betas=BETAS)
        self.opt_d = torch.optim.Adam([*self.D.parameters(), *self.classifier.parameters()], lr=lr, betas=BETAS)
        self.batch = int(min(batch_size, len(self.y)))
        self.gp_weight = float(gp_weight)
        self.rng = np.random.default_rng(seed + 2)
        self.gen = torch.Generator().manual_seed(seed + 3)
        freq = np.bincount(self.y, minlength=self.c).astype(np.float64)
        self.class_p = freq / freq.sum()

    def onehot(self, y: np.ndarray) -> torch.Tensor:
        return F.one_hot(torch.from_numpy(np.asarray(y, dtype=np.int64)), self.c).float()

    def labels(self, n: int) -> np.ndarray:
        """``n`` synthetic labels at the training class frequencies."""
        return self.rng.choice(self.c, size=int(n), p=self.class_p)

    def codes(self, y: np.ndarray, train: bool) -> torch.Tensor:
        xi = torch.randn(len(y), self.noise_dim, generator=self.gen)
        self.G.train(train)
        return self.G(torch.cat([xi, self.onehot(y)], 1))

    def split(self, C: torch.Tensor) -> list[np.ndarray]:
        d = self.code_dim
        return [np.ascontiguousarray(C[:, k * d:(k + 1) * d].detach().numpy()) for k in range(len(self.parties))]

    def features(self, blocks: list, n: int, what: str) -> torch.Tensor:
        out = [_block(b, (n, self.feature_dim), what, p) for p, b in zip(self.parties, blocks, strict=True)]
        return torch.cat(out, 1).requires_grad_(True)

    def critic_loss(self, Hr: torch.Tensor, yr: np.ndarray, Hf: torch.Tensor, yf: np.ndarray) -> torch.Tensor:
        real = torch.cat([Hr, self.onehot(yr)], 1)
        fake = torch.cat([Hf, self.onehot(yf)], 1)
        loss = (self.D(fake).mean() - self.D(real).mean()
                + gradient_penalty(self.D, real, fake, self.gp_weight, self.gen))
        return loss + self._aux(Hr, yr) if self.aux_weight else loss

    def generator_loss(self, Hf: torch.Tensor, yf: np.ndarray) -> torch.Tensor:
        loss = -self.D(torch.cat([Hf, self.onehot(yf)], 1)).mean()
        return loss + self._aux(Hf, yf) if self.aux_weight else loss

    def _aux(self, H: torch.Tensor, y: np.ndarray) -> torch.Tensor:
        """The auxiliary classifier's cross-entropy: of the real labels on real rows (critic), of the
        synthetic labels on synthetic rows (generators)."""
        logits = self.classifier(self.D.phi(H))
        return self.aux_weight * F.cross_entropy(logits, torch.from_numpy(np.asarray(y, dtype=np.int64)))

    def split_grad(self, G: torch.Tensor) -> list[np.ndarray]:
        d = self.feature_dim
        return [np.ascontiguousarray(G[:, k * d:(k + 1) * d].numpy()) for k in range(len(self.parties))]
