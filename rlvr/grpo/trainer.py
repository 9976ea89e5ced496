"""PipelineGRPOTrainer: TRL's GRPOTrainer with dynamic sampling, the running-mean ablation, the
forgetting remedies (pass@k advantages, the unlikeliness reward, weighted positives, unsolved
prompts sampled again), off-policy guidance (LUFFY: verified answers in the groups), per-batch
group checks, the beta in force logged every step, and the validation rows scored in the
Trainer's evaluation loop (step 0 and every train.eval_steps; it also keeps the best checkpoint
and stops early). Its knobs ride on rlvr.grpo.config.PipelineGRPOConfig (self.args.*).

TRL contract. These privates of trl==1.16.0 (GRPOTrainer) and transformers==5.24.0 (Trainer)
are overridden, called or read here (requirements.lock pins both). When either changes, the test
named fails; tests/test_trl_contract.py checks the signatures, names and file layout below against
the installed libraries, and that every test named here exists.

| private (owner)                                 | use                 | guarded by |
|-------------------------------------------------|---------------------|------------|
| _generate_and_score_completions (trl)           | override            | test_dynamic_sampling.py::test_one_round_filters_and_the_loss_sees_the_short_batch |
| _calculate_rewards (trl): rewards of every rank, gathered in rank order | override, read | test_dynamic_sampling.py::test_a_batch_of_all_equal_groups_is_resampled_until_full |
| _log_metric (trl)                               | override            | test_grpo_run.py::test_a_raising_reward_scores_none_counts_it_and_training_goes_on |
| _get_train_sampler (trl)                        | override            | test_resume.py::test_a_resumed_run_matches_the_uninterrupted_one |
| _run_epoch (transformers), its epoch kwarg      | override            | test_multiprocess.py::test_kill_9_of_the_whole_run_resumes_to_the_uninterrupted_end |
| _save_checkpoint (trl, then transformers)       | override            | test_grpo_run.py::test_no_group_norm_ablation_uses_one_running_mean_baseline |
| log (trl): folds _metrics["train"] into the logs | override           | test_grpo_run.py::test_beta_in_force_is_logged_every_step |
| evaluate (transformers): Trainer.log and callback_handler.on_evaluate called here, metric_for_best_model read by _determine_best_metric | override | test_validation_during_training.py::test_patience_stops_after_that_many_validations_without_a_new_best |
| save_model (transformers): training_args.bin    | override            | test_grpo_run.py::test_no_group_norm_ablation_uses_one_running_mean_baseline |
| _metrics["train"] (trl), a list per key         | read, appended to   | test_dynamic_sampling.py::test_a_run_with_dynamic_sampling_logs_it_and_stays_finite |
| _get_per_token_logps_and_entropies (trl): returns (per-token log-probs, entropies, aux loss); _compute_loss calls it once, for the policy | called, override (returns kept) | test_guidance.py::test_on_a_guides_tokens_the_gradient_is_the_shaped_terms_alone |
| _generate (trl): returns (prompt_ids, completion_ids, tool_mask, completions, logprobs, ...), lists per completion, before TRL pads, scores and computes advantages | override | test_guidance.py::test_a_guide_replaces_the_last_answer_of_each_unsolved_group |
| _compute_loss (trl): its loss mask (completion_mask x tool_mask; tool_mask not in the attention mask) and its normalisers per loss_type (grpo, dr_grpo, dapo: num_items_in_batch, current_gradient_accumulation_steps, steps_per_generation); _tokenizer, max_completion_length | override, copied, read | test_guidance.py::test_on_a_guides_tokens_the_gradient_is_the_shaped_terms_alone |
| trl.models.utils.disable_gradient_checkpointing | called              | test_dynamic_sampling.py::test_measuring_the_first_batch_kl_leaves_training_unchanged |
| trl.trainer.utils.RepeatSampler and its fields  | subclassed          | test_resume.py::test_epoch_replay_sampler_gives_pass_k_of_the_plain_sampler |
| the scored batch's keys (prompt_ids, prompt_mask, completion_ids, completion_mask, advantages, num_items_in_batch, ref_per_token_logps, old_per_token_logps, tool_mask); ours added: guided | read, cut, merged | test_dynamic_sampling.py::test_merged_groups_are_padded_like_trl |
| reward_weights, num_generations, beta (trl)     | read, beta written  | test_grpo_run.py::test_beta_in_force_is_logged_every_step |
| training_step (trl); _step, num_iterations and _prepare_inputs' rule: generate when _step % (steps_per_generation x num_iterations) == 0 | override, read | test_dynamic_sampling.py::test_with_two_updates_per_batch_the_first_batch_kl_is_measured_every_step |
| the KL's importance weighting (use_bias_correction_kl, importance_sampling_level) | copied | test_dynamic_sampling.py::test_with_two_updates_per_batch_the_first_batch_kl_is_measured_every_step |
| reward_func_names, scale_rewards and the advantage formula (sum_then_normalize), reproduced by rlvr/rewards/grpo_math.py's group_advantages | read, copied | test_remedies.py::test_group_advantages_are_trls |
| checkpoint-N, trainer_state.json, rng_state.pth / rng_state_N.pth (transformers) | read (rlvr/grpo/checkpoints.py) | test_training.py::test_a_checkpoint_of_two_ranks_needs_both_rng_states |
| ProgressCallback.training_bar (transformers)    | read (rlvr/core/console.py) | test_grpo_run.py::test_the_console_shows_one_compact_line_every_log_every_steps |
| the logged metric names (rlvr.core.metric_keys) | read                | test_trl_contract.py::test_a_step_logs_every_trl_metric_key_we_read |
| _logs (trl): the last generated batch's prompt, completion, rewards per function, advantages, every rank's | read | test_grpo_run.py::test_a_group_of_completions_is_recorded_at_the_first_every_100th_and_last_step |
"""  # noqa: E501 (one-line outputs and tables)

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer
from transformers.trainer import TRAINING_ARGS_NAME
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import RepeatSampler

