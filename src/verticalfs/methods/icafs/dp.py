"""ICAFS's DP-SGD (icafs.md section V-I, Table V): what is noised, where the noise comes from, how
the real-row batches are sampled, and the guarantee as it holds for this code.

What is DP-SGD-trained
    Each party's encoder, on its steps on *real* training rows (Algorithm 2 lines 12-16, and the
    ``refit_epochs`` after the selection): Opacus's per-sample gradients, each row's gradient of
    the encoder clipped to ``dp_clip`` in L2 norm, their sum plus Gaussian noise of standard
    deviation ``noise_multiplier * dp_clip`` on every weight, divided by the expected batch size
    (:class:`opacus.optimizers.DPOptimizer`). The noise multiplier is the one for which Opacus's
    RDP accountant gives ``(dp_epsilon, dp_delta)`` over every real-row step of the run
    (:func:`dp_noise_multiplier`).

With respect to which rows
    One real training row, added or removed (all of its columns at every party and its label,
    which reach party ``k``'s encoder through the gradient the label holder returns for the row).
    The accountant's epsilon is per party; the parties' encoders together are the composition of
    ``K`` such mechanisms on the same batches, reported as ``epsilon_all_parties``.

Sampling
    With DP on, the real-row batches are Poisson samples (:class:`PoissonPlan`): every step takes
    each training row independently with probability ``q = batch_size / n``, ``ceil(n /
    batch_size)`` steps an epoch, the sampling the RDP accountant assumes. The sample is drawn
    from the run's batch seed, which every party and the label holder know (they must agree on
    the rows: the label holder computes each row's gradient). So the amplification by subsampling
    the accountant counts holds against an observer of the encoder's updates who does not know
    which rows were in which batch; the parties and the label holder do know. An empty sample
    (probability ``(1 - q)^n`` a step; ``e^-64`` at the default batch size) skips the step without
    noise; the noise multiplier is calibrated for ``dp_delta`` minus that event's bound, so the
    stated ``dp_delta`` includes it.

The noise
    From the operating system's entropy, never from the run's seed: before every noisy step the
    party reseeds its noise generator with 64 bits of :func:`secrets.randbits` (``os.urandom``),
    so the noise can neither be regenerated from the seed the label holder chose (and that is
    saved with the model) nor repeated by a second run. Opacus's ``PrivacyEngine(secure_mode=True)``
    would draw it from ``/dev/urandom`` through ``torchcsprng``, which cannot be installed here
    (its last release, 0.2.1 of 2021, has no build for this Python and torch; pip finds no
    version). So the generator is torch's CPU generator (Mersenne Twister) under a fresh 64-bit
    key per step, not a cryptographic generator; the noise itself is Opacus's ``secure_mode``
    noise (always: the sum of four Gaussian draws, halved, against the
    floating-point attacks on the Gaussian sampler). Everything else in the run stays seeded.

What it does NOT cover (so the run is not ``(epsilon, delta)``-DP)
    The guarantee above is DP-SGD's for the encoder's real-row updates *if the per-row gradient
    the label holder returns depended on that row alone*. In ICAFS it does not, and these are
    computed from the real rows without noise: stage 1 (the GAN on the real rows: each party's
    generator and critic, the label holder's generator, critic and classifier, hence every
    synthetic row and label); the critic features of real rows each party sends in stage 1; the
    encoder's steps on synthetic rows (plain Adam, no clipping or noise, on the same encoder); the
    embeddings of real training rows sent to the label holder at every training step and for the
    selection (exact; so are those sent at evaluation and inference); the label holder's top model
    (gates and predictors, trained on those embeddings and the labels, and saved with the model),
    which computes the gradients every encoder step receives; and the selection of components and
    so of features (the gates on the real training rows' embeddings). The exact gradients a party receives for real rows are not noised either
    (DP-SGD at a party does not hide the labels from it). :func:`guarantee` says this in the
    result's ``info["dp"]``.
"""

from __future__ import annotations

import math
import secrets
import warnings

import numpy as np
import torch

#: What the accounting does not cover, by key; :func:`not_covered` picks those of a variant.
NOT_COVERED = {
    "stage1": "stage 1 (Algorithm 1): the GAN trained on the real rows and labels without noise (each party's "
              "generator and critic, the label holder's generator, critic and classifier), hence every synthetic "
              "row and synthetic label",
    "critic": "the critic features of real rows each party sends to the label holder in stage 1",
    "synthetic_steps": "the encoder's steps on synthetic rows (plain Adam, no clipping or noise, on the same encoder)",
    "embeddings": "the embeddings of real training rows each party sends to the label holder at every training step "
                  "and for the selection (exact); embeddings sent at evaluation and inference are exact too",
    "top": "the label holder's top model, trained on those embeddings and the labels without noise and saved with "
           "the model; it computes the gradients every encoder step receives, so a row's gradient depends on "
           "the other rows too",
    "selection": "the selection of embedding components (the gates on the real training rows' embeddings) and so "
                 "of input features",
    "labels": "the labels with respect to the parties: the gradients a party receives for real rows are exact",
}


def not_covered(variant: str) -> list[str]:
    """The :data:`NOT_COVERED` items of ``variant``: ``no-fs`` has no stage 1 and no synthetic
    steps; without gates (``embedding``, ``no-fs``) every component is kept and the features are
    ranked on the encoder's weights alone (post-processing of the encoder)."""
    keys = list(NOT_COVERED)
    if variant == "no-fs":
        keys = [k for k in keys if k not in ("stage1", "critic", "synthetic_steps")]
    if variant in ("embedding", "no-fs"):
        keys.remove("selection")
    return [NOT_COVERED[k] for k in keys]


