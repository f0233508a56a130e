"""SparseVFL's messages and the passive party's side of Algorithm 1 (sparsevfl.md section 4).

Protocol of one run (phases as written on the ledger):

1. ``setup``: :class:`CodedSpec` (active -> passive) -> core :class:`~verticalfs.transport.Ready`.
   The spec says how to build the bottom model (the paper's ``Linear(d_in, e, bias=False)`` and
   the last activation, ReLU for SparseVFL), the optimizer, the agreed mini-batches and the
   :class:`~verticalfs.methods.sparsevfl.coding.Coding` of both directions.
2. ``train``, per mini-batch and party: :class:`CodedEmbedRequest` -> :class:`CodedEmbeddings`
   (Algorithm 1 lines 7-13: the party computes ``E_m``, codes it, keeps the mask ``H_m, T_m``), then
   one-way :class:`CodedGradients` (lines 21-29: the active party codes ``G'_m`` with the mask it
   decoded; the party decodes it with the mask it kept and back-propagates).
3. ``eval``: :class:`CodedEmbedRequest` with ``batch=-1, train=False`` for a whole split (the
   forward coding with the codec's dense fallback, section 4.4), and :class:`Checkpoint` to keep /
   restore the parameters of the best validation epoch.

The request is a message of this folder rather than the core ``EmbedRequest`` because handlers are
registered per message class: the core handler replies with a dense ``Embeddings`` tensor.

Compute time: the in-process channel adds every handler's run time to the receiving party's
compute on the ledger (``transport/inprocess.py``), so the handlers here do not call
``ledger.add_compute`` themselves (that would count it twice); the active party's compute is added
by the trainer.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.methods.sparsevfl.coding import Coding
from verticalfs.nn.models import make_optimizer, seeded
from verticalfs.parties import PassiveParty, passive_handler
from verticalfs.training.batches import BatchPlan
from verticalfs.transport.messages import Ready, message

LAST_ACTIVATIONS = ("relu", "selu", "elu", "none")
_ACT = {"relu": nn.ReLU, "selu": nn.SELU, "elu": nn.ELU}
STATE_KEY = "sparsevfl"


def xavier_init(module: nn.Module) -> None:
    """Xavier-uniform weights and unit biases for every Linear layer.

    The initialisation of the public SparseVFL implementation (its client and server models);
    the paper does not state one.
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.ones_(m.bias)


class SparseBottom(nn.Module):
    """A client model of sparsevfl.md section 5: ``Linear(d_in, e)`` and the last activation.

    Parameters
    ----------
    d_in : int
        The party's prepared features.
    embedding_dim : int
        ``D_{h,m}`` (e).
    hidden : tuple of int
        Optional hidden widths (``Linear + ReLU`` each, with bias) before the output layer; empty
        is the paper's single linear layer.
    bias : bool
        Bias of the output layer (the paper's runs use none: ``--layer_no_bias``).
    last_activation : {"relu", "selu", "elu", "none"}
        ReLU for SparseVFL (section 4.1); SeLU / eLU for the ablation of Table 2.
    """

    def __init__(self, d_in: int, embedding_dim: int, hidden: tuple = (), bias: bool = False,
                 last_activation: str = "relu") -> None:
        super().__init__()
        if d_in < 1 or embedding_dim < 1:
            raise ConfigError(f"bottom model needs >= 1 input and output, got {d_in} -> {embedding_dim}")
        if last_activation not in LAST_ACTIVATIONS:
            raise ConfigError(f"last_activation must be one of {LAST_ACTIVATIONS}, got {last_activation!r}")
        layers: list[nn.Module] = []
        w = d_in
        for h in hidden:
            layers += [nn.Linear(w, int(h)), nn.ReLU()]
            w = int(h)
        layers.append(nn.Linear(w, embedding_dim, bias=bias))
        if last_activation != "none":
            layers.append(_ACT[last_activation]())
        self.net = nn.Sequential(*layers)
        self.n_outputs = embedding_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@message
class CodedSpec:
    """Active -> passive at set-up: the bottom model, optimizer, mini-batches and the coding.

    Mini-batches are agreed by index as with the core ``ModelSpec`` (``shuffle_seed``).
    """

    embedding_dim: int
    hidden: tuple
    bias: bool
    last_activation: str
    optimizer: str
    lr: float
    weight_decay: float
    seed: int
    batch_size: int
    shuffle_seed: int
    forward: str
    backward: str
    bits: int
    order: str
    top_w: int


