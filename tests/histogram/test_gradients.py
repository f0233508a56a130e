"""The trees' packed gradient histograms: a party's returned histogram, decoded and its skipped bins
filled by subtraction, equals the plain sums per (feature, bin); it returns no slot for a skipped
bin and packs the bins across features, in the number of ciphertexts the count says."""

from __future__ import annotations

import numpy as np
import pytest

from verticalfs.crypto import EncryptedArray, generate_keypair
from verticalfs.exceptions import ProtocolError
from verticalfs.histogram.gradients import (
    GradientLayout,
    decode_histogram,
    encrypt_rows,
    fill_skipped,
    node_histogram,
    returned_cells,
)


@pytest.fixture(scope="module")
def keys():
    return generate_keypair(512, insecure=True)


def plain_sums(M, codes, nums):
    return np.concatenate([np.stack([M[codes[:, j] == b].sum(0) for b in range(int(nums[j]))])
                           for j in range(len(nums))])


@pytest.mark.parametrize("m", [1, 2])
def test_a_histogram_without_its_skipped_bins_decodes_to_the_plain_sums(keys, m):
    pub, priv = keys
    rng = np.random.default_rng(m)
    n = 90
    nums = np.asarray([2, 1, 5, 2, 7, 3, 2])  # one-hot columns (2 bins), a constant one (1 bin)
    codes = np.stack([rng.integers(0, b, n) for b in nums], axis=1)
    skip = np.asarray([np.bincount(codes[:, j], minlength=b).argmax() for j, b in enumerate(nums)])
    M = rng.integers(-(1 << 12), 1 << 12, size=(n, 2))
    lay = GradientLayout.for_key(pub, 2, 12, n, m)
    assert lay.bins_per_ct < int((nums - 1).sum())  # several packages, bins of features sharing them
    enc = encrypt_rows(priv, lay, M)
    rows = np.sort(rng.choice(n, 60, replace=False))
    packages, sizes = node_histogram(enc, lay, rows, codes[rows], nums, skip)
    # each feature's skipped bin has no slot; the rest packed bins_per_ct a ciphertext across features
    assert int(sizes.sum()) == int((nums - 1).sum()) and (sizes[:-1] == lay.bins_per_ct).all()
    assert packages.shape == (lay.histogram_ciphertexts(nums), lay.parts)
    assert lay.histogram_ciphertexts(nums) < sum(-(-int(b) // lay.bins_per_ct) for b in nums)  # per-feature packing
    back = EncryptedArray.from_bytes(pub, packages.to_bytes(), packages.shape)
    got = decode_histogram(priv, lay, back, nums, skip)
    starts = np.r_[0, np.cumsum(nums)[:-1]]
    assert not got[starts + skip].any()  # the skipped cells are not in the reply
    filled = fill_skipped(got, nums, skip, M[rows].sum(0))
    np.testing.assert_array_equal(filled, plain_sums(M[rows], codes[rows], nums))
    # without skip every bin is summed and returned
    full, sizes_all = node_histogram(enc, lay, rows, codes[rows], nums)
    assert int(sizes_all.sum()) == int(nums.sum()) and full.shape[0] == lay.histogram_ciphertexts(nums, skipped=False)
    np.testing.assert_array_equal(decode_histogram(priv, lay, full, nums), plain_sums(M[rows], codes[rows], nums))


def test_features_of_one_bin_only_return_nothing(keys):
    pub, priv = keys
    n = 20
    lay = GradientLayout.for_key(pub, 2, 10, n, 1)
    M = np.ones((n, 2), dtype=np.int64)
    enc = encrypt_rows(priv, lay, M)
    nums, skip = np.asarray([1, 1]), np.asarray([0, 0])
    packages, sizes = node_histogram(enc, lay, np.arange(n), np.zeros((n, 2), dtype=np.int64), nums, skip)
    assert packages.shape == (0, 1) and len(sizes) == 0 and lay.histogram_ciphertexts(nums) == 0
    got = decode_histogram(priv, lay, EncryptedArray.from_bytes(pub, packages.to_bytes(), (0, 1)), nums, skip)
    np.testing.assert_array_equal(fill_skipped(got, nums, skip, M.sum(0)), [[n, n], [n, n]])


def test_a_skip_outside_the_bins_or_a_reply_of_the_wrong_size_is_refused(keys):
    pub, priv = keys
    with pytest.raises(ProtocolError, match="skipped bins"):
        returned_cells(np.asarray([2, 3]), np.asarray([0, 3]))
    with pytest.raises(ProtocolError, match="skipped bins"):
        returned_cells(np.asarray([2, 3]), np.asarray([0]))
    assert returned_cells(np.asarray([2, 3]), np.asarray([1, 0])).tolist() == [True, False, False, True, True]
    lay = GradientLayout.for_key(pub, 2, 10, 20, 1)
    one = EncryptedArray.encrypt(priv, np.zeros((1, 1), dtype=np.int64), precision=0)
    with pytest.raises(ProtocolError, match="expected"):  # 1 returned bin would fit, 0 are due
        decode_histogram(priv, lay, one, np.asarray([1]), np.asarray([0]))


def test_a_node_whose_rows_all_sit_in_skipped_bins_returns_zeros(keys):
    pub, priv = keys
    n = 12
    lay = GradientLayout.for_key(pub, 2, 10, n, 2)
    M = np.full((n, 2), 3, dtype=np.int64)
    enc = encrypt_rows(priv, lay, M)
    nums, skip = np.asarray([2, 3]), np.asarray([1, 0])
    codes = np.tile(skip, (n, 1))
    packages, _ = node_histogram(enc, lay, np.arange(n), codes, nums, skip)
    got = fill_skipped(decode_histogram(priv, lay, packages, nums, skip), nums, skip, M.sum(0))
    np.testing.assert_array_equal(got, plain_sums(M, codes, nums))
