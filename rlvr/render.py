"""Markdown pieces the reports share, and markdown -> one self-contained HTML page."""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def fmt(value: Any, digits: int = 3) -> str:
    """A value as a table shows it: thousands separators, 3 decimals, NaN as n/a.

    >>> fmt(1234), fmt(0.5), fmt(0.00012), fmt(float("nan"))
    ('1,234', '0.500', '0.00012', 'n/a')
    """
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int,)) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.{digits}g}" if 0 < abs(value) < 0.01 else f"{value:.{digits}f}"
    return str(value)


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A markdown table (its lines); cells are formatted with fmt, pipes and newlines escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(c).replace("|", "\\|").replace("\n", " ")
                                         .replace("<", "&lt;") for c in row) + " |")
    return lines


def to_html(markdown_text: str, base_dir: str | Path, title: str = "GRPO retrospective") -> str:
    """Self-contained HTML: images inlined as base64 PNG, styles inline, no external requests."""
    import markdown

    def inline(match: re.Match) -> str:
        alt, src = match.group(1), match.group(2)
        data = base64.b64encode((Path(base_dir) / src).read_bytes()).decode()
        return f"![{alt}](data:image/png;base64,{data})"

    body = markdown.markdown(re.sub(r"!\[([^\]]*)\]\(([^)]+\.png)\)", inline, markdown_text),
                             extensions=["tables", "fenced_code", "md_in_html"])
    style = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;"
             "padding:0 1em;color:#222}table{border-collapse:collapse;margin:.5em 0;"
             "font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}"
             "th{background:#f3f3f3}img{max-width:100%}code,pre{background:#f6f6f6}"
             "pre{padding:.6em;overflow:auto}")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title><style>{style}</style></head><body>\n{body}\n</body></html>\n")
