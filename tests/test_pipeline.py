"""Resume is identical wherever the kill lands: `dvc repro` killed with SIGKILL during train, then
rerun, ends with the same history, metrics, curves and weights as the uninterrupted cold run, at
several kill points, for the no-group-norm ablation too, and past a damaged checkpoint."""

import json
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.helpers import dvc, kill_train_after, set_params

pytestmark = pytest.mark.slow
CHECKPOINTS = "models/checkpoints/seed-0"  # the killed run is seed 0's (kill_train_after)
# Outputs that must be byte-identical between an interrupted and an uninterrupted run (git status
# then also says the tracked ones, and dvc.lock, are unchanged).
DETERMINISTIC = [
    "reports/train/seed-0/summary.json",
    "reports/train/seed-0/history.jsonl",
    "reports/train/seed-0/live/plots/metrics/reward.tsv",
    "reports/train/seed-0/live/plots/metrics/kl.tsv",
    "reports/train/seed-0/live/metrics.json",
]


def _results(project) -> dict:
    lock = YAML(typ="safe").load((project / "dvc.lock").read_text())["stages"]
    weights = next(
        o["md5"] for o in lock["train@0"]["outs"] if o["path"] == "models/trained/seed-0"
    )
    return {
        "models/trained/seed-0": weights,
        **{name: (project / name).read_text() for name in DETERMINISTIC},
    }


def _git_status(project) -> str:
    return subprocess.run(
        ["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True, check=True
    ).stdout


# 16 steps make one pass over the 64 prompts: inside the first pass, at its end, inside the second.
# One run killed at each in turn, each kill in the run resumed from the one before: every resume
# point's divergence would reach the end.
def test_a_run_killed_at_each_checkpoint_in_turn_resumes_to_the_same_end(copy_run, cold_run):
    project = copy_run("killed")
    resumed_from = None
    for step in (8, 16, 20):
        output = kill_train_after(project, step, resume=resumed_from is not None)
        if resumed_from is not None:
            assert f"train@0: resuming from {CHECKPOINTS}/checkpoint-{resumed_from}" in output
        checkpoints = sorted(p.name for p in (project / CHECKPOINTS).glob("checkpoint-*"))
        # the Trainer keeps the newest two, and the best by validation if that one is older
        state = json.loads(
            (project / CHECKPOINTS / f"checkpoint-{step}" / "trainer_state.json").read_text()
        )
        best = Path(state["best_model_checkpoint"] or f"checkpoint-{step}").name
        earlier = best if best != f"checkpoint-{step}" else f"checkpoint-{step - 4}"
        assert checkpoints == sorted([earlier, f"checkpoint-{step}"]), step  # nothing later
        assert not (project / "models/trained/seed-0").exists()  # DVC removed it at the start
        resumed_from = step
    output = dvc(project, "repro")
    assert f"train@0: resuming from {CHECKPOINTS}/checkpoint-20" in output
    assert "Stage 'prepare_model' didn't change, skipping" in output
    assert _results(project) == _results(cold_run)
    assert _git_status(project) == ""  # every tracked report and dvc.lock as committed


@pytest.mark.long
def test_the_running_mean_ablation_resumes_with_its_baseline(copy_run):
    project = copy_run("ablation")
    set_params(project, {"train": {"advantage": "running_mean", "dynamic_sampling": False}})
    dvc(project, "repro", "train")  # the uninterrupted ablation run (smoke reruns too)
    uninterrupted = _results(project)
    assert '"running_mean_baseline"' in uninterrupted["reports/train/seed-0/history.jsonl"]
    kill_train_after(project, 20)
    output = dvc(project, "repro", "train")
    assert f"train@0: resuming from {CHECKPOINTS}/checkpoint-20" in output
    assert _results(project) == uninterrupted


@pytest.mark.long
def test_a_damaged_checkpoint_is_skipped_for_the_newest_whole_one(copy_run, cold_run):
    project = copy_run("damaged")
    kill_train_after(project, 16)  # leaves checkpoint-12 and checkpoint-16
    weights = project / CHECKPOINTS / "checkpoint-16" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])  # cut short, as by a full disk
    output = dvc(project, "repro")
    assert (
        f"train: skipping damaged checkpoint {CHECKPOINTS}/checkpoint-16: model.safetensors "
        "is truncated"
    ) in output
    assert f"train@0: resuming from {CHECKPOINTS}/checkpoint-12" in output
    assert _results(project) == _results(cold_run)

    # No whole checkpoint at all: the run starts over, and still ends the same.
    kill_train_after(project, 8)
    for state in (project / CHECKPOINTS).glob("checkpoint-*/trainer_state.json"):
        state.unlink()
    output = dvc(project, "repro")
    assert output.count("train: skipping damaged checkpoint") == 2
    assert "trainer_state.json is missing" in output and "resuming from" not in output
    assert _results(project) == _results(cold_run)
