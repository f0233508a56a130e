"""``fedsdg-fs`` and ``original-gate``: FedSDG-FS (fedsdg-fs.md, Li et al., INFOCOM 2023) and its
"original gate" baseline (STG's input gates only, no embedding gates, no Gini initialisation).

The run, from the label holder (the paper's server S):

1. ``setup``: every party joins with a :class:`~.messages.FedSDGSpec` (bottom MLP, gates, noise).
2. ``pretrain``, Algorithm 1 (``gini_init``): the Gini score of every feature, computed under
   Paillier (``secure=True``) or in the clear with the same arithmetic (``secure=False``); each
   party sets ``mu`` proportional to ``1 / G`` (:func:`~.gates.gini_init`).
3. ``train``: split learning (the shared loop, :mod:`verticalfs.training.split`) on ``g = h(x * s) *
   q`` with the penalty ``lambda * (sum Phi(mu / sigma) + sum Phi(omega / sigma))`` added at each
   party; only the open embedding components cross, in both directions.
4. ``selection``: :class:`~.messages.CloseGates`: each party removes the features whose
   deterministic gate is 0 and closes its embedding components whose gate is 0; the final
   evaluation uses the deterministic gates and sends only the open components.

Defaults are section V-A's: Adam, learning rate 0.03, batch size 128, lambda 0.1; sigma 0.5 (not
stated in the paper; STG's default). What the paper leaves open and we chose, each documented at
its parameter: the Monte Carlo samples per step (1), the constant of ``mu ~ 1 / G`` (the party's
lowest-impurity feature starts at ``init_scale`` = 0.5, STG's start), the embedding gates' start (0.5) and the
pruning rule (an input whose sampled gate was 0 at each of its last max(epoch, 20) steps leaves).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from verticalfs.crypto import EncryptedArray, PublicKey, generate_keypair
from verticalfs.crypto.params import check_crypto_params
from verticalfs.exceptions import ConfigError, CryptoError, ProtocolError
from verticalfs.methods import labels_proof
from verticalfs.methods.base import Method, probabilities
from verticalfs.methods.baselines.vfl import VFLParams, class_count
from verticalfs.methods.fedsdg_fs import gini as G
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
from verticalfs.methods.fedsdg_fs.role import MAX_BINS, FedSDGRole, GateRole
from verticalfs.methods.fedsdg_fs.secure import (
    HIDING_FLOOR,
    SecureScoreParams,
    ServerCrypto,
    UnpackedServerCrypto,
    check_layout,
)
from verticalfs.methods.registry import register
from verticalfs.nn.models import make_optimizer
from verticalfs.params import Constraints, Interval, Options
from verticalfs.training.split import (
    SplitTrainer,
    TrainConfig,
    lr_for_classes,
    penalty_path_applies,
    scaled_config,
    walk_penalty_path,
)
from verticalfs.transport.messages import At, EmbedRequest, Gradients, coded

PRETRAIN = At("pretrain")


def ask_gini(fed, parties, p, at: At = PRETRAIN) -> tuple[dict[str, np.ndarray], dict]:
    """The label holder's side of Algorithm 1 with every party in ``parties``: their features'
    Gini scores (``p.secure``: under Paillier, else in the clear with the labels sent to the
    parties), and figures of the run (key, seconds). ``p`` has the fields of :class:`FedSDGParams`
    ``secure, n_bins, key_bits, insecure, backend, randomness, mask_bits``."""
    y, c = G.class_codes(fed.labels.y["train"], fed.task, fed.labels.n_classes, int(p.target_bins))
    if c < 2:
        raise ConfigError("the Gini scores need two classes or more in the training labels")
    names = fed.feature_names()
    scores: dict[str, np.ndarray] = {}
    info: dict = {}
    if not p.secure:
        msg = PlainGiniLabels(labels=y, n_classes=c, n_bins=int(p.n_bins))
        for party in parties:
            rep = fed.proxy(party).request(msg, at, expect=ClearGini)
            scores[party] = _check_scores(party, rep.scores, len(names[party]))
        return scores, info
    hiding = G.hiding_bits(int(p.mask_bits), len(y))
    if hiding < HIDING_FLOOR:  # check_secure_scores refuses it first; this guards any other caller
        raise ConfigError(G.floor_message(int(p.mask_bits), len(y)))
    pub, priv = generate_keypair(int(p.key_bits), backend=p.backend, randomness=p.randomness, insecure=p.insecure)
    t0 = time.perf_counter()
    layout = G.LabelLayout.for_key(pub, int(p.mask_bits), c)
    A = G.encrypt_labels(priv, y, layout)
    proved = labels_proof.wanted(fed, parties)  # a party's verify_labels (issue 50)
    source = "cells" if proved else G.cross_term_source(len(y), sum(len(names[q]) for q in parties) * int(p.n_bins))
    Ak = G.encrypt_class_rows(priv, y, c).to_bytes() if source == "rows" else b""
    info["encrypt_labels_seconds"] = time.perf_counter() - t0
    proof = None
    if proved:
        if layout.per_row != 1:
            raise ConfigError(f"a party verifies the labels it sums (verify_labels): {c} classes do not fit one "
                              f"ciphertext of {layout.slots} slots; use a longer key or fewer mask_bits")
        t1 = time.perf_counter()
        plain = (np.ones(len(y), dtype=object) << (layout.slot_bits * y).astype(object)).reshape(-1, 1)
        proof = labels_proof.prove_labels(priv, "gini", A, plain, np.bincount(y, minlength=c),
                                          slot_bits=layout.slot_bits)
        info["label_proof_seconds"] = time.perf_counter() - t1
        info["label_proof_bytes"] = len(proof.proof)
    info["label_ciphertexts"] = int(A.size) + (len(y) * (c - 1) if Ak else 0)
    info["label_matrix_ciphertexts"] = int(A.size)  # the packed one-hot matrix alone: ceil(c / S) a row
    info["cross_term_source"] = source
    msg = GiniLabels(public_key=pub.to_bytes(), labels=A.to_bytes(), shape=tuple(A.shape), n_bins=int(p.n_bins),
                     mask_bits=int(p.mask_bits), insecure=bool(p.insecure), n_classes=c, classes=Ak)
    t_lh = 0.0
    for party in parties:
        proxy = fed.proxy(party)
        d = len(names[party])
        labels_proof.send_proof(fed, [party], proof, at)
        rep = proxy.request(msg, at, expect=MaskedCounts)
        shape = tuple(int(s) for s in rep.shape)
        if shape != (d, int(p.n_bins), layout.per_row):
            raise ProtocolError(f"party {party!r}: MaskedCounts of shape {shape}, expected "
                                f"{(d, int(p.n_bins), layout.per_row)}")
        t1 = time.perf_counter()
        masked = EncryptedArray.from_bytes(pub, rep.data, shape)
        sq, cls = G.squares_of_masked(priv, masked, layout, per_class=source == "cells")
        t_lh += time.perf_counter() - t1
        rep2 = proxy.request(SquaredCounts(data=sq.to_bytes(), classes=b"" if cls is None else cls.to_bytes()), at,
                             expect=EncryptedGini)
        t1 = time.perf_counter()
        enc = EncryptedArray.from_bytes(pub, rep2.data, (d,), int(rep2.exponent))
        scores[party] = _check_scores(party, enc.decrypt(priv), d)
        t_lh += time.perf_counter() - t1
        proxy.send(GiniScores(scores=scores[party]), at)
    info.update(key_bits=pub.bits, backend=pub.backend.name, randomness=pub.randomness,
                label_holder_crypto_seconds=t_lh, mask_hiding_bits=hiding,
                mask_hiding_bits_by_step={"gini": hiding})
    return scores, info


def _check_scores(party: str, scores, d: int) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if s.shape != (d,) or not np.all(np.isfinite(s)) or (s.size and (s.min() < -1e-9 or s.max() > 1 + 1e-9)):
        raise ProtocolError(f"party {party!r}: expected {d} finite Gini scores in [0, 1], got shape {s.shape}")
    return s



def check_secure_scores(name: str, p, n_rows: int | None = None) -> None:
    """Validate :class:`SecureScoreParams` early, naming the fix; with ``n_rows`` (the training
    rows), the Gini masks' floor of 40 hiding bits."""
    if int(p.target_bins) < 2:
        raise ConfigError(f"{name}: target_bins must be >= 2, got {p.target_bins}")
    if p.secure:
        check_crypto_params(name, p)
        if not 16 <= int(p.mask_bits) <= 256:
            raise ConfigError(f"{name}: mask_bits must lie in [16, 256], got {p.mask_bits}")
        if n_rows is not None and G.hiding_bits(int(p.mask_bits), int(n_rows)) < HIDING_FLOOR:
            raise ConfigError(f"{name}: {G.floor_message(int(p.mask_bits), int(n_rows))}")


