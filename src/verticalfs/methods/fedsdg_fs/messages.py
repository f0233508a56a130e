"""FedSDG-FS's messages.

Feature-importance initialisation (Algorithm 1, phase ``pretrain``), ``secure=True``::

    active -> party  GiniLabels(public key, [[A]] (N, P), n_bins, mask_bits, c[, [[A_k]]])
                                                                 -> MaskedCounts([[n + r]])
    active -> party  SquaredCounts([[sum_k u^2]][, [[u_k]]])     -> EncryptedGini([[G]])

(``P = ceil(c / slots)`` ciphertexts per row: the classes packed, :class:`.gini.LabelLayout`; the
cross term's per-class ciphertexts, ``k < c - 1``, travel in one of the two messages,
:func:`.gini.cross_term_source`.)
    active -> party  GiniScores(G)                                             (one-way)

``secure=False`` (the plaintext path with the same arithmetic, for comparison)::

    active -> party  PlainGiniLabels(y, n_classes, n_bins)                     -> ClearGini(G)

which sends the training labels to every party in the clear (declared in the method's
``disclosures``; never the default).

Training (phases ``train`` / ``eval``): the core :class:`~verticalfs.transport.messages.EmbedRequest`
is answered with :class:`GatedEmbeddings`, only the embedding components whose gate is open at this
step (the others are exactly 0 for the whole batch) and a mask of which they are; the label
holder's :class:`~verticalfs.transport.messages.Gradients` carries the gradient of those
components only. So the bytes shrink as embedding gates close (fedsdg-fs.md Figure 8).
At the end, :class:`CloseGates` makes every party remove the features and components whose
deterministic gate is 0.
"""

from __future__ import annotations

import numpy as np

from verticalfs.training.split import SplitSpec
from verticalfs.transport.messages import Embeddings, message


@message("fedsdg_fs.FedSDGSpec")
class FedSDGSpec(SplitSpec):
    """Label holder -> party, inside ``Join``: split learning plus the dual gates.

    ``input_gate`` / ``embed_gate`` switch each gate (``original-gate``: input gates only);
    ``mu_init`` is the input gates' mean before any initialisation message, ``omega_init`` the
    embedding gates'; ``lam`` and ``sigma`` as equation (4); ``prune``: remove for real the inputs
    whose sampled gate was 0 at each of the last ``max(batches per epoch, prune_steps)`` steps.
    """

    lam: float = 0.1
    sigma: float = 0.5
    input_gate: bool = True
    embed_gate: bool = True
    mu_init: float = 0.5
    omega_init: float = 0.5
    init_scale: float = 0.5
    prune: bool = True
    prune_steps: int = 20
    penalty: str = "mean"
    gate_lr: float = 0.0
    secure: bool = False
    interactive: int = 0
    key_bits: int = 2048
    insecure: bool = False
    backend: str = "auto"
    randomness: str = "full"
    precision: int = 12
    noise_scale: float = 0.5
    packed: bool = True
    value_bits: int = 16


@message("fedsdg_fs.GiniLabels")
class GiniLabels:
    """Active -> party: the public key and ``[[A]]``, the one-hot label matrix of the training rows
    over ``n_classes`` classes, packed ``slots`` classes per ciphertext (:class:`.gini.LabelLayout`,
    shape ``(N, ceil(n_classes / slots))``); the party bins into ``n_bins`` and masks its counts
    with ``mask_bits``-bit integers, one per slot."""

    public_key: bytes
    labels: bytes
    shape: tuple
    n_bins: int
    mask_bits: int
    insecure: bool = False
    n_classes: int = 2
    #: ``[[A_{row,k}]]`` for ``k < c - 1``, ``(N, c - 1)`` one per ciphertext, when the cross term
    #: comes from the rows (else empty: it comes with :class:`SquaredCounts`)
    classes: bytes = b""


@message("fedsdg_fs.MaskedCounts")
class MaskedCounts:
    """Party -> active: ``[[n_{jik} + r_{jik}]]`` per (feature, bin), the classes packed, shape
    ``(d, n_bins, ceil(c / slots))``."""

    data: bytes
    shape: tuple


