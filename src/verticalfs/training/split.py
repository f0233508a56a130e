"""Split learning, written once: the label holder's :class:`SplitTrainer` and the party's :class:`SplitRole`.

Standard VFL (less-vfl.md Appendix A, Algorithm 2) and every method built on it run this loop.
Per mini-batch the label holder asks each party for the embeddings of the agreed batch
(:class:`~verticalfs.transport.messages.EmbedRequest` -> :class:`~verticalfs.transport.messages.Embeddings`),
runs its top model, updates it, and sends each party the gradient of the loss with respect to that
party's embeddings (:class:`~verticalfs.transport.messages.Gradients`); each party back-propagates it
through its bottom model and updates. Mini-batches are agreed by index (both sides derive the
epoch's permutation from a shared seed, :mod:`verticalfs.training.batches`), so no index list
travels. After every epoch the label holder evaluates on the test (and validation) split; the
embeddings this needs are sent in phase ``eval``.

Methods differ at a few points only, and override those hooks instead of copying the loop:

============================  =====================  =============================================
hook                          side                   used by
============================  =====================  =============================================
:meth:`SplitRole.build_model`  party                 SparseVFL's client model (via the spec)
:meth:`SplitRole.encode_forward`  party              SparseVFL (run-length codes, keeps the mask)
:meth:`SplitRole.decode_backward` party              SparseVFL (masked gradients), TOP-W
:meth:`SplitRole.local_loss`   party                 a party-side regulariser (e.g. gates)
:meth:`SplitRole.post_step`    party                 group lasso's proximal step
:meth:`SplitTrainer.spec_for`  label holder          what each party is told at ``Join``
:meth:`SplitTrainer.decode_forward` label holder     SparseVFL (mask, zero count)
:meth:`SplitTrainer.extra_loss` label holder         SparseVFL's embedding penalty (eq. 5)
:meth:`SplitTrainer.encode_backward` label holder    SparseVFL (masked), TOP-W, codecs
:meth:`SplitTrainer.forward_batch` / ``backward_batch`` label holder  PCA/AUTOENCODER (no exchange)
:meth:`SplitTrainer.train_step`  label holder        one batch: CompFS (gate statistics), ICAFS (a
                                                     synthetic and a real step), secure FedSDG-FS
:meth:`SplitTrainer.on_epoch_begin` label holder     CompFS (decays), ICAFS, SparseVFL (counters)
:meth:`SplitTrainer.on_epoch_end` label holder       (none yet)
============================  =====================  =============================================

plus ``select`` (keep the checkpoint of the best validation epoch instead of the last).
:meth:`SplitTrainer.train_epoch` is the only epoch loop: it runs the steps over the agreed batch
order (``TrainConfig.limit_batches``: the first few only) and checks every batch's loss
(:meth:`SplitTrainer.check_loss`), whichever step a method runs.

Bytes per training epoch with float32 payloads: ``2 x N_train x sum(embedding_dim) x 4`` of payload
(embeddings up, gradients down), plus per batch and party one header-only request and the fixed
overhead of two tensor messages (see :mod:`verticalfs.transport.serde`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from verticalfs.codecs import get_codec
from verticalfs.evaluation.metrics import prediction_metrics
from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.model_files import HolderPart
from verticalfs.names import LABEL_HOLDER
from verticalfs.nn.models import ACTIVATIONS, MLP, TopModel, init_weights, load_shaped, make_optimizer, seeded
from verticalfs.params import Checked, Constraints, Interval, Options, Predicate, check_params
from verticalfs.party import Context, Role, handles
from verticalfs.training.batches import BatchPlan
from verticalfs.training.history import NON_METRIC_KEYS, Callback, History, derive_seed
from verticalfs.transport.messages import (
    At,
    Checkpoint,
    Embeddings,
    EmbedRequest,
    Gradients,
    Ready,
    coded,
    message,
    message_from_dict,
    message_to_dict,
)
from verticalfs.transport.node import request_all, send_all

#: rows of a whole-split evaluation computed at once (a party's bottom model, the top model)
EVAL_ROWS = 1 << 16

if TYPE_CHECKING:
    from verticalfs.crypto.keys import PrivateKey
    from verticalfs.federation import Federation, LocalFederation
    from verticalfs.party import LocalData
    from verticalfs.training.checkpoint import Checkpointer
    from verticalfs.transport.ledger import Ledger

class SplitHolder(HolderPart):
    """The label holder's part of a saved split model (kind ``"split"``, :meth:`SplitTrainer.export_top`)."""

    parties: list[str]
    embedding_dims: dict[str, int]
    top_state: dict[str, Any]
    top_hidden: list[int]
    activation: str
    two_column: bool


#: a trainer's attributes that are not checkpoint state (the run rebuilds them)
_TRAINER_NOT_STATE = frozenset({"fed", "callbacks", "entry_hook", "labels", "y", "loss", "config", "method",
                                "seed", "parties", "task", "eval_splits", "select", "codec", "checkpoints"})

#: a split gradient handed to carry_optimizer_state: new parameter -> (old parameter, slicing)
SlicedParams = dict[torch.Tensor, tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]]


# ---------------------------------------------------------------------------------- configuration
#: the optimisers a party or the label holder may use (any case, as :func:`~verticalfs.nn.models.make_optimizer`)
OPTIMIZER = Predicate(lambda v: isinstance(v, str) and v.lower() in ("adam", "adamw", "sgd"), "adam, adamw or sgd")


