"""What a party checks in what it computes, besides what a request asks (issue 50).

The party policy (:class:`~verticalfs.configuration.PartyPolicy`) already refuses requests by
what they ask for (raw columns, small keys, plaintext modes). A label holder that follows the
protocol's message formats can still choose every *parameter* and every *plaintext* it sends; this
module holds the party's checks of those, as small functions the party's runtime and roles call
before any work (each can become a layer of the declared dispatch):

- :func:`check_finding`: methods with an open finding of the security review (a raw column or a
  row's bin a label holder can obtain with the protocol's own messages) are refused at ``Join``,
  naming the finding, unless the policy lists it in ``allow_findings`` (:data:`FINDINGS`);
- :func:`check_split_spec`: the floors of a split-learning bottom model (non-linear hidden layers,
  the embedding's width as a fraction of the input's, learning-rate and batch-size ranges);
- :func:`own_seeds`: the seeds of the party's own randomness replaced by OS entropy
  (``own_randomness``), and :func:`reseed` after a checkpoint is restored;
- :func:`paillier_choice`: the party's own Paillier back end and randomness;

Each refusal is one :class:`~verticalfs.exceptions.PolicyError` line naming the party, the rule
and the key to change (:func:`verticalfs.party.refusal`).
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from verticalfs.exceptions import PolicyError

if TYPE_CHECKING:
    from verticalfs.configuration import PartyPolicy


@dataclass(frozen=True)
class Finding:
    """An open finding of the security review: what a malicious label holder obtains, and where it is shown."""

    id: str
    methods: tuple[str, ...]
    what: str
    test: str
    #: only for specs with these field values (e.g. a plaintext mode); empty: every spec
    when: tuple[tuple[str, Any], ...] = ()


#: the open findings by id (docs/security.md's threat model lists them; a test keeps the two equal).
#: FedSDG-FS's plaintext mode has one too (one open input's embeddings are affine in that column,
#: docs/privacy-audit.md): ``require_secure`` refuses that mode already.
FINDINGS: dict[str, Finding] = {f.id: f for f in (
    Finding("lasso-weight-update", ("fate-lasso",),
            "the party applies the weight update the label holder decrypts for it (GradientResult) unchecked: "
            "returning the mask plus a chosen vector sets the party's weights to a unit vector, and its next "
            "partial predictor is a raw column",
            "tests/attacks/test_lasso.py"),
    Finding("compfs-single-feature", ("compfs",),
            "a learner whose hard mask keeps one feature sends that feature's first-layer pre-activations: an "
            "affine function of the raw column (docs/privacy-audit.md, open findings)",
            "tests/test_privacy.py"),
    Finding("secureboost-gradients", ("secureboost", "sbt-filter"),
            "the party sums gradients it cannot check (real numbers, encrypted under the label holder's key): "
            "crafted values (1 for one row, 0 for the others) read that row's bin of every feature at a node the "
            "label holder asks about, from the histograms SecureBoost returns by design; nothing of a row outside "
            "the node's instance space",
            "tests/attacks/test_secureboost_attacks.py"),
    Finding("autoencoder-codes", ("autoencoder",),
            "the uploaded codes carry the party's columns (one code is monotone in a column on the audit's data; "
            "docs/privacy-audit.md, open findings)",
            "tests/test_privacy.py"),
)}


def findings_of(method: str, spec: Any = None) -> list[Finding]:
    """The open findings that apply to joining ``method`` with ``spec``."""
    out = []
    for f in FINDINGS.values():
        if method not in f.methods:
            continue
        if f.when and spec is not None and not all(getattr(spec, k, v) == v for k, v in f.when):
            continue
        out.append(f)
    return out


def _refusal(party: str, rule: str, value: Any, what: str, fix: str) -> PolicyError:
    from verticalfs.dispatch import refusal

    return refusal(party, rule, value, what, fix)


def check_finding(policy: PartyPolicy, party: str, method: str, spec: Any) -> None:
    """Refuse ``method`` if an open finding applies to it and the policy does not allow it."""
    allowed = set(policy.allow_findings)
    for f in findings_of(method, spec):
        if "all" not in allowed and f.id not in allowed:
            raise _refusal(party, "allow_findings", list(policy.allow_findings),
                           f"join method {method!r}, which has the open finding {f.id!r} ({f.what})",
                           f"to accept it, add \"{f.id}\"")


# ------------------------------------------------------------------------ split-learning floors
#: the fields that make a spec a split-learning bottom model's (``verticalfs.training.split.SplitSpec``
#: and its subclasses; read by name: this module sits below the training code)
SPLIT_FIELDS = ("hidden", "embedding_dim", "activation", "lr", "batch_size", "shuffle_seed")


def _is_split_spec(spec: Any) -> bool:
    return dataclasses.is_dataclass(spec) and all(hasattr(spec, f) for f in SPLIT_FIELDS)


def max_embedding(policy: PartyPolicy, d_in: int) -> int | None:
    """The widest embedding the policy allows on ``d_in`` inputs (``None``: no limit)."""
    frac = policy.max_embedding_fraction
    return None if frac is None else int(math.floor(float(frac) * int(d_in) + 1e-9))


def check_split_spec(policy: PartyPolicy, party: str, method: str, spec: Any, d_in: int) -> None:
    """The floors of a bottom model the label holder proposes (a :class:`~verticalfs.training.split.SplitSpec`):
    non-linear hidden layers, the embedding's width, the learning rates and the batch size."""
    if not _is_split_spec(spec):
        return
    hidden = tuple(int(h) for h in spec.hidden)
    least = int(policy.min_hidden_layers)
    if len(hidden) < least:
        raise _refusal(party, "min_hidden_layers", least,
                       f"train a bottom model with {len(hidden)} hidden layer(s) (method {method!r}: hidden = "
                       f"{list(hidden)}); with known weights its embeddings give the raw columns",
                       f"propose at least {least} (e.g. hidden = [64]), or lower it")
    top = max_embedding(policy, d_in)
    emb = int(spec.embedding_dim)
    if top is not None and emb > top:
        raise _refusal(party, "max_embedding_fraction", policy.max_embedding_fraction,
                       f"send embeddings of width {emb} computed from its {d_in} features (method {method!r}; at most "
                       f"{top} allowed): an embedding that wide can be inverted",
                       f"propose embedding_dim <= {top}, or raise it")
    for name in ("lr", "gate_lr", "gan_lr"):
        v = getattr(spec, name, None)
        if v is None or (name != "lr" and float(v) == 0.0):
            continue
        v = float(v)
        if not math.isfinite(v) or v < policy.min_lr:
            raise _refusal(party, "min_lr", policy.min_lr, f"train with {name} = {v:g} (method {method!r})",
                           "propose a larger rate, or lower it")
        if policy.max_lr is not None and v > policy.max_lr:
            raise _refusal(party, "max_lr", policy.max_lr, f"train with {name} = {v:g} (method {method!r})",
                           "propose a smaller rate, or raise it")
    bs = int(spec.batch_size)
    if bs < policy.min_batch_size:
        raise _refusal(party, "min_batch_size", policy.min_batch_size,
                       f"train on mini-batches of {bs} rows (method {method!r})",
                       "propose larger batches, or lower it")
    if policy.max_batch_size is not None and bs > policy.max_batch_size:
        raise _refusal(party, "max_batch_size", policy.max_batch_size,
                       f"train on mini-batches of {bs} rows (method {method!r})",
                       "propose smaller batches, or raise it")


