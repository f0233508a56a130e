"""The ray engine's id handling without a cluster: ids as fixed-width bytes from Arrow's buffers,
text to UTF-8 without a Python object per id, the search among the sorted ids as integers (ids of
at most 8 bytes) or as bytes, the table's units of work (a file's row groups) and the writers'
ranges of the prepared matrices."""

from __future__ import annotations

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from verticalfs.engine import ray as engine  # noqa: E402
from verticalfs.exceptions import DataError  # noqa: E402


def test_fixed_width_ids_are_numpys_bytes_of_every_id():
    ids = ["c1", "", "é7", "long-id-9", "日本"]
    want = np.array([s.encode() for s in ids], dtype="S10")
    got = engine._fixed_width(pa.chunked_array([pa.array(ids[:2]), pa.array(ids[2:])]), 10)
    assert got.dtype == np.dtype("S10") and got.tolist() == want.tolist()
    sliced = pa.array(ids).slice(2, 3)  # an offset into the buffers
    assert engine._fixed_width(sliced, 10).tolist() == want[2:].tolist()
    assert engine._fixed_width(pa.array([7, 12345]), 5).tolist() == [b"7", b"12345"]  # cast to text, as before
    with pytest.raises(DataError, match="9 bytes long where the widest is 4"):
        engine._fixed_width(pa.array(["long-id-9"]), 4)


def test_utf8_of_text_is_numpys_encoding():
    for a in (np.array(["c1", "", "abc"]), np.array(["é", "ascii", "日本"]), np.array([], dtype="<U3")):
        got = engine._utf8(a)
        assert got.tolist() == np.char.encode(a, "utf-8").tolist()


@pytest.mark.parametrize("alphabet,longest", [("ab0", 8), ("abé0", 6), ("xyz", 12)])
def test_positions_are_the_ranks_among_the_sorted_ids(tmp_path, alphabet, longest):
    rng = np.random.default_rng(len(alphabet) + longest)
    held = sorted({"".join(rng.choice(list(alphabet), rng.integers(1, longest + 1))) for _ in range(4000)})
    b = np.sort(np.array([s.encode() for s in held]))
    w = b.dtype.itemsize
    path = tmp_path / "ids"
    mm = np.memmap(path, dtype=f"S{w}", mode="w+", shape=(len(b),))
    mm[:] = b
    mm.flush()
    ids = engine.SortedIds(path, len(b), w)
    assert (ids.keys() is not None) == (w <= 8)  # the integer search where the ids fit in 8 bytes
    rank = {s: i for i, s in enumerate(b.tolist())}
    q = held[::3] + ["", "nobody", alphabet[0] * (longest + 3), held[0] + "\x00x"] + held[1::7]
    want = [rank.get(s.encode(), -1) for s in q]
    assert ids.positions(np.array(q)).tolist() == want
    assert ids.positions(np.array([s.encode() for s in q])).tolist() == want  # bytes too
    assert ids.positions(q).tolist() == want  # and a list


def test_units_are_a_files_row_groups_up_to_a_size(tmp_path, monkeypatch):
    folder = tmp_path / "t"
    folder.mkdir()
    for k, n in enumerate((1000, 250)):
        pq.write_table(pa.table({"id": [f"{k}-{i}" for i in range(n)], "v": np.arange(n, dtype=float)}),
                       folder / f"p{k}.parquet", row_group_size=100)

    class Table:  # the attributes units() reads, without a cluster
        units = engine.RayTable.units

        def __init__(self, blocks):
            import pyarrow.dataset as pads

            self.dataset, self.n_rows, self.blocks = pads.dataset(folder), 1250, blocks
            self._units, self._sizes = None, {}

    monkeypatch.setattr(engine, "UNIT_ROWS", 300)
    t = Table(None)
    units = t.units()
    assert set(t._sizes) == {"id", "v"} and t._sizes["v"] >= 1250 * 8  # uncompressed bytes, from the footers
    assert [(u[0].rsplit("/", 1)[1], u[1], u[2]) for u in units] == [
        ("p0.parquet", (0, 1, 2), 300), ("p0.parquet", (3, 4, 5), 300), ("p0.parquet", (6, 7, 8), 300),
        ("p0.parquet", (9,), 100), ("p1.parquet", (0, 1, 2), 250)]
    assert [u[2] for u in Table(5).units()] == [200, 200, 200, 200, 200, 250]  # about n / blocks rows a unit


@pytest.mark.parametrize("sizes,pieces", [([630_000, 90_000, 180_000], 8), ([630_000, 90_000, 180_000], 2),
                                          ([5, 0, 3], 4), ([100_000, 0, 7], 6), ([3000, 3000, 3000], 11),
                                          ([0, 0, 0], 4), ([1, 0, 0], 3)])
def test_the_writers_ranges_cover_every_row_once_in_as_many_even_pieces(sizes, pieces):
    """The matrices, one after the other, cut into ``pieces`` ranges (fewer only where there are
    fewer rows): every row of every split exactly once, in order, each range within a page of
    the others' length, cuts on a page of their split (1,024 rows) or at a split's end."""
    got = engine._cut(sizes, pieces)
    total = sum(sizes)
    assert len(got) == min(pieces, total)
    flat = [(k, r) for piece in got for k, lo, hi in piece for r in range(lo, hi)] if total < 10_000 else None
    if flat is not None:
        assert flat == [(k, r) for k, n in enumerate(sizes) for r in range(n)]
    at = [0] * len(sizes)
    for piece in got:
        assert piece and all(hi > lo for _k, lo, hi in piece)
        for k, lo, hi in piece:
            assert lo == at[k] and (k == piece[0][0] or lo == 0)
            at[k] = hi
            if total // max(1, pieces) > engine.PIECE_ALIGN:
                assert lo % engine.PIECE_ALIGN == 0 and (hi % engine.PIECE_ALIGN == 0 or hi == sizes[k])
        assert all(hi == sizes[k] for k, _lo, hi in piece[:-1])  # (a range goes on only past a split's end)
    assert at == list(sizes)
    lengths = [sum(hi - lo for _k, lo, hi in piece) for piece in got]
    if lengths:
        assert max(lengths) - min(lengths) <= 2 * engine.PIECE_ALIGN
