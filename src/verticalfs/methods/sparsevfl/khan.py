"""PCA and AUTOENCODER of sparsevfl.md section 5 (Khan, ten Thij and Wilbik 2022).

Each passive party reduces its own features once, without labels, to ``e`` components: PCA fitted
on its training rows, or a small autoencoder trained on them (encoder ``Linear(d, d//2) -> ReLU ->
Linear(d//2, e) -> ReLU``, decoder ``Linear(e, d//2) -> ReLU -> Linear(d//2, d)``, MSE, Adam,
early stopping on the party's own validation reconstruction loss with patience 3: the public
SparseVFL re-implementation of Khan et al.; the columns standardised on the party's training rows
first, see :func:`standardised`). It then uploads the reduced train, validation and test
rows in one message (:class:`ReducedFeatures`, float32: sparsevfl.md runs these with Q = 32), and
the active party trains its top model alone on the concatenation. That upload is all the traffic:
no gradient ever goes back, so the client models are never optimised for the task (section 5.1).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from verticalfs.codecs import get_codec
from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.methods.sparsevfl.trainer import CodedVFLTrainer
from verticalfs.nn.models import init_weights, seeded, train_scale
from verticalfs.party import Context, Role, handles
from verticalfs.training.batches import BatchPlan
from verticalfs.training.history import derive_seed
from verticalfs.transport.messages import Ack, At, message

REDUCERS = ("pca", "autoencoder")
_F4 = np.dtype("<f4")


@message("sparsevfl.ReduceRequest")
class ReduceRequest:
    """Active -> passive, phase ``train``: reduce your features to ``n_components`` and upload them."""

    kind: str
    n_components: int
    seed: int
    epochs: int = 200
    lr: float = 0.01
    batch_size: int = 1024
    patience: int = 3


@message("sparsevfl.ReducedFeatures")
class ReducedFeatures:
    """Passive -> active: the reduced rows of each split, float32 row-major, ``dim`` columns."""

    dim: int
    train: bytes
    val: bytes
    test: bytes


class AutoEncoder(nn.Module):
    """The autoencoder of the public re-implementation of Khan et al. (see the module docstring)."""

    def __init__(self, d_in: int, dim: int) -> None:
        super().__init__()
        mid = max(1, d_in // 2)
        self.encoder = nn.Sequential(nn.Linear(d_in, mid), nn.ReLU(), nn.Linear(mid, dim), nn.ReLU())
        self.decoder = nn.Sequential(nn.Linear(dim, mid), nn.ReLU(), nn.Linear(mid, d_in))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


def train_autoencoder(X: torch.Tensor, X_val: torch.Tensor, dim: int, *, seed: int, epochs: int, lr: float,
                      batch_size: int, patience: int) -> AutoEncoder:
    """Train on ``X``; keep the epoch with the lowest reconstruction MSE on ``X_val``."""
    ae = seeded(seed, lambda: init_weights(AutoEncoder(X.shape[1], dim), "xavier"))
    opt = torch.optim.Adam(ae.parameters(), lr=lr)
    plan = BatchPlan(X.shape[0], batch_size, seed)
    best, best_state, waited = float("inf"), copy.deepcopy(ae.state_dict()), 0
    for epoch in range(epochs):
        ae.train()
        for b in range(plan.n_batches):
            xb = X.index_select(0, torch.from_numpy(plan.rows(epoch, b)))
            loss = nn.functional.mse_loss(ae(xb), xb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if X_val.shape[0] == 0:
            best_state = copy.deepcopy(ae.state_dict())
            continue
        ae.eval()
        with torch.no_grad():
            v = float(nn.functional.mse_loss(ae(X_val), X_val))
        if v < best:
            best, best_state, waited = v, copy.deepcopy(ae.state_dict()), 0
        else:
            waited += 1
            if waited > patience:
                break
    ae.load_state_dict(best_state)
    ae.eval()
    return ae


class KhanRole(Role):
    """A party of PCA / AUTOENCODER: reduces its own features once, without labels, and uploads them."""

    @handles(ReduceRequest)
    def on_reduce(self, msg: ReduceRequest, ctx: Context) -> ReducedFeatures:
        policy = ctx.policy
        if policy is not None:  # as a bottom model's embedding (issue 50): no more components than the floor
            from verticalfs.party import refusal
            from verticalfs.trust import max_embedding

            d = len(self.data.kept)
            top = max_embedding(policy, d)
            if top is not None and int(msg.n_components) > top:
                raise refusal(self.name, "max_embedding_fraction", policy.max_embedding_fraction,
                              f"upload {int(msg.n_components)} reduced components of its {d} features (at most "
                              f"{top} allowed): a reduction that wide can be inverted",
                              f"ask for n_components <= {top}, or raise it")
        return reduce_features({s: self.data.X(s) for s in ("train", "val", "test")}, msg)


def standardised(X: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every split of ``X`` centred and scaled by the training rows' mean and standard deviation
    (a constant column: by 1), the autoencoder's input (issue 40).

    The parties' columns arrive min-max scaled, so a Gaussian-like column varies by about 0.025
    around 0.5: the autoencoder then reconstructs the means (validation MSE = the columns'
    variance) and 7 of its 8 ReLU code units stay at zero on every row; on the 30-class synthetic
    set its codes gave the top model .063, PCA's .763 (benchmarks/sparsevfl/README.md, "Defaults on
    many classes"). PCA centres for itself and is unaffected.
    """
    mu, sd = train_scale(X["train"])
    return {s: (x - mu) / sd for s, x in X.items()}


