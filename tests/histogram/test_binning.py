"""The shared histogram module: the trees' bins (thresholds kept at the party, minimum rows per
bin) and the encrypted sums per (feature, bin) against the same sums in the clear."""

from __future__ import annotations

import numpy as np
import pytest

from verticalfs.crypto import generate_keypair
from verticalfs.exceptions import ProtocolError
from verticalfs.histogram import BinTable, bin_sizes, bin_sums, encrypt_plaintexts, quantile_bins, quantile_code_blocks


def test_bin_table_codes_are_fates_quantile_bins_and_thresholds_split_them():
    rng = np.random.default_rng(0)
    X = np.c_[rng.normal(size=300), rng.integers(0, 4, 300), np.zeros(300)]
    bt = BinTable(X, 8)
    codes, nums = quantile_bins(X, 8)
    np.testing.assert_array_equal(bt.codes(X), codes)
    np.testing.assert_array_equal(bt.bin_nums, nums)
    assert nums.tolist()[1:] == [4, 1]
    for j in range(2):
        for b in range(int(nums[j]) - 1):  # "bin <= b" is "x <= threshold"
            np.testing.assert_array_equal(codes[:, j] <= b, X[:, j] <= bt.threshold(j, b))
    with pytest.raises(ProtocolError, match="one side empty"):
        bt.threshold(2, 0)


def test_min_rows_per_bin_merges_small_bins():
    rng = np.random.default_rng(1)
    X = np.c_[np.r_[np.zeros(5), rng.normal(size=200)], np.r_[np.ones(3), np.zeros(202)]]
    bt = BinTable(X, 16, min_rows=20)
    codes = bt.codes(X)
    for j in range(2):
        counts = np.bincount(codes[:, j], minlength=int(bt.bin_nums[j]))
        assert counts.min() >= 20 or bt.bin_nums[j] == 1
    assert bt.bin_nums[1] == 1  # 3 rows of ones cannot make a bin of their own
    assert BinTable(X, 16).bin_nums[1] == 2


def test_encrypted_bin_sums_are_the_clear_counts():
    pub, priv = generate_keypair(512, insecure=True)
    rng = np.random.default_rng(2)
    X = rng.normal(size=(70, 3))
    enc = encrypt_plaintexts(priv, np.ones(70, dtype=np.int64))
    nums, blocks = quantile_code_blocks(X, 5, size=16)  # several blocks of rows
    got = bin_sums(enc, blocks, 5, 3)
    codes, _ = quantile_bins(X, 5)
    dec = np.asarray(got.decrypt_mantissas(priv), dtype=np.int64)
    np.testing.assert_array_equal(dec, bin_sizes(codes, 5))
