"""SparseVFL (sparsevfl.md) and the data-reduction baselines of its section 5.

Registered names: ``sparsevfl``, ``sparsevfl-16``, ``original``, ``q16``, ``q8``, ``dim`` (DIM-k),
``top-w``, ``pca``, ``autoencoder`` (see :mod:`verticalfs.methods.sparsevfl.method`).
"""

from verticalfs.methods.sparsevfl.khan import KhanRole, ReducedTrainer
from verticalfs.methods.sparsevfl.method import (
    DEFAULT_LAMBDA,
    PAPER_LAMBDAS,
    Q8,
    Q16,
    AutoencoderParams,
    CodedVFLMethod,
    CodedVFLParams,
    Dim,
    DimParams,
    Original,
    PCAParams,
    SparseVFL,
    SparseVFL16,
    SparseVFL16Params,
    SparseVFLParams,
    TopParams,
    TopW,
    TopWParams,
)
from verticalfs.methods.sparsevfl.role import CodedRole, CodedSpec, TopWGradients
from verticalfs.methods.sparsevfl.trainer import CodedVFLTrainer, wall_time_info

__all__ = [
    "DEFAULT_LAMBDA",
    "PAPER_LAMBDAS",
    "Q8",
    "Q16",
    "AutoencoderParams",
    "CodedVFLMethod",
    "CodedVFLParams",
    "CodedRole",
    "CodedSpec",
    "CodedVFLTrainer",
    "Dim",
    "DimParams",
    "KhanRole",
    "Original",
    "PCAParams",
    "ReducedTrainer",
    "SparseVFL",
    "SparseVFL16",
    "SparseVFL16Params",
    "SparseVFLParams",
    "TopParams",
    "TopWGradients",
    "TopW",
    "TopWParams",
    "wall_time_info",
]
