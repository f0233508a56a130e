"""The FATE baselines' messages (phase ``selection``) and the passive parties' side of them.

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

import secrets

import numpy as np

from verticalfs.crypto import EncryptedArray, PublicKey
from verticalfs.crypto.encoding import from_residues, to_float
from verticalfs.exceptions import ProtocolError
from verticalfs.methods.fate.binning import quantile_bins
from verticalfs.parties import PassiveParty, passive_handler
from verticalfs.selection.messages import party_columns
from verticalfs.training.batches import BatchPlan
from verticalfs.transport.messages import message


# --------------------------------------------------------------------------- fate-iv
@message
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


@message
class IVBinSums:
    """Passive -> active: the encrypted per-bin sums of the label codes, features in order and
    bins in order within a feature (packed: ``ceil(bins / capacity)`` ciphertexts per feature;
    pair: ``(sum(bin_nums), 2)``), and the number of bins of each feature."""

    sums: bytes
    bin_nums: np.ndarray


def package_sizes(bin_nums: np.ndarray, capacity: int) -> np.ndarray:
    """Bins per cipher package: each feature's bins in runs of at most ``capacity``."""
    out = []
    for b in np.asarray(bin_nums, dtype=np.int64):
        full, rest = divmod(int(b), int(capacity))
        out += [int(capacity)] * full + ([rest] if rest else [])
    return np.asarray(out, dtype=np.int64)


@passive_handler(IVLabels)
def _on_iv_labels(party: PassiveParty, sender: str, msg: IVLabels) -> IVBinSums:
    pub = PublicKey.from_bytes(msg.public_key, insecure=msg.insecure)
    X = party_columns(party, "train")
    shape = tuple(int(s) for s in msg.shape)
    if shape[0] != X.shape[0]:
        raise ProtocolError(f"party {party.name!r}: IVLabels has {shape[0]} rows but the party has "
                            f"{X.shape[0]} training rows")
    labels = EncryptedArray.from_bytes(pub, msg.labels, shape)
    codes, bin_nums = quantile_bins(X, int(msg.n_bins))
    sums = labels.group_sum(codes, int(msg.n_bins))  # (d, n_bins[, 2])
    keep = np.arange(int(msg.n_bins))[None, :] < bin_nums[:, None]  # the bins that exist, per feature
    out = sums[keep] if sums.ndim == 2 else sums[keep, :]
    if msg.packing == "packed":
        out = out.pack(package_sizes(bin_nums, int(msg.capacity)), int(msg.slot_bits))
    return IVBinSums(sums=out.to_bytes(), bin_nums=bin_nums.astype(np.int64))


# ------------------------------------------------------------------------ fate-lasso
@message
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


@message
class PartialPredictor:
    """Passive -> active: ``X_m w_m`` on the rows of the requested batch (float64; empty at the
    end of a run)."""

    values: np.ndarray


@message
class EncryptedResidual:
    """Active -> passive: ``[[d]]`` of the current batch, ``d = 0.25 w x - 0.5 y`` (y in {-1, 1})."""

    epoch: int
    batch: int
    data: bytes
    exponent: int


@message
class MaskedGradient:
    """Passive -> active: ``[[X_B^T d + R]]`` (one ciphertext per feature, random integer mask R)."""

    data: bytes
    exponent: int


@message
class GradientResult:
    """Active -> passive: the decrypted masked gradient (residues mod n, ``ceil(bits(n)/8)`` bytes
    each) and which batch to predict next (``next_batch = -1``: the run is over)."""

    values: bytes
    next_epoch: int
    next_batch: int


@message
class CoefficientsRequest:
    """Active -> passive: report the non-zero coefficients of the last run."""


@message
class Coefficients:
    """Passive -> active: indices (into the party's prepared features) of the non-zero weights and
    their magnitudes ``|w_j|`` (to rank across parties)."""

    indices: np.ndarray
    magnitudes: np.ndarray


def _lasso_state(party: PassiveParty) -> dict:
    st = party.state.get("fate_lasso")
    if st is None:
        raise ProtocolError(f"party {party.name!r} received a fate-lasso message before LassoStart")
    return st