def reduce_features(X: dict[str, torch.Tensor], msg: ReduceRequest) -> ReducedFeatures:
    """One party's reduction of its own rows ``X`` (by split) as ``msg`` asks."""
    if msg.kind not in REDUCERS:
        raise ProtocolError(f"unknown reduction {msg.kind!r}; use one of {REDUCERS}")
    if msg.kind == "pca":
        from sklearn.decomposition import PCA

        # PCA cannot give more components than features (or training rows).
        k = max(1, min(msg.n_components, X["train"].shape[1], X["train"].shape[0]))
        pca = PCA(n_components=k, svd_solver="full", random_state=msg.seed).fit(X["train"].numpy())
        Z = {s: pca.transform(x.numpy()) if len(x) else np.zeros((0, k)) for s, x in X.items()}
    else:
        k = msg.n_components
        X = standardised(X)
        ae = train_autoencoder(X["train"], X["val"], k, seed=msg.seed, epochs=msg.epochs, lr=msg.lr,
                               batch_size=msg.batch_size, patience=msg.patience)
        with torch.no_grad():
            Z = {s: ae.encoder(x).numpy() for s, x in X.items()}
    f32 = get_codec("float32")
    enc = {s: f32.encode(np.asarray(z, dtype=_F4)) for s, z in Z.items()}
    return ReducedFeatures(dim=k, train=enc["train"], val=enc["val"], test=enc["test"])


class ReducedTrainer(CodedVFLTrainer):
    """The label holder of PCA / AUTOENCODER: one upload, then its top model trained alone.

    Reuses :class:`CodedVFLTrainer`'s top model, loss, history and best-validation selection; its
    exchange hooks read the uploaded rows instead of sending messages, and the checkpoint is the
    label holder's top model only.
    """

    def __init__(self, *args, kind: str, reducer_epochs: int = 200, reducer_patience: int = 3,
                 **kwargs) -> None:
        if kind not in REDUCERS:
            raise ConfigError(f"kind must be one of {REDUCERS}, got {kind!r}")
        super().__init__(*args, **kwargs)
        self.kind = kind
        self.reducer_epochs = reducer_epochs
        self.reducer_patience = reducer_patience
        self.Z: dict[str, torch.Tensor] = {}

    def setup(self) -> None:
        """``Join``, the one upload (phase ``train``, round 0), then the top model on its widths."""
        self.fed.schema()
        self.fed.join(self.method, None, expect=Ack)
        blocks: dict[str, list[np.ndarray]] = {s: [] for s in ("train", "val", "test")}
        at = At("train", 0)
        for p in self.parties:
            req = ReduceRequest(self.kind, self.params.embedding_dim, derive_seed(self.seed, "reduce", p),
                                self.reducer_epochs, self.params.lr, self.params.batch_size,
                                self.reducer_patience)
            rep = self.fed.proxy(p).request(req, at, expect=ReducedFeatures)
            if not 1 <= int(rep.dim) <= max(1, self.params.embedding_dim):
                raise ProtocolError(f"party {p!r} sent {rep.dim} reduced features, asked for "
                                    f"{self.params.embedding_dim}")
            for s in blocks:
                raw = getattr(rep, s)
                n = self.n_samples(s)
                if len(raw) != 4 * n * rep.dim:
                    raise ProtocolError(
                        f"party {p!r} sent {len(raw)} bytes of {s} features, expected {n} x {rep.dim} float32"
                    )
                blocks[s].append(get_codec("float32").decode(memoryview(raw), n * rep.dim).reshape(n, rep.dim))
            self.embedding_dims[p] = int(rep.dim)
        self.Z = {s: [torch.from_numpy(b) for b in bl] for s, bl in blocks.items()}
        self.build_top()

    def forward_batch(self, epoch: int, batch: int, at: At, n_rows: int) -> list[np.ndarray]:
        """The uploaded rows of the batch: no message (the parties' models are never trained)."""
        rows = torch.from_numpy(self.plan.rows(epoch, batch))
        return [z.index_select(0, rows).numpy() for z in self.Z["train"]]

    def backward_batch(self, G: np.ndarray, at: At) -> None:
        """No gradient goes back (section 5.1)."""

    def embeddings(self, split: str, phase: str = "eval") -> np.ndarray:
        Z = self.Z[split]
        return torch.cat(Z, 1).numpy() if len(Z) > 1 else Z[0].numpy()

    def save_checkpoint(self) -> None:
        self._saved_top = copy.deepcopy(self.top.state_dict())

    def restore_checkpoint(self) -> None:
        self.top.load_state_dict(self._saved_top)
