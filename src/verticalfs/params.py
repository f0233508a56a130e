"""A method's parameters: a dataclass whose fields are typed, with declared constraints, checked in one place.

A method's ``Params`` is a dataclass: each field's *type* (its annotation: ``int``, ``float``,
``bool``, ``str``, ``tuple[int, ...]``, ``tuple[float, float]``, ``X | None``) says how a value is
read (from the command line's text too), and the class's ``constraints`` (as scikit-learn's
``_parameter_constraints``) say which values it may take::

    @dataclass
    class MyParams:
        epochs: int = 50
        lr: float = 0.01
        solver: str = "adam"
        constraints: ClassVar[Constraints] = {
            "epochs": [Interval(int, 1, None)],
            "lr": [Interval(float, 0, None, closed="neither")],
            "solver": [Options("adam", "sgd")],
        }

A subclass's ``constraints`` add to (and replace, by field) its bases'. ``None`` in a field's list
allows ``None``. :func:`make_params` builds a params object from given values: every value is read
as its field's type and every field (given or default) is checked against its constraints; a
wrong value is a :class:`~verticalfs.exceptions.ConfigError` naming the method, the parameter, what
it must be and the value given. A float is always finite.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Union

import numpy as np

from verticalfs.exceptions import ConfigError

__all__ = ["Checked", "Constraints", "Interval", "Options", "Predicate", "check_params", "make_params",
           "param_constraints", "param_types"]


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` (``int``: whole numbers, ``float``: any finite number) between ``low``
    and ``high`` (``None``: unbounded); ``closed`` says which ends are included."""

    kind: type
    low: float | None
    high: float | None
    closed: Literal["left", "right", "both", "neither"] = "both"

    def allows(self, v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if self.kind is int and not isinstance(v, int):
            return False
        if isinstance(v, float) and not math.isfinite(v):
            return False
        lo_in = self.closed in ("left", "both")
        hi_in = self.closed in ("right", "both")
        if self.low is not None and (v < self.low or (v == self.low and not lo_in)):
            return False
        return not (self.high is not None and (v > self.high or (v == self.high and not hi_in)))

    def describe(self) -> str:
        what = "a whole number" if self.kind is int else "a finite number"
        lo = None if self.low is None else (">=" if self.closed in ("left", "both") else ">") + f" {_num(self.low)}"
        hi = None if self.high is None else ("<=" if self.closed in ("right", "both") else "<") + f" {_num(self.high)}"
        if lo and hi:
            return f"{what} {lo} and {hi}"
        return f"{what} {lo or hi}" if (lo or hi) else what


@dataclass(frozen=True, init=False)
class Options:
    """One of the given values (text options, usually)."""

    values: tuple[Any, ...]

    def __init__(self, *values: Any) -> None:
        object.__setattr__(self, "values", tuple(values))

    def allows(self, v: Any) -> bool:
        return any(v == x and type(v) is type(x) for x in self.values)

    def describe(self) -> str:
        return "one of " + ", ".join(repr(x) for x in self.values)


@dataclass(frozen=True)
class Predicate:
    """A value ``test(value)`` accepts; ``text`` says what it must be (e.g. every item >= 1)."""

    test: Callable[[Any], bool]
    text: str

    def allows(self, v: Any) -> bool:
        try:
            return bool(self.test(v))
        except (TypeError, ValueError):
            return False

    def describe(self) -> str:
        return self.text


#: a class's constraints: field -> the constraints one of which a value must meet (``None``: it may be None)
Constraints = Mapping[str, list[Any]]


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


class Checked:
    """Base of a params dataclass whose fields are checked when it is built (:func:`check_params`):
    a subclass declares ``constraints`` and, if it needs one, a ``__post_init__`` that calls this one."""

    constraints: ClassVar[Constraints] = {}

    def __post_init__(self) -> None:
        check_params(self)


# ------------------------------------------------------------------------------------- per class
def param_types(cls: type) -> dict[str, Any]:
    """Field -> its type (the annotation, resolved) for the params dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def param_constraints(cls: type) -> dict[str, list[Any]]:
    """Field -> its constraints, merged over ``cls``'s bases (a subclass's win, by field)."""
    out: dict[str, list[Any]] = {}
    for base in reversed(cls.__mro__):
        own = vars(base).get("constraints")
        if isinstance(own, Mapping):
            out.update({k: list(v) for k, v in own.items()})
    return out


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


# ------------------------------------------------------------------------------------- reading values
class _Bad(Exception):
    """A value that is not of its field's type: what the type is, in words."""


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _words(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is bool:
        return "true or false"
    if tp is int:
        return "a whole number"
    if tp is float:
        return "a finite number"
    if tp is str:
        return "text"
    if origin in (Union, types.UnionType):
        return " or ".join("None" if a is type(None) else _words(a) for a in typing.get_args(tp))
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_words(args[0])}s (e.g. 64,32)"
        return f"{len(args)} values ({', '.join(_words(a) for a in args)})"
    if origin is dict or tp is dict:
        return "a table"
    return tp.__name__ if isinstance(tp, type) else str(tp)


