"""The nightly runs the branch: each night works in its own fresh clone of the git remote, restores
what earlier nights made from the DVC remote, runs what changed, pushes the data to the DVC remote
and records the run as a commit on a results branch of the git remote.

Why a results branch (not `dvc exp push`): the registry's versions are git tags on the commit
whose dvc.lock holds the model, `dvc artifacts get` and `git log` read it with no DVC experiment
refs, and a teammate sees every night with `git log --first-parent results ^main`. Each results commit
has two parents: the previous night's results commit (first) and the branch commit it ran
(second), so each night's code is one `git show results^2` away.

A night starts from the branch head, with the output files the last night recorded (dvc.lock,
metrics/, the reports git keeps) laid over it, except those the branch itself changed since
that night: what a developer committed wins, and DVC reruns every stage whose code, params or
data differ from the lock. Every night's clone shares one DVC cache on the machine
(`<workdir>/cache`), so a night whose push failed leaves its outputs there, its clone is kept,
and the next night pushes and records it before it runs.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from rlvr.core.errors import PipelineError
from rlvr.orchestration.runs import dvc_stages, stale_stages
from rlvr.report.render import md_escape
from rlvr.team.clones import GitFailed, clone, git, leftovers, lock_file, remove_clone, rev
from rlvr.team.registry import promote_after_run
from rlvr.team.remote import push
from rlvr.team.trust import (
    check_results_files,
    declared_outs,
    folder_name,
    is_declared_output,
)

PENDING = "pending.json"  # under the workdir: kept clones whose push or record failed


class NightlyError(PipelineError):
    """A night cannot go on; the message says what failed and what is kept."""


@dataclass
class Night:
    """One night's clone and where it started."""

    root: Path
    branch: str
    results_branch: str
    source: str  # the branch commit it runs
    results_before: str | None  # the last night's results commit (None: the first night)
    carried: list[str] = field(default_factory=list)  # output files laid over from it
    stale: list[str] = field(default_factory=list)  # the stages DVC said were stale
    ran: list[str] = field(default_factory=list)  # the stages `dvc repro` ran (train@0, ...)
    rebased: str | None = None  # the results head it was re-based onto (another night's)

    @property
    def nothing_new(self) -> bool:
        return not self.stale


def checkout(repo: str, branch: str, results_branch: str, workdir: Path, name: str) -> Night:
    """A fresh clone of `repo` at `branch`'s head in <workdir>/runs/<name>, on the machine's
    shared DVC cache, with the last night's outputs laid over it (Untrusted when that results
    commit changed anything else)."""
    root = workdir / "runs" / folder_name(name)
    source = clone(repo, root, workdir, branch)
    before = rev(root, f"origin/{results_branch}")
    night = Night(root, branch, results_branch, source, before)
    if before:
        ran = git(root, "rev-parse", f"{before}^@").split()[-1]  # the branch commit it ran
        recorded = set(git(root, "diff", "--name-only", ran, before).splitlines())
        # the results branch is laid over code that runs here: outputs only, or nothing
        check_results_files(before, sorted(recorded), declared_outs(root))
        changed = set(git(root, "diff", "--name-only", ran, source).splitlines())
        night.carried = sorted(recorded - changed)
        if night.carried:
            git(root, "checkout", before, "--", *night.carried)
    return night


def plan(night: Night) -> list[str]:
    """The stages DVC says must run, after the pull (None from DVC: all of them)."""
    stale = stale_stages(night.root)
    if stale is None:
        night.stale = ["(dvc status failed: every stage)"]
    else:  # in dvc.yaml's order (a foreach stage by its name: train for train@0, train@1, ...)
        order = dvc_stages(night.root / "dvc.yaml")
        night.stale = sorted(stale, key=lambda s: (order.index(s) if s in order else len(order), s))
    return night.stale


class Dropped(PipelineError):
    """A night not recorded because the results branch already holds its commit or a newer one;
    the message says which (its clone is removed, never kept)."""


