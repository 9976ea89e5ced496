"""The validation rows during training, on real short GRPO runs of the tiny policy: scored at
step 0 and every train.eval_steps steps without changing training, the best checkpoint kept
(train.select: best_val, the earliest of equals), early stopping (train.patience)."""

from pathlib import Path

import pytest
import torch

from rlvr.core.metric_keys import TIMING_KEYS
from rlvr.data.rows import read_rows, to_hf_dataset
from rlvr.grpo.callbacks import BetaSchedule
from rlvr.grpo.config import grpo_config
from rlvr.grpo.run import build_trainer, run_grpo
from rlvr.grpo.scoring import training_validation, validation_scores
from rlvr.params.config import ParamsError, parse_params
from rlvr.pipeline.training import selection_record, validation_history
from rlvr.policy.sampling import SampleSettings
from rlvr.rewards.registry import RewardFunction, build_reward_funcs, normalized_weights

ROOT = Path(__file__).resolve().parents[1]
SMALL = {
    "train": {
        "grpo": {"num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 6}
    },
    "evaluate": {"samples": 2},
}


@pytest.fixture(scope="module")
def rows():
    return read_rows(ROOT / "data" / "grpo_train.jsonl")[:8]


@pytest.fixture(scope="module")
def val_rows():
    return read_rows(ROOT / "data" / "grpo_val.jsonl")[:6]


def _train_steps(trainer):
    return [
        {k: v for k, v in e.items() if k not in TIMING_KEYS}
        for e in trainer.state.log_history
        if "loss" in e
    ]


def test_validation_is_scored_at_step_0_and_every_eval_steps_without_changing_training(
    tiny_policy_dir, rows, val_rows, tmp_path
):
    params = parse_params({**SMALL, "train": {**SMALL["train"], "eval_steps": 2}})
    params.rewards.weights = [1.0, 0.2, 0.5]

    def funcs():  # the untrained policy never scores: a reward that varies with its text
        odd = RewardFunction("odd_text", lambda text, verifier, n: float(sum(map(ord, text)) % 2))
        return [*build_reward_funcs(params.rewards), odd]

    scored = run_grpo(
        params,
        rows,
        str(tiny_policy_dir),
        tmp_path / "scored",
        max_steps=5,
        validation=training_validation(params, val_rows),
        reward_funcs=funcs(),
    )
    plain = run_grpo(
        params, rows, str(tiny_policy_dir), tmp_path / "plain", max_steps=5, reward_funcs=funcs()
    )
    history = validation_history(scored.state.log_history)
    assert [h["step"] for h in history] == [0, 2, 4, 5]  # and the last step, as the Trainer does
    assert len({e["loss"] for e in _train_steps(plain)}) > 1  # it trained: the check has teeth
    tags = {f"success/{tag}" for row in val_rows for tag in row.tags}
    assert tags  # the validation rows carry tags: per-tag success is scored
    for entry in history:
        assert set(entry) == {
            "step",
            "mean_reward",
            "greedy_success",
            "sampled_success",
            "mean_length",
            "pass_at_1",
            "pass_at_2",
            *tags,
        }
        assert 0 <= entry["mean_reward"] <= 1 and 0 < entry["mean_length"] <= 6
        # pass@1 is the share of correct samples; pass@2 (both samples) at least that
        assert entry["pass_at_1"] == pytest.approx(entry["sampled_success"])
        assert entry["pass_at_1"] <= entry["pass_at_2"] <= 1
    # the same rollouts, losses and rewards at every step: scoring restores torch's RNG and
    # the model's train mode, and counts no reward failure of training's
    assert _train_steps(scored) == _train_steps(plain)
    assert scored.validation_seconds > 0
    assert not any(k.startswith("eval_") for e in _train_steps(scored) for k in e)


def test_validation_scores_are_seeded_and_leave_the_rng_and_train_mode_alone(
    tiny_policy_dir, val_rows
):
    from rlvr.policy.models import load_policy

    model, tokenizer = load_policy(str(tiny_policy_dir))
    model.train()
    params = parse_params({})
    funcs, weights = build_reward_funcs(params.rewards), normalized_weights([1.0, 0.2])
    settings = SampleSettings(n=3, max_new_tokens=6, seed=5)
    torch.manual_seed(123)
    first = validation_scores(model, tokenizer, val_rows, funcs, weights, settings)
    after = torch.rand(3)
    torch.manual_seed(123)
    assert torch.equal(torch.rand(3), after)  # the RNG went on as if nothing had run
    assert validation_scores(model, tokenizer, val_rows, funcs, weights, settings) == first
    assert model.training


def _scripted_trainer(tiny_policy_dir, rows, tmp_path, scores, max_steps, patience=0):
    """A real trainer whose validation returns scripted scores by step (the weights still train)."""
    params = parse_params(SMALL)
    config = grpo_config(
        params.train,
        output_dir=tmp_path,
        max_steps=max_steps,
        seed=0,
        reward_weights=[1.0],
        save_steps=2,
        eval_steps=2,
        select_best=True,
    )
    trainer = None

    def validation(model, tokenizer):
        return {"mean_reward": scores[trainer.state.global_step], "greedy_success": 0.0}

    callbacks = []
    if patience:
        from transformers import EarlyStoppingCallback

        callbacks.append(EarlyStoppingCallback(early_stopping_patience=patience))
    odd = RewardFunction("odd_text", lambda text, verifier, n: float(sum(map(ord, text)) % 2))
    trainer = build_trainer(
        str(tiny_policy_dir),
        to_hf_dataset(rows),
        [odd],
        config,
        params.model,
        callbacks,
        beta_schedule=BetaSchedule(params.train.beta_schedule, 0.05),
        validation=validation,
        eval_dataset=to_hf_dataset(rows),
    )
    return params, trainer


def _weights(model):
    return [p.detach().clone() for p in model.parameters()]


def test_best_val_keeps_the_earliest_best_checkpoint(tiny_policy_dir, rows, tmp_path):
    scores = {0: 0.9, 2: 0.5, 4: 0.5, 6: 0.3}  # step 0 is the base model: not a checkpoint
    params, trainer = _scripted_trainer(tiny_policy_dir, rows, tmp_path, scores, max_steps=6)
    trainer.train()
    assert trainer.state.best_global_step == 2  # 4 ties with 2: the earliest stays
    from rlvr.policy.models import load_policy

    best, _ = load_policy(str(tmp_path / "checkpoint-2"))
    last, _ = load_policy(str(tmp_path / "checkpoint-6"))
    loaded = _weights(trainer.model)
    assert all(torch.equal(a, b) for a, b in zip(loaded, _weights(best)))
    assert not all(torch.equal(a, b) for a, b in zip(loaded, _weights(last)))
    params.train.select, params.train.max_steps = "best_val", 6
    record = selection_record(params, trainer.state, "models/trained/seed-0")
    assert record["chosen_step"] == 2 and not record["stopped_early"]
    assert "step 2: the best validation mean reward (0.500)" in record["reason"]


def test_patience_stops_after_that_many_validations_without_a_new_best(
    tiny_policy_dir, rows, tmp_path
):
    scores = {0: 0.1, 2: 0.5, 4: 0.4, 6: 0.45, 8: 0.6, 10: 0.7}
    params, trainer = _scripted_trainer(
        tiny_policy_dir, rows, tmp_path, scores, max_steps=10, patience=2
    )
    trainer.train()
    assert trainer.state.global_step == 6  # 4 and 6 did not beat step 2
    assert trainer.state.best_global_step == 2
    params.train.select, params.train.patience, params.train.max_steps = "best_val", 2, 10
    record = selection_record(params, trainer.state, "models/trained/seed-0")
    assert record["stopped_early"] and "stopped early at step 6" in record["reason"]


@pytest.mark.parametrize(
    "train,message",
    [
        (
            {"select": "best_val", "eval_steps": 0},
            "train.eval_steps = 0: must be above 0 with train.select = 'best_val'",
        ),
        (
            {"select": "best_val", "eval_steps": 30, "save_steps": 50},
            "train.save_steps = 50: must be a multiple of train.eval_steps (30)",
        ),
        ({"patience": 3}, "train.patience = 3: needs train.select = 'best_val'"),
        ({"select": "best"}, "train.select = 'best': must be one of"),
    ],
)
def test_selection_params_are_checked(train, message):
    with pytest.raises(ParamsError, match=None) as error:
        parse_params({"train": train})
    assert message in str(error.value)


def test_a_resumed_run_scores_the_same_steps_once(tiny_policy_dir, rows, val_rows, tmp_path):
    from tests.test_resume import KeepCheckpoints

    params = parse_params({**SMALL, "train": {**SMALL["train"], "eval_steps": 2}})
    params.rewards.weights = [1.0, 0.2, 0.5]

    def funcs():
        odd = RewardFunction("odd_text", lambda text, verifier, n: float(sum(map(ord, text)) % 2))
        return [*build_reward_funcs(params.rewards), odd]

    full = run_grpo(
        params,
        rows,
        str(tiny_policy_dir),
        tmp_path / "full",
        max_steps=6,
        save_steps=2,
        validation=training_validation(params, val_rows),
        reward_funcs=funcs(),
        callbacks=[KeepCheckpoints(tmp_path / "kept")],
    )
    resumed = run_grpo(
        params,
        rows,
        str(tiny_policy_dir),
        tmp_path / "resumed",
        max_steps=6,
        save_steps=2,
        validation=training_validation(params, val_rows),
        reward_funcs=funcs(),
        resume_from=str(tmp_path / "kept" / "checkpoint-4"),
    )
    expected = validation_history(full.state.log_history)
    assert [h["step"] for h in expected] == [0, 2, 4, 6]
    assert validation_history(resumed.state.log_history) == expected  # step 0 not scored again
