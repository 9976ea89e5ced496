"""Write the sha256 of every distribution file of each pinned version into requirements.lock and
requirements-nodeps.txt (pip's hash-checking format; ./dev installs with --require-hashes). Run it
after changing a pin, where the package indexes are reachable; hashes already there for the same
version are kept, so running it again against another index (PyTorch's, for its other builds)
adds that index's files.

    python scripts/lock_hashes.py                     # the indexes and find-links of pip's config
    python scripts/lock_hashes.py --index-url https://download.pytorch.org/whl/cpu
    python scripts/lock_hashes.py --dry-run           # prints what would change, writes nothing

A pin that no index holds a file for stops the run, naming it; nothing is written then.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shlex
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rlvr.core.files import write_text_atomic  # noqa: E402
from rlvr.core.lock import canonical, entries, format_entry  # noqa: E402

FILES = ("requirements.lock", "requirements-nodeps.txt")
PYPI = "https://pypi.org/simple"
# a PEP 503 page's links: the file's URL, with its sha256 as the fragment
_LINK = re.compile(r"""href=["']([^"'#]+)#sha256=([0-9a-f]{64})["']""")


def pip_sources() -> tuple[list[str], list[str]]:
    """The index URLs and find-links folders that pip's configuration (files and PIP_*) names."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    config: dict[str, list[str]] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        config.setdefault(key.rsplit(".", 1)[-1], []).extend(shlex.split(value)[0].split())
    indexes = config.get("index-url", [PYPI])[-1:] + config.get("extra-index-url", [])
    return indexes, config.get("find-links", [])


def _matches(filename: str, name: str, version: str) -> bool:
    """A wheel or sdist of that package at that version; `==2.13.0` takes 2.13.0+cpu, as pip does."""
    try:
        if filename.endswith(".whl"):
            found_name, found, *_ = parse_wheel_filename(filename)
        else:
            found_name, found = parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return False
    wanted = Version(version)
    same = found == wanted or (wanted.local is None and Version(found.public) == wanted)
    return canonical(found_name) == canonical(name) and same


def index_hashes(index: str, name: str, version: str) -> set[str]:
    """The sha256 of each file of name==version on a PEP 503 index (http(s) or file://)."""
    url = f"{index.rstrip('/')}/{canonical(name)}/"
    if url.startswith("file://"):
        page = Path(urllib.parse.urlparse(url).path) / "index.html"
        text = page.read_text() if page.is_file() else ""
    else:
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return set()
            raise
    return {
        sha
        for link, sha in _LINK.findall(text)
        if _matches(urllib.parse.unquote(link.rsplit("/", 1)[-1]), name, version)
    }


def folder_hashes(folder: str, name: str, version: str) -> set[str]:
    """The sha256 of each file of name==version in a find-links folder."""
    files = sorted(Path(folder).glob("*")) if Path(folder).is_dir() else []
    return {
        hashlib.file_digest(path.open("rb"), "sha256").hexdigest()
        for path in files
        if _matches(path.name, name, version)
    }


def rehash(text: str, indexes: list[str], folders: list[str]) -> tuple[str, list[str]]:
    """The file with every entry's hashes (kept ones and found ones), and the pins with none."""
    out, missing = [], []
    comments = [line for line in text.splitlines() if line.startswith("#")]
    for name, version, kept in entries(text):
        found = set(kept)
        for index in indexes:
            found |= index_hashes(index, name, version)
        for folder in folders:
            found |= folder_hashes(folder, name, version)
        if not found:
            missing.append(f"{name}=={version}")
        out.append(format_entry(name, version, sorted(found)))
    return "".join(line + "\n" for line in comments) + "".join(out), missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", default=list(FILES), help="requirements files")
    parser.add_argument("--index-url", action="append", help="instead of pip's indexes")
    parser.add_argument("--find-links", action="append", help="instead of pip's folders")
    parser.add_argument("--dry-run", action="store_true", help="write nothing")
    args = parser.parse_args(argv)
    indexes, folders = pip_sources()
    if args.index_url or args.find_links:
        indexes, folders = args.index_url or [], args.find_links or []
    new = {}
    for name in args.files:
        text = Path(name).read_text()
        new[name], missing = rehash(text, indexes, folders)
        if missing:
            print(
                f"lock_hashes: {name}: no index holds a file of {', '.join(missing)} "
                f"(looked in {' '.join(indexes + folders)}); nothing written",
                file=sys.stderr,
            )
            return 1
        before = {n: set(h) for n, _, h in entries(text)}
        added = sum(len(set(h) - before.get(n, set())) for n, _, h in entries(new[name]))
        print(f"lock_hashes: {name}: {len(entries(text))} pins, {added} hashes added")
    if not args.dry_run:
        for name, text in new.items():
            write_text_atomic(name, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
