"""Integration: the default's seeds spread over Prefect workers (rlvr.team.spread), on the
session's real Prefect server, with two process workers each in its own clone and work folder (two
machines, on this one), against a git remote (a bare repository) and the DVC remote on the real
sshd.

One round after a params commit (so every seed trains): one worker is killed with what it runs
while it trains; the round ends with every seed's experiment pulled, taken into the workspace and
the recipe run over all of them, and nothing trained twice there. The wall times of one worker
against two are a dated record (docs/orchestration.md#experiments-over-workers), not a gate: this
machine has 2 cores."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import commit_all, set_params
from tests.team.servers import POOL, PREFECT, stop_group

SEEDS = [0, 1, 2]  # as many as the default's audit.seeds


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()


def _training(worker: subprocess.Popen) -> bool:
    """Whether the worker's flow run is training now (a `stages.train` process under it)."""
    try:
        children = psutil.Process(worker.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    for child in children:
        try:
            if "stages.train" in " ".join(child.cmdline()):
                return True
        except psutil.Error:  # gone, or a zombie, since the listing
            pass
    return False


def _kill_machine(worker: subprocess.Popen) -> None:
    """SIGKILL the worker and everything under it, as a machine that is lost."""
    processes = [psutil.Process(worker.pid), *psutil.Process(worker.pid).children(recursive=True)]
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    worker.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.long
def test_the_default_seeds_spread_over_workers_and_a_killed_worker_loses_nothing(
    copy_run, ssh_server, prefect_server, tmp_path
):
    project = copy_run("spread")
    set_params(project, {"audit": {"seeds": SEEDS}})
    ssh_server.add_remote(project, folder="spread")  # empty, whatever ran before
    commit_all(project, "the team's DVC remote; three seeds")
    _git(project, "branch", "-M", "main")
    shared = tmp_path / "shared.git"
    _git(tmp_path, "clone", "-q", "--bare", str(project), str(shared))
    _git(project, "remote", "add", "origin", str(shared))
    _git(project, "fetch", "-q", "origin")
    _git(project, "branch", "-q", "--set-upstream-to=origin/main")
    home = {"HOME": str(ssh_server.home)}  # every process's ~/.ssh trusts the sshd
    assert "grpo-experiment-run/experiment-run" in prefect_server.cli(
        "--no-prompt",
        "deploy",
        "--name",
        "experiment-run",
        cwd=project,
        env={**home, "RLVR_REPO": str(shared)},  # its code: the remote's, cloned at each run
    )
    workers: dict[str, subprocess.Popen] = {}

    def start_worker(machine: str) -> subprocess.Popen:
        clone = tmp_path / machine / "rlvr"
        if not clone.exists():
            _git(tmp_path, "clone", "-q", str(shared), str(clone))
        env = {**home, "RLVR_ROOT": str(clone), "RLVR_NIGHTLY_DIR": str(tmp_path / machine)}
        workers[machine] = prefect_server.background(
            machine,
            PREFECT,
            "worker",
            "start",
            "--pool",
            POOL,
            "--limit",
            "1",
            "--name",
            machine,
            cwd=clone,
            env=env,
        )
        return workers[machine]

    def spread_seeds(max_steps: int, while_running=None) -> tuple[float, float, str]:
        """A params commit pushed, then `python -m flows.experiments --seeds`; (its wall time,
        the workers' part as the flow measured it, what it printed)."""
        set_params(project, {"train": {"max_steps": max_steps}})
        commit_all(project, f"train {max_steps} steps")
        _git(project, "push", "-q", "origin", "HEAD:main")
        started = time.monotonic()
        log = tmp_path / f"spread-{max_steps}.log"
        parent = subprocess.Popen(
            [sys.executable, "-m", "flows.experiments", "--seeds"],
            cwd=project,
            env={**prefect_server.env, **home},
            stdout=open(log, "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        try:
            if while_running:
                while_running(parent)
            parent.wait(timeout=1800)
        finally:
            if parent.poll() is None:
                parent.kill()
        output = log.read_text()
        assert parent.returncode == 0, output[-5000:]
        seconds = time.monotonic() - started
        on_workers = re.search(r"experiments: 3 run\(s\) on the workers in (\d+) s", output)
        assert on_workers, output[-3000:]
        # every seed came back: the lock holds this commit's training of each, nothing here
        # trained it again, and the recipe pooled all three
        lock = (project / "dvc.lock").read_text()
        assert lock.count(f"max_steps: {max_steps}") >= len(SEEDS)
        assert "ran again here" not in output, output[-3000:]
        recipe = json.loads((project / "reports/recipe/summary.json").read_text())
        assert recipe["seeds"] == SEEDS, recipe.get("seeds")
        status = subprocess.run(
            ["dvc", "status", *[f"train@{k}" for k in SEEDS]],
            cwd=project,
            capture_output=True,
            text=True,
        )
        assert "up to date" in status.stdout, status.stdout
        exps = _git(shared, "for-each-ref", "--format=%(refname)", "refs/exps")
        head = _git(project, "rev-parse", "HEAD")
        assert {f"refs/exps/{head[:2]}/{head[2:]}/seed-{k}" for k in SEEDS} <= set(exps.split())
        commit_all(project, f"the seeds of {max_steps} steps")
        _git(project, "push", "-q", "origin", "HEAD:main")
        return seconds, float(on_workers.group(1)), output

    try:
        start_worker("machine-1")
        start_worker("machine-2")

        def kill_one_mid_training(parent):
            deadline = time.monotonic() + 900
            while not _training(workers["machine-1"]):
                assert parent.poll() is None and time.monotonic() < deadline
                time.sleep(1)
            _kill_machine(workers["machine-1"])

        killed = spread_seeds(30, kill_one_mid_training)
        line = re.search(r"experiments: (seed-\d) crashed \(([^)]*)\): submitted again", killed[2])
        assert line, killed[2][-4000:]
        assert "no heartbeat for 90 s" in line.group(2)
        assert "(1 submitted again)" in killed[2]
        print(f"killed worker: {line.group(0)}; the round took {killed[0]:.0f} s")
    finally:
        for worker in workers.values():
            stop_group(worker)
