"""The audit never lies, end to end on the cold run: a code change reruns every stage that runs
it, the report's hashes are those of the run that made each thing, a rerun of the same commit
leaves the repository clean, and results pushed to a DVC remote pull into a fresh clone that has
nothing left to run."""

import json
import re
import subprocess
import sys

import pytest
from ruamel.yaml import YAML

from rlvr.params.config import STAGES
from tests.helpers import commit_all, dvc

pytestmark = pytest.mark.slow
VERIFIERS = "rlvr/rewards/verifiers.py"


def _changed_stages(project) -> set[str]:
    return set(json.loads(dvc(project, "status", "--json")))


def _lock(project) -> dict:
    return YAML(typ="safe").load((project / "dvc.lock").read_text())["stages"]


def _out_md5(lock: dict, stage: str, path: str) -> str:
    return next(o["md5"] for o in lock[stage]["outs"] if o["path"] == path)


def _git_status(project) -> str:
    return subprocess.run(
        ["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True, check=True
    ).stdout


def test_a_reward_change_the_tests_accept_reruns_every_stage_that_runs_it(copy_run):
    project = copy_run("reward-change")
    assert _changed_stages(project) == set()
    verifiers = project / VERIFIERS
    original = verifiers.read_text()
    # A real change of behaviour (longer answers now score 0) that every reward test accepts:
    # the gate's verdict file would come out byte-identical, so depending on it is not enough.
    changed = original.replace("MAX_EXPRESSION_CHARS = 256", "MAX_EXPRESSION_CHARS = 128")
    assert changed != original
    verifiers.write_text(changed)
    gate = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/rewards",
            "rlvr/rewards",
            "rlvr/rewards/grpo_math.py",
        ],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert gate.returncode == 0, gate.stdout[-2000:]
    assert {"smoke", "train@0", "train@1", "evaluate@0", "evaluate@1", "report"} <= _changed_stages(
        project
    )  # (SMALL_RUN: seeds 0 and 1)
    verifiers.write_text(original)
    assert _changed_stages(project) == set()


def _report_rows(project) -> dict[str, str]:
    rows = re.findall(
        r"^\| (data|model) md5 (\S+) \| (\S+) \|$",
        (project / "reports/retrospective.md").read_text(),
        flags=re.MULTILINE,
    )
    return {re.sub(r"\\(.)", r"\1", path): md5 for _, path, md5 in rows}  # markdown-escaped


def test_the_report_shows_the_hashes_of_the_run_that_made_each_thing(copy_run, cold_run):
    from rlvr.orchestration.runs import provenance_line

    project = copy_run("provenance")
    params = YAML()
    values = params.load(project / "params.yaml")
    # a new base model, and everything after it (as able as the old one: the smoke run passes)
    values["model"]["warm_start"]["learning_rate"] = 2.5e-3
    params.dump(values, project / "params.yaml")
    dvc(project, "repro")
    lock, before = _lock(project), _lock(cold_run)
    seed = json.loads((project / "reports/recipe/summary.json").read_text())["published_seed"]
    model = f"models/trained/seed-{seed}"  # the published seed's, the one the report shows
    rft = f"models/rft/seed-{seed}"  # its baseline's, fine-tuned from the same base
    base, trained, tuned = (
        _out_md5(lock, "prepare_model", "models/base"),
        _out_md5(lock, f"train@{seed}", model),
        _out_md5(lock, f"rft@{seed}", rft),
    )
    assert base != _out_md5(before, "prepare_model", "models/base")
    assert trained != _out_md5(before, f"train@{seed}", model)
    assert tuned != _out_md5(before, f"rft@{seed}", rft)
    data = {d["path"]: d["md5"] for d in lock["validate"]["deps"] if d["path"].startswith("data/")}
    assert _report_rows(project) == {**data, "models/base": base, model: trained, rft: tuned}
    line = provenance_line(project)  # what the Prefect artifacts carry: every seed's model
    assert f"models/base {base[:12]}" in line and f"{model} {trained[:12]}" in line
    card = (project / "models/final/README.md").read_text()  # the card names the same hashes
    assert f"| models/base md5 (prepare\\_model) | {base} |" in card
    assert f"| their md5 (train) | {trained} |" in card
    assert all(f"| {md5} |" in card for md5 in data.values())


def test_a_rerun_of_the_same_commit_writes_the_same_lock_and_leaves_git_clean(
    cold_run, forced_rerun
):
    """A fresh clone (no models, no cache, no checkpoints) of the commit that holds the cold run's
    results, every stage forced: identical dvc.lock, identical tracked reports."""
    clone, _, output = forced_rerun
    stages = dvc(clone, "stage", "list", "--name-only").split()  # train@0, train@1, ...
    assert output.count("Running stage") == len(stages) > len(STAGES)  # a stage per seed
    assert (clone / "dvc.lock").read_text() == (cold_run / "dvc.lock").read_text()
    assert _git_status(clone) == ""


def test_results_pushed_to_a_remote_pull_into_a_clone_with_nothing_left_to_run(copy_run, tmp_path):
    project = copy_run("pushed")
    dvc(project, "remote", "add", "-d", "team", str(tmp_path / "remote"))
    commit_all(project, "team remote")
    assert "pushed" in dvc(project, "push")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(project), str(clone)], check=True)
    assert not (clone / "models").exists()
    dvc(clone, "pull")
    assert (clone / "models/base/model.safetensors").exists()
    assert (clone / "models/final/model.safetensors").exists()
    assert _changed_stages(clone) == set()
    output = dvc(clone, "repro")
    assert "Running stage" not in output and _git_status(clone) == ""