def _outputs_changed(root: Path) -> list[str]:
    """The files of the night's clone that differ from its checkout and that a run of this
    dvc.yaml writes (dvc.lock, the outputs git keeps): what a results commit may hold."""
    listed = git(
        root, "ls-files", "--modified", "--deleted", "--others", "--exclude-standard", "-z"
    )
    outs = declared_outs(root)
    return sorted({p for p in listed.split("\0") if p and is_declared_output(p, outs)})


def record(night: Night, message: str) -> str | None:
    """Commit the night's outputs (dvc.lock, metrics/, the reports git keeps: nothing else its
    clone holds) as the next results commit and push it to the git remote's results branch; its
    hash, or None when the tree is the last night's (nothing to record). HEAD is then that commit
    (the registry tags it). When another night recorded meanwhile (the push is rejected): Dropped
    if it recorded this night's commit or a newer one, else this night is re-based onto it."""
    root = night.root
    changed = _outputs_changed(root)
    if changed:
        git(root, "add", "-A", "--", *changed)
    tree = git(root, "write-tree")
    if night.results_before and tree == git(root, "rev-parse", f"{night.results_before}^{{tree}}"):
        git(root, "checkout", "--quiet", night.results_before)
        return None
    parents = [night.results_before, night.source] if night.results_before else [night.source]
    commit = _push_results(night, tree, parents, message)
    git(root, "checkout", "--quiet", "-B", night.results_branch, commit)
    return commit


def _push_results(night: Night, tree: str, parents: list[str], message: str) -> str:
    """The results commit of `tree` on `parents`, pushed; its first parent is the results head
    the night read, so the push fast-forwards, or is rejected when another night recorded
    meanwhile (a manual night beside the deployment's): then the newer record wins."""
    root = night.root
    commit = git(root, "commit-tree", tree, *[a for p in parents for a in ("-p", p)], "-m", message)
    try:
        git(root, "push", "--quiet", "origin", f"{commit}:refs/heads/{night.results_branch}")
        return commit
    except GitFailed as error:
        if "[rejected]" not in str(error):
            raise
    git(root, "fetch", "--quiet", "origin", night.results_branch)
    head = git(root, "rev-parse", "FETCH_HEAD")
    recorded = git(root, "rev-parse", f"{head}^@").split()[-1]  # the branch commit it ran
    if recorded == night.source:
        raise Dropped(
            f"nightly: not recorded: results {head[:8]} already records {night.source[:8]} "
            "(another night ran it meanwhile)"
        )
    if _is_ancestor(root, night.source, recorded):
        raise Dropped(
            f"nightly: not recorded: results {head[:8]} records {recorded[:8]}, newer than this "
            f"night's {night.source[:8]}: an older night never lays its outputs over a newer one"
        )
    night.rebased = head
    return _push_results(night, tree, [head, night.source], message)


def _is_ancestor(root: Path, older: str, newer: str) -> bool:
    run = subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], cwd=root)
    return run.returncode == 0


def keep(workdir: Path, night: Night) -> None:
    """Note a night whose push or record failed: the next night finishes it first."""
    pending = _pending(workdir)
    pending[str(night.root)] = {
        "branch": night.branch,
        "results_branch": night.results_branch,
        "source": night.source,
        "results_before": night.results_before,
        "stale": night.stale,
        "ran": night.ran,
    }
    (workdir / PENDING).write_text(json.dumps(pending, indent=1))


def kept(workdir: Path) -> list[Night]:
    """The nights kept by keep(), oldest first, whose clones still exist (an entry whose clone
    someone removed is dropped from the list)."""
    pending = _pending(workdir)
    gone = [root for root in pending if not Path(root).exists()]
    if gone:
        for root in gone:
            del pending[root]
        (workdir / PENDING).write_text(json.dumps(pending, indent=1))
    return [
        Night(
            Path(root),
            n["branch"],
            n["results_branch"],
            n["source"],
            n["results_before"],
            stale=n["stale"],
            ran=n.get("ran", []),
        )
        for root, n in _pending(workdir).items()
        if Path(root).exists()
    ]


