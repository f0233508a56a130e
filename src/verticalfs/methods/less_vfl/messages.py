"""LESS-VFL's own messages and the passive party's side of stage 3 (local feature selection).

Stage 2's upload uses the core kinds (:class:`~verticalfs.transport.messages.EmbedRequest` with
``batch=-1, train=False`` -> :class:`~verticalfs.transport.messages.Embeddings`). The only new
protocol message is :class:`SelectFeatures`, one per party, one-way: it carries the party's
significant embedding components ``K_m`` (Algorithm 1 lines 11-14) and the stage-3 settings, and
the party runs stage 3 inside its handler with no further communication (lines 15-20). It sends
no reply: a reply would be traffic the paper does not have ("stages 2 and 3 only require one round
of communication where parties send current embeddings to the server", section 3, Algorithm cost).

:class:`SelectionInfoRequest` / :class:`SelectionInfo` are sent in phase ``report`` after training
(like the core's support report) so the run can show what each party chose locally (lambda_m,
proxy fit); they are not part of the algorithm.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import torch

from verticalfs.methods.less_vfl.psgd import StackedMLP, psgd_stable, significant
from verticalfs.parties import PassiveParty, passive_handler
from verticalfs.transport.messages import message


@message
class SelectFeatures:
    """Active -> passive, one-way, phase ``selection``: run stage 3 of LESS-VFL.

    ``components`` are the indices of the party's significant embedding components ``K_m``
    (all of them for local lasso; empty = the party leaves). ``lambdas`` are the candidate
    ``lambda_m`` (one value = no search); ``tol`` is the search's proxy tolerance.
    """

    components: np.ndarray
    lambdas: tuple
    lr: float
    epochs: int
    batch_size: int
    seed: int
    tol: float = 0.05
    normalize: bool = True
    center: bool = True


@message
class SelectionInfoRequest:
    """Active -> passive, phase ``report``: what did stage 3 choose locally?"""


@message
class SelectionInfo:
    """Passive -> active, phase ``report``: the party's local stage-3 figures (JSON-like dict)."""

    values: dict


def choose_lambda_m(lambdas, rel_err, tol: float) -> int:
    """The in-protocol lambda_m search (less-vfl.md section 3, "Hyper-parameter tuning").

    A party can only judge stage 3 by its own proxy loss ``H`` (it has no labels). Interpretation:
    take the largest ``lambda_m`` (the sparsest model) whose proxy error relative to the variance
    of its significant pre-trained components, ``H / Var(h_pre^K)``, is at most ``tol``, i.e. the
    sparse model still explains ``1 - tol`` of the significant embedding. If none qualifies, the
    smallest lambda.
    """
    lambdas = np.asarray(lambdas, dtype=float)
    ok = [i for i in range(len(lambdas)) if rel_err[i] <= tol]
    if not ok:
        return int(np.argmin(lambdas))
    return max(ok, key=lambda i: lambdas[i])


def local_feature_selection(party: PassiveParty, msg: SelectFeatures) -> dict:
    """Stage 3 at ``party``: P-SGD on ``H_N + lambda_m G`` (eq. 5) from the pre-trained model.

    ``H_N`` is the mean over training samples of ``sum_{k in K_m} (h^k - h_pre^k)^2`` with
    ``h_pre`` the pre-trained model's embeddings, computed here (they equal the uploaded ones; no
    message). The pre-trained model is kept (deep copy in ``party.state['pretrained']``); P-SGD
    trains a copy per candidate lambda. Afterwards the party keeps the chosen copy, drops the
    features whose input group is zero and the non-significant components, for real.
    """
    model = party.require_model()
    K = np.asarray(msg.components, dtype=np.int64)
    d_before = len(party.kept)
    info: dict = {"components": K.tolist(), "n_features_before": d_before}
    if K.size == 0:
        # No significant component: the party's embedding is not used by the server model, so
        # none of its features is significant (Proposition 4.4). It leaves the training.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            party.drop_features(np.zeros(0, dtype=np.int64))
        party.state["left"] = True
        info.update(n_features_after=0, left=True)
        return info
    X = party.X("train")
    model.eval()
    with torch.no_grad():
        h_pre = model(X)[:, torch.as_tensor(K)].clone()
    party.state["pretrained"] = copy.deepcopy(model)
    var = float(((h_pre - h_pre.mean(0)) ** 2).sum(1).mean())
    Kt = torch.as_tensor(K)
    # Interpretation (documented in the method's Params): with ``normalize`` the proxy loss is
    # H_N / Var(h_pre^K). Dividing the smooth part by a constant only rescales lambda_m
    # (argmin H/V + lam G = argmin H + lam V G), so this is eq. (5) with lambda_m expressed
    # relative to the party's own embedding scale: one lambda_m then means the same at every
    # party, whatever the scale its pre-trained embedding happens to have.
    scale = 1.0 / max(var, 1e-12) if msg.normalize else 1.0

    def proxy_loss(out: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return ((out[:, :, Kt] - h_pre[rows]) ** 2).sum(-1).mean(-1) * scale

    lambdas = [float(v) for v in msg.lambdas]
    # ``center``: P-SGD runs in the centred parametrisation W (x - mu) + (b + W mu) of the input
    # layer (mu = the party's training means). Same function class and same penalty G(W), so the
    # same problem (5); only the SGD geometry changes: the gradient of an input group no longer
    # carries mu_j times the bias gradient, which with [0, 1]-scaled features kept knocking
    # zeroed groups of pure-noise features back out of zero (see benchmarks/less_vfl/README.md).
    mu = X.mean(0) if msg.center else None
    stack, curve, lr_used = psgd_stable(lambda: StackedMLP(model, len(lambdas), center=mu), X, proxy_loss,
                                        lambdas, lr=msg.lr, epochs=msg.epochs, batch_size=msg.batch_size,
                                        seed=msg.seed)
    with torch.no_grad():
        final = proxy_loss(stack.forward(X), torch.arange(X.shape[0])).numpy() / scale
    rel_err = final / max(var, 1e-12)
    keeps = significant(stack)
    i = choose_lambda_m(lambdas, rel_err, msg.tol) if len(lambdas) > 1 else 0
    new = stack.export(model, i)
    new.train()
    party.model = new
    party._pending = None
    keep = keeps[i]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a zero-input layer if every feature went
        party.drop_features(keep)
    party.keep_embedding_components(K)
    info.update(
        lambda_m=lambdas[i],
        lr_m=lr_used,
        candidates=[{"lambda_m": lam, "n_features": int(len(k)), "proxy_loss": float(f),
                     "proxy_rel_err": float(r)} for lam, k, f, r in zip(lambdas, keeps, final, rel_err, strict=False)],
        proxy_loss_first_epoch=curve[0][i] if curve else None,
        proxy_loss_last_epoch=curve[-1][i] if curve else None,
        n_features_after=int(len(keep)),
        left=False,
    )
    return info


@passive_handler(SelectFeatures)
def _on_select_features(party: PassiveParty, sender: str, msg: SelectFeatures) -> None:
    party.state["less_vfl"] = local_feature_selection(party, msg)
    return None


@passive_handler(SelectionInfoRequest)
def _on_selection_info(party: PassiveParty, sender: str, msg: SelectionInfoRequest) -> SelectionInfo:
    return SelectionInfo(values=dict(party.state.get("less_vfl", {})))
