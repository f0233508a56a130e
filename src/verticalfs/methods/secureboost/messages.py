"""SecureBoost's messages; the label holder's side is :mod:`.method`, the parties' :mod:`.role`.

Ciphertexts travel in ``bytes`` fields at the key's fixed width; an instance space (which of a
node's rows go left) as a bit vector packed eight rows a byte (:func:`pack_bits`), over the rows
of the node in the tree's row order. One tree (phase ``train``; ``selection`` for ``sbt-filter``)::

    active -> party  TreeStart(key once, layout, the tree's rows, its features, [[g, h]] packed)  -> Ack
    per level:
    active -> party  HistogramRequest(partitions of the last level's splits, nodes)   -> Histograms
    per split won by the party:
    active -> party  SplitRequest(node, feature, bin)                                   -> SplitMade
    active -> party  TreeEnd(tree)                                                      -> Ack
    with ``hide_own_splits``, below a split of the label holder's own (hidden from the party):
    active -> party  HiddenHistogramRequest(anchor, [[g, h, 1]] of each hidden node side by side) -> Histograms
    active -> party  HiddenSplitRequest(anchor, feature, bin)                            -> SplitMade
    after the tree (phase ``eval``, and ``train`` for rows the tree did not sample):
    active -> party  RouteRequest(split, rows, records)                                 -> Routes
    at the end:
    active -> party  Importance(gain, splits per feature)                               -> Ack
"""

from __future__ import annotations

import numpy as np

from verticalfs.exceptions import ProtocolError
from verticalfs.transport.messages import message


def pack_bits(mask: np.ndarray) -> bytes:
    """A bool vector, eight entries a byte (little bit order)."""
    return np.packbits(np.asarray(mask, dtype=bool), bitorder="little").tobytes()


def unpack_bits(data: bytes, n: int, what: str = "a bit vector") -> np.ndarray:
    """Inverse of :func:`pack_bits` for ``n`` entries (the length is checked: untrusted input)."""
    raw = np.frombuffer(bytes(data), dtype=np.uint8)
    if len(raw) != (int(n) + 7) // 8:
        raise ProtocolError(f"{what} of {len(raw)} bytes for {n} rows (expected {(int(n) + 7) // 8})")
    return np.unpackbits(raw, count=int(n), bitorder="little").astype(bool)


@message("secureboost.SBTSpec")
class SBTSpec:
    """The ``Join`` spec: bins per feature (at most ``n_bins``, each holding at least the party's
    ``min_rows_per_bin`` training rows), the key size the label holder will use (``key_bits``, for the
    party's policy), and whether the run is ``sbt-filter``'s selection."""

    n_bins: int
    key_bits: int
    insecure: bool = False
    selection: bool = False
    #: the run hides the label holder's own splits (``HiddenHistogramRequest``, ``HiddenSplitRequest``:
    #: refused without it)
    hide_own_splits: bool = False


@message("secureboost.SBTReady")
class SBTReady:
    """Party -> label holder, reply to the ``Join``: the number of bins of each of its features, the
    bin of each whose rows it does not sum (``skip``: the bin of most training rows; its sum is the
    node's total minus the others), the mean number of features a row is summed for
    (``visits``: the cost of a histogram, for the label holder's choice of packing) and its policy's
    minimum rows per node (the label holder asks for no histogram of a smaller node)."""

    bin_nums: np.ndarray
    skip: np.ndarray
    visits: float
    min_rows_per_node: int


@message("secureboost.TreeStart")
class TreeStart:
    """Active -> party: tree ``tree`` starts. ``public_key`` on the first tree only (empty after).
    The layout of the ciphertexts (:class:`~verticalfs.histogram.gradients.GradientLayout`:
    ``values``, ``precision``, ``rows_per_ct``, ``hiding``; the party rebuilds and checks it), the
    tree's rows (``rows``: a bit vector over the training rows; empty: every row), the features it
    uses (``features``: a bit vector over the party's features) and the packed ``[[g, h]]``
    ``(ceil(rows / m), parts)``."""

    tree: int
    public_key: bytes
    insecure: bool
    values: int
    precision: int
    rows_per_ct: int
    hiding: int
    n_rows: int
    rows: bytes
    features: bytes
    gradients: bytes


