"""Integration: the nightly deployment from prefect.yaml runs through a real Prefect server and a
process worker, twice, and every process the test started is stopped, also when it fails."""

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

from tests.helpers import set_params

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


@pytest.mark.slow
def test_nightly_deployment_runs_on_a_real_server_and_worker(copy_run, tmp_path):
    # The shared cold run with one evaluation param changed: the worker's first run reruns
    # check_params, evaluate and report (real stages, in the worker's environment), the second
    # finds everything up to date.
    project = copy_run("deployed")
    set_params(project, {"evaluate": {"n_resamples": 400}})
    evaluated = (project / "metrics/recipe.json").stat().st_mtime_ns
    prefect = str(Path(sys.executable).parent / "prefect")
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    # as the README says, on any port: the UI's own API address too (it would assume port 4200)
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": api,
        "PREFECT_UI_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "RLVR_ROOT": str(project),
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

    def wait_completed(flow_run_id, timeout=900):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = json.loads(cli("api", "GET", f"/flow_runs/{flow_run_id}"))["state"]["type"]
            if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                return state
            time.sleep(2)
        raise TimeoutError(
            f"flow run {flow_run_id} still running; worker log:\n"
            + (logs / "worker.log").read_text()[-3000:]
        )

    try:
        server = background(
            "server", prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)
        )
        _wait_healthy(f"{api}/health", 180, server)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ui-settings", timeout=10) as ui:
            assert json.loads(ui.read())["api_url"] == api  # the UI in a browser finds the API
        cli("work-pool", "create", "rlvr-process", "--type", "process")
        # by name: prefect.yaml also holds a docker deployment whose pool does not exist here
        deployed = cli("--no-prompt", "deploy", "--name", "nightly")
        assert "grpo-pipeline/nightly" in deployed
        deployment = json.loads(cli("api", "GET", "/deployments/name/grpo-pipeline/nightly"))
        assert [s["schedule"]["cron"] for s in deployment["schedules"]] == ["0 2 * * *"]
        assert deployment["schedules"][0]["schedule"]["timezone"] == "UTC"

        background("worker", prefect, "worker", "start", "--pool", "rlvr-process")
        for attempt in (1, 2):
            triggered = cli("deployment", "run", "grpo-pipeline/nightly")
            flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", triggered).group(1)
            assert wait_completed(flow_run_id) == "COMPLETED", (logs / "worker.log").read_text()[
                -4000:
            ]

        for key in KEYS:
            found = json.loads(
                cli(
                    "api",
                    "POST",
                    "/artifacts/filter",
                    "--data",
                    json.dumps({"artifacts": {"key": {"any_": [key]}}}),
                )
            )
            assert len(found) >= 2, key  # one version per run, under the same key
        assert (project / "reports/retrospective.html").exists()
        assert (project / "metrics/recipe.json").stat().st_mtime_ns > evaluated  # a stage ran
        assert "n_resamples: 400" in (project / "dvc.lock").read_text()
    finally:
        for process in reversed(started):
            _stop(process)
    assert all(p.poll() is not None for p in started)