from rlvr.core.metric_keys import (
    BETA,
    COMPLETIONS_SAMPLE,
    CORRECTNESS_REWARD,
    FAILURES_SUFFIX,
    FIRST_BATCH_KL,
    GUIDE_REWARD,
    GUIDED_ADVANTAGE,
    GUIDED_SHARE,
    KEPT_SHARE,
    LOSS,
    ON_POLICY_REWARD,
    OVERSAMPLING,
    RESAMPLED_UNSOLVED,
    RUNNING_MEAN_BASELINE,
    SAMPLED_COMPLETIONS,
    SAMPLING_ROUNDS,
)
from rlvr.grpo.advantages import (
    RunningMeanBaseline,
    group_checks,
    pass_at_k_advantages,
    unlikeliness_penalties,
    weight_positive,
)
from rlvr.grpo.callbacks import validation_entry
from rlvr.grpo.checkpoints import RUNNING_MEAN_FILE, EpochReplaySampler
from rlvr.grpo.config import PipelineGRPOConfig, as_trl_config
from rlvr.grpo.dynamic_sampling import local_group_spread, loss_mask, merge_groups, select_groups
from rlvr.grpo.guidance import (
    GUIDED,
    guide_ordinals,
    guided_rows,
    guided_token_loss,
    local_rows,
    pick_guides,
    rescale_guided_groups,
)
from rlvr.rewards.grpo_math import group_advantages, k3_kl

SAMPLE_EVERY = 100  # a group of completions is recorded at step 1, every 100th and the last


def _text(value) -> str:
    """A prompt or completion as text: a conversation's last message, or the string itself.

    >>> _text("2+3"), _text([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "5"}])
    ('2+3', '5')
    """
    if isinstance(value, list):
        return str(value[-1].get("content", "")) if value else ""
    return str(value)