@message("fedsdg_fs.SquaredCounts")
class SquaredCounts:
    """Active -> party: ``[[sum_k u_{jik}^2]]`` per (feature, bin), shape ``(d, n_bins)``, and, when
    the cross term comes from the cells, ``[[u_{jik}]]`` for the classes but the last, one per
    ciphertext, ``(d, n_bins, c - 1)`` (else empty)."""

    data: bytes
    classes: bytes = b""


@message("fedsdg_fs.EncryptedGini")
class EncryptedGini:
    """Party -> active: ``[[G(f_j)]]`` per feature, at fixed-point ``exponent``."""

    data: bytes
    exponent: int


@message("fedsdg_fs.GiniScores")
class GiniScores:
    """Active -> party, one-way: the decrypted Gini scores of its features (Algorithm 1 line 13);
    the party initialises ``mu`` from them."""

    scores: np.ndarray


@message("fedsdg_fs.PlainGiniLabels")
class PlainGiniLabels:
    """Active -> party (``secure=False`` only): the training labels in the clear."""

    labels: np.ndarray
    n_classes: int
    n_bins: int


@message("fedsdg_fs.ClearGini")
class ClearGini:
    """Party -> active (``secure=False``): the Gini scores it computed with the plaintext labels."""

    scores: np.ndarray


@message("fedsdg_fs.GatedEmbeddings")
class GatedEmbeddings(Embeddings):
    """Party -> active: the embedding components whose gate is open, ``(rows, open.sum())``, and
    ``open``, a bool mask over the party's embedding components (required; checked on receipt)."""

    open: np.ndarray | None = None


@message("fedsdg_fs.GatePenalty")
class GatePenalty:
    """Active -> party, phase ``train``, between epochs: the gates' penalty weight from now on
    (``lam``, equation (4)'s lambda) and whether inputs may still be pruned during training; the
    penalty path of many classes (:class:`~verticalfs.methods.fedsdg_fs.method.OriginalGate`)."""

    lam: float
    prune: bool = False


@message("fedsdg_fs.CloseGates")
class CloseGates:
    """Active -> party, phase ``selection``: remove the features whose deterministic input gate
    ``clip(mu, 0, 1)`` is 0 and close the components whose ``clip(omega, 0, 1)`` is 0 for good."""


@message("fedsdg_fs.GatesClosed")
class GatesClosed:
    """Party -> active: features kept and embedding components still open after :class:`CloseGates`."""

    n_features: int
    open: np.ndarray


# ----------------------------------------------------- secure training (Algorithms 2 and 3)
@message("fedsdg_fs.KeyRequest")
class KeyRequest:
    """Active -> party, phase ``setup`` (secure training): send your public key."""


@message("fedsdg_fs.PartyKey")
class PartyKey:
    """Party -> active: the party's Paillier public key (its modulus)."""

    public_key: bytes


@message("fedsdg_fs.SecureEmbeddings")
class SecureEmbeddings:
    """Party -> active: ``[[g]]`` of the open components ``open``: column-packed over the rows
    (``columns``) and, in training, row-packed over the components (``rows``); ``bound`` is the
    largest embedding mantissa (what the server needs to size its slot checks)."""

    open: np.ndarray
    columns: bytes
    rows: bytes
    bound: int


@message("fedsdg_fs.MaskedProducts")
class MaskedProducts:
    """Active -> party: ``[[g W~^T + eps_s]]``, ``(chunks, k)`` packed ciphertexts."""

    data: bytes


@message("fedsdg_fs.ForwardShares")
class ForwardShares:
    """Party -> active: ``z + eps_s`` (int64 mantissas, ``(rows, k)``)."""

    values: np.ndarray


@message("fedsdg_fs.MaskedWeightGradient")
class MaskedWeightGradient:
    """Active -> party: ``[[dL/dw + eps_s']]``, ``k`` packed ciphertexts."""

    data: bytes


@message("fedsdg_fs.NoisyWeightGradient")
class NoisyWeightGradient:
    """Party -> active: ``dL/dw + eps_s' - eps_m / eta_0`` (int64 mantissas, ``(k, open)``) and
    ``[[eps_acc]]`` in ``blocks`` row blocks, with the bound of its mantissas."""

    values: np.ndarray
    eps: bytes
    blocks: int
    bound: int


@message("fedsdg_fs.EncryptedEmbeddingGradient")
class EncryptedEmbeddingGradient:
    """Active -> party, one-way: ``[[dL/dg]]`` of the open components in row blocks."""

    data: bytes
