"""Every params.yaml the experiments flow would run: the ablations, the sweep and the grids
(params.yaml `orchestration`) expanded into runs of `-S` overrides, each applied to a copy of
params.yaml by DVC's own code and checked like params.yaml itself. check_params checks them all;
rlvr/orchestration/experiments.py queues them with DVC.
"""

from __future__ import annotations

import itertools
import re
import shutil
import tempfile
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


def override_value(value: Any) -> str:
    """A value as a `-S` override spells it (YAML's true / false for booleans).

    >>> override_value(False), override_value(0.1), override_value("best_val")
    ('false', '0.1', 'best_val')
    """
    return str(value).lower() if isinstance(value, bool) else str(value)


def grid_settings(grid: dict) -> dict[str, list[str]]:
    """A grid's named settings (name -> `-S` overrides); one unnamed empty setting if it has
    none."""
    return grid.get(GRID_SETTINGS) or {"": []}


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
