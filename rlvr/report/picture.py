"""The README's picture of the report: the top of the retrospective's markdown (title, the recipe's
verdict line, the headline table) over the first curves it shows, composed with matplotlib. The
report stage writes it (paths.report_picture, docs/report.png) with the report, so the picture
follows every run; everything it shows is read from the markdown.
"""

from __future__ import annotations

import html
import io
import re
import textwrap
from pathlib import Path

from rlvr.core.files import write_bytes_atomic

CURVES_SHOWN = 2  # the first figures of section 2, side by side: the training reward and the KL


def plain(text: str) -> str:
    """Markdown as a person reads it: no escapes, entities, emphasis or code marks.

    >>> plain("**Mixed**: pass@32 0.86 -&gt; 0.51 \\\\[x\\\\] `a`")
    'Mixed: pass@32 0.86 -> 0.51 [x] a'
    """
    text = html.unescape(re.sub(r"\\(.)", r"\1", text))
    return re.sub(r"\*\*|`", "", text).strip()


def report_top(markdown: str) -> tuple[str, str, list[list[str]], list[str]]:
    """(title, verdict line, headline table rows, paths of the first curves figures) of a
    retrospective: the verdict is the recipe's line under the answer box, the table the first
    one, the curves the first CURVES_SHOWN images of section 2."""
    lines = markdown.splitlines()
    title = next(line[2:] for line in lines if line.startswith("# "))
    if '<div id="answer" markdown="1">' in lines:  # the answer box, then the recipe's line
        lines = lines[lines.index("</div>") + 1 :]
    verdict = next(line for line in lines[1:] if line.strip() and not line.startswith(("#", "![")))
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [plain(cell) for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if not all(set(cell) <= set("-: ") for cell in cells):
            table.append(cells)
    curves_at = next(i for i, line in enumerate(lines) if line.startswith("## 2."))
    curves = [
        re.search(r"!\[[^\]]*\]\(<?([^)>]+)>?\)", line).group(1)
        for line in lines[curves_at:]
        if line.startswith("![")
    ][:CURVES_SHOWN]
    return plain(title), plain(verdict), table, curves


def compose(report: str | Path, out: str | Path, width_px: int = 1100, dpi: int = 100) -> Path:
    """Write the picture of the markdown report `report` (its figures read beside it) to `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image

    report, out = Path(report), Path(out)
    title, verdict, table, curves_paths = report_top(report.read_text())
    panels = [mpimg.imread(report.parent / path)[..., :3] for path in curves_paths]
    height = max(p.shape[0] for p in panels)
    pad = [np.ones((height - p.shape[0], p.shape[1], 3), dtype=p.dtype) for p in panels]
    curves = np.concatenate([np.vstack([p, q]) for p, q in zip(panels, pad)], axis=1)
    width = width_px / dpi
    curves_h = width * curves.shape[0] / curves.shape[1]
    wrapped = textwrap.fill(verdict, 150)
    text_h = 0.45 + 0.17 * (wrapped.count("\n") + 1)
    table_h = 0.28 * len(table) + 0.25
    fig = plt.figure(figsize=(width, text_h + table_h + curves_h), dpi=dpi)
    total = text_h + table_h + curves_h

    fig.text(0.015, 1 - 0.3 / total, title, fontsize=15, weight="bold", va="center")
    fig.text(0.015, 1 - 0.5 / total, wrapped, fontsize=8.5, va="top", linespacing=1.4)
    ax = fig.add_axes((0.01, curves_h / total, 0.98, table_h / total))
    ax.axis("off")
    header = [textwrap.fill(cell, 14) for cell in table[0]]
    grid = ax.table(cellText=table[1:], colLabels=header, loc="center", cellLoc="center")
    grid.auto_set_font_size(False)
    grid.set_fontsize(8)
    grid.scale(1, 1.6)
    grid.auto_set_column_width(list(range(len(table[0]))))
    for (row, _), cell in grid.get_celld().items():
        cell.set_edgecolor("#bbbbbb")
        if row == 0:
            cell.set_facecolor("#eeeeee")
            cell.set_height(cell.get_height() * 1.5)
    ax = fig.add_axes((0, 0, 1, curves_h / total))
    ax.axis("off")
    ax.imshow(curves, interpolation="antialiased")

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    image = Image.open(buffer).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    png = io.BytesIO()
    image.save(png, format="png", optimize=True)
    write_bytes_atomic(out, png.getvalue())
    return out
