"""The flows' building blocks: stage order from dvc.yaml, failure messages and the Failed states
that carry them, the workspace lock, artifact contents."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.orchestration.runs import (
    RECIPE_STAGE,
    dvc_stages,
    failure_detail,
    seeded_stages,
    stage_artifacts,
)
from rlvr.params.config import load_params

ROOT = Path(__file__).resolve().parents[1]
KEY = re.compile(r"^[a-z0-9-]+$")


def test_stage_order_is_dvc_yamls():
    assert dvc_stages(ROOT / "dvc.yaml") == [
        "check_params",
        "reward_tests",
        "validate",
        "prepare_model",
        "smoke",
        "verified",
        "train",
        "evaluate",
        "rft",
        "recipe",
        "report",
        "publish",
    ]
    # one stage per RL seed before the one that pools them (the flow keeps going past a seed)
    assert seeded_stages(ROOT / "dvc.yaml") == {"verified", "train", "evaluate", "rft"}
    assert RECIPE_STAGE in dvc_stages(ROOT / "dvc.yaml")


def test_failure_details_name_what_broke(tmp_path):
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    gate = tmp_path / "reports/gate/reward_tests.json"
    gate.parent.mkdir(parents=True)
    gate.write_text(json.dumps({"passed": False, "failing": ["tests/rewards/x.py::test_y"]}))
    assert (
        failure_detail("reward_tests", tmp_path, "reward_tests: running tests/rewards\n")
        == "failing reward tests: tests/rewards/x.py::test_y"
    )
    # a stage that never ran (DVC itself failed) gets DVC's own message, not a stale verdict
    locked = "ERROR: Unable to acquire lock. Most likely another DVC process is running"
    assert failure_detail("reward_tests", tmp_path, locked) == locked
    output = (
        "validate: checking a and b\n"
        "data/grpo_train.jsonl: line 5: is not a JSON object: not valid JSON [json_object]\n"
        "validate: FAILED in 3.0 s\nERROR: failed to reproduce 'validate'\n"
    )
    assert failure_detail("validate", tmp_path, output) == (
        "invalid rows:\ndata/grpo_train.jsonl: line 5: is not a JSON object: not valid JSON "
        "[json_object]"
    )
    smoke = "smoke: FAILED\nsmoke check failed: rows_loaded: got 63, expected 64\n"
    assert (
        failure_detail("smoke", tmp_path, smoke)
        == "smoke check failed: rows_loaded: got 63, expected 64"
    )
    assert failure_detail("train", tmp_path, "a\nb\ntrain: step 3: loss = nan").endswith("nan")
    # a stage that stopped on a PipelineError (rlvr.pipeline.stage.run_stage): its own line, nothing else
    bad = (
        "Running stage 'check_params':\n> python -m stages.check_params\n"
        "check_params: params.yaml: train.max_steps = inf: must be an integer\n"
        "ERROR: failed to reproduce 'check_params': failed to run: python -m "
        "stages.check_params, exited with 1\n"
    )
    assert (
        failure_detail("check_params", tmp_path, bad)
        == "check_params: params.yaml: train.max_steps = inf: must be an integer"
    )
    # a bug: its traceback stays in the tail, not the progress line before it
    bug = (
        "train: resuming from x\nTraceback (most recent call last):\nKeyError: 'a'\n"
        "train: FAILED on an unexpected error: this is a bug in the pipeline\n"
        "ERROR: failed to reproduce 'train': failed to run: python -m stages.train\n"
    )
    assert "Traceback" in failure_detail("train", tmp_path, bug)


@pytest.mark.parametrize(
    "stage,keys",
    [
        ("reward_tests", ["reward-tests"]),
        ("validate", ["data-validation"]),
        ("smoke", ["smoke-checks"]),
        ("train", ["training-summary"]),
        ("recipe", ["evaluation-audit"]),
        ("report", ["retrospective", "retrospective-html"]),
        ("publish", ["model-card"]),
        ("prepare_model", []),
        ("evaluate", []),
    ],
)
def test_artifacts_of_each_stage(stage, keys):
    artifacts = stage_artifacts(stage, ROOT)
    assert [a.key for a in artifacts] == keys
    for artifact in artifacts:
        assert KEY.match(artifact.key)
        assert re.search(r"git [0-9a-f]{12}", artifact.description)
        assert "dvc.lock: " in artifact.description
        assert "data/grpo_train.jsonl " in artifact.description
        assert artifact.table or artifact.markdown or artifact.link


def test_the_model_card_artifact_is_the_card_or_says_where_it_is(tmp_path):
    import shutil

    for name in ("params.yaml", "dvc.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "data", tmp_path / "data")  # the provenance line hashes the rows
    (artifact,) = stage_artifacts("publish", tmp_path)  # a fresh clone: no models/
    assert artifact.markdown.startswith("models/final/README.md is not here")
    (tmp_path / "models/final").mkdir(parents=True)
    (tmp_path / "models/final/README.md").write_text("---\nlibrary_name: peft\n---\n\n# GRPO")
    (artifact,) = stage_artifacts("publish", tmp_path)
    assert artifact.markdown == "# GRPO"  # the card without its YAML header


def test_only_stages_with_a_builder_publish():
    """The flow runs an artifact task only for the stages in ARTIFACT_BUILDERS."""
    from rlvr.orchestration.runs import ARTIFACT_BUILDERS

    stages = dvc_stages(ROOT / "dvc.yaml")
    assert set(ARTIFACT_BUILDERS) < set(stages)
    assert {stage for stage in stages if stage_artifacts(stage, ROOT)} == set(ARTIFACT_BUILDERS)


def test_gate_artifact_keeps_verdict_and_counts_apart():
    (artifact,) = stage_artifacts("reward_tests", ROOT)
    (row,) = artifact.table
    assert row["gate"] == "passed" and row["passed"] == row["tests"] > 0


def test_evaluation_artifact_carries_each_seeds_line_and_the_recipes_verdict():
    """Published once recipe has run: a row per seed and split (its own verdict, one run's),
    then the pooled row, the RFT baseline's pooled row, and the recipe's verdict line and the
    sentence on the baseline in the description."""
    from rlvr.core.seeds import seed_paths

    (artifact,) = stage_artifacts("recipe", ROOT)
    params = load_params(ROOT / "params.yaml")
    seeds = params.audit.seeds
    assert [row["seed"] for row in artifact.table if row["split"] == "heldout"] == [
        *map(str, seeds),
        f"pooled over {len(seeds)}",
        f"RFT baseline, pooled over {len(seeds)}",
    ]
    recipe = json.loads((ROOT / params.paths.recipe_summary).read_text())
    for seed, row in zip(seeds, [r for r in artifact.table if r["split"] == "heldout"]):
        summary = json.loads((ROOT / seed_paths(params.paths, seed).eval_summary).read_text())
        n = summary["heldout"]["samples_per_prompt"]
        assert row["ci low"] <= row["delta"] <= row["ci high"]
        assert row[f"pass@{n} final"] == summary["heldout"]["pass_at_k"]["final"][str(n)]
        assert row["prompts lost"] == summary["heldout"]["solutions"]["lost_count"]
        assert row["regressed tags"] == ", ".join(summary["regressed_tags"])
        assert row["verdict"] == summary["verdict"]
    pooled, baseline = artifact.table[-2:]
    assert pooled["verdict"] == recipe["verdict"]
    assert pooled["delta"] == recipe["pooled"]["delta_mean_reward"]["value"]
    theirs = recipe["baseline"]["comparison"]
    assert baseline["verdict"] == theirs["verdict"]
    assert baseline["delta"] == theirs["pooled"]["delta_mean_reward"]["value"]
    assert f"{recipe['verdict_line']}. " in artifact.description
    assert recipe["baseline"]["sentence"] in artifact.description


# ------------------------------------------------------------------ how a flow run ends


def test_an_expected_failure_becomes_a_failed_state_that_still_raises_for_callers():
    from prefect.states import Completed, Failed

    from rlvr.orchestration.runs import StageFailed, failed, stage_failure

    error = StageFailed("stage validate failed (dvc repro exit 1): invalid rows: x")
    state = failed(error)
    assert state.is_failed() and state.message == str(error)
    with pytest.raises(StageFailed):  # what a plain call of the flow raises
        state.result()
    # a stage task's states: expected grounds end the flow Failed with the stage's line ...
    assert stage_failure("validate", state).message == str(error)
    timed_out = Failed(
        name="TimedOut", message="Task run exceeded timeout of 5 second(s)", data=TimeoutError()
    )
    assert stage_failure("train", timed_out).message == (
        "stage train failed: Task run exceeded timeout of 5 second(s) "
        "(params.yaml orchestration.timeouts)"
    )
    # ... a bug raises its own exception (the flow run then logs its traceback)
    with pytest.raises(KeyError, match="bug"):
        stage_failure(
            "train", Failed(message="Task run encountered an exception", data=KeyError("bug"))
        )
    assert stage_failure("train", Completed(data="ok")).is_completed()


def test_a_returned_failure_logs_no_empty_exception():
    """Prefect 3.9.1 logs a returned Failed state with exc_info=True and no exception at hand:
    quiet_returned_failures keeps the line and drops the bare "NoneType: None"."""
    import logging

    from rlvr.orchestration.runs import quiet_returned_failures

    quiet_returned_failures()
    quiet_returned_failures()  # idempotent
    logger = logging.getLogger("prefect.task_runs")
    assert sum(type(f).__name__ == "_NoEmptyExcInfo" for f in logger.filters) == 1
    formatter = logging.Formatter("%(message)s")

    def record():  # what logger.error(..., exc_info=True) makes outside any `except`
        return logger.makeRecord(
            logger.name,
            logging.ERROR,
            __file__,
            1,
            "Task run failed with state: Failed()",
            (),
            sys.exc_info(),
        )

    assert formatter.format(record()) == "Task run failed with state: Failed()\nNoneType: None"
    filtered = record()
    assert all(f.filter(filtered) for f in logger.filters)
    assert formatter.format(filtered) == "Task run failed with state: Failed()"
    try:
        raise KeyError("bug")
    except KeyError:
        real = logger.makeRecord(logger.name, logging.ERROR, __file__, 1, "x", (), sys.exc_info())
    assert all(f.filter(real) for f in logger.filters)
    assert "Traceback" in formatter.format(real)


# ------------------------------------------------------------------ one flow run per workspace

HOLDER = {
    "flow_run": "calm-fox",
    "flow_run_id": "0e6b2c1a-0000-4000-8000-000000000001",
    "flow": "grpo-pipeline",
    "started": "2026-12-01T02:00:00+00:00",
}

# Holds the workspace given as argv[1] (with HOLDER and its own pid) and starts a child that
# outlives it (as a `dvc repro` outlives a killed flow); says so on stdout, then waits.
HOLD = """
import json, os, subprocess, sys, time
from rlvr.orchestration.runs import workspace_lock
with workspace_lock(sys.argv[1], holder={**json.loads(sys.argv[2]), "pid": os.getpid()}):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print(json.dumps({"pid": os.getpid(), "child": child.pid}), flush=True)
    time.sleep(120)
"""


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / ".dvc").mkdir()
    return tmp_path


def _hold(workspace):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(workspace), json.dumps(HOLDER)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    said = json.loads(holder.stdout.readline())
    return holder, said


def test_a_second_run_stops_at_once_naming_the_holder_and_a_killed_holder_blocks_nothing(workspace):
    from rlvr.orchestration.runs import WORKSPACE_LOCK, WorkspaceBusy, busy_line, workspace_lock

    holder, said = _hold(workspace)
    try:
        started = time.monotonic()
        with pytest.raises(WorkspaceBusy) as busy:
            with workspace_lock(workspace, holder={"flow_run": "second"}):
                pytest.fail("two holders of one workspace")
        assert time.monotonic() - started < 1  # at once: no waiting for the holder
        line = str(busy.value)
        assert line == busy_line(workspace, {**HOLDER, "pid": said["pid"]})
        assert "\n" not in line
        assert f"flow run 'calm-fox' (id {HOLDER['flow_run_id']}, flow grpo-pipeline)" in line
        assert f"pid {said['pid']}, started 2026-12-01T02:00:00+00:00" in line

        holder.send_signal(signal.SIGKILL)  # no cleanup runs: the OS drops the lock
        holder.wait(timeout=10)
        os.kill(said["child"], 0)  # its child lives on, holding no lock
        with workspace_lock(workspace, holder={"flow_run": "next", "pid": os.getpid()}) as mine:
            assert json.loads((workspace / WORKSPACE_LOCK).read_text()) == mine
        assert (workspace / WORKSPACE_LOCK).read_text() == ""  # released: no stale record
    finally:
        holder.kill()
        holder.wait(timeout=10)
        try:
            os.kill(said["child"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_lock_is_released_when_the_run_ends_even_on_an_error(workspace):
    from rlvr.orchestration.runs import workspace_lock

    with pytest.raises(KeyError):
        with workspace_lock(workspace, holder={"flow_run": "a", "pid": 1}):
            raise KeyError("bug")
    with workspace_lock(workspace, holder={"flow_run": "b", "pid": 2}):
        pass


def test_a_folder_that_is_not_a_dvc_repository_is_one_line(tmp_path):
    from rlvr.core.errors import PipelineError
    from rlvr.orchestration.runs import workspace_lock

    with pytest.raises(PipelineError, match=r": not a DVC repository \(no \.dvc folder\)$"):
        with workspace_lock(tmp_path / "nowhere"):
            pass


def test_the_lock_file_is_ignored_by_git_and_is_not_dvcs_own(tmp_path):
    """Held for a whole flow run, the lock must not block the `dvc repro` the flow starts (DVC
    locks .dvc/tmp/lock) and must never show in `git status`."""
    from rlvr.orchestration.runs import WORKSPACE_LOCK, run_dvc, workspace_lock

    root = Path(__file__).parents[1]
    assert subprocess.run(["git", "check-ignore", "-q", WORKSPACE_LOCK], cwd=root).returncode == 0
    assert WORKSPACE_LOCK != ".dvc/tmp/lock"
    assert run_dvc(tmp_path, "init", "--no-scm", "-q").returncode == 0
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  hello:\n    cmd: echo hi > out.txt\n    outs: [out.txt]\n"
    )
    with workspace_lock(tmp_path, holder={"flow_run": "t", "pid": os.getpid()}):
        run = run_dvc(tmp_path, "repro")
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "out.txt").read_text() == "hi\n"
