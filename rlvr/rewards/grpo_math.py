"""GRPO's group arithmetic as pure functions: group-relative advantages, the per-sample score, k3 KL.

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


def group_relative_advantage(rewards: Sequence[float], eps: float = DEFAULT_EPS,
                             ddof: int = 0) -> list[float]:
    """Advantage of each sample relative to its own group: (r - mean) / (std + eps).

    The std divides by n - ddof: the default ddof=0 is the population std. A group whose rewards
    are all equal carries no signal, so every advantage is exactly 0. TRL's GRPOTrainer uses the
    Bessel-corrected std (ddof=1) and eps=1e-4: `ddof=1, eps=TRL_ADVANTAGE_EPS` reproduces it.

    >>> [round(a, 6) for a in group_relative_advantage([1, 0, 0, 1])]
    [1.0, -1.0, -1.0, 1.0]
    >>> [round(a, 6) for a in group_relative_advantage([1.5, 0.5, 0.5, 1.5])]
    [1.0, -1.0, -1.0, 1.0]
    >>> group_relative_advantage([0.3, 0.3, 0.3])
    [0.0, 0.0, 0.0]
    """
    values = [float(r) for r in rewards]
    if not values:
        return []
    mean = math.fsum(values) / len(values)
    if len(values) <= ddof:
        return [0.0 for _ in values]
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - ddof))
    if std == 0.0:
        return [0.0 for _ in values]
    return [(v - mean) / (std + eps) for v in values]


def grpo_score(group: Sequence[dict[str, Any]], eps: float = DEFAULT_EPS,
               ddof: int = 0) -> list[dict[str, Any]]:
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
