"""verticalfs: vertical federated learning with feature selection, on one metered transport.

Several parties hold different columns about the same samples; the active party holds the labels.
The package offers the papers' methods (LESS-VFL, SparseVFL, FEAST, FedSDG-FS, ICAFS) and their
baselines over one transport whose ledger counts every byte that crosses.
"""

__version__ = "0.1.0"

from verticalfs.api import RunResult, build_data, run  # noqa: E402
from verticalfs.federation import Federation  # noqa: E402
from verticalfs.methods import available as available_methods  # noqa: E402

__all__ = ["Federation", "RunResult", "__version__", "available_methods", "build_data", "run"]
