"""A malicious label holder against a real party: the party's own file, its deployment's default
policy, and nothing but the protocol's messages, each encoded and decoded by the real serde.

:func:`party` builds a :class:`~verticalfs.deploy.party.DeployedParty` exactly as ``party serve``
does (its CSV read and checked, scoring enabled, the deployment's default
:class:`~verticalfs.configuration.PartyPolicy` unless a test gives another one). :class:`Holder`
is the attacker: it reaches the party only through an in-process channel, which carries the
encoded bytes of every message both ways (the bytes a gRPC deployment sends), so nothing bypasses
the party's decoding and checks. Every field of every message is the attacker's choice.

The table: :data:`N` customers of a telecom with numbers (hours per week, age, calls, income) and
two categorical columns, their ids sparse in a range :data:`SPACE` times as large (the ids a
guessing label holder would enumerate).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from verticalfs.configuration import PartyPolicy
from verticalfs.deploy.party import Align, Aligned, DeployedParty
from verticalfs.names import LABEL_HOLDER
from verticalfs.transport.inprocess import InProcessChannel
from verticalfs.transport.ledger import Ledger
from verticalfs.transport.messages import At
from verticalfs.transport.node import Node, PartyProxy

#: customers of the party
N = 400
#: the id space the party's ids are drawn from, in multiples of N
SPACE = 30
SETUP = At("setup")
SELECTION = At("selection")
PREDICT = At("predict")
CATEGORICAL = ["plan", "region"]


def table(n: int = N, seed: int = 11) -> pd.DataFrame:
    """The party's file: ids sparse in ``range(SPACE * n)``, realistic columns."""
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(SPACE * n, n, replace=False))
    return pd.DataFrame({
        "id": [f"{i:06d}" for i in ids],
        "hours_per_week": np.clip(rng.normal(40, 12, n).round(), 1, 99).astype(int),
        "age": rng.integers(17, 91, n),
        "calls": rng.poisson(30, n),
        "income": rng.lognormal(10, 0.5, n).round(2),
        "plan": rng.choice(["basic", "plus", "pro", "family"], n, p=[0.4, 0.3, 0.2, 0.1]),
        "region": rng.choice(["north", "south", "east", "west", "centre"], n),
    })


def default_policy(**over) -> PartyPolicy:
    """The deployment's default policy, with 512-bit Paillier keys allowed (the tests are not about
    key size) and the keys of ``over``."""
    return PartyPolicy(**{"min_key_bits": 512, **over})


def party(tmp: Path, policy: PartyPolicy | None = None, *, name: str = "telecom", frame: pd.DataFrame | None = None,
          scoring: pd.DataFrame | None = None) -> DeployedParty:
    """A deployed party on its own CSV, scoring enabled (its scoring file: ``scoring`` or its file)."""
    frame = table() if frame is None else frame
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / f"{name}.csv"
    frame.to_csv(path, index=False)
    score_path = path
    if scoring is not None:
        score_path = tmp / f"{name}_scoring.csv"
        scoring.to_csv(score_path, index=False)
    policy = default_policy() if policy is None else policy
    if policy.model_dir is None:  # as a deployment sets it: models/<party> beside the deployment file
        policy = policy.model_copy(update={"model_dir": tmp / "models" / name})
    rt = DeployedParty(name, path, id_column="id", categorical=CATEGORICAL, policy=policy, state_dir=tmp / "state")
    rt.enable_scoring(score_path)
    return rt


class Holder:
    """The attacker: a label holder node on a channel that serialises every message both ways."""

    def __init__(self, runtime: DeployedParty) -> None:
        self.runtime = runtime
        self.channel = InProcessChannel()
        runtime.connect(self.channel, Ledger())
        self.channel.register(runtime.node)
        self.node = Node(LABEL_HOLDER, self.channel, Ledger())
        self.channel.register(self.node)
        self.proxy = PartyProxy(self.node, runtime.name)

    def ask(self, msg, at: At = SETUP, expect=None):
        return self.proxy.request(msg, at, expect=expect)

    def align(self, ids, train: float = 0.7) -> np.ndarray:
        """Align the party on ``ids`` (train first, then validation and test); the split codes."""
        ids = np.asarray(ids, dtype=str)
        n = len(ids)
        codes = np.zeros(n, dtype=np.int8)
        codes[int(train * n):] = 1
        codes[int((train + 1) / 2 * n):] = 2
        rep = self.ask(Align(ids=ids, split=codes, scaling="minmax", impute="none"), expect=Aligned)
        assert rep.rows_kept == n
        return codes


def r2(truth: np.ndarray, guess: np.ndarray) -> np.ndarray:
    """Per column: 1 - the guess's squared error / the squared error of predicting the column's mean
    (> 0: better than the mean; <= 0: nothing recovered). Constant columns count as 0."""
    truth = np.asarray(truth, dtype=np.float64)
    guess = np.asarray(guess, dtype=np.float64)
    base = ((truth - truth.mean(0)) ** 2).sum(0)
    err = ((truth - guess) ** 2).sum(0)
    return np.where(base > 0, 1.0 - err / np.where(base > 0, base, 1.0), 0.0)
