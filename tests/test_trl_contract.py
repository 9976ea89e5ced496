"""The TRL contract of rlvr/grpo/trainer.py: the privates of TRL and transformers it overrides or
reads still exist with the signatures it assumes, at the versions it names, every test its table
names exists, and a real step logs every TRL metric name rlvr.core.metric_keys holds."""

import ast
import inspect
import re
from pathlib import Path

import pytest
import transformers
import trl
from transformers import Trainer
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler

from rlvr.core import metric_keys
from rlvr.core.lock import pins
from rlvr.grpo import trainer
from rlvr.grpo.trainer import PipelineGRPOTrainer

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = trainer.__doc__


def _params(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_contract_names_the_pinned_versions():
    lock = pins(ROOT / "requirements.lock")
    for name, module in (("trl", trl), ("transformers", transformers)):
        pinned = lock[name]
        assert f"{name}=={pinned}" in CONTRACT
        assert module.__version__ == pinned


@pytest.mark.parametrize(
    "name,owner",
    [
        ("_generate_and_score_completions", GRPOTrainer),
        ("_calculate_rewards", GRPOTrainer),
        ("_log_metric", GRPOTrainer),
        ("_get_train_sampler", GRPOTrainer),
        ("_save_checkpoint", GRPOTrainer),
        ("_run_epoch", Trainer),
        ("log", GRPOTrainer),
        ("evaluate", Trainer),
        ("save_model", Trainer),
        ("training_step", GRPOTrainer),
        ("_generate", GRPOTrainer),
        ("_compute_loss", GRPOTrainer),
    ],
)
def test_each_override_matches_the_library_signature(name, owner):
    assert name in CONTRACT
    assert name in vars(PipelineGRPOTrainer), f"the contract lists {name}, the trainer lacks it"
    ours, theirs = _params(getattr(PipelineGRPOTrainer, name)), _params(getattr(owner, name))
    if "args" in ours:  # *args, **kwargs: what it reads by name must still be there
        assert "epoch" in theirs
    else:
        assert ours == theirs


def test_what_the_trainer_reads_is_still_there():
    assert _params(GRPOTrainer._get_per_token_logps_and_entropies)[:6] == [
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
    ]
    # off-policy guidance: what _generate returns, what _compute_loss calls and normalises by
    generate = inspect.getsource(GRPOTrainer._generate)
    assert (
        "return prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, "
        "images, tool_images" in generate
    )
    loss = inspect.getsource(GRPOTrainer._compute_loss)
    assert loss.count("self._get_per_token_logps_and_entropies(") == 1
    assert "per_token_logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(" in loss
    for normaliser in (
        'normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes',
        "normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation",
        "loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)",
        "(per_token_loss.size(0) * self.max_completion_length)",
        "loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()",
    ):
        assert normaliser in loss, normaliser
    assert "self._tokenizer" in inspect.getsource(GRPOTrainer._generate)
    from trl.models.utils import disable_gradient_checkpointing

    assert _params(disable_gradient_checkpointing) == ["model", "gradient_checkpointing_kwargs"]
    assert _params(RepeatSampler.__init__) == [
        "self",
        "data_source",
        "mini_repeat_count",
        "batch_size",
        "repeat_count",
        "shuffle",
        "seed",
    ]
    source = inspect.getsource(GRPOTrainer)
    keys = re.search(r"scored batch's keys \(([^)]*)\)", CONTRACT).group(1).split(", ")
    for key in keys:
        assert f'"{key}"' in source, key
    assert 'self._metrics = {"train": defaultdict(list)' in source
    for attribute in (
        "self.reward_weights =",
        "self.num_generations =",
        "self.beta =",
        "self.reward_func_names =",
        "self.scale_rewards =",
        "self.num_iterations =",
        "self._step =",
    ):
        assert attribute in source, attribute
    # when TRL generates (PipelineGRPOTrainer.training_step measures the KL on the other steps)
    prepare = inspect.getsource(GRPOTrainer._prepare_inputs)
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in prepare
    assert "if self._step % generate_every == 0 or self._buffered_inputs is None" in prepare
    assert "self._step += 1" in inspect.getsource(GRPOTrainer.training_step)
    # _calculate_rewards returns every rank's rewards, gathered: the trainer slices its own
    assert "rewards_per_func = gather(rewards_per_func)" in inspect.getsource(
        GRPOTrainer._calculate_rewards
    )
    # log folds the metrics the trainer appends to into the logged line, then clears them
    log = inspect.getsource(GRPOTrainer.log)
    assert "self._metrics[mode].items()" in log and "self._metrics[mode].clear()" in log
    # _logs: the last generated batch, every rank's (gathered), that the recorded samples read
    scored = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for line in (
        'self._logs["prompt"].extend(gather_object(prompts))',
        'self._logs["completion"].extend(gather_object(completions))',
        'self._logs["rewards"][name].extend(rewards_per_func[:, i].tolist())',
        'self._logs["advantages"].extend(all_process_advantages.tolist())',
    ):
        assert line in scored, line
    # evaluate: what PipelineGRPOTrainer.evaluate does in the Trainer's stead
    evaluate = inspect.getsource(Trainer.evaluate)
    assert "self.log(output.metrics)" in evaluate and "on_evaluate" in evaluate
    assert "metric_for_best_model" in inspect.getsource(Trainer._determine_best_metric)


def test_the_checkpoint_layout_is_the_trainer_s():
    from transformers import trainer as trainer_module
    from transformers.trainer_callback import ProgressCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    from rlvr.grpo.checkpoints import rng_state_files

    assert PREFIX_CHECKPOINT_DIR == "checkpoint"
    assert trainer_module.TRAINER_STATE_NAME == "trainer_state.json"
    source = inspect.getsource(Trainer._save_rng_state)
    assert '"rng_state.pth"' in source and 'f"rng_state_{self.args.process_index}.pth"' in source
    assert rng_state_files(1) == ["rng_state.pth"] and rng_state_files(3)[2] == "rng_state_2.pth"
    assert "self.training_bar = " in inspect.getsource(ProgressCallback)


def test_every_test_the_contract_names_exists():
    named = re.findall(r"(test_\w+\.py)::(test_\w+)", CONTRACT)
    assert len(named) >= 12
    for file, test in named:
        tree = ast.parse((ROOT / "tests" / file).read_text())
        assert test in {
            node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
        }, f"{file}::{test}"


def test_a_step_logs_every_trl_metric_key_we_read(tiny_policy_dir, tmp_path):
    from rlvr.data.rows import read_rows
    from rlvr.grpo.run import run_grpo
    from rlvr.params.config import parse_params

    params = parse_params(
        {
            "train": {
                "grpo": {
                    "num_generations": 4,
                    "per_device_train_batch_size": 8,
                    "max_completion_length": 6,
                }
            }
        }
    )
    rows = read_rows(ROOT / "data" / "grpo_train.jsonl")[:8]
    trainer = run_grpo(params, rows, str(tiny_policy_dir), tmp_path, max_steps=1)
    step = next(e for e in trainer.state.log_history if metric_keys.LOSS in e)
    names = [
        metric_keys.LOSS,
        metric_keys.REWARD,
        metric_keys.KL,
        metric_keys.GRAD_NORM,
        metric_keys.ENTROPY,
        metric_keys.COMPLETION_LENGTH,
        metric_keys.NO_SPREAD_SHARE,
        metric_keys.REWARD_STD,
        metric_keys.MIN_LENGTH,
        metric_keys.MAX_LENGTH,
        metric_keys.TRUNCATED_SHARE,
        metric_keys.CLIP_RATIO,
        metric_keys.CORRECTNESS,
        metric_keys.FORMAT,
        metric_keys.BETA,
        metric_keys.reward_failures("correctness"),
    ]
    assert [name for name in names if name not in step] == []
