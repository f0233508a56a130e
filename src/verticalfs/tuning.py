"""Grid searches over a method's regularisation: less-vfl.md section 5 / appendix C (Tables 5-8).

This module sits above :mod:`verticalfs.api` (it runs whole runs), so method folders never import
it at module level; ``verticalfs less-vfl-grid`` (the LESS-VFL folder's command) calls it.

"We run a grid search to determine regularization parameters for LESS-VFL, local lasso, and group
lasso, and the number of pre-training epochs for LESS-VFL and local lasso. We chose parameters that
achieved the highest training accuracy and removed at least 80% of spurious features."

:func:`grid_search` runs one method for every combination of ``lambdas_m`` x ``lambdas_s`` x
``pretrain_epochs`` and every seed (one full run each, communication included) and returns one row
per run; :func:`summarise` averages the rows of a configuration over seeds (Tables 6-8 layout) and
:func:`select_best` applies the paper's rule. Interpretation: the history records test and
validation accuracy per epoch, not training accuracy, so the rule uses the final *validation*
accuracy (held-out, never the test split). The spurious-feature condition needs the ground truth,
i.e. data with injected noise features (as in the paper).

The no-communication search *inside* one run (several lambda_s at the server from one embedding
upload, several lambda_m at each party) is the ``lambdas_s`` / ``lambdas_m`` parameters of
``less-vfl`` itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from verticalfs.api import build_data, run
from verticalfs.evaluation.metrics import primary_metric


def _reference_accuracy(dataset, parties, seed, data_dir, params) -> float | None:
    data = build_data(dataset, parties=parties, noise=0.0, seed=seed, data_dir=data_dir)
    metric = primary_metric(data.labels.task)
    keep = {k: v for k, v in (params or {}).items() if k in ("epochs", "batch_size", "lr", "hidden",
                                                             "embedding_dim", "activation", "top_hidden")}
    res = run("vfl", data, seed=seed, params=keep)
    return res.method_obj.history_.best(metric)


def grid_search(
    dataset,
    lambdas_m: Sequence[float],
    lambdas_s: Sequence[float | None] = (None,),
    pretrain_epochs: Sequence[int | None] = (None,),
    seeds: Sequence[int] = (0,),
    *,
    method: str = "less-vfl",
    parties: int = 3,
    noise: float | Sequence[float] = 0.5,
    data_dir=None,
    params: Mapping[str, Any] | None = None,
    target_accuracy: float | Mapping[int, float] | None = None,
    reference: bool = False,
    on_row: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Run ``method`` over the grid and seeds; one row per (configuration, seed).

    Parameters
    ----------
    dataset : str or PreparedData
        A registered name (built per seed with ``parties`` and ``noise``) or prepared data (used
        as is for every seed; the seed then only drives the models).
    lambdas_m, lambdas_s, pretrain_epochs : sequences
        The grid; ``None`` in ``lambdas_s`` / ``pretrain_epochs`` = the method's default (use it
        for methods without that parameter, e.g. ``group-lasso``).
    params : mapping
        Other parameters for every run (e.g. ``{"epochs": 30}``).
    target_accuracy : float or {seed: float}
        Reference accuracy for the bytes-to-target figure; or ``reference=True`` to run VFL
        (Original) on the noise-free data of each seed (``dataset`` must be a name).

    Returns
    -------
    list of dict
        ``method, seed, lambda_m, lambda_s, pretrain_epochs, accuracy`` (final test metric),
        ``val_accuracy``, ``spurious_removed``, ``n_kept``, ``mb_total`` (training traffic),
        ``mb_to_target`` (or None), ``info`` (the method's info block without per-candidate detail).
    """
    rows: list[dict] = []
    base = dict(params or {})
    for seed in seeds:
        data = build_data(dataset, parties=parties, noise=noise, seed=seed, data_dir=data_dir) \
            if isinstance(dataset, str) else dataset
        metric = primary_metric(data.labels.task)
        if isinstance(target_accuracy, Mapping):
            tgt = target_accuracy.get(seed)
        elif target_accuracy is not None:
            tgt = float(target_accuracy)
        elif reference and isinstance(dataset, str):
            tgt = _reference_accuracy(dataset, parties, seed, data_dir, base)
        else:
            tgt = None
        for lam_m, lam_s, pre in itertools.product(lambdas_m, lambdas_s, pretrain_epochs):
            p = dict(base)
            p["lambda_m"] = float(lam_m)
            if method == "group-lasso":  # the grid's lambda_m as the paper's, not group lasso's
                p.setdefault("lam_path", ())  # penalty path beyond 3 classes (issue 53)
            if lam_s is not None:
                p["lambda_s"] = float(lam_s)
            if pre is not None:
                p["pretrain_epochs"] = int(pre)
            if tgt is not None:
                p["target_accuracy"] = float(tgt)
            res = run(method, data, seed=seed, params=p)
            hist = res.history
            last = hist[-1] if hist else {}
            info = {k: v for k, v in res.info.items() if k not in ("stage2", "stage3", "K_m")}
            b2t = res.info.get("bytes_to_target")
            row = {
                "method": method, "seed": seed, "lambda_m": float(lam_m),
                "lambda_s": None if lam_s is None else float(lam_s),
                "pretrain_epochs": None if pre is None else int(pre),
                metric: last.get(metric), f"val_{metric}": last.get(f"val_{metric}"),
                "spurious_removed": res.selection.get("spurious_removed"),
                "n_kept": res.selection.get("n_kept"),
                "mb_total": (last.get("bytes") or 0) / 1e6,
                "target_accuracy": tgt,
                "mb_to_target": None if b2t is None else b2t / 1e6,
                "info": info,
            }
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


CONFIG_KEYS = ("method", "lambda_m", "lambda_s", "pretrain_epochs")


def summarise(rows: Sequence[dict]) -> list[dict]:
    """Mean and standard deviation over seeds per configuration (appendix C, Tables 6-8)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in CONFIG_KEYS), []).append(r)
    out = []
    for key, rs in groups.items():
        row = dict(zip(CONFIG_KEYS, key, strict=False))
        row["runs"] = len(rs)
        for k in ("accuracy", "r2", "val_accuracy", "val_r2", "spurious_removed", "n_kept", "mb_total",
                  "mb_to_target"):
            vals = [r[k] for r in rs if r.get(k) is not None]
            if k in rs[0] or vals:
                row[k] = float(np.mean(vals)) if vals else None
                row[k + "_std"] = float(np.std(vals)) if vals else None
        row["reached"] = sum(r.get("mb_to_target") is not None for r in rs)
        out.append(row)
    return out


def select_best(rows: Sequence[dict], *, min_spurious_removed: float = 0.8,
                key: str | None = None) -> dict | None:
    """The paper's rule: the configuration with the highest mean final (validation) score among
    those removing at least ``min_spurious_removed`` of the spurious features on average."""
    summ = summarise(rows)
    if not summ:
        return None
    if key is None:
        key = "val_accuracy" if "val_accuracy" in summ[0] else "val_r2"
    ok = [r for r in summ if (r.get("spurious_removed") or 0.0) >= min_spurious_removed
          and r.get(key) is not None]
    if not ok:
        return None
    return max(ok, key=lambda r: r[key])
