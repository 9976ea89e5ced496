"""prefect.yaml as Prefect 3.9's `prefect deploy` reads it (its own loader and pydantic model),
the docker deployment's image and job variables, and the rule that deployments go out by name."""

import ast
import io
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT

DOCKER_DEPLOYMENT = "nightly-docker"
SPREAD_DEPLOYMENT = "experiment-run"  # many at once, one per worker (rlvr.team.spread)


@pytest.fixture(scope="module")
def deployments():
    """The deployment configs `prefect deploy` gets from prefect.yaml, by name, and what its
    loader printed (it prints validation errors and skips the file instead of failing)."""
    from prefect.cli.deploy._config import _load_deploy_configs_and_actions
    from rich.console import Console

    printed = io.StringIO()
    configs, actions = _load_deploy_configs_and_actions(
        ROOT / "prefect.yaml", console=Console(file=printed)
    )
    return {c["name"]: c for c in configs}, actions, printed.getvalue()


def test_every_deployment_passes_prefects_own_model(deployments):
    from prefect.cli.deploy._models import RawScheduleConfig
    from prefect.client.schemas.schedules import CronSchedule

    configs, actions, printed = deployments
    assert printed == ""  # no validation error, nothing skipped
    assert set(configs) == {"nightly", "experiments", SPREAD_DEPLOYMENT, DOCKER_DEPLOYMENT}
    # the process pool's deployments run the git remote's committed code, cloned at each run on
    # the worker, never a folder named when deploying (tests/team/test_deployed_code.py)
    (step,) = actions["pull"]
    assert step == {
        "prefect.deployments.steps.git_clone": {"repository": "{{ $RLVR_REPO }}", "branch": "main"}
    }
    for name, config in configs.items():
        assert config["work_pool"]["name"], name
        path, function = config["entrypoint"].split(":")
        tree = ast.parse((ROOT / path).read_text())
        assert function in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}, (
            name
        )
        for schedule in config.get("schedules") or []:
            raw = RawScheduleConfig.model_validate(schedule)
            CronSchedule(cron=raw.cron, timezone=raw.timezone)  # a valid cron and timezone


def test_a_deployment_runs_one_flow_run_at_a_time_and_queues_the_next(deployments):
    """Every deployment but experiment-run runs in the workspace (the docker one in its
    container's), so each has
    a deployment concurrency limit of 1 with ENQUEUE: a run due while one runs waits for it
    (Prefect 3.9.1 turns the mapping into concurrency_limit + concurrency_options as in
    prefect/cli/deploy/_core.py; its models check the values)."""
    from prefect.cli.deploy._models import ConcurrencyLimitSpec, DeploymentConfig
    from prefect.client.schemas.objects import (
        ConcurrencyLimitConfig,
        ConcurrencyLimitStrategy,
        ConcurrencyOptions,
    )

    configs, _, _ = deployments
    for name, config in configs.items():
        if name == SPREAD_DEPLOYMENT:  # its runs go in parallel, each in a clone of its own
            assert "concurrency_limit" not in config
            continue
        spec = DeploymentConfig.model_validate(config).concurrency_limit
        assert isinstance(spec, ConcurrencyLimitSpec), name
        limit = ConcurrencyLimitConfig.model_validate(spec.model_dump(exclude_none=True))
        options = ConcurrencyOptions(collision_strategy=spec.collision_strategy)
        assert limit.limit == 1, name
        assert options.collision_strategy == ConcurrencyLimitStrategy.ENQUEUE, name
    assert {
        name
        for name, config in configs.items()
        if config["entrypoint"] == "flows/nightly.py:nightly"
    } == {"nightly", DOCKER_DEPLOYMENT}


