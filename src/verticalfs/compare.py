"""Run several methods on the same data and seeds and compare accuracy against megabytes sent.

Used by ``verticalfs compare``. With injected noise features, the reference "VFL (Original)" (the
``vfl`` method on the same split without the noise) is run too, and every method gets the papers'
headline figure: bytes needed to reach 90 % of the reference's best test accuracy while having
removed at least 80 % of the spurious features (less-vfl.md Table 2).
"""

from __future__ import annotations

import json
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
    progress: bool | None = None,
    callbacks: Sequence[Any] = (),
    on_result: Callable[[str, int, RunResult], None] | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    parsed: Mapping[str, Any] | None = None,
    on_start: Callable[[str, int], None] | None = None,
) -> dict[str, Any]:
    """Run ``methods`` on ``dataset`` for each seed; return a JSON-ready summary with histories.

    ``dataset`` is a registered name, prepared-data source accepted by :func:`build_data`, or the
    CLI's data options (with ``parsed``). With ``out_dir`` every finished run is written at once,
    atomically, to ``out_dir/runs/<method>__seed<k>.json``; with ``resume`` the runs found there
    are read back instead of run again. A method that cannot run on the data (e.g. a binary-only
    method on several classes) is reported as skipped, with the reason, and the others go on.

    ``callbacks``: as for :func:`verticalfs.run`; the comparison's own events (``run_start`` of kind
    ``compare``, its end) enclose each run's, whose ``parent`` is the comparison's id.
    ``progress``: deprecated (``callbacks=[ProgressCallback()]``).
    """
    from verticalfs.run_events import events_of, failing

    if progress is not None:
        import warnings

        warnings.warn("progress= is deprecated: pass callbacks=[verticalfs.training.ProgressCallback()]",
                      DeprecationWarning, stacklevel=2)
        if progress:
            from verticalfs.training.history import ProgressCallback

            callbacks = [*callbacks, ProgressCallback()]
    _, events = events_of(callbacks)
    label = dataset if isinstance(dataset, str) else ((dataset.dataset if parsed is not None else None) or "user files")
    with failing(events, kind="compare", dataset=str(label)):
        if events is not None:
            events.start(kind="compare", dataset=str(label), params={"methods": list(methods), "seeds": list(seeds)})
        out = _compare(dataset, methods, parties=parties, noise=noise, overlap=overlap, seeds=seeds, epochs=epochs,
                       params=params, common_params=common_params, data_dir=data_dir, codec=codec,
                       reference=reference, target_fraction=target_fraction,
                       min_spurious_removed=min_spurious_removed, callbacks=callbacks,
                       parent=None if events is None else events.run, on_result=on_result, out_dir=out_dir,
                       resume=resume, parsed=parsed, on_start=on_start)
        if events is not None:
            for w in out["warnings"]:
                events.warning(w)
            events.end("ok")
        return out


