"""A feature party's side of SecureBoost (the paper's *passive party*).

The party bins its own columns on its own training rows (:class:`~verticalfs.histogram.BinTable`,
at least its policy's ``min_rows_per_bin`` rows a bin), sums the label holder's packed ciphertexts
per (feature, bin) over the rows of each node it is asked for (the instance space, which it knows),
returns them masked and re-randomised (:func:`~verticalfs.histogram.gradients.node_histogram`), and
keeps the threshold of every split it makes in its own lookup table: the label holder learns the
split as a record id, the feature's index and the bin's index, never the value. Every parameter,
shape, node and bit vector it is sent is checked before any work; a node or a split side with fewer
rows than its policy's ``min_rows_per_node`` is refused.
"""

from __future__ import annotations

import numpy as np

from verticalfs.crypto import EncryptedArray, PublicKey
from verticalfs.exceptions import CryptoError, PolicyError, ProtocolError
from verticalfs.histogram import BinTable
from verticalfs.histogram.gradients import GradientLayout, node_histogram
from verticalfs.methods.filter import FilterRole
from verticalfs.methods.secureboost.messages import (
    HiddenHistogramRequest,
    HiddenSplitRequest,
    HistogramRequest,
    Histograms,
    Importance,
    RouteRequest,
    Routes,
    SBTReady,
    SBTSpec,
    SplitMade,
    SplitRequest,
    TreeEnd,
    TreeStart,
    pack_bits,
    unpack_bits,
)
from verticalfs.party import Context, LocalData, handles
from verticalfs.transport.messages import Ack

#: the most bins a party makes per feature (untrusted input)
MAX_BINS = 1024
#: the most values a row may carry (``2 K`` for ``K`` classes)
MAX_VALUES = 2048