@message("secureboost.HistogramRequest")
class HistogramRequest:
    """Active -> party: first apply the splits of the last level that other parties made
    (``parents[i]`` splits into ``children[2i], children[2i + 1]`` with left rows ``lefts[i]``, a bit
    vector over the parent's rows); then return the histograms of ``nodes`` (their rows known), and
    for the nodes ``checks`` (whose histograms the label holder derives by subtraction) only which
    splits the party's minimum rows per node allow."""

    tree: int
    parents: np.ndarray
    children: np.ndarray
    lefts: list
    nodes: np.ndarray
    checks: np.ndarray


@message("secureboost.Histograms")
class Histograms:
    """Party -> active: the packed, masked, re-randomised sums per (feature, bin) of each requested
    node, the nodes one after another (``packages`` ciphertexts each); ``allowed``: per node, a bit
    per (feature, bin) saying whether a split after it leaves both sides the party's minimum rows
    per node (empty when the party has no minimum above 1)."""

    data: bytes
    packages: np.ndarray
    allowed: list


@message("secureboost.SplitRequest")
class SplitRequest:
    """Active -> party: split node ``node`` of tree ``tree`` after bin ``bin`` of feature ``feature``
    (left: bins ``<= bin``) into ``left_child`` and ``right_child``."""

    tree: int
    node: int
    feature: int
    bin: int
    left_child: int
    right_child: int


@message("secureboost.SplitMade")
class SplitMade:
    """Party -> active: the id of the split in the party's own lookup table (which keeps the
    threshold) and the node's rows that go left (a bit vector over them): the instance space."""

    record: int
    left: bytes


@message("secureboost.HiddenHistogramRequest")
class HiddenHistogramRequest:
    """Active -> party (``hide_own_splits``): the histograms of nodes under a split of the label
    holder's own, which the party does not know. ``anchor`` is the deepest node whose rows the party
    knows; ``gradients`` hold, for each of its rows (in its row order), ``values`` slots: per hidden
    node the row's ``g, h`` and a 1 if the row is in that node, zeros if not (one row a ciphertext,
    layout ``precision``). The party sums them per (feature, bin) over the anchor's rows: every hidden
    node's histogram (and its rows per bin) in one, without learning which row is in which node."""

    tree: int
    anchor: int
    values: int
    precision: int
    gradients: bytes


@message("secureboost.HiddenSplitRequest")
class HiddenSplitRequest:
    """Active -> party (``hide_own_splits``): record a split after bin ``bin`` of feature ``feature``
    at a node hidden under ``anchor``; the reply's ``left`` is over the anchor's rows (the party does
    not know the node's), the label holder keeps the node's part of it."""

    tree: int
    anchor: int
    feature: int
    bin: int


@message("secureboost.TreeEnd")
class TreeEnd:
    """Active -> party: tree ``tree`` is grown; the party drops its ciphertexts and node rows."""

    tree: int


@message("secureboost.RouteRequest")
class RouteRequest:
    """Active -> party: for each of ``records`` (the party's splits), which of the ``rows`` of split
    ``split`` go left (``rows``: a bit vector over the split's rows; empty: every row)."""

    split: str
    rows: bytes
    records: np.ndarray


@message("secureboost.Routes")
class Routes:
    """Party -> active: a bit vector over the requested rows per record, one after another."""

    bits: bytes


@message("secureboost.Importance")
class Importance:
    """Active -> party: the total gain and the number of splits of each of the party's features (the
    party reports them as its feature scores: ``sbt-filter`` ranks by them)."""

    gain: np.ndarray
    splits: np.ndarray
