"""Never a silent chance-level model: after every run, compare the model with chance.

:func:`chance_check` is called once, by the common result path (:func:`verticalfs.api.run`), for
every method; nothing per method. It takes the run's validation figure (the test figure when the
run has no validation split) and the chance level on the same rows:

- classification: the *majority rate*, the accuracy of always predicting the training split's most
  frequent class;
- regression: R² = 0, the R² of always predicting the training mean.

**"At or near chance"** is ``value <= chance + max(0.02, 0.1 * (1 - chance))``: the model closes at
most a tenth of the way from chance to a perfect score (at least two points). The rule is relative
to the headroom so that it means the same on a balanced binary set (chance .5: flagged at or below
.55), on 26 classes (chance about .04: flagged at or below .136, which caught every silent failure
of issue 40 but not ``original-gate``'s weak but learning .19) and in regression (R² at
or below 0.1); the two-point floor keeps a very unbalanced set (majority .97) from flagging any
model not exactly at 1.0 in accuracy. It is a warning, not a verdict: a hard problem can
legitimately end near chance, and the warning says so.

A run that removed every feature is flagged as well, whatever its score (its model predicts from
the top model's bias alone).

The returned record goes into :attr:`verticalfs.api.RunResult.chance` (``null`` in results.json
when the run is above chance); its ``message`` is among the run's warnings. ``verticalfs run
--strict`` and ``verticalfs compare --strict`` exit with code 3 when any run has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from verticalfs.methods.base import Method

#: a tenth of the headroom from chance to a perfect score ...
HEADROOM_FRACTION = 0.1
#: ... and at least this much
MIN_MARGIN = 0.02
#: fewer training epochs than this are named as a likely cause
FEW_EPOCHS = 10


def near_chance_threshold(chance: float) -> float:
    """The highest score counted as "at or near chance" (see the module docstring)."""
    return chance + max(MIN_MARGIN, HEADROOM_FRACTION * (1.0 - chance))


def majority_rate(y_train: np.ndarray, y_eval: np.ndarray) -> float:
    """Accuracy on ``y_eval`` of always predicting the most frequent class of ``y_train``."""
    y_train = np.asarray(y_train, dtype=np.int64)
    y_eval = np.asarray(y_eval, dtype=np.int64)
    if len(y_eval) == 0:
        return float("nan")
    top = np.bincount(y_train).argmax() if len(y_train) else np.bincount(y_eval).argmax()
    return float(np.mean(y_eval == top))


def run_figure(method_obj: Method, metric: str) -> tuple[str, float | None]:
    """The run's validation ``metric`` (that of the kept checkpoint when the trainer selects one,
    else the last epoch's); the test figure when the run has no validation figure."""
    trainer = method_obj.trainer_
    entry = trainer.best_entry if trainer is not None and trainer.select is not None else None
    key = f"val_{metric}"
    if entry is not None and entry.get(key) is not None:
        return "val", float(entry[key])
    for e in reversed(list(method_obj.history_ or [])):
        if e.get(key) is not None:
            return "val", float(e[key])
    value = (method_obj.metrics_ or {}).get(metric)
    return "test", (None if value is None else float(value))


def top_width(method_obj: Method) -> int | None:
    """The narrowest layer the label holder's top model passes through (its input, the
    concatenated embeddings, and its hidden layers), or ``None`` without a top model."""
    top = method_obj.trainer_.top if method_obj.trainer_ is not None else None
    if top is None:
        return None
    import torch  # a top model exists, so torch is loaded

    linears = [m for m in top.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        return None
    widths = [int(linears[0].in_features)] + [int(m.out_features) for m in linears[:-1]]
    return min(widths)


def likely_causes(method_obj: Method, *, n_classes: int, n_kept: int | None) -> list[str]:
    """What most often leaves a model at chance, as far as this run shows it."""
    causes = []
    if n_kept == 0:
        causes.append("every feature was removed (lower the method's regularisation or selection threshold)")
    epochs = getattr(method_obj.params, "epochs", None)
    if isinstance(epochs, int) and not isinstance(epochs, bool) and epochs < FEW_EPOCHS:
        causes.append(f"too few epochs ({epochs}; try --epochs 50 or more)")
    width = top_width(method_obj)
    if width is not None and n_classes > 2 and width < n_classes:
        causes.append(f"the top model is narrower ({width} units) than the {n_classes} classes (widen top_hidden "
                      "or embedding_dim)")
    if not causes:
        causes.append("the learning rate, epochs or penalty may not suit this data (try more epochs, a smaller lr, "
                      "or compare with `vfl`)")
    return causes


def chance_check(method: str, method_obj: Any, labels: Any, selection: Mapping[str, Any]) -> dict[str, Any] | None:
    """The chance record of a finished run, or ``None`` when it is clearly above chance.

    Parameters
    ----------
    method : str
        The run's method name (named in the message).
    method_obj : Method
        The fitted method (its history, test metrics, parameters and trainer are read).
    labels : LabelData
        The label holder's labels by split (``y``, ``task``, ``n_classes``).
    selection : mapping
        The run's selection block (``n_kept``).
    """
    task = labels.task
    regression = task == "regression"
    metric = "r2" if regression else "accuracy"
    split, value = run_figure(method_obj, metric)
    if regression:
        chance = 0.0
    else:
        y = labels.y
        chance = majority_rate(y.get("train", []), y.get(split, []))
    n_kept = selection.get("n_kept")
    threshold = near_chance_threshold(chance)
    at_chance = value is not None and np.isfinite(chance) and value <= threshold
    if not (at_chance or n_kept == 0):
        return None
    n_classes = 1 if regression else int(labels.n_classes)
    causes = likely_causes(method_obj, n_classes=n_classes, n_kept=n_kept)
    what = "R²" if regression else "accuracy"
    base = "0 (the mean's R²)" if regression else f"{chance:.3f} (majority-class rate)"
    shown = "n/a" if value is None else f"{value:.3f}"
    head = (f"{method} removed every feature, so its model predicts from nothing" if n_kept == 0
            else f"{method} ended at or near chance")
    message = (f"{head}: {split} {what} {shown} against chance {base}; near-chance bound {threshold:.3f}. "
               f"Likely cause: {'; '.join(causes)}")
    return {"method": method, "split": split, "metric": metric, "value": value, "chance": chance,
            "threshold": threshold, "n_kept": n_kept, "causes": causes, "message": message}
