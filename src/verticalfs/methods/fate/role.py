"""The feature parties' side of the FATE baselines (FATE's *hosts*).

:class:`IVRole` (``fate-iv``) bins its own columns and sums the encrypted label codes per bin;
:class:`LassoRole` (``fate-lasso``) holds its own weights of the hetero L1 logistic regression and
computes masked encrypted gradients. Neither ever sees a plaintext label. The message sequence is
in :mod:`verticalfs.methods.fate.messages`.
"""

from __future__ import annotations

import secrets

import numpy as np

from verticalfs.codecs.integers import unpack_uints
from verticalfs.crypto import HIDING_FLOOR, EncryptedArray, PublicKey
from verticalfs.crypto.encoding import from_residues, to_float
from verticalfs.exceptions import ProtocolError
from verticalfs.histogram import bin_sums, compress, existing_bins, quantile_code_blocks, seal
from verticalfs.methods.fate.messages import (
    Coefficients,
    CoefficientsRequest,
    EncryptedResidual,
    GradientResult,
    IVBinSums,
    IVLabels,
    LassoStart,
    MaskedGradient,
    PartialPredictor,
)
from verticalfs.methods.filter import FilterRole
from verticalfs.methods.labels_proof import LabelChecks
from verticalfs.party import Context, handles, refusal
from verticalfs.selection.blocks import take_rows
from verticalfs.training.batches import BatchPlan


class IVRole(LabelChecks, FilterRole):
    """A host of FATE's hetero feature binning."""

    @handles(IVLabels)
    def on_iv_labels(self, msg: IVLabels, ctx: Context) -> IVBinSums:
        pub = PublicKey.from_bytes(msg.public_key, insecure=msg.insecure)
        X = self.columns("train")
        shape = tuple(int(s) for s in msg.shape)
        if not shape or shape[0] != X.shape[0]:
            raise ProtocolError(f"party {self.name!r}: IVLabels has shape {shape} but the party has "
                                f"{X.shape[0]} training rows")
        pol = ctx.policy
        n_bins = int(msg.n_bins)  # (within the policy's max_bins: the party's check_bounds layer)
        if n_bins < 2:
            raise ProtocolError(f"party {self.name!r}: fate-iv's n_bins must be >= 2, got {n_bins}")
        labels = EncryptedArray.from_bytes(pub, msg.labels, shape)
        if pol is not None and pol.verify_labels and (msg.packing != "packed" or len(shape) != 1):
            raise refusal(self.name, "verify_labels", True, "sum unproven labels (fate-iv's packing "
                          f"{msg.packing!r}: only the packed codes carry a proof)", "use packing = \"packed\"")
        # the label holder's proof that every code is a label (issue 50: else row markers name every bin)
        self.checked_labels(ctx, "iv", pub, msg.labels, labels, slot_bits=int(msg.slot_bits))
        # per row block: the bin codes and their ciphertext sums, multiplied together mod n**2 (the
        # same ciphertexts as one sum over every row; no code matrix of the whole table, issue 39)
        bin_nums, blocks = quantile_code_blocks(X, n_bins, min_rows=1 if pol is None else int(pol.min_bin_rows))
        out = existing_bins(bin_sums(labels, blocks, n_bins, X.shape[1]), bin_nums)
        if msg.packing == "packed":
            out = compress(out, bin_nums, int(msg.capacity), int(msg.slot_bits))
        # re-randomised: the label holder made every input obfuscator; without fresh randomness it
        # would read each bin's member rows out of the product of their obfuscators
        return IVBinSums(sums=seal(out).to_bytes(), bin_nums=bin_nums.astype(np.int64))


