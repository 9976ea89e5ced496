"""How a flow run ends, under prefect_test_harness (one throwaway server for the session):
a stage that stops on expected grounds ends it Failed with that stage's line and no traceback, a
bug keeps its traceback, a failed stage is still retried (a killed training run resumes), two
runs never share a workspace, and a run that completes returns the audit's verdict.

Slow: each needs the Prefect server (~17 s to start) and real `dvc repro` of a stage or more.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import project_env, trainer_hook

pytestmark = pytest.mark.slow

PUBLISHED = (
    "reward-tests, data-validation, smoke-checks, training-summary, evaluation-audit, "
    "retrospective, retrospective-html, model-card"
)


@pytest.fixture
def api_url(prefect_harness):
    """The harness server's API, for flows run in a subprocess (as a person runs them)."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value()


def _run(
    project: Path, api_url: str, *command: str, env: dict | None = None
) -> tuple[int, str, float]:
    """A command in a copy (as a person runs it: the console is what they see), on the harness
    server: exit code, console (stdout and stderr), seconds."""
    started = time.monotonic()
    run = subprocess.run(
        list(command),
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
        env={
            **project_env(project),
            "PREFECT_API_URL": api_url,
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        },
    )  # in order, as it is seen
    return run.returncode, run.stdout, time.monotonic() - started


def _cli(project: Path, api_url: str, module: str, env: dict | None = None):
    """`python -m <module>` in a copy: exit code, console, seconds."""
    return _run(project, api_url, sys.executable, "-m", module, env=env)


# The pipeline flow on check_params alone, its `dvc repro` replaced by `run` (its body given),
# in a process of its own; prints how many times the stage ran and how the run ended.
DRIVER = """
import json, sys
import flows.pipeline as flow
from rlvr.orchestration.runs import StageFailed

calls = []


def run(stage, root, keep_going=False):
    calls.append(stage)
{body}


flow.repro_stage = run
flow.stale_stages = lambda root: None  # every stage given is run
state = flow.pipeline(root=sys.argv[1], stages=["check_params"], return_state=True)
print("ENDED " + json.dumps({"calls": len(calls), "type": state.type.value,
                             "message": state.message,
                             "result": state.result() if state.is_completed() else None}))
"""


def _drive(project: Path, api_url: str, body: str) -> tuple[dict, str]:
    code, console, _ = _run(
        project, api_url, sys.executable, "-c", DRIVER.replace("{body}", body), str(project)
    )
    assert code == 0, console[-3000:]
    ended = [line for line in console.splitlines() if line.startswith("ENDED ")]
    return json.loads(ended[-1].removeprefix("ENDED ")), console


def _last_line(console: str) -> str:
    return [line for line in console.splitlines() if line.strip()][-1]


def _verdict(project: Path):
    metrics = project / "metrics/recipe.json"
    return json.loads(metrics.read_text()).get("verdict") if metrics.exists() else None


def test_bad_params_end_the_flow_failed_with_the_stages_line_and_no_traceback(
    project_copy, api_url
):
    from flows.pipeline import pipeline
    from rlvr.orchestration.runs import StageFailed

    # a value the flow's own params loading rejects: check_params says why, in its line
    project = project_copy("bad-type", {"train": {"max_steps": float("inf")}})
    code, console, _ = _cli(project, api_url, "flows.pipeline")
    assert code == 1, console[-3000:]
    assert re.fullmatch(
        r"pipeline: stage check_params failed \(dvc repro exit \d+\): "
        r"check_params: params\.yaml: train\.max_steps = inf: must be an integer",
        _last_line(console),
    ), console[-3000:]
    assert re.search(r"Finished in state Failed\(.stage check_params failed", console)
    assert "Traceback" not in console and "NoneType: None" not in console, console[-3000:]
    assert not (project / "reports/gate").exists()  # nothing after check_params ran

    # a value only check_params catches (TRL's GRPOConfig rejects it)
    project = project_copy(
        "bad-value", {"train": {"grpo": {"extra": {"generation_batch_size": 100}}}}
    )
    said = (
        r"stage check_params failed \(dvc repro exit \d+\): check_params: params\.yaml: "
        r"train\.grpo: TRL's GRPOConfig rejects it: generation_batch_size \(100\) must be "
        r"divisible by the global batch size[^\n]*"
    )
    code, console, _ = _cli(project, api_url, "flows.pipeline")
    assert code == 1 and re.fullmatch("pipeline: " + said, _last_line(console)), console[-3000:]
    assert "Traceback" not in console and "NoneType: None" not in console, console[-3000:]
    # a Python caller: the state says it, a plain call raises it
    state = pipeline(root=str(project), return_state=True)
    assert state.is_failed() and re.fullmatch(said, state.message), state.message
    with pytest.raises(StageFailed) as raised:
        pipeline(root=str(project))
    assert str(raised.value) == state.message


