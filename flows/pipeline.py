"""Prefect flow: the DVC pipeline, stage by stage, gated, with a versioned artifact per stage.

    python -m flows.pipeline            (offline: Prefect's embedded server, PREFECT_HOME=.prefect)

dvc.yaml stays the single source of truth: the stage list is read from it, one `dvc status`
says which stages are stale, and each task from the first stale stage on runs `dvc repro
<stage>`, so DVC decides what is up to date. Training stages are retried
(`orchestration.retries`), every stage has a timeout, and a stage that stops on expected grounds
(the gate, bad params, bad rows, a smoke check, a timeout) ends the flow run Failed with that
stage's line as its message and no traceback; a bug keeps its traceback. One flow run at a time
per workspace (rlvr.orchestration.runs.workspace_lock): a second one stops at once naming the first.
A per-seed stage (train, evaluate) runs with `--keep-going`: a seed that still fails after its
retries leaves the other seeds to run; the flow then runs the recipe on the seeds that ran (its
artifact names the failed one; no verdict from fewer than 2) and ends Failed with the seed's line
and that recipe's verdict line. `dvc repro` later reruns only what failed.
After each stage an artifact is published under the same key every run (Prefect versions them),
its description carrying the git commit and the dvc.lock hashes it came from. The flow returns
{"artifacts": {stage: keys}, "verdict": the audit's verdict or None, "ran": the stages DVC ran}.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows import ROOT, drain_prefect  # (the package, run first, set PREFECT_HOME)
from rlvr.core.errors import PipelineError
from rlvr.orchestration.runs import (
    ARTIFACT_BUILDERS,
    RECIPE_STAGE,
    StageFailed,
    audit_verdict,
    dvc_stages,
    failed,
    publish_stage_artifacts,
    quiet_returned_failures,
    readable,
    recipe_alone,
    repro_stage,
    run_summary,
    seeded_stages,
    stage_failure,
    stages_ran,
    stages_to_run,
    stale_stages,
    workspace_lock,
)
from rlvr.params.config import ParamsError, load_params

quiet_returned_failures()


@task(cache_policy=NO_CACHE)
def stage_task(stage: str, root: str, keep_going: bool = False) -> str:
    """`dvc repro <stage>` (`--keep-going` for a per-seed stage: the other seeds run on); a
    Failed state naming the stage and what broke if it fails."""
    logger = get_run_logger()
    logger.info("dvc repro %s%s", "--keep-going " if keep_going else "", stage)
    try:
        output = repro_stage(stage, root, keep_going)
    except StageFailed as error:
        # Returned, not raised, so no traceback is logged (rlvr.orchestration.runs.failed). Prefect
        # 3.9.1 retries a returned Failed state like a raised exception (task_engine.py
        # SyncTaskRunEngine.handle_success -> handle_retry): a killed training run is still
        # retried and resumes (tests/test_flow_failures.py).
        return failed(error)
    logger.info(readable(output))  # every seed's lines: train@0's resume is early in it
    return output


@task(cache_policy=NO_CACHE)
def recipe_task(root: str) -> str:
    """The recipe over the seeds that ran, after one failed (rlvr.orchestration.runs.recipe_alone); its
    verdict line, or a Failed state."""
    try:
        output, line = recipe_alone(root)
    except StageFailed as error:
        return failed(error)
    get_run_logger().info(readable(output))
    return line


@task(cache_policy=NO_CACHE)
def artifact_task(stage: str, root: str) -> list[str]:
    """Publish this stage's artifacts; returns their keys."""
    return publish_stage_artifacts(stage, Path(root))


@flow(name="grpo-pipeline", log_prints=True)
def pipeline(root: str = str(ROOT), stages: list[str] | None = None, lock: bool = True) -> dict:
    """Run every DVC stage in dvc.yaml's order (or the given subset) and publish artifacts;
    returns {"artifacts": {stage: published keys}, "verdict": the audit's verdict or None}.
    lock=False: the calling flow holds the workspace already (the experiments flow's seeds)."""
    with ExitStack() as held:
        try:
            if lock:
                held.enter_context(workspace_lock(root))
        except PipelineError as error:  # another run holds it, or root is no DVC repository
            return failed(error)
        return _run_stages(root, stages)


