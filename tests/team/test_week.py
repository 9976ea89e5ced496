"""Integration, a team's week simulated: five nights of the nightly deployment (prefect.yaml) on a
real Prefect server with a process worker, two committers pushing to a git remote (a bare
repository), the DVC remote on the real sshd, and what goes wrong in a week:

- Mon: nothing new since the developer's run (pushed): the first model becomes prod.
- Tue: the developer trains longer, a teammate edits the README on top: the night runs both.
- Wed: the teammate changes the budget again, and the DVC remote goes down while it trains: the
  night fails at the push with the cause as its message; its clone is kept.
- Thu: the remote is back; the night pushes and records Wednesday's first, then the worker's
  machine dies while it trains the developer's new commit: the night is Crashed (no heartbeats).
- Fri: a new worker; the night is not blocked by Thursday's, runs the branch and removes the
  dead night's clone.

Then the registry's history, the results branch and the DVC remote must hold every night that
ran, and nothing may be left behind. Prints one line a night and the week's wall time
(docs/orchestration.md#a-week-simulated)."""

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import commit_all, set_params
from tests.team.servers import POOL, PREFECT, kill_machine, stop_group, training


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()


def _commit(repo: Path, who: str, message: str, change) -> str:
    """As `who`: pull main, change(repo), commit everything, push; the commit."""
    _git(repo, "pull", "-q", "--rebase", "origin", "main")
    change(repo)
    _git(repo, "add", "-A")
    _git(repo, "-c", f"user.name={who}", "-c", f"user.email={who}@team", "commit", "-qm", message)
    _git(repo, "push", "-q", "origin", "HEAD:main")
    return _git(repo, "rev-parse", "HEAD")


def _params(changes: dict):
    return lambda repo: set_params(repo, changes)


def _readme_line(repo: Path) -> None:
    with open(repo / "README.md", "a") as readme:
        readme.write("\nA teammate's line.\n")


