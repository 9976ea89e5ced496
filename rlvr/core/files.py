"""Files written whole: a reader sees the old file or the complete new one, never half, with the
permissions a new file gets under the umask (outputs are the team's); and a file's md5, as DVC 3
records it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


def write_json(path: str | Path, obj: Any) -> None:
    """Write indented JSON atomically (stage outputs: metrics, summaries)."""
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def write_jsonl(path: str | Path, records: Any) -> None:
    """Write one JSON object per line atomically, keys sorted (per-prompt records, histories)."""
    write_text_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def read_jsonl(path: str | Path) -> list[dict]:
    """The JSON objects of a file written by write_jsonl (blank lines skipped; OSError,
    ValueError: missing or unreadable)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _read_umask() -> int:
    current = os.umask(0o022)  # the only way to read it is to set it: done once, at import
    os.umask(current)
    return current


_UMASK = _read_umask()


def share_with_umask(path: str | Path) -> None:
    """Give a file, or a folder and everything in it, the permissions a new file gets under the
    umask: tempfile makes private ones (0600 files, 0700 folders), and outputs are for the team."""
    path, mask = Path(path), _UMASK
    for item in [path, *(path.rglob("*") if path.is_dir() else ())]:
        if not item.is_symlink():
            os.chmod(item, (0o777 if item.is_dir() else 0o666) & ~mask)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write a text file atomically (the old file or the whole new one, never half), with the
    usual permissions."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """write_text_atomic's bytes: the old file or the whole new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        share_with_umask(tmp)
        os.replace(tmp, path)
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None:  # a failed write names none
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise


def file_md5(path: str | Path) -> str:
    """md5 of a file's bytes: what DVC 3 records for a file."""
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# Every output the pipeline deletes or rewrites lies strictly inside one of these folders (params'
# paths.* must name a path there, tests/test_config.py): never `.`, `.git`, `.dvc` or code.
OUTPUT_FOLDERS = ("reports", "models", "metrics")
# What else a run of the pipeline changes that git keeps (a nightly's results commit holds these).
OUTPUT_FILES = ("dvc.lock",)


def under_outputs(path: str | Path) -> bool:
    """Does this repository-relative path lie strictly inside one of OUTPUT_FOLDERS (not the
    folder itself, no `..`, not absolute)?"""
    parts = Path(path).parts
    return (
        len(parts) >= 2
        and parts[0] in OUTPUT_FOLDERS
        and ".." not in parts
        and not Path(path).is_absolute()
    )


def is_output(path: str | Path) -> bool:
    """Is this repository-relative path one a run of the pipeline writes (under_outputs, or one
    of OUTPUT_FILES)?"""
    return str(path) in OUTPUT_FILES or under_outputs(path)


def remove_tree(path: str | Path) -> None:
    """shutil.rmtree(path, ignore_errors=True) for an output or staging folder, refusing (a bug:
    params' paths cannot name one) a folder that holds the working directory or a git repository."""
    path = Path(path)
    if not path.exists():
        return
    target, here = path.resolve(), Path.cwd().resolve()
    if (
        target == here
        or target in here.parents
        or target.name in (".git", ".dvc")
        or (target / ".git").exists()
    ):
        raise ValueError(
            f"refusing to delete {path}: it holds the working directory or a git repository"
        )
    shutil.rmtree(path, ignore_errors=True)
