"""Training-by-sampling and the gradient penalty of ICAFS's conditional WGAN-GP (icafs.md section
IV-A: "Wasserstein GAN with gradient penalty and conditional vectors (CVs)"; the conditional
vector and its sampling follow CTGAN, Xu et al. 2019, written here).

:class:`ConditionalSampler`: the representation's one-hot spans (categorical columns, and the mode
indicators of continuous columns) define the conditional vector. A draw picks a span uniformly and
a category of it with probability proportional to ``log(1 + frequency)``, so rare categories are
trained on; the vector is that one-hot (zeros elsewhere), and a real row having that category is
drawn for the critic. Everything is vectorised over the batch.

:func:`gradient_penalty`: ``lambda * (||grad_x D(x_hat)||_2 - 1)^2`` averaged over the batch, with
``x_hat`` uniformly between real and generated rows (Gulrajani et al. 2017).
"""

from __future__ import annotations

import numpy as np
import torch


class ConditionalSampler:
    """Conditional vectors over the one-hot ``spans`` of ``Z`` (``(start, width)`` pairs)."""

    def __init__(self, Z: np.ndarray, spans, seed: int = 0) -> None:
        Z = np.asarray(Z)
        self.spans = [(int(a), int(w)) for a, w in spans]
        if not self.spans:
            raise ValueError("ConditionalSampler: no one-hot span to condition on")
        self.width = sum(w for _, w in self.spans)
        self.offsets = np.cumsum([0] + [w for _, w in self.spans])[:-1]
        self.rng = np.random.default_rng(seed)
        # category of every row in every span, and the log-frequency distribution of each span
        self.codes = np.stack([Z[:, a:a + w].argmax(1) for a, w in self.spans], 1)  # (n, spans)
        maxw = max(w for _, w in self.spans)
        probs = np.zeros((len(self.spans), maxw))
        for s, (_, w) in enumerate(self.spans):  # a short loop over columns, not rows
            freq = np.bincount(self.codes[:, s], minlength=w)[:w]
            lf = np.log1p(freq)
            probs[s, :w] = lf / lf.sum()
        self.cum = np.cumsum(probs, 1)
        # rows of every (span, category), for the critic's real batch
        self.order = np.argsort(self.codes, axis=0, kind="stable")
        self.starts = np.stack([np.searchsorted(self.codes[self.order[:, s], s], np.arange(maxw + 1))
                                for s in range(len(self.spans))])  # (spans, maxw + 1)

    def sample(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(cond (n, width) float32, span (n,), category (n,))``."""
        span = self.rng.integers(0, len(self.spans), n)
        u = self.rng.random(n)
        cat = (self.cum[span] < u[:, None]).sum(1)
        cat = np.minimum(cat, np.asarray([w for _, w in self.spans])[span] - 1)
        cond = np.zeros((n, self.width), dtype=np.float32)
        cond[np.arange(n), self.offsets[span] + cat] = 1.0
        return cond, span, cat

    def real_rows(self, span: np.ndarray, cat: np.ndarray) -> np.ndarray:
        """For each draw, a random real row whose ``span`` has category ``cat``."""
        lo = self.starts[span, cat]
        hi = self.starts[span, cat + 1]
        pick = lo + np.floor(self.rng.random(len(span)) * np.maximum(hi - lo, 1)).astype(np.int64)
        return self.order[np.minimum(pick, len(self.order) - 1), span]


def gradient_penalty(critic, real: torch.Tensor, fake: torch.Tensor, weight: float = 10.0,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """WGAN-GP's penalty on the critic ``critic`` between ``real`` and ``fake`` rows."""
    eps = torch.rand(real.shape[0], 1, generator=generator, dtype=real.dtype)
    x = (eps * real + (1 - eps) * fake).requires_grad_(True)
    out = critic(x)
    (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    return float(weight) * ((grad.norm(2, dim=1) - 1) ** 2).mean()
