"""One entry point from Python: build the data, run a method, get a result.

>>> from verticalfs import build_data, run
>>> data = build_data("breast_cancer", parties=3, noise=0.5, seed=0)
>>> res = run("vfl", data, seed=0, params={"epochs": 5})
>>> res.metrics["accuracy"]  # doctest: +SKIP
"""

from __future__ import annotations

import platform
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from verticalfs.data.build import build_data
from verticalfs.data.vertical import PreparedData
from verticalfs.evaluation.chance import chance_check
from verticalfs.evaluation.metrics import primary_metric, selection_scores
from verticalfs.exceptions import ConfigError, VerticalFSWarning
from verticalfs.federation import Federation
from verticalfs.methods import registry
from verticalfs.model import save_model as _save_model
from verticalfs.run_events import LoopEvents, RunEvents, split_callbacks
from verticalfs.training.checkpoint import Checkpointer, run_id
from verticalfs.training.history import ProgressCallback
from verticalfs.transport.bandwidth import estimate_wall_time
from verticalfs.utils.io import write_json_atomic
from verticalfs.version import __version__

__all__ = ["RunResult", "build_data", "run", "run_observed", "selection_block", "spurious_hook", "with_progress"]


@dataclass
class RunResult:
    """Everything one run produced; :meth:`to_dict` is the documented JSON result."""

    method: str
    dataset: str
    parties: list[str]
    seed: int
    config: dict[str, Any]
    metrics: dict[str, float]
    selection: dict[str, Any]
    communication: dict[str, Any]
    history: list[dict]
    timings: dict[str, float]
    info: dict[str, Any] = field(default_factory=dict)
    estimates: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: the chance record (:func:`verticalfs.evaluation.chance.chance_check`) when the model ended at
    #: or near chance or removed every feature; ``None`` otherwise
    chance: dict[str, Any] | None = None
    method_obj: Any = field(default=None, repr=False)
    federation: Any = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verticalfs_version": __version__,
            "method": self.method,
            "dataset": self.dataset,
            "parties": self.parties,
            "n_parties": len(self.parties),
            "seed": self.seed,
            "config": self.config,
            "metrics": self.metrics,
            "selection": self.selection,
            "communication": self.communication,
            "wall_time_estimates": self.estimates,
            "history": self.history,
            "timings": self.timings,
            "info": self.info,
            "warnings": self.warnings,
            "chance": self.chance,
        }

    def save(self, path: str | Path) -> Path:
        """Write the JSON result atomically."""
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> RunResult:
        """A result written by :meth:`save` (the figures; not the fitted objects)."""
        import json

        try:
            d = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"result file {str(path)!r} does not exist") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{str(path)!r} is not a result JSON: {exc}") from None
        missing = [k for k in ("method", "dataset", "parties", "seed", "config", "metrics", "selection",
                               "communication", "history", "timings") if k not in d]
        if missing:
            raise ConfigError(f"{str(path)!r} is not a verticalfs result (missing {missing})")
        return cls(method=d["method"], dataset=d["dataset"], parties=d["parties"], seed=d["seed"],
                   config=d["config"], metrics=d["metrics"], selection=d["selection"],
                   communication=d["communication"], history=d["history"], timings=d["timings"],
                   info=d.get("info", {}), estimates=d.get("wall_time_estimates", []),
                   warnings=d.get("warnings", []), chance=d.get("chance"))

    @property
    def total_bytes(self) -> int:
        return int(self.communication.get("total_bytes", 0))


def spurious_hook(fed: Federation, ground_truth: Mapping[str, np.ndarray]):
    """An evaluator-side hook adding ``spurious_removed`` to each history entry."""
    gt = {k: np.asarray(v, dtype=bool) for k, v in ground_truth.items()}
    if not any(m.any() for m in gt.values()):
        return None

    def hook(entry: dict) -> None:
        sup = fed.observe_support()
        kept = np.concatenate([sup[p] for p in fed.party_names])
        spur = np.concatenate([gt[p] for p in fed.party_names])
        entry["spurious_removed"] = selection_scores(kept, spur)["spurious_removed"]

    return hook