def test_a_bug_keeps_its_traceback(project_copy, api_url):
    project = project_copy("bug")
    ended, console = _drive(project, api_url, '    raise RuntimeError("injected bug")')
    assert ended["calls"] == 1 and ended["type"] == "FAILED"
    assert "RuntimeError: injected bug" in ended["message"]
    assert "Traceback (most recent call last)" in console and "in run" in console, console


def test_a_stage_that_fails_is_retried_and_ends_failed_without_a_traceback(project_copy, api_url):
    """The stage task returns a Failed state instead of raising: Prefect still retries it."""
    project = project_copy(
        "retried",
        {
            "orchestration": {
                "retries": 2,
                "retry_delay_seconds": 0,
                "retried_stages": ["check_params"],
            }
        },
    )
    line = "stage check_params failed (dvc repro exit 255): check_params: killed (injected)"
    ended, console = _drive(
        project,
        api_url,
        f"""\
    if len(calls) == 1:
        raise StageFailed({line!r})
    return "check_params: done"
""",
    )
    assert ended["calls"] == 2 and ended["type"] == "COMPLETED", console[-3000:]
    assert ended["result"] == {
        "artifacts": {"check_params": []},
        "verdict": _verdict(project),
        "ran": [],  # the injected repro ran no DVC stage
    }
    assert "Retry 1/2 will start immediately" in console

    ended, console = _drive(project, api_url, f"    raise StageFailed({line!r})")
    assert ended["calls"] == 3, console[-3000:]  # the first run and its two retries
    assert ended["type"] == "FAILED" and ended["message"] == line
    assert "Retries are exhausted" in console
    assert "Traceback" not in console and "NoneType: None" not in console, console[-3000:]


def test_a_stage_past_its_timeout_ends_the_flow_failed_with_one_line(project_copy, api_url):
    """Prefect itself logs the timed-out task's traceback (3.9.1: task_engine.py handle_timeout
    -> handle_retry, exc_info=True inside its `except`); the flow run adds none and ends Failed
    with one line."""
    project = project_copy("slow-stage", {"orchestration": {"timeouts": {"check_params": 1}}})
    ended, console = _drive(project, api_url, "    import time; time.sleep(60)")
    assert ended["type"] == "FAILED" and ended["message"] == (
        "stage check_params failed: Task run exceeded timeout of 1.0 second(s) "
        "(params.yaml orchestration.timeouts)"
    ), console[-3000:]
    assert "Encountered exception during execution" not in console, console[-3000:]


# Kills the training process (SIGKILL, no cleanup) right after it saved checkpoint-$STEP, once:
# the marker file tells the retried run to go on.
KILL_ONCE = trainer_hook("""
STEP = int(os.environ["KILL_AFTER_CHECKPOINT"])
MARK = os.environ["KILL_MARK"]


def patch(Trainer):
    save = Trainer._save_checkpoint

    def save_then_die(trainer, *args, **kwargs):
        save(trainer, *args, **kwargs)
        if trainer.state.global_step == STEP and not os.path.exists(MARK):
            open(MARK, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

    Trainer._save_checkpoint = save_then_die
""")


