"""DVC experiments: the commands that queue and run the ablations, the sweep and the grids, and
the params.yaml each of those runs gets (DVC's `-S` code applied to a copy, checked before anything
is queued). Their comparison is rlvr.pipeline.comparison.
"""

from __future__ import annotations

import itertools
import math
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rlvr.params.config import (
    GRID_SETTINGS,
    PARAMS_FILE,
    OrchestrationParams,
    Params,
    ParamsError,
    load_params,
)
from rlvr.params.profiles import apply_overrides
from rlvr.pipeline.orchestration import tool_env


def override_value(value: Any) -> str:
    """A value as a `-S` override spells it (YAML's true / false for booleans).

    >>> override_value(False), override_value(0.1), override_value("best_val")
    ('false', '0.1', 'best_val')
    """
    return str(value).lower() if isinstance(value, bool) else str(value)


def queue_commands(orchestration) -> list[list[str]]:
    """The `dvc` argument lists that queue params.yaml's ablations and sweep grid, one per call.

    >>> for args in queue_commands(OrchestrationParams(ablations={"no-kl": ["train.grpo.beta=0"]},
    ...                                                sweep={"train.grpo.beta": [0.01, 0.1]})):
    ...     print(" ".join(args))
    exp run --queue -n no-kl -S train.grpo.beta=0
    exp run --queue -S train.grpo.beta=0.01,0.1
    """
    commands = [
        ["exp", "run", "--queue", "-n", name, *[a for o in overrides for a in ("-S", o)]]
        for name, overrides in orchestration.ablations.items()
    ]
    commands += [
        ["exp", "run", "--queue", "-S", f"{key}={','.join(map(override_value, values))}"]
        for key, values in orchestration.sweep.items()
    ]
    return commands


def grid_commands(grid: dict) -> list[list[str]]:
    """The `dvc` argument lists that queue every run of a grid: each param's list of values is
    DVC's grid of `-S` lists; a `settings` entry (name -> `-S` overrides) gives one call per
    setting, its overrides crossed with those lists.

    >>> for args in grid_commands({"seed": [0, 1], "train.dynamic_sampling": [False, True]}):
    ...     print(" ".join(args))
    exp run --queue -S seed=0,1 -S train.dynamic_sampling=false,true
    >>> for args in grid_commands({"seed": [0, 1], "settings": {
    ...         "default": [], "pass-at-k": ["train.advantage=pass_at_k"]}}):
    ...     print(" ".join(args))
    exp run --queue -S seed=0,1
    exp run --queue -S train.advantage=pass_at_k -S seed=0,1
    """
    lists = [
        a
        for key, values in grid.items()
        if key != GRID_SETTINGS
        for a in ("-S", f"{key}={','.join(map(override_value, values))}")
    ]
    return [
        ["exp", "run", "--queue", *[a for o in overrides for a in ("-S", o)], *lists]
        for overrides in grid_settings(grid).values()
    ]


def grid_settings(grid: dict) -> dict[str, list[str]]:
    """A grid's named settings (name -> `-S` overrides); one unnamed empty setting if it has
    none."""
    return grid.get(GRID_SETTINGS) or {"": []}


def grid_runs(grid: dict) -> int:
    """How many experiments a grid queues: the product of its lists' lengths, times its settings.

    >>> grid_runs({"seed": [0, 1, 2, 3], "train.select": ["last", "best_val"]})
    8
    >>> grid_runs({"seed": [0, 1, 2, 3], "settings": {"a": [], "b": ["seed=1"]}})
    8
    """
    return len(grid_settings(grid)) * math.prod(
        len(values) for key, values in grid.items() if key != GRID_SETTINGS
    )


def queued_runs(orchestration) -> int:
    """How many experiments queue_commands queues (a sweep call queues one per value)."""
    return len(orchestration.ablations) + sum(len(v) for v in orchestration.sweep.values())


