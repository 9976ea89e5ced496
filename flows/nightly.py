"""Prefect flow: the nightly runs the branch, not a folder (rlvr.team.nightly).

    python -m flows.nightly [--repo URL] [--branch main]     (offline: Prefect's embedded server)

Each flow run clones the git remote at the branch head into its own folder, `dvc pull`s what
earlier nights made (a night with nothing new trains nothing and says so), runs the pipeline
flow there (the stages DVC says are stale), `dvc push`es, records the night as a commit on the
results branch of the git remote, and lets the model registry decide whether the new model
replaces `prod` (rlvr.team.registry). Artifacts: `nightly` (what ran, where it went) and
`promotion` (the decision, both models' figures, the reason). A push that fails ends the run
with one line naming the remote; the clone is kept and the next night pushes it first. A night
whose results commit another night beat to the branch (a manual one beside the deployment's) is
re-based onto it, or dropped when that night recorded the same commit or a newer one: one line
says which (rlvr.team.nightly.record).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from flows import ROOT, drain_prefect  # (the package, run first, set PREFECT_HOME)
from flows.pipeline import pipeline
from rlvr.core.errors import PipelineError
from rlvr.orchestration.runs import ended, failed, quiet_returned_failures
from rlvr.team.clones import WORKDIR_ENV, default_workdir, deployment_root, held
from rlvr.team.crashes import NIGHTLY_FLOW, ensure_crash_detection
from rlvr.team.nightly import (
    Night,
    checkout,
    finish,
    kept,
    night_markdown,
    plan,
    summary_line,
    tidy,
)
from rlvr.team.registry import promotion_markdown
from rlvr.team.remote import pull
from rlvr.team.trust import flow_repo, folder_name

quiet_returned_failures()


@task(cache_policy=NO_CACHE)
def finish_task(night: Night, workdir: Path, message: str) -> dict:
    """Push, record, promote (rlvr.team.nightly.finish); a Failed state with the line if the
    push or the record failed."""
    try:
        result = finish(night, workdir, message)
    except PipelineError as error:
        return failed(error)
    if result.get("dropped"):  # the results branch holds its commit or a newer one
        get_run_logger().info(result["dropped"])
        return result
    if result.get("rebased"):
        get_run_logger().info(result["rebased"])
    decision = result["decision"]
    for warning in decision.warnings:
        get_run_logger().warning(warning)
    get_run_logger().info(decision.line)
    create_markdown_artifact(
        markdown=promotion_markdown(decision), key="promotion", description=decision.line
    )
    return result


@flow(name=NIGHTLY_FLOW, log_prints=True)
def nightly(
    repo: str | None = None,
    branch: str = "main",
    results_branch: str = "results",
) -> dict:
    """One night: clone, pull, run what changed, push, record, promote. Returns {"line",
    "commit", "promoted"}. `repo`: this folder's origin (None) or one of params.yaml
    orchestration.repos; the work folder is the machine's (default_workdir), never a parameter."""
    logger = get_run_logger()
    work = default_workdir()
    try:
        repo = flow_repo(deployment_root(ROOT), repo)
    except PipelineError as error:
        return failed(error)
    ensure_crash_detection()  # a night whose worker dies ends Crashed, freeing the next night
    for earlier in kept(work):  # a night whose push failed: pushed and recorded first
        logger.info("nightly: finishing the night kept at %s first", earlier.root)
        state = finish_task.with_options(name="finish-kept-night")(
            earlier,
            work,
            f"nightly (kept): {earlier.branch} {earlier.source[:8]}",
            return_state=True,
        )
        if not state.is_completed():
            return ended(state)
    name = f"{flow_run.name or 'local'}-{time.strftime('%Y%m%dT%H%M%S')}"
    root = work / "runs" / folder_name(name)
    try:
        with held(root):  # no other night here takes its clone for a leftover
            outcome = _tonight(repo, branch, results_branch, work, name)
    except PipelineError as error:
        return failed(error)
    said = tidy(work, root, ended_well=isinstance(outcome, dict))
    if said:
        logger.info(said)
    return outcome


def _tonight(repo: str, branch: str, results_branch: str, work: Path, name: str):
    """The night itself, in its own clone: its result, or the state the flow ends with."""
    logger = get_run_logger()
    try:
        night = checkout(repo, branch, results_branch, work, name)
        pulled = pull(night.root)
    except PipelineError as error:
        return failed(error)
    if not plan(night):
        logger.info(summary_line(night, None))
    else:
        logger.info("nightly: %s stage(s) to run: %s", len(night.stale), ", ".join(night.stale))
        state = pipeline(root=str(night.root), return_state=True)
        if not state.is_completed():
            logger.info("nightly: the clone is kept at %s", night.root)
            return ended(state)
        night.ran = state.result()["ran"]
    done = finish_task(
        night,
        work,
        f"nightly {name}: {branch} {night.source[:8]}: "
        + (", ".join(night.stale) or "nothing new"),
        return_state=True,
    )
    if not done.is_completed():
        return ended(done)
    result = done.result()
    if result.get("dropped"):
        return {"line": result["dropped"], "commit": None, "promoted": False}
    line = summary_line(night, result["commit"])
    create_markdown_artifact(
        markdown=night_markdown(night, line, result, pulled), key="nightly", description=line
    )
    logger.info(line)
    return {"line": line, "commit": result["commit"], "promoted": result["decision"].promoted}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", help="the git remote (default: this folder's origin)")
    parser.add_argument("--branch", default="main")
    parser.add_argument("--results-branch", default="results")
    parser.add_argument(
        "--workdir", help=f"clones and the shared cache (${WORKDIR_ENV}, else {default_workdir()})"
    )
    args = parser.parse_args()
    if args.workdir:
        os.environ[WORKDIR_ENV] = args.workdir
    try:
        result = nightly(args.repo, args.branch, args.results_branch)
    except PipelineError as error:
        drain_prefect()
        raise SystemExit(f"nightly: {error}") from None
    drain_prefect()
    print(result["line"])