@dataclass
class TrainConfig(Checked):
    """Hyper-parameters of split training (shared by every method built on it).

    Parameters
    ----------
    epochs : int
        Communication epochs of training.
    batch_size : int
        Mini-batch size agreed by all parties.
    lr : float
        Learning rate of every party's optimizer (less-vfl.md section 5: Adam, 0.01).
    optimizer : {"adam", "adamw", "sgd"}
    weight_decay : float
    hidden : tuple of int
        Hidden widths of each party's bottom MLP (two hidden layers = the paper's 3-layer MLP).
    embedding_dim : int
        Embedding components per party.
    activation : str
        Hidden activation of the bottom MLPs (and of an MLP top model).
    top_hidden : tuple of int
        Hidden widths of the top model; empty = linear top model (less-vfl.md section 5).
    limit_batches : int, optional
        Train on the first ``limit_batches`` mini-batches of each epoch only (default: all), as
        PyTorch Lightning's ``limit_train_batches``: for quick checks and for timing an epoch
        from a few batches. Evaluation after the epoch is unchanged.
    """

    epochs: int = 50
    batch_size: int = 256
    lr: float = 0.01
    optimizer: str = "adam"
    weight_decay: float = 0.0
    hidden: tuple[int, ...] = (64, 32)
    embedding_dim: int = 8
    activation: str = "relu"
    top_hidden: tuple[int, ...] = ()
    limit_batches: int | None = None

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "epochs": [Interval(int, 0, None)],
        "batch_size": [Interval(int, 1, None)],
        "lr": [Interval(float, 0, None, closed="neither")],
        "optimizer": [OPTIMIZER],
        "weight_decay": [Interval(float, 0, None)],
        "hidden": [Interval(int, 1, None)],
        "embedding_dim": [Interval(int, 1, None)],
        "activation": [Options(*ACTIVATIONS)],
        "top_hidden": [Interval(int, 1, None)],
        "limit_batches": [Interval(int, 1, None), None],
    }

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def from_params(cls, params: Any) -> TrainConfig:
        """The TrainConfig fields of any params dataclass that extends it."""
        return cls(**{f.name: getattr(params, f.name) for f in fields(cls)})

    def validate(self) -> None:
        """Every field against its type and :attr:`constraints` (:func:`verticalfs.params.check_params`)."""
        check_params(self)


def widths_for_classes(widths: Sequence[int], n_classes: int | None, per_class: float) -> tuple[int, ...]:
    """``widths`` with each hidden width raised to at least ``per_class x n_classes`` (rounded up).

    A top model's hidden layer narrower than the number of classes is a bottleneck that a few dead
    ReLU units turn into a chance-level model (issue 40: FedSDG-FS's 16 units on 26 classes, .038).
    The methods whose paper width was set for binary data use this (``top_per_class``); with two
    classes, or ``per_class`` 0, the widths are unchanged. ``n_classes`` None (regression) leaves
    them unchanged too.
    """
    floor = math.ceil(float(per_class) * int(n_classes)) if n_classes and per_class > 0 else 0
    return tuple(max(int(w), floor) for w in widths)


def penalty_path_applies(params: Any, fed: Any, trainer: Any, n_classes: int | None) -> bool:
    """Whether a validated penalty path runs (the gates' and group lasso's rule on many classes):
    more than ``params.lam_classes`` classes, a non-empty ``params.lam_path``, validation rows,
    a classification task, and a trained model with its validation accuracy recorded."""
    many = bool(n_classes) and float(params.lam_classes) > 0 and n_classes > params.lam_classes
    return bool(many and params.lam_path and len(fed.labels.y["val"]) and fed.labels.task != "regression"
                and trainer.history and int(params.epochs) > 0
                and trainer.history[-1].get("val_accuracy") is not None)


