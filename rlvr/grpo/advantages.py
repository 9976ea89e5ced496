"""Advantages and their checks, on one generated batch: the no-group-norm ablation's running-mean
baseline (train.advantage: running_mean), and the group diagnostics the smoke checks read (group
sizes, finite advantages, zero mean per group)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from math import comb
from typing import Any

from rlvr.core.stats import finite_mean


def group_checks(prompts: Sequence[Any], advantages: Sequence[float], num_generations: int) -> dict:
    """Diagnostics of one generated batch: group sizes, advantage finiteness and per-group mean."""
    sizes, current, previous = [], 0, object()
    for prompt in prompts:
        if current and prompt == previous and current < num_generations:
            current += 1
        else:
            if current:
                sizes.append(current)
            current, previous = 1, prompt
    sizes.append(current)
    means, start = [], 0
    for size in sizes:
        group = advantages[start : start + size]
        means.append(sum(group) / size)
        start += size
    return {
        "groups": len(sizes),
        "group_sizes": sorted(set(sizes)),
        "advantages_finite": all(math.isfinite(a) for a in advantages),
        "max_abs_group_mean": max(abs(m) for m in means) if means else 0.0,
    }


class RunningMeanBaseline:
    """The no-group-norm ablation: advantage = reward - one running mean over all past batches.

    >>> b = RunningMeanBaseline(momentum=0.5)
    >>> b.advantages([1.0, 0.0, 1.0, 0.0])   # first batch: its own mean is the baseline
    [0.5, -0.5, 0.5, -0.5]
    >>> b.advantages([1.0, 1.0])             # baseline 0.5 * 0.5 + 0.5 * 1.0 = 0.75 after it
    [0.5, 0.5]
    >>> b.value
    0.75
    """

    def __init__(self, momentum: float) -> None:
        self.momentum = momentum
        self.value: float | None = None

    def advantages(self, rewards: Sequence[float]) -> list[float]:
        batch_mean = finite_mean(rewards)
        batch_mean = 0.0 if math.isnan(batch_mean) else batch_mean
        baseline = batch_mean if self.value is None else self.value
        self.value = (
            batch_mean
            if self.value is None
            else self.momentum * self.value + (1 - self.momentum) * batch_mean
        )
        return [r - baseline if math.isfinite(r) else 0.0 for r in rewards]


# --- Remedies for forgetting a rare kind of answer (train.advantage pass_at_k,
# train.positive_weight, train.unlikeliness): pure functions on one batch of G-sized groups,
# every rank's completions in rank order. "correct" means the correctness reward is 1.


def pass_at_k_advantages(correct: Sequence[bool], num_generations: int, k: int) -> list[float]:
    """Pass@k training's analytic advantages (Chen et al. 2025, "Pass@k Training for Adaptively
    Balancing Exploration and Exploitation of Large Reasoning Models", sec. 4): the group's
    reward is pass@k estimated from its n samples, c of them correct,
    R = 1 - C(n-c, k) / C(n, k), sigma = sqrt(R (1 - R)); a correct sample gets (1 - R) / sigma,
    a wrong one (1 - R - C(n-c-1, k-1) / C(n-1, k-1)) / sigma; a group all right or all wrong
    gets 0. With k = 1 they are GRPO's advantages (population std); a larger k takes less
    credit from the wrong samples of a group that already has a correct one, so a rare correct
    answer keeps its pull once the others are learned.

    >>> [round(a, 3) for a in pass_at_k_advantages([True, False, False, False], 4, k=1)]
    [1.732, -0.577, -0.577, -0.577]
    >>> [round(a, 3) for a in pass_at_k_advantages([True, False, False, False], 4, k=2)]
    [1.0, -0.333, -0.333, -0.333]
    >>> pass_at_k_advantages([True, True, False, False], 4, k=4)  # pass@4 is 1 for any wrong 3
    [0.0, 0.0, 0.0, 0.0]
    """
    advantages = []
    for start in range(0, len(correct), num_generations):
        group = list(correct[start : start + num_generations])
        n, c = len(group), sum(group)
        if not 0 < c < n or k > n:
            advantages += [0.0] * n
            continue
        reward = 1 - comb(n - c, k) / comb(n, k)
        sigma = math.sqrt(reward * (1 - reward))
        if sigma < 1e-12:
            advantages += [0.0] * n
            continue
        wrong = (1 - reward - comb(n - c - 1, k - 1) / comb(n - 1, k - 1)) / sigma
        advantages += [(1 - reward) / sigma if ok else wrong for ok in group]
    return advantages


def unlikeliness_penalties(
    correct: Sequence[bool], logps: Sequence[float], num_generations: int, strength: float
) -> list[float]:
    """The unlikeliness reward (He et al. 2025, "Rewarding the Unlikely: Lifting GRPO Beyond
    Distribution Sharpening", eq. 3): a correct sample's reward R becomes
    R (1 - strength (G - rank) / G), rank 0 being the group's most likely correct sample under
    the policy (sequence log-probability `logps`). Returned: what to subtract from each sample's
    correctness reward of 1 (0 for a wrong one), so the most likely correct answers earn least
    and a rare correct answer keeps more of its credit.

    >>> unlikeliness_penalties([True, False, True, True], [-1.0, -0.5, -3.0, -2.0], 4, 0.5)
    [0.5, 0.0, 0.25, 0.375]
    """
    penalties = [0.0] * len(correct)
    for start in range(0, len(correct), num_generations):
        indices = [
            i for i in range(start, min(start + num_generations, len(correct))) if correct[i]
        ]
        for rank, i in enumerate(sorted(indices, key=lambda i: -logps[i])):
            penalties[i] = strength * (num_generations - rank) / num_generations
    return penalties


def weight_positive(advantages: Sequence[float], weight: float) -> list[float]:
    """Weighted REINFORCE's balance (Zhu et al. 2025, "The Surprising Effectiveness of Negative
    Reinforcement in LLM Reasoning", W-REINFORCE, lambda = 0.1 there): positive advantages scaled
    by `weight`, negative ones kept, so pushing down wrong answers, which spreads their
    probability over the other answers the policy already gives, outweighs pulling up the
    answers it already likes.

    >>> weight_positive([1.5, -0.5, 0.0, -1.0], 0.1)
    [0.15000000000000002, -0.5, 0.0, -1.0]
    """
    return [a * weight if a > 0 else a for a in advantages]
