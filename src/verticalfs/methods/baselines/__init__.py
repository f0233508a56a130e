"""Baselines shared by the papers: standard VFL (Algorithm 2) and the pooled ``central`` reference."""

from verticalfs.methods.baselines.central import Central
from verticalfs.methods.baselines.group_lasso import GroupLasso, GroupLassoParams
from verticalfs.methods.baselines.vfl import VFL, VFLParams

__all__ = ["VFL", "Central", "GroupLasso", "GroupLassoParams", "VFLParams"]
