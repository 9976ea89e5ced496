"""Prefect flow: the ablations and the beta sweep as DVC experiments, and their comparison.

    python -m flows.experiments                 the ablations and the sweep
    python -m flows.experiments --grid NAME     instead, every combination of orchestration.grids.NAME

Queues `orchestration.ablations` (name -> `-S` overrides) and the `orchestration.sweep` grid with
`dvc exp run --queue`, runs the queue (`dvc exp run --run-all --jobs N`, N from
orchestration.jobs: each in a temporary copy, N at a time with cores // N torch threads each;
the workspace keeps the default run; a worker left up with nothing to run is stopped:
rlvr.pipeline.experiments.run_queue_to_end),
then publishes the comparison table (scripts/compare_experiments) as the artifact
`experiments-comparison`. It holds the workspace for the whole run
(rlvr.pipeline.orchestration.workspace_lock): started while another flow run holds it, it stops at once
with one line naming that run.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows import ROOT, drain_prefect  # (the package, run first, set PREFECT_HOME)
from rlvr.core.errors import PipelineError
from rlvr.params.config import ParamsError, load_params
from rlvr.pipeline.comparison import compare, comparison_rows
from rlvr.pipeline.experiments import (
    check_queued_runs,
    grid_commands,
    grid_runs,
    queue_commands,
    queued_runs,
    run_queue_to_end,
)
from rlvr.pipeline.orchestration import (
    StageFailed,
    failed,
    provenance_line,
    run_dvc,
    workspace_lock,
)


def _dvc(root: str, *args: str, env: dict[str, str] | None = None) -> str:
    run = run_dvc(root, *args, env=env)
    if run.returncode != 0:
        raise StageFailed(f"dvc {' '.join(args)} failed: {(run.stdout + run.stderr)[-3000:]}")
    return run.stdout + run.stderr


@task(cache_policy=NO_CACHE)
def queue_experiments(root: str, grid: str | None = None) -> int:
    orchestration = load_params(Path(root) / "params.yaml").orchestration
    if grid is not None and grid not in orchestration.grids:
        raise StageFailed(
            f"--grid {grid}: params.yaml orchestration.grids has no such grid "
            f"(it has: {', '.join(orchestration.grids) or 'none'})"
        )
    try:  # what each run's own check_params will check, before anything is queued
        check_queued_runs(Path(root) / "params.yaml", grid)
    except ParamsError as error:
        raise StageFailed(str(error)) from None
    if grid is not None:
        for args in grid_commands(orchestration.grids[grid]):
            _dvc(root, *args)
        return grid_runs(orchestration.grids[grid])
    for args in queue_commands(orchestration):
        _dvc(root, *args)
    return queued_runs(orchestration)


@task(cache_policy=NO_CACHE)
def run_queue(root: str) -> str:
    jobs = load_params(Path(root) / "params.yaml").orchestration.jobs
    run = run_queue_to_end(root, jobs)  # (a stuck worker is stopped)
    if run.returncode != 0:
        raise StageFailed(f"dvc exp run --run-all --jobs {jobs} failed: {run.stdout[-3000:]}")
    return run.stdout


@task(cache_policy=NO_CACHE)
def publish_comparison(root: str) -> list[list]:
    header, rows = comparison_rows(compare(root))
    table = [
        dict(zip(header, [f"{v:.4f}" if isinstance(v, float) else v for v in row])) for row in rows
    ]
    create_table_artifact(
        table=table,
        key="experiments-comparison",
        description=f"Ablations and beta sweep. {provenance_line(Path(root))}",
    )
    return rows


@flow(name="grpo-experiments", log_prints=True)
def experiments(root: str = str(ROOT), grid: str | None = None) -> list[list]:
    with ExitStack() as held:
        try:
            held.enter_context(workspace_lock(root))
        except PipelineError as error:  # another run holds it: one line naming it, no traceback
            return failed(error)
        queued = queue_experiments(root, grid)
        print(f"experiments: {queued} queued")
        run_queue(root)
        return publish_comparison(root)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", help="queue and run only orchestration.grids.GRID")
    try:
        rows = experiments(grid=parser.parse_args().grid)
    except PipelineError as error:  # StageFailed, WorkspaceBusy
        drain_prefect()
        raise SystemExit(f"experiments: {error}") from None
    drain_prefect()
    for row in rows:
        print(row)