@dataclass
class OriginalGateParams(VFLParams):
    """STG's stochastic gates on every party's inputs during VFL training (no embedding gates, no
    Gini initialisation): fedsdg-fs.md's "original-Gate" baseline.

    Parameters
    ----------
    epochs : int
        Communication epochs (default 50; the paper trains "until a pre-specified test accuracy
        is reached, or a maximum number of iterations has elapsed" without giving either).
    batch_size : int
        Mini-batch size (section V-A: 128).
    lr : float
        Adam's learning rate, of the models and the gates alike (section V-A: 0.03).
    hidden : tuple of int
        Hidden widths of each bottom MLP.
    embedding_dim : int
        Embedding components per party.
    top_hidden : tuple of int
        Hidden widths of the top model after the interactive layer (default one layer of 16, so
        that the top model can combine the parties' embeddings non-linearly), widened with many
        classes by ``top_per_class``.
    top_per_class : float
        Each hidden layer of the top model is at least ``top_per_class`` x classes wide (2; 0 =
        ``top_hidden`` as given). Ours (issue 40): the 16 units were sized for binary data; on
        30 classes, at lr 0.003, 16 units reached .21 and 64 units .455 (benchmarks/fedsdg_fs/README.md,
        "Defaults on many classes").
        Binary and regression tasks keep ``top_hidden``.
    lr_classes : float
        With more than ``lr_classes`` classes the learning rate is ``lr x lr_classes / classes``
        (3; 0 = ``lr`` as given). Ours (issue 40): Adam at 0.03 left 30 classes at the loss ln 30
        from the second epoch on, whatever the width. Binary tasks (every set of the paper's we
        have) keep section V-A's 0.03.
    lam : float
        lambda, the weight of the gates' penalty (equation (4); section V-A: 0.1).
    sigma : float
        Standard deviation of the gate noise (0.5; the paper gives none, STG's default).
    mu_init : float
        Initial mean of every input gate without Gini initialisation (0.5: STG's start, a gate
        open with probability Phi(1) = 0.84).
    penalty : str
        ``mean`` (default): each party's penalty is the *mean* gate-open probability over all its
        gates, input and embedding gates together (STG's code takes the mean, ``torch.mean``; one
        mean keeps equation (4)'s equal weight per gate); ``sum``: equation (4) literally. With the sum and lambda = 0.1 every feature of
        madelon-synth was removed (benchmarks/fedsdg_fs/README.md), and a sum cannot keep 58 % of
        ARCENE's 10,000 features as Table III reports, so we read the paper's lambda on the mean.
    gate_lr : float
        Adam's learning rate of the gates' means ``mu`` (and FedSDG-FS's ``omega``); 0 (default) =
        ``lr`` as given, i.e. the gates are exempt from the ``lr_classes`` rule, which lowers the
        rate of the networks' weights only. Ours (issue 40): at the rule's 0.003 on 30 classes a
        gate's mean moves at most 0.15 an epoch, so in 50 epochs original-gate kept 751 of 751
        features (none of the 250 noise columns removed) and its sampled gates' noise cost it 24
        points against all-features (benchmarks/fedsdg_fs/README.md, "The gates on many classes").
    lam_classes : float
        With more than ``lam_classes`` classes the gates' penalty is ``lam x lam_classes /
        classes`` (3; 0 = ``lam`` as given). Ours (issue 40): with the gates at 0.03 and lambda
        0.1, 30 classes closed every gate in 10 epochs (0 of 751 kept); at 0.01 original-gate
        removed 90 % of the noise at .573 (all-features .600; benchmarks/fedsdg_fs/README.md).
        Binary and regression tasks (every set of the paper's we have) keep section V-A's 0.1.
    prune : bool
        Remove for real the inputs whose sampled gate was 0 at each of the last ``max(batches per
        epoch, prune_steps)`` steps (checked at the end of every epoch).
    prune_steps : int
        The least number of consecutive closed draws before an input leaves (20; a gate at STG's
        start 0.5 is closed in 16 % of the draws, so one epoch of one batch is no evidence).
    lam_path : tuple of float
        Beyond ``lam_classes`` classes, with validation rows: after ``epochs`` epochs at the
        penalty above (saved), training goes on ``path_epochs`` epochs at each of these multiples
        of it in turn (4, 16, 64; pruning stops), and the model is saved after each stage whose
        validation accuracy is at most ``path_tol`` below the best stage's; the last saved is the
        result (the largest penalty the held-out rows accept, the way LESS-VFL chooses
        ``lambda_m``). ``()`` = no path (the rule of issue 40 alone). Ours (issue 53): on a
        20-class image set with more columns than training rows (``digit-images``, 1,535 columns
        with noise) the penalty of issue 40 closed 44 % of the noise columns
        (original-gate; 51 % FedSDG-FS): with more columns than rows the network can fit the
        training rows with them, and their gates' gradients carry that; four times that penalty
        from the start closed 85-91 %, but also informative columns on the synthetic 26- and 30-class sets (original-gate .721
        and .293 instead of .881 and .573). With the path, at the defaults, seed 0: digit-images
        .948 / .938 with 91 % / 90 % of the noise removed (before .917 / .934, 44 % / 51 %),
        multiclass-wide .949 / .958, 98 % / 99 % (before .881 / .913, 89 % / 92 %),
        multiclass-synth .667 / .617, 97 % (before .573 / .547, 90 %), digits and USPS within 0.3
        points of before with 100 % removed (original-gate / fedsdg-fs). 45 more epochs at the same
        penalty instead (``epochs=95, lam_path=()``) removed 55 % / 62 % on digit-images
        (benchmarks/fedsdg_fs/README.md, "The gates on wide many-class data").
    path_epochs : int
        Epochs of each stage of ``lam_path`` (15).
    path_tol : float
        How far below the best stage's validation accuracy a stage may be and still be kept (0.02,
        LESS-VFL's ``tol_val``).
    """

    epochs: int = 50
    batch_size: int = 128
    lr: float = 0.03
    top_hidden: tuple[int, ...] = (16,)
    top_per_class: float = 2.0  # issue 40: top width >= 2 x classes (binary data: unchanged)
    lr_classes: float = 3.0  # issue 40: lr x 3 / classes beyond 3 classes (binary data: unchanged)
    lam: float = 0.1
    sigma: float = 0.5
    mu_init: float = 0.5
    penalty: str = "mean"
    gate_lr: float = 0.0  # issue 40: 0 = the gates' means at ``lr`` before the class rule
    lam_classes: float = 3.0  # issue 40: lam x 3 / classes beyond 3 classes (binary data: unchanged)
    prune: bool = True
    prune_steps: int = 20
    lam_path: tuple[float, ...] = (4.0, 16.0, 64.0)  # issue 53: beyond lam_classes classes, chosen on val rows
    path_epochs: int = 15
    path_tol: float = 0.02

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "top_per_class": [Interval(float, 0, None)],
        "lr_classes": [Interval(float, 0, None)],
        "lam": [Interval(float, 0, None)],
        "sigma": [Interval(float, 0, None, closed="neither")],
        "mu_init": [Interval(float, None, None)],
        "penalty": [Options("mean", "sum")],
        "gate_lr": [Interval(float, 0, None)],
        "lam_classes": [Interval(float, 0, None)],
        "prune_steps": [Interval(int, 1, None)],
        "lam_path": [Interval(float, 0, None, closed="neither")],
        "path_epochs": [Interval(int, 1, None)],
        "path_tol": [Interval(float, 0, 1, closed="left")],
    }


