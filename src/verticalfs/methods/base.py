"""The method interface.

A method is a class with a ``name``, a ``Params`` dataclass (its hyper-parameters with the paper's
defaults, each documented in the dataclass docstring), and :meth:`Method.fit`, which runs the
protocol on a :class:`~verticalfs.federation.Federation` and sets the learned state:

- ``history_``: :class:`~verticalfs.training.History`, one entry per communication epoch;
- ``support_``: per party, a bool mask over that party's prepared features (what it kept);
- ``metrics_``: final test metrics; ``info_``: method-specific figures (JSON-serialisable).

Like scikit-learn's selectors, :meth:`get_support` gives the support per party.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from verticalfs.exceptions import ConfigError


class Method(ABC):
    """Base class of every registered method.

    Subclasses set ``name``, ``summary``, ``paper`` and ``Params`` and implement :meth:`fit`.
    ``needs_pooled_data`` is True only for non-federated references (``central``).
    """

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    Params: ClassVar[type]
    needs_pooled_data: ClassVar[bool] = False

    def __init__(self, *, seed: int = 0, callbacks=(), **params: Any) -> None:
        self.seed = seed
        self.callbacks = list(callbacks)
        self.params = make_params(self.Params, params, self.name)
        #: set by the runner: ``hook(entry)`` adds evaluator-only fields (``spurious_removed``)
        self.entry_hook = None
        self.info_: dict[str, Any] = {}

    @abstractmethod
    def fit(self, fed) -> Method:
        """Run the method on the federation; return ``self``."""

    def get_support(self, party: str | None = None, indices: bool = False):
        """Bool mask (or indices) of kept features for ``party``, or a dict over all parties."""
        sup = getattr(self, "support_", None)
        if sup is None:
            raise ConfigError(f"{self.name}: call fit() before get_support()")
        conv = (lambda m: np.flatnonzero(m)) if indices else (lambda m: m)
        if party is None:
            return {k: conv(v) for k, v in sup.items()}
        return conv(sup[party])


def param_fields(cls: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(cls))


def make_params(cls: type, values: dict[str, Any], method: str = "") -> Any:
    """Build a params dataclass, converting strings (from the CLI) to each field's type."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in values if k not in known]
    if unknown:
        raise ConfigError(
            f"method {method!r} has no parameter(s) {unknown}; its parameters are {sorted(known)}"
        )
    kwargs = {}
    for k, v in values.items():
        kwargs[k] = convert_value(v, known[k], method)
    return cls(**kwargs)


def convert_value(v: Any, f: dataclasses.Field, method: str = "") -> Any:
    default = f.default if f.default is not dataclasses.MISSING else (
        f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
    if not isinstance(v, str):
        if isinstance(default, tuple) and isinstance(v, list):
            return tuple(v)
        return v
    s = v.strip()
    try:
        if isinstance(default, bool):
            if s.lower() in ("1", "true", "yes", "on"):
                return True
            if s.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(s)
        if isinstance(default, int) and not isinstance(default, bool):
            return int(s)
        if isinstance(default, float):
            return float(s)
        if isinstance(default, tuple):
            if s in ("", "()", "[]", "none"):
                return ()
            items = [x for x in s.strip("()[]").replace(";", ",").split(",") if x.strip()]
            elem = type(default[0]) if default else (float if any("." in x for x in items) else int)
            return tuple(elem(x.strip()) for x in items)
        if default is None:
            for conv in (int, float):
                try:
                    return conv(s)
                except ValueError:
                    pass
            return None if s.lower() == "none" else s
        return s
    except ValueError:
        raise ConfigError(
            f"method {method!r}: parameter {f.name!r} expects a value like {default!r}, got {v!r}"
        ) from None


def params_doc(cls: type) -> dict[str, str]:
    """Parse the numpydoc 'Parameters' section of a params dataclass docstring into {name: text}."""
    doc = cls.__doc__ or ""
    out: dict[str, str] = {}
    cur = None
    for line in doc.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("---") or stripped == "Parameters":
            continue
        indent = len(line) - len(line.lstrip())
        head = stripped.split(" : ")[0]
        if " : " in stripped and indent <= 4:
            cur = head
            out[cur] = ""
        elif cur is not None and indent > 4:
            out[cur] = (out[cur] + " " + stripped).strip()
    for base in cls.__mro__[1:]:
        if base is object or not dataclasses.is_dataclass(base):
            continue
        for k, v in params_doc(base).items():
            out.setdefault(k, v)
    return out
