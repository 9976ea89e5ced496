"""The retrospective's answer box (rlvr/report/answer.py): its words follow the intervals, the
baseline's verdict and the losses; without pooled seeds it says there is no answer yet."""

import pytest

from rlvr.report.answer import answer_box

REWARDS = {"funcs": ["correctness", "format"], "weights": [1.0, 0.2]}
LEVELS = {"mean_reward": 0.3, "pass@1": 0.2, "pass@4": 0.6}


def ci(value, low, high, **more):
    return {"value": value, "ci_low": low, "ci_high": high, **more}


def recipe(primary, losses=(), regressed=(), versus=None):
    slices = [{"tag": t, "regressed": True, "weighed": True} for t in regressed]
    out = {
        "evaluated": [0, 1, 2],
        "verdict_line": "x",
        "pooled": {
            "rows": 64,
            "step0": LEVELS,
            "final": LEVELS,
            "delta_mean_reward": primary,
            "losses": list(losses),
            "slices": slices,
        },
    }
    if versus:
        out["baseline"] = {
            "comparison": {
                "name": "RFT",
                "grpo_minus_baseline": {"delta_mean_reward": versus},
                "sampled": {"grpo": [900, 1000], "baseline": [400, 400]},
            }
        }
    return out


@pytest.mark.parametrize(
    ("primary", "words"),
    [
        (ci(0.1, 0.02, 0.2), "Yes"),
        (ci(-0.1, -0.2, -0.02), "No, it got worse"),
        (ci(0.05, -0.01, 0.1), "Not significantly"),
        (ci(0.0, 1e-17, 0.1), "Not significantly"),  # an end at float noise holds 0
    ],
)
def test_did_training_help_follows_the_primary_interval(primary, words):
    box = answer_box(recipe(primary), REWARDS, 0.95)
    assert box[0] == '<div id="answer" markdown="1">' and box[-2] == "</div>"
    assert f"**Did training help?** {words}: held-out mean reward 0.300 at step 0" in box[2]
    assert "a 95% interval over 3 seeds and 64 prompts" in box[2]


def test_what_was_lost_names_the_figures_and_tags_or_nothing():
    lost = recipe(
        ci(0.1, 0.02, 0.2),
        losses=["pass@4 0.60 -> 0.40, delta -0.2 [-0.3, -0.1], Holm p 0.01"],
        regressed=["sub", "<b>mul</b>"],
    )
    line = answer_box(lost, REWARDS, 0.95)[4]
    assert line == (
        "**What did it lose?** pass@4 0.60 → 0.40; regressed on sub, &lt;b&gt;mul&lt;/b&gt; "
        "(Holm-corrected)."
    )
    nothing = answer_box(recipe(ci(0.1, 0.02, 0.2)), REWARDS, 0.95)[4]
    assert nothing.startswith("**What did it lose?** Nothing significant")


@pytest.mark.parametrize(
    ("verdict", "words"),
    [("better", "Yes"), ("worse", "No, RFT did better"), ("tie", "No significant difference")],
)
def test_did_grpo_beat_the_baseline_follows_its_verdict(verdict, words):
    versus = ci(0.01, -0.05, 0.07, verdict=verdict)
    box = answer_box(recipe(ci(0.1, 0.02, 0.2), versus=versus), REWARDS, 0.95)
    assert box[6] == (
        f"**Did GRPO beat the cheap baseline, RFT?** {words}: GRPO − RFT +0.010 [-0.050, +0.070] "
        "on mean reward; RFT sampled 400 completions a seed, GRPO 900-1,000."
    )
    assert box[8].startswith("A completion's reward is 0.83 × correctness + 0.17 × format")


def test_without_pooled_seeds_the_box_says_there_is_no_answer_yet():
    few = {"verdict_line": "no verdict: 1 of 3 seeds ran to the end", "pooled": None}
    box = answer_box(few, REWARDS, 0.95)
    assert box[2] == "**No answer yet**: no verdict: 1 of 3 seeds ran to the end."
    assert answer_box(None, REWARDS, 0.95) == []


def test_the_chart_draws_step_0_grpo_and_the_baseline_or_says_why_not(tmp_path):
    from PIL import Image

    from rlvr.report.plots import plot_answer

    full = recipe(ci(0.1, 0.02, 0.2), versus=ci(0.01, -0.05, 0.07, verdict="tie"))
    full["pooled"]["samples_per_prompt"] = 4
    for key in ("mean_reward", "pass@1", "pass@4"):
        full["pooled"][f"delta_{key}"] = ci(0.0, -0.1, 0.1)
    full["baseline"]["comparison"]["pooled"] = full["pooled"]
    wide = Image.open(plot_answer(full, tmp_path / "a.png", 0.95))
    short = Image.open(plot_answer({"pooled": None}, tmp_path / "b.png", 0.95))
    assert wide.size[1] > 2 * short.size[1]  # a chart, and a one-line note without pooled seeds
