"""The pipeline through `dvc repro` on a small budget: determinism, and resume after kill -9."""

import json
import os
import signal
import subprocess
import time

import pytest

SMALL = {"model": {"warm_start": {"steps": 30}},
         "smoke": {"max_steps": 3},
         "train": {"max_steps": 12, "save_steps": 4,
                   "grpo": {"num_generations": 4, "per_device_train_batch_size": 16}}}
# Outputs that must be byte-identical between two runs with the same seed.
DETERMINISTIC = ["reports/prepare/summary.json", "reports/smoke/checks.json",
                 "reports/smoke/step0.json", "reports/train/metrics.json",
                 "reports/train/history.jsonl", "reports/train/live/plots/metrics/reward.tsv",
                 "reports/train/live/plots/metrics/kl.tsv", "reports/train/live/metrics.json"]


def _repro(project, env):
    run = subprocess.run(["dvc", "repro"], cwd=project, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout + run.stderr


def _outputs(project):
    return {name: (project / name).read_text() for name in DETERMINISTIC}


@pytest.mark.slow
def test_same_seed_same_metrics_and_a_killed_run_resumes_to_the_same_end(project_copy, dvc_env):
    first, second, killed = (project_copy(name, SMALL) for name in ("first", "second", "killed"))
    _repro(first, dvc_env(first))
    _repro(second, dvc_env(second))
    assert _outputs(first) == _outputs(second)
    metrics = json.loads((first / "reports/train/metrics.json").read_text())
    assert metrics["steps"] == 12

    # Start the third, kill -9 the whole process group once checkpoint-8 is complete.
    log = open(killed.parent / "killed.log", "w")
    process = subprocess.Popen(["dvc", "repro"], cwd=killed, env=dvc_env(killed), stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    marker = killed / "models/checkpoints/checkpoint-8/trainer_state.json"
    deadline = time.monotonic() + 600
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), (killed.parent / "killed.log").read_text()[-3000:]
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (killed / "reports/train/metrics.json").exists()

    output = _repro(killed, dvc_env(killed))
    assert "train: resuming from models/checkpoints/checkpoint-" in output
    assert "Stage 'prepare_model' didn't change, skipping" in output
    assert _outputs(killed) == _outputs(first)