@message
class CodedEmbedRequest:
    """Active -> passive: code and send the embeddings of mini-batch ``batch`` of ``epoch``.

    ``batch = -1`` asks for the whole ``split`` (evaluation); ``train=True`` keeps the autograd
    graph and the mask for the :class:`CodedGradients` that follows.
    """

    split: str
    epoch: int
    batch: int
    train: bool = True


@message
class CodedEmbeddings:
    """Passive -> active: one embedding batch in the agreed forward coding (payload = ``data``)."""

    data: bytes


@message
class CodedGradients:
    """Active -> passive, one-way: the gradient for the last training batch, agreed backward coding."""

    data: bytes


@message
class Checkpoint:
    """Active -> passive, one-way, phase ``eval``: ``save`` the current bottom model, or
    ``restore`` the saved one (the best-validation checkpoint of sparsevfl.md's runs)."""

    action: str


def coding_of(spec: CodedSpec) -> Coding:
    return Coding(forward=spec.forward, backward=spec.backward, bits=spec.bits, order=spec.order,
                  top_w=spec.top_w)


def _state(party: PassiveParty) -> dict:
    st = party.state.get(STATE_KEY)
    if st is None:
        raise ProtocolError(f"party {party.name!r} received a SparseVFL message before CodedSpec")
    return st


@passive_handler(CodedSpec)
def _on_spec(party: PassiveParty, sender: str, msg: CodedSpec) -> Ready:
    coding = coding_of(msg)  # validates
    d_in = len(party.kept)

    def build() -> SparseBottom:
        m = SparseBottom(d_in, msg.embedding_dim, tuple(msg.hidden), msg.bias, msg.last_activation)
        xavier_init(m)
        return m

    party.model = seeded(msg.seed, build)
    party.optimizer = make_optimizer(party.model.parameters(), msg.optimizer, msg.lr, msg.weight_decay)
    party.plan = BatchPlan(party.n_samples("train"), msg.batch_size, msg.shuffle_seed)
    party._pending = None
    party.state[STATE_KEY] = {"coding": coding, "mask": None, "saved": None}
    return Ready(n_features=d_in, embedding_dim=msg.embedding_dim,
                 n_samples={s: party.n_samples(s) for s in ("train", "val", "test")})


@passive_handler(CodedEmbedRequest)
def _on_embed_request(party: PassiveParty, sender: str, msg: CodedEmbedRequest) -> CodedEmbeddings:
    st = _state(party)
    model = party.model
    coding: Coding = st["coding"]
    X = party.X(msg.split)
    if msg.batch >= 0:
        X = X.index_select(0, torch.from_numpy(party.plan.rows(msg.epoch, msg.batch)))
    if msg.train:
        if not model.training:
            model.train()
        out = model(X)
        party._pending = out
        # Algorithm 1 lines 7-9: E_m, its coding, and the mask (H_m, T_m) the party keeps.
        data, st["mask"] = coding.encode_embeddings_keep_mask(out.detach().numpy())
        return CodedEmbeddings(data)
    if model.training:
        model.eval()
    with torch.no_grad():
        h = model(X).numpy()
    return CodedEmbeddings(coding.encode_embeddings(h))


@passive_handler(CodedGradients)
def _on_gradients(party: PassiveParty, sender: str, msg: CodedGradients) -> None:
    st = _state(party)
    out = party._pending
    if out is None:
        raise ProtocolError(f"party {party.name!r} received CodedGradients without a pending forward pass")
    party._pending = None
    n, d = out.shape
    mask, st["mask"] = st["mask"], None
    g = st["coding"].decode_gradients(msg.data, n, d, mask)  # Algorithm 1 line 28
    opt = party.optimizer
    opt.zero_grad(set_to_none=True)
    out.backward(torch.from_numpy(g))
    opt.step()
    return None


@passive_handler(Checkpoint)
def _on_checkpoint(party: PassiveParty, sender: str, msg: Checkpoint) -> None:
    st = _state(party)
    if msg.action == "save":
        st["saved"] = copy.deepcopy(party.model.state_dict())
    elif msg.action == "restore":
        if st["saved"] is None:
            raise ProtocolError(f"party {party.name!r} has no checkpoint to restore")
        party.model.load_state_dict(st["saved"])
    else:
        raise ProtocolError(f"unknown checkpoint action {msg.action!r}; use 'save' or 'restore'")
    return None


def zero_fraction(a: np.ndarray) -> float:
    """Fraction of exact zeros in ``a``."""
    return float(np.count_nonzero(a == 0)) / max(1, a.size)
