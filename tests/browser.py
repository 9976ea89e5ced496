"""A page as a reader's browser lays it out: headless Chromium driven over the DevTools protocol
(`websockets`' sync client), measured inside the page, since a screenshot cannot say whether a table
spills sideways or an image failed to decode.

    measure(Path("reports/retrospective.html"), width=400)  # -> Layout

Chromium is Debian's `chromium` (.ci/run installs it, unpinned: its version moves with security
updates, so the tests print it). Host names resolve to nothing, so a page that reached for the
network shows it as a request, never as a download.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

NO_CHROMIUM = "Chromium is not installed (apt-get install chromium; .ci/run installs it)"
SCREEN_HEIGHT = 800  # the first screen, in CSS pixels, at every width

# Measured inside the page once it has loaded: the layout viewport, how wide the content reaches,
# the answer box, the images that did not decode, and the elements that reach past the screen's
# right edge while not inside a box that scrolls on its own (their path names the culprit).
MEASURE = """(() => {
  const de = document.documentElement, box = document.getElementById('answer');
  const r = box && box.getBoundingClientRect();
  const scrolls = e => { for (; e && e !== document.body; e = e.parentElement) {
      const s = getComputedStyle(e); if (/(auto|scroll)/.test(s.overflowX)) return true; }
    return false; };
  const path = e => { const p = []; for (; e && e !== document.body; e = e.parentElement)
      p.unshift(e.tagName.toLowerCase()); return p.join('>'); };
  const spills = [...document.body.querySelectorAll('*')].filter(
      e => e.getBoundingClientRect().right > innerWidth + 1 && !scrolls(e.parentElement));
  return {
    viewport_width: innerWidth, viewport_height: innerHeight, content_width: de.scrollWidth,
    answer: r ? [r.top + scrollY, r.bottom + scrollY] : null,
    images: document.images.length,
    undecoded: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))
      .map(i => i.alt || i.src.slice(0, 40)),
    spills: [...new Set(spills.map(path))].slice(0, 10),
  };
})()"""


@dataclass(frozen=True)
class Layout:
    width: int  # the screen's width the page was laid out for (CSS pixels)
    viewport_width: int  # the layout viewport's: wider than the screen when a phone zooms out
    viewport_height: int
    content_width: int  # how far the page reaches: past viewport_width means sideways scrolling
    answer: tuple[float, float] | None  # the answer box's top and bottom, None without one
    images: int
    undecoded: list[str]  # images that did not decode (alt text or the start of the src)
    spills: list[str]  # elements past the screen's right edge, outside a box that scrolls
    requests: list[str]  # what the page asked for beyond its own file and data: URLs


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def need_chromium() -> None:
    """Skip the calling test, in one line, without Chromium; a failure instead under
    RLVR_REQUIRE_SERVERS (.ci/run installs Chromium and sets it), so CI never passes on a skipped
    browser test."""
    if chromium() is not None:
        return
    import pytest

    if os.environ.get("RLVR_REQUIRE_SERVERS"):
        pytest.fail(NO_CHROMIUM, pytrace=False)
    pytest.skip(NO_CHROMIUM)


def version() -> str:
    return subprocess.run(
        [chromium(), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()


class _DevTools:
    """Commands and events over the browser's one socket; a page's go through its flattened
    session (`session`); events are kept, per session, for what the page asked for."""

    def __init__(self, socket) -> None:
        self.socket, self.ids, self.events = socket, itertools.count(1), []

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        message = {"id": next(self.ids), "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.socket.send(json.dumps(message))
        answer = self.wait(lambda m: m.get("id") == message["id"])
        if "error" in answer:
            raise RuntimeError(f"DevTools: {method}: {answer['error']}")
        return answer["result"]

    def wait(self, match, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"DevTools: no answer within {timeout} s")
            message = json.loads(self.socket.recv(timeout=left))
            if "method" in message:
                self.events.append(message)
            if match(message):
                return message


def measure(html: Path, widths: tuple[int, ...] = (1280, 400)) -> dict[int, Layout]:
    """Lay `html` out at each screen width (a phone's under 600 px: a mobile viewport, where a page
    without a viewport tag is drawn 980 px wide and zoomed out) and measure it."""
    from websockets.sync.client import connect

    url = html.resolve().as_uri()
    with tempfile.TemporaryDirectory() as profile:
        browser = subprocess.Popen(
            [
                chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--host-resolver-rules=MAP * ~NOTFOUND",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "NO_AT_BRIDGE": "1"},  # no accessibility bus in a container
            start_new_session=True,  # its helper processes stopped with it
        )
        try:
            port_file, deadline = Path(profile) / "DevToolsActivePort", time.monotonic() + 60
            while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
                if browser.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Chromium did not start (exit code {browser.poll()})")
                time.sleep(0.1)
            port, path = port_file.read_text().splitlines()[:2]
            with connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as socket:
                devtools = _DevTools(socket)
                layouts = {width: _lay_out(devtools, url, width) for width in widths}
                socket.send(json.dumps({"id": 0, "method": "Browser.close"}))
            browser.wait(timeout=30)  # every Chromium process gone before its profile is
            return layouts
        finally:
            if browser.poll() is None:
                os.killpg(browser.pid, signal.SIGKILL)
                browser.wait(timeout=30)


def _lay_out(devtools: _DevTools, url: str, width: int) -> Layout:
    target = devtools.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    page = devtools.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
        "sessionId"
    ]
    try:
        devtools.call(
            "Emulation.setDeviceMetricsOverride",
            {
                "width": width,
                "height": SCREEN_HEIGHT,
                "deviceScaleFactor": 1,
                "mobile": width < 600,
            },
            page,
        )
        for domain in ("Network.enable", "Page.enable"):
            devtools.call(domain, session=page)
        devtools.call("Page.navigate", {"url": url}, page)
        devtools.wait(
            lambda m: m.get("method") == "Page.loadEventFired" and m.get("sessionId") == page
        )
        found = devtools.call(
            "Runtime.evaluate", {"expression": MEASURE, "returnByValue": True}, page
        )
        measured = found["result"]["value"]
        requests = [
            e["params"]["request"]["url"]
            for e in devtools.events
            if e.get("sessionId") == page and e["method"] == "Network.requestWillBeSent"
        ]
        return Layout(
            width=width,
            viewport_width=measured["viewport_width"],
            viewport_height=measured["viewport_height"],
            content_width=measured["content_width"],
            answer=tuple(measured["answer"]) if measured["answer"] else None,
            images=measured["images"],
            undecoded=measured["undecoded"],
            spills=measured["spills"],
            requests=[r for r in requests if r != url and not r.startswith("data:")],
        )
    finally:
        devtools.call("Target.closeTarget", {"targetId": target})


def problems(layout: Layout) -> dict[str, str]:
    """What stops a reader of the page at this width, by check (empty when it reads well):
    `sideways` (the page is wider than the screen, or laid out for a wider one and zoomed out),
    `answer` (no answer box, or it ends below the first screen), `images` (none, or one that did
    not decode) and `requests` (the page reached beyond its own file)."""
    found = {}
    if (
        layout.viewport_width != layout.width
        or layout.content_width > layout.width
        or layout.spills
    ):
        found["sideways"] = (
            f"laid out {layout.viewport_width} px wide for a {layout.width} px screen, content "
            f"{layout.content_width} px wide; past the right edge: {layout.spills or 'nothing'}"
        )
    if layout.answer is None:
        found["answer"] = 'no element with id="answer"'
    elif layout.answer[1] > layout.viewport_height:
        found["answer"] = (
            f"the answer box ends {layout.answer[1]:.0f} px down, below the first screen "
            f"({layout.viewport_height} px)"
        )
    if not layout.images or layout.undecoded:
        found["images"] = f"{layout.images} image(s); not decoded: {layout.undecoded}"
    if layout.requests:
        found["requests"] = f"asked the network for {layout.requests[:5]}"
    return found
