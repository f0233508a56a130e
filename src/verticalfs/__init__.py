"""verticalfs: vertical federated learning with feature selection, on one metered transport.

Several parties hold different columns about the same samples; the label holder holds the labels.
The package offers the papers' methods (LESS-VFL, SparseVFL, FEAST, FedSDG-FS, ICAFS) and their
baselines over one transport whose ledger counts every byte that crosses.

The public names below are imported on first use, so ``import verticalfs`` (and the command
line's ``--help``) stays fast: torch, pandas and scikit-learn load only when needed.

What is public: the names in ``__all__`` here, and in any module of the package whose dotted path
has no part with a leading underscore, the names without one (a module's ``__all__`` lists its main
ones). A name or attribute with a leading underscore is the library's own and may change without
notice; so does anything reached by assigning to a library module's or class's attributes (use a
documented option or hook instead). ``benchmarks/`` keeps to this (``tests/test_benchmarks_public_api.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from verticalfs.version import __version__

_LAZY = {
    "RunResult": "verticalfs.api",
    "build_data": "verticalfs.api",
    "run": "verticalfs.api",
    "Federation": "verticalfs.federation",
    "available_methods": "verticalfs.methods.registry",
}

__all__ = ["Federation", "RunResult", "__version__", "available_methods", "build_data", "run"]

if TYPE_CHECKING:  # pragma: no cover
    from verticalfs.api import RunResult, build_data, run
    from verticalfs.federation import Federation
    from verticalfs.methods.registry import available as available_methods


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'verticalfs' has no attribute {name!r}")
    attr = "available" if name == "available_methods" else name
    value = getattr(importlib.import_module(mod), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
