"""A user's own rows on the tiny default, changing only the data paths and the format pattern
(tests/own_data.py makes the rows): two-digit sums, the data a new user tried, train end to end
through the published model, with the figures the README states; without the warm start (what
that user had to set before it took any rows) no sample is right by chance, GRPO sees no
signal, and the line that stops the run names the knob."""

import json
import shutil
import subprocess

import pytest

from tests.helpers import ROOT, dvc, project_env, set_params
from tests.own_data import FORMAT_PATTERN, TWO_DIGIT, write_sums

pytestmark = pytest.mark.slow


def _own_data_project(copy_run, terms):
    """The cold run's copy (its reward gate holds: no rows or budget of these change it) back on
    the default params.yaml, with the own rows."""
    project = copy_run("own-data")
    paths = write_sums(project.parent / "rows", *terms)
    for path in paths.values():
        (project / "data" / path.name).write_text(path.read_text())
    shutil.copy(ROOT / "params.yaml", project / "params.yaml")
    set_params(
        project,
        {
            "data": {
                "train_path": "data/sums_train.jsonl",
                "val_path": "data/sums_val.jsonl",
                "eval_path": "data/sums_eval.jsonl",
            },
            "rewards": {"format_pattern": FORMAT_PATTERN},
            # one RL seed, each machine's own kernels, one thread (tests run two at once): the
            # tiny default's recipe on these rows, not its statistics over seeds
            "audit": {"seeds": [0]},
            "runtime": {"torch_threads": 1, "reproducible": False},
        },
    )
    return project


@pytest.mark.long
def test_own_exact_match_rows_train_end_to_end_on_the_tiny_default(copy_run):
    project = _own_data_project(copy_run, TWO_DIGIT)
    output = dvc(project, "repro")
    for split in ("train", "val", "eval"):
        assert f"validate: data/sums_{split}.jsonl: 64 rows, 0 problem(s)" in output
    # the warm start: 32 other rows' targets per row, never the row's own
    assert "warm start 300 steps on 2048 examples" in output
    assert "smoke: PASSED: 12/12 checks" in output
    assert "report: done" in output and "publish: done" in output
    # What the README says the tiny default does with these rows (docs/experiments.md#own-rows):
    # it learns the training rows' answers (the delta's interval above 0), not addition. At 300
    # steps here: +0.138 [+0.085, +0.206], greedy 0.047 -> 0.234; held-out [-0.004, +0.016].
    train = json.loads((project / "reports/eval/seed-0/summary.json").read_text())["train"]
    heldout = json.loads((project / "reports/eval/seed-0/summary.json").read_text())["heldout"]
    assert train["delta_mean_reward"]["ci_low"] > 0
    assert train["final"]["greedy_success"] > train["step0"]["greedy_success"] + 0.1
    assert heldout["delta_mean_reward"]["ci_high"] < 0.05
    card = (project / "models/final/README.md").read_text()
    assert "| rewards.format\\_pattern |" in card and "data/sums\\_train.jsonl" in card


def test_rows_never_right_by_chance_stop_at_smoke_naming_the_knob(copy_run):
    project = _own_data_project(copy_run, TWO_DIGIT)
    set_params(project, {"model": {"warm_start": {"steps": 0}}})
    run = subprocess.run(
        ["dvc", "repro", "smoke"],
        cwd=project,
        env=project_env(project),
        capture_output=True,
        text=True,
    )
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-3000:]
    assert "Traceback" not in output
    assert (
        "smoke: step-0 baseline on 64 prompts x 8 samples: mean reward 0.000, success 0.000"
        in output
    )
    failed = [line for line in output.splitlines() if line.startswith("smoke check failed: ")]
    assert any(
        line.startswith(
            "smoke check failed: step0_groups_with_a_correct_and_a_wrong_answer: got 0.0"
        )
        for line in failed
    ), failed
    knob = (
        "no step-0 sample was correct (0 of 512): no group size helps; warm-start the policy "
        "on answers of your rows' form (model.warm_start) or start from a model that can "
        "answer some (model.init: pretrained)"
    )
    assert sum(knob in line for line in failed) == 1, failed
