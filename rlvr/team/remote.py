"""The shared DVC remote: `dvc push` and `dvc pull` with a failure as one line naming the remote
and what was kept. DVC does the transfer: content-addressed, each file uploaded to a temporary
name and renamed, so a push cut off half-way leaves no damaged object and the next push sends
only what is missing."""

from __future__ import annotations

import re
from pathlib import Path

from rlvr.core.errors import PipelineError
from rlvr.orchestration.runs import run_dvc


class RemoteFailed(PipelineError):
    """A push or pull did not complete; the message names the remote and what is kept."""


def default_remote(root: str | Path) -> tuple[str, str] | None:
    """(name, url) of the repository's default DVC remote, or None when it has none."""
    name = run_dvc(root, "remote", "default").stdout.strip()
    if not name:
        return None
    return name, run_dvc(root, "config", f"remote.{name}.url").stdout.strip() or "?"


def dvc_error(output: str) -> str:
    """DVC's own ERROR line, without its boilerplate."""
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
    text = errors[-1] if errors else (output.strip().splitlines() or ["no output"])[-1]
    return re.sub(r"^ERROR:\s*(unexpected error - )?", "", text).strip()


def _where(root: str | Path) -> tuple[str, str]:
    found = default_remote(root)
    if found is None:
        raise RemoteFailed(
            f"{root}: no default DVC remote: add one with `dvc remote add -d <name> <url>` "
            "(docs/reliability.md)"
        )
    return found


def _cache_dir(root: str | Path) -> str:
    """Where this repository's DVC cache is (a shared one when `cache.dir` is set)."""
    return run_dvc(root, "cache", "dir").stdout.strip() or str(Path(root) / ".dvc" / "cache")


def push(root: str | Path) -> str:
    """`dvc push` to the default remote; DVC's summary line, or RemoteFailed."""
    name, url = _where(root)
    run = run_dvc(root, "push")
    if run.returncode != 0:
        raise RemoteFailed(
            f"dvc push to remote '{name}' ({url}) failed: {dvc_error(run.stdout + run.stderr)}; "
            f"kept locally: every output in {_cache_dir(root)} and dvc.lock: rerun "
            "`dvc push` once the remote answers (it sends only what is missing)"
        )
    return (run.stdout.strip().splitlines() or ["pushed"])[-1]


def pull(root: str | Path, *targets: str) -> str:
    """`dvc pull --allow-missing` from the default remote (an output never pushed is left for
    `dvc repro` to rebuild), of every output or of `targets` and what they depend on; DVC's
    summary line, or RemoteFailed."""
    name, url = _where(root)
    run = run_dvc(root, "pull", "--allow-missing", *(["--with-deps", *targets] if targets else []))
    if run.returncode != 0:
        raise RemoteFailed(
            f"dvc pull from remote '{name}' ({url}) failed: {dvc_error(run.stdout + run.stderr)}; "
            "nothing was restored: make the remote reachable, or run without it and every stage "
            "trains again"
        )
    return (run.stdout.strip().splitlines() or ["pulled"])[-1]
