"""Every metric name a GRPO run logs, in one place: the trainer and callbacks write them; the
console, plots, alarms, smoke checks, report and bench read them. TRL's names are TRL 1.16's
(GRPOTrainer._generate_and_score_completions and compute_loss log them); tests/test_trl_contract.py
checks them against a real step."""

from __future__ import annotations

# --- logged by TRL's GRPOTrainer (trl==1.16.0) every step
LOSS = "loss"
REWARD = "reward"
KL = "kl"  # k3, per token, over the batch the loss sees
GRAD_NORM = "grad_norm"
ENTROPY = "entropy"
COMPLETION_LENGTH = "completions/mean_length"
NO_SPREAD_SHARE = "frac_reward_zero_std"  # share of groups whose G rewards are all equal
REWARD_STD = "reward_std"  # the std of the G rewards within a group, averaged over the groups
MIN_LENGTH = "completions/min_length"  # tokens, the step's shortest completion
MAX_LENGTH = "completions/max_length"  # tokens, the step's longest completion
TRUNCATED_SHARE = "completions/clipped_ratio"  # share cut at max_completion_length (no EOS)
CLIP_RATIO = "clip_ratio/region_mean"  # share of tokens PPO's clip acted on
NUM_TOKENS = "num_tokens"  # prompt + completion tokens so far
STEP_TIME = "step_time"
TRAIN_RUNTIME = "train_runtime"  # logged once, at the end of train()


def reward_mean(name: str) -> str:
    """TRL's per-reward-function mean: rewards/<name>/mean.

    >>> reward_mean("correctness")
    'rewards/correctness/mean'
    """
    return f"rewards/{name}/mean"


FAILURES_SUFFIX = "/failures"


def reward_failures(name: str) -> str:
    """The pipeline's count of a reward function's failures (it scored None), per step.

    >>> reward_failures("correctness")
    'rewards/correctness/failures'
    """
    return f"rewards/{name}{FAILURES_SUFFIX}"


CORRECTNESS_REWARD = "correctness"  # the reward function that is the verifier's verdict
CORRECTNESS = reward_mean(CORRECTNESS_REWARD)
FORMAT_REWARD = "format"  # the reward function of rewards.format_pattern
FORMAT = reward_mean(FORMAT_REWARD)
LENGTH = reward_mean("length")

# --- logged by the pipeline's trainer and callbacks
BETA = "beta"  # the KL coefficient in force at the step (callbacks.BetaScheduleCallback)
RUNNING_MEAN_BASELINE = "running_mean_baseline"  # train.advantage: running_mean
SAMPLING_ROUNDS = "dynamic_sampling/rounds"
KEPT_SHARE = "dynamic_sampling/kept_share"  # kept groups / generated groups
OVERSAMPLING = "dynamic_sampling/oversampling"  # generated groups / groups a batch holds
# train.resample_unsolved: groups sampled again (no correct answer) / groups a batch holds
RESAMPLED_UNSOLVED = "dynamic_sampling/resampled_unsolved"
# The KL over each step's first batch, every group kept or dropped (rlvr.core.stats.drift_kl says why)
FIRST_BATCH_KL = "dynamic_sampling/kl_first_batch"
# completions sampled so far, every rank's and every sampling round's (a running total)
SAMPLED_COMPLETIONS = "sampling/completions"
# not a metric: a log-history entry of its own holding one group of completions, at a few steps
COMPLETIONS_SAMPLE = "completions_sample"
GUIDED_SHARE = "guidance/guided_share"  # train.guidance: guides / completions, each round
GUIDED_ADVANTAGE = "guidance/guide_advantage"  # the guides' mean advantage, each micro-batch
GUIDE_REWARD = "guidance/guide_reward"  # the guides' mean reward, each sampling round
ON_POLICY_REWARD = "guidance/on_policy_reward"  # the sampled answers' mean reward (no guide)

# Keys that measure time or throughput: kept out of the metric files, which must be identical
# between two runs with the same seed.
TIMING_KEYS = (
    STEP_TIME,
    TRAIN_RUNTIME,
    "train_samples_per_second",
    "train_steps_per_second",
    "total_flos",
)
# A NaN or Inf in any of these stops the run (callbacks.FiniteGuardCallback).
GUARDED_KEYS = (LOSS, KL, FIRST_BATCH_KL, GRAD_NORM)

# --- the validation rows, scored in the Trainer's evaluation loop (rlvr.audit.evaluation)
VALIDATION_PREFIX = "eval_"  # the Trainer's prefix for evaluation metrics (metric_for_best_model)
VALIDATION_CURVE_PREFIX = "val/"  # their DVCLive curves: val/mean_reward, ...
MEAN_REWARD = "mean_reward"
GREEDY_SUCCESS = "greedy_success"
SAMPLED_SUCCESS = "sampled_success"
MEAN_LENGTH = "mean_length"
TAG_SUCCESS_PREFIX = "success/"  # success/<tag>
PASS_AT_PREFIX = "pass_at_"  # pass_at_<k>


def pass_at(k: int) -> str:
    """The validation score pass@k.

    >>> pass_at(4)
    'pass_at_4'
    """
    return f"{PASS_AT_PREFIX}{k}"