class SBTRole(FilterRole):
    """A party of ``secureboost`` and ``sbt-filter`` (a filter role: ``sbt-filter`` then gathers the
    selected columns, under the ``release_columns`` rule, like every filter method)."""

    def __init__(self, data: LocalData, spec: SBTSpec | None, ctx: Context) -> None:
        super().__init__(data, spec, ctx)
        self.min_rows_per_node = int(ctx.policy.min_rows_per_node)
        self.min_rows_per_bin = int(ctx.policy.min_rows_per_bin)
        #: the lookup table: record id -> (feature index among the kept columns, threshold)
        self.records: list[tuple[int, float]] = []
        self.importance: np.ndarray | None = None
        self.pub: PublicKey | None = None
        self.bins: BinTable | None = None
        self.codes: np.ndarray | None = None
        self.tree: dict | None = None
        self.hidden_ok = isinstance(spec, SBTSpec) and bool(spec.hide_own_splits)
        if spec is not None:
            if not isinstance(spec, SBTSpec):
                raise ProtocolError(f"party {self.name!r}: secureboost needs an SBTSpec, got {type(spec).__name__}")
            if not 2 <= int(spec.n_bins) <= MAX_BINS:
                raise ProtocolError(f"party {self.name!r}: n_bins must lie in [2, {MAX_BINS}], got {spec.n_bins}")
            X = self.data.X("train").numpy()
            self.bins = BinTable(X, int(spec.n_bins), self.min_rows_per_bin)
            self.codes = self.bins.codes(X)

    @classmethod
    def key_bits(cls, spec) -> int | None:
        return int(spec.key_bits) if isinstance(spec, SBTSpec) else None

    def joined(self) -> SBTReady:
        bins = self._bins()
        n = max(1, self.data.n_samples("train"))
        visits = float(sum(1.0 - c.max(initial=0) / n for c in bins.counts))
        return SBTReady(bin_nums=bins.bin_nums.astype(np.int64), skip=bins.largest_bins(), visits=visits,
                        min_rows_per_node=self.min_rows_per_node)

    def _bins(self) -> BinTable:
        if self.bins is None or self.codes is None:
            raise ProtocolError(f"party {self.name!r} has no bins: secureboost's messages need its Join")
        return self.bins

    def _tree(self, tree: int) -> dict:
        st = self.tree
        if st is None or st["id"] != int(tree):
            raise ProtocolError(f"party {self.name!r}: a message of tree {tree} before its TreeStart")
        return st

    # ------------------------------------------------------------------------- a tree
    @handles(TreeStart)
    def on_tree_start(self, msg: TreeStart, ctx: Context) -> Ack:
        bins = self._bins()
        if msg.public_key:
            pub = PublicKey.from_bytes(msg.public_key, insecure=bool(msg.insecure))
            if self.pub is not None and pub.n != self.pub.n:
                raise ProtocolError(f"party {self.name!r}: a second Paillier key in one run")
            self.pub = pub
        if self.pub is None:
            raise ProtocolError(f"party {self.name!r}: the first TreeStart must carry the public key")
        n_train = self.data.n_samples("train")
        rows = np.arange(n_train) if not msg.rows else np.flatnonzero(unpack_bits(msg.rows, n_train, "the tree's rows"))
        if len(rows) != int(msg.n_rows) or not len(rows):
            raise ProtocolError(f"party {self.name!r}: TreeStart names {msg.n_rows} rows, its bit vector {len(rows)}")
        if not 1 <= int(msg.values) <= MAX_VALUES:
            raise ProtocolError(f"party {self.name!r}: {msg.values} values a row, expected 1 to {MAX_VALUES}")
        try:  # the party rebuilds the layout itself: its masks' floor and slot widths are its own checks
            layout = GradientLayout.for_key(self.pub, int(msg.values), int(msg.precision), len(rows),
                                            int(msg.rows_per_ct), int(msg.hiding))
        except CryptoError as exc:
            raise ProtocolError(f"party {self.name!r}: TreeStart's layout is refused ({exc})") from None
        d = bins.n_features
        features = unpack_bits(msg.features, d, "the tree's features")
        enc = EncryptedArray.from_bytes(self.pub, msg.gradients, (-(-len(rows) // layout.rows_per_ct), layout.parts))
        self.tree = {"id": int(msg.tree), "layout": layout, "enc": enc, "rows": rows,
                     "features": np.flatnonzero(features), "nodes": {0: np.arange(len(rows))}, "split": set(),
                     "values": int(msg.values), "hidden": {}}
        return Ack()

    def _node(self, st: dict, node: int) -> np.ndarray:
        rows = st["nodes"].get(int(node))
        if rows is None:
            raise ProtocolError(f"party {self.name!r}: tree {st['id']} has no node {node} whose rows it knows")
        return rows

    def _add_children(self, st: dict, parent: int, left: np.ndarray, a: int, b: int) -> None:
        rows = self._node(st, parent)
        if int(parent) in st["split"] or int(a) in st["nodes"] or int(b) in st["nodes"] or a == b:
            raise ProtocolError(f"party {self.name!r}: node {parent} of tree {st['id']} is split already, or its "
                                f"children {a}, {b} exist")
        st["split"].add(int(parent))
        st["nodes"][int(a)] = rows[left]
        st["nodes"][int(b)] = rows[~left]

    @handles(HistogramRequest)
    def on_histograms(self, msg: HistogramRequest, ctx: Context) -> Histograms:
        st = self._tree(msg.tree)
        bins = self._bins()
        parents = np.asarray(msg.parents, dtype=np.int64).reshape(-1)
        children = np.asarray(msg.children, dtype=np.int64).reshape(-1)
        if children.shape != (2 * len(parents),) or len(msg.lefts) != len(parents):
            raise ProtocolError(f"party {self.name!r}: {len(parents)} partitions with {len(children)} children and "
                                f"{len(msg.lefts)} bit vectors")
        for i, parent in enumerate(parents.tolist()):
            left = unpack_bits(msg.lefts[i], len(self._node(st, parent)), f"node {parent}'s left rows")
            self._add_children(st, parent, left, int(children[2 * i]), int(children[2 * i + 1]))
        used = st["features"]
        nums = bins.bin_nums[used]
        skip = bins.largest_bins()
        cols = self.codes[:, used] if self.codes is not None else None
        datas, packages, allowed = [], [], []
        for node in np.asarray(msg.nodes, dtype=np.int64).reshape(-1).tolist():
            rows = self._node(st, node)
            if len(rows) < self.min_rows_per_node:
                raise PolicyError(f"party {self.name!r} refuses the histogram of a node of {len(rows)} rows: its "
                                  f"policy has min_rows_per_node = {self.min_rows_per_node}")
            codes = cols[st["rows"][rows]]
            packed, sizes = node_histogram(st["enc"], st["layout"], rows, codes, nums, skip[used])
            datas.append(packed.to_bytes())
            packages.append(len(sizes))
            allowed.append(self._allowed(codes, nums) if self.min_rows_per_node > 1 else b"")
        for node in np.asarray(msg.checks, dtype=np.int64).reshape(-1).tolist():
            rows = self._node(st, node)
            allowed.append(self._allowed(cols[st["rows"][rows]], nums) if self.min_rows_per_node > 1 else b"")
        return Histograms(data=b"".join(datas), packages=np.asarray(packages, dtype=np.int64), allowed=allowed)

    def _allowed(self, codes: np.ndarray, nums: np.ndarray) -> bytes:
        """Per (feature, bin): does a split after the bin leave both sides ``min_rows_per_node`` rows?"""
        k = self.min_rows_per_node
        n = codes.shape[0]
        out = []
        for j in range(codes.shape[1]):  # one bincount per feature
            left = np.cumsum(np.bincount(codes[:, j].astype(np.int64), minlength=int(nums[j])))
            out.append((left >= k) & (n - left >= k))
        return pack_bits(np.concatenate(out) if out else np.zeros(0, dtype=bool))

    @handles(SplitRequest)
    def on_split(self, msg: SplitRequest, ctx: Context) -> SplitMade:
        st = self._tree(msg.tree)
        bins = self._bins()
        f, b = int(msg.feature), int(msg.bin)
        if f not in set(st["features"].tolist()):
            raise ProtocolError(f"party {self.name!r}: tree {st['id']} does not use feature {f}")
        if not 0 <= b < int(bins.bin_nums[f]) - 1:
            raise ProtocolError(f"party {self.name!r}: feature {f} has {bins.bin_nums[f]} bins; no split after bin {b}")
        rows = self._node(st, msg.node)
        left = self.codes[st["rows"][rows], f] <= b
        k = self.min_rows_per_node
        if min(int(left.sum()), int((~left).sum())) < k:
            raise PolicyError(f"party {self.name!r} refuses a split leaving {int(left.sum())} and {int((~left).sum())} "
                              f"rows: its policy has min_rows_per_node = {k}")
        self._add_children(st, int(msg.node), left, int(msg.left_child), int(msg.right_child))
        self.records.append((f, bins.threshold(f, b)))
        return SplitMade(record=len(self.records) - 1, left=pack_bits(left))

    # ----------------------------------------------- nodes hidden under the label holder's own splits
    @handles(HiddenHistogramRequest)
    def on_hidden_histogram(self, msg: HiddenHistogramRequest, ctx: Context) -> Histograms:
        """Sum the label holder's per-node gradients over the anchor's rows (``hide_own_splits``): the
        party cannot check the hidden nodes' sizes (it does not know them), only the anchor's."""
        st = self._tree(msg.tree)
        bins = self._bins()
        self._hidden_allowed()
        rows = self._node(st, msg.anchor)
        per = st["values"] + 1  # a hidden node's slots: g, h of each output and its row count
        slots, rest = divmod(int(msg.values), per)
        most = max(1, len(rows) // max(1, self.min_rows_per_node))
        if rest or not 1 <= slots <= most:
            raise ProtocolError(f"party {self.name!r}: a hidden histogram of {msg.values} values is not 1 to {most} "
                                f"nodes of {per} values under node {msg.anchor} of {len(rows)} rows")
        # each hidden node it sums may be split once: the splits it makes over this anchor are bounded by them
        st["hidden"][int(msg.anchor)] = st["hidden"].get(int(msg.anchor), 0) + slots
        if len(rows) < self.min_rows_per_node:
            raise PolicyError(f"party {self.name!r} refuses the histogram of a node of {len(rows)} rows: its "
                              f"policy has min_rows_per_node = {self.min_rows_per_node}")
        if not 1 <= int(msg.values) <= MAX_VALUES:
            raise ProtocolError(f"party {self.name!r}: {msg.values} values a row, expected 1 to {MAX_VALUES}")
        if self.pub is None:
            raise ProtocolError(f"party {self.name!r}: no Paillier key before a hidden histogram")
        try:  # one row a ciphertext: no garbage, no mask; the party rebuilds the layout itself
            layout = GradientLayout.for_key(self.pub, int(msg.values), int(msg.precision), len(rows), 1)
        except CryptoError as exc:
            raise ProtocolError(f"party {self.name!r}: the hidden histogram's layout is refused ({exc})") from None
        enc = EncryptedArray.from_bytes(self.pub, msg.gradients, (len(rows), layout.parts))
        used = st["features"]
        codes = self.codes[st["rows"][rows]][:, used] if self.codes is not None else None
        packed, sizes = node_histogram(enc, layout, np.arange(len(rows)), codes, bins.bin_nums[used],
                                       bins.largest_bins()[used])
        return Histograms(data=packed.to_bytes(), packages=np.asarray([len(sizes)], dtype=np.int64), allowed=[b""])

    @handles(HiddenSplitRequest)
    def on_hidden_split(self, msg: HiddenSplitRequest, ctx: Context) -> SplitMade:
        """Record a split at a node hidden under ``anchor``: which of the anchor's rows its threshold
        sends left (the label holder keeps the node's part; it learns the split over the anchor)."""
        st = self._tree(msg.tree)
        bins = self._bins()
        self._hidden_allowed()
        f, b = int(msg.feature), int(msg.bin)
        if f not in set(st["features"].tolist()):
            raise ProtocolError(f"party {self.name!r}: tree {st['id']} does not use feature {f}")
        if not 0 <= b < int(bins.bin_nums[f]) - 1:
            raise ProtocolError(f"party {self.name!r}: feature {f} has {bins.bin_nums[f]} bins; no split after bin {b}")
        rows = self._node(st, msg.anchor)
        left_over = st["hidden"].get(int(msg.anchor), 0)
        if left_over < 1:
            raise ProtocolError(f"party {self.name!r}: a split under node {msg.anchor} beyond the hidden nodes it "
                                "summed there (one split each)")
        st["hidden"][int(msg.anchor)] = left_over - 1
        left = self.codes[st["rows"][rows], f] <= b
        self.records.append((f, bins.threshold(f, b)))
        return SplitMade(record=len(self.records) - 1, left=pack_bits(left))

    def _hidden_allowed(self) -> None:
        if not self.hidden_ok:
            raise ProtocolError(f"party {self.name!r}: hidden nodes in a run that did not join with hide_own_splits")

    @handles(TreeEnd)
    def on_tree_end(self, msg: TreeEnd, ctx: Context) -> Ack:
        self._tree(msg.tree)
        self.tree = None
        return Ack()

    # ------------------------------------------------------------------------- routing
    @handles(RouteRequest)
    def on_route(self, msg: RouteRequest, ctx: Context) -> Routes:
        X = self.data.X(str(msg.split)).numpy()
        n = X.shape[0]
        rows = np.arange(n) if not msg.rows else np.flatnonzero(unpack_bits(msg.rows, n, "the rows to route"))
        recs = np.asarray(msg.records, dtype=np.int64).reshape(-1)
        if recs.size and (recs.min() < 0 or recs.max() >= len(self.records)):
            raise ProtocolError(f"party {self.name!r}: RouteRequest names records outside its {len(self.records)}")
        if not recs.size:
            return Routes(bits=b"")
        feats = np.asarray([self.records[r][0] for r in recs.tolist()], dtype=np.int64)
        thr = np.asarray([self.records[r][1] for r in recs.tolist()], dtype=np.float64)
        if feats.max() >= X.shape[1]:
            raise ProtocolError(f"party {self.name!r}: a record names feature {feats.max()} of its {X.shape[1]}")
        go = X[rows][:, feats].astype(np.float64) <= thr[None, :]  # (rows, records)
        return Routes(bits=b"".join(pack_bits(go[:, i]) for i in range(len(recs))))

    # ------------------------------------------------------------------------- the end
    @handles(Importance)
    def on_importance(self, msg: Importance, ctx: Context) -> Ack:
        gain = np.asarray(msg.gain, dtype=np.float64).reshape(-1)
        splits = np.asarray(msg.splits, dtype=np.float64).reshape(-1)
        d = len(self.data.kept)
        if gain.shape != (d,) or splits.shape != (d,) or not np.all(np.isfinite(gain)):
            raise ProtocolError(f"party {self.name!r}: Importance of shape {gain.shape}, expected {d} finite values")
        self.importance = gain
        self.tree = None  # the last tree's ciphertexts are no longer needed
        return Ack()

    def feature_scores(self) -> np.ndarray | None:
        return self.importance

    # ------------------------------------------------------------------------- saving
    def export(self) -> dict:
        return {"records": [[int(f), float(t)] for f, t in self.records]}

    @classmethod
    def restore(cls, data: LocalData, saved: dict, ctx: Context) -> SBTRole:
        role = cls(data, None, ctx)
        recs = saved.get("records", [])
        d = len(data.kept)
        if not isinstance(recs, list) or any(not (isinstance(r, list) and len(r) == 2 and 0 <= int(r[0]) < d)
                                             for r in recs):
            raise ProtocolError(f"party {data.name!r}: the saved secureboost part's records are malformed")
        role.records = [(int(f), float(t)) for f, t in recs]
        return role
