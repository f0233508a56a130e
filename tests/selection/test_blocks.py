"""Filter methods over row blocks (issue 39 item 3): the same statistics as over the whole matrix,
to the bit, and no whole-table copy at a memory-mapped party."""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import pytest
from sklearn.feature_selection import f_classif

import verticalfs
import verticalfs.selection.blocks as blocks
from verticalfs.crypto import EncryptedArray, generate_keypair
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.fate.binning import quantile_bins, quantile_code_blocks, quantile_split_points
from verticalfs.methods.feast.messages import FeastSetup, LabelScoresRequest
from verticalfs.methods.feast.party import discretize_party
from verticalfs.methods.feast.role import FeastRole, MIRole
from verticalfs.methods.fedsdg_fs import gini as G
from verticalfs.methods.fedsdg_fs.baselines import (
    FScores,
    MSGiniRole,
    PlainFLabels,
    SFFSRole,
    column_sums,
    f_classif_blocked,
)
from verticalfs.methods.fedsdg_fs.messages import ClearGini, PlainGiniLabels
from verticalfs.party import Context, LocalData
from verticalfs.selection.discretize import DISCRETIZERS, apply_bins, fit_bins, fit_bins_blocked
from verticalfs.selection.info import binned_mutual_info, column_mutual_info
from verticalfs.selection.sampling import stratified_sample
from verticalfs.transport.messages import At


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 7 rows: every statistic is summed over many blocks, columns fitted a few at a time."""
    monkeypatch.setattr(blocks, "BLOCK_ROWS", 7)


def _table(n=300, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[:, 1] = np.round(X[:, 1])  # ties
    X[:, 2] *= 1000.0
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(np.int64) + (X[:, -1] > 1)
    return X, y


def _whole_codes(X, E):
    """apply_bins' definition over the whole float64 matrix at once (the reference)."""
    return (np.asarray(X, np.float64)[:, :, None] > E[None]).sum(-1)


# ------------------------------------------------------------------------- the same statistics
@pytest.mark.parametrize("method", DISCRETIZERS)
def test_cut_points_and_codes_are_those_of_the_whole_matrix(small_blocks, method):
    X, y = _table()
    rows = np.sort(np.random.default_rng(1).choice(len(X), 120, replace=False))
    Xd = X.astype(np.float64)
    sup = method in ("mdlp", "chimerge")
    for r in (None, rows):
        lab = (y if r is None else y[r]) if sup else None
        want = fit_bins(Xd if r is None else Xd[r], method, 8, lab)
        got = fit_bins_blocked(X, method, 8, lab, rows=r)
        np.testing.assert_array_equal(got, want)  # NaN padding in the same places
        codes = apply_bins(X, got, rows=r)
        np.testing.assert_array_equal(codes, _whole_codes(Xd if r is None else Xd[r], want))


def test_mutual_info_from_block_counts_is_bitwise_the_code_matrix_one(small_blocks):
    X, y = _table()
    E = fit_bins(X.astype(np.float64), "equal-frequency", 8)
    rows = stratified_sample(y, 90, np.random.default_rng(2))
    for r in (None, rows):
        want = column_mutual_info(_whole_codes(X if r is None else X[r], E), y if r is None else y[r])
        got = binned_mutual_info(X, E, y if r is None else y[r], r)
        assert got.tobytes() == want.tobytes()
    # and FEAST's party codes of the sample: fitted on every training row, applied to the sample
    codes = discretize_party(X, rows, y[rows], "equal-frequency", 8, False, "p")
    np.testing.assert_array_equal(codes, _whole_codes(X[rows], E))


def test_gini_counts_over_blocks(small_blocks):
    X, y = _table()
    E = fit_bins(X.astype(np.float64), "equal-frequency", 10)
    codes = _whole_codes(X, E)
    sizes, counts, _ = G.bin_counts(X, 10, y=y, n_classes=3)
    np.testing.assert_array_equal(counts, G.class_counts(codes, y, 3, 10))
    np.testing.assert_array_equal(sizes, G.bin_sizes(codes, 10))
    want = G.gini_from_counts(G.class_counts(codes, y, 3, 10))
    assert G.gini_from_counts(counts).tobytes() == want.tobytes()


