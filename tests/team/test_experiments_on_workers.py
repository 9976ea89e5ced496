"""Integration: the default's seeds spread over Prefect workers (rlvr.team.spread), on the
session's real Prefect server, with process workers each in its own clone and work folder (as
many machines, on this one), against a git remote (a bare repository) and the DVC remote on the
real sshd.

Each round follows a params commit (so every seed trains) and ends with every seed's experiment
pulled, taken into the workspace and the recipe run over all of them, and nothing trained twice
there. One round with a worker killed while it trains; four seeds on one worker, then on two.
The wall times are a dated record (docs/orchestration.md#experiments-over-workers), not a gate:
this machine has 2 cores."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import commit_all, set_params
from tests.team.servers import POOL, PREFECT, kill_machine, stop_group, training


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()


class Team:
    """The shared cold run's project with `seeds`, pushed to a bare git remote and the sshd's
    DVC remote, the experiment-run deployment on the session's Prefect server, and workers."""

    def __init__(self, copy_run, ssh_server, prefect_server, tmp_path: Path, seeds: list[int]):
        self.server, self.tmp, self.seeds = prefect_server, tmp_path, seeds
        self.project = project = copy_run("spread")
        set_params(project, {"audit": {"seeds": seeds}})
        ssh_server.add_remote(project, folder=tmp_path.name)  # empty, whatever ran before
        commit_all(project, f"the team's DVC remote; {len(seeds)} seeds")
        _git(project, "branch", "-M", "main")
        self.shared = tmp_path / "shared.git"
        _git(tmp_path, "clone", "-q", "--bare", str(project), str(self.shared))
        _git(project, "remote", "add", "origin", str(self.shared))
        _git(project, "fetch", "-q", "origin")
        _git(project, "branch", "-q", "--set-upstream-to=origin/main")
        self.home = {"HOME": str(ssh_server.home)}  # every process's ~/.ssh trusts the sshd
        assert "grpo-experiment-run/experiment-run" in prefect_server.cli(
            "--no-prompt",
            "deploy",
            "--name",
            "experiment-run",
            cwd=project,
            env={**self.home, "RLVR_REPO": str(self.shared)},  # its code: cloned at each run
        )
        self.workers: dict[str, subprocess.Popen] = {}

    def start_worker(self, machine: str) -> subprocess.Popen:
        clone = self.tmp / machine / "rlvr"
        if not clone.exists():
            _git(self.tmp, "clone", "-q", str(self.shared), str(clone))
        env = {**self.home, "RLVR_ROOT": str(clone), "RLVR_NIGHTLY_DIR": str(self.tmp / machine)}
        self.workers[machine] = self.server.background(
            machine,
            PREFECT,
            *("worker", "start", "--pool", POOL, "--limit", "1", "--name", machine),
            cwd=clone,
            env=env,
        )
        return self.workers[machine]

    def spread_seeds(self, changes: dict, while_running=None) -> dict:
        """A params commit pushed, then `python -m flows.experiments --seeds`; {"seconds": its
        wall time, "runs": the workers' part as the flow measured it, "laps": the flow's line
        of where the time went, "output": what it printed}."""
        project = self.project
        set_params(project, changes)
        commit_all(project, f"{changes}")
        _git(project, "push", "-q", "origin", "HEAD:main")
        started = time.monotonic()
        log = self.tmp / f"spread-{len(list(self.tmp.glob('spread-*.log')))}.log"
        parent = subprocess.Popen(
            [sys.executable, "-m", "flows.experiments", "--seeds"],
            cwd=project,
            env={**self.server.env, **self.home},
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
        n = len(self.seeds)
        on_workers = re.search(rf"experiments: {n} run\(s\) on the workers in (\d+) s", output)
        laps = re.search(r"experiments: where the time went: [^\n]*", output)
        assert on_workers and laps, output[-3000:]
        # every seed came back: the lock holds this commit's training of each, nothing here
        # trained it again, and the recipe pooled all of them
        lock = (project / "dvc.lock").read_text()
        assert lock.count(f"max_steps: {changes['train']['max_steps']}") >= n
        assert "ran again here" not in output, output[-3000:]
        recipe = json.loads((project / "reports/recipe/summary.json").read_text())
        assert recipe["seeds"] == self.seeds, recipe.get("seeds")
        status = subprocess.run(
            ["dvc", "status", *[f"train@{k}" for k in self.seeds]],
            cwd=project,
            capture_output=True,
            text=True,
        )
        assert "up to date" in status.stdout, status.stdout
        exps = _git(self.shared, "for-each-ref", "--format=%(refname)", "refs/exps")
        head = _git(project, "rev-parse", "HEAD")
        assert {f"refs/exps/{head[:2]}/{head[2:]}/seed-{k}" for k in self.seeds} <= set(
            exps.split()
        )
        commit_all(project, "the seeds")
        _git(project, "push", "-q", "origin", "HEAD:main")
        return {
            "seconds": seconds,
            "runs": float(on_workers.group(1)),
            "laps": laps.group(0),
            "output": output,
        }

    def stop(self) -> None:
        for worker in self.workers.values():
            stop_group(worker)


@pytest.fixture
def team(copy_run, ssh_server, prefect_server, tmp_path):
    """A function making the Team with these seeds (its workers stopped at the end)."""
    made = []

    def make(seeds: list[int]) -> Team:
        made.append(Team(copy_run, ssh_server, prefect_server, tmp_path, seeds))
        return made[-1]

    yield make
    for each in made:
        each.stop()


@pytest.mark.slow
@pytest.mark.long
def test_the_default_seeds_spread_over_workers_and_a_killed_worker_loses_nothing(team):
    team = team([0, 1, 2])  # as many as the default's audit.seeds
    team.start_worker("machine-1")
    team.start_worker("machine-2")

    def kill_one_mid_training(parent):
        deadline = time.monotonic() + 900
        while not training(team.workers["machine-1"]):
            assert parent.poll() is None and time.monotonic() < deadline
            time.sleep(1)
        kill_machine(team.workers["machine-1"])

    killed = team.spread_seeds({"train": {"max_steps": 30}}, kill_one_mid_training)
    line = re.search(
        r"experiments: (seed-\d) crashed \(([^)]*)\): submitted again", killed["output"]
    )
    assert line, killed["output"][-4000:]
    assert "no heartbeat for 90 s" in line.group(2)
    assert "(1 submitted again)" in killed["output"]
    print(f"killed worker: {line.group(0)}; the round took {killed['seconds']:.0f} s")


@pytest.mark.slow
@pytest.mark.long
def test_four_seeds_on_one_worker_then_on_two(team):
    """The same work twice (every seed trains: evaluate.seed changed, which train reads and
    no stage before it), on one worker, then two; prints each round's wall time and where it
    went."""
    team = team([0, 1, 2, 3])
    team.start_worker("machine-1")
    one = team.spread_seeds({"train": {"max_steps": 30}, "evaluate": {"seed": 1235}})
    team.start_worker("machine-2")
    two = team.spread_seeds({"train": {"max_steps": 30}, "evaluate": {"seed": 1236}})
    for workers, round_ in ((1, one), (2, two)):
        print(f"{workers} worker(s): {round_['seconds']:.0f} s; {round_['laps']}")
    print(
        f"two against one: the runs {two['runs'] / one['runs']:.2f}x, "
        f"the whole flow {two['seconds'] / one['seconds']:.2f}x"
    )
