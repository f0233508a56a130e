"""Run several methods on the same data and seeds and compare accuracy against megabytes sent.

Used by ``verticalfs compare``. With injected noise features, the reference "VFL (Original)" (the
``vfl`` method on the same split without the noise) is run too, and every method gets the papers'
headline figure: bytes needed to reach 90 % of the reference's best test accuracy while having
removed at least 80 % of the spurious features (less-vfl.md Table 2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from verticalfs.api import RunResult, build_data, run
from verticalfs.evaluation.metrics import primary_metric
from verticalfs.evaluation.targets import bytes_to_reach
from verticalfs.exceptions import ConfigError
from verticalfs.methods import registry
from verticalfs.utils.io import save_figure_atomic, write_json_atomic

REFERENCE = "vfl-original"


def compare(
    dataset,
    methods: Sequence[str],
    *,
    parties: int = 3,
    noise=0.0,
    overlap=0,
    seeds: Sequence[int] = (0,),
    epochs: int | None = None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    common_params: Mapping[str, Any] | None = None,
    data_dir=None,
    codec: str | None = None,
    reference: bool | None = None,
    target_fraction: float = 0.9,
    min_spurious_removed: float = 0.8,
    progress: bool = False,
    on_result: Callable[[str, int, RunResult], None] | None = None,
) -> dict[str, Any]:
    """Run ``methods`` on ``dataset`` for each seed; return a JSON-ready summary with histories."""
    noisy = bool(np.any(np.asarray(noise, dtype=float) > 0))
    reference = noisy if reference is None else reference
    runs: dict[str, list[dict]] = {}
    for seed in seeds:
        data = build_data(dataset, parties=parties, noise=noise, overlap=overlap, seed=seed, data_dir=data_dir)
        metric = primary_metric(data.labels.task)
        target = None
        if reference:
            ref_data = build_data(dataset, parties=parties, noise=0.0, overlap=overlap, seed=seed, data_dir=data_dir)
            rp = _method_params("vfl", epochs, common_params, (params or {}).get("vfl"))
            ref = run("vfl", ref_data, seed=seed, params=rp, codec=codec, progress=progress)
            best = ref.method_obj.history_.best(metric)
            target = target_fraction * best if best is not None else None
            runs.setdefault(REFERENCE, []).append(_summ(ref, metric, None, min_spurious_removed))
            if on_result:
                on_result(REFERENCE, seed, ref)
        for m in methods:
            mp = _method_params(m, epochs, common_params, (params or {}).get(m))
            res = run(m, data, seed=seed, params=mp, codec=codec, progress=progress)
            runs.setdefault(m, []).append(_summ(res, metric, target, min_spurious_removed if noisy else None))
            if on_result:
                on_result(m, seed, res)
    table = []
    for name, rs in runs.items():
        row = {"method": name, "runs": len(rs)}
        for key in ("metric", "total_mb", "train_mb", "spurious_removed", "mb_to_target", "n_kept"):
            vals = [r[key] for r in rs if r.get(key) is not None]
            row[key] = float(np.mean(vals)) if vals else None
            row[key + "_std"] = float(np.std(vals)) if len(vals) > 1 else (0.0 if vals else None)
        row["reached"] = sum(r.get("mb_to_target") is not None for r in rs)
        table.append(row)
    return {"dataset": str(dataset), "parties": parties, "noise": noise, "seeds": list(seeds),
            "metric": metric, "table": table, "runs": runs}


def _method_params(name, epochs, common, specific) -> dict[str, Any]:
    fields = {f.name for f in registry.get(name).Params.__dataclass_fields__.values()}
    out = {k: v for k, v in (common or {}).items() if k in fields}
    if epochs is not None and "epochs" in fields:
        out["epochs"] = epochs
    out.update(specific or {})
    return out


def _summ(res: RunResult, metric: str, target: float | None, min_sr: float | None) -> dict[str, Any]:
    hist = res.history
    mb = None
    if target is not None:
        b = bytes_to_reach(hist, target, metric=metric,
                           min_spurious_removed=min_sr if any("spurious_removed" in h for h in hist) else None)
        mb = None if b is None else b / 1e6
    return {
        "seed": res.seed,
        "metric": res.metrics.get(metric),
        "total_mb": res.communication["total_bytes"] / 1e6,
        "train_mb": (hist[-1]["bytes"] / 1e6) if hist else 0.0,
        "spurious_removed": res.selection.get("spurious_removed"),
        "n_kept": res.selection.get("n_kept"),
        "target": target,
        "mb_to_target": mb,
        "history": [{k: h.get(k) for k in ("epoch", "phase", "bytes", metric, "spurious_removed")} for h in hist],
    }


def plot_compare(summary: Mapping[str, Any], path: str | Path) -> Path:
    """Test metric against megabytes sent (mean over seeds), one line per method.

    Needs matplotlib (``pip install 'verticalfs[plot]'``); without it a :class:`ConfigError` says so.
    """
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("the plot needs matplotlib: pip install 'verticalfs[plot]' (results.json is "
                          "written without it)") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = summary["metric"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rs in summary["runs"].items():
        L = min(len(r["history"]) for r in rs)
        if L == 0:
            continue
        mb = np.mean([[h["bytes"] / 1e6 for h in r["history"][:L]] for r in rs], axis=0)
        vals = np.array([[h.get(metric) if h.get(metric) is not None else np.nan for h in r["history"][:L]]
                         for r in rs], dtype=float)
        mean, std = np.nanmean(vals, 0), np.nanstd(vals, 0)
        if not np.any(mb > 0):  # a method that sends nothing (central): its final value as a level
            ax.axhline(mean[-1], linestyle="--", color="grey", label=f"{name} (no messages, final)")
            continue
        (line,) = ax.plot(mb, mean, label=name, marker="." if L < 30 else None)
        if len(rs) > 1:
            ax.fill_between(mb, mean - std, mean + std, alpha=0.2, color=line.get_color())
    ax.set_xlabel("megabytes sent (training traffic)")
    ax.set_ylabel(f"test {metric}")
    ax.set_title(f"{summary['dataset']}: {summary['parties']} parties, noise {summary['noise']}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = save_figure_atomic(fig, path, dpi=120)
    plt.close(fig)
    return out


def write_compare(summary: Mapping[str, Any], out_dir: str | Path) -> dict[str, Path | str]:
    """``results.json`` and ``accuracy_vs_mb.png`` in ``out_dir``; without matplotlib the ``plot``
    entry is the reason it was not drawn (a string), never a silent omission."""
    out_dir = Path(out_dir)
    out: dict[str, Path | str] = {"results": write_json_atomic(out_dir / "results.json", summary)}
    try:
        out["plot"] = plot_compare(summary, out_dir / "accuracy_vs_mb.png")
    except ConfigError as exc:
        out["plot"] = str(exc)
    return out
