"""The flows' building blocks: stage order from dvc.yaml, failure messages, artifact contents."""

import json
import re
from pathlib import Path

import pytest

from rlvr.orchestration import failure_detail, stage_artifacts, dvc_stages

ROOT = Path(__file__).resolve().parents[1]
KEY = re.compile(r"^[a-z0-9-]+$")


def test_stage_order_is_dvc_yamls():
    assert dvc_stages(ROOT / "dvc.yaml") == ["check_params", "reward_tests", "validate",
                                             "prepare_model", "smoke", "train", "evaluate",
                                             "report"]


def test_failure_details_name_what_broke(tmp_path):
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    gate = tmp_path / "reports/gate/reward_tests.json"
    gate.parent.mkdir(parents=True)
    gate.write_text(json.dumps({"passed": False, "failing": ["tests/rewards/x.py::test_y"]}))
    assert failure_detail("reward_tests", tmp_path, "reward_tests: running tests/rewards\n") == \
        "failing reward tests: tests/rewards/x.py::test_y"
    # a stage that never ran (DVC itself failed) gets DVC's own message, not a stale verdict
    locked = "ERROR: Unable to acquire lock. Most likely another DVC process is running"
    assert failure_detail("reward_tests", tmp_path, locked) == locked
    output = ("validate: checking a and b\n"
              "data/grpo_train.jsonl: line 5: is not a JSON object: not valid JSON [json_object]\n"
              "validate: FAILED in 3.0 s\nERROR: failed to reproduce 'validate'\n")
    assert failure_detail("validate", tmp_path, output) == (
        "invalid rows:\ndata/grpo_train.jsonl: line 5: is not a JSON object: not valid JSON "
        "[json_object]")
    smoke = "smoke: FAILED\nsmoke check failed: rows_loaded: got 63, expected 64\n"
    assert failure_detail("smoke", tmp_path, smoke) == \
        "smoke check failed: rows_loaded: got 63, expected 64"
    assert failure_detail("train", tmp_path, "a\nb\ntrain: step 3: loss = nan") .endswith("nan")


@pytest.mark.parametrize("stage,keys", [
    ("reward_tests", ["reward-tests"]), ("validate", ["data-validation"]),
    ("smoke", ["smoke-checks"]), ("train", ["training-summary"]),
    ("evaluate", ["evaluation-audit"]), ("report", ["retrospective", "retrospective-html"]),
    ("prepare_model", []),
])
def test_artifacts_of_each_stage(stage, keys):
    artifacts = stage_artifacts(stage, ROOT)
    assert [a.key for a in artifacts] == keys
    for artifact in artifacts:
        assert KEY.match(artifact.key)
        assert re.search(r"git [0-9a-f]{12}", artifact.description)
        assert "dvc.lock: " in artifact.description
        assert "data/grpo_train.jsonl " in artifact.description
        assert artifact.table or artifact.markdown or artifact.link


def test_only_stages_with_a_builder_publish():
    """The flow runs an artifact task only for the stages in ARTIFACT_BUILDERS."""
    from rlvr.orchestration import ARTIFACT_BUILDERS

    stages = dvc_stages(ROOT / "dvc.yaml")
    assert set(ARTIFACT_BUILDERS) < set(stages)
    assert {stage for stage in stages if stage_artifacts(stage, ROOT)} == set(ARTIFACT_BUILDERS)


def test_gate_artifact_keeps_verdict_and_counts_apart():
    (artifact,) = stage_artifacts("reward_tests", ROOT)
    (row,) = artifact.table
    assert row["gate"] == "passed" and row["passed"] == row["tests"] > 0


def test_evaluation_artifact_carries_the_ci_and_verdict():
    (artifact,) = stage_artifacts("evaluate", ROOT)
    heldout = [row for row in artifact.table if row["split"] == "heldout"][0]
    assert heldout["ci low"] <= heldout["delta"] <= heldout["ci high"]
    assert heldout["verdict"] in ("improved", "no significant change", "regressed")