# ---------------------------------------------------------------------------------- randomness
def own_seeds(policy: PartyPolicy, seeds: tuple[str, ...], seed_bits: dict[str, int], spec: Any) -> Any:
    """``spec`` with the seeds of the party's own randomness (``seeds``, a role's ``party_seeds``;
    ``seed_bits``: those whose consumer takes fewer bits than 63, numpy's 32) replaced by
    63 bits of OS entropy each when the policy says ``own_randomness``; the spec as given otherwise
    (in-process runs: reproducible from the run's seed). The shared seeds (the mini-batch plans both
    sides derive) are never replaced."""
    names = tuple(seeds)
    if not policy.own_randomness or not names or not dataclasses.is_dataclass(spec):
        return spec
    present = {f.name for f in dataclasses.fields(spec)}
    bits = dict(seed_bits)
    return dataclasses.replace(spec, **{n: secrets.randbits(int(bits.get(n, 63))) for n in names if n in present})


def reseed(obj: Any, *, depth: int = 4, _seen: set[int] | None = None) -> int:
    """Give every random generator reachable from ``obj`` (attributes, modules, lists, dicts; torch
    and numpy generators) a fresh state from OS entropy, and the process's global torch and numpy
    generators too: a party restored from a checkpoint must not replay the noise it drew before
    (a label holder could rewind it and cancel its masks). Returns the generators reseeded."""
    import torch

    seen = set() if _seen is None else _seen
    count = 0
    if _seen is None:
        torch.manual_seed(secrets.randbits(63))
        np.random.seed(secrets.randbits(32))
    if id(obj) in seen or depth < 0:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Generator):
        obj.manual_seed(secrets.randbits(63))
        return 1
    if isinstance(obj, np.random.Generator):
        obj.bit_generator.state = type(obj.bit_generator)(secrets.randbits(128)).state
        return 1
    if isinstance(obj, np.random.RandomState):
        obj.seed(secrets.randbits(32))
        return 1
    if isinstance(obj, (str, bytes, int, float, bool, np.ndarray, torch.Tensor)) or obj is None:
        return 0
    if isinstance(obj, dict):
        items: list[Any] = list(obj.values())
    elif isinstance(obj, (list, tuple, set)):
        items = list(obj)
    elif hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
        if isinstance(obj, torch.nn.Module):
            items += list(obj.children())
    else:
        return 0
    for v in items:
        count += reseed(v, depth=depth - 1, _seen=seen)
    return count


