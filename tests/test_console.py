"""A cold `dvc repro` prints what a person reads: each stage's summary lines, one progress bar per
training loop and one compact line every train.log_every steps, no log dicts, no known library
noise (the output of the session's cold run, on SMALL_RUN)."""

import re

import pytest

from tests.helpers import SMALL_RUN

pytestmark = pytest.mark.slow


def test_a_cold_run_prints_a_short_readable_console(cold_run):
    log = (cold_run.parent / "repro.log").read_text()
    lines = log.splitlines()  # a progress bar redraws itself with \r: one line each
    # one validation line at step 0 and every train.eval_steps (and the last step), no other
    every_eval, last = SMALL_RUN["train"]["eval_steps"], SMALL_RUN["train"]["max_steps"]
    scored = [int(n) for n in re.findall(r"train: step (\d+)/\d+ \| validation: mean reward ",
                                         log)]
    assert scored == list(range(0, last + 1, every_eval)), scored
    assert "train: models/trained is the last step, 24 (train.select last)" in log
    assert re.search(r"train: scoring the validation rows took [\d.]+ s of [\d.]+ s", log)
    # one progress bar per training loop (warm start, smoke, train). How often a bar redraws
    # depends on the machine's speed (tqdm skips redraws within 0.1 s), so its lines are bounded
    # by what tqdm can draw at most: once per step position 0..T, once after each line written
    # above it (tqdm.write) and once when it closes
    bar = re.compile(r"\s*\d+%\|.*\| *(\d+)/(\d+) \[")
    bars = [m for m in map(bar.match, lines) if m]
    loops = [SMALL_RUN["model"]["warm_start"]["steps"], SMALL_RUN["smoke"]["max_steps"],
             SMALL_RUN["train"]["max_steps"]]
    totals = [int(m[2]) for m in bars]
    assert [t for i, t in enumerate(totals) if i == 0 or t != totals[i - 1]] == loops, totals
    written = len(re.findall(r"^(?:prepare_model: warm start|smoke: step \d|train: step \d)", log,
                             re.MULTILINE))
    assert len(bars) <= sum(total + 1 for total in loops) + written + len(loops), len(bars)
    # the rest stays short: each validation line costs 2 text lines (itself, and the blank of
    # tqdm.write, which splitlines() sees), and the train stage's end says in 2 more which step
    # became models/final and what scoring cost
    text = [line for line in lines if not bar.match(line)]
    assert len(text) - 2 * len(scored) - 2 < 100, len(text)
    for stage in ("check_params", "reward_tests", "validate", "prepare_model", "smoke", "train",
                  "evaluate", "report"):
        assert f"Running stage '{stage}'" in log and f"{stage}: done in " in log
    for summary in ("check_params: params.yaml is valid", "smoke: PASSED: ", "train: 24 steps; ",
                    "evaluate: verdict on heldout: ", "report: reports/retrospective.md"):
        assert summary in log
    # the trainer's whole log dict at every step, library bars and deprecation noise: gone
    for noise in ("{'loss'", "'train_runtime'", "FutureWarning", "Loading weights",
                  "Writing model shards", "Tokenizing train dataset", "Traceback"):
        assert noise not in log, noise
    # one compact line every train.log_every steps, and at the last step
    every = SMALL_RUN["train"]["log_every"]
    steps = {label: [int(n) for n, _ in re.findall(rf"{label}: step (\d+)/(\d+) \| reward ", log)]
             for label in ("smoke", "train")}
    smoke_steps, train_steps = SMALL_RUN["smoke"]["max_steps"], SMALL_RUN["train"]["max_steps"]
    assert steps["smoke"] == [s for s in range(1, smoke_steps + 1)
                              if s % every == 0 or s == smoke_steps]
    assert steps["train"] == [s for s in range(1, train_steps + 1)
                              if s % every == 0 or s == train_steps]