def run(
    method: str,
    data: PreparedData,
    *,
    seed: int = 0,
    params: Mapping[str, Any] | None = None,
    codec: str | None = None,
    callbacks: Sequence[Any] = (),
    progress: bool | None = None,
    bandwidths_mbps: Sequence[float] = (10.0, 100.0),
    data_config: Mapping[str, Any] | None = None,
    federation: Federation | None = None,
    threads: int | None = 1,
    save_model: str | Path | None = None,
    checkpoint_dir: str | Path | None = None,
    resume: bool | Literal["if-any"] = False,
    parent: str | None = None,
) -> RunResult:
    """Run a registered method on prepared data and collect the result.

    Parameters
    ----------
    method : str
        A registered name (``verticalfs methods`` lists them).
    data : PreparedData
        From :func:`build_data`.
    seed : int
        Seeds model initialisation, batch order and the method's own randomness.
    params : mapping
        The method's hyper-parameters (strings are converted, as from ``--param``).
    codec : str, optional
        Payload codec of the embeddings and gradients (``float32``, ``float16``, ``int8``, ...) for
        methods that take one (default float32); an error for methods that fix their own codecs.
    callbacks : sequence
        What follows the run: :class:`~verticalfs.training.history.Callback` objects (the loops
        call their hooks; their ``on_event`` gets every event of the run, e.g.
        :class:`~verticalfs.training.history.ProgressCallback`, the progress lines and bars) and
        callables taking an event (e.g. :class:`~verticalfs.events.EventLog`, one JSON line per
        event). The events (:mod:`verticalfs.events`): the start, each loop's phase, every epoch
        or round with its metrics and bytes so far, the selection, a party's refusal, the warnings
        and the end (``ok``, ``error``, ``interrupted``).
    progress : bool, optional
        Deprecated: ``callbacks=[ProgressCallback(method)]`` shows the progress.
    bandwidths_mbps : sequence of float
        Bandwidths at which to report estimated wall time (sparsevfl.md section 4.4).
    federation : Federation, optional
        Run over this federation (e.g. one built with ``trace=True``, or a networked one) instead of
        a new in-process one.
    threads : int, optional
        Torch CPU threads during the run, restored afterwards (default 1, as the CLI: the parties'
        models are small, and one thread is several times faster on a few cores); ``None`` leaves
        torch's setting alone.
    save_model : path, optional
        Save the trained model in this folder (:mod:`verticalfs.model`: each party's part in its own
        file, the label holder's, a manifest); ``verticalfs predict`` uses it on new rows.
    checkpoint_dir : path, optional
        Checkpoint every epoch of training here (the label holder's folder; in-process parties use
        ``<checkpoint_dir>/parties/<party>``, networked parties their own folder): see
        :mod:`verticalfs.training.checkpoint`. Removed when the run completes.
    resume : bool or "if-any"
        Continue the interrupted run whose checkpoints are in ``checkpoint_dir`` (same options);
        ``"if-any"``: if there is one, else start afresh.
    parent : str, optional
        The id of the comparison this run belongs to (its events' ``parent``).
    """
    callbacks = with_progress(callbacks, progress, method, data.labels.task)
    hooks, sinks = split_callbacks(callbacks)
    events = RunEvents(sinks, parent=parent) if sinks else None
    return run_observed(method, data, hooks=hooks, events=events, seed=seed, params=params, codec=codec,
                        bandwidths_mbps=bandwidths_mbps, data_config=data_config, federation=federation,
                        threads=threads, save_model=save_model, checkpoint_dir=checkpoint_dir, resume=resume)


def with_progress(callbacks: Sequence[Any], progress: bool | None, method: str, task: str) -> list[Any]:
    """``callbacks``, with the progress lines and bars added for the deprecated ``progress=True``."""
    out = list(callbacks)
    if progress is not None:
        warnings.warn("progress= is deprecated: pass callbacks=[verticalfs.training.ProgressCallback(method)]",
                      DeprecationWarning, stacklevel=3)
        if progress:
            out.append(ProgressCallback(method, primary_metric(task)))
    return out


