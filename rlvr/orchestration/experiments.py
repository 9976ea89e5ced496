"""DVC experiments: the commands that queue and run the ablations, the sweep and the grids. The
params.yaml each of those runs gets, and its check, is rlvr.params.experiments; their comparison
is rlvr.orchestration.comparison.

Arms against the default, measured in chunks: each arm x seed trains and is evaluated on its
own, its per-prompt records written to a file of its own (committed as it finishes), and a rerun
skips what is recorded, so the table fills in piece by piece whenever the machine is free.

- `pending`: the arm-seeds without a records file, in order.
- `run_chunk`: one arm-seed in a work clone of the commit: params.yaml with the arm's overrides
  and `audit.seeds` that seed alone (DVC's `-S` code, rlvr.params.profiles.apply_overrides), then
  `dvc repro evaluate@<seed>` (what is cached is reused: the base, its verified answers), then the
  seed's per-prompt records written whole.
- `arms_table`: each arm against the default on the validation rows, where recipes are chosen
  (docs/audit.md): the difference of mean-reward deltas with an interval over both arms' seeds
  and the prompts (rlvr.audit.recipe.recipe_difference), Holm over the arms (one test each).
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rlvr.audit.recipe import recipe_difference, split_runs
from rlvr.core.files import read_jsonl, write_jsonl
from rlvr.core.seeds import seed_paths
from rlvr.core.stats import holm
from rlvr.orchestration.runs import tool_env
from rlvr.params.config import GRID_SETTINGS, OrchestrationParams, load_params
from rlvr.params.experiments import grid_settings, override_value
from rlvr.params.profiles import apply_overrides


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


# ------------------------------------------------------------------ arms measured in chunks

JUDGED = "validation"  # the split arms are compared on (docs/audit.md: choices are made there)


def chunk_file(folder: str | Path, arm: str, seed: int) -> Path:
    """Where one arm-seed's per-prompt records live.

    >>> chunk_file("reports/arms", "unsolved", 2).as_posix()
    'reports/arms/unsolved-seed-2.jsonl'
    """
    return Path(folder) / f"{arm}-seed-{seed}.jsonl"


def pending(folder: str | Path, arms: Sequence[str], seeds: Sequence[int]) -> list[tuple]:
    """The arm-seeds with no records file yet, arm by arm, seed by seed."""
    return [(a, s) for a in arms for s in seeds if not chunk_file(folder, a, s).exists()]


def run_chunk(
    work: str | Path, overrides: Sequence[str], seed: int, out: str | Path, dvc: str = "dvc"
) -> int:
    """One arm-seed in the work clone `work` (its params.yaml restored from git first): the
    overrides and `audit.seeds=[seed]` applied, `dvc repro evaluate@<seed>` run, the seed's
    per-prompt records written to `out` (whole, only when the stage succeeded). Returns the
    records' count; CalledProcessError when DVC fails (nothing written)."""
    work = Path(work)
    subprocess.run(["git", "checkout", "--", "params.yaml"], cwd=work, check=True)
    apply_overrides(work / "params.yaml", [*overrides, f"audit.seeds=[{seed}]"], f"arm seed {seed}")
    subprocess.run([dvc, "repro", f"evaluate@{seed}"], cwd=work, check=True)
    params = load_params(work / "params.yaml")
    records = read_jsonl(work / seed_paths(params.paths, seed).eval_per_prompt)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(out, records)
    return len(records)


def arms_table(
    folder: str | Path,
    arms: Sequence[str],
    seeds: Sequence[int],
    default: Mapping[int, Sequence[Mapping]],
    n_resamples: int = 10000,
) -> list[dict]:
    """Each arm whose every seed is recorded, against the default's records (seed -> per-prompt
    records) on the validation rows: recipe_difference's figures, then the Holm-adjusted p over
    the arms compared and the verdict it allows (better or worse only at Holm p <= 0.05 with
    the interval on the same side; else a tie). An arm still missing seeds gets a line saying
    which."""
    rows, compared = [], []
    for arm in arms:
        missing = [s for s in seeds if not chunk_file(folder, arm, s).exists()]
        if missing:
            rows.append({"arm": arm, "missing_seeds": missing})
            continue
        runs = {s: read_jsonl(chunk_file(folder, arm, s)) for s in seeds}
        d = recipe_difference(
            split_runs(runs, JUDGED), split_runs(default, JUDGED), n_resamples=n_resamples
        )
        rows.append({"arm": arm, **d})
        compared.append(rows[-1])
    for row, adjusted in zip(compared, holm([r["p_value"] for r in compared]), strict=True):
        row["holm_p"] = adjusted
        row["holm_verdict"] = row["verdict"] if adjusted <= 0.05 else "tie"
    return rows


def default_records(root: str | Path, seeds: Sequence[int]) -> dict[int, list[dict]]:
    """The default run's per-prompt records of `seeds`, as the committed evaluate stages wrote
    them."""
    params = load_params(Path(root) / "params.yaml")
    return {s: read_jsonl(Path(root) / seed_paths(params.paths, s).eval_per_prompt) for s in seeds}


def make_work_clone(root: str | Path, work: str | Path) -> None:
    """A clone of `root`'s HEAD for the chunks to run in, sharing its .venv, with its DVC cache
    linked file by file (the cache's files are read-only: links cost no space); kept between
    runs, moved to `root`'s HEAD each time."""
    root, work = Path(root).resolve(), Path(work)
    if not work.exists():
        subprocess.run(["git", "clone", "-q", str(root), str(work)], check=True)
        (work / ".venv").symlink_to(root / ".venv")
        if (root / ".dvc" / "cache").exists():
            shutil.copytree(
                root / ".dvc" / "cache", work / ".dvc" / "cache", copy_function=_link_or_copy
            )
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()
    subprocess.run(["git", "fetch", "-q", str(root), head], cwd=work, check=True)
    subprocess.run(["git", "checkout", "-q", "--force", head], cwd=work, check=True)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        Path(dst).hardlink_to(src)
    except OSError:
        shutil.copy2(src, dst)
