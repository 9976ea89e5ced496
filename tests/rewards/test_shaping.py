"""Reward composition and the Kimi k1.5 length term."""

import pytest

from rlvr.rewards.shaping import compose_rewards, length_reward


def test_compose_seed_examples():
    assert compose_rewards(
        [{"weight": 0.7, "reward": 1}, {"weight": 0.3, "reward": 0}]
    ) == pytest.approx(0.7)
    assert compose_rewards(
        [{"weight": 0.7, "reward": 1}, {"weight": 0.3, "reward": 1}]
    ) == pytest.approx(1.0)


def test_compose_is_a_weighted_mean_not_a_sum():
    assert compose_rewards([{"weight": 2, "reward": 1}, {"weight": 2, "reward": 0}]) == 0.5


def test_compose_zero_total_weight_and_empty_give_zero():
    assert compose_rewards([{"weight": 0, "reward": 1}, {"weight": 0, "reward": 1}]) == 0.0
    assert compose_rewards([]) == 0.0


LENGTH = dict(lam=0.5, l_min=2, l_max=12, l_target=6)


def test_length_correct_is_linear_from_lam_at_lmin_to_zero_at_lmax():
    assert length_reward(2, True, **LENGTH) == pytest.approx(0.5)
    assert length_reward(7, True, **LENGTH) == pytest.approx(0.25)
    assert length_reward(12, True, **LENGTH) == pytest.approx(0.0)


def test_length_wrong_is_free_up_to_target_then_penalised():
    assert length_reward(3, False, **LENGTH) == 0.0
    assert length_reward(6, False, **LENGTH) == 0.0
    assert length_reward(9, False, **LENGTH) == pytest.approx(-0.25)
    assert length_reward(12, False, **LENGTH) == pytest.approx(-0.5)


def test_length_rejects_degenerate_bounds():
    with pytest.raises(ValueError, match="l_min < l_max"):
        length_reward(3, True, lam=0.5, l_min=5, l_max=5, l_target=1)
