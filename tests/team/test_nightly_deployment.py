"""Integration: two nights from the nightly deployment of prefect.yaml, on a real Prefect server
with a process worker, against a git remote (a bare repository) and a DVC remote on a real sshd:
the first trains, pushes and promotes; the second, after a params commit, trains what changed and
decides promotion, with the reason. (A night with nothing new trains nothing:
tests/team/test_nightly.py, on the same code without the server.) Every process the test started
is stopped, also when it fails."""

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import commit_all, set_params
from tests.team.servers import POOL, PREFECT, stop_group

KEYS = [
    "reward-tests",
    "data-validation",
    "smoke-checks",
    "training-summary",
    "evaluation-audit",
    "retrospective",
    "retrospective-html",
    "model-card",
]


def ran(line: str) -> set[str]:
    """The stages a `nightly: ran N stage(s) at ... (a, b, c); ...` line names."""
    return set(re.search(r" at \S+ \S+ \(([^)]*)\)", line).group(1).split(", "))


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.slow
@pytest.mark.long
def test_two_nights_from_the_deployment_on_a_real_server_and_worker(
    copy_run, ssh_server, prefect_server, tmp_path
):
    # The team's setup: the shared cold run's project with the sshd as its DVC remote, pushed to
    # a git remote; the DVC remote is empty, so the first night trains everything.
    project = copy_run("deployed")
    ssh_server.add_remote(project, folder="deployed")  # empty, whatever ran before
    commit_all(project, "the team's DVC remote")
    _git(project, "branch", "-M", "main")
    shared = tmp_path / "shared.git"
    _git(tmp_path, "clone", "-q", "--bare", str(project), str(shared))
    _git(project, "remote", "add", "origin", str(shared))
    env = {
        "HOME": str(ssh_server.home),  # the worker's ~/.ssh: the server's host key, its own key
        "RLVR_ROOT": str(project),
        "RLVR_NIGHTLY_DIR": str(tmp_path / "nightly"),
        "RLVR_REPO": str(shared),  # what the deployment's runs clone their code from
    }

    def cli(*args):
        return prefect_server.cli(*args, cwd=project, env=env)

    def night() -> str:
        triggered = cli("deployment", "run", "grpo-nightly/nightly")
        flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", triggered).group(1)
        state = prefect_server.wait(flow_run_id, 1500, "worker")
        assert state == "COMPLETED", prefect_server.log("worker")
        return flow_run_id

    def versions(key: str) -> list[dict]:
        """Every stored version of an artifact key, newest first."""
        query = {"artifacts": {"key": {"any_": [key]}}, "sort": "CREATED_DESC"}
        return json.loads(cli("api", "POST", "/artifacts/filter", "--data", json.dumps(query)))

    def latest(key: str) -> dict:
        return versions(key)[0]

    worker = None
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{prefect_server.port}/ui-settings", timeout=10
        ) as ui:
            assert json.loads(ui.read())["api_url"] == prefect_server.api  # a browser finds it
        # by name: prefect.yaml also holds a docker deployment whose pool does not exist here
        assert "grpo-nightly/nightly" in cli("--no-prompt", "deploy", "--name", "nightly")
        deployment = json.loads(cli("api", "GET", "/deployments/name/grpo-nightly/nightly"))
        assert [s["schedule"]["cron"] for s in deployment["schedules"]] == ["0 2 * * *"]
        assert deployment["schedules"][0]["schedule"]["timezone"] == "UTC"
        worker = prefect_server.background(
            "worker", PREFECT, "worker", "start", "--pool", POOL, cwd=project, env=env
        )

        # night 1: trains everything, pushes, records, and the first model becomes prod
        night()
        first = latest("nightly")["description"]
        # nothing in the DVC remote: the base model and both seeds train (the rest, bit for bit
        # what the project's git holds from the same code, DVC finds up to date)
        assert first.startswith("nightly: ran ") and {"prepare_model", "train@0", "train@1"} <= (
            ran(first)
        )
        assert latest("promotion")["description"] == (
            "registry: promoted v0.0.1 to prod: the first model in the registry becomes prod "
            "(no prod to compare with)"
        )
        results_1 = _git(shared, "rev-parse", "results")
        assert {"policy@v0.0.1", "policy#prod#1"} <= set(_git(shared, "tag").split())
        assert not any((tmp_path / "nightly" / "runs").iterdir())  # recorded: clones removed

        # night 2: a params commit on the branch: what it changes trains, and the registry decides
        set_params(project, {"train": {"max_steps": 28}})
        commit_all(project, "train longer")
        _git(project, "push", "-q", "origin", "HEAD:main")
        night()
        second = latest("nightly")["description"]
        assert {"train@0", "train@1", "evaluate@1", "publish"} <= ran(second), second
        assert "prepare_model" not in ran(second) and "smoke" not in ran(second), second
        promotion = latest("promotion")
        decided = promotion["description"]
        assert re.match(
            r"registry: (promoted v0\.0\.2 to prod|prod unchanged): "
            r"(improved|no significant change|regressed): validation mean reward ",
            decided,
        ), decided
        assert (
            "| mean reward |" in promotion["data"]
            and "Policy: the first model" in promotion["data"]
        )
        assert _git(shared, "rev-parse", "results^1") == results_1
        assert _git(shared, "rev-parse", "results^2") == _git(project, "rev-parse", "HEAD")
        assert "max_steps: 28" in _git(shared, "show", "results:dvc.lock")
        for key in KEYS:  # the pipeline's artifacts, versioned on the two nights that ran it
            assert len(versions(key)) >= 2, key
        print("night 1:", first, "\nnight 2:", second, "\n", decided)

        # anyone: the versions, and the prod model by name in an empty folder
        _git(project, "fetch", "-q", "--tags", "origin")
        show = subprocess.run(
            ["gto", "show", "policy"],
            cwd=project,
            env={**prefect_server.env, **env},
            capture_output=True,
            text=True,
        )
        assert show.returncode == 0 and "v0.0.2" in show.stdout, show.stdout + show.stderr
        print(show.stdout)
        empty = tmp_path / "empty"
        empty.mkdir()
        got = subprocess.run(
            ["dvc", "artifacts", "get", str(shared), "policy", "--stage", "prod", "-o", "policy"],
            cwd=empty,
            env={**prefect_server.env, **env},
            capture_output=True,
            text=True,
        )
        assert got.returncode == 0, got.stdout + got.stderr
        assert (empty / "policy" / "README.md").exists()
    finally:
        if worker is not None:
            stop_group(worker)
        # the session's server outlives this test: no 02:00 UTC night during the next ones
        prefect_server.cli(
            "--no-prompt", "deployment", "delete", "grpo-nightly/nightly", cwd=project, env=env
        )
    assert worker.poll() is not None
