"""A run resumed from a checkpoint continues exactly as the uninterrupted run (prompt order across
passes over the data, adaptive beta), at the end of a pass and inside a later one."""

import shutil
from pathlib import Path

import torch
from transformers import TrainerCallback
from trl.trainer.utils import RepeatSampler

from rlvr.core.metric_keys import TIMING_KEYS
from rlvr.data.rows import read_rows
from rlvr.grpo.checkpoints import EpochReplaySampler
from rlvr.grpo.run import run_grpo
from rlvr.params.config import parse_params
from rlvr.rewards.registry import RewardFunction, build_reward_funcs

ROOT = Path(__file__).resolve().parents[1]


def test_epoch_replay_sampler_gives_pass_k_of_the_plain_sampler():
    kwargs = dict(mini_repeat_count=2, batch_size=3, repeat_count=1, seed=7)
    plain = RepeatSampler(list(range(10)), **kwargs)
    passes = [list(plain) for _ in range(4)]
    assert passes[0] != passes[1]
    replay = EpochReplaySampler(list(range(10)), **kwargs)
    for epoch in (2, 0, 3, 1):  # any order: a fresh sampler after a resume starts at epoch k
        replay.set_epoch(epoch)
        assert list(replay) == passes[epoch]
    fresh = EpochReplaySampler(list(range(10)), **kwargs)  # no set_epoch: plain behaviour
    assert [list(fresh) for _ in range(4)] == passes


class KeepCheckpoints(TrainerCallback):
    """Copies each checkpoint away as it is written (save_total_limit would delete it)."""

    def __init__(self, folder):
        self.folder = Path(folder)

    def on_save(self, args, state, control, **kwargs):
        name = f"checkpoint-{state.global_step}"
        shutil.copytree(Path(args.output_dir) / name, self.folder / name)


def test_a_resumed_run_matches_the_uninterrupted_one(tiny_policy_dir, tmp_path):
    rows = read_rows(ROOT / "data" / "grpo_train.jsonl")[:8]  # 2 prompts a step: 4 steps a pass
    params = parse_params(
        {
            "train": {
                "grpo": {
                    "num_generations": 4,
                    "per_device_train_batch_size": 8,
                    "max_completion_length": 6,
                },
                "beta_schedule": {
                    "kind": "adaptive",
                    "beta_start": 0.02,
                    "target_kl": 0.0005,
                    "horizon": 5,
                },
            }
        }
    )
    params.rewards.weights = [1.0, 0.2, 0.5]

    def funcs():  # the untrained policy never scores: a reward that varies with its text
        odd = RewardFunction("odd_text", lambda text, verifier, n: float(sum(map(ord, text)) % 2))
        return [*build_reward_funcs(params.rewards), odd]

    def steps(trainer, after=0):
        return [
            {k: v for k, v in e.items() if k not in TIMING_KEYS}
            for e in trainer.state.log_history
            if "loss" in e and e["step"] > after
        ]

    full = run_grpo(
        params,
        rows,
        str(tiny_policy_dir),
        tmp_path / "full",
        max_steps=7,
        save_steps=2,
        reward_funcs=funcs(),
        callbacks=[KeepCheckpoints(tmp_path / "kept")],
    )
    for kill in (4, 6):  # the end of the first pass; inside the second
        resumed = run_grpo(
            params,
            rows,
            str(tiny_policy_dir),
            tmp_path / f"from{kill}",
            max_steps=7,
            save_steps=2,
            reward_funcs=funcs(),
            resume_from=str(tmp_path / "kept" / f"checkpoint-{kill}"),
        )
        assert steps(resumed, kill) == steps(full, kill)
        for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()):
            assert torch.equal(a, b)
