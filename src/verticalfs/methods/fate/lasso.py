"""``fate-lasso``: L1-penalised logistic regression trained across the parties with FATE's hetero LR
protocol, the features with non-zero coefficients selected (feast.md section 5.1, baseline
"FATE-Lasso").

One training run (phase ``selection``; FATE ``HeteroLRGuest/Host`` with ``penalty = "L1"``):

- each feature party holds its own weights ``w_m`` (initialised to 0); the label holder holds the
  intercept ``b``;
- per mini-batch ``B`` (agreed by index from a shared seed) every party sends its partial linear
  predictor ``X_m,B w_m``; the label holder forms ``wx = b + sum_m X_m,B w_m`` and FATE's
  Taylor-approximated residual ("fore gradient") ``d = 0.25 wx - 0.5 y`` for labels ``y`` in
  ``{-1, 1}`` (the gradient of ``log 2 - 0.5 y wx + 0.125 wx**2``, the second-order expansion of
  the logistic loss at 0), encrypts it once and sends ``[[d]]`` to every party;
- each party computes ``[[X_m,B^T d]]`` (:meth:`~verticalfs.crypto.EncryptedArray.dot`), adds a
  random integer mask ``R`` under encryption and sends it back; the label holder decrypts and
  returns ``X_m,B^T d + R``; the party removes ``R``, divides by ``|B|`` and takes a proximal
  (soft-thresholding) step: ``w <- sign(v) max(|v| - lr alpha, 0)``, ``v = w - lr g`` (FATE's L1
  updater for SGD). The label holder updates ``b <- b - lr mean(d)``.

Two-party variant: FATE runs this with an *arbiter* that holds the key and decrypts the masked
gradients of both sides. Here the label holder holds the key (the arbiter's role) and there is no
third party. The partial predictors ``X_m w_m``, which FATE's hosts send encrypted under the
arbiter's key so that the guest cannot read them, are sent in plaintext: the key holder could
decrypt them anyway. Labels never leave the label holder: the parties receive only ``[[d]]``.

Reaching N features: the L1 strength ``alpha`` is searched by bisection on a log scale in
``alpha_range`` over at most ``rounds`` training runs (each from ``w = 0``, ``epochs`` epochs, as
FATE's ``max_iter``), stopping when a run has exactly ``n_select`` non-zero coefficients
(feast.md: "we adjust the hyper-parameters of the model to obtain a specific number of features
with non-zero coefficients"). The chosen run is the one with the fewest non-zeros >= N (ties: the
larger alpha); its non-zero features are ranked by ``|w|`` and the top N selected. If no run reached
N non-zeros, the run with the most is used and the rest of the N is filled in party order. After
each run every party reports its non-zero indices and ``|w|`` (a model property, the ranking needs
it). The search runs on the round driver (:mod:`verticalfs.training.rounds`), one round per
training run: ``rounds_`` is its history (alpha, non-zeros, intercept, bytes so far per round),
callbacks and events follow each round, and a run with checkpoints saves after each round (each
party its weights and the public key, the label holder the key pair and the search) and resumes
after the last complete one. ``info_["runs"]`` lists every run's alpha, non-zeros, bytes and seconds, and
``info_["final_run_bytes"] / ["final_run_seconds"]`` the chosen run alone. Interpretation of
feast.md section 5.2, which explains FATE-Lasso's cost varying with N by the rounds the run with
the chosen hyper-parameters needs to converge: its figures are read as the cost of that one run;
``selection_bytes`` / ``selection_seconds`` include the whole search.

``n_select="auto"`` (the filters' default since issue 53; :meth:`FilterMethod.select_auto
<verticalfs.methods.filter.FilterMethod.select_auto>`): one search as above for the grid's largest
N, whose ranking by ``|w|`` gives every smaller N its first N features (ours: one bisection per N
would repeat the encrypted training runs for each).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from verticalfs.codecs.integers import pack_uints
from verticalfs.crypto import HIDING_FLOOR, EncryptedArray, generate_keypair
from verticalfs.crypto.backends import BACKENDS, RANDOMNESS
from verticalfs.crypto.params import check_crypto_params
from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.methods.fate.messages import (
    Coefficients,
    CoefficientsRequest,
    EncryptedResidual,
    GradientResult,
    LassoStart,
    MaskedGradient,
    PartialPredictor,
)
from verticalfs.methods.fate.role import LassoRole
from verticalfs.methods.filter import FilterMethod, FilterParams
from verticalfs.methods.registry import register
from verticalfs.params import Constraints, Interval, Options, Predicate
from verticalfs.training.batches import BatchPlan
from verticalfs.training.history import derive_seed
from verticalfs.training.rounds import RoundDriver
from verticalfs.transport.messages import At


@dataclass
class FateLassoParams(FilterParams):
    """FATE-Lasso: hetero LR with an L1 penalty, alpha searched to reach N non-zero coefficients.

    Parameters
    ----------
    epochs : int
        Epochs of each training run (FATE ``max_iter`` counted in epochs; default 10).
    rounds : int
        Training runs of the bisection over alpha (default 8).
    batch_size : int
        Mini-batch size (default 256; FATE's ``batch_size``).
    lr : float
        SGD step size (default 0.5). The Taylor loss has curvature ``0.25 E[x x^T]``; SGD is stable
        for ``lr < 8 / lambda_max(E[x x^T])``: 0.5 needs ``lambda_max < 16``, e.g. up to ~50
        features spread over [0, 1] (lower it for wider data).
    alpha_range : tuple of float
        Bracket of the L1 strength searched on a log scale (default (1e-4, 1.0)).
    fit_intercept : bool
        Intercept at the label holder (FATE's default).
    residual_precision : int
        Fractional bits of the encrypted residual d (fixed-point, default 32).
    feature_precision : int
        Fractional bits of the features in ``[[d]]^T X`` (default 16: the cost of the encrypted
        product grows with it; features are scaled to [0, 1] by default).
    key_bits : int
        Paillier modulus length (default 2048).
    insecure : bool
        Allow ``key_bits < 2048`` (tests only).
    backend : str
        Paillier back end (``auto``, ``pypaillier``, ``heu``, ``python``, ``phe``).
    randomness : str
        Paillier encryption randomness: ``full`` (default; ``r**n`` with ``r`` uniform, as FATE's
        own Paillier) or ``short`` (Damgård-Jurik-Nielsen short exponent, what ``pypaillier`` and
        ``heu`` draw: faster, resting on an additional assumption). See
        :mod:`verticalfs.crypto.backends`.
    """

    epochs: int = 10
    rounds: int = 8
    batch_size: int = 256
    lr: float = 0.5
    alpha_range: tuple[float, float] = (1e-4, 1.0)
    fit_intercept: bool = True
    residual_precision: int = 32
    feature_precision: int = 16
    key_bits: int = 2048
    insecure: bool = False
    backend: str = "auto"
    randomness: str = "full"

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "epochs": [Interval(int, 1, None)],
        "rounds": [Interval(int, 1, None)],
        "batch_size": [Interval(int, 1, None)],
        "lr": [Interval(float, 0, None, closed="neither")],
        "alpha_range": [Predicate(lambda v: 0 < v[0] < v[1], "two numbers 0 < low < high")],
        "residual_precision": [Interval(int, 1, None)],
        "feature_precision": [Interval(int, 0, None)],
        "key_bits": [Interval(int, 1, None)],
        "backend": [Options("auto", *BACKENDS)],
        "randomness": [Options(*RANDOMNESS)],
    }


@register
class FateLasso(FilterMethod):
    name = "fate-lasso"
    summary = ("FATE-Lasso: L1 hetero logistic regression over Paillier-encrypted residuals; non-zero weights; "
               "binary labels only.")
    paper = "feast.md section 5.1 (baseline FATE-Lasso); FATE hetero LR"
    Params = FateLassoParams
    Role = LassoRole
    test_params = {"n_select": 5, "key_bits": 512, "insecure": True, "epochs": 2, "rounds": 2}

    def check_params(self, fed) -> None:
        super().check_params(fed)
        p = self.params
        if fed.task != "binary":
            raise ConfigError(f"{self.name}: hetero logistic regression needs a binary label, the task is "
                              f"{fed.task!r}; use a binary data set")
        for k in ("epochs", "rounds", "batch_size"):
            if int(getattr(p, k)) < 1:
                raise ConfigError(f"{self.name}: {k} must be >= 1, got {getattr(p, k)}")
        lo_hi = tuple(float(v) for v in p.alpha_range)
        if len(lo_hi) != 2 or not 0 < lo_hi[0] < lo_hi[1]:
            raise ConfigError(f"{self.name}: alpha_range must be two numbers 0 < low < high, "
                              f"got {p.alpha_range}")
        if p.lr <= 0:
            raise ConfigError(f"{self.name}: lr must be > 0, got {p.lr}")
        check_crypto_params(self.name, p)
        # the masks' floor before any work, for residuals and batch sums of |x| up to 2**16
        # (features are scaled to [0, 1] by default); each party checks its own batches exactly
        g_bits = int(p.residual_precision) + int(p.feature_precision) + int(p.batch_size).bit_length() + 16
        if int(p.key_bits) - 3 - g_bits < HIDING_FLOOR:
            raise ConfigError(f"{self.name}: a {p.key_bits}-bit key's masks ({int(p.key_bits) - 3} bits) would hide "
                              f"gradients of up to 2**{g_bits} by {int(p.key_bits) - 3 - g_bits} bits, below the "
                              f"floor of {HIDING_FLOOR}; raise key_bits or lower residual_precision / "
                              "feature_precision")

    # ---------------------------------------------------------------- one run
    def _train(self, fed, pub, priv, alpha: float, run: int) -> tuple[dict, dict]:
        """One training run at ``alpha``; returns ``{party: (indices, |w|)}`` and run figures."""
        p = self.params
        y = np.asarray(fed.labels.y["train"]).astype(np.float64)
        ys = 2.0 * y - 1.0
        n = len(ys)
        seed = derive_seed(self.seed, "fate-lasso", "batches")
        plan = BatchPlan(n, int(p.batch_size), seed)
        parties = fed.party_names
        n_features = {q: len(v) for q, v in self.feature_names(fed).items()}
        wn = (pub.bits + 7) // 8
        b0, t0 = fed.ledger.total_bytes, time.perf_counter()
        start = LassoStart(public_key=pub.to_bytes() if run == 0 else b"", insecure=bool(p.insecure), run=run,
                           alpha=float(alpha), lr=float(p.lr), batch_size=int(p.batch_size),
                           shuffle_seed=seed,
                           feature_precision=int(p.feature_precision))
        partial: dict[str, np.ndarray] = {}
        at = At("selection", run * int(p.epochs), 0)
        for q in parties:
            partial[q] = self._predictor(fed.proxy(q).request(start, at), q)
        b = 0.0
        steps = [(e, k) for e in range(int(p.epochs)) for k in range(plan.n_batches)]
        n_enc = 0
        hiding = pub.bits
        for i, (e, k) in enumerate(steps):
            rows = plan.rows(e, k)
            wx = np.full(len(rows), b)
            for q in parties:
                if partial[q].shape != (len(rows),):
                    raise ProtocolError(f"party {q!r} sent a predictor of shape {partial[q].shape} for a "
                                        f"batch of {len(rows)} rows")
                wx += partial[q]
            d = 0.25 * wx - 0.5 * ys[rows]
            enc = EncryptedArray.encrypt(priv, d, precision=int(p.residual_precision))
            d_bits = int(np.max(np.abs(np.rint(np.ldexp(d, int(p.residual_precision)))), initial=0)).bit_length()
            n_enc += enc.size
            data = enc.to_bytes()
            if p.fit_intercept:
                b -= p.lr * float(d.mean())
            nxt = steps[i + 1] if i + 1 < len(steps) else (-1, -1)
            at = At("selection", run * int(p.epochs) + e, k)
            for q in parties:
                msg = EncryptedResidual(epoch=e, batch=k, data=data, exponent=enc.exponent, bound_bits=d_bits)
                rep = fed.proxy(q).request(msg, at, expect=MaskedGradient)
                if not HIDING_FLOOR <= int(rep.hiding_bits) <= pub.bits:
                    raise ProtocolError(f"party {q!r} reports {rep.hiding_bits} hiding bits for its gradient's "
                                        f"masks, expected {HIDING_FLOOR} or more")
                hiding = min(hiding, int(rep.hiding_bits))
                masked = EncryptedArray.from_bytes(pub, rep.data, None, rep.exponent)
                if masked.size != n_features[q]:
                    raise ProtocolError(f"party {q!r} sent {masked.size} gradient values for its "
                                        f"{n_features[q]} features")
                res = priv.decrypt_residues(masked.ciphertexts())
                out = GradientResult(values=pack_uints(res, wn),
                                     next_epoch=nxt[0], next_batch=nxt[1])
                partial[q] = self._predictor(fed.proxy(q).request(out, at), q)
        coefs = {}
        at = At("selection", run * int(p.epochs) + int(p.epochs) - 1, plan.n_batches)
        for q in parties:
            rep = fed.proxy(q).request(CoefficientsRequest(), at, expect=Coefficients)
            coefs[q] = (np.asarray(rep.indices, dtype=np.int64),
                            np.asarray(rep.magnitudes, dtype=np.float64))
        nnz = int(sum(len(v[0]) for v in coefs.values()))
        info = {"alpha": float(alpha), "nonzero": nnz, "intercept": b, "encryptions": n_enc, "mask_hiding_bits": hiding,
                "bytes": int(fed.ledger.total_bytes - b0), "seconds": time.perf_counter() - t0}
        return coefs, info

    @staticmethod
    def _predictor(rep, party: str) -> np.ndarray:
        if not isinstance(rep, PartialPredictor):
            raise ProtocolError(f"party {party!r} answered with {type(rep).__name__}, expected "
                                f"PartialPredictor")
        return np.asarray(rep.values, dtype=np.float64)

    # ----------------------------------------------------------------- select
    def select(self, fed) -> list[tuple[str, int]]:
        p = self.params
        N = int(p.n_select)
        t0 = time.perf_counter()
        pub, priv = generate_keypair(int(p.key_bits), backend=p.backend, randomness=p.randomness,
                                     insecure=p.insecure)
        t_key = time.perf_counter() - t0
        search = _AlphaSearch(self, fed, pub, priv)
        driver = RoundDriver(fed, self.name, max_rounds=int(p.rounds), callbacks=self.callbacks,
                             checkpoints=self.checkpoints)
        #: the search's history, one entry per training run (round): alpha, non-zeros, intercept, bytes
        self.rounds_ = driver.run(search)
        pub, runs, results = search.pub, search.runs, search.results
        above = [i for i, r in enumerate(runs) if r["nonzero"] >= N]
        if above:
            best = min(above, key=lambda i: (runs[i]["nonzero"], -runs[i]["alpha"]))
        else:
            best = max(range(len(runs)), key=lambda i: (runs[i]["nonzero"], -runs[i]["alpha"]))
        for q, (idx, mag) in results[best].items():
            self.record_scores(q, idx, mag)
        order = {q: k for k, q in enumerate(fed.party_names)}
        ranked = sorted(((-float(m), order[q], int(j), q) for q, (idx, mag) in results[best].items()
                         for j, m in zip(idx, mag, strict=True)))
        chosen = [(q, j) for _, _, j, q in ranked[:N]]
        if len(chosen) < N:  # fill in party order (documented)
            have = set(chosen)
            names = self.feature_names(fed)
            for q in fed.party_names:
                for j in range(len(names[q])):
                    if len(chosen) < N and (q, j) not in have:
                        chosen.append((q, j))
        self.info_.update(
            runs=runs, alpha=runs[best]["alpha"], chosen_run=best, nonzero=runs[best]["nonzero"],
            final_run_bytes=runs[best]["bytes"], final_run_seconds=runs[best]["seconds"],
            key_bits=pub.bits, backend=pub.backend.name, randomness=pub.randomness, ciphertext_bytes=int(pub.ciphertext_bytes),
            n_encryptions=int(sum(r["encryptions"] for r in runs)), keygen_seconds=t_key,
            mask_hiding_bits=min(r["mask_hiding_bits"] for r in runs),
            mask_hiding_bits_by_step={"gradient": min(r["mask_hiding_bits"] for r in runs)},
        )
        return chosen


class _AlphaSearch:
    """FATE-Lasso's bisection over alpha as a round-based protocol (:mod:`verticalfs.training.rounds`):
    a round is one training run from ``w = 0`` at the middle of the bracket (log scale); it stops
    at a run with exactly ``n_select`` non-zero coefficients."""

    phase = "selection"

    def __init__(self, method: FateLasso, fed, pub, priv) -> None:
        self.method, self.fed = method, fed
        self.pub, self.priv = pub, priv
        self.n_select = int(method.params.n_select)
        self.lo, self.hi = (math.log(float(v)) for v in method.params.alpha_range)
        self.runs: list[dict] = []  # each run's figures (info_["runs"])
        self.results: list[dict] = []  # each run's {party: (non-zero indices, |w|)}

    def begin(self, driver) -> None:
        """Nothing to set up: the keys are made before (and restored with the state on resume)."""

    def run_round(self, index: int) -> dict:
        alpha = math.exp(0.5 * (self.lo + self.hi))
        coefs, info = self.method._train(self.fed, self.pub, self.priv, alpha, index)
        self.runs.append(info)
        self.results.append(coefs)
        if info["nonzero"] > self.n_select:
            self.lo = math.log(alpha)  # too many non-zeros: more penalty
        elif info["nonzero"] < self.n_select:
            self.hi = math.log(alpha)
        return {"alpha": float(alpha), "nonzero": int(info["nonzero"]), "intercept": float(info["intercept"]),
                "encryptions": int(info["encryptions"]), "mask_hiding_bits": int(info["mask_hiding_bits"])}

    def stop(self, entry: dict) -> bool:
        return int(entry["nonzero"]) == self.n_select

    def state(self) -> dict:
        return {"pub": self.pub, "priv": self.priv, "lo": self.lo, "hi": self.hi, "runs": self.runs,
                "results": self.results}

    def load_state(self, state: dict) -> None:
        self.pub, self.priv = state["pub"], state["priv"]
        self.lo, self.hi = float(state["lo"]), float(state["hi"])
        self.runs, self.results = list(state["runs"]), list(state["results"])