def run_observed(method: str, data: PreparedData, *, hooks: Sequence[Any], events: RunEvents | None,
                 threads: int | None = 1, **kw: Any) -> RunResult:
    """:func:`run` for a caller that owns the run's events (``events``, already started or not;
    ``hooks``: the callbacks the loops call): a deployment's run, which tells its set-up first."""
    if threads is None:
        return _run(method, data, hooks=hooks, events=events, **kw)
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        return _run(method, data, hooks=hooks, events=events, **kw)
    finally:
        torch.set_num_threads(before)


def _run(method, data, *, hooks, events, **kw) -> RunResult:
    if events is None:
        return _fit(method, data, hooks=list(hooks), events=None, **kw)
    try:
        return _fit(method, data, hooks=list(hooks), events=events, **kw)
    except BaseException as exc:
        if not events.started:
            events.start(method=method, dataset=data.name, parties=list(data.party_names), seed=kw.get("seed"),
                         params=dict(kw.get("params") or {}))
        events.fail(exc)
        raise


def _fit(method, data, *, hooks, events, seed, params, codec, bandwidths_mbps, data_config, federation,
         save_model=None, checkpoint_dir=None, resume=False) -> RunResult:
    cls = registry.get(method)
    callbacks = list(hooks) + ([LoopEvents(events)] if events is not None else [])
    m = cls(seed=seed, callbacks=callbacks, codec=codec, **dict(params or {}))
    why = m.cannot_save() if save_model is not None else None
    if why:  # before the training, not after it
        raise ConfigError(f"{method}: {why}")
    fed = Federation.in_process(data) if federation is None else federation
    if events is not None:
        events.ledger = fed.ledger
        events.start(method=method, dataset=data.name, parties=list(data.party_names), seed=seed,
                     params=dict(vars(m.params)), mode="in-process" if fed.is_local else "deployment")
        for w in data.warnings or []:
            events.warning(w)
    m.entry_hook = spurious_hook(fed, data.ground_truth) if fed.is_local else None
    ck = None
    if resume and checkpoint_dir is None:
        raise ConfigError("resume needs the checkpoint folder of the interrupted run (checkpoint_dir, --checkpoints)")
    if checkpoint_dir is not None:
        rid = run_id(method, dict(vars(m.params)), seed, codec, fed.party_names,
                     {s: len(v) for s, v in fed.labels.y.items()})
        ck = Checkpointer(checkpoint_dir, rid, resume=resume, session=fed.channel.session)
        m.checkpoints = ck
        if fed.is_local:
            for name in fed.party_names:
                fed.local_runtime(name).checkpoint_dir = Path(checkpoint_dir) / "parties" / name
    node = fed.node
    node.reset_clock()
    t0 = time.perf_counter()
    try:
        m.fit(fed)
    except BaseException:
        if ck is not None:
            ck.release()  # its checkpoints may be resumed (by another process, or by run_deployment's rejoin)
        raise
    if not fed.is_local:
        fed.collect_peer_traffic()  # party-to-party messages, recorded at the parties
    elapsed = time.perf_counter() - t0
    if ck is not None:
        ck.clear(fed, fed.party_names)  # at the parties too (their own folders)
    node.flush()  # the label holder's work after its last message
    if save_model is not None:
        _save_model(m, fed, save_model, params=vars(m.params))
    selection = selection_block(data, m.get_support(), data.ground_truth, m.feature_scores_)
    comm = fed.ledger.summary()
    wire = fed.channel.wire_bytes()
    if wire is not None:  # networked: the label holder's links as TCP carried them (framing, TLS)
        comm["wire_bytes"] = int(wire)
    n_epochs = max(1, len(m.history_))
    cfg = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(m.params).items()}
    cfg["codec"] = m.codec if m.codec is not None else m.codec_description()
    if data_config:
        cfg["data"] = dict(data_config)
    estimates = [estimate_wall_time(fed.ledger, b).to_dict() for b in bandwidths_mbps] if len(fed.ledger) else []
    chance = chance_check(method, m, fed.labels, selection)
    later = selection_warnings(method, selection) + [str(w) for w in m.info_.get("warnings", [])] + (
        [chance["message"]] if chance else [])
    notes = list(data.warnings or []) + later
    for w in notes:
        warnings.warn(w, VerticalFSWarning, stacklevel=2)
    if events is not None:
        events.selection(selection, m.feature_scores_)
        for w in later:
            events.warning(w)
        events.end("ok", metrics=dict(m.metrics_))
    return RunResult(
        method=method,
        dataset=data.name,
        parties=list(data.party_names),
        seed=seed,
        config=cfg,
        metrics=dict(m.metrics_),
        selection=selection,
        communication=comm,
        history=list(m.history_),
        timings={"total_seconds": elapsed, "seconds_per_epoch": elapsed / n_epochs,
                 "python": platform.python_version()},
        info={**dict(m.info_), **({"resumed_from": ck.resumed_from} if ck is not None and ck.resumed_from else {})},
        estimates=estimates,
        warnings=notes,
        chance=chance,
        method_obj=m,
        federation=fed,
    )


