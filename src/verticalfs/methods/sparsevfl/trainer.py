"""The label holder's side of SparseVFL (sparsevfl.md Algorithm 1) on the split-learning loop.

:class:`CodedVFLTrainer` keeps Algorithm 2's round structure, batch agreement, evaluation and
history from :class:`~verticalfs.training.split.SplitTrainer` and overrides the hooks where the
paper changes something:

- set-up sends :class:`~verticalfs.methods.sparsevfl.role.CodedSpec` (the paper's bottom model
  and the coding) in every party's ``Join``;
- the top model is ``Linear(M e, 12) -> ReLU -> Linear(12, out)`` (section 5, "a 2-layer MLP"),
  trained with BCE-with-logits weighted by ``pos_weight = n_neg / n_pos`` of the training rows for
  binary labels, class-weighted cross-entropy (``N / n_c``) for several classes, as the public
  implementation does;
- each batch's embeddings arrive coded and are decoded here (Algorithm 1 lines 12-13); the loss
  gets the embedding penalty of equation 5, ``lambda / (M N) sum_m sum_n ||h_{n,m}||_1`` (line 18;
  ``M`` = number of passive parties, ``N`` = rows of the batch), and the gradient of each party's
  block goes back coded (lines 21-24), e.g. masked with the mask decoded from that party's
  embeddings;
- after every epoch the validation ROC-AUC decides the checkpoint (the best epoch's bottom and top
  models are kept, and restored at the end); the method's test metrics are those of the restored
  checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from verticalfs.codecs import masked_values, topw_encode
from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.methods.sparsevfl.role import CodedSpec, TopWGradients, check_spec, value_codec
from verticalfs.names import LABEL_HOLDER
from verticalfs.nn.models import TopModel, init_weights
from verticalfs.training.history import derive_seed
from verticalfs.training.split import SplitTrainer, TrainConfig, widths_for_classes
from verticalfs.transport.bandwidth import estimate_wall_time
from verticalfs.transport.messages import At, Gradients, coded

NORMS = ("l1", "l2", "none")


class CodedVFLTrainer(SplitTrainer):
    """Algorithm 1 of sparsevfl.md (and its dense / quantised baselines) from the label holder.

    Parameters
    ----------
    fed, method, seed, callbacks, entry_hook
        As for :class:`~verticalfs.training.split.SplitTrainer`.
    params
        A :class:`~verticalfs.methods.sparsevfl.method.TopParams` subclass (model and optimisation).
    forward, backward : str
        The codings (:data:`~verticalfs.methods.sparsevfl.role.FORWARD_CODINGS`,
        :data:`~verticalfs.methods.sparsevfl.role.BACKWARD_CODINGS`).
    bits, order, top_w
        Q, the run-length traversal and W (see :class:`~verticalfs.methods.sparsevfl.role.CodedSpec`).
    lam : float
        lambda of equation 5 (0 = no penalty).
    norm : {"l1", "l2", "none"}
        The embedding penalty: L1 (eq. 5), or the per-sample L2 norm (Table 2's ablation).
    hidden, last_activation, bias
        The parties' bottom models: hidden widths, last activation, output bias (a coded method's
        :class:`~verticalfs.methods.sparsevfl.method.CodedVFLParams`).
    """

    def __init__(self, fed, method: str, params, *, forward: str = "float32", backward: str = "float32",
                 bits: int = 32, order: str = "vertical", top_w: int = 1024, lam: float = 0.0,
                 norm: str = "l1", hidden: tuple[int, ...] = (), last_activation: str = "relu", bias: bool = False,
                 seed: int = 0, callbacks=(), entry_hook=None, checkpoints=None) -> None:
        if norm not in NORMS:
            raise ConfigError(f"norm must be one of {NORMS}, got {norm!r}")
        if lam < 0:
            raise ConfigError(f"lam (lambda of eq. 5) must be >= 0, got {lam}")
        if params.top_hidden < 0:
            raise ConfigError(f"top_hidden must be >= 0, got {params.top_hidden}")
        config = TrainConfig(
            epochs=params.epochs, batch_size=params.batch_size, lr=params.lr, optimizer=params.optimizer,
            weight_decay=params.weight_decay, hidden=tuple(hidden),
            embedding_dim=params.embedding_dim, activation="relu",
            top_hidden=widths_for_classes((params.top_hidden,), None if fed.labels.task == "regression" else
                                          fed.labels.n_classes, float(params.top_per_class))
            if params.top_hidden else (),
        )
        select = "val_r2" if fed.labels.task == "regression" else "val_roc_auc"
        super().__init__(fed, method, config, seed=seed, callbacks=callbacks, entry_hook=entry_hook,
                         select=select, checkpoints=checkpoints)
        self.params = params
        self.last_activation, self.out_bias = str(last_activation), bool(bias)
        self.coding = dict(forward=forward, backward=backward, bits=int(bits), order=order, top_w=int(top_w))
        check_spec(CodedSpec(**self._spec_fields(LABEL_HOLDER)), method)
        self.lam = float(lam) if norm != "none" else 0.0
        self.norm = norm
        self.binary = self.task == "binary"
        self.loss = self._make_loss()
        self._vcodec = value_codec(bits)
        self._masks: dict[str, np.ndarray] = {}
        self._zeros = 0
        self._entries = 0

    @property
    def select_key(self) -> str:
        return self.select

    # ------------------------------------------------------------------ loss
    def _make_loss(self):
        y = self.y["train"]
        if self.task == "regression":
            return lambda out, t: F.mse_loss(out.reshape(-1), t)
        if self.binary:
            n_pos = int(y.sum())
            pw = (len(y) - n_pos) / max(1, n_pos) if self.params.class_weight else 1.0
            pos_weight = torch.tensor(pw, dtype=torch.float32)
            return lambda out, t: F.binary_cross_entropy_with_logits(out[:, 0], t, pos_weight=pos_weight)
        weight = None
        if self.params.class_weight:
            counts = torch.bincount(y, minlength=self.labels.n_classes).float()
            weight = len(y) / counts.clamp(min=1.0)
        return lambda out, t: F.cross_entropy(out, t, weight=weight)

    def targets(self, split: str) -> torch.Tensor:
        y = self.y[split]
        return y.float() if self.binary else y

    def extra_loss(self, H: torch.Tensor, n: int) -> torch.Tensor | None:
        """Equation 5's second term for the concatenated embeddings ``H`` of ``n`` rows (line 18)."""
        if self.lam <= 0:
            return None
        scale = self.lam / (len(self.parties) * n)  # lambda / (M N)
        if self.norm == "l1":
            return scale * H.abs().sum()
        total = None
        start = 0
        for p in self.parties:
            stop = start + self.embedding_dims[p]
            t = torch.linalg.vector_norm(H[:, start:stop], ord=2, dim=1).sum()
            total = t if total is None else total + t
            start = stop
        return scale * total

    # ---------------------------------------------------------------- set-up
    def _spec_fields(self, party: str) -> dict:
        p = self.params
        return dict(
            hidden=tuple(self.config.hidden), embedding_dim=p.embedding_dim, activation="relu",
            optimizer=p.optimizer, lr=p.lr, weight_decay=p.weight_decay, seed=derive_seed(self.seed, "model", party),
            batch_size=p.batch_size, shuffle_seed=self.plan.shuffle_seed,
            last_activation=self.last_activation, out_bias=self.out_bias,
            init="xavier", **self.coding,
        )

    def spec_for(self, party: str) -> CodedSpec:
        return CodedSpec(**self._spec_fields(party))

    @property
    def n_outputs(self) -> int:
        return 1 if self.binary or self.task == "regression" else self.labels.n_classes

    def make_top(self, d_in: int) -> torch.nn.Module:
        return init_weights(TopModel(d_in, self.config.top_hidden, self.n_outputs, "relu"), "xavier")

    # -------------------------------------------------------------- exchange
    def decode_forward(self, party: str, msg, n_rows: int) -> np.ndarray:
        v = super().decode_forward(party, msg, n_rows)  # Algorithm 1 line 13 (decoded by the codec)
        if self.coding["backward"] == "masked":
            self._masks[party] = v != 0  # the transmitted positions, as the party kept them
        return v

    def forward_batch(self, epoch: int, batch: int, at: At, n_rows: int) -> list[np.ndarray]:
        blocks = super().forward_batch(epoch, batch, at, n_rows)
        for v in blocks:
            self._zeros += int(v.size - np.count_nonzero(v))
            self._entries += int(v.size)
        return blocks

    def encode_backward(self, party: str, g: np.ndarray):
        b = self.coding["backward"]
        if b == "masked":  # line 23: only the values at the transmitted positions
            mask = self._masks.pop(party, None)
            if mask is None:
                raise ProtocolError(f"no embedding mask of party {party!r} for its masked gradient")
            return Gradients(coded(masked_values(g, mask, order=self.coding["order"]), self._vcodec))
        if b == "topw":
            positions, values = topw_encode(g, self.coding["top_w"])
            return TopWGradients(positions=positions, values=coded(values, self._vcodec))
        return Gradients(g if b == "float32" else coded(g, b))

    def on_epoch_begin(self, phase: str) -> None:
        """Start the epoch's count of zero embedding entries (``embedding_zeros`` of its entry)."""
        self._zeros = self._entries = 0

    def entry_extras(self) -> dict:
        return {"embedding_zeros": self._zeros / self._entries} if self._entries else {}

    def output(self, H: np.ndarray) -> np.ndarray:
        """Top-model output (binary: two-column logits ``[0, z]``, softmax = ``[1 - p, p]``)."""
        out = super().output(H)
        if self.binary:
            return np.concatenate([np.zeros_like(out), out], 1)
        return out


