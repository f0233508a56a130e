"""Quantile binning and encrypted histograms, shared by every protocol that sums a key holder's
encrypted per-row values over another party's bins: FedSDG-FS's Algorithm 1 (``fedsdg-fs``,
``ms-gini``), FATE's hetero feature binning (``fate-iv``) and the SecureBoost trees
(``secureboost``, ``sbt-filter``).

- :mod:`.binning`: a party bins its own columns on its own rows (FATE's quantile rule, equal
  frequency, and :class:`BinTable`, the trees' bins with the thresholds kept at the party);
- :mod:`.packing`: where plaintexts are packed and masked (the label layouts);
- :mod:`.encrypted`: encrypt, sum per (feature, bin), compress, mask, seal (re-randomise);
- :mod:`.counts`: the same histograms in the clear.
"""

from verticalfs.histogram.binning import (
    BinTable,
    code_with,
    equal_frequency_blocks,
    equal_frequency_edges,
    quantile_bins,
    quantile_code_blocks,
    quantile_split_points,
    split_point_table,
)
from verticalfs.histogram.counts import bin_counts, bin_sizes, class_counts
from verticalfs.histogram.encrypted import (
    BinSums,
    bin_sums,
    compress,
    encrypt_plaintexts,
    existing_bins,
    mask_counts,
    package_sizes,
    seal,
)
from verticalfs.histogram.packing import LabelLayout, label_codes, random_masks

__all__ = [
    "BinSums",
    "BinTable",
    "LabelLayout",
    "bin_counts",
    "bin_sizes",
    "bin_sums",
    "class_counts",
    "code_with",
    "compress",
    "encrypt_plaintexts",
    "equal_frequency_blocks",
    "equal_frequency_edges",
    "existing_bins",
    "label_codes",
    "mask_counts",
    "package_sizes",
    "quantile_bins",
    "quantile_code_blocks",
    "quantile_split_points",
    "random_masks",
    "seal",
    "split_point_table",
]