@pytest.mark.long
def test_a_killed_training_run_is_retried_by_the_flow_and_resumes(copy_run, api_url):
    import shutil

    project = copy_run("killed")
    shutil.rmtree(project / "models/checkpoints")
    shutil.rmtree(project / "models/trained")  # train is stale: it trains from scratch
    hook = project.parent / "kill-once"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_ONCE)
    code, console, _ = _cli(
        project,
        api_url,
        "flows.pipeline",
        env={
            "PYTHONPATH": f"{hook}{os.pathsep}{project}",
            "KILL_AFTER_CHECKPOINT": "8",
            "KILL_MARK": str(hook / "killed"),
        },
    )
    assert code == 0, console[-4000:]
    assert (hook / "killed").exists()  # it was killed once ...
    assert re.search(
        r"Task run failed with state: Failed\(message=.stage train failed "
        r"\(dvc repro exit \d+\).*Retry 1/2",
        console,
    ), console[-4000:]
    # ... and the seed killed (DVC orders a group's stages by its graph: any seed may be first)
    # resumed from its checkpoint
    assert re.search(
        r"train@(\d+): resuming from models/checkpoints/seed-\1/checkpoint-8\n", console
    )
    assert "Traceback" not in console, console[-4000:]
    assert _last_line(console) == (
        f"pipeline: artifacts {PUBLISHED}; audit verdict: {_verdict(project)}"
    )


# The training of one RL seed ($FAIL_SEED) stops on a full disk as it starts, every time.
FULL_DISK_FOR_ONE_SEED = trainer_hook("""
import errno


def patch(Trainer):
    train = Trainer.train

    def train_or_fill_the_disk(trainer, *args, **kwargs):
        seed = os.environ["FAIL_SEED"]
        if sys.argv[0].endswith("train.py") and sys.argv[-1] == seed:
            raise OSError(errno.ENOSPC, "No space left on device",
                          f"models/checkpoints/seed-{seed}/checkpoint-3/model.safetensors")
        return train(trainer, *args, **kwargs)

    Trainer.train = train_or_fill_the_disk
""")