def paillier_choice(policy: PartyPolicy, spec: Any) -> Any:
    """``spec`` with the party's own Paillier back end and randomness (for the keys it makes and its
    encryptions), where the policy sets them."""
    if not dataclasses.is_dataclass(spec):
        return spec
    present = {f.name for f in dataclasses.fields(spec)}
    changes: dict[str, Any] = {}
    if "randomness" in present and policy.paillier_randomness is not None:
        changes["randomness"] = policy.paillier_randomness
    if "backend" in present and policy.paillier_backend is not None:
        changes["backend"] = policy.paillier_backend
    return dataclasses.replace(spec, **changes) if changes else spec


def merged_boundaries(counts: Any, min_rows: int) -> np.ndarray:
    """The boundaries to keep between ``len(counts)`` adjacent bins (boundary ``i`` separates bins
    ``i`` and ``i + 1``) so that every merged bin holds at least ``min_rows`` rows: the smallest bin
    is merged with its smaller neighbour until none is below (or one bin is left). Deterministic:
    ties go to the lower bin."""
    c = [int(v) for v in np.asarray(counts).reshape(-1)]
    keep = list(range(len(c) - 1))
    while len(c) > 1 and min(c) < int(min_rows):
        i = int(np.argmin(c))
        if i == 0:
            j = 0
        elif i == len(c) - 1:
            j = i - 1
        else:
            j = i - 1 if c[i - 1] <= c[i + 1] else i
        c[j:j + 2] = [c[j] + c[j + 1]]
        del keep[j]
    return np.asarray(keep, dtype=np.int64)


#: the policy keys a party reports in its TrustReport
TRUST_KEYS = ("verify_labels", "min_label_rows", "min_hidden_layers", "max_embedding_fraction", "min_lr", "max_lr",
              "min_batch_size", "max_batch_size", "max_bins", "min_bin_rows", "max_classes", "own_randomness",
              "max_epsilon", "allow_findings", "own_models_only")


