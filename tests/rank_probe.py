"""Run in every rank by tests/test_multiprocess.py (under `accelerate launch`, 2 CPU processes): a
short GRPO run of the pipeline's own trainer that records, per rank and step, what steers training
(the beta in force, the running-mean baseline and the rewards it was computed from) and the reward
failure counts, into OUT/rank<N>.json. With `dynamic`: a run with dynamic sampling in which rank 1
needs more rounds than rank 0, recording each rank's rounds and kept share per step. With
`guided`: off-policy guidance, recording which rows of each batch hold a guide, and which.

    accelerate launch --multi_gpu --num_processes 2 tests/rank_probe.py OUT POLICY [dynamic|guided]
"""

import json
import sys
from pathlib import Path

from transformers import TrainerCallback

from rlvr.data.rows import read_rows
from rlvr.grpo.distributed import end_rank, rank, start_rank, sum_over_ranks
from rlvr.grpo.run import run_grpo
from rlvr.params.config import parse_params
from rlvr.rewards.registry import RewardFunction, build_reward_funcs

ROOT = Path(__file__).resolve().parents[1]
PARAMS = {
    "train": {
        "advantage": "running_mean",
        "beta_schedule": {"kind": "adaptive", "beta_start": 0.05, "target_kl": 0.001, "horizon": 2},
        "grpo": {
            "num_generations": 4,
            "per_device_train_batch_size": 8,
            "max_completion_length": 6,
            "learning_rate": 1e-3,
        },
    }
}
STEPS = 6


class Recorder(TrainerCallback):
    """Per step: the beta in force, the running-mean baseline after the step's batch, how many
    rewards that batch's baseline saw."""

    def __init__(self) -> None:
        self.trainer = None
        self.steps: list[dict] = []

    def on_step_end(self, args, state, control, **kwargs):
        trainer = self.trainer
        self.steps.append(
            {
                "step": state.global_step,
                "beta": float(trainer.beta),
                "running_mean": trainer.running_mean.value,
                "rewards_seen": len(trainer._last_rewards_per_func),
            }
        )


def bound(recorder):
    """The recorder, given the trainer that run_grpo builds next (it reads the trainer's state)."""
    import rlvr.grpo.run as run

    build = run.build_trainer

    def build_and_bind(*args, **kwargs):
        recorder.trainer = build(*args, **kwargs)
        return recorder.trainer

    run.build_trainer = build_and_bind
    return recorder


def flaky(text, verifier, n_tokens):
    """Raises on a third of the rows; elsewhere the completion's length, so that even an untrained
    policy's rewards differ from rank to rank (a baseline computed per rank would show it)."""
    if verifier["target"] % 3 == 0:
        raise ValueError("flaky verifier")
    return len(text) / 6


def main(out: str, policy: str) -> None:
    start_rank("probe", use_cpu=True)
    params = parse_params(PARAMS)
    rows = read_rows(ROOT / "data" / "grpo_train.jsonl")[:16]
    funcs = [*build_reward_funcs(params.rewards), RewardFunction("flaky", flaky)]
    params.rewards.weights = [1.0, 0.2, 1.0]  # one weight per function, the flaky one included
    recorder = bound(Recorder())
    trainer = run_grpo(
        params,
        rows,
        policy,
        Path(out) / f"scratch{rank()}",
        STEPS,
        reward_funcs=funcs,
        callbacks=[recorder],
    )
    logged = [e.get("rewards/flaky/failures") for e in trainer.state.log_history if "loss" in e]
    local = funcs[2].failures
    (Path(out) / f"rank{rank()}.json").write_text(
        json.dumps(
            {
                "steps": recorder.steps,
                "local_failures": local,
                "summed_failures": sum_over_ranks({"flaky": local})["flaky"],
                "logged_failures": logged,
                "num_processes": trainer.accelerator.num_processes,
            }
        )
    )


