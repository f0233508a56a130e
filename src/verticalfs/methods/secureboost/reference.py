"""The central reference of ``secureboost``: a plain histogram GBDT on the pooled columns, written
for reading, not speed (issue 51 item 2: the federated trees must equal it).

It bins each party's columns with the party's rule (:class:`~verticalfs.histogram.BinTable`, the same
``n_bins`` and minimum rows per bin), rounds ``g`` and ``h`` as the label holder does
(:func:`~verticalfs.histogram.gradients.quantize`), and grows each tree level by level, node by node,
trying every party, feature and bin in that order with the gain of :mod:`.boosting`; a node is split
by the first candidate of largest positive gain that keeps ``min_child_weight`` and the parties'
minimum rows on each side. Nothing is encrypted, packed, subtracted or sent: the histogram of a node is
a plain sum over its rows. The federated run reaches the same integers by another road, so equal trees
and predictions test the protocol (packing, sums, subtraction, instance spaces, lookup tables, routing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from verticalfs.histogram import BinTable
from verticalfs.histogram.gradients import quantize
from verticalfs.methods.secureboost import boosting as B


@dataclass
class RefTree:
    """A tree of the reference: per node the (party, feature, bin, threshold) of its split or its
    leaf value, and the training rows (positions in the tree's rows) it holds."""

    split: dict[int, tuple[int, int, int, float]] = field(default_factory=dict)
    children: dict[int, tuple[int, int]] = field(default_factory=dict)
    value: dict[int, np.ndarray] = field(default_factory=dict)
    rows: dict[int, np.ndarray] = field(default_factory=dict)
    gain: dict[int, float] = field(default_factory=dict)


class CentralGBDT:
    """A histogram GBDT over the pooled columns of every party.

    Parameters
    ----------
    params : SecureBoostParams
        The same parameters as the federated run (keys and packing are ignored).
    task, n_classes : str, int
    min_rows_per_bin, min_rows_per_node : int
        The parties' policies (the same for every party here).
    seed : int
        The run's seed (row and column sampling).
    own_party : str, optional
        The label holder's own party (the first ``rl_trees`` trees split on its columns alone).
    """

    def __init__(self, params, task: str, n_classes: int, *, min_rows_per_bin: int = 1, min_rows_per_node: int = 1,
                 seed: int = 0, own_party: str | None = None) -> None:
        self.p = params
        self.task = task
        self.n_classes = int(n_classes or 1)
        self.K = B.n_outputs(task, self.n_classes)
        self.min_rows_per_bin = int(min_rows_per_bin)
        self.min_rows_per_node = int(min_rows_per_node)
        self.seed = int(seed)
        self.own_party = own_party
        self.trees: list[RefTree] = []

    def fit(self, X: dict[str, np.ndarray], y: np.ndarray, X_val: dict[str, np.ndarray] | None = None,
            y_val: np.ndarray | None = None) -> CentralGBDT:
        p = self.p
        self.parties = list(X)
        self.bins = {q: BinTable(np.asarray(X[q]), int(p.n_bins), self.min_rows_per_bin) for q in self.parties}
        codes = {q: self.bins[q].codes(np.asarray(X[q])).astype(np.int64) for q in self.parties}
        y = np.asarray(y)
        n = len(y)
        self.base = B.base_score(self.task, y, self.n_classes)
        F = np.tile(self.base, (n, 1))
        best, best_loss, Fv = -1, np.inf, None
        if X_val is not None and y_val is not None and len(y_val):
            Fv = np.tile(self.base, (len(y_val), 1))
        for t in range(int(p.n_estimators)):
            rows = B.sample_rows(self.seed, t, n, float(p.subsample))
            g, h = B.gradients(self.task, F[rows], y[rows])
            Mg, Mh, sg, sh = quantize(g, h, int(p.precision))
            feats = B.sample_features(self.seed, t, {q: codes[q].shape[1] for q in self.parties},
                                      float(p.colsample_bytree))
            parties = [self.own_party] if t < int(p.rl_trees) else self.parties
            tree = self._grow({q: codes[q][rows] for q in parties}, feats, Mg, Mh, sg, sh)
            leaf = np.empty(len(rows), dtype=np.int64)
            for node, r in tree.rows.items():
                if node not in tree.split:
                    leaf[r] = node
            n_nodes = max(tree.rows) + 1
            values = B.leaf_values(g, h, leaf, n_nodes, float(p.reg_lambda), float(p.reg_alpha),
                                   float(p.learning_rate))
            for node in tree.rows:
                if node not in tree.split:
                    tree.value[node] = values[node]
            self.trees.append(tree)
            F += self._tree_output(tree, X, len(y))
            if Fv is not None:
                Fv += self._tree_output(tree, X_val, len(y_val))
                loss = B.loss_value(self.task, Fv, y_val)
                if loss < best_loss - 1e-12:
                    best, best_loss = t, loss
                if p.early_stopping_rounds and t - best >= int(p.early_stopping_rounds):
                    break
        if p.early_stopping_rounds and best >= 0:
            self.trees = self.trees[: best + 1]
        return self

    def _grow(self, codes: dict[str, np.ndarray], feats: dict[str, np.ndarray], Mg: np.ndarray, Mh: np.ndarray,
              sg: float, sh: float) -> RefTree:
        p = self.p
        P = int(p.precision)
        K = self.K
        tree = RefTree()
        tree.rows[0] = np.arange(len(Mg))
        frontier, next_id = [0], 1
        for _depth in range(int(p.max_depth)):
            children = []
            for node in frontier:
                rows = tree.rows[node]
                if len(rows) < 2:
                    continue
                Gs = Mg[rows].sum(0).astype(np.float64) * sg * 2.0 ** -P
                Hs = Mh[rows].sum(0).astype(np.float64) * sh * 2.0 ** -P
                best = None
                for pi, q in enumerate(self.parties):
                    if q not in codes or len(rows) < max(2 * self.min_rows_per_node, 2):
                        continue
                    C = codes[q][rows]
                    for f in np.flatnonzero(feats[q]).tolist():
                        nb = int(self.bins[q].bin_nums[f])
                        for b in range(nb - 1):
                            go = C[:, f] <= b
                            nl = int(go.sum())
                            if nl < self.min_rows_per_node or len(rows) - nl < self.min_rows_per_node:
                                continue
                            GL = Mg[rows][go].sum(0).astype(np.float64) * sg * 2.0 ** -P
                            HL = Mh[rows][go].sum(0).astype(np.float64) * sh * 2.0 ** -P
                            if HL.sum() < p.min_child_weight or (Hs - HL).sum() < p.min_child_weight:
                                continue
                            gain = float(B.split_gain(GL[None], HL[None], Gs, Hs, float(p.reg_lambda),
                                                      float(p.reg_alpha), float(p.gamma))[0])
                            if gain > 0 and (best is None or gain > best[0]):
                                best = (gain, pi, f, b)
                if best is None:
                    continue
                gain, pi, f, b = best
                q = self.parties[pi]
                go = codes[q][rows, f] <= b
                a, c = next_id, next_id + 1
                next_id += 2
                tree.split[node] = (pi, f, b, self.bins[q].threshold(f, b))
                tree.children[node] = (a, c)
                tree.gain[node] = gain
                tree.rows[a], tree.rows[c] = rows[go], rows[~go]
                children += [a, c]
            frontier = children
        assert K == Mg.shape[1]
        return tree

    def _tree_output(self, tree: RefTree, X: dict[str, np.ndarray], n: int) -> np.ndarray:
        out = np.zeros((n, self.K))
        for i in range(n):  # plain: one row at a time down the tree
            node = 0
            while node in tree.split:
                pi, f, _b, thr = tree.split[node]
                node = tree.children[node][0 if float(X[self.parties[pi]][i, f]) <= thr else 1]
            out[i] = tree.value[node]
        return out

    def predict_margins(self, X: dict[str, np.ndarray]) -> np.ndarray:
        n = len(next(iter(X.values())))
        F = np.tile(self.base, (n, 1))
        for tree in self.trees:
            F += self._tree_output(tree, X, n)
        return F

    def output(self, X: dict[str, np.ndarray]) -> np.ndarray:
        return B.output(self.task, self.predict_margins(X))
