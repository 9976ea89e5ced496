"""What the team's flows take from others, checked before it touches the workspace: an experiment's
dvc.lock (a worker pushed it) and the last night's results commit (on the git remote) name only
the outputs this checkout's own dvc.yaml declares, never `.`, `.git` or code; a flow run's `repo`
(anyone who reaches the Prefect API sets it) is this folder's origin or one params.yaml lists,
and is shown without its credentials (docs/security.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from dvc.dependency.param import ParamsDependency
from dvc.repo import Repo

from rlvr.core.errors import PipelineError
from rlvr.core.files import is_output
from rlvr.params.config import load_params
from rlvr.team.clones import origin_url


class Untrusted(PipelineError):
    """What another machine sent names more than the outputs; the message says what and why."""


@dataclass(frozen=True)
class Declared:
    """A stage as this checkout's dvc.yaml declares it (params.yaml interpolated)."""

    cmd: str
    deps: frozenset[str]  # file and folder deps
    params: dict[str, frozenset[str]]  # params file -> its keys (empty: the whole file)
    outs: frozenset[str]  # outs, metrics and plots DVC tracks


def declared(root: str | Path, stages: list[str] | None = None) -> dict[str, Declared]:
    """Each stage (train@0 for a per-seed one; every stage when None) as dvc.yaml declares it."""
    found = {}
    with Repo(str(root)) as repo:
        for stage in repo.index.stages:  # by name: `addressing` is relative to the cwd
            if stages is not None and stage.name not in stages:
                continue
            cmd = stage.cmd if isinstance(stage.cmd, str) else " && ".join(stage.cmd)
            found[stage.name] = Declared(
                cmd=cmd,
                deps=frozenset(
                    str(Path(d.def_path)) for d in stage.deps if not isinstance(d, ParamsDependency)
                ),
                params={
                    str(Path(d.def_path)): frozenset(d.params or ())
                    for d in stage.deps
                    if isinstance(d, ParamsDependency)
                },
                outs=frozenset(str(Path(o.def_path)) for o in stage.outs),
            )
    return found


def declared_outs(root: str | Path) -> frozenset[str]:
    """Every output dvc.yaml declares, over all its stages."""
    return frozenset(out for stage in declared(root).values() for out in stage.outs)


def check_lock_entry(stage: str, entry: dict, ours: Declared) -> list[str]:
    """What a dvc.lock entry of `stage` (an experiment's) says that this checkout's dvc.yaml does
    not: another cmd, other deps or params keys, an out it does not declare. [] when it agrees."""
    if not isinstance(entry, dict):
        return [f"{stage}: not a mapping"]
    problems = []
    if entry.get("cmd") != ours.cmd:
        problems.append(f"{stage}: cmd {entry.get('cmd')!r}, not {ours.cmd!r}")
    deps = {str(Path(str(d.get("path")))) for d in entry.get("deps") or [] if isinstance(d, dict)}
    if deps != ours.deps:
        problems.append(f"{stage}: deps differ ({', '.join(sorted(deps ^ ours.deps))})")
    params = entry.get("params") or {}
    if not isinstance(params, dict) or set(params) != set(ours.params):
        problems.append(f"{stage}: params files differ")
    else:
        for file, keys in ours.params.items():
            theirs = set(params[file] or {}) if isinstance(params[file], dict) else None
            if theirs is None or (keys and theirs != keys):
                problems.append(f"{stage}: params of {file} differ")
    outs = [o.get("path") if isinstance(o, dict) else o for o in entry.get("outs") or []]
    strange = sorted({str(Path(str(o))) for o in outs} - ours.outs)
    if strange:
        problems.append(f"{stage}: outs this dvc.yaml does not declare: {', '.join(strange)}")
    return problems


def is_declared_output(path: str, outs: frozenset[str]) -> bool:
    """Is this repository-relative file one a run writes: dvc.lock, a file in an output folder
    (an out the branch has since moved there), inside a declared out, or the .gitignore DVC
    keeps beside one?"""
    if is_output(path):
        return True
    parent = str(Path(path).parent)
    for out in outs:
        if path == out or path.startswith(out.rstrip("/") + "/"):
            return True
        if Path(path).name == ".gitignore" and parent == str(Path(out).parent):
            return True
    return False


def check_results_files(commit: str, files: list[str], outs: frozenset[str]) -> None:
    """Untrusted naming the files a results commit changed that no run of this dvc.yaml writes:
    a night lays those over the branch, so anything else (dvc.yaml, code) would run here."""
    foreign = [f for f in files if not is_declared_output(f, outs)]
    if foreign:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise Untrusted(
            f"results commit {commit[:8]} changes {len(foreign)} file(s) no stage writes ({shown}): "
            "a night carries over only dvc.lock and the stages' outputs; inspect that commit, and "
            "reset the results branch to a night you trust"
        )


def redacted(url: str) -> str:
    """`url` without its userinfo (a token, a password): what messages, artifacts and flow-run
    parameters show. An scp-like `user@host:path` has no secret and is kept."""
    parts = urlsplit(url)
    if parts.scheme and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return url


def _same_repo(a: str, b: str) -> bool:
    def key(url: str) -> str:
        return redacted(url).rstrip("/").removesuffix(".git")

    return key(a) == key(b)


def trusted_repo(repo: str | None, origin: str, allowed: list[str]) -> str:
    """The URL a flow clones for a flow run's `repo`: this folder's `origin` (None: that one) or
    an entry of params.yaml orchestration.repos, as configured here (with this machine's own
    credentials); Untrusted for any other, since the clone's code runs here."""
    if repo is None:
        return origin
    for url in (origin, *allowed):
        if _same_repo(repo, url):
            return url
    raise Untrusted(
        f"repo {redacted(repo)}: this worker clones only its folder's origin ({redacted(origin)}) "
        "and params.yaml orchestration.repos: add it there (docs/security.md)"
    )


def flow_repo(root: str | Path, repo: str | None) -> str:
    """trusted_repo for a flow run in the deployment folder `root`: its origin, its params.yaml's
    orchestration.repos."""
    allowed = load_params(Path(root) / "params.yaml").orchestration.repos
    return trusted_repo(repo, origin_url(Path(root)), allowed)


def folder_name(label: str) -> str:
    """A flow run's name or label as one folder name (letters, digits, `.`, `_`, `-`; none at
    either end): a clone lands inside its work folder whatever the name says; an experiment's
    name (spread.grid_runs) is one too."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip(".-") or "run"
