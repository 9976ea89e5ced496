"""The Prefect flows under prefect_test_harness (a throwaway server and database), on a small
budget: every stage through `dvc repro`, versioned artifacts, and failures that name the stage."""

import json
import time

import pytest

from tests.helpers import set_params

STAGE_KEYS = {
    "check_params": [],
    "reward_tests": ["reward-tests"],
    "validate": ["data-validation"],
    "prepare_model": [],
    "smoke": ["smoke-checks"],
    "verified": [],  # the base's answers: rft and guidance read them, the report does not
    "train": ["training-summary"],
    "evaluate": [],
    "rft": [],  # the baseline's figures go to the evaluation-audit artifact, after recipe
    "recipe": ["evaluation-audit"],
    "report": ["retrospective", "retrospective-html"],
    "publish": ["model-card"],
}


def _mtime(path):
    return path.stat().st_mtime_ns if path.exists() else None


@pytest.mark.slow
@pytest.mark.long
def test_a_failing_reward_test_fails_the_flow_at_once_naming_it(
    small_budget, project_copy, prefect_harness
):
    from flows.pipeline import pipeline

    project = project_copy("broken-gate", small_budget)
    verifiers = project / "rlvr/rewards/verifiers.py"
    verifiers.write_text(
        verifiers.read_text().replace(
            "            return left * right\n", "            return left + right\n"
        )
    )
    state = pipeline(root=str(project), return_state=True)
    assert state.is_failed()
    assert state.message.startswith("stage reward_tests failed (dvc repro exit ")
    assert ": failing reward tests: " in state.message
    assert "tests/rewards/test_verifiers.py::test_countdown" in state.message
    assert "\n" not in state.message  # the gate's one line
    assert not (project / "reports/validation").exists()


@pytest.mark.slow
def test_invalid_rows_fail_the_flow_naming_them(copy_run, prefect_harness):
    from flows.pipeline import pipeline

    project = copy_run("bad-row")  # its gate holds: validate is the first stage to rerun
    base = _mtime(project / "models/base/config.json")
    data = project / "data/grpo_train.jsonl"
    lines = data.read_text().splitlines()
    lines[6] = lines[6].replace('"target": ', '"target": 100000')
    data.write_text("\n".join(lines) + "\n")
    state = pipeline(root=str(project), return_state=True)
    assert state.is_failed()
    assert "stage validate failed" in state.message and "invalid rows:" in state.message
    assert "row cd16-train-007 (line 7): countdown target is unreachable" in state.message
    assert _mtime(project / "models/base/config.json") == base  # no stage after it ran


@pytest.mark.slow
@pytest.mark.long
def test_a_stage_failing_midway_keeps_earlier_outputs_then_the_flow_runs_every_stage(
    small_budget, copy_run, prefect_harness, artifact_versions
):
    """One project (a small budget costs a run): train fails, what ran before it stays; the
    cause fixed, a rerun skips that, runs every stage after, versions its artifacts, and a third
    run with nothing changed runs nothing."""
    from flows.pipeline import pipeline

    project = copy_run("midway")  # its gate and base model hold; a new budget from train on
    set_params(project, {**small_budget, "orchestration": {"retries": 0}})
    script = project / "stages/train.py"
    original = script.read_text()
    broken = original.replace(
        "def main(params: ParamsView) -> int:\n",
        "def main(params: ParamsView) -> int:\n"
        "    raise SystemExit('train: disk full (injected)')\n",
    )
    assert broken != original  # the fault is in
    script.write_text(broken)
    state = pipeline(root=str(project), return_state=True)
    assert state.is_failed() and "stage train failed" in state.message
    assert "disk full (injected)" in state.message
    kept = {
        p: _mtime(project / p)
        for p in (
            "models/base/config.json",
            "reports/smoke/checks.json",
            "reports/timing/prepare_model.json",
            "reports/timing/smoke.json",
        )
    }
    assert all(kept.values())
    assert not (project / "models/trained/seed-0").exists()

    script.write_text(original)  # the cause is fixed
    time.sleep(0.01)
    result = pipeline(root=str(project))
    assert result["artifacts"] == STAGE_KEYS
    assert {p: _mtime(project / p) for p in kept} == kept  # DVC skipped what it had
    assert (project / "models/trained/seed-1").is_dir()
    assert (project / "models/final/README.md").is_file()
    # what DVC ran: the new budget's train and what follows; not the gate (its input, the
    # params check's verdict, is the same bytes for every valid params.yaml)
    assert {"train@0", "train@1", "evaluate@0", "recipe", "publish"} <= set(result["ran"])
    assert "reward_tests" not in result["ran"]
    # the recipe's verdict over its seeds comes back with the artifact keys
    verdict = json.loads((project / "metrics/recipe.json").read_text())["verdict"]
    assert result["verdict"] == verdict
    assert verdict in ("improved", "no significant change", "regressed", "mixed")
    timing = project / "reports/timing/train@0.json"
    first_train = _mtime(timing)
    # DVC: nothing changed, nothing reruns
    assert pipeline(root=str(project)) == {"artifacts": STAGE_KEYS, "verdict": verdict, "ran": []}
    assert _mtime(timing) == first_train
    for key in [k for keys in STAGE_KEYS.values() for k in keys]:
        versions = artifact_versions(key)
        assert len(versions) >= 2, key
        assert "dvc.lock: " in versions[0].description and "git " in versions[0].description
    # this run's: the server lists versions by id, not by time, and the worker's other flow tests
    # (other projects, other verdicts) share it
    audit = max(artifact_versions("evaluation-audit"), key=lambda a: a.created)
    assert "heldout" in json.dumps(audit.data) and "pooled over 2" in json.dumps(audit.data)
    recipe = json.loads((project / "reports/recipe/summary.json").read_text())
    assert recipe["verdict_line"] in audit.description
    # GRPO against the RFT baseline: its sentence, and the baseline pooled over its seeds
    assert recipe["baseline"]["sentence"] in audit.description
    assert "RFT baseline, pooled over 2" in json.dumps(audit.data)
