"""The pinned environment as requirements.lock and requirements-nodeps.txt write it: one entry per
package, `name==version` with the sha256 of each distribution file pip may install for it, in
pip's hash-checking format (./dev installs with --require-hashes, so a file whose bytes differ is
refused). scripts/lock_hashes.py writes the hashes; everything else reads the pins here."""

from __future__ import annotations

import re
from pathlib import Path

_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def canonical(name: str) -> str:
    """PEP 503's name: pydantic_core, pydantic-core and Pydantic.Core are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def entries(text: str) -> list[tuple[str, str, list[str]]]:
    """(name as written, version, sha256 hashes) for each pin, in file order; comments skipped.
    ValueError names the first line that is not a pin with its hash options."""
    found = []
    logical = re.sub(r"\\\n", " ", text)  # a backslash at a line's end continues it
    for line in logical.splitlines():
        pin, *options = line.split("#", 1)[0].split() or [""]
        if not pin:
            continue
        match, hashes = _PIN.fullmatch(pin), [_HASH.fullmatch(o) for o in options]
        if not match or not all(hashes):
            raise ValueError(f"not a pin with --hash=sha256:<hex> options: {line.strip()!r}")
        found.append((match.group(1), match.group(2), [h.group(1) for h in hashes]))
    return found


def pins(path: str | Path) -> dict[str, str]:
    """Canonical name -> pinned version of a requirements file of this project."""
    return {canonical(name): version for name, version, _ in entries(Path(path).read_text())}


def format_entry(name: str, version: str, hashes: list[str]) -> str:
    """pip-compile's layout: the pin, then one hash per continued line, sorted."""
    lines = [f"{name}=={version}"] + [f"    --hash=sha256:{h}" for h in sorted(set(hashes))]
    return " \\\n".join(lines) + "\n"
