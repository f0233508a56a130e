"""Files spliced into one memory-mapped matrix (data/stream.py's ``spliced_memmap``: the ray engine's
range writers write a file each)."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

from verticalfs.data import stream
from verticalfs.data.stream import SPLICE_ALIGN, splice_pad, spliced_memmap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the splice maps files with MAP_FIXED")

COLS = 50  # 200 bytes a row: 1,024 rows are 50 pages


def _files(tmp_path, X, cuts):
    """``X``'s rows ``cuts[i]..cuts[i+1]-1`` in file i, from byte ``splice_pad`` of where they start."""
    paths = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        p = tmp_path / f"m.{a}.f32"
        with open(p, "wb") as f:
            f.seek(splice_pad(a * X.shape[1] * 4))
            f.write(X[a:b].tobytes())
        paths.append(p)
    return paths


@pytest.fixture
def matrix(tmp_path):
    X = np.random.default_rng(0).random((30_000, COLS), dtype=np.float32)
    cuts = [0, 10_240, 11_264, 20_480, 30_000]  # (ranges of whole pages, the last ending inside one)
    return X, cuts, _files(tmp_path, X, cuts)


def test_files_spliced_are_one_matrix_each_file_at_its_huge_page_offset(matrix):
    X, cuts, paths = matrix
    m = spliced_memmap(paths, X.shape)
    assert isinstance(m, np.memmap) and m.shape == X.shape and m.dtype == np.float32
    assert np.array_equal(np.asarray(m), X) and m.filename == str(paths[0].resolve())
    addr = m.__array_interface__["data"][0]
    assert addr % SPLICE_ALIGN == 0  # (a file's 2 MB folios map whole: its byte x at an address congruent to x)
    assert [splice_pad(a * COLS * 4) for a in cuts[:-1]] == [(addr + a * COLS * 4) % SPLICE_ALIGN for a in cuts[:-1]]
    assert splice_pad(cuts[1] * COLS * 4) > 0  # (the test covers a file whose rows start after a hole)


def test_a_view_keeps_the_mapping_alive_and_writes_reach_the_files(matrix):
    X, cuts, paths = matrix
    m = spliced_memmap(paths, X.shape)
    view, tail = m[5_000:25_000], np.ascontiguousarray(m[-3:])
    del m
    gc.collect()
    assert np.array_equal(view, X[5_000:25_000]) and np.array_equal(tail, X[-3:])
    view[-1, 2] = -7.0  # row 24,999: in the fourth file
    view.flush()
    del view
    gc.collect()
    got = np.fromfile(paths[3], dtype=np.float32, offset=splice_pad(cuts[3] * COLS * 4)).reshape(-1, COLS)
    assert got[24_999 - cuts[3], 2] == -7.0


def test_the_memory_map_helpers_treat_it_as_one_files_map(matrix, tmp_path):
    X, _cuts, paths = matrix
    m = spliced_memmap(paths, X.shape)
    rows = np.random.default_rng(1).integers(0, len(X), 5_000)
    assert np.array_equal(stream.read_rows(m, rows), X[rows])
    stream.release_pages(m)
    stream.release_pages(m, 100, 20_000)
    assert np.array_equal(m[[0, 15_000, 29_999]], X[[0, 15_000, 29_999]])  # (released pages read again)
    kept = stream.select_columns(m, np.array([7, 0]))
    assert isinstance(kept, np.memmap) and np.array_equal(kept, X[:, [7, 0]])
    assert str(kept.filename).startswith(str(tmp_path / "m.0-kept-"))
    stream.keep_pages_released(m)


def test_bad_files_are_refused_naming_the_file(tmp_path):
    X = np.random.default_rng(2).random((3_000, 3), dtype=np.float32)
    paths = _files(tmp_path, X, [0, 1_000, 3_000])  # (1,000 rows of 12 bytes: not whole pages)
    with pytest.raises(ValueError, match=r"m\.0\.f32.*not a whole number of 4096-byte pages"):
        spliced_memmap(paths, X.shape)
    paths = _files(tmp_path, X, [0, 1_024, 3_000])
    with pytest.raises(ValueError, match=r"hold 3000 rows of 3 columns where 3001 are spliced"):
        spliced_memmap(paths, (3_001, 3))
    assert np.array_equal(spliced_memmap(paths, X.shape), X)
