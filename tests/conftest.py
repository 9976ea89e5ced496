"""Shared fixtures. Everything is offline: tiny models are built locally, never downloaded."""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import rlvr  # noqa: F401  (sets the offline / no-analytics environment first)

# Prefect must never write to the user's ~/.prefect: a throwaway home for the whole test session,
# set before anything imports prefect.
os.environ["PREFECT_HOME"] = __import__("tempfile").mkdtemp(prefix="prefect-home-")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"

# Derandomized so the reward gate gives the same verdict on the same code, every run.
settings.register_profile("default", derandomize=True, max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory):
    """A saved tiny Qwen3 policy with the character tokenizer (what prepare_model builds)."""
    from rlvr.policy import build_char_tokenizer, build_tiny_model, save_policy

    tokenizer = build_char_tokenizer()
    return save_policy(build_tiny_model(tokenizer), tokenizer,
                       tmp_path_factory.mktemp("tiny_policy"))


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def project_copy(tmp_path):
    """A function that copies the project's tracked files into a fresh git repository (outputs
    of earlier runs left out), optionally with params.yaml overrides, and returns its path."""
    import shutil
    import subprocess

    from ruamel.yaml import YAML

    def make(name: str = "project", overrides: dict | None = None):
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.split()
        copy = tmp_path / name
        for file in files:
            if (ROOT / file).is_file() and not file.startswith("reports/"):
                (copy / file).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / file, copy / file)
        if overrides:
            yaml = YAML()
            params = yaml.load(copy / "params.yaml")
            _merge(params, overrides)
            yaml.dump(params, copy / "params.yaml")
        for command in (["git", "init", "-q"], ["git", "add", "-A"],
                        ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
            subprocess.run(command, cwd=copy, check=True)
        return copy

    return make


def _merge(target, changes):
    for key, value in changes.items():
        if isinstance(value, dict) and key in target:
            _merge(target[key], value)
        else:
            target[key] = value


@pytest.fixture
def dvc_env():
    """A function giving the environment to run the project's commands in a copy: this venv's
    executables, the copy's code."""
    import sys

    bin_dir = str(Path(sys.executable).parent)
    return lambda project: {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                            "PYTHONPATH": str(project)}


@pytest.fixture
def small_budget():
    """params.yaml overrides that run the whole pipeline in about a minute (tiny warm start, a
    few GRPO steps, few evaluation samples): for tests of the plumbing, not of learning."""
    return {"model": {"warm_start": {"steps": 30}},
            "smoke": {"max_steps": 3},
            "train": {"max_steps": 6, "save_steps": 3,
                      "grpo": {"num_generations": 4, "per_device_train_batch_size": 16}},
            "evaluate": {"samples": 2, "n_resamples": 500}}


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
            return client.read_artifacts(artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[key])))

    return versions