def walk_penalty_path(trainer: Any, first: dict[str, Any], lams: Sequence[float], tol: float,
                      stage: Callable[[float], dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """A penalty path chosen on the validation rows: ``first`` is the trained model's stage (its
    ``val_accuracy``); ``stage(lam)`` trains the next stage at ``lam`` and returns its record. The
    model is saved after each stage whose validation accuracy is at most ``tol`` below the best
    stage's so far, and the last saved is restored at the end. Returns the stages and the index of
    the one kept (the walk stops at a stage without a validation accuracy)."""
    stages = [first]
    trainer.save_checkpoint()
    best, kept = first["val_accuracy"], 0
    for k, lam in enumerate(lams, 1):
        stages.append(stage(float(lam)))
        acc = stages[-1]["val_accuracy"]
        if acc is None:
            break
        best = max(best, acc)
        if acc >= best - tol:
            trainer.save_checkpoint()
            kept = k
    if kept != len(stages) - 1:
        trainer.restore_checkpoint()
    return stages, kept


def lr_for_classes(lr: float, n_classes: int | None, lr_classes: float) -> float:
    """``lr`` times ``lr_classes / n_classes`` when there are more than ``lr_classes`` classes.

    Adam's first steps at a learning rate set for binary data (FedSDG-FS's 0.03) leave a network on
    30 classes at the loss ln 30 for good (issue 40, measured in
    benchmarks/fedsdg_fs/README.md); ``lr_classes`` 0 or a binary task leave ``lr``. The gated
    methods scale their penalty by the same rule (``lam_classes``; ``lam`` in place of ``lr``).
    """
    if not n_classes or lr_classes <= 0 or int(n_classes) <= lr_classes:
        return float(lr)
    return float(lr) * float(lr_classes) / int(n_classes)


def scaled_config(config: TrainConfig, n_classes: int | None, per_class: float,
                  lr_classes: float = 0.0) -> TrainConfig:
    """A copy of ``config`` whose ``top_hidden`` follows :func:`widths_for_classes` and whose
    ``lr`` follows :func:`lr_for_classes`."""
    out = copy.copy(config)
    out.top_hidden = widths_for_classes(config.top_hidden, n_classes, per_class)
    out.lr = lr_for_classes(config.lr, n_classes, lr_classes)
    return out


def loss_fn(task: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if task == "regression":
        return lambda out, y: F.mse_loss(out.reshape(-1), y)
    return F.cross_entropy


# ----------------------------------------------------------------------------------- the spec
@message("core.SplitSpec")
class SplitSpec:
    """Label holder -> party, inside ``Join``: the bottom model, its optimizer, the agreed
    mini-batches and the codecs of both directions.

    The bottom model is ``MLP(d_in, hidden, embedding_dim)`` with ``activation`` between layers,
    ``last_activation`` after the output layer (``none`` for plain VFL, ``relu`` for SparseVFL),
    an output bias if ``out_bias`` and the initialisation ``init`` (``torch`` or ``xavier``), built
    with torch's RNG seeded by ``seed``. Mini-batches: both sides draw the permutation of epoch
    ``e`` from ``numpy.random.default_rng([shuffle_seed, e])``. ``forward`` is the codec of the
    embeddings the party sends, ``backward`` the codec of the gradients it receives.
    """

    hidden: tuple[Any, ...]
    embedding_dim: int
    activation: str
    optimizer: str
    lr: float
    weight_decay: float
    seed: int
    batch_size: int
    shuffle_seed: int
    momentum: float = 0.0
    last_activation: str = "none"
    out_bias: bool = True
    init: str = "torch"
    forward: str = "float32"
    backward: str = "float32"


# ------------------------------------------------------------------------------- the party side
def carry_optimizer_state(old: torch.optim.Optimizer | None, new: torch.optim.Optimizer,
                          sliced: SlicedParams) -> None:
    """Copy the per-parameter state of optimizer ``old`` into ``new`` after a model shrank.

    Parameters of ``new`` that ``old`` also had keep their state; ``sliced`` maps a new parameter
    to ``(old parameter, f)``, and every state tensor of the old parameter's shape goes through
    ``f`` (e.g. ``t[:, kept_columns]``); scalars such as Adam's step count are copied. Why: a
    fresh Adam moves every weight by about ``lr`` in its first steps whatever the gradient, and
    group lasso prunes at the end of every epoch: on digits (seed 1, 50 % noise) its training
    loss jumped from 0.035 to 0.150 at the first pruning and ended at 0.060 (test accuracy 0.936);
    with the state carried over it kept falling to 0.016 (0.961).
    """
    if old is None:
        return
    for group in new.param_groups:
        for p in group["params"]:
            if p in old.state:
                new.state[p] = old.state[p]
            elif p in sliced and sliced[p][0] in old.state:
                src, f = sliced[p]
                new.state[p] = {k: (f(v).clone() if torch.is_tensor(v) and v.shape == src.shape else v)
                                for k, v in old.state[src].items()}


#: epochs a party accepts in an :class:`EmbedRequest` (the header's round is a u32 as well)
MAX_EPOCH = 2**32 - 1


def check_embed_request(party: str, msg: EmbedRequest) -> None:
    """The fields of an :class:`EmbedRequest` a party can check without its data (they come from
    another organisation): a :class:`ProtocolError` naming the field, its value and the valid range."""
    if not 0 <= msg.epoch <= MAX_EPOCH:
        raise ProtocolError(f"party {party!r}: EmbedRequest.epoch = {msg.epoch}; valid: 0 <= epoch <= {MAX_EPOCH}")
    if msg.batch < -1:
        raise ProtocolError(f"party {party!r}: EmbedRequest.batch = {msg.batch}; valid: -1 (the whole split) or a "
                            "batch index >= 0")


def check_batch(party: str, split: str, batch: int, plan: BatchPlan) -> None:
    """``batch`` (>= 0) must be one of ``plan``'s mini-batches of ``split``."""
    if not 0 <= batch < plan.n_batches:
        raise ProtocolError(f"party {party!r}: EmbedRequest.batch = {batch}; valid: -1 (the whole split) or "
                            f"0 <= batch < {plan.n_batches} ({plan.n} rows of {split!r} in batches of "
                            f"{plan.batch_size})")


class SplitRole(Role):
    """A party in split learning: its bottom model, optimizer, agreed batches and pending graph.

    Handles :class:`EmbedRequest` (forward a batch or a whole split), :class:`Gradients`
    (back-propagate the last training batch) and :class:`Checkpoint` (save / restore the model).
    Override the hooks to change what is sent or how the party learns (see the module docstring).
    """

    spec: SplitSpec
    party_seeds = ("seed",)  # the bottom model's initialisation (and gate noise): the party's own

    def __init__(self, data: LocalData, spec: SplitSpec, ctx: Context) -> None:
        super().__init__(data, spec, ctx)
        if not isinstance(spec, SplitSpec):
            raise ProtocolError(f"party {data.name!r}: {type(self).__name__} needs a SplitSpec, got "
                                f"{type(spec).__name__}")
        self.model: torch.nn.Module = seeded(int(spec.seed), lambda: self.build_model(len(data.kept)))
        self.optimizer = self.make_optimizer()
        n_train = data.n_samples("train") if "train" in data.splits else 0  # none when predicting
        self.plan = BatchPlan(n_train, int(spec.batch_size), int(spec.shuffle_seed))
        self.pending: torch.Tensor | None = None
        self.saved: dict[str, Any] | None = None
        self._dense32 = spec.forward == "float32"

    # ------------------------------------------------------------------ hooks
    def build_model(self, d_in: int) -> torch.nn.Module:
        """The bottom model on ``d_in`` inputs (called under the spec's seed)."""
        s = self.spec
        model = MLP(d_in, tuple(int(h) for h in s.hidden), int(s.embedding_dim), s.activation,
                    out_activation=s.last_activation, out_bias=bool(s.out_bias))
        return init_weights(model, s.init)

    def make_optimizer(self, lr: float | None = None) -> torch.optim.Optimizer:
        s = self.spec
        return make_optimizer(self.model.parameters(), s.optimizer, s.lr if lr is None else lr,
                              s.weight_decay, s.momentum)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.model(X)
        return out

    def encode_forward(self, h: torch.Tensor, train: bool) -> Any:
        """The message carrying the embeddings ``h`` (default: :class:`Embeddings` in ``spec.forward``)."""
        v = h.detach().numpy()
        return Embeddings(v if self._dense32 else coded(v, self.spec.forward))

    def decode_backward(self, msg: Any, out: torch.Tensor) -> torch.Tensor:
        """The dense gradient for the pending embeddings ``out`` from the received message."""
        g = torch.from_numpy(msg.values)
        if g.shape != out.shape:
            raise ProtocolError(f"party {self.name!r}: gradient shape {tuple(g.shape)} != embedding shape "
                                f"{tuple(out.shape)}")
        return g

    def local_loss(self) -> torch.Tensor | None:
        """A party-side term added to the loss before back-propagating (default none)."""
        return None

    def feature_scores(self) -> np.ndarray | None:
        """The L2 norm of each kept feature's weights in the input layer (its group, the quantity
        group lasso drives to zero): the party's own summary of how much its model uses a feature."""
        layer = getattr(self.model, "input_layer", None)
        if layer is None or layer.weight.shape[1] != len(self.data.kept):
            return None
        with torch.no_grad():
            norms: np.ndarray = torch.linalg.vector_norm(layer.weight, dim=0).numpy()
        return norms

    def post_step(self) -> None:
        """Runs after every optimizer step (default nothing)."""

    # ---------------------------------------------------------------- helpers
    def rows(self, split: str, epoch: int, batch: int) -> torch.Tensor:
        X = self.data.X(split)
        if batch >= 0:
            if split != "train":
                raise ProtocolError(f"party {self.name!r}: EmbedRequest.batch = {batch} for split {split!r}; only "
                                    "'train' is sent in mini-batches, other splits take batch = -1 (the whole split)")
            check_batch(self.name, split, batch, self.plan)
            X = self.data.batch(split, self.plan.rows(epoch, batch))  # (a memory-mapped split: pages released)
        return X

    def drop_inputs(self, keep_local: Sequence[int] | np.ndarray) -> None:
        """Remove features for real: keep positions ``keep_local`` of the *current* inputs. The
        optimizer's state (Adam's moments) carries over to the weights that stay."""
        keep_local = np.asarray(keep_local, dtype=np.int64)
        model: Any = self.model  # an MLP-like bottom model (input_layer, keep_inputs)
        old, opt = model.input_layer, self.optimizer
        model.keep_inputs(keep_local)
        self.data.keep_positions(keep_local)
        self.optimizer = self.make_optimizer()
        new, idx = model.input_layer, torch.as_tensor(keep_local)
        carry_optimizer_state(opt, self.optimizer, {new.weight: (old.weight, lambda t: t[:, idx]),
                                                    new.bias: (old.bias, lambda t: t)})

    def keep_outputs(self, keep: Sequence[int] | np.ndarray) -> None:
        """Keep only embedding components ``keep`` (the output layer shrinks); the optimizer's
        state carries over to the weights that stay."""
        keep = np.asarray(keep, dtype=np.int64)
        model: Any = self.model  # an MLP-like bottom model (output_layer, keep_outputs)
        old, opt = model.output_layer, self.optimizer
        model.keep_outputs(keep)
        self.optimizer = self.make_optimizer()
        new, idx = model.output_layer, torch.as_tensor(keep)
        carry_optimizer_state(opt, self.optimizer, {new.weight: (old.weight, lambda t: t[idx]),
                                                    new.bias: (old.bias, lambda t: t[idx])})

    def step(self, out: torch.Tensor, g: torch.Tensor) -> None:
        """Back-propagate ``g`` through ``out`` (plus :meth:`local_loss`), step, :meth:`post_step`."""
        opt = self.optimizer
        opt.zero_grad(set_to_none=True)
        local = self.local_loss()
        if local is None:
            out.backward(g)  # type: ignore[no-untyped-call]  # torch's Tensor.backward is not annotated
        else:
            torch.autograd.backward([out, local], [g, torch.ones_like(local)])
        opt.step()
        self.post_step()

    # ------------------------------------------------------------------ saving
    def export(self) -> dict[str, Any]:
        return {"spec": message_to_dict(self.spec),
                "state": {k: v.detach().clone() for k, v in self.model.state_dict().items()}}

    @classmethod
    def restore(cls, data: LocalData, saved: dict[str, Any], ctx: Context) -> SplitRole:
        role = cls(data, message_from_dict(saved["spec"]), ctx)
        load_shaped(role.model, saved["state"])
        role.model.eval()
        return role

    # --------------------------------------------------------------- handlers
    def joined(self) -> Ready:
        n_outputs: int = self.model.n_outputs  # type: ignore[assignment]  # an MLP-like bottom model
        return Ready(n_features=len(self.data.kept), embedding_dim=int(n_outputs),
                     n_samples={s: self.data.n_samples(s) for s in self.data.splits})

    @handles(EmbedRequest)
    def on_embed_request(self, msg: EmbedRequest, ctx: Context) -> Any:
        check_embed_request(self.name, msg)  # untrusted fields, before any state changes
        model = self.model
        X = self.rows(msg.split, msg.epoch, msg.batch)
        if msg.train:
            if not model.training:
                model.train()
            out = self.forward(X)
            self.pending = out
            ctx.expect_elements(out.numel())  # the Gradients that follow: even all-zero run-length codes
            return self.encode_forward(out, True)
        if model.training:
            model.eval()
        with torch.no_grad():
            out = self.forward_rows(X)
        return self.encode_forward(out, False)

    def forward_rows(self, X: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` without gradients over a whole split, :data:`EVAL_ROWS` rows at a time
        (each row's embedding is its own: the bottom models are row-wise in evaluation): a party of
        millions of rows holds one block's hidden activations, not the split's."""
        if len(X) <= EVAL_ROWS:
            return self.forward(X)
        parts = [self.forward(X[a:a + EVAL_ROWS]) for a in range(0, len(X), EVAL_ROWS)]
        return torch.cat(parts, 0)

    @handles(Gradients)
    def on_gradients(self, msg: Any, ctx: Context) -> None:
        out = self.pending
        if out is None:
            raise ProtocolError(f"party {self.name!r} received {type(msg).__name__} without a pending "
                                "forward pass")
        self.pending = None
        self.step(out, self.decode_backward(msg, out))
        return None

    @handles(Checkpoint)
    def on_checkpoint(self, msg: Checkpoint, ctx: Context) -> None:
        if msg.action == "save":
            self.saved = copy.deepcopy(self.model.state_dict())
        elif msg.action == "restore":
            if self.saved is None:
                raise ProtocolError(f"party {self.name!r} has no checkpoint to restore")
            self.model.load_state_dict(self.saved)
        else:
            raise ProtocolError(f"unknown checkpoint action {msg.action!r}; use 'save' or 'restore'")
        return None


# ------------------------------------------------------------------------ the label holder's side
def _tie_loss(entry: dict[str, Any] | None) -> float:
    """Validation loss of a history entry (log-loss, or MSE for regression); +inf if absent."""
    if entry is None:
        return float("inf")
    v = entry.get("val_log_loss", entry.get("val_mse"))
    return float("inf") if v is None or v != v else float(v)


class SplitTrainer:
    """Runs split learning from the label holder over the parties' proxies.

    Parameters
    ----------
    fed : Federation
        The label holder's view (``labels``, ``proxy``, ``join``, ``ledger``), or a
        :class:`~verticalfs.federation.LocalFederation` for the non-federated reference.
    method : str
        The registered method whose role the parties take (sent in ``Join``).
    config : TrainConfig
    seed : int
        Seeds model initialisation (per party, derived) and the batch order.
    callbacks : sequence of Callback
    entry_hook : callable, optional
        ``hook(entry)`` may add fields to each history entry (e.g. ``spurious_removed``).
    eval_splits : sequence of str
        Splits evaluated after every epoch (test as plain metric names, others as ``<split>_<name>``).
    select : str, optional
        A history key (e.g. ``val_roc_auc``): keep the checkpoint of the epoch where it is highest
        and report that epoch's test metrics; default: the last epoch.
    codec : str
        Payload codec of the embeddings and gradients (``float32``, ``float16``, ``int8``, ...).
    spec_class : type, optional
        The spec message the parties get at ``Join`` (default :class:`SplitSpec`; a method's own
        subclass of it).
    spec_extra : dict, optional
        Fields of ``spec_class`` beyond :class:`SplitSpec`'s, the same for every party (e.g.
        group lasso's ``lam``).
    checkpoints : Checkpointer, optional
        Checkpoint every epoch of :meth:`fit` with it (the run's
        :class:`~verticalfs.training.checkpoint.Checkpointer`, from the method's ``checkpoints``).
    """

    spec_class: type[Any] = SplitSpec
    #: what its callbacks' steps are (:class:`~verticalfs.training.history.Run`)
    unit = "epoch"

    def __init__(self, fed: Federation | LocalFederation, method: str, config: TrainConfig, *, seed: int = 0,
                 callbacks: Sequence[Callback] = (), entry_hook: Callable[[dict[str, Any]], None] | None = None,
                 eval_splits: Sequence[str] = ("test", "val"), select: str | None = None,
                 codec: str = "float32", spec_class: type[Any] | None = None,
                 spec_extra: dict[str, Any] | None = None, checkpoints: Checkpointer | None = None) -> None:
        config.validate()
        get_codec(codec)  # validates the name
        self.fed = fed
        self.method = method
        self.config = config
        self.seed = seed
        self.callbacks = list(callbacks)
        self.entry_hook = entry_hook
        self.labels = fed.labels
        self.task = self.labels.task
        self.y = {s: torch.from_numpy(np.asarray(v)) for s, v in self.labels.y.items()}
        self.eval_splits = tuple(s for s in eval_splits if self.n_samples(s) > 0)
        self.select = select
        self.codec = codec
        if spec_class is not None:
            self.spec_class = spec_class
        self.spec_extra = dict(spec_extra or {})
        self.checkpoints = checkpoints
        self.history = History()
        self.epoch = 0  # communication epochs run so far, over all phases
        self.parties = list(fed.party_names)
        self.embedding_dims: dict[str, int] = {}
        self.n_features: dict[str, int] = {}  # features each party uses, as it reported at Join
        self.loss = loss_fn(self.task)
        self.plan = BatchPlan(self.n_samples("train"), config.batch_size, derive_seed(seed, "batches"))
        self.top: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.best_score: float | None = None
        self.best_entry: dict[str, Any] | None = None
        self._saved_top: dict[str, Any] | None = None

    def n_samples(self, split: str = "train") -> int:
        return int(self.y[split].shape[0])

    @property
    def ledger(self) -> Ledger:
        return self.fed.ledger

    def _top_model(self) -> torch.nn.Module:
        if self.top is None:
            raise ProtocolError(f"{self.method}: no top model yet (setup() builds it)")
        return self.top

    def _top_optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            raise ProtocolError(f"{self.method}: no optimizer of the top model yet (setup() builds it)")
        return self.optimizer

    # ---------------------------------------------------------------- set-up
    def spec_for(self, party: str) -> Any:
        """What ``party`` is told at ``Join``: a ``spec_class`` of the config plus
        ``spec_extra`` (the fields a method's spec adds to :class:`SplitSpec`)."""
        c = self.config
        return self.spec_class(**self.spec_extra, **dict(
            hidden=tuple(c.hidden), embedding_dim=c.embedding_dim, activation=c.activation,
            optimizer=c.optimizer, lr=c.lr, weight_decay=c.weight_decay,
            seed=derive_seed(self.seed, "model", party), batch_size=c.batch_size,
            shuffle_seed=self.plan.shuffle_seed, forward=self.codec, backward=self.codec,
        ))

    def setup(self) -> None:
        """Learn the parties' schemas and ``Join`` every party with its spec (phase ``setup``); build
        the top model on the reported sizes."""
        self.fed.schema()
        replies = self.fed.join(self.method, {p: self.spec_for(p) for p in self.parties}, expect=Ready)
        for p, ready in replies.items():
            n = ready.n_samples
            for s in ("train", "val", "test"):
                if int(n.get(s, -1)) != self.n_samples(s):
                    raise ConfigError(f"party {p!r} has {n.get(s)} {s} rows, the label holder "
                                      f"{self.n_samples(s)}; align the parties by id first")
            self.embedding_dims[p] = int(ready.embedding_dim)
            self.n_features[p] = int(ready.n_features)
        # the largest tensor this protocol expects from a party: a whole split's embeddings
        width = max(self.embedding_dims.values(), default=1)
        self.fed.limit_tensor_elements(max(self.n_samples(s) for s in self.y) * width)
        self.build_top()

    @property
    def n_outputs(self) -> int:
        return self.labels.n_outputs

    def make_top(self, d_in: int) -> torch.nn.Module:
        c = self.config
        return TopModel(d_in, c.top_hidden, self.n_outputs, c.activation)

    def build_top(self) -> None:
        d = sum(self.embedding_dims[p] for p in self.parties)
        self.top = seeded(derive_seed(self.seed, "model", LABEL_HOLDER), lambda: self.make_top(d))
        self.rebuild_top_optimizer()

    def rebuild_top_optimizer(self) -> None:
        """A fresh optimizer of the config on the top model's parameters (its state starts anew)."""
        c = self.config
        self.optimizer = make_optimizer(self._top_model().parameters(), c.optimizer, c.lr, c.weight_decay)

    def replace_top(self, top: torch.nn.Module, embedding_dims: dict[str, int]) -> None:
        """Train on with the top model ``top`` on the embeddings of the parties in ``embedding_dims``.

        For a method that shrinks the model between epochs (LESS-VFL's component selection): the
        parties named in ``embedding_dims`` are the ones that take part from now on, in that order,
        each sending that many embedding components; a party not named leaves the training (it is
        asked for nothing more). The top model gets a fresh optimizer (:meth:`rebuild_top_optimizer`).

        Parameters
        ----------
        top : torch.nn.Module
            The new top model; its input width must be the sum of ``embedding_dims``.
        embedding_dims : dict of str to int
            Components per remaining party, each of them a party of the run.
        """
        unknown = [q for q in embedding_dims if q not in self.fed.party_names]
        if unknown:
            raise ConfigError(f"{self.method}: replace_top names parties {unknown} that are not in the run "
                              f"{list(self.fed.party_names)}")
        self.top = top
        self.parties = list(embedding_dims)
        self.embedding_dims = {q: int(d) for q, d in embedding_dims.items()}
        self.rebuild_top_optimizer()

    # ----------------------------------------------------------------- hooks
    def targets(self, split: str) -> torch.Tensor:
        return self.y[split]

    def decode_forward(self, party: str, msg: Any, n_rows: int) -> np.ndarray:
        """The embedding block of ``party`` from its message (shape checked: untrusted input).

        Parameters
        ----------
        party : str
            The sender.
        msg : Any
            Its reply to an :class:`EmbedRequest` (default :class:`Embeddings`, decoded by the codec).
        n_rows : int
            Rows asked for.

        Returns
        -------
        numpy.ndarray
            float32 of shape ``(n_rows, embedding_dims[party])``. SparseVFL also keeps the mask of
            the transmitted entries, FedSDG-FS scatters the open components into place.
        """
        v: np.ndarray = msg.values
        if v.shape != (n_rows, self.embedding_dims[party]):
            raise ProtocolError(f"party {party!r} sent embeddings of shape {v.shape}, expected "
                                f"{(n_rows, self.embedding_dims[party])}")
        return v

    def extra_loss(self, H: torch.Tensor, n: int) -> torch.Tensor | None:
        """A term added to the label holder's loss in the default :meth:`train_step` (default none).

        Parameters
        ----------
        H : torch.Tensor
            The batch's concatenated embeddings (the leaf whose gradient goes to the parties).
        n : int
            Rows of the batch.

        Returns
        -------
        torch.Tensor or None
            A scalar added to the loss (SparseVFL: its embedding penalty, equation 5), or None.
        """
        return None

    def encode_backward(self, party: str, g: np.ndarray) -> Any:
        """The message carrying the gradient block ``g`` of ``party``.

        Parameters
        ----------
        party : str
            The receiver.
        g : numpy.ndarray
            The gradient of the loss with respect to ``party``'s embedding block, ``(n_rows, dim)``.

        Returns
        -------
        Any
            The message (default :class:`Gradients` in the run's codec; SparseVFL masks it or sends
            the top W entries, FedSDG-FS only the open components).
        """
        return Gradients(g if self.codec == "float32" else coded(g, self.codec))

    def forward_batch(self, epoch: int, batch: int, at: At, n_rows: int, split: str = "train") -> list[np.ndarray]:
        """Every training party's embedding block of one batch of ``split`` (graphs kept for the
        gradients; ICAFS also asks for its parties' ``synthetic`` rows).

        Parameters
        ----------
        epoch, batch : int
            The batch in the agreed order (the parties derive its rows themselves).
        at : At
            The position the requests carry.
        n_rows : int
            Rows of the batch (the blocks' expected length).
        split : str
            The split the rows come from.

        Returns
        -------
        list of numpy.ndarray
            One block per party of :attr:`parties`, in that order (:meth:`decode_forward`).
        """
        req = EmbedRequest(split, epoch, batch, True)
        fed = self.fed
        reps = request_all([(fed.proxy(p), req) for p in self.parties], at, expect=Embeddings)
        return [self.decode_forward(p, rep, n_rows) for p, rep in zip(self.parties, reps, strict=True)]

    def backward_batch(self, G: np.ndarray, at: At) -> None:
        """Send every training party the gradient of its block of ``G``.

        Parameters
        ----------
        G : numpy.ndarray
            The gradient of the loss with respect to the concatenated embeddings, columns in the
            order of :attr:`parties` (:meth:`encode_backward` makes each party's message).
        at : At
            The position the messages carry.
        """
        fed = self.fed
        if len(self.parties) == 1:
            fed.proxy(self.parties[0]).send(self.encode_backward(self.parties[0], G), at)
            return
        start, out = 0, []
        for p in self.parties:
            stop = start + self.embedding_dims[p]
            out.append((fed.proxy(p), self.encode_backward(p, G[:, start:stop])))
            start = stop
        send_all(out, at)

    def output(self, H: np.ndarray) -> np.ndarray:
        """The top model's output on concatenated embeddings, as ``prediction_metrics`` takes it."""
        top = self._top_model()
        top.eval()
        with torch.no_grad():  # a block of rows at a time (row-wise): one block's activations held
            T = torch.from_numpy(H)
            out: np.ndarray = (top(T) if len(T) <= EVAL_ROWS else torch.cat(
                [top(T[a:a + EVAL_ROWS]) for a in range(0, len(T), EVAL_ROWS)], 0)).numpy()
        return out

    # -------------------------------------------------------------- training
    def on_epoch_begin(self, phase: str) -> None:
        """Called by :meth:`train_epoch` before the epoch's first batch (default nothing).

        Parameters
        ----------
        phase : str
            The ledger phase the epoch runs in (``train``, ``pretrain``, ...).

        Notes
        -----
        ``self.epoch`` is the epoch about to run (0-based, counted over all phases). A method sets
        its per-epoch state here: CompFS its decayed learning rate and penalty weights, ICAFS its
        gate temperature, SparseVFL resets its count of zero embedding entries.
        """

    def on_epoch_end(self, phase: str, loss: float) -> None:
        """Called by :meth:`train_epoch` after the epoch's last batch, before it returns and before
        the epoch is evaluated and recorded (default nothing).

        Parameters
        ----------
        phase : str
            The ledger phase the epoch ran in.
        loss : float
            The epoch's mean training loss, as :meth:`train_epoch` returns it.
        """

    def check_loss(self, value: float, at: At) -> None:
        """Raise :class:`~verticalfs.exceptions.ConfigError` if the training loss ``value`` of the
        batch at ``at`` is NaN or infinite.

        :meth:`train_epoch` checks the value every :meth:`train_step` returns, so a method that
        replaces the step cannot lose the check; a step may also call it itself before it sends
        gradients to the parties (the default step does), so that no party trains on them.

        Parameters
        ----------
        value : float
            The batch's training loss.
        at : At
            The batch's position (its ``round`` is the epoch, its ``step`` the batch).
        """
        if not math.isfinite(value):
            raise ConfigError(
                f"{self.method}: the training loss became {value} in epoch {at.round + 1}, batch {at.step + 1}; "
                "lower the learning rate (lr) or scale the features (--scaling standard or minmax)")

    def train_step(self, at: At, rows: np.ndarray, y: torch.Tensor) -> float:
        """One mini-batch of Algorithm 2: embeddings up, top model step, gradients down.

        A method whose exchange per batch differs (other messages, two steps per batch, the
        secure protocol) replaces this and keeps the epoch loop, the loss check, the batch order
        and the bookkeeping of :meth:`train_epoch`.

        Parameters
        ----------
        at : At
            The batch's position (phase, epoch as ``round``, batch index as ``step``): every
            message of the step carries it.
        rows : numpy.ndarray
            The training rows of the batch (int64 indices into the ``train`` split, from the plan
            the parties share: :attr:`plan`).
        y : torch.Tensor
            Their targets (:meth:`targets` of ``train`` at ``rows``).

        Returns
        -------
        float
            The batch's loss, extra loss included (its mean over the epoch, weighted by the rows of
            each batch, is the epoch's ``train_loss``).
        """
        n = len(rows)
        blocks = self.forward_batch(at.round, at.step, at, n)
        # One leaf for the concatenated embeddings: the gradient of each party's block is a
        # column slice of its gradient (exactly what autograd through torch.cat would give).
        H = torch.from_numpy(np.concatenate(blocks, 1) if len(blocks) > 1 else blocks[0]).requires_grad_(True)
        loss = self.loss(self._top_model()(H), y)
        extra = self.extra_loss(H, n)
        if extra is not None:
            loss = loss + extra
        opt = self._top_optimizer()
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward is not annotated
        opt.step()
        value = loss.item()
        self.check_loss(value, at)
        assert H.grad is not None  # loss.backward() filled it: H is a leaf that requires grad
        self.backward_batch(H.grad.numpy(), at)
        return value

    def train_epoch(self, phase: str = "train") -> float:
        """One epoch of Algorithm 2 (every method's epoch loop); returns the mean training loss.

        Runs :meth:`on_epoch_begin`, then :meth:`train_step` on each mini-batch of the agreed
        order (the first ``config.limit_batches`` only, if set), checking every batch's loss
        (:meth:`check_loss`), then :meth:`on_epoch_end`. Does not advance :attr:`epoch` (see
        :meth:`fit`).

        Parameters
        ----------
        phase : str
            The ledger phase of the epoch's messages.

        Returns
        -------
        float
            The mean of the batches' losses weighted by their rows.
        """
        epoch, plan = self.epoch, self.plan
        y_all = self.targets("train")
        self._top_model().train()
        self.on_epoch_begin(phase)
        n_batches = plan.n_batches
        if self.config.limit_batches is not None:
            n_batches = min(n_batches, int(self.config.limit_batches))
        total, n_seen = 0.0, 0
        for b in range(n_batches):
            at = At(phase, epoch, b)
            rows = plan.rows(epoch, b)
            value = self.train_step(at, rows, y_all.index_select(0, torch.from_numpy(rows)))
            self.check_loss(value, at)
            total += value * len(rows)
            n_seen += len(rows)
        self.fed.mark(At(phase, epoch, plan.n_batches))  # work after the last message of the epoch
        loss = total / max(1, n_seen)
        self.on_epoch_end(phase, loss)
        return loss

    def embeddings(self, split: str, phase: str = "eval") -> np.ndarray:
        """Concatenated embeddings of a whole split (requested in ``phase``)."""
        at = At(phase, self.epoch)
        n = self.n_samples(split)
        req = EmbedRequest(split, self.epoch, -1, False)
        reps = request_all([(self.fed.proxy(p), req) for p in self.parties], at, expect=Embeddings)
        blocks = [self.decode_forward(p, rep, n) for p, rep in zip(self.parties, reps, strict=True)]
        return np.concatenate(blocks, 1) if len(blocks) > 1 else blocks[0]

    def predict(self, split: str, phase: str = "eval") -> np.ndarray:
        """Top-model output on a whole split (embeddings requested in ``phase``)."""
        return self.output(self.embeddings(split, phase))

    def evaluate(self, splits: Sequence[str] | None = None) -> dict[str, float]:
        """Test metrics by name, other splits' metrics as ``<split>_<name>``."""
        res: dict[str, float] = {}
        labels = self.labels
        for s in splits or self.eval_splits:
            if self.n_samples(s) == 0:
                continue
            m = prediction_metrics(labels.task, labels.y[s], self.predict(s), labels.n_classes)
            prefix = "" if s == "test" else f"{s}_"
            res.update({prefix + k: v for k, v in m.items()})
        return res

    def entry_extras(self) -> dict[str, Any]:
        """Extra fields for the history entry of the epoch just finished (default none)."""
        return {}

    def record(self, phase: str, train_loss: float | None, **extra: Any) -> dict[str, Any]:
        """Evaluate and append a history entry for the epoch just finished."""
        led = self.ledger
        entry: dict[str, Any] = {"epoch": self.epoch, "phase": phase}
        if train_loss is not None:
            entry["train_loss"] = train_loss
        entry.update(self.evaluate())
        entry.update(self.entry_extras())
        entry.update(extra)
        entry["bytes"] = led.total_bytes - led.bytes_where(phase="eval") - led.bytes_where(phase="checkpoint")
        entry["bytes_total"] = led.total_bytes
        if self.entry_hook is not None:
            self.entry_hook(entry)
        self.history.append(entry)
        if self.select is not None:
            score = entry.get(self.select)
            if score is not None and score == score and (
                    self.best_score is None or score > self.best_score
                    or (score == self.best_score and _tie_loss(entry) < _tie_loss(self.best_entry))):
                # ties (e.g. a validation ROC-AUC saturated at 1.0 on many classes) go to the lower
                # validation loss, not to the first tied epoch
                self.best_score = score
                self.best_entry = entry
                self.save_checkpoint()
        for cb in self.callbacks:
            cb.on_epoch_end(self, entry)
        return entry

    def fit(self, epochs: int | None = None, phase: str = "train",
            after_epoch: Callable[[SplitTrainer], None] | None = None) -> History:
        """Run ``epochs`` epochs (default ``config.epochs``) in ``phase``."""
        epochs = self.config.epochs if epochs is None else epochs
        for cb in self.callbacks:
            cb.on_train_begin(self, epochs, phase)
        ck = self.checkpoints  # a Checkpointer when the run checkpoints
        start = ck.begin(self) if ck is not None else 0
        try:
            for i in range(start, epochs):
                loss = self.train_epoch(phase)
                if after_epoch is not None:
                    after_epoch(self)
                self.epoch += 1
                self.record(phase, loss)
                if ck is not None:
                    ck.save(self, i + 1)
        finally:
            for cb in self.callbacks:
                cb.on_train_end(self)
        return self.history

    # ------------------------------------------------------ saved-model hooks
    #: True when the top model outputs one logit for a binary task (SparseVFL's); the saved model
    #: then predicts the two columns ``[0, logit]``, as every other binary model's output has
    binary: bool = False

    def export_top(self) -> SplitHolder:
        """The label holder's part of a saved split model (kind ``"split"``): the parties' order
        and embedding widths and the top model (a :class:`~verticalfs.nn.models.TopModel`).

        :meth:`Method.export_holder <verticalfs.methods.base.Method.export_holder>` uses it by
        default; a trainer whose top model is not a ``TopModel`` belongs to a method that
        overrides ``export_holder`` (ICAFS) or says it cannot save (``cannot_save``).
        """
        top = self.top
        if not isinstance(top, TopModel):
            raise ConfigError(f"{self.method}: its top model ({type(top).__name__}) is not saved as a split "
                              "model; this method cannot save its model yet")
        return {"kind": "split", "parties": list(self.parties),
                "embedding_dims": {p: int(d) for p, d in self.embedding_dims.items()},
                "top_state": {k: v.detach().clone() for k, v in top.state_dict().items()},
                "top_hidden": [int(m.out_features) for m in top.linears[:-1]],
                "activation": str(top.activation),
                "two_column": bool(self.binary)}

    # ----------------------------------------------------------- checkpoints
    @property
    def position(self) -> int:
        """Epochs run so far (the ``round`` of a checkpoint's messages)."""
        return self.epoch

    def checkpoint_state(self) -> dict[str, Any]:
        """The trainer's state for a run's checkpoint (:class:`~verticalfs.training.checkpoint.Checkpointer`):
        its attributes (top model, optimiser, history, best epoch so far, and whatever a method's
        trainer keeps), not those the run rebuilds."""
        return {k: v for k, v in vars(self).items() if k not in _TRAINER_NOT_STATE}

    def load_checkpoint_state(self, saved: dict[str, Any], keys: dict[str, PrivateKey]) -> None:
        """Put :meth:`checkpoint_state`'s output back into this (the resumed run's) trainer."""
        from verticalfs.training.checkpoint import restore_attrs

        restore_attrs(self, saved, keys, "the label holder's trainer")

    def save_checkpoint(self) -> None:
        self._saved_top = copy.deepcopy(self._top_model().state_dict())
        self._checkpoint_parties("save")

    def restore_checkpoint(self) -> None:
        if self._saved_top is None:
            raise ProtocolError(f"{self.method}: no checkpoint of the top model to restore")
        self._top_model().load_state_dict(self._saved_top)
        self._checkpoint_parties("restore")

    def _checkpoint_parties(self, action: str) -> None:
        send_all([(self.fed.proxy(p), Checkpoint(action)) for p in self.parties], At("eval", self.epoch))

    def finish(self) -> dict[str, float]:
        """The run's test metrics: the last epoch's, or with ``select`` those of the restored best
        checkpoint."""
        if not self.history:
            return self.evaluate(["test"])
        last = self.history[-1]
        if self.select is None or self.best_entry is None:
            return test_metrics(last) or self.evaluate(["test"])
        if self.best_entry is not last:
            self.restore_checkpoint()
        return self.evaluate(["test"])

    def best_epoch(self) -> int | None:
        return None if self.best_entry is None else int(self.best_entry["epoch"])


def saved_embeddings(holder: SplitHolder, fed: Any, split: str) -> np.ndarray:
    """The concatenated embeddings of ``split`` from the parties of a saved split model (phase
    ``eval``), each party's block checked against the width the model was saved with."""
    at = At("eval")
    n = fed.n_samples(split)
    blocks = []
    req = EmbedRequest(split, 0, -1, False)
    reps = request_all([(fed.proxy(p), req) for p in holder["parties"]], at, expect=Embeddings)
    for p, rep in zip(holder["parties"], reps, strict=True):
        v = rep.values
        if v.shape != (n, holder["embedding_dims"][p]):
            raise ProtocolError(f"party {p!r} sent embeddings of shape {v.shape}, expected "
                                f"{(n, holder['embedding_dims'][p])}")
        blocks.append(v)
    return np.concatenate(blocks, 1) if len(blocks) > 1 else blocks[0]


def saved_split_output(holder: SplitHolder, H: np.ndarray) -> np.ndarray:
    """The output of a saved split model's top model (:meth:`SplitTrainer.export_top`) on ``H``."""
    state = holder["top_state"]
    weights = [k for k in state if k.endswith("weight")]
    d_in, out_dim = int(state[weights[0]].shape[1]), int(state[weights[-1]].shape[0])
    top = TopModel(d_in, holder["top_hidden"], out_dim, holder["activation"])
    load_shaped(top, state)
    top.eval()
    with torch.no_grad():
        out: np.ndarray = top(torch.from_numpy(np.ascontiguousarray(H, dtype=np.float32))).numpy()
    if holder["two_column"]:
        out = np.concatenate([np.zeros_like(out), out], 1)
    return out


def test_metrics(entry: dict[str, Any]) -> dict[str, float]:
    """The test metrics of a history entry (not bookkeeping, not ``<split>_*``)."""
    return {k: v for k, v in entry.items() if k not in NON_METRIC_KEYS and k != "embedding_zeros"
            and not k.startswith("val_") and isinstance(v, (int, float)) and not isinstance(v, bool)}