def wall_time_info(ledger, parties: Sequence[str], bandwidths_mbps: Sequence[float] = (10.0, 100.0),
                   phases: tuple[str, ...] = ("train",)) -> dict:
    """T_m, S_m and tau_B of sparsevfl.md section 4.4 / Table 3 from the ledger.

    ``T_0`` / ``T_m``: measured compute seconds of the active party / party ``m``; ``S_m``: bytes
    exchanged between the active party and ``m``; all in ``phases`` (training by default).
    ``tau`` is the paper's formula over the whole run, ``T_0 + T_m^ + 8 S_m^ / B`` with
    ``m^ = argmax_m (T_m + 8 S_m / B)``; ``tau_per_round`` sums that per epoch
    (:func:`verticalfs.transport.bandwidth.estimate_wall_time`), which is never smaller.
    """
    T = {p: 0.0 for p in [LABEL_HOLDER, *parties]}
    for (party, phase, _), sec in ledger.compute_seconds().items():
        if phase in phases and party in T:
            T[party] += sec
    S = {p: 0 for p in parties}
    for r in ledger.records():
        if r.phase not in phases:
            continue
        other = r.sender if r.receiver == LABEL_HOLDER else r.receiver
        if other in S:
            S[other] += r.bytes
    out: dict = {"T_0": T[LABEL_HOLDER], "T_m": {p: T[p] for p in parties}, "S_m": S, "phases": list(phases)}
    for bw in bandwidths_mbps:
        B = bw * 1e6
        worst = max(parties, key=lambda p: T[p] + 8 * S[p] / B) if parties else None
        tau = T[LABEL_HOLDER] + (T[worst] + 8 * S[worst] / B if worst is not None else 0.0)
        key = f"{bw:g}"
        out.setdefault("tau", {})[key] = tau
        out.setdefault("slowest", {})[key] = worst
        out.setdefault("tau_per_round", {})[key] = estimate_wall_time(ledger, bw, phases=phases).seconds
    return out
