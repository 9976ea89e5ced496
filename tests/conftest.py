"""Shared fixtures. Everything is offline: tiny models are built locally, never downloaded."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.environment import tiny_policy_dir  # noqa: E402,F401  (first: torch's threads)
from tests.helpers import (  # noqa: E402
    OPEN_HOOK,
    SMALL_RUN,
    commit_all,
    dvc,
    made_once,
    make_project_copy,
    project_env,
)

# Prefect must never write to the user's ~/.prefect: a throwaway home for the whole test session,
# set before anything imports prefect.
os.environ["PREFECT_HOME"] = __import__("tempfile").mkdtemp(prefix="prefect-home-")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
# The tests run two workers on 2 cores, and the stages they start run 2 OpenMP threads each: a
# thread that spins at a barrier (libgomp: 300,000 rounds) holds the core the other worker's
# stage needs. 1,000 rounds trained 2.6x faster beside a 2-thread job, the same bits
# (docs/reliability.md#a-busy-machine); a quiet `./dev repro` keeps libgomp's default.
os.environ.setdefault("GOMP_SPINCOUNT", "1000")


def pytest_configure(config):
    # here, not in pyproject.toml: that file is a dep of every stage
    config.addinivalue_line(
        "markers",
        "long: a slow test CI leaves out to end within its time (the longest, and those another slow "
        "test covers in part), marked slow too (.ci/run; RLVR_CI_LONG=1 runs them): `./dev test -m long`",
    )


@pytest.fixture
def project_copy(tmp_path):
    """A function that copies the project into a fresh git repository (see make_project_copy)
    and returns its path."""
    return lambda name="project", overrides=None: make_project_copy(tmp_path / name, overrides)


@pytest.fixture
def dvc_env():
    """A function giving project_env."""
    return project_env


@pytest.fixture(scope="session")
def cold_run(tmp_path_factory):
    """One cold `dvc repro` of the whole pipeline on SMALL_RUN, its results committed in its own
    git repository. Slow tests copy it (copy_run) instead of training from scratch each.

    One for the whole test session: under pytest-xdist the first worker to need it makes it in
    the directory the workers share, the others wait for it and then read it (never write)."""

    def make(project: Path) -> None:
        make_project_copy(project, SMALL_RUN)
        (project.parent / "repro.log").write_text(dvc(project, "repro"))  # the console
        commit_all(project, "cold run")

    return made_once(_shared_dir(tmp_path_factory) / "cold" / "project", make)


def _shared_dir(tmp_path_factory) -> Path:
    """The directory every test worker of the session sees (under pytest-xdist: above each
    worker's own)."""
    shared = tmp_path_factory.getbasetemp()
    return shared.parent if os.environ.get("PYTEST_XDIST_WORKER") else shared


@pytest.fixture(scope="session")
def forced_rerun(cold_run, tmp_path_factory):
    """A fresh git clone of the cold run (no models, no DVC cache, no checkpoints) with every stage
    forced (`dvc repro --force`), an audit hook in each of its Python processes logging who opens
    a data file (OPEN_HOOK). Made once for the session, like cold_run, and only read: the same-
    commit rerun (tests/test_audit.py) and the test file's isolation (tests/test_test_file_isolation.py)
    are one run. Returns (clone, the hook's log, what `dvc repro` printed)."""

    def make(clone: Path) -> None:
        subprocess.run(["git", "clone", "-q", str(cold_run), str(clone)], check=True)
        assert not (clone / "models").exists()
        hook = clone.parent / "open-hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(OPEN_HOOK)
        from rlvr.params.config import load_params

        data = load_params(clone / "params.yaml").data
        # the three files params.yaml names, and the earlier test file, which nothing may read
        files = [data.eval_path, data.val_path, data.train_path, "data/grpo_eval.jsonl"]
        env = {
            **project_env(clone),
            "PYTHONPATH": f"{hook}{os.pathsep}{clone}",
            "WATCH_LOG": str(clone.parent / "opens.jsonl"),
            "WATCH_FILES": os.pathsep.join(str(clone / f) for f in files),
        }
        run = subprocess.run(
            ["dvc", "repro", "--force"], cwd=clone, env=env, capture_output=True, text=True
        )
        output = run.stdout + run.stderr
        assert run.returncode == 0, output[-4000:]
        (clone.parent / "repro.log").write_text(output)

    clone = made_once(_shared_dir(tmp_path_factory) / "forced" / "clone", make)
    return clone, clone.parent / "opens.jsonl", (clone.parent / "repro.log").read_text()


@pytest.fixture
def copy_run(cold_run, tmp_path):
    """A function returning a fresh copy of the cold run (git history, DVC cache, models and
    checkpoints included)."""
    return lambda name="run": Path(shutil.copytree(cold_run, tmp_path / name, symlinks=True))


@pytest.fixture
def small_budget():
    """params.yaml overrides that run the whole pipeline in about a minute (tiny warm start, a
    few GRPO steps, few evaluation samples): for tests of the plumbing, not of learning."""
    return {
        "model": {"warm_start": {"steps": 30}},
        "smoke": {"max_steps": 3},
        "train": {
            "max_steps": 6,
            "save_steps": 3,
            "eval_steps": 3,
            "grpo": {"num_generations": 4, "per_device_train_batch_size": 16},
        },
        "evaluate": {"samples": 2, "n_resamples": 500},
        "runtime": SMALL_RUN["runtime"],
        "audit": SMALL_RUN["audit"],
    }


@pytest.fixture(scope="session")
def prefect_harness():
    """One throwaway Prefect server and database for every flow test (it takes ~17 s to start)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def artifact_versions():
    """A function listing every stored version of an artifact key."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    def versions(key: str) -> list:
        with get_client(sync_client=True) as client:
            return client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key]))
            )

    return versions
