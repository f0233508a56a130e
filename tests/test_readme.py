"""The README stays a short entry point whose links and methods table hold (issue 41, item 6).

The documentation site itself is checked by ``mkdocs build --strict`` in .ci/run (GitHub renders the
README, MkDocs does not see it, so its links are checked here).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _slug(heading: str) -> str:
    """The anchor MkDocs (and GitHub) give a heading: lower case, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    return re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", text))


def test_readme_is_short():
    assert len(README.splitlines()) < 250


def test_quick_start_commands_are_at_the_top():
    block = README.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    assert "./scripts/demo     # creates .venv" in block
    assert "(./scripts/demo --short: one seed, 3 epochs" in block
    assert "./scripts/test     # creates/reuses .venv" in block
    assert README.index("## Quick start") < README.index("## Methods")


def test_methods_table_is_one_table():
    start = README.index("| method | what it is | paper |")
    rows = []
    for line in README[start:].splitlines():
        if not line.startswith("|"):
            break
        rows.append(line)
    names = " ".join(r.split("|")[1] for r in rows)
    for name in ("`vfl`", "`less-vfl`", "`sparsevfl`", "`feast`", "`fate-iv`", "`fedsdg-fs`", "`icafs`", "`compfs`"):
        assert name in names, f"{name} is not in the README's methods table (a blank line splits it?)"


def test_relative_links_resolve():
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    assert links
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.is_file(), f"README links to {link}, but {path} does not exist"
        if anchor:
            headings = re.findall(r"^#+\s+(.+)$", target.read_text(encoding="utf-8"), flags=re.M)
            assert anchor in {_slug(h) for h in headings}, f"README links to {link}: no such heading in {path}"