def forget(workdir: Path, night: Night) -> None:
    pending = _pending(workdir)
    pending.pop(str(night.root), None)
    (workdir / PENDING).write_text(json.dumps(pending, indent=1))
    remove_clone(night.root)


def tidy(workdir: Path, root: Path, ended_well: bool) -> str | None:
    """After the night whose clone was `root`: when it ended well, its lock and the leftovers of
    earlier nights go; else the leftovers are named. The line to log, or None."""
    if ended_well:
        lock_file(root).unlink(missing_ok=True)
        removed = leftovers(workdir / "runs", set(_pending(workdir)), remove=True)
        if removed:
            names = ", ".join(r.name for r in removed)
            return f"nightly: removed {len(removed)} leftover clone(s) of earlier nights: {names}"
        return None
    left = leftovers(workdir / "runs", set(_pending(workdir)), remove=False)
    return f"nightly: clones kept for a look: {', '.join(map(str, left))}" if left else None


def _pending(workdir: Path) -> dict:
    path = workdir / PENDING
    return json.loads(path.read_text()) if path.exists() else {}


def summary_line(night: Night, commit: str | None) -> str:
    """The night in one line."""
    at = f"{night.branch} {night.source[:8]}"
    if night.nothing_new:
        return f"nightly: nothing new at {at}: every stage up to date, nothing trained"
    where = f"results {commit[:8]}" if commit else "no new results commit"
    return f"nightly: ran {len(night.ran)} stage(s) at {at} ({', '.join(night.ran)}); {where}"


def finish(night: Night, workdir: Path, message: str) -> dict:
    """Push the night's data to the DVC remote, record it on the results branch, and let the
    registry decide on its model. A failed push or record keeps the clone for the next night
    (keep) and raises NightlyError in one line; a recorded night's clone is removed, and so is a
    dropped one's ({"dropped": its line}: the results branch holds its commit or a newer one)."""
    try:
        pushed = push(night.root)
        commit = record(night, message)
    except Dropped as dropped:
        forget(workdir, night)
        return {"pushed": pushed, "commit": None, "decision": None, "dropped": str(dropped)}
    except PipelineError as error:
        keep(workdir, night)
        raise NightlyError(
            f"{error}; the night's clone is kept at {night.root}: the next night pushes and "
            "records it first"
        ) from None
    decision = promote_after_run(night.root, push=True)
    forget(workdir, night)
    result = {"pushed": pushed, "commit": commit, "decision": decision}
    if night.rebased:
        result["rebased"] = (
            f"nightly: re-based onto results {night.rebased[:8]} (another night recorded "
            f"meanwhile, an older commit than this night's {night.source[:8]}): {commit[:8]}"
        )
    return result


def night_markdown(night: Night, line: str, result: dict | None, pulled: str) -> str:
    """The Prefect artifact `nightly`: what the night started from, what ran, where it went."""
    rows = [
        ("branch", f"{night.branch} {night.source}"),
        ("last results", night.results_before or "none (the first night)"),
        ("laid over from them", f"{len(night.carried)} file(s)"),
        ("dvc pull", pulled),
        ("stale stages (dvc status)", ", ".join(night.stale) or "none: nothing new"),
        ("stages that ran", ", ".join(night.ran) or "none"),
    ]
    if result:
        rows += [
            ("dvc push", result["pushed"]),
            ("results commit", result["commit"] or "none (the same files as the last night)"),
            ("registry", result["decision"].line),
        ]
    table = "\n".join(f"| {k} | {md_escape(v)} |" for k, v in rows)
    return f"# {md_escape(line)}\n\n| | |\n|---|---|\n{table}\n"
