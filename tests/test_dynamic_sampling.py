"""DAPO's dynamic sampling in PipelineGRPOTrainer, on the real trainer and the tiny policy: a batch
of all-equal groups triggers resampling, the round cap holds, and what reaches the loss is the
kept groups only."""

import math
from pathlib import Path

import pytest
import torch

from rlvr.core.metric_keys import FIRST_BATCH_KL, SAMPLED_COMPLETIONS
from rlvr.data.rows import read_rows
from rlvr.grpo.dynamic_sampling import merge_groups
from rlvr.grpo.run import run_grpo
from rlvr.grpo.trainer import PipelineGRPOTrainer
from rlvr.params.config import ParamsError, parse_params
from rlvr.pipeline.training import run_metrics
from rlvr.rewards.registry import RewardFunction
from tests.helpers import group_batch, group_params, scoring_trainer

ROOT = Path(__file__).resolve().parents[1]
G = 4


def sampled_params(rounds: int):
    """Groups of G with dynamic sampling on, at most `rounds` generation rounds a step."""
    return group_params(G, dynamic_sampling=True, max_sampling_rounds=rounds)


@pytest.fixture(scope="module")
def rows():
    return read_rows(ROOT / "data" / "grpo_train.jsonl")[:16]


def spread_if_odd():
    """Rewards that differ within every group of a row with an odd target (0, 1, 0, 1 in the
    order TRL scores the completions) and are all equal (0.5) for an even target."""
    calls = iter(range(10**9))

    def score(text, verifier, n_tokens):
        return float(next(calls) % 2) if verifier["target"] % 2 else 0.5

    return score


def _trainer(tiny_policy_dir, rows, tmp_path, rounds, reward=None):
    return scoring_trainer(
        tiny_policy_dir,
        rows,
        tmp_path,
        sampled_params(rounds),
        reward or spread_if_odd(),
        "spread_if_odd",
        dynamic_sampling=True,
    )


def _batch(rows):
    return group_batch(rows, G)


def _prompts(trainer, output):
    """The prompt text of each group in a scored batch."""
    ids, mask = output["prompt_ids"], output["prompt_mask"]
    return [trainer.processing_class.decode(ids[i][mask[i] == 1]) for i in range(0, len(ids), G)]


def _metric(trainer, name):
    return trainer._metrics["train"][f"dynamic_sampling/{name}"]


def test_a_batch_of_all_equal_groups_is_resampled_until_full(tiny_policy_dir, rows, tmp_path):
    even = [r for r in rows if r.verifier["target"] % 2 == 0][:2]
    odd = [r for r in rows if r.verifier["target"] % 2]
    assert len(odd) >= 4
    odd_prompts = {r.prompt for r in odd}
    trainer = _trainer(tiny_policy_dir, even + odd, tmp_path, rounds=6)
    output = trainer._generate_and_score_completions(_batch(even))
    assert _metric(trainer, "rounds")[0] >= 2  # the first round kept nothing
    assert len(output["advantages"]) == 2 * G  # full again
    # the loss sees only groups with a reward spread: odd-target prompts, some advantage != 0
    assert set(_prompts(trainer, output)) <= odd_prompts
    for group in output["advantages"].view(-1, G):
        assert group.abs().max() > 0
    assert output["num_items_in_batch"] == output["completion_mask"].sum()
    share = _metric(trainer, "kept_share")[0]
    assert 0 < share < 1
    assert _metric(trainer, "oversampling")[0] == pytest.approx(1 / share)  # full: kept = wanted


def test_the_round_cap_holds_and_no_spread_trains_on_the_first_batch(
    tiny_policy_dir, rows, tmp_path
):
    trainer = _trainer(
        tiny_policy_dir, rows, tmp_path, rounds=3, reward=lambda text, verifier, n: 0.5
    )
    batch = _batch(rows[:2])
    output = trainer._generate_and_score_completions(batch)
    assert _metric(trainer, "rounds") == [3.0]
    assert _metric(trainer, "kept_share") == [0.0]
    assert _metric(trainer, "oversampling") == [3.0]  # 3 rounds of 2 groups for 2 wanted
    # every round's completions counted, a running total (the report's sampled completions)
    assert trainer._metrics["train"][SAMPLED_COMPLETIONS] == [3 * 2 * G]
    trainer._generate_and_score_completions(batch)
    assert trainer._metrics["train"][SAMPLED_COMPLETIONS] == [2 * 3 * 2 * G]
    assert len(output["advantages"]) == 2 * G and not output["advantages"].abs().any()