def _run_stages(root: str, stages: list[str] | None):
    unreadable = None
    try:
        params = load_params(Path(root) / "params.yaml").orchestration
    except ParamsError as error:
        unreadable = error
    if unreadable is not None:
        # The flow cannot read its own settings: check_params, the stage that owns the verdict on
        # params.yaml, fails on the same value and says why in its own line. (Run outside the
        # `except`: Prefect would log the ParamsError's traceback as the task's.)
        state = stage_task.with_options(name="dvc-repro-check_params")(
            "check_params", root, return_state=True
        )
        if state.is_completed():  # it passed what the flow could not read: say what that was
            return failed(unreadable)
        return stage_failure("check_params", state)
    order = stages or dvc_stages(Path(root) / "dvc.yaml")
    # One `dvc status` for the whole pipeline: the up-to-date stages before the first stale one
    # need no `dvc repro` each (every call re-checks all upstream stages, ~1 s apiece).
    to_run = stages_to_run(order, stale_stages(root))
    seeded = seeded_stages(Path(root) / "dvc.yaml")
    published: dict[str, list[str]] = {}
    ran: list[str] = []  # what `dvc repro` ran (train@0, ...), not what it found up to date
    lost = None  # (stage, its ending) once a seed failed: the other seeds go on
    for stage in order:
        if lost and stage not in seeded:
            break
        if stage in to_run:
            retried = stage in params.retried_stages
            run = stage_task.with_options(
                name=f"dvc-repro-{stage}",
                retries=params.retries if retried else 0,
                retry_delay_seconds=params.retry_delay_seconds,
                timeout_seconds=params.timeouts.get(stage, params.default_timeout),
            )
            state = run(stage, root, stage in seeded, return_state=True)
            if state.is_completed():
                ran += stages_ran(state.result())
            else:
                ended = stage_failure(stage, state)
                if stage not in seeded:
                    return ended
                lost = lost or (stage, ended)
                continue
        else:
            get_run_logger().info("%s: up to date (dvc status), not rerun", stage)
        published[stage] = (
            artifact_task.with_options(name=f"artifacts-{stage}")(stage, root)
            if stage in ARTIFACT_BUILDERS
            else []
        )
    if lost:
        return _seeds_that_ran(root, order, *lost)
    return {"artifacts": published, "verdict": audit_verdict(root), "ran": ran}


def _seeds_that_ran(root: str, order: list[str], stage: str, ended):
    """A seed failed (after its retries): the recipe over the seeds that ran, its artifact, and
    the flow ends Failed with the seed's line and that recipe's verdict line."""
    if RECIPE_STAGE not in order:
        return ended
    said = recipe_task.with_options(name=f"{RECIPE_STAGE}-of-the-seeds-that-ran")(
        root, return_state=True
    )
    if not said.is_completed():
        return stage_failure(RECIPE_STAGE, said)
    artifact_task.with_options(name=f"artifacts-{RECIPE_STAGE}")(RECIPE_STAGE, root)
    return failed(StageFailed(f"{ended.message}; {said.result()}"))


if __name__ == "__main__":
    import argparse

    # no options: --help prints this and runs nothing (a bare call runs the pipeline)
    argparse.ArgumentParser(
        "python -m flows.pipeline", description=__doc__.splitlines()[0]
    ).parse_args()
    try:
        result = pipeline()
    except PipelineError as error:  # StageFailed, WorkspaceBusy: the run's one line, no traceback
        drain_prefect()
        raise SystemExit(f"pipeline: {error}") from None
    drain_prefect()
    print(f"pipeline: {run_summary(result)}")
