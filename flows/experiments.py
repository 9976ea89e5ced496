"""Prefect flow: the ablations and the beta sweep as DVC experiments, and their comparison.

    python -m flows.experiments                 the ablations and the sweep
    python -m flows.experiments --grid NAME     instead, every combination of orchestration.grids.NAME
    python -m flows.experiments --workers [--grid NAME]   each run on a worker of the work pool
    python -m flows.experiments --seeds         the default's seeds, one per worker, then the recipe

Queues `orchestration.ablations` (name -> `-S` overrides) and the `orchestration.sweep` grid with
`dvc exp run --queue`, runs the queue (`dvc exp run --run-all --jobs N`, N from
orchestration.jobs: each in a temporary copy, N at a time with cores // N torch threads each;
the workspace keeps the default run; a worker left up with nothing to run is stopped:
rlvr.orchestration.experiments.run_queue_to_end),
then publishes the comparison table (scripts/compare_experiments) as the artifact
`experiments-comparison`. It holds the workspace for the whole run
(rlvr.orchestration.runs.workspace_lock): started while another flow run holds it, it stops at once
with one line naming that run.

With --workers (or --seeds) nothing runs here but what compares: each run is a flow run of the
`experiment-run` deployment (this file's experiment_run), taken by any worker of the pool on any
machine, in its own clone of the git remote at this folder's commit; a run whose worker died is
submitted again (rlvr.team.spread). The runs come back with `dvc exp pull`: the grid's are compared
as above; the seeds' are taken into this workspace and the pipeline runs the recipe over them.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows import ROOT, drain_prefect  # (the package, run first, set PREFECT_HOME)
from flows.pipeline import pipeline
from rlvr.core.errors import PipelineError
from rlvr.orchestration.comparison import compare, comparison_rows
from rlvr.orchestration.experiments import (
    grid_commands,
    grid_runs,
    queue_commands,
    queued_runs,
    run_queue_to_end,
)
from rlvr.orchestration.runs import (
    StageFailed,
    ended,
    failed,
    provenance_line,
    run_dvc,
    workspace_lock,
)
from rlvr.params.config import ParamsError, load_params
from rlvr.params.experiments import check_queued_runs
from rlvr.team import spread
from rlvr.team.clones import default_workdir, deployment_root
from rlvr.team.trust import flow_repo


def _dvc(root: str, *args: str, env: dict[str, str] | None = None) -> str:
    run = run_dvc(root, *args, env=env)
    if run.returncode != 0:
        raise StageFailed(f"dvc {' '.join(args)} failed: {(run.stdout + run.stderr)[-3000:]}")
    return run.stdout + run.stderr


@task(cache_policy=NO_CACHE)
def queue_experiments(root: str, grid: str | None = None) -> int:
    orchestration = load_params(Path(root) / "params.yaml").orchestration
    try:  # the grid, and what each run's own check_params will check, before anything is queued
        spread.check_grid(orchestration, grid)
        check_queued_runs(Path(root) / "params.yaml", grid)
    except (ParamsError, spread.SpreadError) as error:
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


@flow(name=spread.EXPERIMENT_FLOW, log_prints=True)
def experiment_run(
    repo: str,
    commit: str,
    name: str,
    overrides: list[str] | None = None,
    targets: list[str] | None = None,
) -> dict:
    """One experiment on whichever worker took it (rlvr.team.spread.run_one): `repo` must be the
    worker folder's origin or one of its params.yaml orchestration.repos (it clones that one,
    with its own credentials), in the machine's work folder (default_workdir)."""
    from prefect.runtime import flow_run

    label = f"{name}-{(flow_run.id or 'local')[:8]}"
    try:
        repo = flow_repo(deployment_root(ROOT), repo)
        result = spread.run_one(
            repo, commit, spread.Run(name, overrides or [], targets or []), default_workdir(), label
        )
    except PipelineError as error:
        return failed(error)
    steps = ", ".join(f"{step} {seconds} s" for step, seconds in result["steps"].items())
    print(
        f"experiment {name}: ran {', '.join(result['ran']) or 'nothing'}; pushed "
        f"{result['exp'][:8]} in {result['seconds']} s ({steps})"
    )
    if result["removed"]:
        print(f"experiment {name}: removed leftover clone(s) here: {', '.join(result['removed'])}")
    return result


def _spread(root: str, grid: str | None, seeds: bool) -> list[list] | dict:
    say = get_run_logger().info
    runs = spread.seed_runs(root) if seeds else spread.grid_runs(root, grid)
    done, seconds = spread.spread(root, runs, say)
    if not seeds:
        say(spread.laps_line(seconds))
        return publish_comparison(root)
    laps = spread.Laps()
    spread.take_seeds(root, runs)
    seconds[spread.LAPS[3]] = laps.lap(spread.LAPS[3])
    state = pipeline(root=root, lock=False, return_state=True)  # (this flow holds it)
    seconds[spread.LAPS[4]] = laps.lap(spread.LAPS[4])
    say(spread.laps_line(seconds))
    if not state.is_completed():
        return ended(state)
    result = state.result()
    again = spread.trained_here(root, result["ran"])
    if again:
        say(
            f"experiments: ran again here, their inputs differ from the workers': {', '.join(again)}"
        )
    say(f"experiments: the recipe over {', '.join(r.name for r in runs)}: {result['verdict']}")
    return {
        "runs": done,
        "seconds": seconds,
        "ran_here": result["ran"],
        "verdict": result["verdict"],
    }


@flow(name="grpo-experiments", log_prints=True)
def experiments(
    root: str | None = None, grid: str | None = None, workers: bool = False, seeds: bool = False
) -> list[list] | dict:
    """`root`: the workspace (default: the worker's own folder, $RLVR_ROOT, else this checkout;
    a deployment's code is a temporary clone, never the workspace)."""
    root = root or str(deployment_root(ROOT))
    with ExitStack() as held:
        try:
            held.enter_context(workspace_lock(root))
            if workers or seeds:
                return _spread(root, grid, seeds)
        except PipelineError as error:  # another run holds it: one line naming it, no traceback
            return failed(error)
        queued = queue_experiments(root, grid)
        print(f"experiments: {queued} queued")
        run_queue(root)
        return publish_comparison(root)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--grid", help="queue and run only orchestration.grids.GRID")
    what.add_argument("--seeds", action="store_true", help="the default's seeds on the workers")
    parser.add_argument("--workers", action="store_true", help="each run on a worker of the pool")
    args = parser.parse_args()
    try:
        # this checkout, whatever $RLVR_ROOT says (a worker's folder, for the deployment's runs)
        rows = experiments(str(ROOT), grid=args.grid, workers=args.workers, seeds=args.seeds)
    except PipelineError as error:  # StageFailed, WorkspaceBusy
        drain_prefect()
        raise SystemExit(f"experiments: {error}") from None
    drain_prefect()
    for row in rows if isinstance(rows, list) else [rows]:
        print(row)
