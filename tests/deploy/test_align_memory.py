"""A streamed party's Align path stays compact (issue 39): the aligned ids cross as a text array, not
a list of Python strings, and the party finds their rows without building one.

At 1M rows the old path (a list of ids, then ``[str(i) ...]``, ``set(ids)`` and a pandas index of
Python strings) held about 60 bytes a row more than the ids' fixed width, three times over; this
test bounds what Python allocates while a 200k-row party decodes and applies Align, so that a
regression back to per-id Python objects fails it.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyarrow")

from verticalfs.data import stream  # noqa: E402
from verticalfs.data.vertical import SPLITS  # noqa: E402
from verticalfs.deploy.party import Align, DeployedParty  # noqa: E402
from verticalfs.names import LABEL_HOLDER  # noqa: E402
from verticalfs.transport import serde  # noqa: E402

N, COLS = 200_000, 4


@pytest.fixture(scope="module")
def party(tmp_path_factory):
    root = tmp_path_factory.mktemp("alignmem")
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"id": np.char.add("c", rng.permutation(N).astype(str))})
    for j in range(COLS):
        df[f"x{j}"] = rng.normal(0, 1, N).astype(np.float32)
    df.to_parquet(root / "p.parquet", index=False, row_group_size=50_000)
    p = DeployedParty("telecom", root / "p.parquet", stream=True)
    yield p, df


class _Stop(Exception):
    pass


def _peak(fn) -> int:
    """Python's (and numpy's) peak allocation while ``fn`` runs, in bytes."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_align_carries_a_text_array_and_allocates_no_python_string_per_id(party, monkeypatch):
    p, df = party
    rng = np.random.default_rng(1)
    ids = df["id"].to_numpy(dtype=str)[np.sort(rng.permutation(N)[: N * 9 // 10])]
    codes = rng.integers(0, 3, len(ids)).astype(np.int8)
    data = serde.encode(Align(ids=ids, split=codes, scaling="standard", impute="mean")).data
    # on the wire: each id's bytes at the longest id's width, no tag or length per id
    width = max(len(i) for i in ids)
    assert len(data) < len(ids) * (width + 1) + 1024

    def decode_and_find_rows():
        msg = serde.decode(data).msg
        assert isinstance(msg.ids, np.ndarray) and msg.ids.dtype.kind == "U"
        p.handle(LABEL_HOLDER, msg, None, None)

    # what decoding Align and finding its rows allocate (the transform's record batches, whose
    # size is a row group's, not the table's, are left out: prepare_streamed records its input)
    seen = {}

    def record(table, pos, codes, *a, **kw):
        seen["pos"] = pos
        raise _Stop

    monkeypatch.setattr(stream, "prepare_streamed", record)  # (what the local table's prepare() runs)
    def until_prepare():
        with pytest.raises(_Stop):
            decode_and_find_rows()

    peak = _peak(until_prepare)
    monkeypatch.undo()
    assert (df["id"].to_numpy(dtype=str)[seen["pos"]] == ids).all()
    # the ids (UCS-4: 4 bytes a character) and a few int64 arrays a row; a Python string per id
    # (about 56 bytes, plus 8 in a list) takes 180k x 64 = 11.5 MB for each list or index of them
    bound = len(ids) * (4 * width + 6 * 8) + (2 << 20)
    assert peak < bound, f"aligning {len(ids)} ids allocated {peak / 2**20:.1f} MB at peak, bound {bound / 2**20:.1f}"
    decode_and_find_rows()  # the whole path
    assert sum(p.data.n_samples(s) for s in SPLITS) == len(ids)
    # the rows are the right ones, in the label holder's order
    train = np.flatnonzero(codes == 0)
    want = df.set_index("id").loc[ids[train[:5]], "x0"].to_numpy()
    got = p.data.X_all("train").numpy()[:5, 0] * p.preprocessor.scale[0] + p.preprocessor.offset[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert SPLITS[0] == "train"


def test_a_list_of_ids_is_still_accepted(party):
    """A label holder of protocol 1.1 sends Align's ids as a list of str: the same rows."""
    p, df = party
    ids = df["id"].to_numpy(dtype=str)[:1000]
    codes = np.zeros(len(ids), dtype=np.int8)
    p.handle(LABEL_HOLDER, Align(ids=list(ids), split=codes, scaling="minmax", impute="mean"), None, None)
    a = p.data.X_all("train").numpy().copy()
    p.handle(LABEL_HOLDER, Align(ids=ids, split=codes, scaling="minmax", impute="mean"), None, None)
    np.testing.assert_array_equal(a, p.data.X_all("train").numpy())
