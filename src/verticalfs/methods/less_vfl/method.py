"""``less-vfl`` and ``local-lasso``: less-vfl.md section 3, Algorithm 1 (with Algorithm 2 around it).

Protocol of one ``less-vfl`` run (phases as written on the ledger):

1. ``setup``: every party's ``Join`` with its split-learning spec (:class:`~verticalfs.training.split.SplitSpec`).
2. ``pretrain`` (stage 1): ``pretrain_epochs`` epochs of standard VFL (Algorithm 2), at least
   ``pretrain_min_steps`` mini-batch steps (default 60, the paper's phishing setting in steps).
3. ``selection`` (stages 2 and 3):

   - every party uploads the embeddings of the whole training set once
     (``EmbedRequest("train", epoch, -1, train=False)`` -> ``Embeddings``; Algorithm 1 lines 1-4);
   - the active party solves the group lasso with ``lambda_s`` on its top model's input layer,
     one group per embedding component (lines 5-10), starting from the pre-trained top model; no
     message. Default ``solver="pgd"``: full-batch accelerated proximal gradient to a plateau
     (the paper's "until the training loss plateaus"); ``solver="psgd"``: Algorithm 1's P-SGD over
     mini-batches for ``select_epochs_s`` epochs (= T1);
   - one :class:`~verticalfs.methods.less_vfl.role.SelectFeatures` per party with its
     significant components ``K_m`` (lines 11-14); the party solves stage 3 in the handler (the
     proxy problem with each candidate ``lambda_m``, lines 15-20);
   - default (``choose_m="val"`` with several ``lambdas_m``; our addition, see
     :func:`choose_lambda_m_on_val`): the party replies with its candidates' validation embeddings
     (:class:`~verticalfs.methods.less_vfl.role.CandidateEmbeddings`), the active party asks for
     the pre-trained validation embeddings (``EmbedRequest("val", ...)``), picks per party the
     largest ``lambda_m`` within ``tol_val`` of the pre-trained validation accuracy and sends
     :class:`~verticalfs.methods.less_vfl.role.KeepCandidate`. With one ``lambda_m`` or
     ``choose_m="proxy"`` the party chooses alone and ``SelectFeatures`` is one-way, as in the paper;
   - the party then drops the zeroed features and the non-significant components for real and
     (``refit="pretrained"``, default) restarts from the pre-trained weights of what it kept;
   - the active party keeps the stage-2 top model (line 21) restricted to the significant
     columns, so every later message carries only ``|K_m|`` components per party.

   Nothing else is sent in this phase (checked by the tests on the ledger).
4. ``train``: post-selection VFL on the remaining features and components ("once feature
   selection is complete, one can further refine the network ... using Algorithm 2", section 3).

The history gets one entry after stage 1's last epoch (phase ``pretrain``), one right after
selection (phase ``selection``, same communication epoch, its bytes include the upload) and one
per post-selection epoch. ``epochs`` counts all communication epochs (pre-training included), as
on the x axis of less-vfl.md Figure 3.

``local-lasso`` is "LESS-VFL with stage 2, embedding component selection, removed" (section 5):
every component counts as significant, the top model stays the pre-trained one, and since the
server needs nothing from the parties the embedding upload is skipped too: the selection phase is
just one ``SelectFeatures`` per party.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from verticalfs.evaluation.targets import target_figure
from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.methods.base import Method
from verticalfs.methods.less_vfl.psgd import (
    StackedMLP,
    load_state,
    proximal_path,
    psgd_stable,
    significant,
)
from verticalfs.methods.less_vfl.role import (
    CandidateEmbeddings,
    KeepCandidate,
    LessVFLRole,
    SelectFeatures,
    SelectionInfo,
    SelectionInfoRequest,
    largest_passing,
)
from verticalfs.methods.registry import register
from verticalfs.params import Constraints, Interval, Options
from verticalfs.training.history import derive_seed
from verticalfs.training.split import SplitTrainer, TrainConfig
from verticalfs.transport.messages import At, Embeddings, EmbedRequest
from verticalfs.transport.node import request_all, send_all

# Defaults chosen by the grid search on phishing (3 parties, 50 % noise) documented in
# benchmarks/less_vfl/README.md ("Choosing the defaults").
DEFAULT_LAMBDA_M = 0.2  # the single lambda_m of the "psgd" solver (tuned on phishing)
#: lambda_m candidates each party solves with the "pgd" solver; the label holder keeps, per party,
#: the largest whose validation accuracy stays within tol_val of the pre-trained model's (if none
#: does, the smallest). The path reaches 0.03 (issue 40): with (0.1, 0.2, 0.4) a party whose every
#: candidate lost more than tol_val got 0.1 anyway, which on wide, many-class data pruned most of its
#: real features; a path down to 0.01 kept a third of the noise on the 30-class synthetic set. See
#: benchmarks/less_vfl/README.md "A longer lambda_m path (issue 40)"
DEFAULT_LAMBDAS_M = (0.03, 0.05, 0.1, 0.2, 0.4)
DEFAULT_LAMBDA_S = 0.01
DEFAULT_LR_M = 0.01
DEFAULT_LR_S = 0.05
DEFAULT_PRETRAIN = 2
#: Stage 1 lasts at least this many mini-batch steps: the paper's 2 epochs on phishing (30 batches
#: of 256 per epoch); on digits two epochs are 10 steps, see LocalLassoParams.pretrain_min_steps
DEFAULT_PRETRAIN_MIN_STEPS = 60


@dataclass
class LocalLassoParams(TrainConfig):
    """Local lasso: LESS-VFL without stage 2 (less-vfl.md section 5 baseline).

    Parameters
    ----------
    epochs : int
        Communication epochs in total: pre-training plus post-selection training (default 50).
    batch_size : int
        Mini-batch size of VFL training and of the P-SGD stages (default 256).
    lr : float
        Adam learning rate of pre-training and post-selection training (less-vfl.md section 5: 0.01).
    optimizer : str
        Optimizer of pre-training and post-selection training (``adam``, as the paper).
    weight_decay : float
        L2 penalty of that optimizer.
    hidden : tuple of int
        Hidden widths of each party's MLP; (64, 32) = the paper's 3-layer MLP.
    embedding_dim : int
        Embedding components per party before selection.
    activation : str
        Hidden activation.
    top_hidden : tuple of int
        Hidden widths of the top model; empty = the paper's linear top model.
    pretrain_epochs : int
        Stage 1: epochs of standard VFL before selection (paper Table 5: 1 to 5).
    pretrain_min_steps : int
        Stage 1 runs at least this many mini-batch steps: ``max(pretrain_epochs,
        ceil(pretrain_min_steps / batches per epoch))`` epochs, the second term capped at half of
        ``epochs``. The paper's 1-5 epochs are on data sets of 10,000s of rows; on 1,257 rows
        (digits) two epochs are 10 steps, after which the embeddings carry so little that stage 3
        kept 32-55 % of the noise on two seeds of five (measured; with 60: none on any seed).
        The default 60 is the paper's own setting on phishing in steps (2 epochs of 30 batches), so
        phishing keeps its 2 epochs; 0 = exactly ``pretrain_epochs``.
    lambda_m : float or None
        Group-lasso coefficient of stage 3 at every party (scale: with ``normalize_m`` the proxy
        loss is the fraction of the significant embedding's variance lost). None (default) =
        every party solves ``lambdas_m`` and one is chosen by ``choose_m``; a number = that value
        only.
    lambdas_m : tuple of float
        Candidates for lambda_m when ``lambda_m`` is None. Empty (default) = the solver's default:
        (0.03, 0.05, 0.1, 0.2, 0.4) for ``pgd``, the single 0.2 tuned on phishing for ``psgd``.
    choose_m : str
        How one of several ``lambdas_m`` is chosen. ``val`` (default): by the label holder on
        validation accuracy (``tol_val``; each party sends its candidates' validation embeddings,
        one message per party, and gets the index back: our addition, see
        :func:`choose_lambda_m_on_val`); ``proxy``: by each party alone from its proxy error
        (``tol_m``, section 3's communication-free search). Without a validation split, ``proxy``.
    tol_val : float
        ``choose_m="val"``: a candidate may lose at most this much validation accuracy (R^2 for
        regression) against the pre-trained model.
    refit : str
        Weights post-selection training starts from at the parties: ``pretrained`` (default) = the
        pre-trained weights of the kept features and components (the relaxed lasso; the lasso
        only decides the support), ``lasso`` = the stage-3 solution itself. See
        :func:`~verticalfs.methods.less_vfl.role.keep_candidate`.
    solver : str
        ``pgd`` (default): stages 2 and 3 solved to a plateau by full-batch accelerated proximal
        gradient along the lambda path (``verticalfs.methods.less_vfl.psgd.proximal_path``; the
        paper allows T1, T2 "until the loss plateaus"); ``psgd``: Algorithm 1's mini-batch P-SGD
        for a fixed ``select_epochs_*`` (with ``lr_*``), the default before the like-for-like issue:
        on phishing (3 parties, 10 epochs) 6-7x the time of ``vfl``, see
        benchmarks/less_vfl/README.md.
    max_iter : int
        ``pgd``: iterations per lambda at most.
    max_rows : int
        ``pgd``: stage 3 runs full-batch on at most this many of the party's training rows (a
        seeded random subset; 0 = all).
    tol_m : float
        Search rule for ``lambdas_m``: the largest lambda whose proxy error is at most this
        fraction of the variance of the significant pre-trained components.
    lr_m : float
        ``psgd``: step size eta_m of stage 3 (not given by the paper).
    select_epochs_m : int
        ``psgd``: T2 in epochs of P-SGD over the party's training rows (paper: 150).
    normalize_m : bool
        Divide the stage-3 proxy loss by the variance of the party's significant pre-trained
        components, i.e. express lambda_m relative to each party's embedding scale (the same
        problem (5) with lambda_m x variance; interpretation, see the README).
    center : bool
        Run the P-SGD stages in the centred parametrisation of the input layer (same problem,
        better-conditioned steps; interpretation, see the README).
    select_batch_size : int
        Mini-batch size of the P-SGD stages 2 and 3 (0 = ``batch_size``).
    select_patience : int
        Stop the P-SGD stages at a plateau: the support unchanged for this many epochs and the mean
        objective of the last ``select_patience`` epochs within ``select_rtol`` of the ones before
        (less-vfl.md section 3 allows T1, T2 "until the training loss plateaus"); 0 = always run
        ``select_epochs_m`` / ``select_epochs_s`` epochs.
    select_rtol : float
        Relative tolerance of that plateau test.
    target_accuracy : float
        Reference accuracy (best VFL (Original) test accuracy); when given, ``info['bytes_to_target']``
        is the cumulative bytes at the first epoch with accuracy >= 0.9 x this and >= 80 % of the
        spurious features removed (less-vfl.md Table 2).
    """

    pretrain_epochs: int = DEFAULT_PRETRAIN
    pretrain_min_steps: int = DEFAULT_PRETRAIN_MIN_STEPS
    lambda_m: float | None = None
    lambdas_m: tuple[float, ...] = ()
    choose_m: str = "val"
    tol_val: float = 0.02
    refit: str = "pretrained"
    solver: str = "pgd"
    max_iter: int = 100
    max_rows: int = 1536
    tol_m: float = 0.05
    lr_m: float = DEFAULT_LR_M
    select_epochs_m: int = 150
    normalize_m: bool = True
    center: bool = True
    select_batch_size: int = 0
    select_patience: int = 0
    select_rtol: float = 1e-2
    target_accuracy: float | None = None

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "pretrain_epochs": [Interval(int, 0, None)],
        "pretrain_min_steps": [Interval(int, 0, None)],
        "lambda_m": [Interval(float, 0, None), None],
        "lambdas_m": [Interval(float, 0, None)],
        "choose_m": [Options("val", "proxy")],
        "tol_val": [Interval(float, 0, 1)],
        "refit": [Options("pretrained", "lasso")],
        "solver": [Options("pgd", "psgd")],
        "max_iter": [Interval(int, 1, None)],
        "max_rows": [Interval(int, 0, None)],
        "tol_m": [Interval(float, 0, None)],
        "lr_m": [Interval(float, 0, None, closed="neither")],
        "select_epochs_m": [Interval(int, 0, None)],
        "select_batch_size": [Interval(int, 0, None)],
        "select_patience": [Interval(int, 0, None)],
        "select_rtol": [Interval(float, 0, None)],
        "target_accuracy": [Interval(float, 0, 1), None],
    }


@dataclass
class LessVFLParams(LocalLassoParams):
    """LESS-VFL (less-vfl.md section 3, Algorithm 1).

    Parameters
    ----------
    lambda_s : float
        Group-lasso coefficient of stage 2 on the top model's input layer (one group per
        embedding component; scale: the mean training loss).
    lambdas_s : tuple of float
        Optional candidates for lambda_s searched at the active party from the same uploaded
        embeddings, without communication; empty = use ``lambda_s``.
    tol_s : float
        Search rule for ``lambdas_s``: the largest lambda whose training score on the uploaded
        embeddings (accuracy, or R^2 for regression) is within this of the best candidate's.
    lr_s : float
        P-SGD step size eta_s of stage 2 (not given by the paper).
    select_epochs_s : int
        T1 in epochs of P-SGD over the uploaded embeddings (paper: 150).
    """

    lambda_s: float = DEFAULT_LAMBDA_S
    lambdas_s: tuple[float, ...] = ()
    tol_s: float = 0.01
    lr_s: float = DEFAULT_LR_S
    select_epochs_s: int = 150

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "lambda_s": [Interval(float, 0, None)],
        "lambdas_s": [Interval(float, 0, None)],
        "tol_s": [Interval(float, 0, None)],
        "lr_s": [Interval(float, 0, None, closed="neither")],
        "select_epochs_s": [Interval(int, 0, None)],
    }


def _task_losses(task: str, y: torch.Tensor):
    """Per-candidate training loss of stacked top-model outputs ``(L, B, out)``."""
    if task == "regression":
        def f(out, rows):
            return ((out[..., 0] - y[rows][None, :]) ** 2).mean(-1)
    else:
        def f(out, rows):
            L, B, C = out.shape
            ce = F.cross_entropy(out.reshape(L * B, C), y[rows].repeat(L), reduction="none")
            return ce.view(L, B).mean(-1)
    return f


def _fit_scores(task: str, out: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Training score per candidate: accuracy, or R^2 for regression."""
    if task == "regression":
        err = ((out[..., 0] - y[None, :]) ** 2).mean(-1)
        var = torch.clamp(((y - y.mean()) ** 2).mean(), min=1e-12)
        return (1.0 - err / var).numpy()
    return (out.argmax(-1) == y[None, :]).float().mean(-1).numpy()


