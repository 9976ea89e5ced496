"""The scorer training runs on the validation rows every train.eval_steps steps: the policy
sampled and scored as `evaluate` scores a split (rlvr.policy.sampling), leaving training's RNG and
mode as it found them. rlvr.pipeline.training builds it and hands it to the trainer
(rlvr.grpo.validation.Validation)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from rlvr.core.metric_keys import (
    GREEDY_SUCCESS,
    MEAN_LENGTH,
    MEAN_REWARD,
    SAMPLED_SUCCESS,
    TAG_SUCCESS_PREFIX,
    pass_at,
)
from rlvr.core.stats import pass_at_k_curve
from rlvr.data.rows import Row
from rlvr.grpo.validation import Validation
from rlvr.policy.sampling import (
    SampleSettings,
    greedy_settings,
    prompt_template,
    rollout_settings,
    score_rows,
    summarize,
    tag_success,
)
from rlvr.rewards.registry import build_reward_funcs, normalized_weights


def training_validation(params, rows: Sequence[Row]) -> Validation:
    """How training scores the validation rows (rlvr.grpo.run_grpo runs it): as `evaluate` scores
    a split, with its k and seed, GRPO's temperature and length, the recipe's weights, and reward
    functions of its own (training's failure counts stay training's)."""
    sampled = rollout_settings(params, n=params.evaluate.samples, seed=params.evaluate.seed)
    weights = normalized_weights(params.rewards.weights)
    funcs = build_reward_funcs(params.rewards)
    template = prompt_template(params.model)

    def score(model, tokenizer) -> dict[str, float]:
        return validation_scores(model, tokenizer, rows, funcs, weights, sampled, template)

    return Validation(rows=list(rows), score=score)


def validation_scores(
    model,
    tokenizer,
    rows: Sequence[Row],
    reward_funcs,
    weights,
    sampled: SampleSettings,
    template: Mapping | None = None,
) -> dict[str, float]:
    """The policy on the validation rows, as `evaluate` scores a split: mean reward of
    `sampled.n` seeded samples per prompt, sampled and greedy success, mean length, pass@k for
    every k up to n (`pass_at_<k>`) and the success on each tag's rows (`success/<tag>`), so the
    curves show the step where a kind of problem starts to die.

    Runs in the middle of training, so it leaves training exactly as it found it: torch's RNG
    state is restored afterwards (training samples the same rollouts with or without it) and the
    model goes back to train mode.
    """
    greedy = greedy_settings(sampled)
    was_training = model.training
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=devices):
            scored = score_rows(model, tokenizer, rows, reward_funcs, weights, sampled, template)
            greedy_summary = summarize(
                score_rows(model, tokenizer, rows, reward_funcs, weights, greedy, template)
            )
    finally:
        model.train(was_training)
    samples = summarize(scored)
    curve = pass_at_k_curve([sum(s.correct) for s in scored], sampled.n)
    return {
        MEAN_REWARD: samples["mean_reward"],
        GREEDY_SUCCESS: greedy_summary.get("success", math.nan),
        SAMPLED_SUCCESS: samples.get("success", math.nan),
        MEAN_LENGTH: samples["mean_length"],
        **{pass_at(k): value for k, value in curve.items()},
        **{TAG_SUCCESS_PREFIX + tag: value for tag, value in tag_success(scored).items()},
    }
