"""The parties: :class:`PassiveParty` (one column block, a bottom model) and :class:`ActiveParty`
(the labels and the top model).

A party object holds only its own data: a passive party its own columns, the active party the
labels. Parties react to messages through handlers registered per message class with
:func:`passive_handler` / :func:`active_handler`; a method adds its own handlers from its own
folder. All handler functions take ``(party, sender, msg)`` and return a reply message or ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from verticalfs.data.vertical import ACTIVE, LabelData, PartyData
from verticalfs.exceptions import ProtocolError
from verticalfs.nn.models import BottomMLP, make_optimizer, seeded
from verticalfs.training.batches import BatchPlan
from verticalfs.transport.messages import (
    Embeddings,
    EmbedRequest,
    Gradients,
    ModelSpec,
    Ready,
    SupportReport,
    SupportRequest,
    kind_name,
)

Handler = Callable[[Any, str, Any], Any]
_PASSIVE: dict[type, Handler] = {}
_ACTIVE: dict[type, Handler] = {}


def passive_handler(msg_cls: type) -> Callable[[Handler], Handler]:
    """Register the function handling ``msg_cls`` at passive parties."""

    def deco(fn: Handler) -> Handler:
        _PASSIVE[msg_cls] = fn
        return fn

    return deco


def active_handler(msg_cls: type) -> Callable[[Handler], Handler]:
    """Register the function handling ``msg_cls`` at the active party."""

    def deco(fn: Handler) -> Handler:
        _ACTIVE[msg_cls] = fn
        return fn

    return deco


class PassiveParty:
    """A feature-holding party: its own columns, its bottom model, nothing else.

    Attributes
    ----------
    name : str
    feature_names : list of str
        Names of the party's prepared features (all of them, including removed ones).
    kept : numpy.ndarray
        Indices (into ``feature_names``) of the features still used by the model.
    model : BottomMLP or None
        Built on :class:`~verticalfs.transport.messages.ModelSpec`.
    state : dict
        Scratch space for method-specific handlers.
    post_step_hooks : list of callables
        Called as ``hook(party)`` after every optimizer step of VFL training (e.g. a proximal
        operator for group lasso).
    send_to : callable or None
        ``send_to(receiver, msg)`` sends a one-way message from this party to another party, for
        protocols with party-to-party messages (FEAST's statistical variables). Set by the
        :class:`~verticalfs.federation.Federation`; the message is metered like any other.
    """

    def __init__(self, data: PartyData) -> None:
        self.name = data.name
        self.feature_names = list(data.feature_names)
        self._X_all = {s: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)) for s, a in data.X.items()}
        self._X = dict(self._X_all)
        self.kept = np.arange(len(self.feature_names))
        self.model: BottomMLP | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.spec: ModelSpec | None = None
        self.plan: BatchPlan | None = None
        self.post_step_hooks: list[Callable[[PassiveParty], None]] = []
        self.state: dict[str, Any] = {}
        self.send_to: Callable[[str, Any], None] | None = None
        self._pending: torch.Tensor | None = None

    # ----------------------------------------------------------------- data
    def X(self, split: str) -> torch.Tensor:
        """The party's columns still in use, for ``split``."""
        return self._X[split]

    def n_samples(self, split: str = "train") -> int:
        return int(self._X_all[split].shape[0])

    @property
    def kept_feature_names(self) -> list[str]:
        return [self.feature_names[i] for i in self.kept]

    # ---------------------------------------------------------------- model
    def build_model(self, spec: ModelSpec) -> None:
        self.spec = spec
        d = len(self.kept)
        self.model = seeded(spec.seed, lambda: BottomMLP(d, spec.hidden, spec.embedding_dim, spec.activation))
        self.rebuild_optimizer()
        self.plan = BatchPlan(self.n_samples("train"), spec.batch_size, spec.shuffle_seed)
        self._pending = None

    def rebuild_optimizer(self, lr: float | None = None) -> None:
        s = self.spec
        self.optimizer = make_optimizer(self.model.parameters(), s.optimizer, s.lr if lr is None else lr,
                                        s.weight_decay, s.momentum)

    def drop_features(self, keep_local: np.ndarray) -> None:
        """Remove features for real: keep positions ``keep_local`` of the *current* inputs."""
        keep_local = np.asarray(keep_local, dtype=np.int64)
        self.model.keep_inputs(keep_local)
        self.kept = self.kept[keep_local]
        idx = torch.as_tensor(self.kept)
        self._X = {s: X.index_select(1, idx).contiguous() for s, X in self._X_all.items()}
        self.rebuild_optimizer()

    def keep_embedding_components(self, keep: np.ndarray) -> None:
        """Keep only embedding components ``keep`` (the output layer shrinks)."""
        self.model.keep_outputs(np.asarray(keep, dtype=np.int64))
        self.rebuild_optimizer()

    # ------------------------------------------------------------ messaging
    def handle(self, sender: str, msg: Any) -> Any:
        fn = _PASSIVE.get(type(msg))
        if fn is None:
            raise ProtocolError(f"party {self.name!r} has no handler for {kind_name(msg)} from {sender!r}")
        return fn(self, sender, msg)

    def require_model(self) -> BottomMLP:
        if self.model is None:
            raise ProtocolError(f"party {self.name!r} received a training message before ModelSpec")
        return self.model


class ActiveParty:
    """The label holder ("server" in the papers): labels and the top model, no feature columns."""

    name = ACTIVE

    def __init__(self, labels: LabelData) -> None:
        self.labels = labels
        self.task = labels.task
        self.y = {s: torch.from_numpy(np.asarray(v)) for s, v in labels.y.items()}
        self.top: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.state: dict[str, Any] = {}

    def n_samples(self, split: str = "train") -> int:
        return int(self.y[split].shape[0])

    def handle(self, sender: str, msg: Any) -> Any:
        fn = _ACTIVE.get(type(msg))
        if fn is None:
            raise ProtocolError(f"the active party has no handler for {kind_name(msg)} from {sender!r}")
        return fn(self, sender, msg)


# ------------------------------------------------------------------ core handlers
@passive_handler(ModelSpec)
def _on_model_spec(party: PassiveParty, sender: str, msg: ModelSpec) -> Ready:
    party.build_model(msg)
    return Ready(
        n_features=len(party.kept),
        embedding_dim=party.model.n_outputs,
        n_samples={s: party.n_samples(s) for s in party._X_all},
    )


@passive_handler(EmbedRequest)
def _on_embed_request(party: PassiveParty, sender: str, msg: EmbedRequest) -> Embeddings:
    model = party.require_model()
    X = party.X(msg.split)
    if msg.batch >= 0:
        X = X.index_select(0, torch.from_numpy(party.plan.rows(msg.epoch, msg.batch)))
    if msg.train:
        if not model.training:
            model.train()
        out = model(X)
        party._pending = out
        return Embeddings(out.detach().numpy())
    model.eval()
    with torch.no_grad():
        out = model(X)
    return Embeddings(out.numpy())


@passive_handler(Gradients)
def _on_gradients(party: PassiveParty, sender: str, msg: Gradients) -> None:
    if party._pending is None:
        raise ProtocolError(f"party {party.name!r} received Gradients without a pending forward pass")
    out, party._pending = party._pending, None
    g = torch.from_numpy(msg.values)
    if g.shape != out.shape:
        raise ProtocolError(
            f"party {party.name!r}: gradient shape {tuple(g.shape)} != embedding shape {tuple(out.shape)}"
        )
    party.optimizer.zero_grad(set_to_none=True)
    out.backward(g)
    party.optimizer.step()
    for hook in party.post_step_hooks:
        hook(party)
    return None


@passive_handler(SupportRequest)
def _on_support_request(party: PassiveParty, sender: str, msg: SupportRequest) -> SupportReport:
    return SupportReport(kept=np.asarray(party.kept, dtype=np.int64))
