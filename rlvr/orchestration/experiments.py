"""DVC experiments: the commands that queue and run the ablations, the sweep and the grids. The
params.yaml each of those runs gets, and its check, is rlvr.params.experiments; their comparison
is rlvr.orchestration.comparison.
"""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rlvr.orchestration.runs import tool_env
from rlvr.params.config import GRID_SETTINGS, OrchestrationParams
from rlvr.params.experiments import grid_settings, override_value


def queue_commands(orchestration: OrchestrationParams) -> list[list[str]]:
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
