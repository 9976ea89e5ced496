"""What an edit reruns: in a copy of the project whose every stage is up to date (stub outputs
recorded with `dvc commit -f`: `dvc status` reads hashes, not contents), a comment appended to one
file leaves out of date exactly the stages that run that file (dvc.yaml's code deps, written from
the imports by rlvr.pipeline.codedeps), and the report and the model card, which show every stage's
code; flow and team code reruns no stage."""

import json
import subprocess
from pathlib import Path

import pytest

from rlvr.params.config import load_params
from tests.helpers import ROOT, dvc, make_project_copy, project_env

SEEDS = load_params(ROOT / "params.yaml").audit.seeds
SUMMARY = {"report", "publish"}


def per_seed(stage: str) -> set[str]:
    return {f"{stage}@{seed}" for seed in SEEDS}


def _status(project: Path) -> set[str]:
    run = subprocess.run(
        ["dvc", "status", "--json"],
        cwd=project,
        env=project_env(project),
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(run.stdout))


@pytest.fixture(scope="module")
def up_to_date(tmp_path_factory) -> Path:
    from dvc.repo import Repo

    project = tmp_path_factory.mktemp("reruns") / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    make_project_copy(project)
    with Repo(str(project)) as repo:
        for stage in repo.index.stages:
            for out in stage.outs:  # a stub for each output the copy lacks (models, reports)
                path = Path(out.fs_path)
                if path.exists():
                    continue
                folder = path if not path.suffix else path.parent
                folder.mkdir(parents=True, exist_ok=True)
                (path / "stub" if not path.suffix else path).write_text("stub\n")
    dvc(project, "commit", "-f", "-q")
    assert _status(project) == set(), "dvc commit -f left stages out of date"
    return project


EDITS = {
    "rlvr/report/retrospective.py": SUMMARY,
    "rlvr/baseline/rft.py": per_seed("rft") | SUMMARY,
    # the verdict's rules: the audits and the recipe, not training
    "rlvr/audit/slices.py": per_seed("evaluate") | per_seed("rft") | {"recipe"} | SUMMARY,
    "rlvr/grpo/guidance.py": {"smoke"} | per_seed("train") | SUMMARY,
    "tests/rewards/test_verifiers.py": {"reward_tests"} | SUMMARY,
    "tests/helpers.py": set(),  # the end-to-end tests' helpers: not the gate's code
    "flows/pipeline.py": set(),
    "rlvr/team/spread.py": set(),
    "rlvr/orchestration/runs.py": set(),
}


@pytest.mark.parametrize("edited", EDITS)
def test_an_edit_reruns_exactly_the_stages_that_run_the_file(up_to_date, edited):
    file = up_to_date / edited
    before = file.read_bytes()
    try:
        file.write_bytes(before + b"# an edit\n")
        assert _status(up_to_date) == EDITS[edited]
    finally:
        file.write_bytes(before)
    assert _status(up_to_date) == set()


def test_an_edit_to_the_reward_code_reruns_every_stage(up_to_date):
    """Every stage checks the reward names (rlvr.pipeline.stage), and the gate tests them."""
    file = up_to_date / "rlvr/rewards/verifiers.py"
    before = file.read_bytes()
    try:
        file.write_bytes(before + b"# an edit\n")
        stages = _status(up_to_date)
    finally:
        file.write_bytes(before)
    every = {"check_params", "reward_tests", "validate", "prepare_model", "smoke", "recipe"}
    every |= per_seed("verified") | per_seed("train") | per_seed("evaluate") | per_seed("rft")
    assert stages == every | SUMMARY
