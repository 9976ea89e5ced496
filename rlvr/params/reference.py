"""What people and editors read of the params sections, generated from them: params.schema.json
(JSON Schema, named on params.yaml's first line) and docs/params.md (every key with its default,
values and help). Tests hold both in sync (tests/test_config.py).

    ./dev run python -m rlvr.params.reference --schema > params.schema.json
    ./dev run python -m rlvr.params.reference --docs > docs/params.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlvr.params.config import Params
from rlvr.params.section import deref, json_schema

SCHEMA_FILE = Path("params.schema.json")
REFERENCE_FILE = Path("docs/params.md")


def params_schema() -> dict:
    """The JSON Schema of params.yaml (params.schema.json), draft 2020-12 as pydantic writes it."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **json_schema(Params),
        "title": "params.yaml",
    }


def _allowed(node: dict) -> str:
    """A field's values as the schema states them: its choices or range, else its type."""
    if "enum" in node:
        return "one of " + ", ".join(f"`{c}`" if c else "`''`" for c in node["enum"])
    low_open, high_open = "exclusiveMinimum" in node, "exclusiveMaximum" in node
    low = node.get("exclusiveMinimum", node.get("minimum"))
    high = node.get("exclusiveMaximum", node.get("maximum"))
    if low is not None and high is not None:
        return f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high}"
    kind = node.get("type", "any")
    return {
        "object": "mapping",
        "array": "list",
        "number": "number",
        "integer": "integer",
        "boolean": "true / false",
        "string": "text",
    }.get(kind, kind)


def params_reference() -> str:
    """docs/params.md: every params.yaml key with its default, its values and its help, one table
    per section, from the same declarations as the schema and the checks."""
    schema, defaults = json_schema(Params), Params()
    lines = [
        "# Every knob of params.yaml",
        "",
        "Generated from the params sections (rlvr/params/): `./dev run python -m "
        f"rlvr.params.reference --docs > {REFERENCE_FILE}`. params.yaml says why each value is "
        "what it is; the rules between keys are in each section's checks.",
        "",
    ]

    def table(name: str, node: dict) -> None:
        node = deref(schema, node)
        rows, subsections = [], []
        for key, field in node["properties"].items():
            dotted = f"{name}.{key}" if name else key
            target = deref(schema, field)
            if "properties" in target:
                subsections.append((dotted, target))
                continue
            value = defaults
            for part in dotted.split("."):
                value = getattr(value, part)
            default = json.dumps(value, default=str)
            text = " ".join(field.get("description", "").split()).replace("|", "\\|")
            rows.append(f"| `{dotted}` | `{default}` | {_allowed(field)} | {text} |")
        if rows:
            lines.extend(
                [
                    f"## {name or 'top level'}",
                    "",
                    "| key | default | values | what it does |",
                    "|---|---|---|---|",
                    *rows,
                    "",
                ]
            )
        for dotted, target in subsections:
            table(dotted, target)

    table("", schema)
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--schema"]:
        print(json.dumps(params_schema(), indent=2))
    elif sys.argv[1:] == ["--docs"]:
        print(params_reference())
    else:
        sys.exit(
            f"usage: python -m rlvr.params.reference --schema > {SCHEMA_FILE}\n"
            f"       python -m rlvr.params.reference --docs > {REFERENCE_FILE}"
        )
