"""Registered methods: one folder per paper, plus ``baselines``.

``Method`` is imported on first use, so that the command line (``verticalfs run --help``, the
method-provided commands of :func:`registry.commands`) loads no method and no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verticalfs.methods.registry import available, create, get, register

if TYPE_CHECKING:  # pragma: no cover
    from verticalfs.methods.base import Method

__all__ = ["Method", "available", "create", "get", "register"]


def __getattr__(name: str):
    if name == "Method":
        from verticalfs.methods.base import Method

        globals()["Method"] = Method
        return Method
    raise AttributeError(f"module 'verticalfs.methods' has no attribute {name!r}")