def _compare(dataset, methods, *, parties, noise, overlap, seeds, epochs, params, common_params, data_dir, codec,
             reference, target_fraction, min_spurious_removed, callbacks, parent, on_result, out_dir, resume,
             parsed, on_start) -> dict[str, Any]:
    noisy = bool(np.any(np.asarray(parsed["noise"] if parsed else noise, dtype=float) > 0))
    reference = noisy if reference is None else reference
    runs: dict[str, list[dict]] = {}
    skipped: dict[str, str] = {}
    run_dir = Path(out_dir) / "runs" if out_dir is not None else None
    if run_dir is not None:
        from verticalfs.resume import check_and_store

        check_and_store(run_dir, _run_config(dataset, methods, parties=parties, noise=noise, overlap=overlap,
                                             epochs=epochs, params=params, common_params=common_params,
                                             codec=codec, reference=reference, target_fraction=target_fraction,
                                             min_spurious_removed=min_spurious_removed, parsed=parsed),
                        resume=resume)
    metric = None
    n_parties = parties

    def build(seed: int, noise_override=None):
        if parsed is not None:
            return dataset.build(seed, parsed, noise=noise_override)
        return build_data(dataset, parties=parties, noise=noise if noise_override is None else noise_override,
                          overlap=overlap, seed=seed, data_dir=data_dir)

    def finished(name: str, seed: int) -> dict | None:
        if not (resume and run_dir is not None):
            return None
        f = run_dir / f"{_safe(name)}__seed{seed}.json"
        return json.loads(f.read_text()) if f.is_file() else None

    def keep(name: str, seed: int, summ: dict) -> None:
        runs.setdefault(name, []).append(summ)
        if run_dir is not None:
            write_json_atomic(run_dir / f"{_safe(name)}__seed{seed}.json", summ)

    for seed in seeds:
        data = None
        todo = [m for m in methods if m not in skipped]
        need_ref = reference and finished(REFERENCE, seed) is None
        if need_ref or any(finished(m, seed) is None for m in todo):
            data = build(seed)
            metric = primary_metric(data.labels.task)
            n_parties = len(data.party_names)
        target = None
        if reference:
            done = finished(REFERENCE, seed)
            if done is None:
                if on_start:
                    on_start(REFERENCE, seed)
                ref_data = build(seed, noise_override=0.0)
                rp = _method_params("vfl", epochs, common_params, (params or {}).get("vfl"))
                ref = run("vfl", ref_data, seed=seed, params=rp, codec=codec, callbacks=callbacks, parent=parent)
                best = ref.method_obj.history_.best(primary_metric(ref_data.labels.task))
                done = _summ(ref, primary_metric(ref_data.labels.task), None, min_spurious_removed)
                done["reference_best"] = best
                if on_result:
                    on_result(REFERENCE, seed, ref)
            keep(REFERENCE, seed, done)
            best = done.get("reference_best")
            target = target_fraction * best if best is not None else None
        for m in todo:
            done = finished(m, seed)
            if done is None:
                if on_start:
                    on_start(m, seed)
                mp = _method_params(m, epochs, common_params, (params or {}).get(m))
                try:
                    res = run(m, data, seed=seed, params=mp, codec=codec, callbacks=callbacks, parent=parent)
                except ConfigError as exc:  # the method cannot run on this data: skip it, keep the rest
                    skipped[m] = str(exc)
                    continue
                done = _summ(res, metric, target, min_spurious_removed if noisy else None)
                if on_result:
                    on_result(m, seed, res)
            keep(m, seed, done)
        metric = metric or next((r["metric_name"] for rs in runs.values() for r in rs if "metric_name" in r), None)
    table = []
    for name in ([REFERENCE] if reference else []) + list(methods):
        if name in skipped and name not in runs:
            table.append({"method": name, "runs": 0, "skipped": skipped[name], "metric": None, "reached": 0,
                          "mb_to_target": None})
            continue
        rs = runs.get(name, [])
        row = {"method": name, "runs": len(rs)}
        for key in ("metric", "total_mb", "train_mb", "spurious_removed", "mb_to_target", "n_kept"):
            vals = [r[key] for r in rs if r.get(key) is not None]
            row[key] = float(np.mean(vals)) if vals else None
            row[key + "_std"] = float(np.std(vals)) if len(vals) > 1 else (0.0 if vals else None)
        row["reached"] = sum(r.get("mb_to_target") is not None for r in rs)
        row["at_chance"] = sum(r.get("chance") is not None for r in rs)  # runs at or near chance
        table.append(row)
    if isinstance(dataset, str):
        name = dataset
    else:  # the CLI's data options name a registered data set (or none for party files); tables are the user's
        name = (dataset.dataset if parsed is not None else None) or "user files"
    notes = list(dict.fromkeys(w for rs in runs.values() for r in rs for w in r.get("warnings", [])))
    return {"dataset": str(name), "parties": n_parties, "noise": parsed["noise"] if parsed else noise,
            "seeds": list(seeds), "metric": metric, "target_fraction": target_fraction, "table": table, "runs": runs,
            "skipped": skipped, "warnings": notes}


