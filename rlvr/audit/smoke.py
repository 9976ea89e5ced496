"""The smoke run's checks: does every part of the GRPO pipe work before the full run spends time?

Each check is {"name", "passed", "value", "expected"}; `failed_lines` turns the failures into one
plain line each, with the value seen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlvr.core.metric_keys import GRAD_NORM, KL, LOSS, NO_SPREAD_SHARE

# Per-group advantage means are zero up to float32 rounding: in a group of equal rewards TRL's
# float32 mean can differ from the rewards by ~1e-8, which its (std + 1e-4) divisor turns into ~1e-4.
ZERO_MEAN_TOLERANCE = 1e-3


def _check(name: str, passed: bool, value, expected, helps: str = "") -> dict:
    check = {"name": name, "passed": bool(passed), "value": value, "expected": expected}
    return {**check, "helps": helps} if helps and not passed else check


def spread_share(success: float, num_generations: int) -> float:
    """How often a group of G samples holds both a correct and a wrong answer when each sample is
    correct with probability `success`: 1 - p^G - (1-p)^G.

    >>> round(spread_share(0.5, 2), 3), round(spread_share(0.002, 8), 4)
    (0.5, 0.0159)
    """
    p = success
    return 1.0 - p**num_generations - (1.0 - p) ** num_generations


def spread_help(success: float | None, samples: int, num_generations: int, min_share: float) -> str:
    """What would give GRPO a signal, from the step-0 success (correct answers / samples): a
    larger group, when chance success is merely low; otherwise a policy that can answer.

    >>> spread_help(0.0, 512, 8, 0.1)
    "no step-0 sample was correct (0 of 512): no group size helps; warm-start the policy on answers of your rows' form (model.warm_start) or start from a model that can answer some (model.init: pretrained)"
    >>> spread_help(0.002, 512, 8, 0.1)
    'at step-0 success 0.002 a group of 8 holds a correct and a wrong answer 1.6% of the time; train.grpo.num_generations 53 would make it 10% (or warm-start the policy, or start from a pretrained model)'
    """  # noqa: E501 (one-line outputs and tables)
    if success is None or not math.isfinite(success):
        return ""
    if success == 0:
        return (
            f"no step-0 sample was correct (0 of {samples}): no group size helps; warm-start "
            "the policy on answers of your rows' form (model.warm_start) or start from a "
            "model that can answer some (model.init: pretrained)"
        )
    if success == 1:
        return (
            f"every step-0 sample was correct ({samples} of {samples}): the rows are too "
            "easy for this policy, or the verifier accepts anything"
        )
    now = spread_share(success, num_generations)
    needed = next(
        (g for g in range(num_generations, 1025) if spread_share(success, g) >= min_share), None
    )
    text = (
        f"at step-0 success {success:.3g} a group of {num_generations} holds a correct and a "
        f"wrong answer {now:.1%} of the time"
    )
    if needed:
        text += (
            f"; train.grpo.num_generations {needed} would make it "
            f"{spread_share(success, needed):.0%}"
        )
    return text + " (or warm-start the policy, or start from a pretrained model)"


def _non_finite_steps(history: Sequence[dict], key: str) -> list[int]:
    return [
        entry["step"] for entry in history if key in entry and not math.isfinite(float(entry[key]))
    ]


def smoke_checks(
    *,
    rows_loaded: int,
    expected_rows: int,
    num_generations: int,
    max_steps: int,
    beta: float,
    history: Sequence[dict],
    batch_checks: Sequence[dict],
    reward_failures: dict[str, int],
    min_spread_share: float,
    baseline_reward: float,
    correct_spread: float,
    group_baseline: bool = True,
    baseline_success: float | None = None,
    baseline_samples: int = 0,
) -> list[dict]:
    """The checks, from what the smoke run recorded. group_baseline=False is the no-group-norm
    ablation (train.advantage: running_mean), whose advantages are not zero-mean per group.
    correct_spread is the share of step-0 groups (a row's G samples) holding both a correct and a
    wrong answer: the total reward can spread on format alone while correctness never does, and
    then GRPO learns the form and nothing else. The step-0 success (correct answers / samples)
    says what would help when groups lack spread."""
    steps = [entry for entry in history if LOSS in entry]
    sizes = sorted({size for batch in batch_checks for size in batch["group_sizes"]})
    worst_mean = max((batch["max_abs_group_mean"] for batch in batch_checks), default=math.nan)
    spread = [1.0 - float(entry[NO_SPREAD_SHARE]) for entry in steps if NO_SPREAD_SHARE in entry]
    spread_share = sum(spread) / len(spread) if spread else 0.0
    checks = [
        _check("rows_loaded", rows_loaded == expected_rows, rows_loaded, expected_rows),
        _check("steps_completed", len(steps) == max_steps, len(steps), max_steps),
        _check("completions_per_prompt", sizes == [num_generations], sizes, [num_generations]),
        _check(
            "rewards_returned_for_every_completion",
            sum(reward_failures.values()) == 0,
            reward_failures,
            "0 None per reward function",
        ),
        _check(
            "advantages_finite",
            bool(batch_checks) and all(b["advantages_finite"] for b in batch_checks),
            sum(not b["advantages_finite"] for b in batch_checks),
            "0 batches with NaN/Inf",
        ),
        _check(
            "advantages_zero_mean_per_group",
            worst_mean <= ZERO_MEAN_TOLERANCE,
            worst_mean,
            f"<= {ZERO_MEAN_TOLERANCE}",
        )
        if group_baseline
        else _check(
            "advantages_zero_mean_per_group",
            True,
            "train.advantage = running_mean: reward minus one global running mean",
            "zero mean per group (GRPO's group baseline only)",
        ),
    ]
    for key in (LOSS, GRAD_NORM, KL):
        if key == KL and beta == 0:
            checks.append(
                _check(
                    "kl_finite", True, "beta = 0: no reference model, no KL", "finite at every step"
                )
            )
            continue
        present = sum(key in entry for entry in steps)
        bad = _non_finite_steps(steps, key)
        checks.append(
            _check(
                f"{key}_finite",
                present == len(steps) and not bad and present > 0,
                {"steps_logged": present, "non_finite_steps": bad},
                "finite at every step",
            )
        )
    helps = spread_help(baseline_success, baseline_samples, num_generations, min_spread_share)
    checks += [
        _check(
            "groups_with_reward_spread",
            spread_share >= min_spread_share,
            round(spread_share, 4),
            f">= {min_spread_share} (groups whose G rewards are all equal give no gradient)",
            helps,
        ),
        _check(
            "step0_groups_with_a_correct_and_a_wrong_answer",
            correct_spread >= min_spread_share,
            round(correct_spread, 4),
            f">= {min_spread_share} (without them the reward spreads on the other rewards only "
            "and GRPO learns their form, never correctness)",
            helps,
        ),
        _check(
            "step0_baseline_recorded",
            math.isfinite(baseline_reward),
            baseline_reward,
            "a finite mean reward",
        ),
    ]
    return checks


def failed_lines(checks: Sequence[dict]) -> list[str]:
    """One line per failed check: its name, the value seen, what was expected and, where the
    check knows, what would help (said once, on the first line it helps)."""
    lines, said = [], set()
    for c in checks:
        if c["passed"]:
            continue
        helps = c.get("helps")
        lines.append(
            f"smoke check failed: {c['name']}: got {c['value']!r}, expected "
            f"{c['expected']}" + (f": {helps}" if helps and helps not in said else "")
        )
        said.add(helps)
    return lines