@dataclass
class FedSDGParams(OriginalGateParams, SecureScoreParams):
    """FedSDG-FS: Gini-initialised stochastic dual gates (fedsdg-fs.md Algorithms 1-3).

    Parameters
    ----------
    gini_init : bool
        Initialise the input gates from the Gini scores (Algorithm 1; default True).
    n_bins : int
        Equal-frequency bins per feature for the Gini scores (10).
    init_scale : float
        mu of the party's lowest-impurity feature; the others get ``init_scale * G_min / G``
        (Algorithm 1 line 15 says only "proportional to 1 / G"). 0.5 = STG's start, where a gate's
        gradient flows (a mean near 1 sits mostly in the clip's flat part: starting every gate at
        1.0, FedSDG-FS kept 63 % of MADELON's features on fold 0 at 61.5 %, against 6.6 % at 72.7 %
        from 0.5; see benchmarks/fedsdg_fs/README.md).
    omega_init : float
        Initial mean of every embedding gate (0.5, STG's start).
    omega_init_classes : float
        Initial mean of every embedding gate beyond ``lam_classes`` classes (1.0; 0 =
        ``omega_init``). Ours (issue 40): on 30 classes the 3 parties' 24 embedding components are
        already fewer than the classes; from 0.5, 5 of them closed and fedsdg-fs reached .453
        (original-gate, without embedding gates, .573); from 1.0 all 24 stayed open, .547
        (benchmarks/fedsdg_fs/README.md, "The gates on many classes"). Binary data keep 0.5.
    secure : bool
        Algorithms 1-3 under Paillier (default); False computes the same scores and model in the
        clear, with the labels sent to the parties for the Gini scores (for comparison only).
    precision : int
        Fractional bits of the fixed-point values of secure training (12; :mod:`.secure`).
    noise_scale : float
        Standard deviation of each party's per-step noise ``eps_m`` on its interactive-layer weights
        in secure training (0.5; the paper gives none).
    value_bits : int
        Bits of the largest real magnitude a masked value of secure training may reach (16): the
        interactive layer's outputs ``g W~^T`` and the batch's weight gradient ``n dL/dw`` (2**3
        to 2**7 on MADELON). The slots are sized from it so that every mask hides its value by at
        least 40 bits: ``8 ceil((2 precision + value_bits + 42) / 8)`` bits, 88 at the defaults,
        23 slots per 2048-bit ciphertext (:mod:`.secure`). A step whose values grow beyond it is
        refused with an error naming it.
    packed : bool
        Pack 23 values per 2048-bit ciphertext in secure training (default, at the default
        precision and value_bits); False = one value per ciphertext (the straight implementation,
        for comparison).
    """

    gini_init: bool = True
    n_bins: int = 10
    init_scale: float = 0.5
    omega_init: float = 0.5
    omega_init_classes: float = 1.0  # issue 40: beyond 3 classes the embedding gates start at 1.0
    precision: int = 12
    noise_scale: float = 0.5
    value_bits: int = 16
    packed: bool = True

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "n_bins": [Interval(int, 2, MAX_BINS)],
        "init_scale": [Interval(float, 0, None, closed="neither")],
        "omega_init": [Interval(float, None, None)],
        "omega_init_classes": [Interval(float, 0, None)],
        "precision": [Interval(int, 4, 24)],
        "noise_scale": [Interval(float, 0, None)],
        "value_bits": [Interval(int, 1, 48)],
    }


