"""What each registered method does in a deployment whose parties keep the default policy (issue 50).

:func:`default_status` reads the method's class (its party role, its parameters' defaults, its
open findings) and the default :class:`~verticalfs.configuration.PartyPolicy`, and says whether
``verticalfs run --config deployment.toml -m METHOD`` runs within the parties' floors or is refused,
by which rule and why. :func:`markdown` is the table of ``docs/reference/deployment-status.md``
(``python -m verticalfs.methods.deployable --write docs/reference/deployment-status.md``); a test
keeps the page equal to it, and a slow test runs every method over real party processes and checks
each row (``tests/deploy/test_every_method.py``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from verticalfs.configuration import PartyPolicy


@dataclass(frozen=True)
class Status:
    """``runs``: True (within the floors), False (refused), None (not a federated method)."""

    runs: bool | None
    rule: str
    why: str


def default_status(name: str, policy: PartyPolicy | None = None) -> Status:
    """What the parties' ``policy`` (default: the deployment's default) make of method ``name``
    with its default parameters."""
    from verticalfs.methods import registry
    from verticalfs.methods.fedsdg_fs.baselines import SFFSRole
    from verticalfs.methods.fedsdg_fs.role import GiniParty
    from verticalfs.methods.filter import ColumnsOnlyRole, FilterMethod
    from verticalfs.methods.sparsevfl.khan import KhanRole
    from verticalfs.party import POLICY_RULES, policy_allows
    from verticalfs.training.split import SplitRole
    from verticalfs.trust import findings_of

    pol = PartyPolicy() if policy is None else policy
    cls = registry.get(name)
    if cls.needs_pooled_data:
        return Status(None, "-", "a reference on pooled data in one process: not federated, not runnable in a "
                                 "deployment")
    role = cls.Role
    params = cls.Params()
    if role is not None and issubclass(role, ColumnsOnlyRole) and not pol.release_columns:
        return Status(False, "release_columns", "its protocol is sending the raw columns")
    for f in findings_of(name, params):
        if "all" not in pol.allow_findings and f.id not in pol.allow_findings:
            return Status(False, "allow_findings", f"open finding `{f.id}`: {f.what}")
    if role is not None:
        for rule in role.policy_rules(params):
            if not policy_allows(pol, rule):
                return Status(False, rule, f"with its default parameters it would {POLICY_RULES[rule]}")
    notes = []
    if pol.max_epsilon is not None and (role is None or not role.dp_capable):
        return Status(False, "max_epsilon", "no DP-SGD at the party")
    if role is not None and issubclass(role, SplitRole):
        hidden = tuple(getattr(params, "hidden", ()) or ())
        if len(hidden) < pol.min_hidden_layers:
            return Status(False, "min_hidden_layers",
                          f"its bottom model has {len(hidden)} hidden layer(s) by default (the paper's); it runs with "
                          f"`--param hidden=64` (one non-linear hidden layer)")
        lr = float(getattr(params, "lr", 0.0))
        if lr < pol.min_lr or (pol.max_lr is not None and lr > pol.max_lr):
            return Status(False, "max_lr" if pol.max_lr is not None and lr > pol.max_lr else "min_lr",
                          f"its learning rate {lr:g}")
        bs = int(getattr(params, "batch_size", pol.min_batch_size))
        if bs < pol.min_batch_size or (pol.max_batch_size is not None and bs > pol.max_batch_size):
            return Status(False, "min_batch_size" if bs < pol.min_batch_size else "max_batch_size",
                          f"its batch size {bs}")
        emb = int(getattr(params, "embedding_dim", 1))
        if pol.max_embedding_fraction is not None:
            need = int(-(-emb // pol.max_embedding_fraction))
            notes.append(f"a party of fewer than {need} features gets an embedding narrower than {emb}, at most "
                         f"{pol.max_embedding_fraction:g} of its features (the label holder proposes it; a party "
                         "of one feature cannot join: `max_embedding_fraction`)")
        notes.append("the party draws its own initialisation (`own_randomness`)")
    if role is not None and issubclass(role, KhanRole):
        emb = int(getattr(params, "embedding_dim", 1))
        if pol.max_embedding_fraction is not None:
            notes.append(f"each party needs at least {int(-(-emb // pol.max_embedding_fraction))} features for "
                         f"{emb} components (`max_embedding_fraction`)")
    if role is not None and issubclass(role, (GiniParty, SFFSRole)) or name == "fate-iv":
        if pol.verify_labels:
            notes.append("the label holder proves every label ciphertext and the class totals (`verify_labels`; "
                         f"classes of at least {pol.min_label_rows} rows), bins of at least {pol.min_bin_rows} rows")
    if name in ("secureboost", "sbt-filter"):
        notes.append(f"every bin of at least `min_rows_per_bin` ({pol.min_rows_per_bin}) rows, no histogram of a node "
                     f"under `min_rows_per_node` ({pol.min_rows_per_node}); the values the label holder encrypts are "
                     "not proven (see the threat model)")
    if role is not None and "accept_labels" in role.policy_rules(params):
        notes.append("the party receives the labels in the clear (`accept_labels = true`, the paper's design)")
    if issubclass(cls, FilterMethod) and not cls.selects_all and not pol.release_columns:
        notes.append(f"the parties select, then the label holder trains `{name}+vfl` on the selected columns "
                     "(`release_columns = false`)")
    return Status(True, "-", "; ".join(notes) if notes else "within the floors")


def markdown(policy: PartyPolicy | None = None) -> str:
    from verticalfs.methods import available

    rows = ["# Methods under the default party policy", "",
            "<!-- generated by `python -m verticalfs.methods.deployable --write docs/reference/deployment-status.md`"
            " from the method registry and the default PartyPolicy; do not edit -->", "",
            "What `verticalfs run --config deployment.toml -m METHOD` does, with the method's default parameters, "
            "when every feature party keeps the default policy ([security model](../security.md)). A refused "
            "method is refused before any work with one line naming the party and the rule; a party may change "
            "the rule in its policy. Checked method by method over real party processes by "
            "`tests/deploy/test_every_method.py`.", "",
            "| method | under the default policy | rule | why, and what the parties check |", "|---|---|---|---|"]
    for name in available():
        st = default_status(name, policy)
        verdict = {True: "runs", False: "refused", None: "not federated"}[st.runs]
        rule = "-" if st.rule == "-" else f"`{st.rule}`"
        rows.append(f"| `{name}` | {verdict} | {rule} | {st.why.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover - `python -m verticalfs.methods.deployable [--write PATH]`
    text = markdown()
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        Path(sys.argv[2]).write_text(text)
    else:
        sys.stdout.write(text)
