"""docs/security.md's threat model covers every registered method and every open finding, and the
page of methods under the default policy is the one generated from the registry and the policy."""

from __future__ import annotations

import re
from pathlib import Path

from verticalfs.methods import available
from verticalfs.methods.deployable import default_status, markdown
from verticalfs.trust import FINDINGS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _threat_rows() -> list[list[str]]:
    text = (DOCS / "security.md").read_text()
    part = text.split("## Threat model", 1)[1].split("\n## ", 1)[0]
    table = part.split("| method |", 1)[1].split("\n\n", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:] if line.startswith("|")]


def test_every_registered_method_has_a_row_in_the_threat_model():
    named = set()
    for row in _threat_rows():
        named |= set(re.findall(r"`([a-z0-9-]+)`", row[0]))
    missing = sorted(set(available()) - named)
    assert not missing, f"docs/security.md's threat model has no row for {missing}: add one (what an honest and a " \
                        "malicious label holder learn, the policy key, the test)"
    assert not named - set(available()), f"rows for unregistered methods: {sorted(named - set(available()))}"


def test_every_row_names_its_keys_and_tests():
    for row in _threat_rows():
        if "not federated" in row[1]:
            continue
        assert row[4] and row[4] != "-", row[0]
        for path in re.findall(r"`(tests/[\w/]+\.py)`", row[5]):
            assert (DOCS.parent / path).is_file(), path
        assert re.search(r"tests/", row[5]), row[0]


def test_every_open_finding_is_in_the_threat_model():
    text = (DOCS / "security.md").read_text()
    for fid, f in FINDINGS.items():
        assert f"`{fid}`" in text, fid
        for m in f.methods:
            assert default_status(m).runs is False and default_status(m).rule == "allow_findings"


def test_the_default_policy_page_is_generated_from_the_registry():
    assert (DOCS / "reference" / "deployment-status.md").read_text() == markdown(), (
        "regenerate: python -m verticalfs.methods.deployable --write docs/reference/deployment-status.md")