def selection_warnings(method: str, selection: Mapping[str, Any]) -> list[str]:
    """Say loudly when a run removed every feature of a party (every feature of every party: the
    chance check says so, :mod:`verticalfs.evaluation.chance`)."""
    out: list[str] = []
    if selection.get("n_kept") == 0:
        return out
    for p, e in selection.get("parties", {}).items():
        if e.get("n_features") and e.get("n_kept") == 0:
            out.append(f"{method}: party {p!r} kept none of its {e['n_features']} features and takes no further "
                       "part in the model")
    return out


def columns_of(names: list[str], sources: list[str], mask: np.ndarray, scores: np.ndarray | None) -> list[dict]:
    """The selection by the user's columns: one-hot levels grouped back to their source column (kept
    if any of its levels is; its score the largest of its levels'), in the file's column order."""
    groups: dict[str, list[int]] = {}
    for j, src in enumerate(sources):
        groups.setdefault(src, []).append(j)
    out = []
    for src, idx in groups.items():
        e: dict[str, Any] = {"column": src, "kept": bool(mask[idx].any())}
        if len(idx) > 1 or names[idx[0]] != src:  # a categorical column: its levels
            e["levels"] = [names[j].split("=", 1)[1] if "=" in names[j] else names[j] for j in idx]
            e["levels_kept"] = [lv for lv, j in zip(e["levels"], idx, strict=True) if mask[j]]
        if scores is not None:
            vals = np.asarray(scores, dtype=np.float64)[idx]
            vals = vals[np.isfinite(vals)]
            e["score"] = float(vals.max()) if vals.size else None
        out.append(e)
    return out


def selection_block(data: PreparedData, support: Mapping[str, np.ndarray],
                    ground_truth: Mapping[str, np.ndarray],
                    scores: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
    """The ``selection`` block of a result: per party the kept prepared features and the kept and
    removed columns by the user's names (with the method's score where it has one)."""
    names = {p.name: p.feature_names for p in data.parties}
    out: dict[str, Any] = {"parties": {}}
    has_gt = any(np.asarray(v).any() for v in ground_truth.values())
    for party in data.parties:
        p = party.name
        mask = np.asarray(support[p], dtype=bool)
        cols = columns_of(names[p], list(party.sources), mask, (scores or {}).get(p))
        entry = {
            "kept": [n for n, k in zip(names[p], mask, strict=True) if k],
            "n_kept": int(mask.sum()),
            "n_features": int(mask.size),
            "columns": cols,
            "kept_columns": [c["column"] for c in cols if c["kept"]],
            "removed_columns": [c["column"] for c in cols if not c["kept"]],
        }
        if has_gt:
            entry.update({k: v for k, v in selection_scores(mask, ground_truth[p]).items()
                          if k in ("spurious_removed", "tpr", "n_spurious")})
        out["parties"][p] = entry
    kept = np.concatenate([np.asarray(support[p], dtype=bool) for p in data.party_names])
    out["n_kept"] = int(kept.sum())
    out["n_features"] = int(kept.size)
    if has_gt:
        spur = np.concatenate([np.asarray(ground_truth[p], dtype=bool) for p in data.party_names])
        out.update(selection_scores(kept, spur))
    return out
