"""Render the retrospective HTML to a PNG in headless Chromium, with the network cut off.

    python scripts/render_report.py [reports/retrospective.html] [reports/retrospective.png]

Needs Debian's chromium package (apt-get install chromium). Runs Chromium inside a new network
namespace (`unshare --net`, as root) when it can, so a page that needed the network would show it:
the report must render completely offline.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def render(html: Path, png: Path, width: int = 1280, height: int = 9000) -> Path:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("render_report: chromium not found (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        command = [
            chromium,
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
            f"--window-size={width},{height}",
            f"--screenshot={png.resolve()}",
            html.resolve().as_uri(),
        ]
        offline = ["unshare", "--net"] if shutil.which("unshare") else []
        run = subprocess.run(offline + command, capture_output=True, text=True, timeout=120)
        if run.returncode != 0 and offline:  # no permission for a namespace: flags only
            run = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if run.returncode != 0 or not png.exists():
        sys.exit(f"render_report: chromium failed: {run.stderr[-2000:]}")
    return png


if __name__ == "__main__":
    html = Path(sys.argv[1] if len(sys.argv) > 1 else "reports/retrospective.html")
    png = Path(sys.argv[2] if len(sys.argv) > 2 else "reports/retrospective.png")
    print(f"render_report: {render(html, png)}")
