"""The FATE baselines of feast.md section 5: ``fate-iv`` (information value from FATE's hetero
feature binning) and ``fate-lasso`` (L1 hetero logistic regression), both over Paillier
encryption (:mod:`verticalfs.crypto`)."""

from verticalfs.methods.fate.binning import information_values, quantile_bins, woe_iv
from verticalfs.methods.fate.iv import FateIV, FateIVParams
from verticalfs.methods.fate.lasso import FateLasso, FateLassoParams

__all__ = ["FateIV", "FateIVParams", "FateLasso", "FateLassoParams", "information_values", "quantile_bins",
           "woe_iv"]
