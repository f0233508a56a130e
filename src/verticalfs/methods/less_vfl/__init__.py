"""LESS-VFL (less-vfl.md): ``less-vfl`` and ``local-lasso``; the party role; the grid search of
section 5 is :mod:`verticalfs.tuning` (command ``verticalfs less-vfl-grid``, :mod:`.cli`)."""

from verticalfs.methods.less_vfl.method import LessVFL, LessVFLParams, LocalLasso, LocalLassoParams
from verticalfs.methods.less_vfl.role import LessVFLRole, SelectFeatures

__all__ = ["LessVFL", "LessVFLParams", "LessVFLRole", "LocalLasso", "LocalLassoParams", "SelectFeatures"]
