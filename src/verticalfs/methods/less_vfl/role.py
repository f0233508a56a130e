"""LESS-VFL's own messages and the party's side: split learning plus stage 3 (local feature selection).

Stage 2's upload uses the core kinds (:class:`~verticalfs.transport.messages.EmbedRequest` with
``batch=-1, train=False`` -> :class:`~verticalfs.transport.messages.Embeddings`). LESS-VFL's own
protocol message is :class:`SelectFeatures`, one per party: it carries the party's significant
embedding components ``K_m`` (Algorithm 1 lines 11-14) and the stage-3 settings, and the party
solves stage 3 inside its handler (lines 15-20). With a single ``lambda_m``, or with
``report_val=False``, it is one-way and the party finishes alone, as in the paper ("stages 2 and 3
only require one round of communication where parties send current embeddings to the server",
section 3, Algorithm cost). With ``report_val=True`` (the default's validation choice of
lambda_m, our addition) the party replies with :class:`CandidateEmbeddings`, the validation
embeddings of its candidates, and finishes with the one the label holder names in
:class:`KeepCandidate`: one more message each way per party, on the ledger.

:class:`SelectionInfoRequest` / :class:`SelectionInfo` are sent in phase ``report`` after training
(like the core's support report) so the run can show what each party chose locally (lambda_m,
proxy fit); they are not part of the algorithm.
"""

from __future__ import annotations

import copy
import time
import warnings

import numpy as np
import torch

from verticalfs.exceptions import ProtocolError
from verticalfs.methods.less_vfl.psgd import (
    StackedMLP,
    load_state,
    proximal_path,
    psgd_stable,
    significant,
)
from verticalfs.party import Context, handles
from verticalfs.training.split import SplitRole
from verticalfs.transport.messages import message


@message("less_vfl.SelectFeatures")
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
    patience: int = 0
    rtol: float = 1e-2
    solver: str = "psgd"
    max_iter: int = 100
    max_rows: int = 0
    refit: str = "pretrained"
    report_val: bool = False


@message("less_vfl.CandidateEmbeddings")
class CandidateEmbeddings:
    """Passive -> active, phase ``selection``, the reply to a :class:`SelectFeatures` with
    ``report_val``: the validation embeddings ``(L, n_val, |K_m|)`` of the party's ``L`` stage-3
    candidates (one per lambda_m), so the label holder can judge them on validation accuracy."""

    values: np.ndarray


@message("less_vfl.KeepCandidate")
class KeepCandidate:
    """Active -> passive, one-way, phase ``selection``: keep stage-3 candidate ``index``."""

    index: int


@message("less_vfl.SelectionInfoRequest")
class SelectionInfoRequest:
    """Active -> passive, phase ``report``: what did stage 3 choose locally?"""


@message("less_vfl.SelectionInfo")
class SelectionInfo:
    """Passive -> active, phase ``report``: the party's local stage-3 figures (JSON-like dict)."""

    values: dict


def largest_passing(lambdas, ok) -> int:
    """Index of the largest lambda whose candidate passes (``ok``), or of the smallest lambda when
    none does: the rule of every lambda search here (stage 2's, the party's and the label
    holder's validation choice)."""
    lambdas = np.asarray(lambdas, dtype=float)
    idx = np.flatnonzero(np.asarray(ok, dtype=bool))
    return int(idx[np.argmax(lambdas[idx])]) if idx.size else int(np.argmin(lambdas))


def choose_lambda_m(lambdas, rel_err, tol: float) -> int:
    """The in-protocol lambda_m search (less-vfl.md section 3, "Hyper-parameter tuning").

    A party can only judge stage 3 by its own proxy loss ``H`` (it has no labels). Interpretation:
    take the largest ``lambda_m`` (the sparsest model) whose proxy error relative to the variance
    of its significant pre-trained components, ``H / Var(h_pre^K)``, is at most ``tol``, i.e. the
    sparse model still explains ``1 - tol`` of the significant embedding. If none qualifies, the
    smallest lambda.
    """
    return largest_passing(lambdas, np.asarray(rel_err, dtype=float) <= tol)


