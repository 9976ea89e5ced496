"""Markdown pieces the reports share, and markdown -> one self-contained HTML page.

Every string from data, params or model output is untrusted: a report shows it as literal text,
never as markdown or HTML. `md_escape` makes any value safe inline markdown and marks the result
as `Md` (markdown that is safe as it is); `md_table` escapes every cell and header that is not a
number or an `Md`, so a table cannot forget. `to_html` inlines only the images it is given.
"""

from __future__ import annotations

import base64
import html
import math
import re
import unicodedata
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any
from xml.etree.ElementTree import Element

import markdown
from markdown.treeprocessors import Treeprocessor

# What python-markdown reads as markup inside a line: code, emphasis, links/images, escapes,
# table pipes (html's &, <, > become entities: raw HTML, autolinks and entities)
_INLINE_SPECIAL = re.compile(r"([\\`*_\[\]|])")
# What makes a block when it starts a line: heading, list item or rule, ordered list item
_LINE_START = re.compile(r"^(#|[-+](?=[\s-]|$)|\d+(?=\.(?:\s|$)))")


class Md(str):
    """Markdown that is safe as it is: escaped untrusted text, or the report's own markup."""


def md_escape(text: Any) -> Md:
    """Any value as inline markdown that renders as exactly its text (newlines as spaces).

    >>> print(md_escape("<b>*x*</b> & [a](b.png) `c` | d\\\\e"))
    &lt;b&gt;\\*x\\*&lt;/b&gt; &amp; \\[a\\](b.png) \\`c\\` \\| d\\\\e
    >>> print(md_escape("# title"), md_escape("1. one\\ntwo"), md_escape("&amp;"), md_escape("0.5"))
    \\# title 1\\. one two &amp;amp; 0.5

    A fence (`~~~`), an indent that would make a code block, and Unicode format characters (bidi
    overrides, zero-width joiners: they change how the text around them reads, unseen) are shown
    as what they are:

    >>> print(md_escape("~~~py"), md_escape("    x"), md_escape("abc\\u202egnp.exe"))
    &#126;&#126;&#126;py &#32;&#32;&#32;&#32;x abc&lt;U+202E&gt;gnp.exe
    """
    text = " ".join(str(text).replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    text = "".join(f"<U+{ord(c):04X}>" if unicodedata.category(c) == "Cf" else c for c in text)
    text = _INLINE_SPECIAL.sub(r"\\\1", html.escape(text, quote=False)).replace("~", "&#126;")
    text = _LINE_START.sub(
        lambda m: m.group(1) + "\\" if m.group(1)[0].isdigit() else "\\" + m.group(1), text
    )
    indent = len(text) - len(text.lstrip(" \t"))  # four would open a code block
    return Md("".join(f"&#{ord(c)};" for c in text[:indent]) + text[indent:])


def md_code(text: Any) -> Md:
    """Any value in monospace, shown exactly: a code span when that is safe, else <code>.

    >>> print(md_code(0.5), md_code("^\\\\d+$"), md_code("a`b|c"))
    `0.5` `^\\d+$` <code>a\\`b\\|c</code>
    """
    text = str(text)
    if text and text == text.strip() and not re.search(r"[`|\n\r]|\\$", text):
        return Md(f"`{text}`")
    return Md(f"<code>{md_escape(text)}</code>")


def md_image(alt: str, src: str) -> Md:
    """The report's own figure (pass `src` to to_html's `images` to inline it).

    >>> print(md_image("curves", "train/curves.png"), md_image("x", "my plots/a (1).png"))
    ![curves](train/curves.png) ![x](<my plots/a (1).png>)
    """
    if re.search(r"[<>\n\r]", src):
        raise ValueError(f"image path not usable in markdown: {src!r}")
    return Md(
        f"![{md_escape(alt)}]({src})"
        if re.fullmatch(r"[\w./-]+", src)
        else f"![{md_escape(alt)}](<{src}>)"
    )


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


def plain_value(value: Any) -> str:
    """A check's value as a reader wants it: numbers by fmt, a list comma-joined, a mapping as
    its keys in words with their values; an empty one is "none".

    >>> plain_value(0.00014898789231665432), plain_value(0.37467447916666513), plain_value([8])
    ('0.000149', '0.375', '8')
    >>> plain_value({"steps_logged": 50, "non_finite_steps": []})
    'steps logged 50; non finite steps none'
    """
    if isinstance(value, Mapping):
        return (
            "; ".join(f"{k.replace('_', ' ')} {plain_value(v)}" for k, v in value.items()) or "none"
        )
    if isinstance(value, (list, tuple)):
        return ", ".join(plain_value(v) for v in value) or "none"
    return fmt(value)


def md_value(value: Any) -> Md:
    """A value as safe markdown: numbers formatted with fmt, Md kept, anything else escaped.

    >>> md_value(0.5), md_value(Md("**yes**")), md_value("*no*")
    ('0.500', '**yes**', '\\\\*no\\\\*')
    """
    if isinstance(value, Md):
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return Md(fmt(value))
    return md_escape(value)


def ci_text(d: Mapping) -> Md:
    """A delta with its CI: +0.175 [+0.105, +0.248] (numbers only, so safe markdown).

    >>> print(ci_text({"value": 0.175, "ci_low": 0.105, "ci_high": 0.248}))
    +0.175 [+0.105, +0.248]
    """
    return Md(f"{d['value']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]")


def md_table(header: Sequence[Any], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A markdown table (its lines): every header and cell goes through md_value, so text from
    data is escaped (pipes, newlines, markup) unless it is an Md.

    >>> md_table(["id", "reward"], [["<i>a|b</i>", 0.5]])
    ['| id | reward |', '|---|---|', '| &lt;i&gt;a\\\\|b&lt;/i&gt; | 0.500 |']
    """

    def cells(values: Sequence[Any]) -> str:
        return "| " + " | ".join(" ".join(md_value(v).splitlines()) for v in values) + " |"

    return [cells(header), "|" + "---|" * len(header), *(cells(row) for row in rows)]


def to_html(
    markdown_text: str,
    base_dir: str | Path,
    *,
    images: Mapping[str, str] | Collection[str],
    title: str = "GRPO retrospective",
) -> str:
    """Self-contained HTML: images inlined as base64 PNG, styles inline, no external requests.

    `images` are the page's own PNGs (paths relative to base_dir, as the markdown names them; a
    mapping gives them as its values): only those are read and inlined, any other image becomes
    its alt text and no file is read.
    """
    base = Path(base_dir).resolve()
    own = set(images.values() if isinstance(images, Mapping) else images)

    class InlineImages(Treeprocessor):
        def run(self, root):
            for el in root.iter("img"):
                src, alt = el.get("src", ""), el.get("alt", "")
                if src in own:
                    data = base64.b64encode((base / src).read_bytes()).decode()
                    el.set("src", f"data:image/png;base64,{data}")
                else:  # not one of the page's own figures: show it as text, read nothing
                    el.attrib.clear()
                    el.tag, el.text = "span", alt

    class ScrollingTables(Treeprocessor):
        """Each table in a box of its own that scrolls sideways: on a narrow screen a wide table
        scrolls, not the page."""

        def run(self, root):
            for parent in list(root.iter()):
                for i, child in enumerate(list(parent)):
                    if child.tag == "table":
                        box = Element("div", {"class": "table"})
                        parent.remove(child)
                        box.append(child)
                        parent.insert(i, box)

    md = markdown.Markdown(extensions=["tables", "fenced_code", "md_in_html"])
    md.treeprocessors.register(InlineImages(md), "inline_images", 1)
    md.treeprocessors.register(ScrollingTables(md), "scrolling_tables", 0)
    body = md.convert(markdown_text)
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;"
        "padding:0 1em;color:#222}table{border-collapse:collapse;margin:.5em 0;"
        "font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}"
        "th{background:#f3f3f3}img{max-width:100%}code,pre{background:#f6f6f6}"
        "pre{padding:.6em;overflow:auto}div.table{overflow-x:auto}"
        "#answer{border:2px solid #3a7;border-radius:6px;background:#f3faf5;padding:0 1em}"
        "p,li{overflow-wrap:anywhere}"  # a long digest or path wraps on a phone
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{style}</style></head><body>\n{body}\n"
        "</body></html>\n"
    )