def noise_seed() -> int:
    """64 bits from the operating system's entropy (``os.urandom`` through :mod:`secrets`): the
    key of one noisy step's Gaussian noise. Never derived from the run's seed."""
    return secrets.randbits(64)


def noise_generator() -> torch.Generator:
    """A CPU generator keyed from :func:`noise_seed` (reseeded before every step by the party)."""
    return torch.Generator().manual_seed(noise_seed())


class PoissonPlan:
    """Poisson-sampled batches agreed by sample index: batch ``b`` of epoch ``e`` takes every
    row independently with probability ``batch_size / n``, from ``default_rng([seed, e, b])``,
    so every party derives the same rows locally (as :class:`~verticalfs.training.batches.BatchPlan`
    does its shuffled ones). ``ceil(n / batch_size)`` batches an epoch; a batch may be empty."""

    def __init__(self, n: int, batch_size: int, shuffle_seed: int) -> None:
        self.n = int(n)
        self.batch_size = int(batch_size)
        self.shuffle_seed = int(shuffle_seed)
        self.rate = min(1.0, self.batch_size / max(1, self.n))

    @property
    def n_batches(self) -> int:
        return max(1, -(-self.n // self.batch_size))

    def rows(self, epoch: int, batch: int) -> np.ndarray:
        draw = np.random.default_rng([self.shuffle_seed, int(epoch), int(batch), 0x5015]).random(self.n)
        return np.flatnonzero(draw < self.rate).astype(np.int64)


def dp_steps(params, n_train: int) -> tuple[int, float]:
    """Real-row steps of the run and their sampling rate ``q``."""
    per_epoch = max(1, -(-int(n_train) // int(params.batch_size)))
    return (int(params.epochs) + int(params.refit_epochs)) * per_epoch, min(1.0, int(params.batch_size) / max(1, int(n_train)))


def empty_batch_delta(params, n_train: int, epsilon: float | None = None) -> float:
    """The share of ``delta`` spent on skipped empty batches: ``(1 + e^epsilon) T (1 - q)^(n - 1)``
    (total variation between skipping and a noise-only step, over ``T`` steps, for a neighbour
    of ``n - 1`` rows)."""
    steps, q = dp_steps(params, n_train)
    eps = float(params.dp_epsilon if epsilon is None else epsilon)
    p_empty = 0.0 if q >= 1 else math.exp((int(n_train) - 1) * math.log1p(-q))
    return (1.0 + math.exp(min(eps, 700.0))) * steps * p_empty


def dp_noise_multiplier(params, n_train: int) -> tuple[float, int]:
    """The noise multiplier of DP-SGD for ``params.dp_epsilon`` over the run's real-row steps
    (Poisson sampling at ``q = batch_size / n``, :class:`PoissonPlan`) at ``dp_delta`` less
    :func:`empty_batch_delta`, and that number of steps."""
    from opacus.accountants.utils import get_noise_multiplier

    steps, rate = dp_steps(params, n_train)
    delta = float(params.dp_delta) - empty_batch_delta(params, n_train)
    with warnings.catch_warnings():  # few steps: the best RDP order is the largest Opacus tries (a looser bound)
        warnings.filterwarnings("ignore", "Optimal order is the largest alpha")
        noise = get_noise_multiplier(target_epsilon=float(params.dp_epsilon), target_delta=delta,
                                     sample_rate=rate, steps=steps, accountant="rdp")
    return float(noise), steps


def rdp_epsilon(noise: float, rate: float, steps: int, delta: float) -> float:
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history = [(float(noise), float(rate), int(steps))]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Optimal order is the largest alpha")
        return float(acc.get_epsilon(delta=float(delta)))


def guarantee(params, n_train: int, n_parties: int, noise: float, steps: int) -> dict:
    """The run's DP statement for ``info["dp"]`` (JSON): what is DP-SGD-trained, with respect to
    which rows, under which sampling, from which noise, and what is not covered (the module
    docstring says why each holds of the code)."""
    _, rate = dp_steps(params, n_train)
    delta = float(params.dp_delta)
    spent = empty_batch_delta(params, n_train)
    # K parties clip and noise their own encoder's per-row gradients on the same batch: together a
    # subsampled Gaussian of sensitivity sqrt(K) * clip, i.e. noise multiplier noise / sqrt(K).
    eps_all = rdp_epsilon(noise / math.sqrt(max(1, n_parties)), rate, steps, delta - spent)
    return {
        "epsilon": float(params.dp_epsilon), "delta": delta, "accountant": "rdp (Opacus)",
        "epsilon_all_parties": eps_all, "noise_multiplier": float(noise), "clip": float(params.dp_clip),
        "steps": int(steps), "sample_rate": float(rate), "delta_empty_batches": float(spent),
        "trained": "each party's encoder, on its steps on real training rows (stages 2-3 and the refit): "
                   "per-row gradients clipped to `clip`, Gaussian noise of noise_multiplier * clip",
        "protects": "one real training row, added or removed (its columns at every party and its label), in "
                    "the noisy real-row updates of each party's encoder, epsilon per party; valid only if the "
                    "gradient the label holder returns for a row depended on that row alone, which the "
                    "not_covered items break: the run as a whole is not (epsilon, delta)-DP",
        "sampling": f"Poisson, each training row with probability {rate:.6g} a step, {steps} steps, drawn from the "
                    "run's batch seed: known to every party and the label holder, so the amplification by "
                    "subsampling holds only against an observer who does not know the batches",
        "noise_source": "os-entropy",
        "noise": "torch CPU generator reseeded with 64 bits of secrets.randbits (os.urandom) before every noisy "
                 "step, never from the run seed; Opacus secure_mode noise (4 Gaussian draws summed, halved)"
                 + "; not torchcsprng (not installable here)",
        "not_covered": not_covered(str(params.variant)),
    }
