"""The active party's side of SparseVFL (sparsevfl.md Algorithm 1) on top of :class:`VFLTrainer`.

:class:`CodedVFLTrainer` keeps Algorithm 2's round structure, batch agreement, evaluation and
history from :class:`~verticalfs.training.vfl.VFLTrainer` and changes what the paper changes:

- set-up sends :class:`~verticalfs.methods.sparsevfl.messages.CodedSpec` (the paper's bottom model
  and the coding) instead of the core ``ModelSpec``;
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

import copy
import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from verticalfs.data.vertical import ACTIVE
from verticalfs.exceptions import ConfigError
from verticalfs.methods.sparsevfl.coding import Coding
from verticalfs.methods.sparsevfl.messages import (
    Checkpoint,
    CodedEmbedRequest,
    CodedGradients,
    CodedSpec,
    xavier_init,
)
from verticalfs.nn.models import TopModel, seeded
from verticalfs.training.history import NON_METRIC_KEYS, Callback, derive_seed
from verticalfs.training.vfl import TrainConfig, VFLTrainer
from verticalfs.transport.bandwidth import estimate_wall_time
from verticalfs.transport.messages import Ready

NORMS = ("l1", "l2", "none")


class CodedVFLTrainer(VFLTrainer):
    """Algorithm 1 of sparsevfl.md (and its dense / quantised baselines) from the active party.

    Parameters
    ----------
    server, channel, parties, seed, callbacks, entry_hook
        As for :class:`VFLTrainer`.
    params
        A :class:`~verticalfs.methods.sparsevfl.method.CodedVFLParams` (model and optimisation).
    coding : Coding
        Forward and backward coding of the messages.
    lam : float
        lambda of equation 5 (0 = no penalty).
    norm : {"l1", "l2", "none"}
        The embedding penalty: L1 (eq. 5), or the per-sample L2 norm (Table 2's ablation).
    """

    def __init__(self, server, channel, parties: Sequence[str], params, coding: Coding, *,
                 lam: float = 0.0, norm: str = "l1", seed: int = 0, callbacks: Sequence[Callback] = (),
                 entry_hook=None) -> None:
        if norm not in NORMS:
            raise ConfigError(f"norm must be one of {NORMS}, got {norm!r}")
        if lam < 0:
            raise ConfigError(f"lam (lambda of eq. 5) must be >= 0, got {lam}")
        if params.top_hidden < 0:
            raise ConfigError(f"top_hidden must be >= 0, got {params.top_hidden}")
        config = TrainConfig(
            epochs=params.epochs, batch_size=params.batch_size, lr=params.lr, optimizer=params.optimizer,
            weight_decay=params.weight_decay, hidden=tuple(getattr(params, "hidden", ())), embedding_dim=params.embedding_dim,
            activation="relu", top_hidden=(params.top_hidden,) if params.top_hidden else (),
        )
        super().__init__(server, channel, parties, config, seed=seed, callbacks=callbacks,
                         entry_hook=entry_hook)
        self.params = params
        self.coding = coding
        self.lam = float(lam) if norm != "none" else 0.0
        self.norm = norm
        self.task = server.task
        self.binary = self.task == "binary"
        self.loss = self._make_loss()
        self.select_key = "val_r2" if self.task == "regression" else "val_roc_auc"
        self.best_score: float | None = None
        self.best_entry: dict | None = None
        self._saved_top: dict | None = None
        self._zeros = 0
        self._entries = 0

    # ------------------------------------------------------------------ loss
    def _make_loss(self):
        y = self.server.y["train"]
        if self.task == "regression":
            return lambda out, t: F.mse_loss(out.reshape(-1), t)
        if self.binary:
            n_pos = int(y.sum())
            pw = (len(y) - n_pos) / max(1, n_pos) if self.params.class_weight else 1.0
            pos_weight = torch.tensor(pw, dtype=torch.float32)
            return lambda out, t: F.binary_cross_entropy_with_logits(out[:, 0], t, pos_weight=pos_weight)
        weight = None
        if self.params.class_weight:
            counts = torch.bincount(y, minlength=self.server.labels.n_classes).float()
            weight = len(y) / counts.clamp(min=1.0)
        return lambda out, t: F.cross_entropy(out, t, weight=weight)

    def _targets(self, split: str) -> torch.Tensor:
        y = self.server.y[split]
        return y.float() if self.binary else y

    def penalty(self, H: torch.Tensor, n: int) -> torch.Tensor | None:
        """Equation 5's second term for the concatenated embeddings ``H`` of ``n`` rows."""
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
    def setup(self) -> None:
        """Send each party its :class:`CodedSpec`; build the top model on the reported sizes."""
        p_, c = self.params, self.coding
        with self.channel.at("setup", 0):
            for p in self.parties:
                spec = CodedSpec(
                    embedding_dim=p_.embedding_dim, hidden=tuple(p_.hidden), bias=p_.bias,
                    last_activation=p_.last_activation, optimizer=p_.optimizer, lr=p_.lr,
                    weight_decay=p_.weight_decay, seed=derive_seed(self.seed, "model", p),
                    batch_size=p_.batch_size, shuffle_seed=self.plan.shuffle_seed, forward=c.forward,
                    backward=c.backward, bits=c.bits, order=c.order, top_w=c.top_w,
                )
                ready = self.channel.request(ACTIVE, p, spec)
                assert isinstance(ready, Ready)
                self._check_rows(p, ready.n_samples)
                self.embedding_dims[p] = ready.embedding_dim
        self.build_top()

    def _check_rows(self, party: str, n_samples: dict) -> None:
        for s in ("train", "val", "test"):
            if n_samples.get(s) != self.server.n_samples(s):
                raise ConfigError(
                    f"party {party!r} has {n_samples.get(s)} {s} rows, the active party "
                    f"{self.server.n_samples(s)}; align the parties by id first"
                )

    def build_top(self) -> None:
        d = sum(self.embedding_dims[p] for p in self.parties)
        out = 1 if self.binary or self.task == "regression" else self.server.labels.n_classes

        def build():
            top = TopModel(d, self.config.top_hidden, out, "relu")
            xavier_init(top)
            return top

        self.server.top = seeded(derive_seed(self.seed, "model", ACTIVE), build)
        self.rebuild_top_optimizer()

    # -------------------------------------------------------------- training
    def train_epoch(self, phase: str = "train") -> float:
        """One epoch of Algorithm 1; returns the mean training loss (penalty included)."""
        ch, parties, coding = self.channel, self.parties, self.coding
        top, opt = self.server.top, self.server.optimizer
        y_all = self._targets("train")
        dims = [self.embedding_dims[p] for p in parties]
        epoch = self.epoch
        top.train()
        loss_f = self.loss
        request, send = ch.request, ch.send
        perf = time.perf_counter
        total, n_seen, t_active, zeros = 0.0, 0, 0.0, 0
        needs_mask = coding.needs_mask
        for b in range(self.plan.n_batches):
            ch.set_position(phase, epoch, b)
            req = CodedEmbedRequest("train", epoch, b, True)
            datas = [request(ACTIVE, p, req).data for p in parties]
            t0 = perf()
            rows = self.plan.rows(epoch, b)
            n = len(rows)
            blocks, masks = [], []
            for data, d in zip(datas, dims, strict=True):
                v, m = coding.decode_embeddings(data, n, d)  # Algorithm 1 line 13
                blocks.append(v)
                masks.append(m)
            Hn = np.concatenate(blocks, 1) if len(blocks) > 1 else blocks[0]
            zeros += int(Hn.size - np.count_nonzero(Hn))
            H = torch.from_numpy(Hn).requires_grad_(True)
            loss = loss_f(top(H), y_all.index_select(0, torch.from_numpy(rows)))
            pen = self.penalty(H, n)  # line 18
            if pen is not None:
                loss = loss + pen
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            G = H.grad.numpy()
            out_msgs = []
            start = 0
            for d, m in zip(dims, masks, strict=True):
                g = G[:, start:start + d] if len(dims) > 1 else G
                out_msgs.append(coding.encode_gradients(g, m if needs_mask else None))  # line 23
                start += d
            total += loss.item() * n
            n_seen += n
            t_active += perf() - t0
            for p, data in zip(parties, out_msgs, strict=True):
                send(ACTIVE, p, CodedGradients(data))
        self.channel.ledger.add_compute(ACTIVE, phase, epoch, t_active)
        self._zeros = zeros
        self._entries = n_seen * sum(dims)
        return total / max(1, n_seen)

    # ------------------------------------------------------------ evaluation
    def _embeddings(self, split: str, phase: str) -> np.ndarray:
        n = self.server.n_samples(split)
        with self.channel.at(phase, self.epoch):
            req = CodedEmbedRequest(split, self.epoch, -1, False)
            blocks = [self.coding.decode_embeddings(self.channel.request(ACTIVE, p, req).data, n,
                                                    self.embedding_dims[p])[0] for p in self.parties]
        return np.concatenate(blocks, 1) if len(blocks) > 1 else blocks[0]

    def _output(self, H: np.ndarray) -> np.ndarray:
        top = self.server.top
        top.eval()
        with torch.no_grad():
            out = top(torch.from_numpy(H)).numpy()
        if self.binary:  # logits [0, z]: softmax gives [1 - sigmoid(z), sigmoid(z)]
            return np.concatenate([np.zeros_like(out), out], 1)
        return out

    def predict(self, split: str, phase: str = "eval") -> np.ndarray:
        """Top-model output on a whole split (binary: two-column logits ``[0, z]``)."""
        return self._output(self._embeddings(split, phase))

    def record(self, phase: str, train_loss: float | None, **extra) -> dict:
        """VFLTrainer's history entry plus the embedding zeros; keeps the best-validation checkpoint."""
        if self._entries:
            extra.setdefault("embedding_zeros", self._zeros / self._entries)
        entry = super().record(phase, train_loss, **extra)
        score = entry.get(self.select_key)
        if score is not None and score == score and (self.best_score is None or score > self.best_score):
            self.best_score = score
            self.best_entry = entry
            self.save_checkpoint()
        return entry

    # ----------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> None:
        self._saved_top = copy.deepcopy(self.server.top.state_dict())
        self._checkpoint_parties("save")

    def restore_checkpoint(self) -> None:
        self.server.top.load_state_dict(self._saved_top)
        self._checkpoint_parties("restore")

    def _checkpoint_parties(self, action: str) -> None:
        with self.channel.at("eval", self.epoch):
            for p in self.parties:
                self.channel.send(ACTIVE, p, Checkpoint(action))

    def finish(self) -> dict[str, float]:
        """Restore the best-validation checkpoint (if any) and return its test metrics."""
        last = self.history[-1] if self.history else None
        if self.best_entry is not None and self.best_entry is not last:
            self.restore_checkpoint()
        if not self.history:
            return self.evaluate(["test"])
        if self.best_entry is None:  # no validation split: the last epoch
            return _test_metrics(last)
        return self.evaluate(["test"])

    def best_epoch(self) -> int | None:
        return None if self.best_entry is None else int(self.best_entry["epoch"])


def _test_metrics(entry: dict) -> dict[str, float]:
    return {k: v for k, v in entry.items() if k not in NON_METRIC_KEYS and k != "embedding_zeros"
            and not k.startswith("val_") and isinstance(v, (int, float))}


def wall_time_info(ledger, parties: Sequence[str], bandwidths_mbps: Sequence[float] = (10.0, 100.0),
                   phases: tuple[str, ...] = ("train",)) -> dict:
    """T_m, S_m and tau_B of sparsevfl.md section 4.4 / Table 3 from the ledger.

    ``T_0`` / ``T_m``: measured compute seconds of the active party / party ``m``; ``S_m``: bytes
    exchanged between the active party and ``m``; all in ``phases`` (training by default).
    ``tau`` is the paper's formula over the whole run, ``T_0 + T_m^ + 8 S_m^ / B`` with
    ``m^ = argmax_m (T_m + 8 S_m / B)``; ``tau_per_round`` sums that per epoch
    (:func:`verticalfs.transport.bandwidth.estimate_wall_time`), which is never smaller.
    """
    T = {p: 0.0 for p in [ACTIVE, *parties]}
    for (party, phase, _), sec in ledger.compute_seconds().items():
        if phase in phases and party in T:
            T[party] += sec
    S = {p: 0 for p in parties}
    for r in ledger.records():
        if r.phase not in phases:
            continue
        other = r.sender if r.receiver == ACTIVE else r.receiver
        if other in S:
            S[other] += r.bytes
    out: dict = {"T_0": T[ACTIVE], "T_m": {p: T[p] for p in parties}, "S_m": S, "phases": list(phases)}
    for bw in bandwidths_mbps:
        B = bw * 1e6
        worst = max(parties, key=lambda p: T[p] + 8 * S[p] / B) if parties else None
        tau = T[ACTIVE] + (T[worst] + 8 * S[worst] / B if worst is not None else 0.0)
        key = f"{bw:g}"
        out.setdefault("tau", {})[key] = tau
        out.setdefault("slowest", {})[key] = worst
        out.setdefault("tau_per_round", {})[key] = estimate_wall_time(ledger, bw, phases=phases).seconds
    return out
