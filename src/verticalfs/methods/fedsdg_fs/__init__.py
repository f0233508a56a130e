"""FedSDG-FS (fedsdg-fs.md): Gini-initialised stochastic dual gates, and its original-gate baseline."""

from verticalfs.methods.fedsdg_fs.method import (
    FedSDGFS,
    FedSDGParams,
    OriginalGate,
    OriginalGateParams,
)

__all__ = ["FedSDGFS", "FedSDGParams", "OriginalGate", "OriginalGateParams"]
