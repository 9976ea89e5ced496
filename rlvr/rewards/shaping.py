"""Reward shaping: the weighted composition of several rewards and the Kimi k1.5 length term."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def compose_rewards(parts: Sequence[Mapping[str, float]]) -> float:
    """Weighted mean of reward parts, sum(w * r) / sum(w); 0.0 when there is no weight at all.

    >>> compose_rewards([{"weight": 0.7, "reward": 1}, {"weight": 0.3, "reward": 0}])
    0.7
    >>> compose_rewards([{"weight": 0.7, "reward": 1}, {"weight": 0.3, "reward": 1}])
    1.0
    >>> compose_rewards([{"weight": 0, "reward": 1}])
    0.0
    """
    total_weight = sum(float(p["weight"]) for p in parts)
    if total_weight == 0:
        return 0.0
    return sum(float(p["weight"]) * float(p["reward"]) for p in parts) / total_weight


def length_reward(
    length: float, correct: bool, lam: float, l_min: float, l_max: float, l_target: float
) -> float:
    """Kimi k1.5 length term: favour short correct answers, penalise long wrong ones.

    correct: lam * (l_max - L) / (l_max - l_min)
    wrong:   -lam * max(0, (L - l_target) / (l_max - l_target))

    >>> length_reward(4, True, lam=0.5, l_min=2, l_max=12, l_target=6)
    0.4
    >>> length_reward(4, False, lam=0.5, l_min=2, l_max=12, l_target=6)
    -0.0
    >>> length_reward(12, False, lam=0.5, l_min=2, l_max=12, l_target=6)
    -0.5
    """
    if not (l_min < l_max and l_target < l_max):
        raise ValueError(
            f"length term needs l_min < l_max and l_target < l_max, got "
            f"l_min={l_min}, l_max={l_max}, l_target={l_target}"
        )
    if correct:
        return lam * (l_max - length) / (l_max - l_min)
    return -lam * max(0.0, (length - l_target) / (l_max - l_target))