def test_one_round_filters_and_the_loss_sees_the_short_batch(tiny_policy_dir, rows, tmp_path):
    odd = next(r for r in rows if r.verifier["target"] % 2)
    even = next(r for r in rows if r.verifier["target"] % 2 == 0)
    trainer = _trainer(tiny_policy_dir, rows, tmp_path, rounds=1)
    output = trainer._generate_and_score_completions(_batch([even, odd]))
    assert _prompts(trainer, output) == [odd.prompt]
    assert len(output["completion_ids"]) == G
    trainer.current_gradient_accumulation_steps = 1  # what the training loop sets
    loss = trainer.compute_loss(trainer.model, output)
    assert math.isfinite(loss.item())


def test_merged_groups_are_padded_like_trl(tiny_policy_dir):
    a = {
        "prompt_ids": torch.tensor([[7, 8]]),
        "prompt_mask": torch.tensor([[1, 1]]),
        "completion_ids": torch.tensor([[1, 2, 3]]),
        "completion_mask": torch.tensor([[1, 1, 1]]),
        "advantages": torch.tensor([0.5]),
        "num_items_in_batch": torch.tensor(3),
    }
    b = {
        "prompt_ids": torch.tensor([[9]]),
        "prompt_mask": torch.tensor([[1]]),
        "completion_ids": torch.tensor([[4]]),
        "completion_mask": torch.tensor([[1]]),
        "advantages": torch.tensor([-0.5]),
        "num_items_in_batch": torch.tensor(1),
    }
    merged = merge_groups([a, b], pad_token_id=0)
    assert merged["prompt_ids"].tolist() == [[7, 8], [0, 9]]  # prompts: left
    assert merged["prompt_mask"].tolist() == [[1, 1], [0, 1]]
    assert merged["completion_ids"].tolist() == [[1, 2, 3], [4, 0, 0]]  # completions: right
    assert merged["completion_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert merged["advantages"].tolist() == [0.5, -0.5]


def test_a_run_with_dynamic_sampling_logs_it_and_stays_finite(tiny_policy_dir, rows, tmp_path):
    params = sampled_params(3)
    params.rewards.weights = [1.0]
    trainer = run_grpo(
        params,
        rows,
        str(tiny_policy_dir),
        tmp_path,
        max_steps=3,
        reward_funcs=[RewardFunction("spread_if_odd", spread_if_odd())],
        dynamic_sampling=True,
    )
    steps = [e for e in trainer.state.log_history if "loss" in e]
    assert len(steps) == 3
    for entry in steps:
        assert math.isfinite(entry["loss"])
        assert 1 <= entry["dynamic_sampling/rounds"] <= 3
        assert 0 <= entry["dynamic_sampling/kept_share"] <= 1


def _run(
    tiny_policy_dir,
    rows,
    tmp_path,
    reward,
    rounds=3,
    steps=3,
    learning_rate=None,
    lora_dropout=None,
):
    params = sampled_params(rounds)
    params.rewards.weights = [1.0]
    if lora_dropout is not None:
        params.model.lora.enabled, params.model.lora.dropout = True, lora_dropout
    if learning_rate:
        params.train.grpo.learning_rate = learning_rate
    trainer = run_grpo(
        params,
        rows,
        str(tiny_policy_dir),
        tmp_path,
        max_steps=steps,
        reward_funcs=[RewardFunction("reward", reward)],
        dynamic_sampling=True,
    )
    return [e for e in trainer.state.log_history if "loss" in e]


def test_with_every_group_kept_the_first_batch_kl_is_trls_kl(tiny_policy_dir, rows, tmp_path):
    calls = iter(range(10**9))
    steps = _run(
        tiny_policy_dir,
        rows,
        tmp_path,
        lambda text, verifier, n: float(next(calls) % 2),
        rounds=1,
        learning_rate=1e-2,
    )  # a high rate, so the policy moves at once
    assert [e["dynamic_sampling/kept_share"] for e in steps] == [1.0] * 3
    assert steps[-1]["kl"] > 1e-4
    for entry in steps:  # the same completions, weights and reference: the same figure
        assert entry[FIRST_BATCH_KL] == pytest.approx(entry["kl"], rel=1e-4, abs=1e-7)


def test_with_two_updates_per_batch_the_first_batch_kl_is_measured_every_step(
    tiny_policy_dir, rows, tmp_path
):
    """num_iterations 2: TRL generates at steps 1 and 3 and trains on its buffer at steps 2 and
    4; there the stored first batch is measured with the policy as it is then, importance-weighted
    as TRL weights its KL. With every group kept it is the batch TRL's loss sees, so both KLs
    agree at every step."""
    calls = iter(range(10**9))
    params = sampled_params(1)
    params.rewards.weights = [1.0]
    params.train.grpo.num_iterations, params.train.grpo.learning_rate = 2, 1e-2
    trainer = run_grpo(
        params,
        rows,
        str(tiny_policy_dir),
        tmp_path,
        max_steps=4,
        reward_funcs=[RewardFunction("reward", lambda text, verifier, n: float(next(calls) % 2))],
        dynamic_sampling=True,
    )
    steps = [e for e in trainer.state.log_history if "loss" in e]
    assert ["dynamic_sampling/rounds" in e for e in steps] == [True, False, True, False]
    # TRL logs the reward only on the steps that generate: the run's summary reads what is there
    assert ["reward" in e for e in steps] == [True, False, True, False]
    metrics = run_metrics(steps)
    assert metrics["first10_mean_reward"] == pytest.approx(
        (steps[0]["reward"] + steps[2]["reward"]) / 2
    )
    assert steps[1]["kl"] > 1e-4  # the policy moved after step 1's update
    for entry in steps:
        assert entry[FIRST_BATCH_KL] == pytest.approx(entry["kl"], rel=1e-4, abs=1e-7)


def test_the_first_batch_kl_covers_its_dropped_groups_and_no_later_round(
    tiny_policy_dir, rows, tmp_path
):
    odd = [r for r in rows if r.verifier["target"] % 2]
    even = [r for r in rows if r.verifier["target"] % 2 == 0][:2]
    trainer = _trainer(tiny_policy_dir, even + odd, tmp_path, rounds=3)
    scored, seen = [], []
    score, measure = trainer._score_batch, trainer._first_batch_kl_sums
    trainer._score_batch = lambda batch: scored.append(score(batch)) or scored[-1]
    trainer._first_batch_kl_sums = lambda output, fresh=False: (
        seen.append(measure(output, fresh)) or seen[-1]
    )
    output = trainer._generate_and_score_completions(_batch(even))  # no spread: all dropped
    assert len(scored) >= 2 and set(_prompts(trainer, output)) <= {r.prompt for r in odd}
    ((kl_sum, tokens),) = seen  # measured once, on the first batch, whose groups were all dropped
    assert tokens == scored[0]["completion_mask"].sum()
    assert math.isfinite(trainer._metrics["train"][FIRST_BATCH_KL][0]) and kl_sum >= 0


@pytest.mark.parametrize("lora_dropout", [None, 0.5])  # LoRA's dropout draws random numbers
def test_measuring_the_first_batch_kl_leaves_training_unchanged(
    tiny_policy_dir, rows, tmp_path, monkeypatch, lora_dropout
):
    measured = _run(
        tiny_policy_dir, rows, tmp_path / "a", spread_if_odd(), lora_dropout=lora_dropout
    )
    monkeypatch.setattr(
        PipelineGRPOTrainer, "_first_batch_kl_sums", lambda self, output, fresh=False: None
    )
    unmeasured = _run(
        tiny_policy_dir, rows, tmp_path / "b", spread_if_odd(), lora_dropout=lora_dropout
    )
    assert all(FIRST_BATCH_KL in e for e in measured)
    assert not any(FIRST_BATCH_KL in e for e in unmeasured)
    for key in ("loss", "reward", "kl", "grad_norm", "dynamic_sampling/kept_share"):
        assert [e[key] for e in measured] == [e[key] for e in unmeasured], key


@pytest.mark.parametrize(
    "train,message",
    [
        (
            {"dynamic_sampling": True, "advantage": "running_mean"},
            "train.dynamic_sampling = True: needs train.advantage = 'group'",
        ),
        (
            {
                "dynamic_sampling": True,
                "grpo": {"gradient_accumulation_steps": 2},
                "save_steps": 50,
            },
            "train.dynamic_sampling = True: needs one optimizer micro-batch per generation",
        ),
        ({"max_sampling_rounds": 0}, "train.max_sampling_rounds = 0: must be >= 1"),
    ],
)
def test_dynamic_sampling_params_are_checked(train, message):
    with pytest.raises(ParamsError) as error:
        parse_params({"train": train})
    assert message in str(error.value)
