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
    seeds = SMALL_RUN["audit"]["seeds"]  # one train and one evaluate per RL seed, in turn
    every_eval, last = SMALL_RUN["train"]["eval_steps"], SMALL_RUN["train"]["max_steps"]
    scored = [int(n) for n in re.findall(r"train: step (\d+)/\d+ \| validation: mean reward ", log)]
    assert scored == list(range(0, last + 1, every_eval)) * len(seeds), scored
    for seed in seeds:
        assert (
            f"train@{seed}: models/trained/seed-{seed} is the last step, 24 (train.select last)"
        ) in log
        assert re.search(
            rf"train@{seed}: scoring the validation rows took [\d.]+ s of [\d.]+ s", log
        )
    # one progress bar per training loop (warm start, smoke, train). How often a bar redraws
    # depends on the machine's speed (tqdm skips redraws within 0.1 s), so its lines are bounded
    # by what tqdm can draw at most: once per step position 0..T, once after each line written
    # above it (tqdm.write) and once when it closes
    bar = re.compile(r"\s*\d+%\|.*\| *(\d+)/(\d+) \[")
    bars = [m for m in map(bar.match, lines) if m]
    # the RFT baseline's fine-tune, once per seed after every train and evaluate: as many steps
    # as its line says (they follow from what it kept)
    rft_steps = [int(n) for n in re.findall(r"^rft@\d+: .*; fine-tuned (\d+) steps", log, re.M)]
    assert len(rft_steps) == len(seeds), rft_steps
    loops = [
        SMALL_RUN["model"]["warm_start"]["steps"],
        SMALL_RUN["smoke"]["max_steps"],
        *[SMALL_RUN["train"]["max_steps"]] * len(seeds),
        *rft_steps,
    ]
    totals = [int(m[2]) for m in bars]
    # (two train loops in a row have the same total: each bar starts again at 0)
    starts = [
        i
        for i, m in enumerate(bars)
        if i == 0 or int(m[1]) < int(bars[i - 1][1]) or int(m[2]) != int(bars[i - 1][2])
    ]
    assert [totals[i] for i in starts] == loops, totals
    written = len(
        re.findall(
            r"^(?:prepare_model: warm start|smoke: step \d|train: step \d|rft@\d+: fine-tune)",
            log,
            re.MULTILINE,
        )
    )
    assert len(bars) <= sum(total + 1 for total in loops) + written + len(loops), len(bars)
    # the rest stays short. What a person reads: the shared stages' lines (today 56: the recipe's
    # sentence on the RFT baseline among them) and each seed's (today 38: DVC's 3 per stage,
    # verified's 2: what it sampled and kept, its time; train's line per validation and per
    # compact step and 3 at its end, evaluate's 3, rft's 6: what it fine-tuned on, its
    # fine-tune's line, the same 3 as evaluate's, its time);
    # the blank lines: each line tqdm.write puts above a bar leaves 2 (the bar cleared), so does
    # each bar's end, DVC ends each stage's block with one and the run with a few
    text = [line for line in lines if not bar.match(line)]
    read = [line for line in text if line.strip()]
    assert len(read) <= 61 + 40 * len(seeds), "\n".join(read)
    stages_run = log.count("Running stage")
    blank = len(text) - len(read)
    assert blank <= 2 * (written + len(loops)) + stages_run + 10, blank
    for stage in (
        "check_params",
        "reward_tests",
        "validate",
        "prepare_model",
        "smoke",
        *[f"{name}@{seed}" for name in ("verified", "train", "evaluate", "rft") for seed in seeds],
        "recipe",
        "report",
    ):
        assert f"Running stage '{stage}'" in log and f"{stage}: done in " in log
    for summary in (
        "check_params: params.yaml is valid",
        "smoke: PASSED: ",
        *[f"train@{seed}: 24 steps; " for seed in seeds],
        *[f"evaluate@{seed}: this seed's verdict on heldout: " for seed in seeds],
        *[f"rft@{seed}: this seed's verdict on heldout: " for seed in seeds],
        f"recipe: over {len(seeds)} of {len(seeds)} seeds: ",
        "report: reports/retrospective.md",
    ):
        assert summary in log
    # the trainer's whole log dict at every step, library bars and deprecation noise: gone
    for noise in (
        "{'loss'",
        "'train_runtime'",
        "FutureWarning",
        "Loading weights",
        "Writing model shards",
        "Tokenizing train dataset",
        "Traceback",
    ):
        assert noise not in log, noise
    # one compact line every train.log_every steps, and at the last step
    every = SMALL_RUN["train"]["log_every"]
    steps = {
        label: [int(n) for n, _ in re.findall(rf"{label}: step (\d+)/(\d+) \| reward ", log)]
        for label in ("smoke", "train")
    }
    smoke_steps, train_steps = SMALL_RUN["smoke"]["max_steps"], SMALL_RUN["train"]["max_steps"]
    assert steps["smoke"] == [
        s for s in range(1, smoke_steps + 1) if s % every == 0 or s == smoke_steps
    ]
    assert steps["train"] == [
        s for s in range(1, train_steps + 1) if s % every == 0 or s == train_steps
    ] * len(seeds)