def experiment_runs(
    orchestration: OrchestrationParams, grid: str | None = None
) -> list[tuple[str, list[str]]]:
    """(where, `-S` overrides) of every run the experiments flow queues: the ablations and the
    sweep, or, given `grid`, only that grid's combinations. (The flow queues them with
    queue_commands / grid_commands; a test expands those with DVC's own sweep code and checks
    they are these runs.)"""
    if grid is not None:
        return _grid_runs(grid, orchestration.grids[grid])
    runs = [
        (f"orchestration.ablations.{name}", list(overrides))
        for name, overrides in orchestration.ablations.items()
    ]
    runs += [
        (f"orchestration.sweep.{key}", [f"{key}={override_value(value)}"])
        for key, values in orchestration.sweep.items()
        for value in values
    ]
    return runs


def _grid_runs(name: str, grid: dict) -> list[tuple[str, list[str]]]:
    lists = {key: values for key, values in grid.items() if key != GRID_SETTINGS}
    return [
        (
            f"orchestration.grids.{name}" + (f".settings.{setting}" if setting else ""),
            [
                *overrides,
                *[f"{key}={override_value(value)}" for key, value in zip(lists, combination)],
            ],
        )
        for setting, overrides in grid_settings(grid).items()
        for combination in itertools.product(*lists.values())
    ]  # every run DVC queues


def every_experiment(orchestration: OrchestrationParams) -> list[tuple[str, list[str]]]:
    """experiment_runs of the ablations and the sweep, then of each grid."""
    runs = experiment_runs(orchestration)
    for name in orchestration.grids:
        runs += experiment_runs(orchestration, name)
    return runs


def experiment_params(
    path: str | Path = PARAMS_FILE, runs: list[tuple[str, list[str]]] | None = None
) -> Iterator[tuple[str, list[str], Params]]:
    """Every params.yaml the experiments flow would run: each ablation's, each sweep value's and
    each grid combination's `-S` overrides (or those of `runs`) applied to a copy of `path` by
    DVC's own code (Hydra's grammar; a key that is not in params.yaml is an error, as in `dvc exp
    run`), checked like params.yaml itself.
    Yields (where, overrides, params); raises ParamsError naming the experiment."""
    if runs is None:
        runs = every_experiment(load_params(path).orchestration)
    for where, overrides, params, _ in _applied(path, runs):
        yield where, overrides, params


def final_overrides(*overrides: Sequence[str]) -> frozenset[tuple[str, str]] | None:
    """What `-S` override lists applied one after the other set, as one set of key=value (a later
    value of a key wins); None when one is not a plain assignment (Hydra's `+key`, `~key`, ...),
    whose effect depends on the file.

    >>> sorted(final_overrides(["seed=1", "train.grpo.beta=0.1"], ["train.grpo.beta=0"]))
    [('seed', '1'), ('train.grpo.beta', '0')]
    >>> final_overrides(["seed=1"], ["+train.new=1"]) is None
    True
    """
    final: dict[str, str] = {}
    for override in (o for group in overrides for o in group):
        key, equals, value = override.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_][\w.-]*", key):
            return None
        final[key] = value
    return frozenset(final.items())


def _applied(
    path: str | Path, runs: list[tuple[str, list[str]]]
) -> Iterator[tuple[str, list[str], Params, Path]]:
    """Each run's overrides applied to a fresh copy of `path` (the copy is reused: read it
    before the next)."""
    with tempfile.TemporaryDirectory() as scratch:
        for where, overrides in runs:
            copy = Path(scratch) / "params.yaml"
            shutil.copyfile(path, copy)
            params = apply_overrides(copy, overrides, f"params.yaml: {where} = {overrides!r}")
            yield where, overrides, params, copy


