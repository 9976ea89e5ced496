"""Group-relative advantages, the per-sample GRPO score and the k3 KL: the seed's worked examples."""

import math

import pytest
import torch

from rlvr.rewards.grpo_math import group_relative_advantage, grpo_score, k3_kl


def test_seed_example_group_of_four():
    assert group_relative_advantage([1, 0, 0, 1]) == pytest.approx([1, -1, -1, 1], abs=1e-6)


def test_adding_a_constant_changes_nothing():
    base = group_relative_advantage([1, 0, 0, 1])
    shifted = group_relative_advantage([1.5, 0.5, 0.5, 1.5])
    assert shifted == pytest.approx(base, abs=1e-12)


def test_all_equal_group_gives_exact_zeros():
    assert group_relative_advantage([0.3, 0.3, 0.3, 0.3]) == [0.0, 0.0, 0.0, 0.0]
    assert group_relative_advantage([0, 0]) == [0.0, 0.0]


def test_population_std_not_sample_std():
    # [0, 3]: mean 1.5, population std 1.5 -> +-1; a sample std (2.12) would give +-0.707
    assert group_relative_advantage([0, 3]) == pytest.approx([-1, 1], abs=1e-6)


def test_advantages_have_zero_mean_and_unit_population_std():
    adv = group_relative_advantage([0.2, 0.9, 0.4, 0.0, 1.0, 0.7])
    assert sum(adv) == pytest.approx(0, abs=1e-9)
    assert math.sqrt(sum(a * a for a in adv) / len(adv)) == pytest.approx(1, abs=1e-6)


def test_bessel_option_matches_hand_computation():
    # [1,0,0,1]: sample std sqrt(1/3) -> 0.5 / (0.57735 + 1e-4)
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    assert group_relative_advantage([1, 0, 0, 1], eps=1e-4, ddof=1)[0] == pytest.approx(expected)


def test_empty_group():
    assert group_relative_advantage([]) == []


def test_grpo_score_keeps_items_and_flags_positive_advantages():
    group = [
        {"output": "a", "reward": 1},
        {"output": "b", "reward": 0},
        {"output": "c", "reward": 0},
        {"output": "d", "reward": 1},
    ]
    scored = grpo_score(group)
    assert [s["output"] for s in scored] == ["a", "b", "c", "d"]
    assert [s["advantage"] for s in scored] == pytest.approx([1, -1, -1, 1], abs=1e-6)
    assert [s["reinforce"] for s in scored] == [True, False, False, True]
    assert "advantage" not in group[0]  # the input is left alone


def test_grpo_score_all_equal_reinforces_nothing():
    scored = grpo_score([{"output": "x", "reward": 1}] * 3)
    assert [s["reinforce"] for s in scored] == [False, False, False]


def test_k3_is_zero_when_policies_agree_and_positive_otherwise():
    assert k3_kl(-0.7, -0.7) == 0.0
    assert k3_kl(-1.0, -2.0) == pytest.approx(math.exp(-1) + 1 - 1)
    assert k3_kl(-2.0, -1.0) == pytest.approx(math.e - 1 - 1)
    assert k3_kl(-2.0, -1.0) > 0 and k3_kl(-1.0, -2.0) > 0


def test_k3_on_tensors_is_elementwise_and_non_negative():
    logp = torch.tensor([-1.0, -0.5, -3.0, -0.1])
    ref = torch.tensor([-1.0, -2.5, -0.2, -0.1])
    kl = k3_kl(logp, ref)
    assert kl.shape == logp.shape
    assert torch.all(kl >= 0)
    assert kl[0].item() == 0.0 and kl[3].item() == 0.0
    assert kl[1].item() == pytest.approx(k3_kl(-0.5, -2.5))
