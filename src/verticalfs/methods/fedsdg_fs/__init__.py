"""FedSDG-FS (fedsdg-fs.md): Gini-initialised stochastic dual gates, and its baselines
``original-gate``, ``all-features``, ``ms-gini`` and ``sffs``."""

from verticalfs.methods.fedsdg_fs.baselines import SFFS, AllFeatures, MSGini
from verticalfs.methods.fedsdg_fs.method import (
    FedSDGFS,
    FedSDGParams,
    OriginalGate,
    OriginalGateParams,
)

__all__ = ["SFFS", "AllFeatures", "FedSDGFS", "FedSDGParams", "MSGini", "OriginalGate", "OriginalGateParams"]
