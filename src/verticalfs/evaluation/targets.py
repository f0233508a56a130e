"""Reading figures off a run's history: "bytes needed to reach a target"."""

from __future__ import annotations

from collections.abc import Sequence


def bytes_to_reach(
    history: Sequence[dict],
    target: float,
    *,
    metric: str = "accuracy",
    min_spurious_removed: float | None = None,
    bytes_key: str = "bytes",
    higher_is_better: bool = True,
) -> float | None:
    """Cumulative bytes at the first history entry meeting the target, or ``None`` if never met.

    Parameters
    ----------
    history : list of dict
        One entry per epoch with ``bytes_key``, ``metric`` and (optionally) ``spurious_removed``.
    target : float
        The value ``metric`` must reach (``>=``, or ``<=`` if ``higher_is_better`` is False).
    min_spurious_removed : float, optional
        Also require ``spurious_removed >= min_spurious_removed`` in the same entry (less-vfl.md
        Table 2: 80 %).
    """
    for h in history:
        v = h.get(metric)
        if v is None:
            continue
        ok = v >= target if higher_is_better else v <= target
        if ok and min_spurious_removed is not None:
            sr = h.get("spurious_removed")
            ok = sr is not None and sr >= min_spurious_removed
        if ok:
            return float(h[bytes_key])
    return None


def target_figure(history: Sequence[dict], target_accuracy: float | None, task: str,
                  min_spurious: float = 0.8) -> dict:
    """Bytes to reach 0.9 x ``target_accuracy`` with >= 80 % spurious removed (less-vfl.md Table 2).

    ``spurious_removed`` is in the history only when the ground truth is known; without it the
    spurious condition is dropped and the result says so. Empty without a target.
    """
    if target_accuracy is None:
        return {}
    from verticalfs.evaluation.metrics import primary_metric

    metric = primary_metric(task)
    has_spur = any("spurious_removed" in h for h in history)
    b = bytes_to_reach(history, 0.9 * float(target_accuracy), metric=metric,
                       min_spurious_removed=min_spurious if has_spur else None)
    return {"bytes_to_target": b, "target": 0.9 * float(target_accuracy), "target_metric": metric,
            "target_requires_spurious_removed": min_spurious if has_spur else None}
