"""The machine's own faults, said plainly: a full disk and a stop signal each end a stage with one
line (rlvr.pipeline.stage prints it) that says what happened, where, and what a rerun will do.

- A full disk shows up as OSError ENOSPC, as safetensors' "No space left on device", or as
  torch.save's bare "file write failed" / "basic_ios::clear: iostream error", which name no
  cause: those count as a full disk only when the disk they wrote to has almost nothing left.
- SIGTERM (a Prefect cancellation, a pod eviction) raises Stopped in the main thread, so the stage
  unwinds and says at which step it stopped instead of vanishing mid-log.
"""

from __future__ import annotations

import errno
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

from rlvr.core.errors import PipelineError

# torch.save's messages when a write fails; they give no errno, so the disk's free space decides.
_UNNAMED_WRITE_FAILURES = ("file write failed", "iostream error", "PytorchStreamWriter failed")
_NAMED_FULL_DISK = ("No space left on device", "StorageFull", "Disk quota exceeded")
NEARLY_FULL_BYTES = 64 * 2**20  # what is left once a write has filled a disk: blocks, not files


class DiskFull(PipelineError):
    """A write failed because its disk is full."""


class Stopped(PipelineError):
    """A signal stopped the stage (SIGTERM: a cancellation or an eviction)."""

    exit_code = 128 + signal.SIGTERM  # what a shell reports for a process SIGTERM ended


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def free_bytes(folder: str | Path) -> int | None:
    """Free space on the disk that holds `folder` (its nearest existing parent)."""
    path = Path(folder).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def folder_bytes(folder: str | Path) -> int:
    """The size of the files under `folder` (0 if it is missing)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def human_bytes(n: int) -> str:
    """
    >>> human_bytes(512), human_bytes(6_700_000), human_bytes(3 * 2**30)
    ('512 B', '6.4 MiB', '3.0 GiB')
    """
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def full_disk_folder(error: BaseException, folder: str | Path | None = None) -> str | None:
    """The folder a write failed in if `error` (or what caused it) is a full disk, else None:
    the file's folder when the error names the file, else `folder` (the writer's own).

    >>> full_disk_folder(OSError(errno.ENOSPC, "No space left on device", "out/a.json"))
    'out'
    >>> full_disk_folder(RuntimeError("Error while serializing: IoError(Os { code: 28, kind: "
    ...                               "StorageFull, message: ...})"), "models/final")
    'models/final'
    >>> full_disk_folder(ValueError("bad value"), ".") is None
    True
    """
    for cause in _chain(error):
        filename = getattr(cause, "filename", None) if isinstance(cause, OSError) else None
        where = str(Path(filename).parent) if filename else (str(folder) if folder else ".")
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            return where
        text = str(cause)
        if any(s in text for s in _NAMED_FULL_DISK):
            return where
        if any(s in text for s in _UNNAMED_WRITE_FAILURES):
            free = free_bytes(where)
            if free is not None and free < NEARLY_FULL_BYTES:
                return where
    return None


def disk_full_line(folder: str, rerun: str, needed: int | None = None) -> str:
    """What the stage says when the disk filled while it wrote in `folder`."""
    free = free_bytes(folder)
    space = ", ".join(
        filter(
            None,
            [
                f"about {human_bytes(needed)} needed" if needed else None,
                f"{human_bytes(free)} free" if free is not None else None,
            ],
        )
    )
    return (
        f"the disk is full: writing in {folder} failed ({space}); free some space, "
        f"then rerun: {rerun}"
    )


def _raise_stopped(signum, frame) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Stopped(f"stopped by {signal.Signals(signum).name}")


def stop_on_sigterm() -> None:
    """From now on SIGTERM raises Stopped in the main thread (only it can set a handler)."""
    signal.signal(signal.SIGTERM, _raise_stopped)