class PipelineGRPOTrainer(GRPOTrainer):
    """GRPOTrainer that logs the beta in force, records per-batch group diagnostics, runs DAPO's
    dynamic sampling (args.max_sampling_rounds) and, for the no-group-norm ablation
    (args.advantage running_mean), replaces TRL's group advantages by a running-mean baseline.
    `validation(model, tokenizer)` scores the validation rows in the evaluation loop."""

    def __init__(
        self,
        *args,
        validation: Callable[[Any, Any], dict[str, float]] | None = None,
        guides: Mapping[str, Sequence[str]] | None = None,
        **kwargs,
    ) -> None:
        if not isinstance(kwargs.get("args"), PipelineGRPOConfig):
            raise TypeError(
                "PipelineGRPOTrainer needs args=PipelineGRPOConfig(...) (its knobs: "
                "rlvr.grpo.config.grpo_config builds one from params)"
            )
        self._epoch_sampler: EpochReplaySampler | None = None  # set while super() builds it
        super().__init__(*args, **kwargs)
        self.running_mean = (
            RunningMeanBaseline(self.args.running_mean_momentum)
            if self.args.advantage == "running_mean"
            else None
        )
        self.batch_checks: list[dict] = []
        self.validation = validation
        self.validation_seconds = 0.0
        self._last_rewards_per_func = None
        self._kl_batch = None  # dynamic sampling: the last generated first batch
        self._signal_basis: list[float] = []  # _score_batch: what the advantages come from
        # off-policy guidance: each row id's verified answers (the same on every rank)
        self.guides = {str(k): list(v) for k, v in (guides or {}).items()}
        if self.args.guidance != "off" and not any(self.guides.values()):
            raise ValueError(
                f"train.guidance {self.args.guidance!r} needs guides: no row has a verified "
                "answer (stage rft kept none); set train.guidance off"
            )
        self._scoring: list[dict] | None = None  # the rows _generate samples for (guidance)
        self._guided: list[bool] | None = None  # which of them a guide replaced
        self._captured_logps: list | None = None  # _compute_loss: the policy's log-probs
        self._sampled: int | None = None  # completions sampled so far (_count_sampled)

    def resume_running_mean(self, checkpoint: str | Path) -> None:
        """The running-mean baseline as the checkpoint saved it (_save_checkpoint)."""
        if self.running_mean is not None:
            saved = json.loads((Path(checkpoint) / RUNNING_MEAN_FILE).read_text())
            self.running_mean.value = saved["value"]

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval"):
        """The validation rows scored as the evaluate stage scores a split (seeded samples and
        greedy: rlvr.grpo.scoring.validation_scores), not TRL's evaluation loss. Every rank scores
        the same rows with the same weights and seed, so the best step and an early stop are the
        same on all of them."""
        if self.validation is None:
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        step = self.state.global_step
        scored = next(
            (e for e in self.state.log_history if e.get("step") == step and validation_entry(e)),
            None,
        )
        if scored is not None:  # a resumed run's eval_on_start: scored before the checkpoint
            return {k: v for k, v in scored.items() if k.startswith(metric_key_prefix + "_")}
        started = time.perf_counter()
        scores = self.validation(self.accelerator.unwrap_model(self.model), self.processing_class)
        self.validation_seconds += time.perf_counter() - started
        metrics = {f"{metric_key_prefix}_{key}": value for key, value in scores.items()}
        Trainer.log(self, metrics)  # not TRL's log: that would fold in its training metrics
        self.control = self.callback_handler.on_evaluate(
            self.args, self.state, self.control, metrics
        )
        return metrics

    def _get_train_sampler(self, dataset=None):
        sampler = super()._get_train_sampler(dataset)
        if type(sampler) is not RepeatSampler:
            return sampler
        self._epoch_sampler = EpochReplaySampler(
            sampler.data_source,
            mini_repeat_count=sampler.mini_repeat_count,
            batch_size=sampler.batch_size,
            repeat_count=sampler.repeat_count,
            shuffle=sampler.shuffle,
            seed=sampler.seed,
        )
        return self._epoch_sampler

    def _run_epoch(self, *args, **kwargs):
        # Tell the sampler its pass here: with several processes, a resume inside a pass wraps it
        # (accelerate's skip_first_batches around BatchSamplerShard) deeper than the Trainer's
        # and accelerate's set_epoch reach, and pass k would replay pass 0's permutation.
        if self._epoch_sampler is not None:
            self._epoch_sampler.set_epoch(kwargs["epoch"])
        return super()._run_epoch(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _correct(self) -> list[bool]:
        """Whether each completion of the last scored batch, over all ranks, is correct: its
        correctness reward is 1 (check_params makes the remedies that ask need that reward)."""
        column = self._last_rewards_per_func[:, self.reward_func_names.index(CORRECTNESS_REWARD)]
        return (torch.nan_to_num(column, nan=0.0) >= 1.0 - 1e-6).tolist()

    def _reward_totals(self):
        """The weighted reward of every completion of the last scored batch, over all ranks
        (TRL gathers them); NaN where every reward function returned None."""
        per_func = self._last_rewards_per_func
        weights = self.reward_weights.to(per_func.device).unsqueeze(0)
        totals = (per_func * weights).nansum(dim=1)
        totals[torch.isnan(per_func).all(dim=1)] = torch.nan
        return totals

    def _generate_and_score_completions(self, inputs):
        if self.args.max_sampling_rounds and self.model.training:
            return self._dynamically_sampled(inputs)
        return self._score_batch(inputs)

    def _dynamically_sampled(self, inputs):
        """DAPO's dynamic sampling: fill the batch only with groups whose G rewards are not all
        equal (the others give no gradient), sampling more prompts for up to
        args.max_sampling_rounds rounds; if it stays short, the loss sees the kept groups only. With
        several processes every rank runs the same number of rounds (generation gathers the
        rewards across ranks): the loop stops when no rank is short; then every rank keeps as
        many groups as the one that kept fewest."""
        G = self.num_generations
        needed = len(inputs) // G
        parts, kept, generated, batch, first = [], 0, 0, inputs, None
        rounds, resampled = 0, 0
        for rounds in range(1, self.args.max_sampling_rounds + 1):
            output = self._score_batch(batch)
            first = first if first is not None else output
            signal = local_group_spread(
                torch.tensor(self._signal_basis), len(batch), G, self.accelerator.process_index
            )
            generated += len(signal)
            chosen = [g for g, has in enumerate(signal) if has][: needed - kept]
            if chosen:
                parts.append(select_groups(output, chosen, G))
                kept += len(chosen)
            short = torch.tensor([needed - kept], device=self.accelerator.device)
            if (
                self.accelerator.gather(short).sum().item() == 0
                or rounds == self.args.max_sampling_rounds
            ):
                break
            again = self._unsolved_prompts(batch, chosen) if self.args.resample_unsolved else []
            resampled += len(again) // G
            batch = again[: needed * G] + self._more_prompts(
                needed - len(again[: needed * G]) // G, rounds
            )
        # Every rank trains on as many groups as the rank that kept fewest (TRL's loss gathers
        # per-completion values, which needs equal batches); none kept anywhere: the first
        # batch, as without dynamic sampling.
        common = int(
            self.accelerator.gather(torch.tensor([kept], device=self.accelerator.device))
            .min()
            .item()
        )
        if common:
            merged = select_groups(
                merge_groups(parts, self.processing_class.pad_token_id), range(common), G
            )
        else:
            merged = first
        metrics = self._metrics["train"]
        metrics[SAMPLING_ROUNDS].append(float(rounds))
        metrics[KEPT_SHARE].append(common / generated)
        metrics[OVERSAMPLING].append(generated / needed)
        if self.args.resample_unsolved:
            metrics[RESAMPLED_UNSOLVED].append(resampled / needed)
        self._kl_batch = first
        self._log_first_batch_kl(first, fresh=False)
        merged["num_items_in_batch"] = self.accelerator.gather(loss_mask(merged).sum()).sum()
        return merged

    def training_step(self, model, inputs, num_items_in_batch=None):
        # With num_iterations > 1, TRL generates every num_iterations steps (dynamic sampling
        # needs steps_per_generation 1) and trains on its buffer in between: on those steps the
        # drift KL is measured on the stored first batch with the policy as it is now, so the
        # series the diagnosis reads has one value per step, whatever num_iterations.
        generate_every = self.args.steps_per_generation * self.num_iterations
        if (
            self.args.max_sampling_rounds
            and self._kl_batch is not None
            and self._step % generate_every != 0
        ):
            self._log_first_batch_kl(self._kl_batch, fresh=True)
        return super().training_step(model, inputs, num_items_in_batch)

    def _log_first_batch_kl(self, batch, fresh: bool) -> None:
        kl_sums = self._first_batch_kl_sums(batch, fresh)
        if kl_sums is not None:  # the same beta on every rank: all of them reduce, or none
            kl_sums = self.accelerator.reduce(kl_sums, reduction="sum")
            self._metrics["train"][FIRST_BATCH_KL].append(
                (kl_sums[0] / kl_sums[1].clamp(min=1.0)).item()
            )

    def _first_batch_kl_sums(self, output, fresh: bool = False):
        """This rank's (sum, token count) of the per-token k3 KL, current policy to reference,
        over every completion of the step's first scored batch, its groups kept or dropped: the
        batch a run without dynamic sampling trains on and measures TRL's kl over (stats.drift_kl
        says why). The later rounds' prompts add cost, not a truer figure. None when beta is 0 in
        force, as TRL then computes no reference log-probs and logs no KL. fresh: the batch was
        generated by an earlier policy (num_iterations > 1): the current policy's log-probs are
        computed anew, and each token's KL is weighted by the importance ratio of the current to
        the sampling policy, as TRL weights its own (use_bias_correction_kl, its default): the
        estimate of the current policy's KL from another policy's samples."""
        ref = output.get("ref_per_token_logps")
        if ref is None:
            return None
        mask = loss_mask(output)
        if GUIDED in output:  # a guide's tokens were not sampled: no KL estimate there
            mask = mask * ~output[GUIDED][:, None]
        logps = self._policy_token_logps(output, fresh)
        kl = k3_kl(logps, ref)
        old = output.get("old_per_token_logps")
        if fresh and old is not None and self.args.use_bias_correction_kl:
            log_ratio = logps - old
            if self.args.importance_sampling_level == "sequence":
                log_ratio = (log_ratio * mask).sum(-1, keepdim=True) / mask.sum(
                    -1, keepdim=True
                ).clamp(min=1.0)
            kl = kl * log_ratio.exp()
        return torch.stack([(kl * mask).sum(), mask.sum().float()])

    def _policy_token_logps(self, output, fresh: bool = False):
        """The current policy's per-token log-probs of a scored batch's completions: TRL's, when
        it computed them at generation (old_per_token_logps) and not `fresh`, else a forward pass
        without gradients, in the model's train mode as TRL's own; torch's RNG state is restored
        after it (dropout, e.g. LoRA's, would draw), so training samples the same rollouts with or
        without it."""
        logps = None if fresh else output.get("old_per_token_logps")
        if logps is not None:
            return logps
        completion = output["completion_ids"]
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with (
            torch.no_grad(),
            torch.random.fork_rng(devices=devices),
            disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs),
        ):
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model,
                torch.cat([output["prompt_ids"], completion], dim=1),
                torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1),
                completion.size(1),
                batch_size=self.args.per_device_train_batch_size,
            )
        return logps

    def _unsolved_prompts(self, batch: list[dict], chosen: list[int]) -> list[dict]:
        """train.resample_unsolved: this rank's prompts of `batch` whose group had no correct
        answer and was not kept, each repeated G times, to be sampled again."""
        G = self.num_generations
        n = len(batch)
        correct = self._correct()[
            self.accelerator.process_index * n : (self.accelerator.process_index + 1) * n
        ]
        return [
            batch[g * G]
            for g in range(n // G)
            if g not in chosen and not any(correct[g * G : (g + 1) * G])
            for _ in range(G)
        ]

    def _more_prompts(self, count: int, round_: int) -> list[dict]:
        """`count` training rows, each repeated G times, drawn by a generator seeded by the seed,
        the step, the rank and the round: the same rows after a resume, with no state to save."""
        rng = random.Random(
            f"{self.args.seed}-{self.state.global_step}-{self.accelerator.process_index}-{round_}"
        )
        rows = rng.sample(range(len(self.train_dataset)), min(count, len(self.train_dataset)))
        return [self.train_dataset[i] for i in rows for _ in range(self.num_generations)]

    def _score_batch(self, inputs):
        """TRL's scored batch, its advantages replaced where a pipeline knob asks: the
        running-mean ablation, pass@k advantages, the unlikeliness reward; then the positive
        ones weighted (train.positive_weight). The group checks see the advantages before that
        weighting, which alone leaves a group's mean below 0 by design."""
        self._scoring, self._guided = inputs, None
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._scoring = None
        if self._guided is not None:
            output[GUIDED] = torch.tensor(self._guided, device=output["advantages"].device)
        advantages = None  # every rank's, in rank order
        # what the advantages are computed from, every rank's: a group where it is all equal
        # carries no gradient (dynamic sampling drops it)
        self._signal_basis = self._shaped_totals(output)
        if self.running_mean is not None:
            advantages = self.running_mean.advantages(self._signal_basis)
            self._metrics["train"][RUNNING_MEAN_BASELINE].append(float(self.running_mean.value))
        elif self.args.advantage == "pass_at_k":
            self._signal_basis = [float(c) for c in self._correct()]
            advantages = pass_at_k_advantages(
                self._correct(), self.num_generations, self.args.pass_at_k
            )
        elif self.args.unlikeliness:
            advantages = group_advantages(
                self._signal_basis, self.num_generations, self.scale_rewards
            )
        guided = None  # every rank's guide flags
        if GUIDED in output:
            guided = self.accelerator.gather(output[GUIDED].long()).bool()  # gloo: no bool
        if guided is not None and not self.args.guidance_std and self.scale_rewards != "none":
            # LUFFY's released setting: the guided groups' advantages without the std
            if advantages is None:
                advantages = self.accelerator.gather(output["advantages"]).tolist()
            advantages = rescale_guided_groups(
                advantages, self._signal_basis, guided.tolist(), self.num_generations, "none"
            )
        if advantages is not None:
            n = len(inputs)
            local = advantages[
                self.accelerator.process_index * n : (self.accelerator.process_index + 1) * n
            ]
            output["advantages"] = torch.tensor(
                local, dtype=output["advantages"].dtype, device=output["advantages"].device
            )
        self.batch_checks.append(
            group_checks(
                [x["prompt"] for x in inputs], output["advantages"].tolist(), self.num_generations
            )
        )
        if self.args.positive_weight != 1:
            output["advantages"] = torch.tensor(
                weight_positive(output["advantages"].tolist(), self.args.positive_weight),
                dtype=output["advantages"].dtype,
                device=output["advantages"].device,
            )
        if guided is not None:  # the guides' mean advantage and reward apart from the sampled
            values = self.accelerator.gather(output["advantages"])
            totals = self._reward_totals().to(guided.device)
            metrics = self._metrics["train"]
            metrics[ON_POLICY_REWARD].append(totals[~guided].nanmean().item())
            if guided.any():
                metrics[GUIDED_ADVANTAGE].append(values[guided].mean().item())
                metrics[GUIDE_REWARD].append(totals[guided].nanmean().item())
        return output

    # ------------------------------------------------------------ off-policy guidance (LUFFY)

    def _generate(self, prompts):
        generated = super()._generate(prompts)
        if not self.model.training or self._scoring is None:
            return generated
        self._count_sampled(len(generated[1]))
        if self.args.guidance == "off":
            return generated
        prompt_ids, completion_ids, tool_mask, completions, logprobs, *rest = generated
        completion_ids, completions = list(completion_ids), list(completions)
        guided = self._place_guides(completions, completion_ids)
        for i, ids in guided.items():
            completion_ids[i] = ids
            text = self._tokenizer.decode(ids, skip_special_tokens=True)
            conversational = isinstance(completions[i], list)
            completions[i] = [{"role": "assistant", "content": text}] if conversational else text
            if logprobs is not None:  # no sampling log-probs: TRL reads None as NaN, unscored
                logprobs = list(logprobs)
                logprobs[i] = [None] * len(ids)
            if tool_mask is not None:
                tool_mask = list(tool_mask)
                tool_mask[i] = [1] * len(ids)
        self._guided = [i in guided for i in range(len(completions))]
        share = self.accelerator.gather(
            torch.tensor([len(guided)], device=self.accelerator.device)
        ).sum().item() / (len(completions) * self.accelerator.num_processes)
        self._metrics["train"][GUIDED_SHARE].append(share)
        return (prompt_ids, completion_ids, tool_mask, completions, logprobs, *rest)

    def _count_sampled(self, local: int) -> None:
        """Completions sampled so far, every rank's (they hold equal batches), logged as a running
        total, so the last step's value is the run's; a resumed run goes on from its history's."""
        if self._sampled is None:
            self._sampled = next(
                (
                    int(e[SAMPLED_COMPLETIONS])
                    for e in reversed(self.state.log_history)
                    if SAMPLED_COMPLETIONS in e
                ),
                0,
            )
        self._sampled += local * self.accelerator.num_processes
        self._metrics["train"][SAMPLED_COMPLETIONS] = [float(self._sampled)]

    def _place_guides(self, completions, completion_ids) -> dict[int, list[int]]:
        """Which of this rank's completions a guide replaces, and the guide's token ids (its
        text, then the end token; a guide longer than max_completion_length is not used). The
        rows come from every rank's verdicts (a group may span two ranks); the k-th guided row of
        a group takes the k-th of the prompt's answers in an order rotated by a hash of the seed,
        the step and the row id: distinct within a group, each rank the same for the same row;
        rows past the prompt's answers keep their sampled answers."""
        rows, n = self._scoring, len(completions)
        correct = [False] * n
        if self.args.guidance == "unsolved":
            verdict = self.reward_funcs[self.reward_func_names.index(CORRECTNESS_REWARD)]
            correct = [
                (verdict.peek(c, row.get("verifier"), len(ids)) or 0.0) >= 1.0 - 1e-6
                for c, row, ids in zip(completions, rows, completion_ids, strict=True)
            ]
        every = self.accelerator.gather(
            torch.tensor(correct, dtype=torch.long, device=self.accelerator.device)
        ).tolist()
        every_guided = guided_rows(
            [bool(c) for c in every],
            self.num_generations,
            self.args.guidance,
            self.args.guidance_fraction,
        )
        ordinals = guide_ordinals(every_guided, self.num_generations)
        start = self.accelerator.process_index * n
        guides = {}
        for i in local_rows(every_guided, n, self.accelerator.process_index):
            row_id = str(rows[i]["id"])
            answers = pick_guides(
                self.guides.get(row_id, []), row_id, self.args.seed, self.state.global_step
            )
            if ordinals[start + i] >= len(answers):  # fewer answers than guided rows: sampled
                continue
            ids = self._tokenizer(answers[ordinals[start + i]], add_special_tokens=False)[
                "input_ids"
            ]
            ids = [*ids, self._tokenizer.eos_token_id]
            if len(ids) <= self.max_completion_length:
                guides[i] = ids
        return guides

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._captured_logps is not None:  # inside _compute_loss on a guided batch
            self._captured_logps.append(out[0])
        return out

    def _compute_loss(self, model, inputs):
        """TRL's loss; on a batch with guides (LUFFY Eq. 6), TRL's clipped loss and KL term on the
        sampled answers' tokens alone (the guides' tokens left out of its loss mask, through
        tool_mask, which TRL multiplies into the loss mask but not the attention mask) plus the
        guides' shaped term -A x p / (p + gamma), importance weight at pi_phi = 1, no clip, no KL,
        normalised as TRL normalises its loss type, the guides' tokens counted in Z (the loss types
        guidance allows have normalisers that do not read the mask: grpo, dr_grpo, dapo). The
        policy's log-probs are the ones TRL's forward pass computed (one pass)."""
        guided = inputs.get(GUIDED)
        if guided is None or not bool(guided.any()):
            return super()._compute_loss(model, inputs)
        mask = loss_mask(inputs)
        on_policy = {
            **inputs,
            "advantages": inputs["advantages"].masked_fill(guided, 0.0),
            "tool_mask": mask * (~guided).to(mask.dtype)[:, None],
        }
        self._captured_logps = []
        try:
            loss = super()._compute_loss(model, on_policy)
            logps = self._captured_logps[0]
        finally:
            self._captured_logps = None
        term = (
            guided_token_loss(logps[guided], inputs["advantages"][guided], self.args.guidance_gamma)
            * mask[guided]
        )
        train = self.model.training
        accumulation = self.current_gradient_accumulation_steps if train else 1
        if self.loss_type == "dapo":
            normaliser = (
                inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            )
            if train:
                normaliser = normaliser * accumulation / self.args.steps_per_generation
            shaped = term.sum() / normaliser
        elif self.loss_type == "dr_grpo":
            shaped = term.sum() / (mask.size(0) * self.max_completion_length) / accumulation
        else:  # grpo: each sequence's mean, averaged over the micro-batch
            per_row = term.sum(-1) / mask[guided].sum(-1).clamp(min=1.0)
            shaped = per_row.sum() / mask.size(0) / accumulation
        # no collective call here: a rank whose micro-batch holds no guide took the branch above
        return loss + shaped

    def _shaped_totals(self, output) -> list[float]:
        """Every rank's weighted rewards of a scored batch; with the unlikeliness reward, each
        correct sample's correctness reward lowered by its penalty, ranked by the sequence
        log-probability of the policy that sampled it (one forward pass without gradients, as
        _first_batch_kl_sums)."""
        if not self.args.unlikeliness:
            return self._reward_totals().tolist()
        logps = self._policy_token_logps(output)
        sequence = self.accelerator.gather((logps * loss_mask(output)).sum(dim=1)).tolist()
        correct = self._correct()
        penalties = unlikeliness_penalties(
            correct, sequence, self.num_generations, self.args.unlikeliness
        )
        weight = float(self.reward_weights[self.reward_func_names.index(CORRECTNESS_REWARD)])
        return [t - weight * p for t, p in zip(self._reward_totals().tolist(), penalties)]

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        super().save_model(output_dir, _internal_call)
        # training_args.bin as TRL's own GRPOConfig: a saved folder (models/trained, a checkpoint)
        # loads where rlvr is not installed, and holds the bytes a plain GRPOTrainer writes.
        if self.args.should_save:
            folder = Path(output_dir if output_dir is not None else self.args.output_dir)
            torch.save(as_trl_config(self.args), folder / TRAINING_ARGS_NAME)

    def _save_checkpoint(self, model, trial):
        # The running mean must survive a resume, like the RNG state. It is written first: the
        # Trainer writes trainer_state.json last, so a checkpoint with one is whole.
        if self.running_mean is not None and self.args.should_save:
            folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / RUNNING_MEAN_FILE).write_text(json.dumps({"value": self.running_mean.value}))
        super()._save_checkpoint(model, trial)

    def _log_metric(self, name: str, value: float) -> None:
        # TRL averages a reward function's metric over the ranks; a failure count must be their
        # sum (every rank reports once per batch, so the mean of value x ranks is the sum).
        if name.endswith(FAILURES_SUFFIX):
            value *= self.accelerator.num_processes
        super()._log_metric(name, value)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if LOSS in logs:
            logs[BETA] = float(self.beta)
        super().log(logs, start_time)
        step = self.state.global_step
        if LOSS in logs and (step == 1 or step % SAMPLE_EVERY == 0 or step == self.state.max_steps):
            # in the log history, not the logged line: a checkpoint keeps it, so a resumed run
            # holds the samples of the steps before it (TRL gathers _logs: every rank's the same)
            self.state.log_history.append({"step": step, COMPLETIONS_SAMPLE: self._sample()})

    def _sample(self) -> dict:
        """The first group of the step's last generated batch (TRL's _logs, every rank's): the
        prompt, its G completions, each one's weighted reward as TRL sums it, whether the verifier
        passed it, and its advantage."""
        G, logs = self.num_generations, self._logs
        per_func = [list(logs["rewards"][name])[:G] for name in self.reward_func_names]
        weights = self.reward_weights.tolist()
        totals = [
            sum(w * r for w, r in zip(weights, column) if not math.isnan(r))
            for column in zip(*per_func)
        ]
        sample = {
            "prompt": _text(list(logs["prompt"])[0]),
            "completions": [_text(c) for c in list(logs["completion"])[:G]],
            "rewards": totals,
            "advantages": list(logs["advantages"])[:G],
        }
        if CORRECTNESS_REWARD in self.reward_func_names:  # the verifier's verdict
            column = per_func[self.reward_func_names.index(CORRECTNESS_REWARD)]
            sample["correct"] = [not math.isnan(r) and r >= 1.0 - 1e-6 for r in column]
        return sample