@pytest.mark.slow
@pytest.mark.long
def test_a_week_of_nights_with_two_committers_a_failed_push_and_a_dead_worker(
    copy_run, ssh_server, prefect_server, tmp_path
):
    week = time.monotonic()
    dev = copy_run("week")
    ssh_server.add_remote(dev, folder="week")  # empty, whatever ran before
    commit_all(dev, "the team's DVC remote")
    _git(dev, "branch", "-M", "main")
    shared = tmp_path / "shared.git"
    _git(tmp_path, "clone", "-q", "--bare", str(dev), str(shared))
    _git(dev, "remote", "add", "origin", str(shared))
    _git(dev, "fetch", "-q", "origin")
    _git(dev, "branch", "-q", "--set-upstream-to=origin/main")
    home = {"HOME": str(ssh_server.home)}  # every process's ~/.ssh trusts the sshd
    pushed = subprocess.run(
        ["dvc", "push"], cwd=dev, env={**prefect_server.env, **home}, capture_output=True
    )
    assert pushed.returncode == 0, pushed.stdout[-2000:] + pushed.stderr[-2000:]
    teammate = tmp_path / "teammate"
    _git(tmp_path, "clone", "-q", str(shared), str(teammate))
    work = tmp_path / "nightly"
    env = {**home, "RLVR_ROOT": str(dev), "RLVR_NIGHTLY_DIR": str(work), "RLVR_REPO": str(shared)}

    def cli(*args):
        return prefect_server.cli(*args, cwd=dev, env=env)

    def artifacts(flow_run_id: str) -> dict[str, str]:
        """key -> description of the artifacts a flow run made."""
        query = {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}}
        found = json.loads(cli("api", "POST", "/artifacts/filter", "--data", json.dumps(query)))
        return {a["key"]: a["description"] for a in found if a["key"]}

    workers: list[subprocess.Popen] = []

    def start_worker(name: str) -> subprocess.Popen:
        workers.append(
            prefect_server.background(
                name, PREFECT, "worker", "start", "--pool", POOL, cwd=dev, env=env
            )
        )
        return workers[-1]

    lines: list[str] = []
    decisions: list[str] = []

    def night(day: str, log: str, during=None) -> tuple[str, str, dict]:
        """Trigger the deployment's night; (its final state, its message, its artifacts)."""
        started = time.monotonic()
        triggered = cli("deployment", "run", "grpo-nightly/nightly")
        flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", triggered).group(1)
        if during:
            during(flow_run_id)
        state = prefect_server.wait(flow_run_id, 1800, log)
        message = prefect_server.api_get(f"/flow_runs/{flow_run_id}")["state"]["message"] or ""
        made = artifacts(flow_run_id)
        if "promotion" in made:
            decisions.append(made["promotion"])
        said = made.get("nightly", message)
        lines.append(f"{day} ({time.monotonic() - started:.0f} s) {state}: {said}")
        if "promotion" in made:
            lines[-1] += f" | {made['promotion']}"
        print(lines[-1])
        return state, message, made

    def when_training(then):
        def watch(flow_run_id: str) -> None:
            deadline = time.monotonic() + 1200
            while not training(workers[-1]):
                assert prefect_server.state(flow_run_id) not in ("FAILED", "CRASHED", "COMPLETED")
                assert time.monotonic() < deadline, prefect_server.log("machine-1")
                time.sleep(1)
            then()

        return watch

    sources = []  # the branch commit each recorded night ran, in order
    try:
        assert "grpo-nightly/nightly" in cli("--no-prompt", "deploy", "--name", "nightly")
        start_worker("machine-1")

        # Mon: the developer's run is all pushed: nothing trains, the first model becomes prod
        state, _, made = night("Mon", "machine-1")
        assert state == "COMPLETED" and made["nightly"].startswith("nightly: nothing new at main")
        assert made["promotion"].startswith("registry: promoted v0.0.1 to prod: the first model")
        sources.append(_git(dev, "rev-parse", "HEAD"))

        # Tue: two committers; the night runs the branch head, both commits
        _commit(dev, "developer", "train longer", _params({"train": {"max_steps": 28}}))
        sources.append(_commit(teammate, "teammate", "a line in the README", _readme_line))
        state, _, made = night("Tue", "machine-1")
        assert state == "COMPLETED" and "train@0" in made["nightly"], made
        assert f"main {sources[-1][:8]}" in made["nightly"]

        # Wed: the DVC remote goes down while the night trains: it fails at the push, the
        # cause and what is kept as its message
        shorter = _params({"train": {"max_steps": 26}})
        sources.append(_commit(teammate, "teammate", "a shorter budget", shorter))
        state, message, made = night("Wed", "machine-1", when_training(ssh_server.stop))
        ssh_server.start()
        assert state == "FAILED" and "nightly" not in made, made
        assert message.startswith(f"dvc push to remote 'team' ({ssh_server.url}/week) failed"), (
            message
        )
        assert "the night's clone is kept at" in message and "pushes and records it first" in (
            message
        )
        assert len(json.loads((work / "pending.json").read_text())) == 1

        # Thu: Wednesday's night is pushed and recorded first; then the machine dies mid-training
        longer = _params({"train": {"max_steps": 30}})
        sources.append(_commit(dev, "developer", "train longer again", longer))
        state, message, made = night(
            "Thu", "machine-1", when_training(lambda: kill_machine(workers[-1]))
        )
        assert state == "CRASHED" and "no heartbeat for 90 s" in message, (state, message)
        assert "promotion" in made  # Wednesday's model decided, before the machine died
        assert json.loads((work / "pending.json").read_text()) == {}

        # Fri: a new worker on the machine; nothing waits for Thursday's night
        start_worker("machine-1-again")
        state, _, made = night("Fri", "machine-1-again")
        assert state == "COMPLETED" and "train@0" in made["nightly"], made
        assert f"main {sources[-1][:8]}" in made["nightly"]
        assert "nightly: removed 1 leftover clone(s) of earlier nights" in prefect_server.log(
            "machine-1-again", tail=200_000
        )
    finally:
        if ssh_server.process is None:
            ssh_server.start()
        for worker in workers:
            stop_group(worker)
        # the session's server outlives this test: no 02:00 UTC night during the next ones
        prefect_server.cli("--no-prompt", "deployment", "delete", "grpo-nightly/nightly", cwd=dev)

    # the results branch: one commit a night that ran to its record, each on the commit it ran
    results = _git(shared, "rev-list", "--first-parent", "--reverse", "results", "^main").split()
    # (the first has one parent, the commit it ran; each later one the last results commit too)
    assert [_git(shared, "rev-parse", f"{c}^@").split()[-1] for c in results] == sources
    # the registry: a version a night, prod moved exactly when a decision said so
    tags = _git(shared, "tag").split()
    assert sorted(t for t in tags if t.startswith("policy@")) == [
        f"policy@v0.0.{n}" for n in range(1, len(results) + 1)
    ]
    assert len(decisions) == len(results)
    promoted = [d for d in decisions if d.startswith("registry: promoted ")]
    assert len([t for t in tags if t.startswith("policy#prod#")]) == len(promoted)
    # the DVC remote: every output each recorded night's dvc.lock names (a fresh clone, no cache)
    fresh = tmp_path / "fresh"
    _git(tmp_path, "clone", "-q", str(shared), str(fresh))
    for commit in results:
        _git(fresh, "checkout", "-q", commit)
        status = subprocess.run(
            ["dvc", "status", "--cloud", "--json"],
            cwd=fresh,
            env={**prefect_server.env, **home},
            capture_output=True,
            text=True,
        )
        assert status.returncode == 0, status.stdout + status.stderr
        assert "missing" not in json.loads(status.stdout or "{}").values(), commit
    # nothing left behind: no kept night, no clone
    assert list((work / "runs").iterdir()) == []
    print("\n".join(lines), f"\nthe week: {time.monotonic() - week:.0f} s")