def test_encrypted_bin_sums_over_blocks_are_the_same_ciphertexts(monkeypatch):
    monkeypatch.setattr(blocks, "BLOCK_ROWS", 9)
    X, y = _table(n=40, d=4)
    pub, priv = generate_keypair(512, insecure=True)
    A = EncryptedArray.encrypt(priv, np.eye(3, dtype=np.int64)[y], precision=0)
    codes = _whole_codes(X, fit_bins(X.astype(np.float64), "equal-frequency", 4))
    whole = A.group_sum(codes.astype(np.int64), 4)
    _, _, (got,) = G.bin_counts(X, 4, encrypted=(A,))
    assert got.shape == whole.shape and got.to_bytes() == whole.to_bytes()


def test_fate_quantile_bins_over_blocks(small_blocks):
    X, _ = _table()
    codes, nums = quantile_bins(X, 10)
    for j in range(X.shape[1]):
        sp = quantile_split_points(X[:, j].astype(np.float64), 10)
        assert nums[j] == len(sp)
        np.testing.assert_array_equal(codes[:, j], np.minimum(np.searchsorted(sp, X[:, j].astype(np.float64)),
                                                              len(sp) - 1))


def test_f_statistic_and_sums_are_scikit_learns(small_blocks):
    X, y = _table()
    Xd = X.astype(np.float64)
    assert f_classif_blocked(X, y).tobytes() == f_classif(Xd, y)[0].tobytes()
    # one column: numpy sums it pairwise, the blocks row after row (rounding only)
    np.testing.assert_allclose(f_classif_blocked(X[:, :1], y), f_classif(Xd[:, :1], y)[0], rtol=1e-12)
    T, Q, top = column_sums(X)
    assert T.tobytes() == Xd.sum(0).tobytes() and Q.tobytes() == (Xd * Xd).sum(0).tobytes()
    assert top == float(np.abs(np.rint(np.ldexp(Xd, 24))).sum(0).max())


@pytest.fixture(scope="module")
def cancer():
    return verticalfs.build_data("breast_cancer", parties=3, seed=0)


@pytest.mark.parametrize("name, params", [
    ("feast", {"n_select": 6}),
    ("mi", {"n_select": 6, "discretizer": "equal-width"}),
    ("ms-gini", {"secure": False}),
    ("ms-gini", {"key_bits": 512, "insecure": True}),
    ("sffs", {"secure": False}),
    ("sffs", {"key_bits": 512, "insecure": True}),
    ("fate-iv", {"n_select": 6, "key_bits": 512, "insecure": True}),
    ("fate-iv", {"n_select": 6, "key_bits": 512, "insecure": True, "packing": "pair"}),
])
def test_a_method_selects_the_same_and_sends_the_same_bytes_with_small_blocks(cancer, monkeypatch, name, params):
    def run():
        fed = Federation.in_process(cancer)
        m = create(name, seed=0, **params).fit(fed)
        return (m.info_["selected"], {p: s.tobytes() for p, s in m.feature_scores_.items()}, fed.ledger.total_bytes,
                m.metrics_)  # the metrics: of the classifier on the columns gathered a block at a time

    one = run()  # one block: every party's training rows at once
    monkeypatch.setattr(blocks, "BLOCK_ROWS", 7)
    assert run() == one


# --------------------------------------------------------------------------- memory-mapped party
N_ROWS, N_COLS, BLOCK = 200_000, 50, 8192


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):
    """A party whose 200k x 50 training matrix is a float32 memory-mapped file (40 MB; 80 MB as float64)."""
    path = tmp_path_factory.mktemp("mapped") / "p-train.f32"
    X = np.memmap(path, dtype=np.float32, mode="w+", shape=(N_ROWS, N_COLS))
    rng = np.random.default_rng(0)
    for s in range(0, N_ROWS, 50_000):
        X[s:s + 50_000] = rng.normal(size=(50_000, N_COLS))
    X.flush()
    y = (np.asarray(X[:, 0]) + np.asarray(X[:, 1]) > 0).astype(np.uint8)
    data = LocalData("p", [f"f{j}" for j in range(N_COLS)], {"train": X})
    assert data.X_all("train").numpy().ctypes.data == X.ctypes.data  # the party reads the mapping itself
    return data, y


def _peak(fn) -> tuple[int, object]:
    """The peak of numpy's (and Python's) allocations while ``fn`` runs, and its result."""
    tracemalloc.start()
    try:
        out = fn()
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