def local_feature_selection(party: LessVFLRole, msg: SelectFeatures) -> dict:
    """Stage 3 at ``party``: P-SGD on ``H_N + lambda_m G`` (eq. 5) from the pre-trained model.

    ``H_N`` is the mean over training samples of ``sum_{k in K_m} (h^k - h_pre^k)^2`` with
    ``h_pre`` the pre-trained model's embeddings, computed here (they equal the uploaded ones; no
    message). The pre-trained model is kept (``party.pretrained``); P-SGD trains a copy per
    candidate lambda, kept in ``party.candidates`` until :func:`keep_candidate` finishes stage 3
    with one of them (the party's own proxy rule, or the label holder's validation choice).
    """
    model = party.model
    K = np.asarray(msg.components, dtype=np.int64)
    if K.size and (K.min() < 0 or K.max() >= model.n_outputs):
        raise ProtocolError(f"party {party.name!r}: SelectFeatures names components {K.tolist()} of its "
                            f"{model.n_outputs}")
    d_before = len(party.data.kept)
    info: dict = {"components": K.tolist(), "n_features_before": d_before}
    if K.size == 0:
        # No significant component: the party's embedding is not used by the server model, so
        # none of its features is significant (Proposition 4.4). It leaves the training.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            party.drop_inputs(np.zeros(0, dtype=np.int64))
        party.left = True
        info.update(n_features_after=0, left=True)
        party.candidates = None
        return info
    X = party.data.X("train")
    if msg.solver == "pgd" and 0 < int(msg.max_rows) < X.shape[0]:
        # full-batch on a seeded random subset of the rows (the proxy H is an average over rows)
        pick = np.sort(np.random.default_rng(int(msg.seed)).choice(X.shape[0], int(msg.max_rows), replace=False))
        X = X[torch.from_numpy(pick)]
    model.eval()
    with torch.no_grad():
        h_pre = model(X)[:, torch.as_tensor(K)].clone()
    party.pretrained = copy.deepcopy(model)
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
    if msg.solver == "pgd":
        # the path in increasing lambda, each solved to a plateau (see proximal_path)
        stack = StackedMLP(model, 1, center=mu)
        points = proximal_path(stack, X, proxy_loss, lambdas, max_iter=int(msg.max_iter))
        final = np.array([pt["loss"] for pt in points]) / scale
        rel_err = final / max(var, 1e-12)
        keeps = [pt["support"] for pt in points]
        i = choose_lambda_m(lambdas, rel_err, msg.tol) if len(lambdas) > 1 else 0
        models = []
        for pt in points:
            load_state(stack, pt["state"])
            models.append(stack.export(model, 0))
        curve, lr_used = [], None
        iterations = [int(pt["iterations"]) for pt in points]
    else:
        stack, curve, lr_used = psgd_stable(lambda: StackedMLP(model, len(lambdas), center=mu), X, proxy_loss,
                                            lambdas, lr=msg.lr, epochs=msg.epochs, batch_size=msg.batch_size,
                                            seed=msg.seed, patience=int(msg.patience), rtol=float(msg.rtol))
        with torch.no_grad():
            final = proxy_loss(stack.forward(X), torch.arange(X.shape[0])).numpy() / scale
        rel_err = final / max(var, 1e-12)
        keeps = significant(stack)
        i = choose_lambda_m(lambdas, rel_err, msg.tol) if len(lambdas) > 1 else 0
        models = [stack.export(model, j) for j in range(len(lambdas))]
        iterations = None
    party.candidates = {"models": models, "keeps": keeps, "lambdas": lambdas, "K": K, "refit": msg.refit}
    info.update(
        candidates=[{"lambda_m": lam, "n_features": int(len(k)), "proxy_loss": float(f),
                     "proxy_rel_err": float(r)} for lam, k, f, r in zip(lambdas, keeps, final, rel_err, strict=False)],
        proxy_loss_first_epoch=curve[0][i] if curve else None,
        proxy_loss_last_epoch=curve[-1][i] if curve else None,
        lr_m=lr_used,
        epochs_run=len(curve),
        solver=msg.solver,
        iterations=iterations,
        rows=int(X.shape[0]),
        left=False,
        proxy_choice=int(i),
    )
    return info


