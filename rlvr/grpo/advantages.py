"""Advantages and their checks, on one generated batch: the no-group-norm ablation's running-mean
baseline (train.advantage: running_mean), and the group diagnostics the smoke checks read (group
sizes, finite advantages, zero mean per group)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rlvr.stats import finite_mean


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
        group = advantages[start:start + size]
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
        self.value = (batch_mean if self.value is None
                      else self.momentum * self.value + (1 - self.momentum) * batch_mean)
        return [r - baseline if math.isfinite(r) else 0.0 for r in rewards]
