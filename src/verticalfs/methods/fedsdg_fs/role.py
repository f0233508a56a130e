"""The party's side of FedSDG-FS: split learning with stochastic dual gates (:mod:`.gates`) and its
part of the Gini initialisation (:mod:`.gini`, Algorithm 1).

The party holds its own columns, its bottom model and both gates; the label holder never sees a
gate, a feature or a bin. Messages are in :mod:`.messages`.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from verticalfs.crypto import HIDING_FLOOR, EncryptedArray, PublicKey
from verticalfs.exceptions import ProtocolError
from verticalfs.histogram import seal
from verticalfs.methods.fedsdg_fs import gini as G
from verticalfs.methods.fedsdg_fs.gates import GatedMLP, gini_init
from verticalfs.methods.fedsdg_fs.messages import (
    ClearGini,
    CloseGates,
    EncryptedEmbeddingGradient,
    EncryptedGini,
    FedSDGSpec,
    ForwardShares,
    GatedEmbeddings,
    GatePenalty,
    GatesClosed,
    GiniLabels,
    GiniScores,
    KeyRequest,
    MaskedCounts,
    MaskedProducts,
    MaskedWeightGradient,
    NoisyWeightGradient,
    PartyKey,
    PlainGiniLabels,
    SecureEmbeddings,
    SquaredCounts,
)
from verticalfs.methods.fedsdg_fs.secure import ClientCrypto, SecureScoreParams, UnpackedClientCrypto, row_blocks
from verticalfs.methods.labels_proof import LabelChecks
from verticalfs.nn.models import make_optimizer
from verticalfs.party import Context, handles, refusal
from verticalfs.training.history import derive_seed
from verticalfs.training.split import SplitRole, carry_optimizer_state
from verticalfs.transport.messages import coded

#: the largest number of bins a party accepts in a Gini request (untrusted input)
MAX_BINS = 1024
#: the largest number of classes a party accepts in a Gini request (untrusted input)
MAX_CLASSES = 1024


class GiniParty(LabelChecks):
    """A party's side of Algorithm 1 (the Gini scores of its features), for any role that needs it:
    FedSDG-FS initialises its input gates from the scores, ``ms-gini`` only reports them."""

    gini: dict = {}

    def _columns(self, n_bins: int, ctx: Context | None = None) -> np.ndarray:
        """The columns in use on the training rows (a view: a memory-mapped table stays mapped),
        after checking ``n_bins`` (the party's ``max_bins``: its check_bounds layer)."""
        if not 2 <= int(n_bins) <= MAX_BINS:
            raise ProtocolError(f"party {self.name!r}: n_bins must lie in [2, {MAX_BINS}], got {n_bins}")
        return self.data.X("train").numpy()

    @staticmethod
    def _min_rows(ctx: Context) -> int:
        return 1 if ctx.policy is None else int(ctx.policy.min_bin_rows)

    def gini_received(self, scores: np.ndarray) -> None:
        """What the party does with its Gini scores (default: keep them)."""

    def _scores(self, scores) -> np.ndarray:
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        d = len(self.data.kept)
        if scores.shape != (d,) or not np.all(np.isfinite(scores)):
            raise ProtocolError(f"party {self.name!r}: Gini scores of shape {scores.shape} (finite: "
                                f"{bool(np.all(np.isfinite(scores)))}), expected {d} finite values")
        self.gini = {"scores": scores}
        self.gini_received(scores)
        return scores

    @handles(PlainGiniLabels, policy=("require_secure", "accept_labels"))
    def on_plain_labels(self, msg: PlainGiniLabels, ctx: Context) -> ClearGini:
        y = np.asarray(msg.labels).reshape(-1)
        n = self.data.n_samples("train")
        c = int(msg.n_classes)
        if y.shape != (n,) or y.dtype.kind not in "iu" or c < 2 or (y.size and (y.min() < 0 or y.max() >= c)):
            raise ProtocolError(f"party {self.name!r}: PlainGiniLabels must hold {n} class codes in [0, {c})")
        X = self._columns(msg.n_bins, ctx)
        scores = G.gini_from_counts(G.bin_counts(X, int(msg.n_bins), y=y, n_classes=c,
                                                 min_rows=self._min_rows(ctx))[1])
        return ClearGini(scores=self._scores(scores))

    @handles(GiniLabels)
    def on_gini_labels(self, msg: GiniLabels, ctx: Context) -> MaskedCounts:
        pub = PublicKey.from_bytes(msg.public_key, insecure=msg.insecure)
        shape = tuple(int(s) for s in msg.shape)
        n = self.data.n_samples("train")
        c = int(msg.n_classes)
        if not 2 <= c <= MAX_CLASSES:
            raise ProtocolError(f"party {self.name!r}: GiniLabels over {c} classes, expected 2 to {MAX_CLASSES}")
        if not 16 <= int(msg.mask_bits) or 2 * (int(msg.mask_bits) + 1) + c.bit_length() + 4 > pub.bits:
            raise ProtocolError(f"party {self.name!r}: mask_bits {msg.mask_bits} out of range for a "
                                f"{pub.bits}-bit key")
        if G.hiding_bits(int(msg.mask_bits), n) < HIDING_FLOOR:  # the party's own floor, before any work
            raise ProtocolError(f"party {self.name!r}: {G.floor_message(int(msg.mask_bits), n)}")
        layout = G.LabelLayout.for_key(pub, int(msg.mask_bits), c)
        if shape != (n, layout.per_row):
            raise ProtocolError(f"party {self.name!r}: GiniLabels of shape {shape}, expected {(n, layout.per_row)} "
                                f"({c} classes, {layout.slots} per ciphertext)")
        A = EncryptedArray.from_bytes(pub, msg.labels, shape)
        n_bins = int(msg.n_bins)
        X = self._columns(n_bins, ctx)
        if ctx.policy is not None and ctx.policy.verify_labels and msg.classes:
            raise refusal(self.name, "verify_labels", True, "sum unproven per-class label ciphertexts (Algorithm 1's "
                          "cross term from the rows)", "the label holder sends the cross term per cell instead")
        # the label holder's proof that every ciphertext is a one-hot label (issue 50: else row
        # markers above the class slots name every bin)
        self.checked_labels(ctx, "gini", pub, msg.labels, A, slot_bits=layout.slot_bits)
        # the cross term from the rows: [[n_{jik}]], k < c - 1, summed like the counts
        Ak = EncryptedArray.from_bytes(pub, msg.classes, (n, c - 1)) if msg.classes else None
        sizes, _, sums = G.bin_counts(X, n_bins, encrypted=(A,) if Ak is None else (A, Ak),
                                      min_rows=self._min_rows(ctx))
        masked, r = G.mask_counts(sums[0], int(msg.mask_bits), layout, pub.max_int.bit_length())
        self.gini = {"pub": pub, "r": r, "sizes": sizes, "layout": layout}
        if Ak is not None:
            self.gini["class_counts"] = sums[1]
        # re-randomised before it goes back to the key holder (who made every input obfuscator and
        # would otherwise recognise the rows of one- and two-row bins in their product)
        return MaskedCounts(data=seal(masked).to_bytes(), shape=tuple(masked.shape))

    @handles(SquaredCounts)
    def on_squared_counts(self, msg: SquaredCounts, ctx: Context) -> EncryptedGini:
        st = self.gini
        if "r" not in st:
            raise ProtocolError(f"party {self.name!r} received SquaredCounts before GiniLabels")
        r = st["r"]
        sq = EncryptedArray.from_bytes(st["pub"], msg.data, r.shape[:2])
        if "class_counts" in st:
            if msg.classes:
                raise ProtocolError(f"party {self.name!r}: SquaredCounts with per-class values after GiniLabels "
                                    "that carried them")
            g = G.encrypted_gini(sq, r, st["sizes"], class_counts=st["class_counts"])
        else:
            cls = EncryptedArray.from_bytes(st["pub"], msg.classes, r.shape[:2] + (r.shape[2] - 1,))
            g = G.encrypted_gini(sq, r, st["sizes"], masked_classes=cls)
        self.gini = {}
        return EncryptedGini(data=seal(g).to_bytes(), exponent=int(g.exponent))

    @handles(GiniScores)
    def on_gini_scores(self, msg: GiniScores, ctx: Context) -> None:
        self._scores(msg.scores)
        return None


class FedSDGRole(GiniParty, SplitRole):
    """A party of FedSDG-FS (and of ``original-gate``, which switches the embedding gate off)."""

    spec: FedSDGSpec

    def __init__(self, data, spec, ctx) -> None:
        super().__init__(data, spec, ctx)
        if not isinstance(spec, FedSDGSpec):
            raise ProtocolError(f"party {data.name!r}: FedSDG-FS needs a FedSDGSpec, got {type(spec).__name__}")
        self.gini: dict = {}
        self.reset_epoch_record()
        #: components closed for good (:class:`CloseGates`); still part of the mask's width
        self.closed = np.zeros(int(spec.embedding_dim), dtype=bool)
        self.crypto: ClientCrypto | None = None
        if spec.secure:
            if int(spec.interactive) < 1:
                raise ProtocolError(f"party {self.name!r}: secure training needs the interactive layer's width")
            # eps_m must stay unknown to the label holder, which chose the spec's seeds: OS entropy
            self.crypto = (ClientCrypto if spec.packed else UnpackedClientCrypto)(k=int(spec.interactive), e=int(spec.embedding_dim), key_bits=int(spec.key_bits),
                                       insecure=bool(spec.insecure), backend=str(spec.backend),
                                       randomness=str(spec.randomness), precision=int(spec.precision),
                                       noise_scale=float(spec.noise_scale), rng=np.random.default_rng(),
                                       value_bits=int(spec.value_bits))

    @classmethod
    def policy_rules(cls, spec) -> tuple[str, ...]:
        # a spec of another kind (from a label holder that chooses every field) is no secure mode; the
        # method's own parameters (the label holder's side: the generated page of methods/deployable.py)
        # say what it would send
        secure = isinstance(spec, (FedSDGSpec, SecureScoreParams)) and bool(spec.secure)
        return () if secure else ("require_secure",)

    @classmethod
    def key_bits(cls, spec) -> int | None:
        secure = isinstance(spec, (FedSDGSpec, SecureScoreParams)) and bool(spec.secure)
        return int(spec.key_bits) if secure else None

    # ------------------------------------------------------------------ model
    def build_model(self, d_in: int) -> torch.nn.Module:
        s = self.spec
        mlp = super().build_model(d_in)
        gen = torch.Generator().manual_seed(derive_seed(int(s.seed), "gate noise"))
        mu = torch.full((d_in,), float(s.mu_init)) if s.input_gate else None
        omega = torch.full((int(s.embedding_dim),), float(s.omega_init)) if s.embed_gate else None
        return GatedMLP(mlp, mu, omega, float(s.sigma), gen)

    def make_optimizer(self, lr: float | None = None) -> torch.optim.Optimizer:
        """The party's optimizer: the gates' means (``mu``, ``omega``) at ``spec.gate_lr`` (0: the
        models' rate), every other parameter at ``spec.lr``."""
        s = self.spec
        gate_lr = float(s.gate_lr or 0.0)
        if not gate_lr or lr is not None:
            return super().make_optimizer(lr)
        gates = [p for p in (self.model.mu, self.model.omega) if p is not None]
        ids = {id(p) for p in gates}
        rest = [p for p in self.model.parameters() if id(p) not in ids]
        groups = [{"params": rest}] + ([{"params": gates, "lr": gate_lr}] if gates else [])
        return make_optimizer(groups, s.optimizer, float(s.lr), s.weight_decay, s.momentum)

    def gini_received(self, scores: np.ndarray) -> None:
        if self.model.mu is not None:  # Algorithm 1 line 15
            with torch.no_grad():
                self.model.mu.copy_(torch.from_numpy(gini_init(scores, float(self.spec.init_scale))).float())

    #: the penalty weight and pruning set by :class:`GatePenalty` (None: the spec's)
    lam_now: float | None = None
    prune_now: bool | None = None
    #: ``eps_acc`` at the last checkpoint (secure training; :meth:`on_checkpoint`)
    _saved_eps: np.ndarray | None = None

    @handles(GatePenalty)
    def on_gate_penalty(self, msg: GatePenalty, ctx: Context) -> None:
        lam = float(msg.lam)
        if not (np.isfinite(lam) and 0 <= lam <= 1e3):
            raise ProtocolError(f"party {self.name!r}: GatePenalty lam must be a finite number in [0, 1000], got {lam}")
        self.lam_now, self.prune_now = lam, bool(msg.prune)
        return None

    def on_checkpoint(self, msg, ctx: Context) -> None:
        """The model's state, and in secure training the accumulated noise ``eps_acc`` that goes
        with the label holder's ``W~`` (both restored together, or ``w`` would change)."""
        super().on_checkpoint(msg, ctx)
        if self.crypto is not None:
            if msg.action == "save":
                self._saved_eps = self.crypto.eps.copy()
            elif self._saved_eps is not None:
                self.crypto.eps = self._saved_eps.copy()
        return None

    def local_loss(self) -> torch.Tensor | None:
        lam = float(self.spec.lam) if self.lam_now is None else self.lam_now
        if not lam:
            return None
        r = self.model.regularizer(str(self.spec.penalty))
        return lam * r if r.requires_grad else None  # no gate left (every input removed, no embedding gate)

    def feature_scores(self) -> np.ndarray | None:
        mu = self.model.mu
        return None if mu is None else mu.detach().numpy().astype(np.float64)

    def reset_epoch_record(self) -> None:
        self.shut = None  # per kept input: consecutive training steps with its sampled gate at 0
        self.steps = 0

    def open_mask(self, q: torch.Tensor | None) -> np.ndarray:
        e = int(self.spec.embedding_dim)
        m = np.ones(e, dtype=bool) if q is None else (q.detach().numpy() > 0)
        return m & ~self.closed

    def encode_forward(self, h: torch.Tensor, train: bool):
        open_ = self.open_mask(self.model.last_q)
        self.last_open = open_
        if train and self.model.last_s is not None:
            s_shut = self.model.last_s.detach().numpy() <= 0
            if self.shut is None or len(self.shut) != len(s_shut):
                self.shut = np.zeros(len(s_shut), dtype=np.int64)
            self.shut = np.where(s_shut, self.shut + 1, 0)
        v = np.ascontiguousarray(h.detach().numpy()[:, open_])
        if self.crypto is not None:  # Algorithm 2 line 9
            cols, rows, bound = self.crypto.encrypt_embeddings(v, np.flatnonzero(open_), train)
            return SecureEmbeddings(open=open_, columns=cols, rows=rows, bound=bound)
        return GatedEmbeddings(open=open_, values=v if self._dense32 else coded(v, self.spec.forward))

    def decode_backward(self, msg, out: torch.Tensor) -> torch.Tensor:
        """The gradient of the open components (plain, or decrypted: Algorithm 3 line 17), placed
        into the full embedding width."""
        if isinstance(msg, EncryptedEmbeddingGradient):
            g = self._crypto().embedding_gradient(msg.data, self._blocks())
        else:
            g = np.asarray(msg.values)
        open_ = self.last_open
        if g.shape != (out.shape[0], int(open_.sum())):
            raise ProtocolError(f"party {self.name!r}: gradient shape {g.shape} != the open embedding "
                                f"components {(out.shape[0], int(open_.sum()))}")
        full = torch.zeros(out.shape, dtype=out.dtype)
        full[:, torch.from_numpy(np.flatnonzero(open_))] = torch.from_numpy(np.ascontiguousarray(g, dtype=np.float32))
        return full

    def post_step(self) -> None:
        self.steps += 1
        if self.steps % self.plan.n_batches:
            return
        # end of an epoch: inputs whose sampled gate was 0 at each of the last W steps leave the
        # model, W = one epoch but at least prune_steps (with one batch per epoch, one closed draw
        # of a gate at mean 0.5 has probability Phi(-1) = 16 %: an epoch alone is no evidence)
        window = max(int(self.plan.n_batches), int(self.spec.prune_steps))
        prune = self.spec.prune if self.prune_now is None else self.prune_now
        if prune and self.shut is not None and (self.shut >= window).any():
            keep = np.flatnonzero(self.shut < window)
            self.shut = self.shut[keep]
            self.drop_inputs(keep)

    def drop_inputs(self, keep_local) -> None:
        keep_local = np.asarray(keep_local, dtype=np.int64)
        model, opt = self.model, self.optimizer
        old_w, old_b, old_mu = model.input_layer.weight, model.input_layer.bias, model.mu
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a zero-input layer if every feature went
            model.keep_inputs(keep_local)
        self.data.keep_positions(keep_local)
        self.optimizer = self.make_optimizer()
        idx = torch.as_tensor(keep_local)
        sliced = {model.input_layer.weight: (old_w, lambda t: t[:, idx]), model.input_layer.bias: (old_b, lambda t: t)}
        if old_mu is not None:
            sliced[model.mu] = (old_mu, lambda t: t[idx])
        carry_optimizer_state(opt, self.optimizer, sliced)

    # ------------------------------------------------ secure training (Algorithms 2-3)
    def _crypto(self) -> ClientCrypto:
        if self.crypto is None:
            raise ProtocolError(f"party {self.name!r} received a secure-training message in a plaintext run")
        return self.crypto

    @handles(KeyRequest)
    def on_key_request(self, msg: KeyRequest, ctx: Context) -> PartyKey:
        return PartyKey(public_key=self._crypto().pub.to_bytes())

    @handles(MaskedProducts)
    def on_masked_products(self, msg: MaskedProducts, ctx: Context) -> ForwardShares:
        return ForwardShares(values=self._crypto().remove_forward_noise(msg.data))

    @handles(MaskedWeightGradient)
    def on_masked_weight_gradient(self, msg: MaskedWeightGradient, ctx: Context) -> NoisyWeightGradient:
        v, eps, R, bound = self._crypto().noisy_weight_gradient(msg.data, float(self.spec.lr))
        return NoisyWeightGradient(values=v, eps=eps, blocks=R, bound=bound)

    @handles(EncryptedEmbeddingGradient)
    def on_embedding_gradient(self, msg: EncryptedEmbeddingGradient, ctx: Context) -> None:
        return self.on_gradients(msg, ctx)  # the core's pending-pass check and step; decode_backward decrypts

    def _blocks(self) -> int:
        if not self.spec.packed:
            return 1
        c = self._crypto()
        return row_blocks(c.S, int(self.last_open.sum()), c._state()["n"], c.k)

    # ------------------------------------------------------------- the end
    @handles(CloseGates)
    def on_close_gates(self, msg: CloseGates, ctx: Context) -> GatesClosed:
        model = self.model
        if model.mu is not None:
            keep = np.flatnonzero(model.mu.detach().numpy() > 0)
            if len(keep) < len(self.data.kept):
                self.drop_inputs(keep)
        if model.omega is not None:
            self.closed |= ~(model.omega.detach().numpy() > 0)
        return GatesClosed(n_features=len(self.data.kept), open=~self.closed)

    # ------------------------------------------------------------- saving
    def export(self) -> dict:
        out = super().export()
        out["closed"] = self.closed.tolist()
        return out

    @classmethod
    def restore(cls, data, saved: dict, ctx: Context) -> FedSDGRole:
        from verticalfs.nn.models import load_shaped
        from verticalfs.transport.messages import message_from_dict

        role = cls(data, message_from_dict(saved["spec"]), ctx)
        state = saved["state"]
        for name in ("mu", "omega"):
            v = state.get(name)
            if v is not None and getattr(role.model, name) is not None:
                setattr(role.model, name, torch.nn.Parameter(torch.zeros_like(v)))
        load_shaped(role.model, state)
        role.closed = np.asarray(saved.get("closed", role.closed), dtype=bool)
        role.model.eval()
        return role


class GateRole(FedSDGRole):
    """A party of ``original-gate``: FedSDG-FS's input gates without its secure mode (it has none,
    so a policy's ``require_secure`` does not concern it)."""

    @classmethod
    def policy_rules(cls, spec) -> tuple[str, ...]:
        return ()