class DynamicRecorder(TrainerCallback):
    """Per step: this rank's dynamic-sampling rounds, kept share and KL over the first batch
    (before the log clears them)."""

    def __init__(self) -> None:
        self.trainer = None
        self.steps: list[dict] = []

    def on_step_end(self, args, state, control, **kwargs):
        metrics = self.trainer._metrics["train"]
        self.steps.append(
            {
                "step": state.global_step,
                "rounds": list(metrics["dynamic_sampling/rounds"]),
                "kept_share": list(metrics["dynamic_sampling/kept_share"]),
                "kl_first_batch": list(metrics["dynamic_sampling/kl_first_batch"]),
            }
        )


def main_dynamic(out: str, policy: str) -> None:
    start_rank("probe", use_cpu=True)
    params = parse_params(
        {
            "train": {
                "grpo": PARAMS["train"]["grpo"],
                "dynamic_sampling": True,
                "max_sampling_rounds": 4,
            }
        }
    )
    params.rewards.weights = [1.0]
    rows = read_rows(ROOT / "data" / "grpo_train.jsonl")[:16]
    calls = iter(range(10**9))

    def uneven(text, verifier, n_tokens):
        """Spread in every group on rank 0; on rank 1 only for rows with an odd target."""
        return float(next(calls) % 2) if rank() == 0 or verifier["target"] % 2 else 0.5

    recorder = bound(DynamicRecorder())
    run_grpo(
        params,
        rows,
        policy,
        Path(out) / f"scratch{rank()}",
        STEPS,
        reward_funcs=[RewardFunction("uneven", uneven)],
        callbacks=[recorder],
        dynamic_sampling=True,
    )
    (Path(out) / f"rank{rank()}.json").write_text(json.dumps({"steps": recorder.steps}))


GUIDES = ["7*6", "6*7"]  # the only correct answers: the tiny policy never samples them


def main_guided(out: str, policy: str) -> None:
    """Off-policy guidance (train.guidance unsolved) over 2 ranks of 8 completions each, groups
    of 4. Records each scored batch in the order it was generated: row ids, which rows hold a
    guide, the completions' text."""
    start_rank("probe", use_cpu=True)
    params = parse_params(
        {
            "train": {
                "grpo": PARAMS["train"]["grpo"],
                "guidance": "unsolved",
                "guides": "reports/verified",
            }
        }
    )
    params.rewards.weights = [1.0]
    rows = read_rows(ROOT / "data" / "grpo_train.jsonl")[:16]
    batches = []

    class Wrap:  # run_grpo builds the trainer: record what its _score_batch returns
        trainer = None

    def record(trainer):
        score = trainer._score_batch

        def recorded(inputs):
            output = score(inputs)
            batches.append(
                {
                    "step": trainer.state.global_step,
                    "ids": [x["id"] for x in inputs],
                    "guided": output["guided"].tolist(),
                    "texts": trainer.processing_class.batch_decode(
                        output["completion_ids"], skip_special_tokens=True
                    ),
                }
            )
            return output

        trainer._score_batch = recorded
        return trainer

    import rlvr.grpo.run as run

    build = run.build_trainer
    run.build_trainer = lambda *args, **kwargs: record(build(*args, **kwargs))
    trainer = run_grpo(
        params,
        rows,
        policy,
        Path(out) / f"scratch{rank()}",
        3,
        reward_funcs=[RewardFunction("correctness", lambda t, v, n: float(t.strip() in GUIDES))],
        guides={r.id: GUIDES for r in rows},
    )
    shares = [e.get("guidance/guided_share") for e in trainer.state.log_history if "loss" in e]
    (Path(out) / f"rank{rank()}.json").write_text(
        json.dumps({"batches": batches, "shares": shares, "seed": params.seed})
    )


if __name__ == "__main__":
    if sys.argv[3:] == ["dynamic"]:
        main_dynamic(*sys.argv[1:3])
    elif sys.argv[3:] == ["guided"]:
        main_guided(*sys.argv[1:3])
    else:
        main(*sys.argv[1:])
    end_rank()  # as a stage's rank does (rlvr.pipeline.stage.run_stage)