def check_queued_runs(path: str | Path = PARAMS_FILE, grid: str | None = None) -> int:
    """Before the experiments flow queues anything: check every run it would queue as that run's
    own check_params stage will, which also checks the experiments of the run's params.yaml (an
    ablation that a grid value makes invalid fails there, after the queue has started).
    Returns how many runs were checked; ParamsError names the run and the experiment inside it."""
    orchestration = load_params(path).orchestration
    runs = experiment_runs(orchestration, grid)
    # Many (run, experiment) pairs set the same keys to the same values (an ablation's overrides
    # replace the grid value they touch): one params.yaml, checked once (about a fifth of the
    # pairs of the committed step11 grid are distinct).
    checked: set[frozenset] = set()
    for where, overrides, params, copy in _applied(path, runs):
        fresh = []
        for experiment in every_experiment(params.orchestration):
            final = final_overrides(overrides, experiment[1])
            if final is None or final not in checked:
                fresh.append(experiment)
            if final is not None:
                checked.add(final)
        try:
            for _ in experiment_params(copy, fresh):
                pass
        except ParamsError as error:
            raise ParamsError(
                f"{where} = {overrides!r}: its own check_params would fail: "
                f"{str(error).removeprefix('params.yaml: ')}"
            ) from None
    return len(runs)


def queue_busy(status: str) -> bool:
    r"""Whether `dvc queue status` output shows a task still queued or running.

    >>> queue_busy("Task     Name    Created    Status\n2b2e2d7  a  04:41 PM  Running\n"
    ...            "Worker status: 1 active, 0 idle")
    True
    >>> queue_busy("Task  Name  Created  Status\n2b2e2d7  a  04:41 PM  Success\n"
    ...            "Worker status: 1 active, 0 idle")
    False
    """
    return any(re.search(r"\s(Queued|Running)\s*$", line) for line in status.splitlines())


def run_queue_to_end(
    root: str | Path,
    jobs: int,
    env: dict[str, str] | None = None,
    poll: float = 15.0,
    grace: float = 30.0,
    dvc: Sequence[str] = ("dvc",),
) -> subprocess.CompletedProcess:
    """`dvc exp run --run-all --jobs N` in root, watched until it ends.

    With N > 1, DVC 3.67.1's celery queue (filesystem broker) can lose a worker's shutdown
    message: every task ends in Success, one worker stays up with nothing to run, and `dvc exp
    run --run-all` waits for it forever (seen once in five runs of the experiments flow test
    with 2 jobs: all four tasks done, the worker still up 14 minutes later). So once `dvc queue
    status` has shown nothing queued or running for `grace` seconds, `dvc queue stop` shuts the
    idle workers down; if the command still has not ended `grace` seconds later, it is
    terminated (its runs are already recorded: the workers commit them). Guarded by
    tests/test_experiments.py (a fake dvc whose run never ends by itself)."""
    environment = {**tool_env(), **(env or {})}

    def dvc_run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*dvc, *args], cwd=root, env=environment, capture_output=True, text=True
        )

    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [*dvc, "exp", "run", "--run-all", "--jobs", str(jobs)],
            cwd=root,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        idle_since = stopped_at = None
        note = ""
        while process.poll() is None:
            time.sleep(poll)
            if process.poll() is not None:
                break
            now = time.monotonic()
            if stopped_at is not None:
                if now - stopped_at > grace:
                    process.terminate()
                    process.wait()
                    note = "\n(the queue was done: its stuck command was terminated)"
                continue
            status = dvc_run("queue", "status")
            idle = status.returncode == 0 and not queue_busy(status.stdout)
            idle_since = (idle_since or now) if idle else None
            if idle_since is not None and now - idle_since > grace:
                dvc_run("queue", "stop")
                stopped_at, note = now, "\n(the queue was done: its idle workers were stopped)"
        log.seek(0)
        output = log.read() + note
    code = process.returncode
    if stopped_at is not None:  # the command did not end by itself: the queue says how it went
        failed = re.search(r"\sFailed\s*$", dvc_run("queue", "status").stdout, re.MULTILINE)
        code = 1 if failed else 0
    return subprocess.CompletedProcess(process.args, code, output, "")