class _TwoOptimizers:
    """Adam on the top model but the interactive layer's weights, plain SGD on those (see
    :mod:`.secure`: the secure protocol can only move ``w`` by SGD, and the plaintext mode must
    compute the same model)."""

    def __init__(self, *optimizers) -> None:
        self.optimizers = optimizers

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()


class FedSDGTrainer(SplitTrainer):
    """The label holder's split-learning loop with gated embeddings (only open components cross)."""

    spec_class = FedSDGSpec

    def __init__(self, *args, gates: dict, sgd_interactive: bool = False, **kwargs) -> None:
        self.gates = gates
        self.sgd_interactive = sgd_interactive
        super().__init__(*args, **kwargs)
        self.spec_extra.update(gates, interactive=self.interactive_width)
        self.open: dict[str, np.ndarray] = {}

    @property
    def interactive_width(self) -> int:
        c = self.config
        return int(c.top_hidden[0]) if c.top_hidden else int(self.labels.n_outputs)

    def rebuild_top_optimizer(self) -> None:
        if not self.sgd_interactive:
            return super().rebuild_top_optimizer()
        c = self.config
        w = self.top.input_layer.weight
        rest = [q for q in self.top.parameters() if q is not w]
        self.optimizer = _TwoOptimizers(make_optimizer(rest, c.optimizer, c.lr, c.weight_decay),
                                        torch.optim.SGD([w], lr=c.lr))

    def decode_forward(self, party: str, msg, n_rows: int) -> np.ndarray:
        if not isinstance(msg, GatedEmbeddings):
            raise ProtocolError(f"party {party!r} sent {type(msg).__name__}, expected GatedEmbeddings")
        e = self.embedding_dims[party]
        open_ = np.asarray(msg.open) if msg.open is not None else np.zeros(0)
        if open_.dtype != bool or open_.shape != (e,):
            raise ProtocolError(f"party {party!r}: the open-component mask must be {e} booleans, got "
                                f"{open_.dtype} {open_.shape}")
        v = np.asarray(msg.values)
        if v.shape != (n_rows, int(open_.sum())):
            raise ProtocolError(f"party {party!r} sent embeddings of shape {v.shape}, expected "
                                f"{(n_rows, int(open_.sum()))} (its open components)")
        self.open[party] = open_
        out = np.zeros((n_rows, e), dtype=np.float32)
        out[:, open_] = v
        return out

    def encode_backward(self, party: str, g: np.ndarray):
        v = np.ascontiguousarray(g[:, self.open[party]])
        return Gradients(v if self.codec == "float32" else coded(v, self.codec))

    def entry_extras(self) -> dict:
        # after evaluate(): the components open under the deterministic gates
        return {"components_open": int(sum(int(m.sum()) for m in self.open.values()))}


