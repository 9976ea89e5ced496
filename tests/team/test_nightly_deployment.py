"""Integration: three nights in a row from the nightly deployment of prefect.yaml, on a real
Prefect server with a process worker, against a git remote (a bare repository) and a DVC remote on
a real sshd: the first trains, pushes and promotes; the second, with nothing new, trains nothing;
the third, after a params commit, trains what changed and decides promotion, with the reason.
Every process the test started is stopped, also when it fails."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import commit_all, set_params

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, timeout: float, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, "the Prefect server exited"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"no healthy Prefect server at {url}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)  # a served / worker process ignores SIGINT
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def ran(line: str) -> set[str]:
    """The stages a `nightly: ran N stage(s) at ... (a, b, c); ...` line names."""
    return set(re.search(r" at \S+ \S+ \(([^)]*)\)", line).group(1).split(", "))


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.slow
def test_three_nights_from_the_deployment_on_a_real_server_and_worker(
    copy_run, ssh_server, tmp_path
):
    # The team's setup: the shared cold run's project with the sshd as its DVC remote, pushed to
    # a git remote; the DVC remote is empty, so the first night trains everything.
    project = copy_run("deployed")
    ssh_server.add_remote(project)
    commit_all(project, "the team's DVC remote")
    _git(project, "branch", "-M", "main")
    shared = tmp_path / "shared.git"
    _git(tmp_path, "clone", "-q", "--bare", str(project), str(shared))
    _git(project, "remote", "add", "origin", str(shared))
    prefect = str(Path(sys.executable).parent / "prefect")
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    # as the README says, on any port: the UI's own API address too (it would assume port 4200)
    env = {
        **os.environ,
        "HOME": str(ssh_server.home),  # the worker's ~/.ssh: the server's host key, its own key
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": api,
        "PREFECT_UI_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "RLVR_ROOT": str(project),
        "RLVR_NIGHTLY_DIR": str(tmp_path / "nightly"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    started: list[subprocess.Popen] = []

    def background(name, *command):
        process = subprocess.Popen(
            list(command),
            cwd=project,
            env=env,
            start_new_session=True,
            stdout=open(logs / f"{name}.log", "w"),
            stderr=subprocess.STDOUT,
        )
        started.append(process)
        return process

    def cli(*args):
        run = subprocess.run(
            [prefect, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        return run.stdout + run.stderr

    def worker_log() -> str:
        return (logs / "worker.log").read_text()[-6000:]

    def night() -> str:
        triggered = cli("deployment", "run", "grpo-nightly/nightly")
        flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", triggered).group(1)
        deadline = time.monotonic() + 1500
        while time.monotonic() < deadline:
            state = json.loads(cli("api", "GET", f"/flow_runs/{flow_run_id}"))["state"]["type"]
            if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                assert state == "COMPLETED", worker_log()
                return flow_run_id
            time.sleep(3)
        raise TimeoutError(f"flow run {flow_run_id} still running; worker log:\n{worker_log()}")

    def versions(key: str) -> list[dict]:
        """Every stored version of an artifact key, newest first."""
        query = {"artifacts": {"key": {"any_": [key]}}, "sort": "CREATED_DESC"}
        return json.loads(cli("api", "POST", "/artifacts/filter", "--data", json.dumps(query)))

    def latest(key: str) -> dict:
        return versions(key)[0]

    try:
        server = background(
            "server", prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)
        )
        _wait_healthy(f"{api}/health", 180, server)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ui-settings", timeout=10) as ui:
            assert json.loads(ui.read())["api_url"] == api  # the UI in a browser finds the API
        cli("work-pool", "create", "rlvr-process", "--type", "process")
        # by name: prefect.yaml also holds a docker deployment whose pool does not exist here
        assert "grpo-nightly/nightly" in cli("--no-prompt", "deploy", "--name", "nightly")
        deployment = json.loads(cli("api", "GET", "/deployments/name/grpo-nightly/nightly"))
        assert [s["schedule"]["cron"] for s in deployment["schedules"]] == ["0 2 * * *"]
        assert deployment["schedules"][0]["schedule"]["timezone"] == "UTC"
        background("worker", prefect, "worker", "start", "--pool", "rlvr-process")

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

        # night 2: nothing new: nothing trained, no results commit, no new version
        night()
        second = latest("nightly")["description"]
        assert second.startswith("nightly: nothing new at main "), second
        assert "nothing trained" in second
        assert "prod unchanged: no new model" in latest("promotion")["description"]
        assert _git(shared, "rev-parse", "results") == results_1

        # night 3: a params commit on the branch: what it changes trains, and the registry decides
        set_params(project, {"train": {"max_steps": 28}})
        commit_all(project, "train longer")
        _git(project, "push", "-q", "origin", "HEAD:main")
        night()
        third = latest("nightly")["description"]
        assert {"train@0", "train@1", "evaluate@1", "publish"} <= ran(third), third
        assert "prepare_model" not in ran(third) and "smoke" not in ran(third), third
        promotion = latest("promotion")
        decided = promotion["description"]
        assert re.match(
            r"registry: (promoted v0\.0\.2 to prod|prod unchanged): "
            r"(improved|no significant change|regressed): held-out mean reward ",
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
        print("night 1:", first, "\nnight 2:", second, "\nnight 3:", third, "\n", decided)

        # anyone: the versions, and the prod model by name in an empty folder
        _git(project, "fetch", "-q", "--tags", "origin")
        show = subprocess.run(
            ["gto", "show", "policy"], cwd=project, env=env, capture_output=True, text=True
        )
        assert show.returncode == 0 and "v0.0.2" in show.stdout, show.stdout + show.stderr
        print(show.stdout)
        empty = tmp_path / "empty"
        empty.mkdir()
        got = subprocess.run(
            ["dvc", "artifacts", "get", str(shared), "policy", "--stage", "prod", "-o", "policy"],
            cwd=empty,
            env=env,
            capture_output=True,
            text=True,
        )
        assert got.returncode == 0, got.stdout + got.stderr
        assert (empty / "policy" / "README.md").exists()
    finally:
        for process in reversed(started):
            _stop(process)
    assert all(p.poll() is not None for p in started)
