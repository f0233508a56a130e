"""Name -> method class registry (``register``, ``get``, ``create``, ``available``) and the
method-provided command-line commands (``command``, ``commands``); public as
:mod:`verticalfs.methods.registry`.

Every subpackage of :mod:`verticalfs.methods` is imported on first use (and its pipelines,
:mod:`verticalfs.methods.pipeline`), so a new method is a new folder that decorates its class with
:func:`register`; nothing in the core changes. The registry imports no method itself: it sits below
the federation and the parties, which find a method's party role through it (:func:`party_roles`).
A folder may also ship ``cli.py`` registering extra commands with :func:`command`; :func:`commands`
loads those files on their own, without importing the methods (so ``verticalfs --help`` stays fast).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from verticalfs.exceptions import ConfigError, ProtocolError

if TYPE_CHECKING:
    from verticalfs.party import Role

#: the folder (and package) of the methods, loaded on first use
METHODS_DIR = Path(__file__).parent / "methods"
METHODS_PACKAGE = "verticalfs.methods"

_METHODS: dict[str, Any] = {}
_COMMANDS: dict[str, Callable[..., Any]] = {}
_LOADED = False
_COMMANDS_LOADED = False
_T = TypeVar("_T", bound=Any)
#: builds the class of a pipeline name (``a+b``): set by :mod:`verticalfs.methods.pipeline` when it loads
_PIPELINE_CLASS: list[Callable[[str, Callable[[str], Any]], Any]] = []


def register(cls: _T) -> _T:
    """Class decorator registering a :class:`~verticalfs.methods.base.Method` by its ``name``."""
    other = _METHODS.get(cls.name)
    if other is not None and other is not cls and other.__qualname__ != cls.__qualname__:
        raise ConfigError(f"method name {cls.name!r} is registered twice ({other.__qualname__}, {cls.__qualname__})")
    _METHODS[cls.name] = cls
    return cls


def _load_all() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for mod in pkgutil.iter_modules([str(METHODS_DIR)]):
        if mod.ispkg or mod.name == "pipeline":
            importlib.import_module(f"{METHODS_PACKAGE}.{mod.name}")


def pipelines(factory: Callable[[str, Callable[[str], Any]], Any]) -> None:
    """Set how a pipeline's class is built from its name (:func:`verticalfs.methods.pipeline.pipeline_class`)."""
    _PIPELINE_CLASS[:] = [factory]


def available() -> list[str]:
    _load_all()
    return sorted(_METHODS)


_REGISTERED = re.compile(r"^@register\b.*?^    name = \"([^\"]+)\"", re.M | re.S)


def names() -> list[str]:
    """The registered methods' names *without importing them* (issue 53: a wrong ``--method`` is
    refused before torch loads): each ``@register`` of a method folder's source and its class's
    ``name = "..."``. ``tests/cli/test_import_time.py`` checks it equals :func:`available`."""
    if _LOADED:
        return available()
    out: set[str] = set()
    for path in sorted(METHODS_DIR.glob("*/*.py")):
        out.update(_REGISTERED.findall(path.read_text(encoding="utf-8")))
    return sorted(out)


def check_name(name: str) -> None:
    """:class:`ConfigError` naming the registered methods if ``name`` (or a stage of a pipeline
    ``a+b``) is none of them; imports no method."""
    known = names()
    unknown = [m for m in str(name).split("+") if m not in known]
    if unknown or not name:
        raise ConfigError(f"unknown method {(unknown or [name])[0]!r}; available: {', '.join(known)} "
                          "(or a pipeline such as feast+sparsevfl-16)")


_PIPELINES: dict[str, Any] = {}


def get(name: str) -> Any:
    """The method class of ``name`` (a :class:`~verticalfs.methods.base.Method` subclass); ``a+b``
    names a pipeline of registered methods (:mod:`verticalfs.methods.pipeline`)."""
    _load_all()
    if name in _METHODS:
        return _METHODS[name]
    if "+" in name and _PIPELINE_CLASS:
        cls = _PIPELINES.get(name)
        if cls is None:
            cls = _PIPELINES[name] = _PIPELINE_CLASS[0](name, get)
        return cls
    raise ConfigError(f"unknown method {name!r}; available: {', '.join(sorted(_METHODS))} "
                      "(or a pipeline such as feast+sparsevfl-16)")


def party_role(method: str) -> type[Role]:
    """The party role class of ``method`` (what a feature party builds at ``Join``)."""
    role: type[Role] | None = get(method).Role
    if role is None:
        raise ProtocolError(f"method {method!r} has no party role: it does not run at feature parties")
    return role


def party_roles() -> Callable[[str], type[Role]]:
    """The ``role_for`` of a :class:`~verticalfs.party.PartyRuntime` that may take part in any
    registered method: :func:`party_role`, after every method was imported (so that every
    method's message kinds decode before its first ``Join``)."""
    _load_all()
    return party_role


def create(name: str, **kwargs: Any) -> Any:
    """Instantiate a registered method (``seed``, ``callbacks``, ``codec`` and its parameters)."""
    return get(name)(**kwargs)


def command(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for ``register(app)``: a function adding the command ``name`` to a Typer app."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        other = _COMMANDS.get(name)
        if other is not None and other.__qualname__ != fn.__qualname__:
            raise ConfigError(f"command {name!r} is registered twice")
        _COMMANDS[name] = fn
        return fn

    return deco


def commands() -> dict[str, Callable[..., Any]]:
    """The method-provided commands: ``{name: register(app)}`` from every ``methods/*/cli.py``."""
    global _COMMANDS_LOADED
    if not _COMMANDS_LOADED:
        _COMMANDS_LOADED = True
        root = METHODS_DIR
        for mod in pkgutil.iter_modules([str(root)]):
            path = root / mod.name / "cli.py"
            if not (mod.ispkg and path.is_file()):
                continue
            spec = importlib.util.spec_from_file_location(f"_verticalfs_cli_{mod.name}", path)
            if spec is None or spec.loader is None:  # (a file path always has a loader)
                continue
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    return dict(_COMMANDS)