class SecureFedSDGTrainer(FedSDGTrainer):
    """Algorithms 2 and 3: the interactive layer ``w_m`` stays hidden (the label holder keeps
    ``W~_m = w_m + eps_acc``), embeddings cross only encrypted (see :mod:`.secure`)."""

    #: why the model cannot be saved (FedSDGFS.cannot_save)
    unsaveable = ("a model trained with secure=true cannot be saved: nobody holds its interactive layer w (the "
                  "label holder holds w + eps_acc, each party its eps_acc); it predicts in the run, through the "
                  "secure protocol (predict_proba). Train with secure=false to save and reuse the model")

    def setup(self) -> None:
        super().setup()
        at = At("setup")
        W = self.top.input_layer.weight.detach().numpy().astype(np.float64)
        self.server: dict[str, ServerCrypto] = {}
        start = 0
        for p in self.parties:
            rep = self.fed.proxy(p).request(KeyRequest(), at, expect=PartyKey)
            e = self.embedding_dims[p]
            pub = PublicKey.from_bytes(rep.public_key, insecure=bool(self.gates.get("insecure")))
            if pub.bits < int(self.gates.get("key_bits", 2048)) - 8:
                raise ProtocolError(f"party {p!r} sent a {pub.bits}-bit key, the run asks for "
                                    f"{self.gates.get('key_bits')} bits")
            cls = ServerCrypto if self.gates.get("packed", True) else UnpackedServerCrypto
            self.server[p] = cls(pub, W[:, start:start + e], int(self.gates["precision"]),
                                 int(self.gates["value_bits"]))
            start += e
        self.rest = self.top.net[1:]

    def rebuild_top_optimizer(self) -> None:
        c = self.config
        w = self.top.input_layer.weight
        self.optimizer = make_optimizer([q for q in self.top.parameters() if q is not w], c.optimizer, c.lr,
                                        c.weight_decay)

    def _forward(self, split: str, epoch: int, batch: int, train: bool, at: At, n: int) -> np.ndarray:
        """Algorithm 2: ``sum_m z_m`` of the rows asked for (float64 ``(n, k)``)."""
        Z = np.zeros((n, self.interactive_width))
        for p in self.parties:
            proxy, srv = self.fed.proxy(p), self.server[p]
            rep = proxy.request(EmbedRequest(split, epoch, batch, train), at, expect=SecureEmbeddings)
            e = self.embedding_dims[p]
            open_ = np.asarray(rep.open) if rep.open is not None else np.zeros(0)
            if open_.dtype != bool or open_.shape != (e,) or int(rep.bound) < 0:
                raise ProtocolError(f"party {p!r}: SecureEmbeddings with a mask of {open_.dtype} {open_.shape}")
            self.open[p] = open_
            masked = srv.masked_products(rep.columns, np.flatnonzero(open_), n, int(rep.bound))
            shares = proxy.request(MaskedProducts(data=masked), at, expect=ForwardShares)
            Z += srv.interactive_output(shares.values)
            if train:
                srv.st["rows"] = rep.rows
        return Z

    def train_step(self, at: At, rows: np.ndarray, y: torch.Tensor) -> float:
        """One batch of Algorithms 2-3: ``sum_m z_m`` through the secure forward, the top model's
        step (but ``w``), then each party's masked weight gradient, noisy update and encrypted
        embedding gradient."""
        top, opt = self.top, self.optimizer
        epoch, b, n = at.round, at.step, len(rows)
        Zs = torch.from_numpy(self._forward("train", epoch, b, True, at, n).astype(np.float32)).requires_grad_(True)
        loss = self.loss(self.rest(Zs + top.input_layer.bias), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()
        self.check_loss(value, at)
        delta = Zs.grad.numpy().astype(np.float64)
        lr = float(self.config.lr)
        for p in self.parties:  # Algorithm 3
            proxy, srv = self.fed.proxy(p), self.server[p]
            data = srv.masked_weight_gradient(srv.st.pop("rows"), delta)
            rep = proxy.request(MaskedWeightGradient(data=data), at, expect=NoisyWeightGradient)
            grad = srv.update_and_embedding_gradient(rep.values, rep.eps, int(rep.blocks), int(rep.bound), lr)
            proxy.send(EncryptedEmbeddingGradient(data=grad), at)
        return value

    def predict(self, split: str, phase: str = "eval") -> np.ndarray:
        top = self.top
        top.eval()
        Z = self._forward(split, self.epoch, -1, False, At(phase, self.epoch), self.n_samples(split))
        with torch.no_grad():
            return self.rest(torch.from_numpy(Z.astype(np.float32)) + top.input_layer.bias).numpy()

    #: ``W~`` of every party at the last checkpoint (:meth:`save_checkpoint`)
    _saved_W: dict[str, np.ndarray] | None = None

    def save_checkpoint(self) -> None:
        """The top model, the parties' (with their ``eps_acc``) and ``W~`` of every party, which
        go together (``w = W~ - eps_acc``)."""
        super().save_checkpoint()
        self._saved_W = {p: srv.W.copy() for p, srv in self.server.items()}

    def restore_checkpoint(self) -> None:
        super().restore_checkpoint()
        for p, W in (self._saved_W or {}).items():
            self.server[p].W = W.copy()

    def true_weights(self, party: str, eps_acc: np.ndarray) -> np.ndarray:
        """``w_m = W~_m - eps_acc`` (for tests: nobody in the protocol can compute it)."""
        return self.server[party].W - eps_acc


@register
class OriginalGate(Method):
    name = "original-gate"
    summary = "STG's stochastic input gates on every party during VFL training (FedSDG-FS's original-Gate baseline)."
    paper = "fedsdg-fs.md section V-C (original-Gate); Yamada et al. 2020 (STG)"
    Params = OriginalGateParams
    Role = GateRole
    test_params = {"epochs": 3, "batch_size": 64, "hidden": (16, 8)}

    def gates(self) -> dict:
        p = self.params
        return {"lam": float(p.lam), "sigma": float(p.sigma), "input_gate": True, "embed_gate": False,
                "mu_init": float(p.mu_init), "prune": bool(p.prune), "prune_steps": int(p.prune_steps),
                "penalty": str(p.penalty)}

    def scaled_gates(self, config: TrainConfig, n_classes: int | None) -> dict:
        """:meth:`gates` with issue 40's class rules: the gates' means learn at ``gate_lr`` (0: the
        ``lr`` given, before ``lr_classes`` lowered the networks' rate; sent as 0 when it equals the
        networks' rate, so binary runs build the same optimizer as before); beyond ``lam_classes``
        classes the penalty is ``lam x lam_classes / classes`` and FedSDG-FS's embedding gates start
        at ``omega_init_classes``."""
        p = self.params
        g = self.gates()
        gate_lr = float(p.gate_lr) or float(p.lr)
        g["gate_lr"] = 0.0 if gate_lr == float(config.lr) else gate_lr
        g["lam"] = lr_for_classes(float(p.lam), n_classes, float(p.lam_classes))
        many = float(p.omega_init_classes or 0.0) if isinstance(p, FedSDGParams) else 0.0  # (embedding gates)
        if "omega_init" in g and many and n_classes and float(p.lam_classes) > 0 and n_classes > p.lam_classes:
            g["omega_init"] = many
        return g

    def check_params(self, fed) -> None:
        p = self.params
        if not p.gate_lr >= 0:
            raise ConfigError(f"{self.name}: gate_lr must be >= 0 (0 = lr), got {p.gate_lr}")
        if not p.lam_classes >= 0:
            raise ConfigError(f"{self.name}: lam_classes must be >= 0 (0 = lam as given), got {p.lam_classes}")
        if not p.sigma > 0:
            raise ConfigError(f"{self.name}: sigma must be > 0, got {p.sigma}")
        if p.penalty not in ("mean", "sum"):
            raise ConfigError(f"{self.name}: penalty must be 'mean' or 'sum', got {p.penalty!r}")
        if p.lam < 0:
            raise ConfigError(f"{self.name}: lam must be >= 0, got {p.lam}")
        if int(p.prune_steps) < 1:
            raise ConfigError(f"{self.name}: prune_steps must be >= 1, got {p.prune_steps}")
        if any(not (float(f) > 0) for f in p.lam_path) or int(p.path_epochs) < 1 or not 0 <= p.path_tol < 1:
            raise ConfigError(f"{self.name}: lam_path must hold multiples > 0, path_epochs >= 1 and path_tol in [0, 1); "
                              f"got {tuple(p.lam_path)}, {p.path_epochs}, {p.path_tol}")

    sgd_interactive = False

    def penalty_path(self, fed, trainer, lam: float, n_classes: int | None) -> None:
        """Beyond ``lam_classes`` classes, with validation rows: the penalty path of
        ``lam_path`` (see :class:`OriginalGateParams`); ``info_["lam_path"]`` says what each stage
        reached and which was kept."""
        p = self.params
        if not penalty_path_applies(p, fed, trainer, n_classes):  # (epochs=0: nothing trained, no path either)
            return
        key = "val_accuracy"

        def stage(lam_k: float) -> dict:
            for q in trainer.parties:
                fed.proxy(q).send(GatePenalty(lam=lam_k, prune=False), At("train", trainer.epoch))
            trainer.fit(int(p.path_epochs), phase="train")
            return {"lam": lam_k, key: trainer.history[-1].get(key), "epoch": trainer.epoch}

        first = {"lam": lam, key: trainer.history[-1].get(key), "epoch": trainer.epoch}
        stages, kept = walk_penalty_path(trainer, first, [lam * float(f) for f in p.lam_path], float(p.path_tol),
                                         stage)
        self.info_["lam_path"] = {"stages": stages, "kept": kept, "lam": stages[kept]["lam"], "tol": float(p.path_tol)}
        self.info_["lam"] = stages[kept]["lam"]  # a line of the run's table

    def record_hiding(self, trainer) -> None:
        """``info_["mask_hiding_bits"]``: the least hiding bits of any additive mask of the run
        (None: no mask), and per protocol step (``gini``, ``forward``, ``weight_gradient``)."""
        by_step = dict(self.info_.get("mask_hiding_bits_by_step") or {})
        servers = trainer.server if isinstance(trainer, SecureFedSDGTrainer) else {}  # (the plaintext trainer masks nothing)
        for srv in servers.values():
            for step, h in srv.hiding_by_step.items():
                by_step[step] = min(h, by_step.get(step, h))
        self.info_["mask_hiding_bits_by_step"] = by_step
        self.info_["mask_hiding_bits"] = min(by_step.values(), default=None)

    def trainer_class(self) -> type:
        return FedSDGTrainer

    def initialise(self, trainer) -> None:
        """Between set-up and training (FedSDG-FS: Algorithm 1)."""

    def fit(self, fed) -> Method:
        self.check_params(fed)
        p = self.params
        config = scaled_config(TrainConfig.from_params(p), class_count(fed), float(p.top_per_class), float(p.lr_classes))
        trainer = self.trainer_class()(fed, self.name, config, seed=self.seed,
                                       callbacks=self.callbacks, entry_hook=self.entry_hook,
                                       codec=self.codec or "float32", gates=self.scaled_gates(config, class_count(fed)),
                                       sgd_interactive=self.sgd_interactive, checkpoints=self.checkpoints)
        trainer.setup()
        t0 = time.perf_counter()
        self.initialise(trainer)
        self.info_["init_seconds"] = time.perf_counter() - t0
        trainer.fit(phase="train")
        self.penalty_path(fed, trainer, float(trainer.spec_extra["lam"]), class_count(fed))
        closed = {p: fed.proxy(p).request(CloseGates(), At("selection", trainer.epoch), expect=GatesClosed)
                  for p in trainer.parties}
        for p, rep in closed.items():
            open_ = np.asarray(rep.open)
            if open_.dtype != bool or open_.shape != (trainer.embedding_dims[p],):
                raise ProtocolError(f"party {p!r}: GatesClosed carries a mask of {open_.shape}")
        trainer.record("selection", None)  # the deterministic, pruned model: the run's result
        self.finish_training(fed, trainer)
        self.record_hiding(trainer)
        self.info_.update(
            features_kept={p: int(m.sum()) for p, m in self.support_.items()},
            components_open={p: int(np.asarray(r.open).sum()) for p, r in closed.items()},
            bytes_by_phase=fed.ledger.by("phase"),
        )
        return self


@register
class FedSDGFS(OriginalGate):
    name = "fedsdg-fs"
    Role = FedSDGRole  # its secure mode is the policy's concern (original-gate's GateRole has none)
    summary = ("FedSDG-FS: Gini-initialised stochastic dual gates (inputs and embedding components), "
               "initialisation and training under Paillier (Algorithms 1-3, packed).")
    paper = "fedsdg-fs.md (Li et al., INFOCOM 2023), Algorithms 1-3"
    Params = FedSDGParams
    # the contract tests compare two runs bit for bit; secure training draws its noise from the OS
    # (it must stay unknown to the label holder), so they run the plaintext mode; the secure mode
    # has its own tests (tests/methods/test_fedsdg_fs.py)
    test_params = {"epochs": 3, "batch_size": 64, "hidden": (16, 8), "secure": False}

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        if self.params.gini_init and not self.params.secure:
            # the plaintext comparison path sends the training labels to every party
            self.disclosures = {"labels_to_parties": ("PlainGiniLabels",)}

    sgd_interactive = True

    def trainer_class(self) -> type:
        return SecureFedSDGTrainer if self.params.secure else FedSDGTrainer

    def gates(self) -> dict:
        p = self.params
        return {**super().gates(), "embed_gate": True, "omega_init": float(p.omega_init),
                "init_scale": float(p.init_scale), "secure": bool(p.secure), "key_bits": int(p.key_bits),
                "insecure": bool(p.insecure), "backend": str(p.backend), "randomness": str(p.randomness),
                "precision": int(p.precision), "noise_scale": float(p.noise_scale), "packed": bool(p.packed),
                "value_bits": int(p.value_bits)}

    def check_params(self, fed) -> None:
        super().check_params(fed)
        p = self.params
        if not 2 <= int(p.n_bins) <= MAX_BINS:
            raise ConfigError(f"{self.name}: n_bins must lie in [2, {MAX_BINS}], got {p.n_bins}")
        if not p.omega_init_classes >= 0:
            raise ConfigError(f"{self.name}: omega_init_classes must be >= 0 (0 = omega_init), got "
                              f"{p.omega_init_classes}")
        if p.init_scale <= 0:
            raise ConfigError(f"{self.name}: init_scale must be > 0, got {p.init_scale}")
        check_secure_scores(self.name, p, len(fed.labels.y["train"]) if p.gini_init else None)
        if p.secure:
            if not 4 <= int(p.precision) <= 24:
                raise ConfigError(f"{self.name}: precision must lie in [4, 24] fractional bits, got {p.precision}")
            if not p.noise_scale >= 0:
                raise ConfigError(f"{self.name}: noise_scale must be >= 0, got {p.noise_scale}")
            if not 1 <= int(p.value_bits) <= 48:
                raise ConfigError(f"{self.name}: value_bits must lie in [1, 48], got {p.value_bits}")
            try:  # the masks' floor, before any key is made
                check_layout(int(p.key_bits), int(p.precision), int(p.value_bits),
                             int(p.embedding_dim) if p.packed else 1)
            except CryptoError as exc:
                raise ConfigError(f"{self.name}: {exc}") from None

    def initialise(self, trainer) -> None:
        p = self.params
        if not p.gini_init:
            return
        scores, info = ask_gini(trainer.fed, trainer.parties, p)
        self.info_.update(info)
        self.info_["gini"] = {q: v.tolist() for q, v in scores.items()}
        self.gini_ = scores

    def cannot_save(self) -> str | None:
        """Why a run with these parameters could not save its model (None: it can)."""
        return SecureFedSDGTrainer.unsaveable if self.params.secure else None

    def predict_proba(self, fed, split: str = "test") -> np.ndarray:
        """Class probabilities on ``split``; a securely trained model predicts through Algorithm 2."""
        trainer = self.trainer_
        if not isinstance(trainer, SecureFedSDGTrainer):
            return super().predict_proba(fed, split)
        return probabilities(trainer.predict(split), fed.labels.task)


__all__ = ["FedSDGFS", "FedSDGParams", "OriginalGate", "OriginalGateParams"]
