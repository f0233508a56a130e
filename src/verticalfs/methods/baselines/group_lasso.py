"""``group-lasso``: group lasso applied directly to VFL (less-vfl.md section 2 eq. (2), section 5).

Standard VFL training (Algorithm 2) where every party, after every optimizer step on its bottom
model, applies ``prox_{lambda_m, eta}`` (:mod:`verticalfs.nn.prox`) to its input layer: proximal
SGD on ``R_N + sum_m lambda_m G(theta_m)``. Every iteration communicates (embeddings up,
gradients down), which is what LESS-VFL avoids.

The prox is installed by one message per party in phase ``setup``
(:class:`InstallGroupLasso`, one-way); from then on the party runs it as a ``post_step_hook``.
At the end of each of its epochs (it counts its own steps against the agreed batch plan) a party
removes the features whose group is exactly zero for real (``drop_features``): its input layer
shrinks, later compute shrinks, and the history's ``spurious_removed`` reflects it. The active
party never needs to know: embeddings keep their width.

Optimizer (interpretation): the paper says group lasso is solved "using P-SGD" and gives no step
size. ``optimizer`` defaults to ``adam`` with lr 0.01 like every other method here, the prox step
using eta = ``lr`` (a common proximal-Adam heuristic; Adam's per-coordinate scaling means this is
not an exact proximal step); ``sgd`` gives plain P-SGD. Measured on phishing, P-SGD with plain SGD
is both slower to learn and collapses (every feature removed) for lambda >= 0.1 at lr 0.1, so Adam
is the stronger baseline; lambda_m was chosen by the grid search reported in
benchmarks/less_vfl/README.md.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from verticalfs.data.vertical import ACTIVE
from verticalfs.methods.base import Method
from verticalfs.methods.baselines.vfl import VFLParams
from verticalfs.methods.registry import register
from verticalfs.nn.prox import prox_l21, zero_groups
from verticalfs.parties import PassiveParty, passive_handler
from verticalfs.training.history import final_metrics
from verticalfs.training.vfl import TrainConfig, VFLTrainer
from verticalfs.transport.messages import message


@message
class InstallGroupLasso:
    """Active -> passive, one-way, phase ``setup``: apply ``prox_{lam, eta}`` after every step."""

    lam: float
    eta: float
    center: bool = True


def _prox_hook(lam: float, eta: float, center: bool):
    def hook(party: PassiveParty) -> None:
        layer = party.model.input_layer
        with torch.no_grad():
            W_old = layer.weight.detach().clone()
            layer.weight.copy_(prox_l21(W_old, lam, eta))
            if center:
                # prox in the centred parametrisation W (x - mu) + (b + W mu): the bias keeps
                # W mu fixed, so shrinking a group does not also move the unit's offset (same
                # treatment as LESS-VFL's P-SGD stages, see methods/less_vfl/messages.py)
                mu = party.state["gl_mu"]
                layer.bias.add_((W_old - layer.weight) @ mu)
        st = party.state
        st["gl_steps"] = st.get("gl_steps", 0) + 1
        if st["gl_steps"] % party.plan.n_batches == 0:  # end of an epoch: remove zeroed features
            zero = zero_groups(layer).numpy()
            if zero.any():
                keep = np.flatnonzero(~zero)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # a zero-input layer if every feature went
                    party.drop_features(keep)
                st["gl_mu"] = party.X("train").mean(0)

    return hook


@passive_handler(InstallGroupLasso)
def _on_install_group_lasso(party: PassiveParty, sender: str, msg: InstallGroupLasso) -> None:
    party.require_model()
    party.state["gl_mu"] = party.X("train").mean(0)
    party.state["gl_steps"] = 0
    party.post_step_hooks.append(_prox_hook(float(msg.lam), float(msg.eta), bool(msg.center)))
    return None


@dataclass
class GroupLassoParams(VFLParams):
    """Group lasso on every party's input layer during VFL training (P-SGD, every step communicates).

    Parameters
    ----------
    optimizer : str
        ``adam`` (default, the optimizer of every other method here) with the prox step eta = lr,
        or ``sgd`` = plain P-SGD.
    lr : float
        Step size eta of every optimizer (and of the prox).
    lambda_m : float
        Group-lasso coefficient of every party's input-layer groups (eq. (2)).
    center : bool
        Apply the prox in the centred parametrisation of the input layer (bias compensated).
    target_accuracy : float
        Reference accuracy (best VFL (Original) test accuracy); when given,
        ``info['bytes_to_target']`` is the cumulative bytes at the first epoch with accuracy >=
        0.9 x this and >= 80 % of the spurious features removed (less-vfl.md Table 2).
    """

    optimizer: str = "adam"
    lr: float = 0.01
    lambda_m: float = 0.5
    center: bool = True
    target_accuracy: float | None = None


@register
class GroupLasso(Method):
    name = "group-lasso"
    summary = "Group lasso on every party's input layer during VFL training (P-SGD); every step communicates."
    paper = "less-vfl.md section 2 eq. (2) and section 5 (baseline)"
    Params = GroupLassoParams

    def fit(self, fed) -> GroupLasso:
        from verticalfs.methods.less_vfl.method import target_figure

        p = self.params
        trainer = VFLTrainer(fed.server, fed.channel, fed.party_names, TrainConfig.from_params(p),
                             seed=self.seed, callbacks=self.callbacks, entry_hook=self.entry_hook)
        trainer.setup()
        with fed.channel.at("setup", 0):
            for q in fed.party_names:
                fed.channel.send(ACTIVE, q, InstallGroupLasso(lam=float(p.lambda_m), eta=float(p.lr),
                                                              center=bool(p.center)))
        trainer.fit(phase="train")
        self.trainer_ = trainer
        self.history_ = trainer.history
        self.metrics_ = final_metrics(trainer.history) or trainer.evaluate(["test"])
        self.support_ = fed.collect_support()
        by_phase = fed.ledger.by("phase")
        info = {"lambda_m": p.lambda_m, "bytes_by_phase": by_phase,
                "features_kept": {q: int(m.sum()) for q, m in self.support_.items()}}
        info.update(target_figure(trainer.history, p.target_accuracy, fed.server.task))
        self.info_ = info
        return self
