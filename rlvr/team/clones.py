"""Git for the team's flows: one runner whose failure is one line, and a fresh clone of the git
remote on the machine's shared DVC cache (each night of the nightly, each run an experiment worker
takes)."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlvr.core.errors import PipelineError
from rlvr.orchestration.runs import run_dvc

WORKDIR_ENV = (
    "RLVR_NIGHTLY_DIR"  # the machine's clones and shared DVC cache (nightly-docker sets it)
)


class GitFailed(PipelineError):
    """A git or DVC command of a team flow failed; the message is the line that says why."""


class CloneHeld(PipelineError):
    """Another running flow on this machine holds the clone (held)."""


def git_cause(output: str) -> str:
    """The line of git's output that says why it failed: a push's rejected ref (`! [rejected]
    results -> results (non-fast-forward)`) and git's first `fatal:` or `error:` line, which
    names the URL; not its last line, often a `hint:` or "and the repository exists."; any
    userinfo in a URL (a token) is dropped."""
    lines = [" ".join(line.split()) for line in output.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("! [")][:1]
    said += [line for line in lines if line.startswith(("fatal:", "error:"))][:1]
    text = "; ".join(said) or (lines or ["no output"])[-1]
    return re.sub(r"([a-z][a-z0-9+.-]*://)[^/@\s]+@", r"\1", text)


def git(root: str | Path, *args: str) -> str:
    """`git <args>` in root; its stdout, or GitFailed with the line that says why (git_cause)."""
    run = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if run.returncode != 0:
        said = git_cause(run.stderr + "\n" + run.stdout)
        raise GitFailed(f"git {' '.join(args[:2])} failed in {root}: {said}")
    return run.stdout.strip()


def rev(root: str | Path, ref: str) -> str | None:
    """The commit `ref` names in root, or None when it names none."""
    run = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    return run.stdout.strip() or None


ROOT_ENV = "RLVR_ROOT"  # the folder a deployment's flow runs for (./dev and each worker set it)


def deployment_root(default: Path) -> Path:
    """The folder a flow run is for: $RLVR_ROOT, the worker's own (a deployment's code is a fresh
    clone of the git remote, prefect.yaml's pull step, so the flows' folder is a temporary one),
    else `default` (the flows' folder, when they run from a checkout)."""
    return Path(os.environ.get(ROOT_ENV) or default)


def default_workdir() -> Path:
    """Where the team's flows keep their clones and the machine's shared DVC cache:
    $RLVR_NIGHTLY_DIR, else ~/.cache/rlvr/nightly."""
    return Path(os.environ.get(WORKDIR_ENV) or Path.home() / ".cache" / "rlvr" / "nightly")


def clone(repo: str, root: Path, workdir: Path, branch: str | None = None) -> str:
    """A fresh clone of `repo` (at `branch`, else its default branch) in root, its DVC cache the
    machine's shared one (<workdir>/cache); the commit it checked out. `root` lies inside
    `workdir` (it is deleted first: never anything else)."""
    if Path(workdir).resolve() not in Path(root).resolve().parents:
        raise GitFailed(f"{root} is not inside the work folder {workdir}: no clone made there")
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    git(workdir, "clone", "--quiet", *(["--branch", branch] if branch else []), repo, str(root))
    for key, value in (("user.name", "rlvr team"), ("user.email", "team@rlvr.invalid")):
        if not subprocess.run(["git", "config", key], cwd=root, capture_output=True).stdout:
            git(root, "config", key, value)
    (workdir / "cache").mkdir(parents=True, exist_ok=True)
    run = run_dvc(root, "cache", "dir", "--local", str(workdir / "cache"))
    if run.returncode != 0:
        raise GitFailed(f"dvc cache dir failed in {root}: {run.stderr.strip()[-300:]}")
    return git(root, "rev-parse", "HEAD")


def origin_url(root: Path) -> str:
    """The git remote a folder was cloned from (the team flows' default repo)."""
    try:
        return git(root, "remote", "get-url", "origin")
    except GitFailed:
        raise GitFailed(
            f"{root} has no git remote 'origin': pass the flow's repo parameter (a git URL)"
        ) from None


@contextmanager
def held(root: Path) -> Iterator[Path]:
    """Hold the clone `root` (a lock file beside it, taken before the clone is made), so no other
    flow run on this machine takes it for a leftover; CloneHeld when another process holds it.
    (flock: a killed run's lock goes with its process.)"""
    lock = lock_file(root)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CloneHeld(f"{root} is the clone of another running flow") from None
        try:
            yield root
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def leftovers(folder: Path, keep: set[str], remove: bool) -> list[Path]:
    """The clones under `folder` that no running flow holds (held) and `keep` does not name:
    those of runs that failed (kept for a look) or were killed. `remove`: delete them, and their
    lock files (after a run that ended well); else only name them."""
    found = []
    for clone_root in sorted(folder.glob("*/")) if folder.is_dir() else []:
        if str(clone_root) in keep:
            continue
        try:
            with held(clone_root):
                if remove:
                    remove_clone(clone_root)
                found.append(clone_root)
        except CloneHeld:  # a run going on now
            continue
    return found


def lock_file(root: Path) -> Path:
    """The lock beside a clone that held() takes: <root>.lock."""
    return root.with_name(root.name + ".lock")


def remove_clone(root: Path) -> None:
    """A clone and its lock file, gone."""
    shutil.rmtree(root, ignore_errors=True)
    lock_file(root).unlink(missing_ok=True)
