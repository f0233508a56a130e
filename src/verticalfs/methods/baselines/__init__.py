"""Baselines shared by the papers: standard VFL (Algorithm 2), the pooled ``central`` reference,
group lasso and VFLFS (FedSDG-FS's and ICAFS's baseline)."""

from verticalfs.methods.baselines.central import Central
from verticalfs.methods.baselines.group_lasso import GroupLasso, GroupLassoParams
from verticalfs.methods.baselines.vfl import VFL, VFLParams
from verticalfs.methods.baselines.vflfs import VFLFS, VFLFSParams

__all__ = ["VFL", "VFLFS", "Central", "GroupLasso", "GroupLassoParams", "VFLFSParams", "VFLParams"]
