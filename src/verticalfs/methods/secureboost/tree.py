"""The label holder's trees: split finding over histograms (vectorised, no loop over rows or bins),
the tree structure it keeps, and routing rows down a tree from the parties' answers.

A tree is held as flat arrays, node 0 the root: ``party[i]`` (the index of the party owning the
split, -1 for a leaf), ``record[i]`` (the id of the split in that party's own lookup table: the
label holder never sees the feature's threshold), ``left[i]``, ``right[i]``, ``value[i]`` (a leaf's
``K`` values). For the importance report it also keeps, per split, the party's opaque feature id and
the gain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from verticalfs.methods.secureboost.boosting import split_gain


@dataclass
class Candidate:
    """The best split of a node: party index, opaque feature, bin (left = bins ``<= bin``), gain."""

    party: int
    feature: int
    bin: int
    gain: float


def best_split(hists: list[np.ndarray | None], bin_nums: list[np.ndarray], G: np.ndarray, H: np.ndarray,
               scale: np.ndarray, *, lam: float, alpha: float, gamma: float, min_child_weight: float,
               allowed: list[np.ndarray | None] | None = None) -> Candidate | None:
    """The split of largest gain over every party's histogram of one node, or ``None`` when no split
    gains (``gain <= 0``, or no candidate keeps ``min_child_weight`` on both sides).

    ``hists[p]``: the node's sums ``(cells, 2K)`` of party ``p`` (int64 mantissas, ``g`` then ``h``,
    features in order and bins in order; ``None``: the party takes no part), ``bin_nums[p]`` its bins
    per feature (0 for a feature the tree does not use), ``G, H`` the node's sums ``(K,)`` (float),
    ``scale`` ``(2K,)`` the value of one mantissa unit of each column; ``allowed[p]``: per cell, may a
    split after it be made (the party's minimum rows per node). Ties go to the first party, feature
    and bin.
    """
    best: Candidate | None = None
    K = G.shape[0]
    for p, S in enumerate(hists):
        if S is None or not len(S):
            continue
        nums = np.asarray(bin_nums[p], dtype=np.int64)
        ends = np.cumsum(nums)
        cum = np.cumsum(S, axis=0)  # exact int64 prefix sums, then per feature
        start = np.repeat(ends - nums, nums)
        before = np.where(start[:, None] > 0, cum[np.maximum(start - 1, 0)], 0)
        left = (cum - before).astype(np.float64) * scale[None, :]
        GL, HL = left[:, :K], left[:, K:]
        gain = split_gain(GL, HL, G, H, lam, alpha, gamma)
        last = np.zeros(len(S), dtype=bool)
        last[ends[nums > 0] - 1] = True  # a split after a feature's last bin leaves its right side empty
        hl, hr = HL.sum(1), (H - HL).sum(1)
        ok = ~last & (hl >= min_child_weight) & (hr >= min_child_weight) & np.isfinite(gain)
        if allowed is not None and allowed[p] is not None:
            ok &= allowed[p]
        if not ok.any():
            continue
        gain = np.where(ok, gain, -np.inf)
        c = int(np.argmax(gain))
        if gain[c] > 0 and (best is None or gain[c] > best.gain):
            f = int(np.searchsorted(ends, c, side="right"))
            best = Candidate(p, f, int(c - (ends[f] - nums[f])), float(gain[c]))
    return best


@dataclass
class Tree:
    """One boosted tree as the label holder holds it (see the module docstring)."""

    K: int
    party: list[int] = field(default_factory=list)
    record: list[int] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    right: list[int] = field(default_factory=list)
    value: list[list[float]] = field(default_factory=list)
    feature: list[int] = field(default_factory=list)  # the party's feature index of a split
    bin: list[int] = field(default_factory=list)  # ... and the bin it splits after (the threshold stays there)
    gain: list[float] = field(default_factory=list)

    def add(self) -> int:
        self.party.append(-1)
        self.record.append(-1)
        self.left.append(-1)
        self.right.append(-1)
        self.value.append([0.0] * self.K)
        self.feature.append(-1)
        self.bin.append(-1)
        self.gain.append(0.0)
        return len(self.party) - 1

    @property
    def n_nodes(self) -> int:
        return len(self.party)

    def leaves(self) -> np.ndarray:
        return np.flatnonzero(np.asarray(self.party) < 0)

    def records_of(self, party: int) -> list[int]:
        """The lookup-table ids of ``party``'s splits in this tree, in node order."""
        return [r for p, r in zip(self.party, self.record, strict=True) if p == party]

    def route(self, n: int, decisions: dict[int, dict[int, np.ndarray]]) -> np.ndarray:
        """The leaf (node index) of each of ``n`` rows, from the parties' answers: ``decisions[p][r]``
        a bool vector (``True``: left) of party ``p``'s split ``r`` on every row. Vectorised by
        level: at most ``depth`` steps over the rows."""
        at = np.zeros(n, dtype=np.int64)
        party = np.asarray(self.party, dtype=np.int64)
        for _ in range(self.n_nodes):
            inner = party[at] >= 0
            if not inner.any():
                break
            for node in np.unique(at[inner]).tolist():
                rows = np.flatnonzero(at == node)
                go = decisions[self.party[node]][self.record[node]][rows]
                at[rows] = np.where(go, self.left[node], self.right[node])
        return at

    def to_dict(self) -> dict:
        return {"K": self.K, "party": list(self.party), "record": list(self.record), "left": list(self.left),
                "right": list(self.right), "value": [list(map(float, v)) for v in self.value],
                "feature": list(self.feature), "bin": list(self.bin), "gain": [float(v) for v in self.gain]}

    @classmethod
    def from_dict(cls, d: dict) -> Tree:
        t = cls(int(d["K"]))
        t.party = [int(v) for v in d["party"]]
        t.record = [int(v) for v in d["record"]]
        t.left = [int(v) for v in d["left"]]
        t.right = [int(v) for v in d["right"]]
        t.value = [[float(x) for x in v] for v in d["value"]]
        n = len(t.party)
        for k in (t.party, t.record, t.left, t.right, t.value):
            if len(k) != n:
                raise ValueError("a saved tree's lists differ in length")
        t.feature = [int(v) for v in d.get("feature", [-1] * n)]
        t.bin = [int(v) for v in d.get("bin", [-1] * n)]
        t.gain = [float(v) for v in d.get("gain", [0.0] * n)]
        return t
