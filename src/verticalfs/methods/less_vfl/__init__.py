"""LESS-VFL (less-vfl.md): ``less-vfl`` and ``local-lasso``; the grid search of section 5."""

from verticalfs.methods.less_vfl import messages  # noqa: F401  (registers the party handlers)
from verticalfs.methods.less_vfl.method import LessVFL, LessVFLParams, LocalLasso, LocalLassoParams
from verticalfs.methods.less_vfl.search import grid_search, select_best

__all__ = ["LessVFL", "LessVFLParams", "LocalLasso", "LocalLassoParams", "grid_search", "select_best"]
