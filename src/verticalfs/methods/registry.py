"""Name -> method class registry (``register``, ``create``, ``available``).

Every subpackage of :mod:`verticalfs.methods` is imported on first use, so a new method is a new
folder that decorates its class with :func:`register`; nothing in the core changes.
"""

from __future__ import annotations

import importlib
import pkgutil

from verticalfs.exceptions import ConfigError

_METHODS: dict[str, type] = {}
_LOADED = False


def register(cls: type) -> type:
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
    import verticalfs.methods as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.ispkg:
            importlib.import_module(f"{pkg.__name__}.{mod.name}")


def available() -> list[str]:
    _load_all()
    return sorted(_METHODS)


def get(name: str) -> type:
    _load_all()
    try:
        return _METHODS[name]
    except KeyError:
        raise ConfigError(f"unknown method {name!r}; available: {', '.join(sorted(_METHODS))}") from None


def create(name: str, **kwargs):
    """Instantiate a registered method (``seed``, ``callbacks`` and its parameters)."""
    return get(name)(**kwargs)
