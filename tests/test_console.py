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
    assert len(lines) < 150, len(lines)
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
