"""Measure the experiments queue run N at a time against one at a time, on a small budget.

    ./dev run python scripts/sweep_jobs.py [--jobs 1 2] [--budget small|default]

For each N: a fresh clone of HEAD in a temporary folder (its own DVC cache, so no run-cache is
shared between the measurements), the pipeline as the baseline (on a small budget, or on
params.yaml as committed with --budget default), the
experiments flow's queue (orchestration.ablations and .sweep: 4 runs), then the wall time of
`dvc exp run --run-all --jobs N` (as the flow runs it: cores // N torch threads per run). Prints
one line per N; it measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]
# the pipeline in about a minute: the plumbing, not the learning (tests/conftest.py small_budget)
SMALL_BUDGET = {
    "model": {"warm_start": {"steps": 30}},
    "smoke": {"max_steps": 3},
    "train": {
        "max_steps": 6,
        "save_steps": 3,
        "eval_steps": 3,
        "grpo": {"num_generations": 4, "per_device_train_batch_size": 16},
    },
    "evaluate": {"samples": 2, "n_resamples": 500},
}


def _merge(target: dict, changes: dict) -> None:
    for key, value in changes.items():
        if isinstance(value, dict):
            _merge(target[key], value)
        else:
            target[key] = value


def _run(cwd: Path, *command: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(cwd), **(env or {})},
    )
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{(done.stdout + done.stderr)[-3000:]}")


def measure(jobs: int, small: bool) -> tuple[int, float]:
    """(experiments run, seconds) for `dvc exp run --run-all --jobs N` on a fresh clone."""
    from rlvr.orchestration.experiments import queue_commands, queued_runs
    from rlvr.params.config import load_params

    with tempfile.TemporaryDirectory(prefix=f"sweep-jobs{jobs}.") as scratch:
        clone = Path(scratch) / "project"
        _run(ROOT, "git", "clone", "-q", str(ROOT), str(clone))
        if small:
            yaml = YAML()
            params = yaml.load(clone / "params.yaml")
            _merge(params, SMALL_BUDGET)
            yaml.dump(params, clone / "params.yaml")
        _run(clone, "dvc", "repro")
        _run(clone, "git", "add", "-A")
        _run(
            clone,
            "git",
            "-c",
            "user.email=b@b",
            "-c",
            "user.name=b",
            "commit",
            "-qm",
            "base",
            "--allow-empty",
        )  # the default run may rebuild exactly what HEAD holds
        grid = load_params(clone / "params.yaml").orchestration
        for args in queue_commands(grid):  # what the experiments flow queues
            _run(clone, "dvc", *args)
        count = queued_runs(grid)
        started = time.perf_counter()
        _run(clone, "dvc", "exp", "run", "--run-all", "--jobs", str(jobs))
        return count, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--budget", choices=["small", "default"], default="small")
    args = parser.parse_args()
    print(f"sweep_jobs: {os.cpu_count()} CPUs; {args.budget} budget; a fresh clone per measurement")
    for jobs in args.jobs:
        count, seconds = measure(jobs, small=args.budget == "small")
        print(
            f"sweep_jobs: --jobs {jobs}: {count} experiments in {seconds:.1f} s "
            f"({seconds / count:.1f} s each)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
