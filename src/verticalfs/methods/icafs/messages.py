"""ICAFS's messages.

Stage 1, federated synthesis (Algorithm 1, phase ``pretrain``), per iteration and party ``k``::

    holder -> party  CriticRequest(rows, codes)      -> CriticFeatures(real, fake)   critic step
    holder -> party  CriticGradients(real, fake)                                     (one-way)
    holder -> party  GeneratorRequest(codes)         -> CriticFeatures(fake)         generator step
    holder -> party  GeneratorGradients(fake)        -> CodeGradients(codes)

and at the end ``Synthesize(codes)`` -> ``Synthesized(n_rows)``: the party generates its block of
the synthetic rows and keeps it. ``rows`` are indices of real training rows drawn uniformly (they
say nothing about labels); ``codes`` are the label holder's generator output for synthetic rows.
What the label holder receives from a party is its critic's features of a batch of its real rows
and of its synthetic rows: never a real row, and no party receives a real label.

Stages 2 and 3 (Algorithm 2, phase ``train``) use the core :class:`EmbedRequest` /
:class:`Gradients` on the party's ``synthetic`` split (Algorithm 2 lines 4-10) and on ``train``
(lines 12-16). At the end, ``SelectFeatures`` (phase ``selection``) tells each party which of its
embedding components the gates kept; it ranks its input features through its encoder (ours:
icafs.md selects components only; by the share of each feature's variance those components explain,
``ICAFSSpec.rank``) and keeps its top ``ratio``. The ranking uses the party's own rows and encoder
only: no message is added for it, and the reply is the count of features kept.
"""

from __future__ import annotations

import numpy as np

from verticalfs.training.split import SplitSpec
from verticalfs.transport.messages import message, tensor_field


@message("icafs.ICAFSSpec")
class ICAFSSpec(SplitSpec):
    """Label holder -> party, inside ``Join``: the encoder (the split spec: a 3-layer MLP), the
    synthesis networks and their training (section V-E), and the synthetic rows' batches.

    ``code_dim``: width of the label holder's code per party (the generator's input at the party);
    ``feature_dim``: width of the party's critic features; ``channels``: filters of the 3x3
    convolutions; ``arch``: ``conv`` (section V-E) or ``mlp``; ``gan_lr``: Adam's rate of both
    synthesis networks (betas 0.5, 0.9 as CTGAN); ``max_modes``: components of each column's
    variational Gaussian mixture; ``critic_norm``: ``layernorm`` (the critic's features) or
    ``spectral`` (spectral normalisation of its weights); ``synth_seed`` seeds the party's synthesis networks;
    ``dp_noise`` > 0: DP-SGD (Opacus) on the encoder's steps on real rows with this noise
    multiplier and per-sample clipping at ``dp_clip``, the real rows' batches then Poisson
    samples from ``shuffle_seed`` (:class:`~.dp.PoissonPlan`, on both sides) and the noise keyed
    by the party's own OS entropy (:mod:`.dp`); ``rank``: how the party ranks its input features
    at :class:`SelectFeatures`, ``explained`` (:func:`~.role.explained_scores`) or ``path``
    (:func:`~.role.path_scores`).
    """

    code_dim: int = 64
    feature_dim: int = 32
    channels: int = 8
    arch: str = "conv"
    gan_lr: float = 1e-3
    max_modes: int = 10
    critic_norm: str = "spectral"
    synth_seed: int = 0
    synth_shuffle_seed: int = 0
    dp_noise: float = 0.0
    dp_clip: float = 1.0
    rank: str = "explained"


@message("icafs.CriticRequest")
class CriticRequest:
    """Holder -> party: critic features of real training rows ``rows`` (int64) and of the
    synthetic rows the party's generator makes from ``codes`` ``(rows, code_dim)``."""

    rows: np.ndarray
    codes: np.ndarray = tensor_field()


@message("icafs.CriticFeatures")
class CriticFeatures:
    """Party -> holder: its critic's features of the real rows (``real``; empty in a generator
    step) and of the synthetic rows (``fake``), ``(rows, feature_dim)`` each."""

    real: np.ndarray = tensor_field()
    fake: np.ndarray = tensor_field()


@message("icafs.CriticGradients")
class CriticGradients:
    """Holder -> party, one-way: the critic loss's gradient for the features last sent; the party
    steps its critic."""

    real: np.ndarray = tensor_field()
    fake: np.ndarray = tensor_field()


@message("icafs.GeneratorRequest")
class GeneratorRequest:
    """Holder -> party: critic features of the synthetic rows made from ``codes`` (graph kept)."""

    codes: np.ndarray = tensor_field()


@message("icafs.GeneratorGradients")
class GeneratorGradients:
    """Holder -> party: the generator loss's gradient for those features; the party steps its
    generator and answers with the gradient for the codes."""

    fake: np.ndarray = tensor_field()


@message("icafs.CodeGradients")
class CodeGradients:
    """Party -> holder: the generator loss's gradient for ``codes`` (the holder's part steps)."""

    codes: np.ndarray = tensor_field()


@message("icafs.Synthesize")
class Synthesize:
    """Holder -> party: make and keep the synthetic block of the rows coded by ``codes``."""

    codes: np.ndarray = tensor_field()


@message("icafs.Synthesized")
class Synthesized:
    """Party -> holder: the synthetic rows it holds now."""

    n_rows: int


@message("icafs.SelectFeatures")
class SelectFeatures:
    """Holder -> party, phase ``selection``: ``components`` (bool, one per embedding component of
    the party) are the ones the gates kept; keep the top ``ratio`` of your input features ranked
    through your encoder against those components (``ICAFSSpec.rank``), for real."""

    components: np.ndarray
    ratio: float


@message("icafs.FeaturesSelected")
class FeaturesSelected:
    """Party -> holder: features kept."""

    n_features: int