def test_filters_at_a_mapped_party_allocate_blocks_not_the_table(mapped, monkeypatch):
    monkeypatch.setattr(blocks, "BLOCK_ROWS", BLOCK)
    data, y = mapped
    # four float64 blocks (3.3 MB each) and five int64 vectors of a label per row (1.6 MB each):
    # 21 MB, half the float32 table (40 MB) and a quarter of the float64 copy read before
    bound = 4 * BLOCK * N_COLS * 8 + 5 * N_ROWS * 8
    ctx = Context(None, At("selection"), "active")
    rows = stratified_sample(y, 8 ** 4 * 2, np.random.default_rng(0))
    runs = {
        "mi": lambda: MIRole(data, None, ctx).on_label_scores(
            LabelScoresRequest(rows=None, labels=y, bins=8, discretizer="equal-frequency", supervised_bins=False,
                               top=10), ctx),
        "feast": lambda: FeastRole(data, None, ctx).on_setup(
            FeastSetup(rows=rows.astype(np.uint32), labels=y[rows], bins=8, discretizer="equal-frequency",
                       supervised_bins=False, seed=0), ctx),
        "ms-gini": lambda: MSGiniRole(data, None, ctx).on_plain_labels(
            PlainGiniLabels(labels=y.astype(np.int64), n_classes=2, n_bins=10), ctx),
        "sffs": lambda: SFFSRole(data, None, ctx).on_plain(PlainFLabels(labels=y.astype(np.int64)), ctx),
        "fate-iv binning": lambda: [None for _ in quantile_code_blocks(data.X_all("train").numpy(), 10)[1]],
    }
    peaks = {k: _peak(f) for k, f in runs.items()}
    assert all(v < bound for v, _ in peaks.values()), ({k: v for k, (v, _) in peaks.items()}, bound)
    # the bound would catch a whole copy: the float64 matrix the methods read before issue 39
    assert _peak(lambda: data.X_all("train").numpy().astype(np.float64))[0] > bound
    # and the statistics are the expected ones: columns 0 and 1 make the label
    assert sorted(peaks["mi"][1].indices.tolist()[:2]) == [0, 1]
    assert isinstance(peaks["ms-gini"][1], ClearGini) and np.argsort(peaks["ms-gini"][1].scores)[:2].tolist() in (
        [0, 1], [1, 0])
    assert isinstance(peaks["sffs"][1], FScores) and sorted(np.argsort(-peaks["sffs"][1].scores)[:2]) == [0, 1]


def test_random_rows_are_read_a_block_of_the_table_at_a_time(mapped):
    data, _ = mapped
    X = data.X_all("train").numpy()
    rows = np.random.default_rng(3).integers(0, N_ROWS, 5000)  # unsorted, with repeats
    np.testing.assert_array_equal(blocks.take_rows(X, rows, size=1000), X[rows].astype(np.float64))
    srt = np.sort(rows)
    seen = [(a, b, blk) for a, b, blk in blocks.row_blocks(X, srt, size=1000)]
    assert all(srt[b - 1] // 1000 == srt[a] // 1000 and b - a <= 1000 for a, b, _ in seen)  # one window each
    np.testing.assert_array_equal(np.concatenate([blk for *_, blk in seen]), X[srt].astype(np.float64))
    shuffled = np.random.default_rng(4).permutation(srt)
    np.testing.assert_array_equal(np.concatenate([b for *_, b in blocks.row_blocks(X, shuffled, size=1000)]),
                                  X[shuffled].astype(np.float64))


def _mapping_rss_kb(addr: int) -> int:
    """Resident kB of the mapping holding ``addr`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "Rss:":
                return int(line.split()[1])
    raise AssertionError("mapping not found")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_read_blocks_give_their_pages_back(mapped):
    data, _ = mapped
    X = data.X_all("train").numpy()
    before = np.array(X[::1000])
    float(np.asarray(X).sum(dtype=np.float64))  # touch every page
    assert _mapping_rss_kb(X.ctypes.data) > 30_000
    total = sum(float(b.sum()) for _, _, b in blocks.row_blocks(X))
    assert _mapping_rss_kb(X.ctypes.data) < 2_000  # released as read
    np.testing.assert_array_equal(np.array(X[::1000]), before)  # the data is still the file's
    assert np.isfinite(total)
    # ordinary memory is never released (madvise would zero it)
    Y = np.ones((5000, 50), dtype=np.float32)
    for _ in blocks.row_blocks(Y, size=100):
        pass
    assert (Y == 1).all()
