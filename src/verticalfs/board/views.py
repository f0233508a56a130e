"""What each page shows, as plain data (the templates render it; the charts read it as JSON).

Everything here reads only what :class:`~verticalfs.board.catalog.Catalog` found; values from the
files are treated as untrusted text (the templates escape them, the charts draw them on a canvas).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verticalfs.board.catalog import Catalog, _File, _float, entry_id

#: the colours of the parties and methods in the charts (Okabe-Ito, readable by colour-blind readers)
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
           "#999999", "#882255", "#44AA99", "#117733"]


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# ----------------------------------------------------------------------------- commands
def _noise_text(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return str(v)


def run_command_from_compare(config: dict[str, Any], method: str, seed: int) -> str | None:
    """A ``verticalfs run`` command for one run of a comparison, from its stored configuration."""
    data = _dict(config.get("data"))
    if not data.get("dataset") or "files" in data:
        return None
    params = dict(_dict(_dict(config.get("methods")).get(method)))
    name = method
    noise = data.get("noise", 0)
    if method == "vfl-original":  # the reference: vfl on the data without noise
        name, noise = "vfl", 0
    args = ["verticalfs", "run", "--method", name, "--dataset", str(data["dataset"])]
    if data.get("parties") is not None:
        args += ["--parties", str(data["parties"])]
    if noise not in (0, "0", 0.0):
        args += ["--noise", _noise_text(noise)]
    if data.get("overlap") not in (None, 0, "0"):
        args += ["--overlap", _noise_text(data["overlap"])]
    for key, opt, default in (("partition", "--partition", "random"), ("scaling", "--scaling", "minmax"),
                              ("impute", "--impute", "auto"), ("task", "--task", None)):
        if data.get(key) not in (None, default):
            args += [opt, str(data[key])]
    if config.get("codec"):
        args += ["--codec", str(config["codec"])]
    args += ["--seed", str(seed)]
    if "epochs" in params:
        args += ["--epochs", str(params.pop("epochs"))]
    for k, v in params.items():
        args += ["--param", f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}"]
    return shlex.join(args)


def compare_command(config: dict[str, Any], summary: dict[str, Any]) -> str | None:
    data = _dict(config.get("data"))
    if not data.get("dataset") or "files" in data:
        return None
    methods = [m for m in _dict(config.get("methods")) if m != "vfl-original"]
    args = ["verticalfs", "compare", "--dataset", str(data["dataset"])]
    if data.get("parties") is not None:
        args += ["--parties", str(data["parties"])]
    if data.get("noise") not in (None, 0, "0"):
        args += ["--noise", _noise_text(data["noise"])]
    seeds = summary.get("seeds") or []
    if seeds:
        args += ["--seeds", ",".join(map(str, seeds))]
    if config.get("epochs") is not None:
        args += ["--epochs", str(config["epochs"])]
    args += ["--methods", ",".join(methods)]
    for m in methods:
        for k, v in _dict(_dict(config.get("methods")).get(m)).items():
            if k != "epochs":
                args += ["--param", f"{m}.{k}={','.join(map(str, v)) if isinstance(v, list) else v}"]
    return shlex.join(args)


# ----------------------------------------------------------------------------- a run
def _history_series(hist: list[dict[str, Any]], metric: str | None) -> dict[str, Any]:
    """The metric per epoch or round: x labels, one series per metric, MB so far."""
    keys: list[str] = []
    if metric:
        keys.append(metric)
        keys.append(f"val_{metric}")
    out: dict[str, Any] = {"labels": [], "phase": [], "epoch": [], "mb": [], "series": []}
    values: dict[str, list[float | None]] = {k: [] for k in keys}
    for h in hist:
        out["labels"].append(f"{h.get('phase', '')} {h.get('epoch', '')}".strip())
        out["phase"].append(str(h.get("phase", "")))
        out["epoch"].append(h.get("epoch"))
        b = _float(h.get("bytes"))
        out["mb"].append(None if b is None else b / 1e6)
        for k in keys:
            values[k].append(_float(h.get(k)))
    out["series"] = [{"name": k, "values": v} for k, v in values.items() if any(x is not None for x in v)]
    return out


def _selection_from_result(sel: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for party, e in _dict(sel.get("parties")).items():
        e = _dict(e)
        cols = []
        for c in _list(e.get("columns")):
            c = _dict(c)
            cols.append({"column": str(c.get("column")), "kept": bool(c.get("kept")),
                         "levels": [str(x) for x in _list(c.get("levels"))],
                         "levels_kept": [str(x) for x in _list(c.get("levels_kept"))],
                         "score": _float(c.get("score"))})
        if not cols:  # an older result: the kept prepared features only
            cols = _group_kept([str(k) for k in _list(e.get("kept"))])
        out.append({"party": str(party), "n_kept": e.get("n_kept"), "n_features": e.get("n_features"),
                    "columns": cols, "has_scores": any(c["score"] is not None for c in cols)})
    return out


def _group_kept(kept: list[str]) -> list[dict[str, Any]]:
    """Kept prepared features grouped by their source column (a one-hot level is ``column=level``)."""
    groups: dict[str, list[str]] = {}
    for k in kept:
        src, _, level = k.partition("=")
        groups.setdefault(src, [])
        if level:
            groups[src].append(level)
    return [{"column": c, "kept": True, "levels": lv, "levels_kept": lv, "score": None} for c, lv in groups.items()]


def run_view(cat: Catalog, eid: str, sources: dict[str, Any],
             command_line: Callable[[dict[str, Any]], str | None] | None = None) -> dict[str, Any]:
    """Everything a run's page shows (see the module docstring). ``command_line(options)``: the
    ``verticalfs run`` command of a result's stored options (``config.cli``; the command line gives
    it, :func:`verticalfs.cli.run_command_line`)."""
    row = cat.row(eid)
    result: dict[str, Any] = {}
    if "result" in sources:
        result = cat.load(sources["result"])
    events = cat.events_of(eid)
    compare_run: dict[str, Any] = {}
    compare_config: dict[str, Any] = {}
    parent = None
    if "compare" in sources or "partial" in sources:
        if "compare" in sources:
            f: _File = sources["compare"]
            summary = cat.load(f)
            parent = entry_id("compare", f.root, f.rel)
            cfg_dir = f.path.parent / "runs"
        else:
            files = sources["partial"]
            summary = {"runs": {}}
            for pf in files:
                summary["runs"].setdefault(Path(pf.rel).stem.rsplit("__seed", 1)[0], []).append(cat.load(pf))
            parent = entry_id("compare", files[0].root, str(Path(files[0].rel).parent.parent / "results.json"))
            cfg_dir = files[0].path.parent
        for r in _list(_dict(summary.get("runs")).get(sources["method"])):
            if _dict(r).get("seed") == sources["seed"]:
                compare_run = r
        cfg = cfg_dir / "config.json"
        try:
            import json

            real = cfg.resolve()
            if cat.roots[(sources.get("compare") or sources["partial"][0]).root] in real.parents and real.is_file():
                compare_config = _dict(json.loads(real.read_bytes()))
        except (OSError, ValueError, RecursionError):
            compare_config = {}
    start = next((e for e in events if e.type == "run_start"), None)
    end = next((e for e in reversed(events) if e.type == "run_end"), None)
    view: dict[str, Any] = {"id": eid, "row": row, "parent": parent or (row.parent if row else None),
                            "live": bool(events) and end is None}
    view["method"] = (result.get("method") or (start.method if start else None) or
                      (sources.get("method") if compare_run else None))
    view["dataset"] = result.get("dataset") or (start.dataset if start else None) or (row.dataset if row else None)
    view["seed"] = result.get("seed", start.seed if start else (sources.get("seed") if compare_run else None))
    view["version"] = result.get("verticalfs_version") or (start.version if start else None)
    view["mode"] = start.mode if start else ("deployment" if "deployment" in _dict(result.get("info")) else None)
    view["status"] = row.status if row else "ok"
    view["error"] = end.error if end is not None else None
    # metrics
    metrics = _dict(result.get("metrics")) or _dict(compare_run.get("metrics")) or (end.metrics if end else {})
    if not metrics and events:
        for e in events:
            if e.type in ("epoch", "round"):
                metrics = {k: v for k, v in e.metrics.items() if not k.startswith("val_")}
    view["metrics"] = {str(k): _float(v) for k, v in metrics.items()}
    metric = compare_run.get("metric_name") or ("accuracy" if "accuracy" in metrics else
                                                "r2" if "r2" in metrics else next(iter(metrics), None))
    view["metric"] = metric
    # parties and policies
    info = _dict(result.get("info"))
    dep = _dict(info.get("deployment"))
    policies = dict(_dict(dep.get("policies")))
    if start is not None and start.policies:
        policies.update(start.policies)
    rows_kept = _dict(dep.get("rows"))
    names = [str(p) for p in _list(result.get("parties"))] or (list(start.parties) if start else [])
    comm = _dict(result.get("communication"))
    by_party = dict(_dict(comm.get("by_party")))
    label_party = start.label_party if start else None
    holder = "label holder" + (f" (party {label_party})" if label_party else "")
    parties: list[dict[str, Any]] = [{"name": "active", "role": holder,
                "policy": None, "rows": None, "bytes": None}]
    for p in names:
        parties.append({"name": p, "role": "feature party", "policy": policies.get(p),
                        "rows": rows_kept.get(p), "bytes": by_party.get(p)})
    view["parties"] = parties
    view["policy_keys"] = sorted({k for pol in policies.values() if isinstance(pol, dict) for k in pol})
    # phases: seconds and bytes per phase and per party
    phases: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.type == "phase" and e.state == "end":
            ph = phases.setdefault(e.name, {"seconds": 0.0, "bytes": {}})
            ph["seconds"] = (ph["seconds"] or 0.0) + (e.seconds or 0.0)
            for p, b in e.bytes_by_party.items():
                ph["bytes"][p] = ph["bytes"].get(p, 0) + b
    if phases:
        view["phase_source"] = "events"
        party_names = list(dict.fromkeys(p for ph in phases.values() for p in ph["bytes"]))
    else:
        view["phase_source"] = "result" if comm else None
        for name, b in _dict(comm.get("by_phase")).items():
            phases[str(name)] = {"seconds": None, "bytes": {"all parties": b}}
        party_names = ["all parties"] if phases else []
    if not by_party and view["phase_source"] == "events":  # the parties' bytes from their phases'
        for p in party_names:
            by_party[p] = sum(ph["bytes"].get(p, 0) for ph in phases.values())
        for entry in parties:
            entry["bytes"] = by_party.get(str(entry["name"]), entry["bytes"])
    view["phases"] = {"names": list(phases), "parties": party_names,
                      "bytes": {p: [phases[n]["bytes"].get(p, 0) for n in phases] for p in party_names},
                      "seconds": [phases[n]["seconds"] for n in phases],
                      "total": [sum(phases[n]["bytes"].values()) for n in phases]}
    # metric per epoch or round
    hist = _list(result.get("history")) or _list(compare_run.get("history"))
    if events and not hist:
        hist = [{"epoch": e.index, "phase": e.phase, "bytes": e.bytes, **e.metrics}
                for e in events if e.type in ("epoch", "round")]
    view["epochs"] = _history_series([_dict(h) for h in hist], metric)
    view["epoch_word"] = "round" if any(e.type == "round" for e in events) else "epoch"
    stages = {}
    for e in events:
        if e.type == "stage":
            stages[e.name] = {"name": e.name, "done": e.done, "total": e.total}
    view["stages"] = list(stages.values())
    # selection
    sel = _selection_from_result(_dict(result.get("selection")))
    if not sel:
        ev = next((e for e in reversed(events) if e.type == "selection"), None)
        if ev is not None:
            sel = [{"party": p, "n_kept": s.n_kept, "n_features": s.n_features, "columns": _group_kept(list(s.kept)),
                    "has_scores": False} for p, s in ev.parties.items()]
    view["selection"] = sel
    view["n_kept"] = _dict(result.get("selection")).get("n_kept", compare_run.get("n_kept"))
    # warnings and refusals
    warnings = [str(w) for w in _list(result.get("warnings")) or _list(compare_run.get("warnings"))]
    for e in events:
        if e.type == "warning" and e.message not in warnings:
            warnings.append(e.message)
    chance = _dict(result.get("chance") or compare_run.get("chance"))
    if chance.get("message") and str(chance["message"]) not in warnings:
        warnings.append(str(chance["message"]))
    view["warnings"] = warnings
    view["refusals"] = [{"party": e.party, "rule": e.rule, "message": e.message} for e in events
                        if e.type == "refusal"]
    # traffic and time
    total = _float(comm.get("total_bytes"))
    if total is None and compare_run:
        total = (_float(compare_run.get("total_mb")) or 0.0) * 1e6
    if total is None and end is not None:
        total = float(end.bytes_total)
    view["mb"] = None if total is None else total / 1e6
    view["seconds"] = _float(_dict(result.get("timings")).get("total_seconds")) or (end.seconds if end else None)
    view["started"] = events[0].time if events else None
    # the command that reproduces it
    cmd, how = None, None
    if start is not None and start.command:
        cmd, how = shlex.join(start.command), "as it was started (its run_start event)"
    elif _dict(_dict(result.get("config")).get("cli")) and command_line is not None:
        cmd, how = command_line(_dict(result["config"]["cli"])), "from the options stored in its result"
    elif compare_run and compare_config:
        cmd = run_command_from_compare(compare_config, str(sources["method"]), int(sources["seed"]))
        how = "from the comparison's stored configuration (runs/config.json)"
    view["command"], view["command_source"] = cmd, how
    stored = _dict(_dict(compare_config.get("methods")).get(str(sources.get("method"))))
    view["params"] = {str(k): v for k, v in _dict(result.get("config")).items() if k not in ("cli", "data")} or (
        dict(start.params) if start else {}) or stored
    view["files"] = [s.rel for s in (sources.get("result"), sources.get("compare")) if s is not None] + (
        [sources["events"][0].rel] if "events" in sources else [])
    return view


# ----------------------------------------------------------------------------- a comparison
def comparison_view(cat: Catalog, eid: str, sources: dict[str, Any]) -> dict[str, Any]:
    """The chart (accuracy against MB per method, per seed, the target line) and the table."""
    import json

    config: dict[str, Any] = {}
    if "compare" in sources:
        f: _File = sources["compare"]
        summary = cat.load(f)
        cfg = f.path.parent / "runs" / "config.json"
        root = cat.roots[f.root]
        where = f.rel
    elif "partial" in sources:
        files = sources["partial"]
        summary = {"runs": {}, "table": [], "seeds": []}
        for pf in sorted(files, key=lambda x: x.rel):
            summary["runs"].setdefault(Path(pf.rel).stem.rsplit("__seed", 1)[0], []).append(cat.load(pf))
        summary["metric"] = next((r.get("metric_name") for rs in summary["runs"].values() for r in rs), None)
        cfg = files[0].path.parent / "config.json"
        root = cat.roots[files[0].root]
        where = str(Path(files[0].rel).parent)
    else:  # a comparison known from its events only (running, or its results.json elsewhere)
        events = cat.events_of(eid)
        start = next((e for e in events if e.type == "run_start"), None)
        children = [r for r in cat.children(eid) if r.live]
        head = cat.row(eid)
        return {"id": eid, "where": head.where if head is not None else "", "events_only": True,
                "metric": "accuracy", "dataset": start.dataset if start else None,
                "parties": len(start.parties) if start and start.parties else None, "noise": None, "seeds": [],
                "target_fraction": None,
                "chart": {"datasets": [], "target": None, "reach": [], "metric": "accuracy", "xmin": None,
                          "xmax": None, "target_label": None},
                "flat": [], "table": [], "runs": [], "children": children, "warnings": [], "skipped": {},
                "command": shlex.join(start.command) if start and start.command else None}
    try:
        real = cfg.resolve()
        if root in real.parents and real.is_file():
            config = _dict(json.loads(real.read_bytes()))
    except (OSError, ValueError, RecursionError):
        config = {}
    metric = summary.get("metric") if isinstance(summary.get("metric"), str) else "accuracy"
    runs = _dict(summary.get("runs"))
    datasets: list[dict[str, Any]] = []
    flat: list[str] = []
    xs: list[float] = []
    for k, (method, rs) in enumerate(runs.items()):
        colour = PALETTE[k % len(PALETTE)]
        for j, r in enumerate(_list(rs)):
            r = _dict(r)
            seed = r.get("seed", j)
            points = []
            for h in _list(r.get("history")):
                h = _dict(h)
                b, y = _float(h.get("bytes")), _float(h.get(str(metric)))
                if b is None or y is None or b <= 0:
                    continue
                points.append({"x": b / 1e6, "y": y, "epoch": h.get("epoch"), "phase": str(h.get("phase", "")),
                               "seed": seed})
                xs.append(b / 1e6)
            if not points:
                if _float(r.get("metric")) is not None:
                    flat.append(f"{method} (seed {seed}) sent no training bytes: final {metric} "
                                f"{_float(r.get('metric')):.4f}")
                continue
            datasets.append({"label": str(method), "method": str(method), "seed": seed, "colour": colour,
                             "points": points, "first": j == 0,
                             "run": entry_id("compare-run", eid, method, seed)})
    found = [_float(_dict(r).get("target")) for rs in runs.values() for r in _list(rs)]
    targets = [t for t in found if t is not None]
    target = sum(targets) / len(targets) if targets else None
    reach = []
    for row in _list(summary.get("table")):
        row = _dict(row)
        if _float(row.get("mb_to_target")) is not None and target is not None:
            reach.append({"method": str(row.get("method")), "x": _float(row["mb_to_target"]), "y": target})
    table = []
    for row in _list(summary.get("table")):
        row = _dict(row)
        out_row: dict[str, Any] = {k: _float(row.get(k)) for k in ("metric", "metric_std", "total_mb", "train_mb",
                                                                   "spurious_removed", "mb_to_target", "n_kept")}
        out_row.update(method=str(row.get("method")), runs=_int(row.get("runs")), reached=_int(row.get("reached")),
                       at_chance=_int(row.get("at_chance")),
                       skipped=None if row.get("skipped") is None else str(row.get("skipped")))
        table.append(out_row)
    if not table:  # an incomplete comparison: one row per method from its runs so far
        for method, rs in runs.items():
            got = [_float(_dict(r).get("metric")) for r in _list(rs)]
            vals = [v for v in got if v is not None]
            table.append({"method": method, "runs": len(_list(rs)),
                          "metric": sum(vals) / len(vals) if vals else None, "metric_std": None,
                          "total_mb": None, "train_mb": None, "spurious_removed": None, "mb_to_target": None,
                          "reached": None, "at_chance": None, "n_kept": None, "skipped": None})
    run_links = []
    for method, rs in runs.items():
        for j, r in enumerate(_list(rs)):
            seed = _dict(r).get("seed", j)
            run_links.append({"method": str(method), "seed": seed, "id": entry_id("compare-run", eid, method, seed),
                              "metric": _float(_dict(r).get("metric")), "mb": _float(_dict(r).get("total_mb"))})
    return {"id": eid, "where": where, "metric": metric,
            "dataset": None if summary.get("dataset") is None else str(summary.get("dataset")),
            "parties": _int(summary.get("parties")),
            "noise": None if summary.get("noise") is None else str(summary.get("noise")),
            "seeds": [str(x) for x in _list(summary.get("seeds"))],
            "target_fraction": _float(summary.get("target_fraction")),
            "chart": {"datasets": datasets, "target": target, "reach": reach, "metric": metric,
                      "xmin": min(xs) if xs else None, "xmax": max(xs) if xs else None,
                      "target_label": None if target is None else
                      f"target {target:.3f} ({_float(summary.get('target_fraction')) or 0.9:.0%} of "
                      "vfl-original's best)"},
            "flat": flat, "table": table, "runs": run_links,
            "warnings": [str(w) for w in _list(summary.get("warnings"))],
            "skipped": {str(k): str(v) for k, v in _dict(summary.get("skipped")).items()},
            "command": compare_command(config, summary) if config else None,
            "children": [r for r in cat.children(eid) if r.live and r.id not in {x["id"] for x in run_links}],
            "events_only": False}


def palette(i: int) -> str:
    return PALETTE[i % len(PALETTE)]
