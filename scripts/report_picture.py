"""The README's picture of the report: the top of reports/retrospective.md (title, verdict line,
headline table) over the training curves it shows, composed with matplotlib into docs/report.png.

    ./dev run python scripts/report_picture.py    # after ./dev repro; writes docs/report.png

No browser needed (scripts/render_report.py renders the whole HTML page, with Chromium). The text,
the table and the curves' path are read from the markdown, so the picture follows the report.
"""

from __future__ import annotations

import argparse
import html
import io
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def plain(text: str) -> str:
    """Markdown as a person reads it: no escapes, entities, emphasis or code marks."""
    text = html.unescape(re.sub(r"\\(.)", r"\1", text))
    return re.sub(r"\*\*|`", "", text).strip()


def report_top(markdown: str) -> tuple[str, str, list[list[str]], str]:
    """(title, verdict line, headline table rows, path of the curves figure) of a retrospective."""
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
    curves = next(
        re.search(r"!\[[^\]]*\]\(([^)]+)\)", line).group(1)
        for line in lines[curves_at:]
        if line.startswith("![")
    )
    return plain(title), plain(verdict), table, curves


def compose(report: Path, out: Path, width_px: int = 1100, dpi: int = 100) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt
    from PIL import Image

    title, verdict, table, curves_path = report_top(report.read_text())
    curves = mpimg.imread(report.parent / curves_path)
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
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", type=Path, default=ROOT / "reports/retrospective.md")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/report.png")
    args = parser.parse_args()
    compose(args.report, args.out)
    print(f"report_picture: {args.out} ({args.out.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
