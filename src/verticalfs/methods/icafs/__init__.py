"""ICAFS (icafs.md): federated conditional WGAN-GP synthesis (:mod:`.synthesis` on
:mod:`.transform`, :mod:`.networks`), then an ensemble of gated selectors (:mod:`.gates`) learnt on
synthetic rows and applied to real ones (:mod:`.method`, :mod:`.role`); :mod:`.stage1` reuses
stage 1 across in-process runs that would compute the same one."""

from verticalfs.methods.icafs.method import ICAFS, ICAFSParams
from verticalfs.methods.icafs.stage1 import Stage1Cache

__all__ = ["ICAFS", "ICAFSParams", "Stage1Cache"]