def _read(v: Any, tp: Any) -> Any:
    """``v`` as a value of type ``tp`` (text from the command line read as such); :class:`_Bad` if it is not one."""
    if tp is Any:
        return v
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if v is None or (isinstance(v, str) and v.strip().lower() == "none" and type(None) in args):
            if type(None) in args:
                return None
            raise _Bad
        for a in args:
            if a is type(None):
                continue
            try:
                return _read(v, a)
            except _Bad:
                pass
        raise _Bad
    if tp is bool:
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, str) and v.strip().lower() in _TRUE + _FALSE:
            return v.strip().lower() in _TRUE
        raise _Bad
    if tp is int:
        if isinstance(v, (bool, np.bool_)):
            raise _Bad
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer():
            return int(v)
        if isinstance(v, str):
            try:
                return int(v.strip())
            except ValueError:
                raise _Bad from None
        raise _Bad
    if tp is float:
        if isinstance(v, (bool, np.bool_)):
            raise _Bad
        if isinstance(v, (int, float, np.integer, np.floating)):
            out = float(v)
        elif isinstance(v, str):
            try:
                out = float(v.strip())
            except ValueError:
                raise _Bad from None
        else:
            raise _Bad
        if not math.isfinite(out):
            raise _Bad
        return out
    if tp is str:
        if isinstance(v, str):
            return v.strip()
        raise _Bad
    if origin is tuple:
        args = typing.get_args(tp)
        if isinstance(v, str):
            s = v.strip()
            items: list[Any] = [] if s.lower() in ("", "()", "[]", "none") else [
                x.strip() for x in s.strip("()[]").replace(";", ",").split(",") if x.strip()]
        elif isinstance(v, (list, tuple, np.ndarray)):
            items = list(v)
        else:
            raise _Bad
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_read(x, args[0]) for x in items)
        if len(items) != len(args):
            raise _Bad
        return tuple(_read(x, a) for x, a in zip(items, args, strict=True))
    if origin is dict or tp is dict:
        if isinstance(v, Mapping):
            return dict(v)
        raise _Bad
    return v


# ------------------------------------------------------------------------------------- the one place
def check_params(params: Any, method: str = "") -> None:
    """Every field of ``params`` against its type and its declared constraints (a
    :class:`~verticalfs.exceptions.ConfigError` naming the method, the parameter, what it must be
    and the value)."""
    cls = type(params)
    types_ = param_types(cls)
    rules = param_constraints(cls)
    who = f"{method}: " if method else ""
    for f in dataclasses.fields(cls):
        v = vars(params)[f.name]
        allowed = rules.get(f.name) or []
        try:
            _read(v, types_[f.name])
        except _Bad:
            raise ConfigError(f"{who}{f.name} must be {_describe(allowed, types_[f.name])}, got {v!r}") from None
        if not allowed or (v is None and None in allowed):
            continue
        checks = [c for c in allowed if c is not None]
        if not any(c.allows(v) if not isinstance(v, tuple) or isinstance(c, (Options, Predicate)) else
                   all(c.allows(x) for x in v) for c in checks):
            raise ConfigError(f"{who}{f.name} must be {_describe(allowed, types_[f.name])}, got {v!r}")


def _describe(allowed: list[Any], tp: Any) -> str:
    """What a field must be, in words: its constraints' descriptions, else its type's."""
    checks = [c for c in allowed if c is not None]
    if not checks:
        return _words(tp)
    what = " or ".join(c.describe() for c in checks)
    if typing.get_origin(tp) is tuple and not any(isinstance(c, (Options, Predicate)) for c in checks):
        what = "a list of " + what.replace("a whole number", "whole numbers").replace(
            "a finite number", "finite numbers")
    return what + (" (or None)" if None in allowed else "")


def make_params(cls: type, values: Mapping[str, Any], method: str = "") -> Any:
    """The params dataclass ``cls`` built from ``values`` (text from the command line is read as
    each field's type), checked by :func:`check_params`."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in values if k not in known]
    if unknown:
        raise ConfigError(f"method {method!r} has no parameter(s) {unknown}; its parameters are {sorted(known)}")
    types_ = param_types(cls)
    rules = param_constraints(cls)
    kwargs = {}
    for k, v in values.items():
        try:
            kwargs[k] = _read(v, types_[k])
        except _Bad:
            like = _default(known[k])
            raise ConfigError(f"method {method!r}: parameter {k!r} expects {_describe(rules.get(k, []), types_[k])} "
                              f"(like {like!r}), got {v!r}") from None
    try:
        params = cls(**kwargs)  # a Checked dataclass checks itself
        check_params(params, method)
    except ConfigError as exc:
        text = str(exc)
        raise ConfigError(text if text.startswith(f"{method}:") else f"{method}: {text}") from None
    return params