def choose_lambda_s(lambdas, scores, tol: float) -> int:
    """The in-protocol lambda_s search (section 3): the largest lambda_s whose training score on
    the uploaded embeddings is within ``tol`` of the best candidate's (the sparsest top model that
    loses essentially nothing on the data the server has)."""
    return largest_passing(lambdas, np.asarray(scores, dtype=float) >= float(np.max(scores)) - tol)


def component_selection(top, H: torch.Tensor, y: torch.Tensor, task: str, lambdas, *, lr: float,
                        epochs: int, batch_size: int, seed: int, tol: float, center: bool = True,
                        patience: int = 0, rtol: float = 1e-2, solver: str = "psgd", max_iter: int = 100):
    """Stage 2 at the active party: P-SGD on eq. (4) from the pre-trained top model ``top``.

    Returns ``(new_top, significant_columns, report)``; ``new_top`` is the chosen candidate (a copy
    of ``top`` with the P-SGD weights, not yet shrunk).
    """
    lambdas = [float(v) for v in lambdas]
    # centred parametrisation of the top input layer (same problem (4), better SGD geometry; see
    # messages.local_feature_selection)
    mu = H.mean(0) if center else None
    loss = _task_losses(task, y)
    if solver == "pgd":
        stack = StackedMLP(top, 1, center=mu)
        points = proximal_path(stack, H, loss, lambdas, max_iter=max_iter)
        scores, final_loss = [], []
        for pt in points:
            load_state(stack, pt["state"])
            with torch.no_grad():
                out = stack.forward(H)
            scores.append(float(_fit_scores(task, out, y)[0]))
            final_loss.append(float(loss(out, torch.arange(H.shape[0]))[0]))
        scores, final_loss = np.array(scores), np.array(final_loss)
        keeps = [pt["support"] for pt in points]
        i = choose_lambda_s(lambdas, scores, tol) if len(lambdas) > 1 else 0
        load_state(stack, points[i]["state"])
        report = {"lambda_s": lambdas[i], "solver": "pgd", "iterations": [int(pt["iterations"]) for pt in points],
                  "candidates": [{"lambda_s": lam, "n_components": int(len(k)), "train_score": float(sc),
                                  "train_loss": float(fl)}
                                 for lam, k, sc, fl in zip(lambdas, keeps, scores, final_loss, strict=True)]}
        return stack.export(top, 0), keeps[i], report
    stack, curve, lr_used = psgd_stable(lambda: StackedMLP(top, len(lambdas), center=mu), H, loss, lambdas,
                                        lr=lr, epochs=epochs, batch_size=batch_size, seed=seed,
                                        patience=patience, rtol=rtol)
    with torch.no_grad():
        out = stack.forward(H)
        scores = _fit_scores(task, out, y)
        final_loss = loss(out, torch.arange(H.shape[0])).numpy()
    keeps = significant(stack)
    i = choose_lambda_s(lambdas, scores, tol) if len(lambdas) > 1 else 0
    report = {
        "lambda_s": lambdas[i],
        "lr_s": lr_used,
        "candidates": [{"lambda_s": lam, "n_components": int(len(k)), "train_score": float(s),
                        "train_loss": float(fl)}
                       for lam, k, s, fl in zip(lambdas, keeps, scores, final_loss, strict=False)],
        "loss_first_epoch": curve[0][i] if curve else None,
        "loss_last_epoch": curve[-1][i] if curve else None,
        "epochs_run": len(curve),
    }
    return stack.export(top, i), keeps[i], report