class LassoRole(FilterRole):
    """A host of FATE's hetero logistic regression with an L1 penalty.

    Its state (``state``: the public key, its weights, the run's settings, the pending batch and
    masks) is plain data, so that a checkpoint after a run (a round of the search) saves it; the
    batch plan is rebuilt from it (``transient``)."""

    state: dict | None = None
    transient = ("_plan",)
    _plan: tuple | None = None  # (key, BatchPlan) of the current run

    def _state(self) -> dict:
        if self.state is None:
            raise ProtocolError(f"party {self.name!r} received a fate-lasso message before LassoStart")
        return self.state

    def _batches(self) -> BatchPlan:
        st = self._state()
        key = (int(st["n_rows"]), int(st["batch_size"]), int(st["shuffle_seed"]))
        if self._plan is None or self._plan[0] != key:
            self._plan = (key, BatchPlan(*key))
        return self._plan[1]

    def _predict(self, epoch: int, batch: int) -> PartialPredictor:
        st = self.state
        if batch < 0:
            return PartialPredictor(values=np.zeros(0))
        rows = self._batches().rows(epoch, batch)
        st["rows"] = rows
        return PartialPredictor(values=take_rows(self.columns("train"), rows) @ st["w"])

    @handles(LassoStart)
    def on_lasso_start(self, msg: LassoStart, ctx: Context) -> PartialPredictor:
        old = self.state
        if msg.public_key:
            pub = PublicKey.from_bytes(msg.public_key, insecure=msg.insecure)
        elif old is not None:
            pub = old["pub"]
        else:
            raise ProtocolError(f"party {self.name!r}: the first LassoStart must carry the public key")
        X = self.columns("train")  # a view (a memory-mapped table stays mapped); batches read by index
        self.state = {
            "pub": pub, "w": np.zeros(X.shape[1]), "alpha": float(msg.alpha), "lr": float(msg.lr),
            "n_rows": int(X.shape[0]), "batch_size": int(msg.batch_size), "shuffle_seed": int(msg.shuffle_seed),
            "prec": int(msg.feature_precision), "run": int(msg.run),
        }
        return self._predict(0, 0)

    @handles(EncryptedResidual)
    def on_encrypted_residual(self, msg: EncryptedResidual, ctx: Context) -> MaskedGradient:
        st = self._state()
        rows = self._batches().rows(int(msg.epoch), int(msg.batch))
        if not np.array_equal(rows, st.get("rows")):
            raise ProtocolError(f"party {self.name!r}: EncryptedResidual for epoch {msg.epoch} batch "
                                f"{msg.batch} does not follow the predictor it sent")
        pub: PublicKey = st["pub"]
        # Mask: uniform integers below 2**(bits(n) - 3) <= n / 4, added to the mantissas. The masked
        # value stays inside the decodable range (|g| < n / 12) and is statistically independent of
        # g (distance <= |g| / 2**(bits(n) - 3)): hiding bits = bits(n) - 3 - bits(max |g|), with
        # |g_j| <= 2**bound_bits * sum_B |x_j| (mantissas). The floor of 40, before any work.
        top = pub.bits - 3
        if not 0 <= int(msg.bound_bits) <= pub.bits:
            raise ProtocolError(f"party {self.name!r}: EncryptedResidual bound_bits {msg.bound_bits} out of range")
        Xb = take_rows(self.columns("train"), rows)
        xs = float(np.abs(np.rint(np.ldexp(Xb, st["prec"]))).sum(0).max()) if Xb.size else 0.0
        g_bits = int(msg.bound_bits) + max(1, int(np.ceil(xs * (1 + 1e-12)))).bit_length()
        hiding = top - g_bits
        if hiding < HIDING_FLOOR:
            raise ProtocolError(f"party {self.name!r}: fate-lasso's masks ({top} bits) would hide its gradient "
                                f"(up to 2**{g_bits}) by {hiding} bits, below the floor of {HIDING_FLOOR}; raise "
                                "key_bits or lower residual_precision / feature_precision")
        d = EncryptedArray.from_bytes(pub, msg.data, (len(rows),), int(msg.exponent))
        g = d.dot(Xb, precision=st["prec"])  # [[X_B^T d]] (the sum over the batch)
        mask = [secrets.randbits(top) for _ in range(g.size)]
        st["mask"], st["g_exponent"], st["batch_len"] = mask, g.exponent, len(rows)
        masked = g.add_mantissas(np.array(mask, dtype=object))
        # re-randomised: with the residuals' obfuscators (the label holder's own) the stripped
        # ciphertext is prod r_i**x_i, which gives away X's values by a discrete-log search
        return MaskedGradient(data=masked.rerandomize().to_bytes(), exponent=masked.exponent, hiding_bits=hiding)

    @handles(GradientResult)
    def on_gradient_result(self, msg: GradientResult, ctx: Context) -> PartialPredictor:
        st = self._state()
        pub: PublicKey = st["pub"]
        w_n = (pub.bits + 7) // 8
        raw = msg.values
        if len(raw) != w_n * len(st.get("mask", ())):
            raise ProtocolError(f"party {self.name!r}: GradientResult has {len(raw)} bytes, expected "
                                f"{len(st.get('mask', ()))} values of {w_n} bytes")
        res = unpack_uints(raw, w_n)
        masked = from_residues(res, pub.n, pub.max_int)
        g_int = np.array([m - r for m, r in zip(masked, st["mask"], strict=True)], dtype=object)
        g = to_float(g_int, st["g_exponent"]) / st["batch_len"]
        lr, alpha = st["lr"], st["alpha"]
        w = st["w"] - lr * g
        # proximal step of the L1 penalty (soft thresholding), FATE's L1 updater
        st["w"] = np.sign(w) * np.maximum(np.abs(w) - lr * alpha, 0.0)
        st["mask"] = []
        return self._predict(int(msg.next_epoch), int(msg.next_batch))

    @handles(CoefficientsRequest)
    def on_coefficients(self, msg: CoefficientsRequest, ctx: Context) -> Coefficients:
        w = self._state()["w"]
        nz = np.flatnonzero(w)
        return Coefficients(indices=nz.astype(np.int64), magnitudes=np.abs(w[nz]))
