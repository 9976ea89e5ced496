"""Rewards: verifiers, composition, the length term, GRPO's group math, and the registries.

Importing this package does not import torch.
"""

from rlvr.rewards.grpo_math import group_advantages, group_relative_advantage, grpo_score, k3_kl
from rlvr.rewards.math_answers import math_reward
from rlvr.rewards.registry import (
    REWARD_FUNCS,
    VERIFIERS,
    RewardFunction,
    build_reward_funcs,
    check_reward_names,
    normalized_weights,
    score_correctness,
    verifier_problems,
)
from rlvr.rewards.shaping import compose_rewards, length_reward
from rlvr.rewards.verifiers import (
    countdown_reward,
    countdown_solution,
    countdown_value,
    exact_match_reward,
    extract_answer,
    format_reward,
)

__all__ = [
    "REWARD_FUNCS",
    "VERIFIERS",
    "RewardFunction",
    "build_reward_funcs",
    "check_reward_names",
    "compose_rewards",
    "countdown_reward",
    "countdown_solution",
    "countdown_value",
    "exact_match_reward",
    "extract_answer",
    "format_reward",
    "group_advantages",
    "group_relative_advantage",
    "grpo_score",
    "k3_kl",
    "length_reward",
    "math_reward",
    "normalized_weights",
    "score_correctness",
    "verifier_problems",
]
