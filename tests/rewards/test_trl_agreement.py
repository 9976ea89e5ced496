"""Our group advantages agree with the ones TRL's GRPOTrainer computes itself, on the same rewards.

TRL (1.16) normalises each group by its Bessel-corrected std plus eps=1e-4; the seed semantics use
the population std plus 1e-8. So the one formula (rlvr/rewards/grpo_math.py's group_advantages,
what training recomputes advantages with) with its defaults, and the seed version with ddof=1,
eps=TRL_ADVANTAGE_EPS, must equal TRL's exactly (to float32 precision); the seed version with its
own defaults differs only by the factor sqrt(n / (n - 1)).
"""

import math

import pytest

from rlvr.rewards.grpo_math import TRL_ADVANTAGE_EPS, group_advantages, group_relative_advantage

G = 4
GROUPS = [[1, 0, 0, 1], [0.5, 0.5, 0.5, 0.5], [3, 1, 2, 0], [0, 0, 1, 0]]


@pytest.fixture(scope="module")
def trl_advantages(tiny_policy_dir, tmp_path_factory):
    """Run TRL's own generate-and-score step with a reward function that returns GROUPS."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    flat = [r for group in GROUPS for r in group]

    def fixed_rewards(prompts, completions, **kwargs):
        return flat[: len(completions)]

    args = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("trl")),
        use_cpu=True,
        bf16=False,
        num_generations=G,
        per_device_train_batch_size=G * len(GROUPS),
        max_completion_length=3,
        beta=0.0,
        scale_rewards="group",
        activation_checkpointing=False,
        shuffle_dataset=False,
        report_to="none",
        seed=0,
    )
    dataset = Dataset.from_dict({"prompt": [f"q{i}: " for i in range(len(GROUPS))]})
    trainer = GRPOTrainer(
        model=str(tiny_policy_dir), reward_funcs=fixed_rewards, args=args, train_dataset=dataset
    )
    batch = next(iter(trainer.get_train_dataloader()))
    assert [row["prompt"] for row in batch] == [
        f"q{i}: " for i in range(len(GROUPS)) for _ in range(G)
    ]
    advantages = trainer._generate_and_score_completions(batch)["advantages"].tolist()
    return [advantages[i * G : (i + 1) * G] for i in range(len(GROUPS))]


def test_ours_with_trls_std_and_eps_equals_trls(trl_advantages):
    for rewards, theirs in zip(GROUPS, trl_advantages):
        ours = group_relative_advantage(rewards, eps=TRL_ADVANTAGE_EPS, ddof=1)
        assert theirs == pytest.approx(ours, abs=1e-5), rewards
    flat = [r for group in GROUPS for r in group]  # the batch, G at a time, as training has it
    assert group_advantages(flat, G) == pytest.approx(sum(trl_advantages, []), abs=1e-5)


def test_seed_semantics_differ_from_trl_only_by_the_bessel_factor(trl_advantages):
    factor = math.sqrt(G / (G - 1))
    for rewards, theirs in zip(GROUPS, trl_advantages):
        ours = group_relative_advantage(rewards)  # population std, eps 1e-8
        assert [a > 0 for a in ours] == [t > 0 for t in theirs]  # same samples reinforced
        assert [t * factor for t in theirs] == pytest.approx(ours, abs=1e-3), rewards


def test_all_equal_group_gives_zero_in_both(trl_advantages):
    assert trl_advantages[1] == [0.0] * G
    assert group_relative_advantage(GROUPS[1]) == [0.0] * G
