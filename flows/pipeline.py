"""Prefect flow: the DVC pipeline, stage by stage, gated, with a versioned artifact per stage.

    python -m flows.pipeline            (offline: Prefect's embedded server, PREFECT_HOME=.prefect)

dvc.yaml stays the single source of truth: the stage list is read from it, one `dvc status`
says which stages are stale, and each task from the first stale stage on runs `dvc repro
<stage>`, so DVC decides what is up to date. Training stages are retried
(`orchestration.retries`), every stage has a timeout, and the gate and validation fail the flow at
once with the failing tests or rows in the error. After each stage an artifact is published under
the same key every run (Prefect versions them), its description carrying the git commit and the
dvc.lock hashes it came from.
"""

from __future__ import annotations

from pathlib import Path

from flows import ROOT  # first: it sets PREFECT_HOME before prefect is imported
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from rlvr.config import load_params
from rlvr.orchestration import (ARTIFACT_BUILDERS, StageFailed, dvc_stages, publish_stage_artifacts, run_dvc_stage,
                                stale_stages, stages_to_run)


@task(cache_policy=NO_CACHE)
def stage_task(stage: str, root: str) -> str:
    """`dvc repro <stage>`; raises StageFailed naming the stage and what broke."""
    logger = get_run_logger()
    logger.info("dvc repro %s", stage)
    output = run_dvc_stage(stage, root)
    logger.info(output[-4000:])
    return output


@task(cache_policy=NO_CACHE)
def artifact_task(stage: str, root: str) -> list[str]:
    """Publish this stage's artifacts; returns their keys."""
    return publish_stage_artifacts(stage, Path(root))


@flow(name="grpo-pipeline", log_prints=True)
def pipeline(root: str = str(ROOT), stages: list[str] | None = None) -> dict[str, list[str]]:
    """Run every DVC stage in dvc.yaml's order (or the given subset) and publish artifacts."""
    params = load_params(Path(root) / "params.yaml").orchestration
    order = stages or dvc_stages(Path(root) / "dvc.yaml")
    # One `dvc status` for the whole pipeline: the up-to-date stages before the first stale one
    # need no `dvc repro` each (every call re-checks all upstream stages, ~1 s apiece).
    to_run = stages_to_run(order, stale_stages(root))
    published: dict[str, list[str]] = {}
    for stage in order:
        if stage in to_run:
            retried = stage in params.retried_stages
            run = stage_task.with_options(
                name=f"dvc-repro-{stage}", retries=params.retries if retried else 0,
                retry_delay_seconds=params.retry_delay_seconds,
                timeout_seconds=params.timeouts.get(stage, params.default_timeout))
            run(stage, root)
        else:
            get_run_logger().info("%s: up to date (dvc status), not rerun", stage)
        published[stage] = (artifact_task.with_options(name=f"artifacts-{stage}")(stage, root)
                            if stage in ARTIFACT_BUILDERS else [])
    return published


if __name__ == "__main__":
    try:
        keys = pipeline()
    except StageFailed as error:
        raise SystemExit(f"pipeline: {error}") from None
    print("pipeline: artifacts " + ", ".join(k for ks in keys.values() for k in ks))
