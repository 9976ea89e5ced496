"""Render the retrospective HTML to a PNG in headless Chromium, with the network cut off: the
whole page, its height measured first (a copy of the page with one line of script that writes
it into the title, read back with --dump-dom).

    python scripts/render_report.py [reports/retrospective.html] [reports/retrospective.png]

Needs Debian's chromium package (apt-get install chromium). Runs Chromium inside a new network
namespace (`unshare --net`, as root) when it can, so a page that needed the network would show it:
the report must render completely offline.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MEASURE = "<script>document.title = 'height:' + document.documentElement.scrollHeight</script>"


def chromium(*arguments: str, profile: str) -> subprocess.CompletedProcess:
    """Headless Chromium with `arguments`, offline where a network namespace can be made."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        sys.exit("render_report: chromium not found (apt-get install chromium)")
    command = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--hide-scrollbars",
        *arguments,
    ]
    offline = ["unshare", "--net"] if shutil.which("unshare") else []
    run = subprocess.run(offline + command, capture_output=True, text=True, timeout=120)
    if run.returncode != 0 and offline:  # no permission for a namespace: flags only
        run = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        sys.exit(f"render_report: chromium failed: {run.stderr[-2000:]}")
    return run


def page_height(html: Path, width: int, profile: str) -> int:
    """The page's laid-out height at `width`, in CSS pixels."""
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / html.name  # beside nothing: the page's images are inline
        copy.write_text(html.read_text().replace("</body>", MEASURE + "</body>", 1))
        dom = chromium(
            f"--window-size={width},800", "--dump-dom", copy.resolve().as_uri(), profile=profile
        ).stdout
    found = re.search(r"<title>height:(\d+)</title>", dom)
    if found is None:
        sys.exit("render_report: chromium did not report the page's height")
    return int(found.group(1))


def render(html: Path, png: Path, width: int = 1280) -> Path:
    """The whole page at `width` as a PNG, however tall it is."""
    with tempfile.TemporaryDirectory() as profile:
        height = page_height(html, width, profile)
        chromium(
            f"--window-size={width},{height}",
            f"--screenshot={png.resolve()}",
            html.resolve().as_uri(),
            profile=profile,
        )
    if not png.exists():
        sys.exit("render_report: chromium wrote no screenshot")
    print(f"render_report: the page is {height} px tall at {width} px")
    return png


if __name__ == "__main__":
    html = Path(sys.argv[1] if len(sys.argv) > 1 else "reports/retrospective.html")
    png = Path(sys.argv[2] if len(sys.argv) > 2 else "reports/retrospective.png")
    print(f"render_report: {render(html, png)}")