def test_the_runs_the_crash_automation_watches_send_the_heartbeats_it_expects(deployments):
    """A killed worker's run (an experiment's, a night's) is Crashed after SILENT_HEARTBEATS
    missed heartbeats of the frequency the deployment sets (rlvr.team.crashes): the two must
    agree, and Prefect must accept the frequency (its minimum is 30 s)."""
    from prefect.settings.models.flows import FlowsSettings

    from flows.experiments import experiment_run
    from flows.nightly import nightly
    from rlvr.team import crashes, spread

    configs, _, _ = deployments
    for name, flow in ((SPREAD_DEPLOYMENT, experiment_run), ("nightly", nightly)):
        config = configs[name]
        env = config["work_pool"]["job_variables"]["env"]
        every = FlowsSettings(heartbeat_frequency=int(env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"]))
        assert every.heartbeat_frequency == crashes.HEARTBEAT_SECONDS, name
        assert flow.name in crashes.WATCHED, name
    assert spread.DEPLOYMENT == f"{experiment_run.name}/{SPREAD_DEPLOYMENT}"
    assert configs[SPREAD_DEPLOYMENT]["entrypoint"] == "flows/experiments.py:experiment_run"


def test_serving_the_nightly_in_one_process_keeps_its_schedule_and_limit():
    """`python -m flows.serve` passes prefect.yaml's cron and limit to Flow.serve."""
    import inspect

    from prefect import Flow
    from prefect.client.schemas.objects import ConcurrencyLimitStrategy

    from flows.serve import nightly_schedule, serve_options

    options = serve_options(nightly_schedule())
    assert set(options) <= set(inspect.signature(Flow.serve).parameters)
    (schedule,) = options["schedules"]
    assert (schedule.cron, schedule.timezone) == ("0 2 * * *", "UTC")
    assert options["global_limit"].limit == 1
    assert options["global_limit"].collision_strategy == ConcurrencyLimitStrategy.ENQUEUE


def test_the_docker_deployment_runs_the_image_the_dockerfile_builds(deployments):
    configs, _, _ = deployments
    docker = configs[DOCKER_DEPLOYMENT]
    assert docker["entrypoint"] == configs["nightly"]["entrypoint"]
    assert docker["work_pool"]["name"] != configs["nightly"]["work_pool"]["name"]
    variables = docker["work_pool"]["job_variables"]
    assert variables["image"] == "rlvr:latest"
    # what a Prefect server checks on `prefect deploy`: the job variables against the docker
    # work pool's base job template (the one Prefect ships for prefect-docker's worker)
    import json

    import prefect.server.api
    from prefect.utilities.schema_tools import validate

    workers = json.loads(
        (
            Path(prefect.server.api.__file__).parent
            / "collections_data/views"
            / "aggregate-worker-metadata.json"
        ).read_text()
    )
    template = workers["prefect-docker"]["docker"]["default_base_job_configuration"]
    validate(variables, template["variables"], raise_on_error=True, ignore_required=True)
    assert not set(variables) - set(template["variables"]["properties"])
    assert all(re.fullmatch(r"[\w.-]+:/[\w/.-]+", volume) for volume in variables["volumes"])

    dockerfile = (ROOT / "Dockerfile").read_text()
    workdir = re.search(r"^WORKDIR (\S+)$", dockerfile, re.M).group(1)
    (pull,) = docker["pull"]
    assert pull["prefect.deployments.steps.set_working_directory"]["directory"] == workdir
    assert variables["env"]["RLVR_ROOT"] == workdir
    assert all(volume.split(":")[1].startswith(workdir + "/") for volume in variables["volumes"])
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", dockerfile, re.M)
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}$", dockerfile, re.M)
    # as ./dev installs: every file by its hash (torch's CPU wheel too), the project apart
    assert "--require-hashes -r requirements.lock" in dockerfile
    assert "--require-hashes -r torch.txt" in dockerfile
    assert "--no-deps --no-build-isolation -e ." in dockerfile
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv/" in ignored and ".git/" not in ignored  # DVC needs the repository


def test_deployments_go_out_by_name_never_all():
    """`prefect deploy --all` fails where a deployment's work pool does not exist (the docker
    one, on most machines)."""
    for path in [
        ROOT / "README.md",
        *Path(ROOT / "docs").glob("*.md"),
        ROOT / "prefect.yaml",
        *Path(ROOT / "tests").glob("*.py"),
    ]:
        if path.name == Path(__file__).name:
            continue
        text = path.read_text()
        assert not re.search(r"deploy\W+--all", text), path


def test_the_dockerfile_takes_pip_and_torch_with_the_hashes_the_lock_holds(tmp_path):
    """The Dockerfile's `awk` lines, run on the lock, write each one entry whole (pin and hashes)."""
    from rlvr.core.lock import entries, format_entry

    run = re.search(
        r"^RUN (awk .*? > pip\.txt) \\\n \&\& (awk .*? > torch\.txt)",
        (ROOT / "Dockerfile").read_text(),
        re.M,
    )
    (tmp_path / "requirements.lock").write_text((ROOT / "requirements.lock").read_text())
    for command in run.groups():
        subprocess.run(["sh", "-c", command], cwd=tmp_path, check=True)
    lock = {
        name: format_entry(name, v, h)
        for name, v, h in entries((ROOT / "requirements.lock").read_text())
    }
    assert (tmp_path / "pip.txt").read_text() == lock["pip"]
    assert (tmp_path / "torch.txt").read_text() == lock["torch"]
    assert lock["torch"].count("--hash=sha256:") > 1