# ------------------------------------------------------------------------------ DP at the party
def check_dp(policy: PartyPolicy, party: str, method: str, dp_capable: bool, spec: Any) -> None:
    """Under ``max_epsilon``: refuse a method whose party-side training is not DP-SGD (a role without
    ``dp_capable``, or a spec without noise)."""
    if policy.max_epsilon is None:
        return
    noise = float(getattr(spec, "dp_noise", 0.0) or 0.0)
    if not dp_capable or noise <= 0:
        raise _refusal(party, "max_epsilon", policy.max_epsilon,
                       f"join method {method!r} without DP-SGD at the party (noise {noise:g})",
                       "use a method with DP (icafs with dp_epsilon), or remove it")


def dp_steps_allowed(policy: PartyPolicy, party: str, noise: float, rate: float, per_epoch: int) -> int | None:
    """The most noisy steps (noise multiplier ``noise``, Poisson rate ``rate``) the party takes
    within ``max_epsilon`` at ``dp_delta`` by Opacus's RDP accountant; a spec whose noise cannot
    give one epoch (``per_epoch`` steps) is refused. ``None``: no limit (no ``max_epsilon``)."""
    if policy.max_epsilon is None:
        return None
    import warnings

    from opacus.accountants import RDPAccountant

    eps_max, delta = float(policy.max_epsilon), float(policy.dp_delta)

    def eps(steps: int) -> float:
        acc = RDPAccountant()
        acc.history = [(float(noise), float(rate), int(steps))]
        with warnings.catch_warnings():  # few steps: the best order is the largest Opacus tries
            warnings.filterwarnings("ignore", "Optimal order is the largest alpha")
            return float(acc.get_epsilon(delta=delta))

    one = eps(per_epoch)
    if one > eps_max:
        raise _refusal(party, "max_epsilon", policy.max_epsilon,
                       f"train with noise multiplier {noise:g}: one epoch ({per_epoch} steps at rate {rate:.4g}) "
                       f"already spends epsilon {one:.3g} at delta {delta:g}",
                       "ask for more noise (a smaller dp_epsilon), or raise it")
    lo, hi = per_epoch, per_epoch
    while eps(hi) <= eps_max and hi < 1 << 30:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if eps(mid) <= eps_max else (lo, mid)
    return lo


# ------------------------------------------------------------------------------ own secrets
def secret_file(folder: Any, name: str) -> bytes:
    """A 32-byte secret of the party's own: ``<folder>/<name>`` (made on first use, mode 0600, in a
    folder of mode 0700), never sent to anyone."""
    from pathlib import Path

    from verticalfs.utils.io import write_bytes_atomic

    path = Path(folder) / name
    if not path.is_file():
        Path(folder).mkdir(parents=True, exist_ok=True, mode=0o700)
        write_bytes_atomic(path, secrets.token_bytes(32).hex().encode(), mode=0o600)
    return bytes.fromhex(path.read_text().strip())


def private_tree(folder: Any) -> None:
    """``folder`` and every folder under it mode 0700, every file 0600 (a party's prepared rows)."""
    import os
    from pathlib import Path

    root = Path(folder)
    if not root.exists():
        return
    os.chmod(root, 0o700)
    for p in root.rglob("*"):
        os.chmod(p, 0o700 if p.is_dir() else 0o600)


# -------------------------------------------------------------------------- membership (PSI)
#: ``"auto"`` PSI limits, in multiples of the party's own rows (its training file's for training's
#: PSI and ``Align``, its scoring file's for scoring): one request, one session, one day
AUTO_PSI = {"max_psi_ids": 10, "psi_ids_per_session": 10, "psi_ids_per_day": 20}


def psi_limit(policy: PartyPolicy, key: str, rows: int) -> int:
    """The limit of PSI key ``key`` (``max_psi_ids``, ``psi_ids_per_session``, ``psi_ids_per_day``) for a
    party of ``rows`` rows: the policy's number, or :data:`AUTO_PSI` times ``rows`` for ``"auto"``."""
    v = getattr(policy, key)
    return int(AUTO_PSI[key]) * max(1, int(rows)) if v == "auto" else int(v)