@pytest.mark.long
def test_a_failed_seed_leaves_the_others_and_the_recipe_of_those_that_ran(
    copy_run, api_url, artifact_versions
):
    """A third seed added to the cold run's two fails in training: the flow still evaluates the
    other two, pools them (a verdict over 2 of 3, naming seed 2 and its line) and publishes that,
    then ends Failed; DVC then holds the two as done, so `dvc repro` reruns only seed 2's
    stages and what pools the seeds."""
    from tests.helpers import set_params

    project = copy_run("one-seed-fails")
    set_params(project, {"audit": {"seeds": [0, 1, 2]}, "orchestration": {"retries": 0}})
    hook = project.parent / "full-disk"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FULL_DISK_FOR_ONE_SEED)
    code, console, _ = _cli(
        project,
        api_url,
        "flows.pipeline",
        env={"PYTHONPATH": f"{hook}{os.pathsep}{project}", "FAIL_SEED": "2"},
    )
    assert code == 1, console[-4000:]
    recipe = json.loads((project / "reports/recipe/summary.json").read_text())
    assert recipe["evaluated"] == [0, 1] and list(recipe["failed"]) == ["2"], recipe["failed"]
    assert (
        "train@2: the disk is full: writing in models/checkpoints/seed-2/checkpoint-3 "
        in recipe["failed"]["2"]
    )
    assert recipe["verdict"] in ("improved", "no significant change", "regressed", "mixed")
    assert re.match(
        r"pipeline: stage train failed \(dvc repro exit \d+\): train@2: the disk is "
        r"full: ",
        _last_line(console),
    ), console[-4000:]
    assert _last_line(console).endswith(
        f"; the recipe over 2 of 3 seeds: {recipe['verdict_line']}"
    ), console[-4000:]
    assert "dvc repro --keep-going evaluate" in console  # past the failed seed, to the others
    assert "Traceback" not in console, console[-4000:]
    audit = max(artifact_versions("evaluation-audit"), key=lambda a: a.created)  # this run's
    assert audit.description.startswith(
        f"Step 0 vs final, per RL seed and pooled; "
        f"{recipe['verdict_line']}. Seed 2 has no results: "
        f"{recipe['failed']['2']}"
    )
    rows = json.loads(audit.data) if isinstance(audit.data, str) else audit.data
    # the RFT baseline does not depend on training: all three of its seeds ran
    assert [row["seed"] for row in rows] == [
        *["0"] * 3,  # train, validation, held-out
        *["1"] * 3,
        "pooled over 2",
        "RFT baseline, pooled over 3",
    ], rows
    assert "(GRPO over 2 seeds, RFT over 3; completions sampled a seed: GRPO " in audit.description
    stale = json.loads(
        subprocess.run(
            ["dvc", "status", "--json"],
            cwd=project,
            env=project_env(project),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert {name for name in stale if "@" in name} == {"train@2", "evaluate@2"}, stale
    assert {"recipe", "report", "publish"} <= set(stale), stale


def test_the_cli_prints_the_artifacts_and_the_audits_verdict(copy_run, api_url):
    project = copy_run("verdict")
    code, console, _ = _cli(project, api_url, "flows.pipeline")
    assert code == 0, console[-3000:]
    verdict = _verdict(project)
    assert verdict in ("improved", "no significant change", "regressed", "mixed")
    assert _last_line(console) == f"pipeline: artifacts {PUBLISHED}; audit verdict: {verdict}"


# A flow run that takes the workspace and keeps it; prints who holds it, then waits.
HOLD = """
import json, sys, time
from prefect import flow
from rlvr.orchestration.runs import workspace_lock


@flow(name="hold-workspace")
def hold(root):
    with workspace_lock(root) as holder:
        print("HOLDING " + json.dumps(holder), flush=True)
        time.sleep(600)


hold(sys.argv[1])
"""


def test_a_second_run_stops_at_once_naming_the_run_that_holds_the_workspace(project_copy, api_url):
    from flows.pipeline import pipeline
    from rlvr.orchestration.runs import WorkspaceBusy, busy_line

    project = project_copy("held")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(project)],
        cwd=project,
        env={**project_env(project), "PREFECT_API_URL": api_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        said = next((line for line in holder.stdout if line.startswith("HOLDING ")), None)
        assert said, f"the holder exited ({holder.wait(timeout=10)}) before taking the workspace"
        held = json.loads(said.removeprefix("HOLDING "))
        assert held["flow"] == "hold-workspace" and held["pid"] == holder.pid
        assert held["flow_run"] and re.fullmatch(r"[0-9a-f-]{36}", held["flow_run_id"])
        line = busy_line(project, held)
        assert f"flow run '{held['flow_run']}' (id {held['flow_run_id']}" in line

        for module in ("flows.pipeline", "flows.experiments"):
            code, console, seconds = _cli(project, api_url, module)
            assert code == 1, console[-3000:]
            assert _last_line(console) == f"{module.split('.')[1]}: {line}", console[-3000:]
            assert "Traceback" not in console, console[-3000:]
            assert "dvc-repro" not in console and "queue_experiments" not in console  # no task
            assert seconds < 60, seconds

        state = pipeline(root=str(project), return_state=True)
        assert state.is_failed() and state.message == line
        with pytest.raises(WorkspaceBusy, match=re.escape(line)):
            pipeline(root=str(project))
        assert not (project / "reports").exists()  # no stage ran

        os.killpg(holder.pid, signal.SIGKILL)  # a holder killed with no cleanup ...
        holder.wait(timeout=10)
        result = pipeline(root=str(project), stages=["check_params"])  # ... blocks nothing
        assert (result["artifacts"], result["verdict"]) == ({"check_params": []}, _verdict(project))
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait(timeout=10)


def test_a_prefect_server_takes_the_deployments_concurrency_limit(project_copy, api_url):
    """`prefect deploy` sends prefect.yaml's limit, and the server keeps it: one run of the
    nightly at a time, the next enqueued (test_prefect_yaml.py checks the file offline)."""
    project = project_copy("deploy")
    prefect = str(Path(sys.executable).parent / "prefect")
    env = {"RLVR_ROOT": str(project)}
    for command in (
        ["work-pool", "create", "rlvr-process", "--type", "process", "--overwrite"],
        ["--no-prompt", "deploy", "--name", "nightly"],
    ):
        code, console, _ = _run(project, api_url, prefect, *command, env=env)
        assert code == 0, console[-3000:]
    code, console, _ = _run(
        project, api_url, prefect, "api", "GET", "/deployments/name/grpo-nightly/nightly", env=env
    )
    assert code == 0, console[-3000:]
    deployment = json.loads(console[console.index("{") :])
    # Prefect 3.9.1 keeps a deployment's limit as a global concurrency limit of its own
    # (DeploymentResponse.global_concurrency_limit; `concurrency_limit` is always None there)
    limit = deployment["global_concurrency_limit"]
    assert limit["limit"] == 1 and limit["active"], limit
    assert limit["name"] == f"deployment:{deployment['id']}"
    assert deployment["concurrency_options"]["collision_strategy"] == "ENQUEUE"
