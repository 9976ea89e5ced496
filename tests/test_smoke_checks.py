"""The smoke checks pass on a healthy run and name what broke otherwise."""

import math

import pytest

from rlvr.audit.smoke import failed_lines, smoke_checks

HEALTHY = dict(
    rows_loaded=64,
    expected_rows=64,
    num_generations=8,
    max_steps=3,
    beta=0.02,
    history=[
        {"step": s, "loss": 0.01, "grad_norm": 0.5, "kl": 0.001 * s, "frac_reward_zero_std": 0.25}
        for s in (1, 2, 3)
    ],
    batch_checks=[
        {"groups": 8, "group_sizes": [8], "advantages_finite": True, "max_abs_group_mean": 1e-7}
    ]
    * 3,
    reward_failures={"correctness": 0, "format": 0},
    min_spread_share=0.1,
    baseline_reward=0.42,
    correct_spread=0.6,
)


def _failed(**changes):
    checks = smoke_checks(**{**HEALTHY, **changes})
    return {c["name"] for c in checks if not c["passed"]}, failed_lines(checks)


def test_a_healthy_run_passes_every_check():
    checks = smoke_checks(**HEALTHY)
    assert all(c["passed"] for c in checks) and len(checks) >= 11
    assert {c["name"] for c in checks} >= {
        "rows_loaded",
        "completions_per_prompt",
        "rewards_returned_for_every_completion",
        "advantages_finite",
        "advantages_zero_mean_per_group",
        "loss_finite",
        "kl_finite",
        "grad_norm_finite",
        "groups_with_reward_spread",
        "step0_baseline_recorded",
        "step0_groups_with_a_correct_and_a_wrong_answer",
    }


def test_each_failure_is_named_with_its_value():
    names, lines = _failed(rows_loaded=63)
    assert names == {"rows_loaded"} and lines == [
        "smoke check failed: rows_loaded: got 63, expected 64"
    ]
    assert _failed(
        batch_checks=[
            {
                "groups": 9,
                "group_sizes": [7, 8],
                "advantages_finite": True,
                "max_abs_group_mean": 0.0,
            }
        ]
    )[0] == {"completions_per_prompt"}
    assert _failed(reward_failures={"correctness": 3, "format": 0})[0] == {
        "rewards_returned_for_every_completion"
    }
    assert _failed(
        batch_checks=[
            {
                "groups": 8,
                "group_sizes": [8],
                "advantages_finite": False,
                "max_abs_group_mean": math.nan,
            }
        ]
    )[0] >= {"advantages_finite"}
    assert _failed(
        batch_checks=[
            {"groups": 8, "group_sizes": [8], "advantages_finite": True, "max_abs_group_mean": 0.3}
        ]
    )[0] == {"advantages_zero_mean_per_group"}
    assert _failed(baseline_reward=math.nan)[0] == {"step0_baseline_recorded"}


def test_non_finite_metrics_name_their_steps():
    history = [dict(h) for h in HEALTHY["history"]]
    history[1]["kl"] = math.nan
    names, lines = _failed(history=history)
    assert names == {"kl_finite"} and "'non_finite_steps': [2]" in lines[0]


def test_no_reward_spread_means_no_gradient_and_fails():
    history = [{**h, "frac_reward_zero_std": 1.0} for h in HEALTHY["history"]]
    names, lines = _failed(history=history)
    assert names == {"groups_with_reward_spread"} and "give no gradient" in lines[0]


@pytest.mark.parametrize(
    "success,helps",
    [
        (
            0.0,
            "no step-0 sample was correct (0 of 512): no group size helps; warm-start the policy",
        ),
        (
            0.002,
            "a group of 8 holds a correct and a wrong answer 1.6% of the time; "
            "train.grpo.num_generations 53 would make it 10%",
        ),
        (1.0, "every step-0 sample was correct (512 of 512)"),
    ],
)
def test_the_no_spread_line_says_which_knob_helps(success, helps):
    """A dataset the policy answers by chance too rarely: the line that stops the run names the
    knob, with the group size that would give GRPO a signal when one would."""
    history = [{**h, "frac_reward_zero_std": 1.0} for h in HEALTHY["history"]]
    names, lines = _failed(history=history, baseline_success=success, baseline_samples=512)
    assert names == {"groups_with_reward_spread"} and helps in lines[0]
    assert _failed(baseline_success=success, baseline_samples=512)[0] == set()  # spread: no line


def test_spread_on_format_alone_is_no_signal_and_stops_the_run():
    """Rows the policy never answers right but always answers in form: the total reward spreads
    (format), correctness never does. The run stops on the correctness check, naming the knob."""
    names, lines = _failed(correct_spread=0.0, baseline_success=0.0, baseline_samples=512)
    assert names == {"step0_groups_with_a_correct_and_a_wrong_answer"}
    assert lines == [
        "smoke check failed: step0_groups_with_a_correct_and_a_wrong_answer: got 0.0, "
        "expected >= 0.1 (without them the reward spreads on the other rewards only "
        "and GRPO learns their form, never correctness): no step-0 sample was correct "
        "(0 of 512): no group size helps; warm-start the policy on answers of your "
        "rows' form (model.warm_start) or start from a model that can answer some "
        "(model.init: pretrained)"
    ]
    assert _failed(correct_spread=0.1)[0] == set()
    # with no reward spread either, the knob is said once, on the first line
    history = [{**h, "frac_reward_zero_std": 1.0} for h in HEALTHY["history"]]
    lines = _failed(
        history=history, correct_spread=0.0, baseline_success=0.0, baseline_samples=512
    )[1]
    assert len(lines) == 2 and "no group size helps" in lines[0]
    assert lines[1].endswith("GRPO learns their form, never correctness)")
    assert _failed(correct_spread=0.0999)[0] == {"step0_groups_with_a_correct_and_a_wrong_answer"}


def test_the_group_size_named_gives_the_share_asked_for():
    from rlvr.audit.smoke import spread_share

    for success in (0.001, 0.01, 0.05, 0.3, 0.9):
        for g in range(2, 600):
            if spread_share(success, g) >= 0.1:
                assert spread_share(success, g - 1) < 0.1 or g == 2
                break


def test_beta_zero_has_no_kl_to_check():
    history = [{k: v for k, v in h.items() if k != "kl"} for h in HEALTHY["history"]]
    assert _failed(history=history, beta=0.0)[0] == set()
    assert _failed(history=history)[0] == {"kl_finite"}  # beta > 0 but no KL logged


def test_a_short_run_fails_steps_completed():
    assert _failed(history=HEALTHY["history"][:2])[0] == {"steps_completed"}


def test_the_running_mean_ablation_is_not_held_to_zero_mean_groups():
    uneven = [
        {"groups": 8, "group_sizes": [8], "advantages_finite": True, "max_abs_group_mean": 0.3}
    ] * 3
    assert _failed(batch_checks=uneven)[0] == {"advantages_zero_mean_per_group"}
    assert _failed(batch_checks=uneven, group_baseline=False)[0] == set()