class _Shown:
    """A policy value as a refusal shows it, verbatim (not re-quoted)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __format__(self, spec: str) -> str:
        return self.text


def _limit_text(policy: PartyPolicy, key: str, rows: int) -> Any:
    v = getattr(policy, key)
    if v != "auto":
        return v
    return _Shown(f"\"auto\" ({AUTO_PSI[key]} x its {rows} rows = {psi_limit(policy, key, rows)})")


class PsiState:
    """What a party counts of the ids a label holder claims, shared by every session of the party:
    ids claimed per day (kept in ``psi-ids.json`` in its working folder,
    so a restart does not reset them), and the ids it offered in its last scoring PSI (``StageIds``
    stages only those: ``scoring_psi.npy``). Session counts live on each session's runtime."""

    def __init__(self, folder: Any = None) -> None:
        import threading
        from pathlib import Path

        self.folder = None if folder is None else Path(folder)
        self._lock = threading.Lock()
        self._day: str | None = None
        self._day_ids = 0
        self._offered: np.ndarray | None = None

    @staticmethod
    def _today() -> str:
        import datetime

        return datetime.datetime.now(datetime.timezone.utc).date().isoformat()

    def _load_day(self) -> None:
        import json

        today = self._today()
        if self._day == today:
            return
        self._day, self._day_ids = today, 0
        if self.folder is not None:
            try:
                saved = json.loads((self.folder / "psi-ids.json").read_text())
                if saved.get("day") == today:
                    self._day_ids = int(saved.get("ids", 0))
            except (OSError, ValueError, TypeError):
                pass

    def _save_day(self) -> None:
        import json

        if self.folder is None:
            return
        from verticalfs.utils.io import write_bytes_atomic

        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_bytes_atomic(self.folder / "psi-ids.json",
                           json.dumps({"day": self._day, "ids": self._day_ids}).encode(), mode=0o600)

    def day_ids(self) -> int:
        with self._lock:
            self._load_day()
            return self._day_ids

    def charge_day(self, n: int) -> None:
        with self._lock:
            self._load_day()
            self._day_ids += int(n)
            self._save_day()

    # ---------------------------------------------------------------- the last scoring PSI
    def offer(self, ids: Any) -> None:
        """The ids (a text array) the party offered in a scoring PSI just answered."""
        arr = np.sort(np.asarray(ids).astype(str)) if len(ids) else np.zeros(0, dtype=str)
        with self._lock:
            self._offered = arr
            if self.folder is not None:
                import io

                from verticalfs.utils.io import write_bytes_atomic

                self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                buf = io.BytesIO()
                np.save(buf, arr, allow_pickle=False)
                write_bytes_atomic(self.folder / "scoring_psi.npy", buf.getvalue(), mode=0o600)

    def offered(self) -> np.ndarray | None:
        """The ids of the last scoring PSI (``None``: the party answered none)."""
        with self._lock:
            if self._offered is None and self.folder is not None:
                try:
                    arr = np.load(self.folder / "scoring_psi.npy", allow_pickle=False)
                    if arr.dtype.kind == "U" and arr.ndim == 1:
                        self._offered = arr
                except (OSError, ValueError):
                    pass
            return self._offered


def in_sorted(sorted_ids: np.ndarray, ids: Any) -> np.ndarray:
    """Which of ``ids`` are in the sorted text array ``sorted_ids``."""
    q = np.asarray(ids).astype(str) if len(ids) else np.zeros(0, dtype=str)
    if not len(sorted_ids) or not len(q):
        return np.zeros(len(q), dtype=bool)
    j = np.minimum(np.searchsorted(sorted_ids, q), len(sorted_ids) - 1)
    return np.asarray(sorted_ids[j] == q)


__all__ = [
    "TRUST_KEYS",
    "AUTO_PSI",
    "FINDINGS",
    "Finding",
    "PsiState",
    "check_dp",
    "check_finding",
    "check_split_spec",
    "dp_steps_allowed",
    "findings_of",
    "in_sorted",
    "max_embedding",
    "merged_boundaries",
    "own_seeds",
    "paillier_choice",
    "private_tree",
    "psi_limit",
    "reseed",
    "secret_file",
]
