"""The version lives in one place and CHANGELOG.md says what it changed."""

from __future__ import annotations

import re
from pathlib import Path

import verticalfs

ROOT = Path(__file__).resolve().parents[1]


def test_the_changelog_has_a_section_for_this_version():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, flags=re.M)
    assert versions, "CHANGELOG.md has no '## [X.Y.Z] - YYYY-MM-DD' section"
    assert versions[0] == verticalfs.__version__, (
        f"the newest CHANGELOG section is {versions[0]}, the package says {verticalfs.__version__}")


def test_pyproject_takes_the_version_from_the_package():
    """One place: ``verticalfs/version.py`` (a leaf module; ``verticalfs.__version__`` is the same)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dynamic = ["version"]' in text and 'attr = "verticalfs.version.__version__"' in text
    from verticalfs.version import __version__

    assert verticalfs.__version__ == __version__
    assert not re.search(r'^version = "', text, flags=re.M)
