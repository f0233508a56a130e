"""Pipelines: a selection method feeding a training method in one run, e.g. ``feast+sparsevfl-16``.

``Pipeline`` runs its stages in order on the same federation. Every stage but the last selects
features: a filter method (FEAST, ``mi``, FATE's ...) runs only its selection protocol (no
evaluation classifier; with ``n_select="auto"``, its default, the candidates' columns of the
training and validation rows are gathered to choose N); any other method runs in full. Then the label
holder tells each party which of its features to keep (:class:`~verticalfs.transport.messages.KeepFeatures`,
phase ``selection``) and the next stage ``Join``\\ s the parties that still hold features: its party
roles are built on the kept columns only. The last stage's model, metrics and support are the
pipeline's; its history follows the earlier stages' entries, and the ledger holds every stage's
messages in their own phases. Every stage tells the pipeline's callbacks about its loops.

Parameters go to a stage with the stage's name as prefix: ``feast.n_select=20``,
``sparsevfl-16.lam=0.02`` (``--param`` on the command line). An unprefixed ``epochs`` goes to the
last stage (the one that trains).

From the registry: ``registry.get("feast+sparsevfl-16")`` builds the pipeline class (any
registered names joined by ``+``); the parties need nothing new, since each stage ``Join``\\ s them
under its own method name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from verticalfs import method_registry as registry
from verticalfs.exceptions import ConfigError
from verticalfs.methods.base import Method
from verticalfs.methods.filter import AUTO, FilterMethod
from verticalfs.training.history import History
from verticalfs.transport.messages import At, KeepFeatures, SupportReport

SEPARATOR = "+"


@dataclass
class PipelineParams:
    """Parameters of a pipeline: one dict per stage.

    Parameters
    ----------
    stages : dict
        ``{stage name: {parameter: value}}`` (from ``<stage>.<parameter>=value``).
    """

    stages: dict = field(default_factory=dict)


class _Stage:
    """An earlier stage's selection as the callbacks see it (:class:`~verticalfs.training.history.Run`)."""

    unit = "epoch"

    def __init__(self) -> None:
        self.position = 0