def _predict(st: dict, epoch: int, batch: int) -> PartialPredictor:
    if batch < 0:
        return PartialPredictor(values=np.zeros(0))
    rows = st["plan"].rows(epoch, batch)
    st["rows"] = rows
    return PartialPredictor(values=st["X"][rows] @ st["w"])


@passive_handler(LassoStart)
def _on_lasso_start(party: PassiveParty, sender: str, msg: LassoStart) -> PartialPredictor:
    old = party.state.get("fate_lasso")
    if msg.public_key:
        pub = PublicKey.from_bytes(msg.public_key, insecure=msg.insecure)
    elif old is not None:
        pub = old["pub"]
    else:
        raise ProtocolError(f"party {party.name!r}: the first LassoStart must carry the public key")
    X = party_columns(party, "train").astype(np.float64)
    st = {
        "pub": pub, "X": X, "w": np.zeros(X.shape[1]), "alpha": float(msg.alpha), "lr": float(msg.lr),
        "plan": BatchPlan(X.shape[0], int(msg.batch_size), int(msg.shuffle_seed)),
        "prec": int(msg.feature_precision), "run": int(msg.run),
    }
    party.state["fate_lasso"] = st
    return _predict(st, 0, 0)


@passive_handler(EncryptedResidual)
def _on_encrypted_residual(party: PassiveParty, sender: str, msg: EncryptedResidual) -> MaskedGradient:
    st = _lasso_state(party)
    rows = st["plan"].rows(int(msg.epoch), int(msg.batch))
    if not np.array_equal(rows, st.get("rows")):
        raise ProtocolError(f"party {party.name!r}: EncryptedResidual for epoch {msg.epoch} batch "
                            f"{msg.batch} does not follow the predictor it sent")
    pub: PublicKey = st["pub"]
    d = EncryptedArray.from_bytes(pub, msg.data, (len(rows),), int(msg.exponent))
    g = d.dot(st["X"][rows], precision=st["prec"])  # [[X_B^T d]] (the sum over the batch)
    # Mask: uniform integers below 2**(bits(n) - 3) <= n / 4, added to the mantissas. The masked
    # value stays inside the decodable range (|g| is far below n / 12) and is statistically
    # independent of g (distance ~ |g| / 2**(bits(n) - 3)).
    top = pub.bits - 3
    mask = [secrets.randbits(top) for _ in range(g.size)]
    st["mask"], st["g_exponent"], st["batch_len"] = mask, g.exponent, len(rows)
    masked = g.add_mantissas(np.array(mask, dtype=object))
    return MaskedGradient(data=masked.to_bytes(), exponent=masked.exponent)


@passive_handler(GradientResult)
def _on_gradient_result(party: PassiveParty, sender: str, msg: GradientResult) -> PartialPredictor:
    st = _lasso_state(party)
    pub: PublicKey = st["pub"]
    w_n = (pub.bits + 7) // 8
    raw = msg.values
    if len(raw) != w_n * len(st["mask"]):
        raise ProtocolError(f"party {party.name!r}: GradientResult has {len(raw)} bytes, expected "
                            f"{len(st['mask'])} values of {w_n} bytes")
    res = [int.from_bytes(raw[i : i + w_n], "big") for i in range(0, len(raw), w_n)]
    masked = from_residues(res, pub.n, pub.max_int)
    g_int = np.array([m - r for m, r in zip(masked, st["mask"], strict=True)], dtype=object)
    g = to_float(g_int, st["g_exponent"]) / st["batch_len"]
    lr, alpha = st["lr"], st["alpha"]
    w = st["w"] - lr * g
    # proximal step of the L1 penalty (soft thresholding), FATE's L1 updater
    st["w"] = np.sign(w) * np.maximum(np.abs(w) - lr * alpha, 0.0)
    st["mask"] = []
    return _predict(st, int(msg.next_epoch), int(msg.next_batch))


@passive_handler(CoefficientsRequest)
def _on_coefficients(party: PassiveParty, sender: str, msg: CoefficientsRequest) -> Coefficients:
    w = _lasso_state(party)["w"]
    nz = np.flatnonzero(w)
    return Coefficients(indices=nz.astype(np.int64), magnitudes=np.abs(w[nz]))