def _run_config(dataset, methods, *, parties, noise, overlap, epochs, params, common_params, codec, reference,
                target_fraction, min_spurious_removed, parsed) -> dict[str, Any]:
    """What every run in ``out_dir/runs`` shares (stored there; ``resume`` refuses another one)."""
    if parsed is not None:  # the CLI's data options: the data set's name or each party file's hash
        data = dataset.fingerprint(parsed)
    else:  # a registered name, or the caller's own Table / VerticalDataset (named by its type)
        name = dataset if isinstance(dataset, str) else type(dataset).__name__
        data = {"dataset": str(name), "parties": parties, "noise": noise, "overlap": overlap}
    runs = {m: _method_params(m, epochs, common_params, (params or {}).get(m)) for m in methods}
    if reference:
        runs[REFERENCE] = _method_params("vfl", epochs, common_params, (params or {}).get("vfl"))
    return {"data": data, "epochs": epochs, "codec": codec, "reference": bool(reference),
            "target_fraction": target_fraction, "min_spurious_removed": min_spurious_removed,
            "methods": runs}


def _safe(name: str) -> str:
    """A method name as a file name."""
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)


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
        "metric_name": metric,
        "metric": res.metrics.get(metric),
        "metrics": dict(res.metrics),
        "total_mb": res.communication["total_bytes"] / 1e6,
        "train_mb": (hist[-1]["bytes"] / 1e6) if hist else 0.0,
        "spurious_removed": res.selection.get("spurious_removed"),
        "n_kept": res.selection.get("n_kept"),
        "target": target,
        "mb_to_target": mb,
        "history": [{k: h.get(k) for k in ("epoch", "phase", "bytes", metric, "spurious_removed")} for h in hist],
        "warnings": list(res.warnings),
        "chance": res.chance,
    }


def cross_point(reach: float, mb: np.ndarray, mean: np.ndarray) -> tuple[list[float], list[float]]:
    """Where a method's cross goes: at the megabytes it reached the target, *on* its drawn curve
    (the mean curve, linear between its points, interpolated there). Before issue 53 it sat at the
    target's height, on the target line, off a curve that jumped past the target between two
    epochs."""
    ok = np.isfinite(mean)
    y = float(np.interp(reach, mb[ok], mean[ok])) if ok.any() else float("nan")
    return [float(reach)], [y]


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
    rows = {r["method"]: r for r in summary.get("table", [])}
    fig, ax = plt.subplots(figsize=(8, 5))
    spans = []
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
        reach = rows.get(name, {}).get("mb_to_target")
        label = name if reach is None else f"{name}: {_mb(reach)} to target"
        if L == 1:  # a filter method: one point (its selection's bytes, its classifier's metric)
            line = ax.errorbar(mb, mean, yerr=std if len(rs) > 1 else None, marker="o", linestyle="none",
                               markersize=7, capsize=3, label=label).lines[0]
        else:
            (line,) = ax.plot(mb, mean, label=label, marker="." if L < 30 else None)
            if len(rs) > 1:
                ax.fill_between(mb, mean - std, mean + std, alpha=0.2, color=line.get_color())
        spans.extend(mb[mb > 0])
        if reach is not None and mb.size > 1:
            ax.plot(*cross_point(reach, mb, mean), marker="x", markersize=10, mew=2, color=line.get_color())
    targets = [r["target"] for name, rs in summary["runs"].items() for r in rs if r.get("target") is not None]
    if targets:
        ax.axhline(np.mean(targets), color="black", linewidth=0.8, linestyle=":",
                   label=f"target: {np.mean(targets):.3f} ({summary.get('target_fraction', 0.9):.0%} of {REFERENCE}'s best)")
    if spans and max(spans) / min(spans) > 20:  # bytes that differ by orders of magnitude
        ax.set_xscale("log")
    ax.set_xlabel("megabytes sent (training traffic)")
    ax.set_ylabel(f"test {metric}")
    ax.set_title(f"{summary['dataset']}: {summary['parties']} parties, noise {summary['noise']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
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


def _mb(mb: float) -> str:
    return f"{mb * 1000:.0f} kB" if mb < 1 else f"{mb:.1f} MB"