def candidate_embeddings(party: LessVFLRole) -> np.ndarray:
    """``(L, n_val, |K|)``: every stage-3 candidate's embedding of the validation rows."""
    c = party.candidates
    X = party.data.X("val")
    Kt = torch.as_tensor(c["K"])
    with torch.no_grad():
        return np.stack([m.eval()(X)[:, Kt].numpy().astype(np.float32) for m in c["models"]])


def keep_candidate(party: LessVFLRole, i: int) -> None:
    """Finish stage 3 with candidate ``i``: drop the features its input layer zeroed and the
    non-significant components, for real.

    ``refit="pretrained"`` (default): the kept features and components start post-selection
    training from their *pre-trained* weights, the lasso solution only decides which ones stay.
    This is the relaxed lasso (Meinshausen 2007; "debiasing"), our reading of "once feature
    selection is complete, one can further refine the network" (less-vfl.md section 3), which does
    not say from which weights. Measured cause (benchmarks/less_vfl/README.md): the group lasso
    shrinks the weights of the features it keeps as well, and training restarted from those shrunk
    weights ended 1.5-3 points lower on usps and digits (50 % noise) than restarting from the
    pre-trained ones with the same support. ``refit="lasso"``: start from the lasso solution.
    (Also adding each removed feature's mean contribution to the first layer's bias was tried: on
    phishing it raised the test accuracy right after selection from 0.73 to 0.93, but it lowered
    usps's final accuracy by about a point on every seed of five, so it is not done.)
    """
    c = party.candidates
    if c is None or not 0 <= int(i) < len(c["models"]):
        raise ProtocolError(f"party {party.name!r}: KeepCandidate {i} without such a stage-3 candidate")
    keep = c["keeps"][int(i)]
    if c["refit"] == "pretrained":
        new = copy.deepcopy(party.pretrained)
    else:
        new = c["models"][int(i)]
    new.train()
    party.model = new
    party.pending = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a zero-input layer if every feature went
        party.drop_inputs(keep)
    party.keep_outputs(c["K"])
    party.selection_info.update(lambda_m=c["lambdas"][int(i)], chosen=int(i), n_features_after=int(len(keep)))
    party.candidates = None


class LessVFLRole(SplitRole):
    """A party of ``less-vfl`` / ``local-lasso``: split learning (stage 1 and after selection) plus
    stage 3 when :class:`SelectFeatures` arrives."""

    def __init__(self, data, spec, ctx) -> None:
        super().__init__(data, spec, ctx)
        self.selection_info: dict = {}
        self.pretrained = None
        self.candidates = None
        self.left = False

    @handles(SelectFeatures)
    def on_select_features(self, msg: SelectFeatures, ctx: Context) -> CandidateEmbeddings | None:
        if msg.refit not in ("pretrained", "lasso"):
            raise ProtocolError(f"party {self.name!r}: SelectFeatures refit={msg.refit!r}; "
                                "expected 'pretrained' or 'lasso'")
        t0 = time.perf_counter()
        self.selection_info = local_feature_selection(self, msg)
        reply = None
        if self.candidates is not None:
            if msg.report_val:
                reply = CandidateEmbeddings(values=candidate_embeddings(self))
            else:
                keep_candidate(self, self.selection_info["proxy_choice"])
        self.selection_info["seconds"] = time.perf_counter() - t0  # stage 3 at this party
        return reply

    @handles(KeepCandidate)
    def on_keep_candidate(self, msg: KeepCandidate, ctx: Context) -> None:
        t0 = time.perf_counter()
        keep_candidate(self, int(msg.index))
        self.selection_info["seconds"] = self.selection_info.get("seconds", 0.0) + time.perf_counter() - t0
        return None

    @handles(SelectionInfoRequest)
    def on_selection_info(self, msg: SelectionInfoRequest, ctx: Context) -> SelectionInfo:
        return SelectionInfo(values=dict(self.selection_info))