class Pipeline(Method):
    """Base of the ``a+b`` methods (see the module docstring); built by :func:`pipeline_class`."""

    stage_names: ClassVar[tuple[str, ...]] = ()
    #: the stages' method classes, in order (resolved by the registry when the class is built)
    stage_classes: ClassVar[tuple[type[Method], ...]] = ()
    Params = PipelineParams
    Role = None
    #: the parties of the last stage, set by :meth:`fit` (those the earlier stages left a feature)
    model_parties_: list[str] | None = None

    def __init__(self, *, seed: int = 0, callbacks=(), codec: str | None = None, **params: Any) -> None:
        per: dict[str, dict] = {s: {} for s in self.stage_names}
        for k, v in params.items():
            stage, sep, name = k.partition(".")
            if sep and stage in per:
                per[stage][name] = v
            elif not sep and k == "epochs":
                per[self.stage_names[-1]][k] = v
            else:
                raise ConfigError(f"method {self.name!r}: parameter {k!r} names no stage; use "
                                  f"<stage>.<parameter> with a stage of {list(self.stage_names)}")
        self.stages = [c(seed=seed, callbacks=callbacks, codec=codec if i == len(per) - 1 else None, **per[s])
                       for i, (s, c) in enumerate(zip(self.stage_names, self.stage_classes, strict=True))]
        super().__init__(seed=seed, callbacks=callbacks, codec=None)
        self.params = PipelineParams(stages=per)
        self.codec = self.stages[-1].codec

    @classmethod
    def resolve_codec(cls, codec: str | None) -> str | None:
        return None  # the last stage resolves it

    def fit(self, fed) -> Pipeline:
        history = History()
        info: dict[str, Any] = {"stages": list(self.stage_names)}
        names = list(fed.party_names)
        for i, stage in enumerate(self.stages[:-1]):
            stage.entry_hook, stage.checkpoints = self.entry_hook, self.checkpoints
            run = _Stage()
            for cb in self.callbacks:  # the stage's selection, one step (its own loops run inside it)
                cb.on_train_begin(run, 1, "selection")
            try:
                names = self._stage(i, stage, fed, names, history, info, run)
            finally:
                for cb in self.callbacks:
                    cb.on_train_end(run)
        if not names:
            raise ConfigError(f"{self.name}: the earlier stages kept no feature at any party; nothing to train on")
        last = self.stages[-1]
        last.entry_hook, last.checkpoints = self.entry_hook, self.checkpoints
        sub = fed.restrict(names) if names != list(fed.party_names) else fed
        self.model_parties_ = list(sub.party_names)
        last.fit(sub)
        for e in last.history_:
            history.append(e)
        self.history_ = history
        self.metrics_ = dict(last.metrics_)
        support = fed.collect_support()
        self.support_ = support
        self.trainer_ = last.trainer_
        info[last.name] = dict(last.info_)
        self.info_ = info
        return self

    def _stage(self, i: int, stage: Method, fed, names: list[str], history: History, info: dict[str, Any],
               run: _Stage) -> list[str]:
        """Earlier stage ``i``: its selection, the parties told what to keep (phase ``selection``), its
        history entry; the parties that still hold features."""
        selected = self._select(stage, fed)
        keep = {p: np.asarray(sorted(j for q, j in selected if q == p), dtype=np.int64) for p in names}
        at = At("selection", i + 1)
        for p in names:
            rep = fed.proxy(p).request(KeepFeatures(indices=keep[p]), at, expect=SupportReport)
            if not np.array_equal(np.asarray(rep.kept, dtype=np.int64), keep[p]):
                raise ConfigError(f"party {p!r} did not keep the features it was asked to keep")
        names = [p for p in names if keep[p].size]
        entry = {"epoch": 0, "phase": "selection", "stage": stage.name,
                 "bytes": fed.ledger.total_bytes - fed.ledger.bytes_where(phase="eval"),
                 "bytes_total": fed.ledger.total_bytes}
        if self.entry_hook is not None:
            self.entry_hook(entry)
        history.append(entry)
        run.position = 1
        for cb in self.callbacks:
            cb.on_epoch_end(run, entry)
        info[stage.name] = {"selected": int(sum(k.size for k in keep.values())),
                            "parties_left": [p for p in fed.party_names if p not in names],
                            **{k: v for k, v in stage.info_.items() if isinstance(v, (int, float, str))}}
        return names

    # --------------------------------------------------------- saved models: the last stage's
    def parties_in_model(self, fed) -> list[str]:
        """The parties of the last stage: a party the earlier stages left without a feature never
        joined it, holds no trained part and is not asked at inference."""
        kept = set(fed.party_names if self.model_parties_ is None else self.model_parties_)
        return [p for p in fed.party_names if p in kept]

    def cannot_save(self) -> str | None:
        return self.stages[-1].cannot_save()

    def export_holder(self) -> dict:
        return self.stages[-1].export_holder()

    @classmethod
    def predict_from_holder(cls, holder: dict, fed, split: str) -> np.ndarray:
        return cls.stage_classes[-1].predict_from_holder(holder, fed, split)

    @classmethod
    def joined_as(cls) -> str:
        return cls.stage_classes[-1].joined_as()

    @staticmethod
    def _select(stage: Method, fed) -> list[tuple[str, int]]:
        """The features an earlier stage selects, as ``(party, prepared feature index)``."""
        if isinstance(stage, FilterMethod):
            stage.join_parties(fed)
            if stage.params.n_select == AUTO and not stage.selects_all:
                # N chosen on the validation rows: the candidates' columns are gathered for the search
                # (phase train, on the ledger), which a party keeping its columns refuses
                return stage.select_auto(fed)
            return [(str(p), int(j)) for p, j in stage.select(fed)]
        stage.fit(fed)
        return [(p, int(j)) for p, m in stage.get_support().items() for j in np.flatnonzero(m)]


def pipeline_class(name: str, resolve: Callable[[str], type[Method]]) -> type[Pipeline]:
    """The pipeline class of ``name`` (``"feast+sparsevfl-16"``); ``resolve`` gives the method class
    of each stage's name (the registry's ``get``: every stage must be registered)."""
    stages = tuple(s.strip() for s in name.split(SEPARATOR))
    if len(stages) < 2 or any(not s for s in stages):
        raise ConfigError(f"a pipeline names two or more methods joined by '+', got {name!r}")
    classes = [resolve(s) for s in stages]
    for s, c in zip(stages[:-1], classes[:-1], strict=True):
        if c.needs_pooled_data:
            raise ConfigError(f"{s!r} works on pooled data and cannot select for a federated stage")
    last = classes[-1]
    return type(f"Pipeline[{name}]", (Pipeline,), {
        "name": name, "stage_names": stages, "stage_classes": tuple(classes),
        "summary": f"Pipeline: {' then '.join(stages)}.",
        "paper": "; ".join(c.paper for c in classes if c.paper), "codec_policy": last.codec_policy,
        "needs_pooled_data": False, "test_params": {},
    })


registry.pipelines(pipeline_class)
