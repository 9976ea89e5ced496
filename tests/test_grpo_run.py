"""Short real GRPO runs on the tiny policy: faults must not crash or hide (NaN, raising rewards)."""

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback

from rlvr.data.rows import read_rows
from rlvr.grpo.callbacks import NonFiniteMetric
from rlvr.grpo.run import run_grpo
from rlvr.params.config import parse_params
from rlvr.rewards.registry import RewardFunction, build_reward_funcs, score_correctness

ROOT = Path(__file__).resolve().parents[1]
SMALL = {
    "train": {
        "grpo": {"num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 6}
    }
}


@pytest.fixture(scope="module")
def rows():
    return read_rows(ROOT / "data" / "grpo_train.jsonl")[:8]


def test_a_raising_reward_scores_none_counts_it_and_training_goes_on(
    tiny_policy_dir, rows, tmp_path
):
    params = parse_params(SMALL)

    def flaky(text, verifier, n_tokens):
        if verifier["target"] % 2:  # rows with an odd target make this reward raise
            raise ValueError("flaky verifier")
        return score_correctness(text, verifier)

    funcs = [*build_reward_funcs(params.rewards), RewardFunction("flaky", flaky)]
    params.rewards.weights = [1.0, 0.2, 1.0]  # one weight per function, the flaky one included
    trainer = run_grpo(
        params, rows, str(tiny_policy_dir), tmp_path, max_steps=3, reward_funcs=funcs
    )
    steps = [e for e in trainer.state.log_history if "loss" in e]
    assert len(steps) == 3
    assert funcs[2].failures > 0
    assert sum(e["rewards/flaky/failures"] for e in steps) > 0
    assert all(math.isfinite(e["loss"]) for e in steps)


class PoisonGradients(TrainerCallback):
    """From the start of step `at` on, every gradient of the first weight becomes NaN."""

    def __init__(self, at):
        self.at, self.model = at, None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.model = model

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.at:
            weight = next(self.model.parameters())
            weight.register_hook(lambda grad: torch.full_like(grad, float("nan")))


def test_nan_stops_the_run_at_once_naming_step_and_metric(tiny_policy_dir, rows, tmp_path):
    params = parse_params(SMALL)
    with pytest.raises(NonFiniteMetric, match=r"step 3: grad_norm = nan is not finite") as error:
        run_grpo(
            params,
            rows,
            str(tiny_policy_dir),
            tmp_path,
            max_steps=6,
            save_steps=2,
            callbacks=[PoisonGradients(at=3)],
        )
    assert "checkpoint-2" in str(error.value)
    assert (tmp_path / "checkpoint-2").is_dir()
    assert not (tmp_path / "checkpoint-3").exists() and not (tmp_path / "checkpoint-4").exists()
    from safetensors.torch import load_file

    weights = load_file(tmp_path / "checkpoint-2" / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in weights.values())


def test_beta_in_force_is_logged_every_step(tiny_policy_dir, rows, tmp_path):
    params = parse_params(
        {
            "train": {
                "grpo": {**SMALL["train"]["grpo"], "beta": 0.02},
                "beta_schedule": {"kind": "warmup", "beta_start": 0.01, "warmup_steps": 2},
            }
        }
    )
    trainer = run_grpo(params, rows, str(tiny_policy_dir), tmp_path, max_steps=3)
    betas = [e["beta"] for e in trainer.state.log_history if "loss" in e]
    assert betas == pytest.approx([0.01, 0.015, 0.02])
    assert all("kl" in e for e in trainer.state.log_history if "loss" in e)


def test_a_pretrained_folder_with_chat_prompts_and_lora(tiny_policy_dir, rows, tmp_path):
    """The real-model path (model.init: pretrained, chat_template, LoRA), on the tiny folder."""
    from peft import PeftModel

    from rlvr.policy.models import load_policy

    params = parse_params(
        {
            **SMALL,
            "model": {
                "init": "pretrained",
                "name_or_path": str(tiny_policy_dir),
                "chat_template": True,
                "lora": {"enabled": True, "r": 4, "alpha": 8},
            },
        }
    )
    trainer = run_grpo(params, rows, params.model.name_or_path, tmp_path / "run", max_steps=2)
    assert isinstance(trainer.model, PeftModel)
    assert isinstance(trainer.train_dataset[0]["prompt"], list)  # chat messages
    steps = [e for e in trainer.state.log_history if "loss" in e]
    assert len(steps) == 2 and all(math.isfinite(e["loss"]) for e in steps)
    trainer.save_model(str(tmp_path / "final"))
    assert (tmp_path / "final" / "adapter_config.json").exists()
    model, tokenizer = load_policy(tmp_path / "final")  # base + adapter, loaded back
    assert model.config.vocab_size == len(tokenizer)


def test_no_group_norm_ablation_uses_one_running_mean_baseline(tiny_policy_dir, rows, tmp_path):
    params = parse_params(
        {
            **SMALL,
            "train": {**SMALL["train"], "advantage": "running_mean"},
            "rewards": {"funcs": ["correctness"], "weights": [1.0]},
        }
    )
    # the untrained policy never hits a target: reward something that varies in its random text
    varied = RewardFunction("odd_text", lambda text, verifier, n: float(sum(map(ord, text)) % 2))
    trainer = run_grpo(
        params,
        rows,
        str(tiny_policy_dir),
        tmp_path,
        max_steps=3,
        save_steps=2,
        reward_funcs=[varied],
    )
    steps = [e for e in trainer.state.log_history if "loss" in e]
    assert all("running_mean_baseline" in e for e in steps)
    assert trainer.running_mean.value == pytest.approx(steps[-1]["running_mean_baseline"])
    assert (tmp_path / "checkpoint-2" / "running_mean.json").exists()
    saved = tmp_path / "checkpoint-2" / "training_args.bin"  # TRL's class: loads without rlvr
    assert b"rlvr" not in saved.read_bytes()
    assert type(torch.load(saved, weights_only=False)).__name__ == "GRPOConfig"
    # a resume restores the baseline the checkpoint saved (run_grpo calls this before train())
    at_step_2 = json.loads((tmp_path / "checkpoint-2" / "running_mean.json").read_text())["value"]
    assert at_step_2 != trainer.running_mean.value
    trainer.resume_running_mean(tmp_path / "checkpoint-2")
    assert trainer.running_mean.value == at_step_2
    # advantages are reward - baseline: a group's advantages no longer average to zero
    assert max(b["max_abs_group_mean"] for b in trainer.batch_checks) > 1e-3


def test_the_console_shows_one_compact_line_every_log_every_steps(
    tiny_policy_dir, rows, tmp_path, capsys
):
    params = parse_params({"train": {**SMALL["train"], "log_every": 2}})
    trainer = run_grpo(params, rows, str(tiny_policy_dir), tmp_path, max_steps=5, label="smoke")
    captured = capsys.readouterr()
    text = captured.out + captured.err
    lines = [line for line in text.splitlines() if line.startswith("smoke: step")]
    assert [line.split(" | ")[0] for line in lines] == [
        "smoke: step 2/5",
        "smoke: step 4/5",
        "smoke: step 5/5",
    ]
    assert all(
        " | reward " in line and " | correctness " in line and line.endswith(" s/step")
        for line in lines
    )
    assert "{'loss'" not in text and "'train_runtime'" not in text  # no log dicts
    assert sum("loss" in e for e in trainer.state.log_history) == 5  # every step still logged


def test_a_group_of_completions_is_recorded_at_the_first_every_100th_and_last_step(
    tiny_policy_dir, rows, tmp_path, monkeypatch
):
    """The trainer keeps one group of the completions it generated at a few steps, in the log
    history (so a checkpoint keeps them): the prompt, each completion with its weighted reward as
    the reward functions score it, the verifier's verdict and its advantage."""
    from rlvr.grpo import trainer as trainer_module
    from rlvr.pipeline.training import completion_samples, step_history

    monkeypatch.setattr(trainer_module, "SAMPLE_EVERY", 2)  # 100 in a real run

    def chars(text, verifier, n_tokens):  # pays any text: the untrained policy earns a spread
        return len(text) / 8

    params = parse_params(SMALL)
    params.rewards.weights = [1.0, 3.0]
    funcs = [build_reward_funcs(params.rewards)[0], RewardFunction("chars", chars)]
    trainer = run_grpo(
        params, rows, str(tiny_policy_dir), tmp_path, max_steps=5, reward_funcs=funcs
    )
    samples = completion_samples(trainer.state.log_history)
    assert [s["step"] for s in samples] == [1, 2, 4, 5]
    by_prompt = {row.prompt: row for row in rows}
    for sample in samples:
        row = by_prompt[sample["prompt"]]
        texts = sample["completions"]
        assert len(texts) == len(sample["rewards"]) == len(sample["advantages"]) == 4
        correct = [score_correctness(t, row.verifier) for t in texts]
        # TRL's weighted sum, its weights normalised to sum to 1
        assert sample["rewards"] == pytest.approx(
            [0.25 * c + 0.75 * len(t) / 8 for c, t in zip(correct, texts)]
        )
        assert sample["correct"] == [c >= 1 for c in correct]
        mean = sum(sample["rewards"]) / 4  # GRPO's advantage: the reward minus its group's mean
        assert [a > 1e-6 for a in sample["advantages"]] == [
            r > mean + 1e-6 for r in sample["rewards"]
        ]
    assert any(len(set(s["rewards"])) > 1 for s in samples)  # the checks above had a spread to see
    # the per-step history stays numeric
    assert [e["step"] for e in step_history(trainer.state.log_history)] == [1, 2, 3, 4, 5]
