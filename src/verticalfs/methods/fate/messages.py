"""The FATE baselines' messages (phase ``selection``); the feature parties' side is :mod:`.role`.

Ciphertexts travel in ``bytes`` fields, each ciphertext at the key's fixed width
(:meth:`verticalfs.crypto.EncryptedArray.to_bytes`), so the ledger's payload of a message is
exactly ``n_ciphertexts * ciphertext_bytes`` and its overhead the header and the small fields.
No message to a passive party carries a plaintext label: ``fate-iv`` sends the labels only
encrypted, ``fate-lasso`` only the encrypted residual ``[[d]]`` (tested on a traced run).

``fate-iv`` (FATE's hetero feature binning, the label holder being FATE's *guest* and every
feature party a *host*)::

    active -> party  IVLabels(public key, [[label code]] per training row)      (request)
    party -> active  IVBinSums([[sum of label codes]] per (feature, bin), bins per feature)

``fate-lasso`` (FATE's hetero logistic regression with an L1 penalty; two-party variant in which
the label holder holds the key)::

    active -> party  LassoStart(key, alpha, lr, batches)   -> PartialPredictor(w_m x, batch 0)
    per batch:
    active -> party  EncryptedResidual([[d]])              -> MaskedGradient([[X^T d + R]])
    active -> party  GradientResult(X^T d + R)             -> PartialPredictor(w_m x, next batch)
    after a run:
    active -> party  CoefficientsRequest()                 -> Coefficients(nonzero indices, |w|)
"""

from __future__ import annotations

import numpy as np

from verticalfs.histogram.encrypted import package_sizes
from verticalfs.transport.messages import message

__all__ = ["Coefficients", "CoefficientsRequest", "EncryptedResidual", "GradientResult", "IVBinSums", "IVLabels",
           "LassoStart", "MaskedGradient", "PartialPredictor", "package_sizes"]


# --------------------------------------------------------------------------- fate-iv
@message("fate.IVLabels")
class IVLabels:
    """Active -> passive: the public key and the encrypted label codes of the training rows.

    ``packing = "packed"`` (FATE >= 1.7): one ciphertext per row holding
    ``y * 2**non_event_bits + (1 - y)`` (FATE's ``GuestIntegerPacker``), and the party returns its
    bin sums cipher-compressed, ``capacity`` bins of ``slot_bits`` bits per ciphertext (FATE's
    ``CipherCompressorHost``, parameters sent by the guest). ``"pair"`` (older FATE): two
    ciphertexts per row, ``y`` and ``1 - y`` (shape ``(n, 2)``), one ciphertext per bin sum back.
    ``n_bins`` is the number of quantile bins per feature (FATE's ``bin_num``).
    """

    public_key: bytes
    labels: bytes
    shape: tuple
    packing: str
    slot_bits: int
    capacity: int
    n_bins: int
    insecure: bool = False


@message("fate.IVBinSums")
class IVBinSums:
    """Passive -> active: the encrypted per-bin sums of the label codes, features in order and
    bins in order within a feature (packed: ``ceil(bins / capacity)`` ciphertexts per feature;
    pair: ``(sum(bin_nums), 2)``), and the number of bins of each feature."""

    sums: bytes
    bin_nums: np.ndarray


# ------------------------------------------------------------------------ fate-lasso
@message("fate.LassoStart")
class LassoStart:
    """Active -> passive: start a training run of the L1-penalised hetero LR from ``w = 0``.

    ``public_key`` is empty after the first run (the party keeps the key it received).
    Mini-batches are agreed by index (:class:`~verticalfs.training.batches.BatchPlan` with
    ``shuffle_seed``). The reply is the party's :class:`PartialPredictor` of epoch 0, batch 0.
    """

    public_key: bytes
    insecure: bool
    run: int
    alpha: float
    lr: float
    batch_size: int
    shuffle_seed: int
    feature_precision: int


@message("fate.PartialPredictor")
class PartialPredictor:
    """Passive -> active: ``X_m w_m`` on the rows of the requested batch (float64; empty at the
    end of a run)."""

    values: np.ndarray


@message("fate.EncryptedResidual")
class EncryptedResidual:
    """Active -> passive: ``[[d]]`` of the current batch, ``d = 0.25 w x - 0.5 y`` (y in {-1, 1})."""

    epoch: int
    batch: int
    data: bytes
    exponent: int
    #: bits of the batch's largest residual mantissa: the party checks its masks' floor with it
    bound_bits: int = 0


@message("fate.MaskedGradient")
class MaskedGradient:
    """Passive -> active: ``[[X_B^T d + R]]`` (one ciphertext per feature, random integer mask R)
    and the hiding bits of R on the gradient (>= 40, checked on both sides)."""

    data: bytes
    exponent: int
    hiding_bits: int = 0


@message("fate.GradientResult")
class GradientResult:
    """Active -> passive: the decrypted masked gradient (residues mod n, ``ceil(bits(n)/8)`` bytes
    each) and which batch to predict next (``next_batch = -1``: the run is over)."""

    values: bytes
    next_epoch: int
    next_batch: int


@message("fate.CoefficientsRequest")
class CoefficientsRequest:
    """Active -> passive: report the non-zero coefficients of the last run."""


@message("fate.Coefficients")
class Coefficients:
    """Passive -> active: indices (into the party's prepared features) of the non-zero weights and
    their magnitudes ``|w_j|`` (to rank across parties)."""

    indices: np.ndarray
    magnitudes: np.ndarray