def pretrain_epochs(epochs_asked: int, min_steps: int, batches_per_epoch: int, epochs: int) -> int:
    """Stage 1's length: ``epochs_asked``, raised to ``ceil(min_steps / batches_per_epoch)`` epochs
    but by that rule to at most half of ``epochs`` (so that a tiny data set, with one batch per
    epoch, still leaves half of the run for post-selection training), and never more than
    ``epochs``."""
    by_steps = -(-int(min_steps) // max(int(batches_per_epoch), 1))
    pre = max(int(epochs_asked), min(by_steps, int(epochs) // 2))
    return min(pre, int(epochs))


def choose_lambda_m_on_val(trainer, fed, top, parties, K, replies, lambdas, tol: float, at):
    """The label holder's validation choice of each party's lambda_m (our addition to less-vfl.md
    section 3's search, which lets a party judge stage 3 only by its proxy loss).

    The label holder asks every party for the validation embeddings of its pre-trained model
    (``EmbedRequest("val", ..., -1, False)``, on the ledger), and each party has replied to
    :class:`SelectFeatures` with its candidates' validation embeddings. For party ``m`` and
    candidate ``i`` the score is the validation accuracy (R^2 for regression) of the stage-2 top
    model with party ``m``'s block replaced by candidate ``i``'s and every other party's kept at
    its pre-trained embedding; the reference is the same model on the pre-trained embeddings of
    all parties. Each party gets the largest lambda_m whose score is at most ``tol`` below the
    reference (never a choice that loses more than that against the pre-trained model); if none
    qualifies, the smallest. Returns ``({party: index}, report)``.
    """
    n = trainer.n_samples("val")
    req = EmbedRequest("val", trainer.epoch, -1, False)
    dims = trainer.embedding_dims
    offsets = dict(zip(parties, np.cumsum([0] + [dims[q] for q in parties])[:-1].tolist(), strict=True))
    # the stage-2 top model still has every input column; the non-significant ones have zero weight
    base = torch.zeros(n, sum(dims[q] for q in parties))
    cols = {q: torch.as_tensor(offsets[q] + np.asarray(K[q], dtype=np.int64)) for q in parties}
    for q in parties:
        if len(K[q]):
            full = trainer.decode_forward(q, fed.proxy(q).request(req, at, expect=Embeddings), n)
            base[:, cols[q]] = torch.from_numpy(np.asarray(full, dtype=np.float32)[:, K[q]])
    L = len(lambdas)
    y = trainer.y["val"]
    top.eval()
    with torch.no_grad():
        ref = float(_fit_scores(fed.task, top(base)[None], y)[0])
        choice, report = {}, {"reference_val_score": ref, "tol": tol, "parties": {}}
        for q, rep in replies.items():
            v = np.asarray(rep.values)
            if v.shape != (L, n, len(K[q])) or not np.all(np.isfinite(v)):
                raise ProtocolError(f"party {q!r} sent candidate embeddings of shape {v.shape} (finite: "
                                    f"{bool(np.all(np.isfinite(v)))}), expected finite {(L, n, len(K[q]))}")
            H = base[None].repeat(L, 1, 1)
            H[:, :, cols[q]] = torch.from_numpy(v.astype(np.float32))
            scores = _fit_scores(fed.task, top(H.reshape(L * n, -1)).reshape(L, n, -1), y)
            i = largest_passing(lambdas, scores >= ref - tol)
            choice[q] = i
            report["parties"][q] = {"val_scores": [float(x) for x in scores], "lambda_m": float(lambdas[i])}
    top.train()
    return choice, report


class _StagedLasso(Method):
    """Shared driver of less-vfl and local-lasso."""

    Role = LessVFLRole
    component_selection: bool = True
    test_params = {"epochs": 4, "batch_size": 64, "hidden": (16, 8), "pretrain_epochs": 1, "select_epochs_m": 3}

    def _validate(self) -> None:
        p = self.params
        if not 0 <= p.pretrain_epochs <= p.epochs:
            raise ConfigError(f"{self.name}: need 0 <= pretrain_epochs <= epochs, got "
                              f"{p.pretrain_epochs} and {p.epochs}")
        if p.pretrain_epochs == 0:
            raise ConfigError(f"{self.name}: stage 1 needs at least one pre-training epoch (pretrain_epochs >= 1)")
        # (solver, choose_m, refit, tol_val, the lambdas, lr_m / lr_s, max_iter, ...: the params'
        # constraints, checked when they were built)

    def fit(self, fed):
        self._validate()
        p = self.params
        trainer = SplitTrainer(fed, self.name, TrainConfig.from_params(p), seed=self.seed,
                               callbacks=self.callbacks, entry_hook=self.entry_hook, codec=self.codec,
                               checkpoints=self.checkpoints)
        trainer.setup()
        clock = time.perf_counter
        # ---------------------------------------------------------------- stage 1
        n_batches = -(-trainer.n_samples("train") // int(p.batch_size))
        pre = pretrain_epochs(int(p.pretrain_epochs), int(p.pretrain_min_steps), n_batches, int(p.epochs))
        t0 = clock()
        trainer.fit(pre, phase="pretrain")
        seconds = {"pretrain": clock() - t0}
        # ---------------------------------------------------------------- stages 2 + 3
        info: dict = {"pretrain_epochs": pre}
        parties = list(trainer.parties)
        dims = dict(trainer.embedding_dims)
        at = At("selection", trainer.epoch)
        t0 = clock()
        if self.component_selection:
            req = EmbedRequest("train", trainer.epoch, -1, False)
            n = trainer.n_samples("train")
            reps = request_all([(fed.proxy(q), req) for q in parties], at, expect=Embeddings)
            embs = {q: trainer.decode_forward(q, rep, n) for q, rep in zip(parties, reps, strict=True)}
            H = torch.cat([torch.from_numpy(np.asarray(embs[q], dtype=np.float32)) for q in parties], 1)
            lambdas_s = tuple(p.lambdas_s) or (p.lambda_s,)
            new_top, cols, rep = component_selection(
                trainer.top, H, trainer.y["train"], fed.task, lambdas_s, lr=p.lr_s,
                epochs=p.select_epochs_s, batch_size=p.select_batch_size or p.batch_size,
                seed=derive_seed(self.seed, "less-vfl", "stage2"), tol=p.tol_s, center=p.center,
                patience=p.select_patience, rtol=p.select_rtol, solver=p.solver, max_iter=int(p.max_iter))
            if len(cols) == 0:
                # Every component was zeroed (lambda_s too large): nothing could be trained on.
                # Fall back to keeping all components and say so.
                cols = np.arange(H.shape[1])
                new_top = trainer.top
                rep["fallback_all_components"] = True
            info["stage2"] = rep
            info["lambda_s"] = rep["lambda_s"]
        else:
            new_top = trainer.top
            cols = np.arange(sum(dims[q] for q in parties))
        seconds["stage2"] = clock() - t0  # the upload and the server's component selection
        offsets = np.cumsum([0] + [dims[q] for q in parties])
        K = {q: cols[(cols >= offsets[i]) & (cols < offsets[i + 1])] - offsets[i]
             for i, q in enumerate(parties)}
        if p.lambda_m is not None:
            lambdas_m = (float(p.lambda_m),)
        else:
            lambdas_m = tuple(p.lambdas_m) or ((DEFAULT_LAMBDA_M,) if p.solver == "psgd" else DEFAULT_LAMBDAS_M)
        t0 = clock()
        by_val = p.choose_m == "val" and len(lambdas_m) > 1 and "val" in trainer.y
        replies = {}
        msgs = {}
        for q in parties:
            msgs[q] = SelectFeatures(
                components=np.asarray(K[q], dtype=np.int64), lambdas=tuple(float(v) for v in lambdas_m),
                lr=float(p.lr_m), epochs=int(p.select_epochs_m), batch_size=int(p.select_batch_size or p.batch_size),
                seed=derive_seed(self.seed, "less-vfl", "stage3", q), tol=float(p.tol_m),
                normalize=bool(p.normalize_m), center=bool(p.center), patience=int(p.select_patience),
                rtol=float(p.select_rtol), solver=str(p.solver), max_iter=int(p.max_iter),
                max_rows=int(p.max_rows), refit=str(p.refit), report_val=bool(by_val and len(K[q]) > 0))
        # every party selects at once (the same order of messages as one after another otherwise)
        if all(m.report_val for m in msgs.values()):
            replies = dict(zip(parties, request_all([(fed.proxy(q), msgs[q]) for q in parties], at,
                                                    expect=CandidateEmbeddings), strict=True))
        elif not any(m.report_val for m in msgs.values()):
            send_all([(fed.proxy(q), msgs[q]) for q in parties], at)
        else:
            for q, msg in msgs.items():
                if msg.report_val:
                    replies[q] = fed.proxy(q).request(msg, at, expect=CandidateEmbeddings)
                else:
                    fed.proxy(q).send(msg, at)
        if replies:
            choice, report = choose_lambda_m_on_val(trainer, fed, new_top, parties, K, replies, lambdas_m,
                                                     float(p.tol_val), at)
            for q, i in choice.items():
                fed.proxy(q).send(KeepCandidate(index=int(i)), at)
            info["stage3_val"] = report
        # in process the parties' stage 3 runs inside these sends (one after another); networked the
        # parties run it in parallel and this is only the sending. Each party's own time is in
        # info["stage3"][party]["seconds"].
        seconds["stage3_wall"] = clock() - t0
        # The label holder's side of the shrink: top model = stage-2 result on the significant
        # columns; parties with no significant component leave the training.
        new_top = copy.deepcopy(new_top) if new_top is trainer.top else new_top
        new_top.keep_inputs(np.asarray(cols, dtype=np.int64))
        trainer.replace_top(new_top, {q: int(len(K[q])) for q in parties if len(K[q]) > 0})
        info["K_m"] = {q: K[q].tolist() for q in parties}
        info["n_components"] = {q: int(len(K[q])) for q in parties}
        info["parties_left"] = [q for q in parties if len(K[q]) == 0]
        trainer.record("selection", None)
        # ---------------------------------------------------------------- post-selection
        post = p.epochs - pre
        t0 = clock()
        if post > 0:
            trainer.fit(post, phase="train")
        seconds["post_selection"] = clock() - t0
        # ---------------------------------------------------------------- results
        self.finish_training(fed, trainer)
        report = At("report")
        local = {q: fed.proxy(q).request(SelectionInfoRequest(), report, expect=SelectionInfo) for q in parties}
        info["stage3"] = {q: r.values for q, r in local.items()}
        info["lambda_m"] = {q: v.get("lambda_m") for q, v in info["stage3"].items()}
        seconds["stage3"] = {q: v.get("seconds") for q, v in info["stage3"].items()}
        info["seconds"] = seconds
        info["features_kept"] = {q: int(m.sum()) for q, m in self.support_.items()}
        led = fed.ledger
        by_phase = led.by("phase")
        info["bytes_by_phase"] = by_phase
        info["bytes_pretrain"] = by_phase.get("pretrain", 0)
        info["bytes_selection"] = by_phase.get("selection", 0)
        info["bytes_post_selection"] = by_phase.get("train", 0)
        info.update(target_figure(trainer.history, p.target_accuracy, fed.task))
        self.info_.update(info)
        return self


@register
class LessVFL(_StagedLasso):
    name = "less-vfl"
    summary = ("LESS-VFL: short pre-training, one embedding upload, server-side component selection "
               "(group lasso on the top model), then local group-lasso feature selection at each party.")
    paper = "less-vfl.md section 3, Algorithm 1 (Castiglia et al., ICML 2023)"
    Params = LessVFLParams
    component_selection = True
    test_params = {**_StagedLasso.test_params, "select_epochs_s": 3}


@register
class LocalLasso(_StagedLasso):
    name = "local-lasso"
    summary = "LESS-VFL without stage 2: every embedding component counts, local group lasso at each party."
    paper = "less-vfl.md section 5 (baseline)"
    Params = LocalLassoParams
    component_selection = False
