"""GRPO's group arithmetic as pure functions: the group advantages (the one formula training and
the seed semantics share), the per-sample score, k3 KL.

Importing this module imports neither torch nor numpy: `k3_kl` works on Python floats and, by duck
typing, on tensors (anything with `.exp()`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

# Our default epsilon. TRL's GRPOTrainer divides by (Bessel-corrected std + 1e-4) instead; pass
# eps=TRL_ADVANTAGE_EPS, ddof=1 to reproduce its numbers (tests/rewards/test_trl_agreement.py).
DEFAULT_EPS = 1e-8
TRL_ADVANTAGE_EPS = 1e-4


def group_advantages(
    rewards: Sequence[float],
    group_size: int,
    scale: str = "group",
    eps: float = TRL_ADVANTAGE_EPS,
    ddof: int = 1,
) -> list[float]:
    """The one advantage formula (besides TRL's own, which it reproduces with the defaults): for
    each group of `group_size` consecutive rewards, each reward minus its group's mean, divided
    by the group's std (scale 'group'), the whole batch's ('batch') or nothing ('none'), plus
    eps. The std divides by n - ddof: ddof=1, eps=TRL_ADVANTAGE_EPS is TRL 1.16's
    (multi_objective_aggregation 'sum_then_normalize', tests/test_remedies.py holds it to TRL's
    numbers); group_relative_advantage is the seed semantics' population std. A group whose
    rewards are all equal carries no signal: every advantage is exactly 0. An unscorable (NaN)
    reward gets 0 and is left out of the means and stds. Sums are exact (math.fsum).

    >>> [round(a, 3) for a in group_advantages([1.0, 0.0, 0.0, 0.0], 4)]
    [1.5, -0.5, -0.5, -0.5]
    >>> group_advantages([1.0, 1.0, 0.5, 0.0], 2, scale="none")
    [0.0, 0.0, 0.25, -0.25]
    >>> [round(a, 3) for a in group_advantages([1.0, float("nan"), 0.0, 0.0], 4)]
    [1.155, 0.0, -0.577, -0.577]
    """
    values = [float(r) for r in rewards]

    def mean(group: list[float]) -> float:
        kept = [v for v in group if math.isfinite(v)]
        return math.fsum(kept) / len(kept) if kept else math.nan

    def std(group: list[float]) -> float:
        kept = [v for v in group if math.isfinite(v)]
        if len(kept) <= ddof:
            return math.nan
        centre = math.fsum(kept) / len(kept)
        return math.sqrt(math.fsum((v - centre) ** 2 for v in kept) / (len(kept) - ddof))

    batch_std = std(values) if scale == "batch" else None
    advantages = []
    for start in range(0, len(values), max(group_size, 1)):
        group = values[start : start + group_size]
        centre = mean(group)
        spread = {
            "group": std(group) if scale == "group" else None,
            "batch": batch_std,
            "none": None,
        }[scale]
        for value in group:
            advantage = value - centre
            if spread == 0.0:  # all equal: no signal, exactly
                advantage = 0.0
            elif spread is not None:
                advantage = advantage / (spread + eps)
            advantages.append(advantage if math.isfinite(advantage) else 0.0)
    return advantages


def group_relative_advantage(
    rewards: Sequence[float], eps: float = DEFAULT_EPS, ddof: int = 0
) -> list[float]:
    """Advantage of each sample relative to its own group: (r - mean) / (std + eps), the seed
    semantics: group_advantages on one group, the population std (ddof=0) and eps 1e-8 by
    default. TRL's GRPOTrainer uses the Bessel-corrected std (ddof=1) and eps=1e-4: `ddof=1,
    eps=TRL_ADVANTAGE_EPS` reproduces it.

    >>> [round(a, 6) for a in group_relative_advantage([1, 0, 0, 1])]
    [1.0, -1.0, -1.0, 1.0]
    >>> [round(a, 6) for a in group_relative_advantage([1.5, 0.5, 0.5, 1.5])]
    [1.0, -1.0, -1.0, 1.0]
    >>> group_relative_advantage([0.3, 0.3, 0.3])
    [0.0, 0.0, 0.0]
    """
    return group_advantages(rewards, len(rewards), "group", eps=eps, ddof=ddof)


def grpo_score(
    group: Sequence[dict[str, Any]], eps: float = DEFAULT_EPS, ddof: int = 0
) -> list[dict[str, Any]]:
    """Score one group of samples: each item gains `advantage` and `reinforce` (advantage > 0).

    Items keep every key they came with; the input is not modified.

    >>> scored = grpo_score([{"output": "2+3", "reward": 1}, {"output": "2*3", "reward": 0}])
    >>> [(s["output"], round(s["advantage"], 6), s["reinforce"]) for s in scored]
    [('2+3', 1.0, True), ('2*3', -1.0, False)]
    """
    advantages = group_relative_advantage([item["reward"] for item in group], eps=eps, ddof=ddof)
    return [{**item, "advantage": a, "reinforce": a > 0} for item, a in zip(group, advantages)]


def k3_kl(logp: Any, ref_logp: Any) -> Any:
    """The k3 estimator of KL(policy || reference) from per-token log-probs.

    exp(ref - logp) - (ref - logp) - 1: never negative, exactly 0 where both policies agree. Works on
    floats and, elementwise, on tensors.

    >>> k3_kl(-1.2, -1.2)
    0.0
    >>> round(k3_kl(-1.0, -2.0), 6)
    0.367879
    """
    delta = ref_logp - logp
    exp = math.exp(delta) if isinstance(delta, (int, float)) else delta.exp()
    return exp - delta - 1
