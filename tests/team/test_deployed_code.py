"""A deployment runs the git remote's committed code on any worker (prefect.yaml's git_clone pull
step), never the deployer's folder: deployed from a folder that then holds an uncommitted edit and
is then deleted, the nightly runs on a worker started in another folder, from a fresh clone of the
remote, both times. Slow: a real Prefect server and process worker (~1 min)."""

import re
import shutil
from pathlib import Path

import pytest

from tests.helpers import git
from tests.team.servers import POOL, PREFECT, stop_group

pytestmark = pytest.mark.slow


def test_a_deployment_runs_the_remotes_code_wherever_its_deployer_was(
    project_copy, prefect_server, tmp_path
):
    deployer = project_copy("deployer")
    git(deployer, "branch", "-M", "main")
    shared = tmp_path / "shared.git"
    git(tmp_path, "clone", "-q", "--bare", str(deployer), str(shared))
    git(deployer, "remote", "add", "origin", str(shared))
    worker_home = tmp_path / "worker"  # another machine's clone: none of the deployer's paths
    git(tmp_path, "clone", "-q", str(shared), str(worker_home))
    env = {"RLVR_NIGHTLY_DIR": str(tmp_path / "nightly")}
    deployed = prefect_server.cli(
        "--no-prompt",
        "deploy",
        "--name",
        "nightly",
        cwd=deployer,
        env={**env, "RLVR_REPO": str(shared), "RLVR_ROOT": str(deployer)},  # as ./dev there,
    )
    assert "grpo-nightly/nightly" in deployed

    # what the deployer has not committed never runs: it would stop the flow at its import
    flows = deployer / "flows/nightly.py"
    flows.write_text(
        'raise SystemExit("the deployer\'s uncommitted code ran")\n' + flows.read_text()
    )

    def night(folder_gone: bool) -> str:
        """A night on a branch the remote lacks: it fails at once, in the flow's own code, with
        its line (the code ran from a clone); the run's state message."""
        triggered = prefect_server.cli(
            "deployment",
            "run",
            "grpo-nightly/nightly",
            "--param",
            "branch=no-such-branch",
            cwd=worker_home,
            env=env,
        )
        flow_run = re.search(r"UUID: ([0-9a-f-]{36})", triggered).group(1)
        state = prefect_server.wait(flow_run, 300, "worker-code")
        message = prefect_server.api_get(f"/flow_runs/{flow_run}")["state"]["message"]
        assert state == "FAILED", (folder_gone, message, prefect_server.log("worker-code"))
        return message

    worker = prefect_server.background(
        "worker-code",
        PREFECT,
        "worker",
        "start",
        "--pool",
        POOL,
        cwd=worker_home,
        env={**env, "RLVR_ROOT": str(worker_home)},
    )
    try:
        for folder_gone in (False, True):
            if folder_gone:
                shutil.rmtree(deployer)
            message = night(folder_gone)
            assert "no-such-branch" in message and message.startswith("git clone"), message
            assert "uncommitted" not in prefect_server.log("worker-code")
        log = prefect_server.log("worker-code", tail=200_000)
        assert log.count("Deployment step 'git_clone' completed successfully") == 2, log
    finally:
        stop_group(worker)
    assert not Path(deployer).exists()
