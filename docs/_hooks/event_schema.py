"""MkDocs hook: ``<!-- event-schema -->`` becomes the schema of a run's events, per event type.

Generated from :func:`verticalfs.events.event_schema` (the pydantic models' JSON schema) when the
site is built: a table per event type (its ``type`` values, every field with its type, default and
meaning), then the whole JSON schema. The page cannot drift from the code.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parents[2] / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

_MARK = re.compile(r"<!--\s*event-schema\s*-->")


def _cell(text: str) -> str:
    return " ".join(str(text).replace("|", "\\|").split())


def _type(p: dict) -> str:
    if "const" in p:
        return f"`{json.dumps(p['const'])}`"
    if "enum" in p:
        return " or ".join(f"`{json.dumps(v)}`" for v in p["enum"])
    if "$ref" in p:
        return p["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in p:
        return " or ".join(_type(q) for q in p["anyOf"])
    t = p.get("type", "any")
    if t == "array":
        return f"list of {_type(p.get('items', {}))}"
    if t == "object":
        extra = p.get("additionalProperties")
        return f"object of {_type(extra)}" if isinstance(extra, dict) else "object"
    return t


def _table(name: str, model: dict, types: list[str]) -> str:
    lines = [f"### {name}", ""]
    if types:
        lines += ["`type`: " + ", ".join(f"`{t}`" for t in types), ""]
    lines += [_cell(model.get("description", "")), "", "| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    required = set(model.get("required", []))
    for field, p in model.get("properties", {}).items():
        if field in required:
            default = "required"
        else:
            default = f"`{json.dumps(p['default'])}`" if "default" in p else "empty"
        lines.append(f"| `{field}` | {_cell(_type(p))} | {default} | {_cell(p.get('description', ''))} |")
    return "\n".join(lines) + "\n"


def _schema() -> str:
    from verticalfs.events import SCHEMA_VERSION, event_schema

    schema = event_schema()
    defs = schema["$defs"]
    by_model: dict[str, list[str]] = {}
    for t, ref in schema["discriminator"]["mapping"].items():
        by_model.setdefault(ref.rsplit("/", 1)[-1], []).append(t)
    order = [ref["$ref"].rsplit("/", 1)[-1] for ref in schema["oneOf"]]
    parts = [f"Schema version {SCHEMA_VERSION} (every event's `v`).", ""]
    parts += [_table(name, defs[name], by_model.get(name, [])) for name in order]
    parts += [_table(name, defs[name], []) for name in defs if name not in order]
    parts += ["### The JSON schema", "", "```json", json.dumps(schema, indent=1), "```", ""]
    return "\n".join(parts)


def on_page_markdown(markdown, page, config, files):  # MkDocs calls it with these names
    return _MARK.sub(lambda m: _schema(), markdown)
