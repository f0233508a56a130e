"""MkDocs hook: ``<!-- method-params: NAME -->`` becomes NAME's parameter table.

The table is what ``verticalfs methods`` prints for that method (summary, paper, every parameter with
its default and the meaning from its ``Params`` docstring, where the papers' defaults are cited), read
from the registry when the site is built, so a method page cannot drift from the code. An unknown
name stops the build.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

# Document this tree's code (as mkdocstrings does with ``paths: [src]``), not another installed copy.
_SRC = str(Path(__file__).resolve().parents[2] / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

_MARK = re.compile(r"<!--\s*method-params:\s*([A-Za-z0-9_+-]+)\s*-->")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(name: str) -> str:
    from verticalfs.methods import registry
    from verticalfs.methods.base import params_doc

    if name not in registry.available():
        raise ValueError(f"docs: <!-- method-params: {name} --> names no registered method; "
                         f"registered: {', '.join(registry.available())}")
    cls = registry.get(name)
    docs = params_doc(cls.Params)
    lines = [f"**`{name}`**: {_cell(cls.summary)}", ""]
    if cls.paper:
        lines += [f"*Paper: {_cell(cls.paper)}*", ""]
    lines += ["| parameter | default | meaning |", "| --- | --- | --- |"]
    for f in dataclasses.fields(cls.Params):
        d = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        lines.append(f"| `{f.name}` | `{_cell(repr(d))}` | {_cell(docs.get(f.name, ''))} |")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown, page, config, files):  # MkDocs calls it with these names
    return _MARK.sub(lambda m: _table(m.group(1)), markdown)
