"""GRPO training: TRL's GRPOTrainer wired to the pipeline's params, rewards and callbacks.

- `grpo_config` builds a GRPOConfig from params.yaml (TRL's own field names).
- `BetaScheduleCallback` sets the KL coefficient each step: constant, linear warm-up, or a
  PPO-style adaptive controller toward a target KL. The beta in force is logged every step.
- `FiniteGuardCallback` stops the run at the first non-finite loss, KL or grad_norm, naming the
  step and metric; the trainer saves after logging, so the last checkpoint stays the last good one.
- `LiveCurvesCallback` writes the curves with DVCLive; on resume it first replays the history
  restored from the checkpoint, so an interrupted run ends with the same files as an
  uninterrupted one.
- `PipelineGRPOTrainer` records, for every generated batch, the group sizes and whether the
  advantages are finite and zero-mean per group (the smoke checks read them), and scores the
  validation rows in the Trainer's evaluation loop (step 0, every train.eval_steps), which also
  keeps the best checkpoint (train.select: best_val) and stops early (train.patience).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler

from rlvr.config import BetaScheduleParams, GRPOParams, ModelParams
from rlvr.console import use_console_progress
from rlvr.distributed import world_size
from rlvr.errors import PipelineError
from rlvr.evaluation import VALIDATION_PREFIX
from rlvr.grpo_math import k3_kl
from rlvr.rewards.registry import RewardFunction, normalized_weights
from rlvr.stats import FIRST_BATCH_KL, drift_kl, finite_mean

# Logged keys that measure time or throughput: kept out of the metric files, which must be
# identical between two runs with the same seed.
TIMING_KEYS = ("step_time", "train_runtime", "train_samples_per_second",
               "train_steps_per_second", "total_flos")
GUARDED_KEYS = ("loss", "kl", FIRST_BATCH_KL, "grad_norm")
FINGERPRINT_FILE = "fingerprint.json"
RUNNING_MEAN_FILE = "running_mean.json"


class NonFiniteMetric(PipelineError):
    """Training produced NaN or Inf in a guarded metric; the run stopped."""


# --------------------------------------------------------------------------- config

def grpo_config(grpo: GRPOParams, *, output_dir: str | Path, max_steps: int, seed: int,
                reward_weights: Sequence[float], save_steps: int | None = None,
                beta: float | None = None, eval_steps: int = 0,
                select_best: bool = False,
                chat_template_kwargs: Mapping[str, Any] | None = None) -> GRPOConfig:
    """GRPOConfig from params.yaml's train.grpo (TRL names), plus what the pipeline fixes:
    log every step, report through our own callbacks, checkpoint every save_steps (or never),
    and with eval_steps > 0 score the validation rows at step 0 and every eval_steps steps
    (the Trainer's own evaluation loop, PipelineGRPOTrainer.evaluate); select_best: at the end
    the Trainer loads the checkpoint with the best validation mean reward (the first of equals);
    chat_template_kwargs: model.chat_template_kwargs, the variables TRL renders prompts with."""
    fields = {name: getattr(grpo, name) for name in GRPOParams.__dataclass_fields__
              if name != "extra"}
    known = set(GRPOConfig.__dataclass_fields__)
    unknown = sorted(set(grpo.extra) - known)
    if unknown:
        from rlvr.config import ParamsError

        raise ParamsError(f"params.yaml: train.grpo.extra has unknown GRPOConfig field(s) "
                          f"{unknown}; see trl.GRPOConfig for the names")
    fields.update(grpo.extra)
    if beta is not None:
        fields["beta"] = beta
    fields.setdefault("activation_checkpointing", False)
    # Several processes: every trained weight takes part in each forward pass, so DDP need not
    # search for unused ones (an extra autograd traversal per step, and a warning per rank).
    fields.setdefault("ddp_find_unused_parameters", False)
    if eval_steps:
        fields.update(eval_strategy="steps", eval_steps=eval_steps, eval_on_start=True,
                      # TRL's divisibility check; our evaluation batches on its own
                      per_device_eval_batch_size=grpo.num_generations,
                      metric_for_best_model=VALIDATION_PREFIX + "mean_reward",
                      greater_is_better=True, load_best_model_at_end=select_best)
    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=max_steps,
        seed=seed,
        data_seed=seed,
        reward_weights=normalized_weights(reward_weights),
        logging_steps=1,
        logging_nan_inf_filter=False,  # the Trainer would otherwise hide a NaN loss from the guard
        report_to="none",
        save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500,
        save_total_limit=2,
        disable_tqdm=False,
        chat_template_kwargs=dict(chat_template_kwargs or {}),  # as evaluation renders them
        **fields,
    )


def check_trl_config(params) -> None:
    """Build the GRPOConfig (and LoraConfig) the smoke and train runs will build, so TRL's own
    checks run before any stage starts; raise ParamsError naming train.grpo with TRL's reason."""
    import tempfile

    from rlvr.config import ParamsError

    with tempfile.TemporaryDirectory() as scratch:
        for steps, save_steps in ((params.smoke.max_steps, None),
                                  (params.train.max_steps, params.train.save_steps)):
            try:
                grpo_config(params.train.grpo, output_dir=scratch, max_steps=steps,
                            seed=params.seed, reward_weights=params.rewards.weights,
                            save_steps=save_steps,
                            chat_template_kwargs=params.model.chat_template_kwargs)
            except (TypeError, ValueError) as error:
                if isinstance(error, ParamsError):
                    raise
                raise ParamsError(f"params.yaml: train.grpo: TRL's GRPOConfig rejects it: "
                                  f"{' '.join(str(error).split())}") from None
    try:
        peft_config(params.model)
    except (TypeError, ValueError) as error:
        raise ParamsError(f"params.yaml: model.lora: peft's LoraConfig rejects it: "
                          f"{' '.join(str(error).split())}") from None


def peft_config(model: ModelParams):
    """A LoraConfig when model.lora.enabled, else None (full fine-tuning)."""
    if not model.lora.enabled:
        return None
    from peft import LoraConfig

    lora = model.lora
    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      target_modules=lora.target_modules, task_type="CAUSAL_LM")


# --------------------------------------------------------------------------- beta schedule

class BetaSchedule:
    """The KL coefficient as a function of the step (and, for adaptive, of the observed KL).

    >>> s = BetaSchedule(BetaScheduleParams(kind="warmup", beta_start=0.0, warmup_steps=10), 0.1)
    >>> [round(s.value(step), 3) for step in (0, 5, 10, 50)]
    [0.0, 0.05, 0.1, 0.1]
    >>> a = BetaSchedule(BetaScheduleParams(kind="adaptive", beta_start=0.1, target_kl=0.05,
    ...                                     horizon=10), 0.1)
    >>> a.observe_kl(0.5); round(a.value(1), 4)   # KL far above target: beta grows (capped +20%/horizon)
    0.102
    """

    def __init__(self, params: BetaScheduleParams, beta: float) -> None:
        self.params = params
        self.beta = beta
        self.reset()

    def reset(self) -> None:
        """Back to the value at step 0."""
        params = self.params
        self.current = params.beta_start if params.kind in ("warmup", "adaptive") else self.beta
        if params.kind == "adaptive" and self.current <= 0:
            self.current = self.beta

    def value(self, step: int) -> float:
        p = self.params
        if p.kind == "warmup":
            fraction = min(1.0, step / p.warmup_steps)
            self.current = p.beta_start + fraction * (self.beta - p.beta_start)
        return self.current

    def observe_kl(self, kl: float) -> None:
        """Adaptive only: move beta toward keeping KL at target (Ziegler et al. 2019)."""
        if self.params.kind != "adaptive" or not math.isfinite(kl):
            return
        error = max(-0.2, min(0.2, kl / self.params.target_kl - 1.0))
        self.current = self.current * (1.0 + error / self.params.horizon)


class BetaScheduleCallback(TrainerCallback):
    """Sets trainer.beta before every step from a BetaSchedule."""

    def __init__(self, schedule: BetaSchedule) -> None:
        self.schedule = schedule
        self.trainer: GRPOTrainer | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        # On resume, the adaptive controller's value is not in the checkpoint: rebuild it by
        # observing the restored history's KLs again, in order (the same arithmetic as before).
        self.schedule.reset()
        for entry in state.log_history:
            if "loss" in entry and drift_kl(entry) is not None:
                self.schedule.observe_kl(drift_kl(entry))

    def on_step_begin(self, args, state, control, **kwargs):
        if self.trainer is not None:
            self.trainer.beta = self.schedule.value(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # drift_kl: under dynamic sampling, the KL over the first batch, not the kept groups
        if logs and "loss" in logs and drift_kl(logs) is not None:
            self.schedule.observe_kl(drift_kl(logs))


# --------------------------------------------------------------------------- guards and curves

class FiniteGuardCallback(TrainerCallback):
    """Raise NonFiniteMetric at the first NaN/Inf loss, KL or grad_norm."""

    def __init__(self, checkpoint_dir: str | Path | None = None) -> None:
        self.checkpoint_dir = checkpoint_dir

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in GUARDED_KEYS:
            value = (logs or {}).get(key)
            if value is not None and not math.isfinite(float(value)):
                last = last_checkpoint(self.checkpoint_dir) if self.checkpoint_dir else None
                raise NonFiniteMetric(
                    f"step {state.global_step}: {key} = {value} is not finite; training stopped. "
                    f"Last good checkpoint: {last or 'none'}. Lower the learning rate or raise beta.")


def loggable(logs: dict[str, Any]) -> dict[str, float]:
    """The numeric, non-timing entries of a log line."""
    return {k: float(v) for k, v in logs.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
            and k not in TIMING_KEYS and k not in ("step", "epoch")}


def validation_entry(logs: dict[str, Any]) -> dict[str, float]:
    """The validation scores of a log entry (PipelineGRPOTrainer.evaluate's), without the
    prefix; {} for a training entry.

    >>> validation_entry({"eval_mean_reward": 0.5, "eval_greedy_success": 0.25, "step": 50})
    {'greedy_success': 0.25, 'mean_reward': 0.5}
    >>> validation_entry({"loss": 0.1, "reward": 0.4})
    {}
    """
    if VALIDATION_PREFIX + "mean_reward" not in logs:
        return {}
    return {key[len(VALIDATION_PREFIX):]: float(value) for key, value in sorted(logs.items())
            if key.startswith(VALIDATION_PREFIX)}  # sorted: as a restored history has them


class LiveCurvesCallback(TrainerCallback):
    """Training curves with DVCLive, one point per logged step (step = global step)."""

    def __init__(self, live_dir: str | Path) -> None:
        self.live_dir = Path(live_dir)
        self.live = None

    def _log(self, step: int, logs: dict[str, Any]) -> None:
        values = loggable(logs)
        validation = validation_entry(logs)
        if validation:  # the validation rows' curves: val/mean_reward, val/greedy_success, ...
            values = {f"val/{key}": value for key, value in validation.items()}
        elif not values or "loss" not in logs:
            return
        self.live.step = step
        for key, value in sorted(values.items()):  # sorted: a replayed history keeps one order
            self.live.log_metric(key, value)
        self.live.make_summary()

    def on_train_begin(self, args, state, control, **kwargs):
        from dvclive import Live

        if not state.is_world_process_zero:  # the main process alone writes the curves
            return
        self.live = Live(dir=str(self.live_dir), dvcyaml=None, save_dvc_exp=False, resume=False)
        for entry in state.log_history:  # restored from a checkpoint: replay it
            self._log(entry["step"], entry)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.live is not None and logs:
            self._log(state.global_step, logs)

    def on_train_end(self, args, state, control, **kwargs):
        if self.live is not None:
            self.live.end()


# --------------------------------------------------------------------------- trainer

def group_checks(prompts: Sequence[Any], advantages: Sequence[float], num_generations: int) -> dict:
    """Diagnostics of one generated batch: group sizes, advantage finiteness and per-group mean."""
    sizes, current, previous = [], 0, object()
    for prompt in prompts:
        if current and prompt == previous and current < num_generations:
            current += 1
        else:
            if current:
                sizes.append(current)
            current, previous = 1, prompt
    sizes.append(current)
    means, start = [], 0
    for size in sizes:
        group = advantages[start:start + size]
        means.append(sum(group) / size)
        start += size
    return {
        "groups": len(sizes),
        "group_sizes": sorted(set(sizes)),
        "advantages_finite": all(math.isfinite(a) for a in advantages),
        "max_abs_group_mean": max(abs(m) for m in means) if means else 0.0,
    }


class RunningMeanBaseline:
    """The no-group-norm ablation: advantage = reward - one running mean over all past batches.

    >>> b = RunningMeanBaseline(momentum=0.5)
    >>> b.advantages([1.0, 0.0, 1.0, 0.0])   # first batch: its own mean is the baseline
    [0.5, -0.5, 0.5, -0.5]
    >>> b.advantages([1.0, 1.0])             # baseline 0.5 * 0.5 + 0.5 * 1.0 = 0.75 after it
    [0.5, 0.5]
    >>> b.value
    0.75
    """

    def __init__(self, momentum: float) -> None:
        self.momentum = momentum
        self.value: float | None = None

    def advantages(self, rewards: Sequence[float]) -> list[float]:
        batch_mean = finite_mean(rewards)
        batch_mean = 0.0 if math.isnan(batch_mean) else batch_mean
        baseline = batch_mean if self.value is None else self.value
        self.value = (batch_mean if self.value is None
                      else self.momentum * self.value + (1 - self.momentum) * batch_mean)
        return [r - baseline if math.isfinite(r) else 0.0 for r in rewards]


class EpochReplaySampler(RepeatSampler):
    """TRL's RepeatSampler whose pass over the data is a function of the epoch, not of history.

    RepeatSampler seeds its generator once and draws a new permutation on every pass, so pass k
    uses the k-th permutation of the seeded generator. A resumed Trainer builds a fresh sampler
    and never replays the passes before the checkpoint, so without this it restarts from the first
    permutation. The Trainer calls set_epoch(epoch) before each pass (also after a resume); the
    generator is then reseeded and the earlier permutations are drawn again, so pass k gets the
    very permutation an uninterrupted run gives it.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.epoch: int | None = None  # None until the Trainer calls set_epoch
        self._next_pass = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        pass_index = self._next_pass if self.epoch is None else self.epoch
        self._next_pass = pass_index + 1
        if self.shuffle and self.seed is not None:
            import torch

            self.generator.manual_seed(self.seed)
            for _ in range(pass_index):
                torch.randperm(self.num_samples, generator=self.generator)
        yield from super().__iter__()


def local_group_spread(totals, local_size: int, num_generations: int, rank: int) -> list[bool]:
    """For each group of this rank's `local_size` completions (groups of `num_generations`,
    consecutive), whether its rewards differ. `totals` holds every rank's rewards in rank order;
    NaN (unscorable) rewards are ignored.

    >>> import torch
    >>> totals = torch.tensor([1., 1., 0., 1., 5., 5., float("nan"), 2.])
    >>> local_group_spread(totals, 4, 2, rank=0), local_group_spread(totals, 4, 2, rank=1)
    ([False, True], [False, False])
    """
    import torch

    mine = totals[rank * local_size:(rank + 1) * local_size].view(-1, num_generations)
    finite = torch.isfinite(mine)
    high = torch.where(finite, mine, torch.full_like(mine, -math.inf)).max(dim=1).values
    low = torch.where(finite, mine, torch.full_like(mine, math.inf)).min(dim=1).values
    return ((high - low) > 1e-6).tolist()


def loss_mask(output: dict):
    """The completion tokens TRL's loss counts in a scored batch (tool tokens left out)."""
    mask = output["completion_mask"]
    return mask * output["tool_mask"] if "tool_mask" in output else mask


def select_groups(output: dict, groups: Sequence[int], num_generations: int) -> dict:
    """The scored batch `output` (TRL's dict of per-completion tensors) cut down to `groups`."""
    import torch

    rows = torch.tensor([g * num_generations + j for g in groups for j in range(num_generations)])
    size = len(output["advantages"])
    return {key: value.index_select(0, rows.to(value.device))
            if hasattr(value, "dim") and value.dim() > 0 and len(value) == size else value
            for key, value in output.items()}


def merge_groups(parts: Sequence[dict], pad_token_id: int) -> dict:
    """Scored batches concatenated: per-token tensors padded to the widest, prompts on the left
    (as TRL pads them), completions and their per-token values on the right; pad ids for the
    token ids, 0 elsewhere. num_items_in_batch is left to the caller (it must be recounted)."""
    import torch

    merged = {}
    for key, first in parts[0].items():
        if not hasattr(first, "dim") or first.dim() == 0:
            merged[key] = first
            continue
        values = [part[key] for part in parts]
        if first.dim() > 1:
            width = max(v.shape[1] for v in values)
            fill = pad_token_id if key.endswith("_ids") else 0
            padded = []
            for v in values:
                pad = v.new_full((v.shape[0], width - v.shape[1], *v.shape[2:]), fill)
                padded.append(torch.cat([pad, v] if key.startswith("prompt_") else [v, pad], 1))
            values = padded
        merged[key] = torch.cat(values)
    return merged


class PipelineGRPOTrainer(GRPOTrainer):
    """GRPOTrainer that logs the beta in force, records per-batch group diagnostics and, for the
    no-group-norm ablation, replaces TRL's group advantages by a running-mean baseline."""

    def __init__(self, *args, running_mean: RunningMeanBaseline | None = None,
                 validation: Callable[[Any, Any], dict[str, float]] | None = None,
                 max_sampling_rounds: int = 0, **kwargs) -> None:
        self._epoch_sampler: EpochReplaySampler | None = None  # set while super() builds it
        super().__init__(*args, **kwargs)
        self.max_sampling_rounds = max_sampling_rounds  # 0: no dynamic sampling
        self.batch_checks: list[dict] = []
        self.running_mean = running_mean
        self.validation = validation
        self.validation_seconds = 0.0
        self._last_rewards_per_func = None

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval"):
        """The validation rows scored as the evaluate stage scores a split (seeded samples and
        greedy: rlvr.evaluation.validation_scores), not TRL's evaluation loss. Every rank scores
        the same rows with the same weights and seed, so the best step and an early stop are the
        same on all of them."""
        if self.validation is None:
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        step = self.state.global_step
        scored = next((e for e in self.state.log_history
                       if e.get("step") == step and validation_entry(e)), None)
        if scored is not None:  # a resumed run's eval_on_start: scored before the checkpoint
            return {k: v for k, v in scored.items() if k.startswith(metric_key_prefix + "_")}
        started = time.perf_counter()
        scores = self.validation(self.accelerator.unwrap_model(self.model), self.processing_class)
        self.validation_seconds += time.perf_counter() - started
        metrics = {f"{metric_key_prefix}_{key}": value for key, value in scores.items()}
        Trainer.log(self, metrics)  # not TRL's log: that would fold in its training metrics
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control,
                                                         metrics)
        return metrics

    def _get_train_sampler(self, dataset=None):
        sampler = super()._get_train_sampler(dataset)
        if type(sampler) is not RepeatSampler:
            return sampler
        self._epoch_sampler = EpochReplaySampler(
            sampler.data_source, mini_repeat_count=sampler.mini_repeat_count,
            batch_size=sampler.batch_size, repeat_count=sampler.repeat_count,
            shuffle=sampler.shuffle, seed=sampler.seed)
        return self._epoch_sampler

    def _run_epoch(self, *args, **kwargs):
        # Tell the sampler its pass here: with several processes, a resume inside a pass wraps it
        # (accelerate's skip_first_batches around BatchSamplerShard) deeper than the Trainer's
        # and accelerate's set_epoch reach, and pass k would replay pass 0's permutation.
        if self._epoch_sampler is not None:
            self._epoch_sampler.set_epoch(kwargs["epoch"])
        return super()._run_epoch(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions,
                                                      completion_ids_list)
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _reward_totals(self):
        """The weighted reward of every completion of the last scored batch, over all ranks
        (TRL gathers them); NaN where every reward function returned None."""
        import torch

        per_func = self._last_rewards_per_func
        weights = self.reward_weights.to(per_func.device).unsqueeze(0)
        totals = (per_func * weights).nansum(dim=1)
        totals[torch.isnan(per_func).all(dim=1)] = torch.nan
        return totals

    def _generate_and_score_completions(self, inputs):
        if self.max_sampling_rounds and self.model.training:
            return self._dynamically_sampled(inputs)
        return self._score_batch(inputs)

    def _dynamically_sampled(self, inputs):
        """DAPO's dynamic sampling: fill the batch only with groups whose G rewards are not all
        equal (the others give no gradient), sampling more prompts for up to
        max_sampling_rounds rounds; if it stays short, the loss sees the kept groups only. With
        several processes every rank runs the same number of rounds (generation gathers the
        rewards across ranks): the loop stops when no rank is short; then every rank keeps as
        many groups as the one that kept fewest."""
        import torch

        G = self.num_generations
        needed = len(inputs) // G
        parts, kept, generated, batch, first = [], 0, 0, inputs, None
        rounds = 0
        for rounds in range(1, self.max_sampling_rounds + 1):
            output = self._score_batch(batch)
            first = first if first is not None else output
            spread = local_group_spread(self._reward_totals(), len(batch), G,
                                        self.accelerator.process_index)
            generated += len(spread)
            chosen = [g for g, has in enumerate(spread) if has][:needed - kept]
            if chosen:
                parts.append(select_groups(output, chosen, G))
                kept += len(chosen)
            short = torch.tensor([needed - kept], device=self.accelerator.device)
            if self.accelerator.gather(short).sum().item() == 0 \
                    or rounds == self.max_sampling_rounds:
                break
            batch = self._more_prompts(needed, rounds)
        # Every rank trains on as many groups as the rank that kept fewest (TRL's loss gathers
        # per-completion values, which needs equal batches); none kept anywhere: the first
        # batch, as without dynamic sampling.
        common = int(self.accelerator.gather(
            torch.tensor([kept], device=self.accelerator.device)).min().item())
        if common:
            merged = select_groups(merge_groups(parts, self.processing_class.pad_token_id),
                                   range(common), G)
        else:
            merged = first
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/rounds"].append(float(rounds))
        metrics["dynamic_sampling/kept_share"].append(common / generated)
        metrics["dynamic_sampling/oversampling"].append(generated / needed)
        kl_sums = self._first_batch_kl_sums(first)
        if kl_sums is not None:  # the same beta on every rank: all of them reduce, or none
            kl_sums = self.accelerator.reduce(kl_sums, reduction="sum")
            metrics[FIRST_BATCH_KL].append((kl_sums[0] / kl_sums[1].clamp(min=1.0)).item())
        merged["num_items_in_batch"] = self.accelerator.gather(loss_mask(merged).sum()).sum()
        return merged

    def _first_batch_kl_sums(self, output):
        """This rank's (sum, token count) of the per-token k3 KL, current policy to reference,
        over every completion of the step's first scored batch, its groups kept or dropped: the
        batch a run without dynamic sampling trains on and measures TRL's kl over (stats.drift_kl
        says why). The later rounds' prompts add cost, not a truer figure. None when beta is 0 in
        force, as TRL then computes no reference log-probs and logs no KL. A forward pass without
        gradients, in the model's train mode as TRL's own; torch's RNG state is restored after it
        (dropout, e.g. LoRA's, would draw), so training samples the same rollouts with or
        without it."""
        import torch
        from trl.models.utils import disable_gradient_checkpointing

        ref = output.get("ref_per_token_logps")
        if ref is None:
            return None
        logps = output.get("old_per_token_logps")  # TRL's, when it computed them: the same
        if logps is None:
            completion = output["completion_ids"]
            devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
            with torch.no_grad(), torch.random.fork_rng(devices=devices), \
                    disable_gradient_checkpointing(self.model,
                                                   self.args.gradient_checkpointing_kwargs):
                logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, torch.cat([output["prompt_ids"], completion], dim=1),
                    torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1),
                    completion.size(1), batch_size=self.args.per_device_train_batch_size)
        mask = loss_mask(output)
        return torch.stack([(k3_kl(logps, ref) * mask).sum(), mask.sum().float()])

    def _more_prompts(self, count: int, round_: int) -> list[dict]:
        """`count` training rows, each repeated G times, drawn by a generator seeded by the seed,
        the step, the rank and the round: the same rows after a resume, with no state to save."""
        import random

        rng = random.Random(f"{self.args.seed}-{self.state.global_step}-"
                            f"{self.accelerator.process_index}-{round_}")
        rows = rng.sample(range(len(self.train_dataset)), min(count, len(self.train_dataset)))
        return [self.train_dataset[i] for i in rows for _ in range(self.num_generations)]

    def _score_batch(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.running_mean is not None:
            import torch

            totals = self._reward_totals()
            advantages = self.running_mean.advantages(totals.tolist())
            n = len(inputs)
            local = advantages[self.accelerator.process_index * n:
                               (self.accelerator.process_index + 1) * n]
            output["advantages"] = torch.tensor(local, dtype=output["advantages"].dtype,
                                                device=output["advantages"].device)
            self._metrics["train"]["running_mean_baseline"].append(float(self.running_mean.value))
        self.batch_checks.append(group_checks([x["prompt"] for x in inputs],
                                              output["advantages"].tolist(), self.num_generations))
        return output

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
        if name.endswith("/failures"):
            value *= self.accelerator.num_processes
        super()._log_metric(name, value)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            logs["beta"] = float(self.beta)
        super().log(logs, start_time)


def build_trainer(policy: str, train_dataset, reward_funcs: Sequence[RewardFunction],
                  config: GRPOConfig, model: ModelParams, callbacks: Sequence[TrainerCallback],
                  beta_schedule: BetaSchedule | None = None,
                  running_mean: RunningMeanBaseline | None = None,
                  validation: Callable[[Any, Any], dict[str, float]] | None = None,
                  eval_dataset=None, max_sampling_rounds: int = 0) -> PipelineGRPOTrainer:
    """The trainer, with the beta schedule bound to it."""
    callbacks = list(callbacks)
    schedule_callback = BetaScheduleCallback(beta_schedule) if beta_schedule else None
    if schedule_callback:
        callbacks.insert(0, schedule_callback)
    trainer = PipelineGRPOTrainer(model=policy, reward_funcs=list(reward_funcs), args=config,
                                  train_dataset=train_dataset, callbacks=callbacks,
                                  peft_config=peft_config(model), running_mean=running_mean,
                                  validation=validation, eval_dataset=eval_dataset,
                                  max_sampling_rounds=max_sampling_rounds)
    if schedule_callback:
        schedule_callback.trainer = trainer
        trainer.beta = beta_schedule.value(0)
    return trainer


# --------------------------------------------------------------------------- checkpoints

WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors")
TORCH_STATE_FILES = ("optimizer.pt", "scheduler.pt")  # torch.save's zip format


def _safetensors_problem(file: Path) -> str | None:
    """Why a safetensors file is unreadable: its header must parse and its size must match."""
    import struct

    try:
        with open(file, "rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(header_len))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"),
                  default=0)
        if file.stat().st_size != 8 + header_len + end:
            return f"{file.name} is truncated ({file.stat().st_size} of {8 + header_len + end} bytes)"
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error) as error:
        return f"{file.name} is unreadable ({type(error).__name__})"
    return None


def rng_state_files(ranks: int) -> list[str]:
    """The RNG states a checkpoint of a run with `ranks` processes holds (the Trainer's names).

    >>> rng_state_files(1), rng_state_files(2)
    (['rng_state.pth'], ['rng_state_0.pth', 'rng_state_1.pth'])
    """
    return ["rng_state.pth"] if ranks == 1 else [f"rng_state_{r}.pth" for r in range(ranks)]


def checkpoint_problem(folder: str | Path, extra_files: Sequence[str] = (),
                       ranks: int | None = None) -> str | None:
    """Why a checkpoint cannot be resumed, or None when every file it needs is whole.

    Checked without loading anything: trainer_state.json parses, the weights' safetensors header
    and size agree, the optimizer and scheduler states and every rank's RNG state (`ranks`: this
    run's processes) are complete zip files, and `extra_files` (state of our own, e.g. the
    running-mean baseline) are there. Each rank writes its own RNG state, the main process
    trainer_state.json: a kill can leave one without the other.
    """
    import zipfile

    folder = Path(folder)
    try:
        json.loads((folder / "trainer_state.json").read_text())
    except FileNotFoundError:
        return "trainer_state.json is missing"
    except (OSError, ValueError):
        return "trainer_state.json is unreadable"
    weights = [folder / name for name in WEIGHT_FILES if (folder / name).exists()]
    weights += sorted(folder.glob("*model-*-of-*.safetensors"))  # a sharded large model
    if not weights:
        return f"no weights ({' or '.join(WEIGHT_FILES)})"
    rng = [folder / name for name in rng_state_files(ranks or world_size())]
    for file in weights:
        problem = _safetensors_problem(file)
        if problem:
            return problem
    for file in [*(folder / name for name in TORCH_STATE_FILES), *rng]:
        if not file.exists():
            return f"{file.name} is missing"
        if not zipfile.is_zipfile(file):
            return f"{file.name} is truncated or unreadable"
    for name in extra_files:
        try:
            json.loads((folder / name).read_text())
        except FileNotFoundError:
            return f"{name} is missing"
        except (OSError, ValueError):
            return f"{name} is unreadable"
    return None


def last_checkpoint(folder: str | Path | None, extra_files: Sequence[str] = (),
                    warn: bool = False, ranks: int | None = None) -> str | None:
    """The newest checkpoint-N in folder that can be resumed, or None.

    A checkpoint cut short by a kill (the Trainer writes trainer_state.json last) or damaged later
    is skipped; with warn=True each skipped one gets a one-line warning naming it and why.
    """
    if folder is None or not Path(folder).is_dir():
        return None
    numbered = sorted(((int(p.name.split("-")[1]), p) for p in Path(folder).glob("checkpoint-*")
                       if p.name.split("-")[1].isdigit()), reverse=True)
    for _, candidate in numbered:
        problem = checkpoint_problem(candidate, extra_files, ranks)
        if problem is None:
            return str(candidate)
        if warn:
            print(f"train: skipping damaged checkpoint {candidate}: {problem}", file=sys.stderr)
    return None


def fingerprint(*parts: Any) -> str:
    """A stable hash of what a run depends on (params, base model and data file contents)."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            files = sorted(p for p in part.rglob("*") if p.is_file() and "__pycache__" not in
                           p.parts) if part.is_dir() else [part]
            for file in files:
                digest.update(str(file.relative_to(part) if part.is_dir() else file.name).encode())
                digest.update(file.read_bytes())
        else:
            digest.update(json.dumps(part, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def resumable_checkpoint(folder: str | Path, run_fingerprint: str,
                         extra_files: Sequence[str] = ()) -> str | None:
    """The newest whole checkpoint of this very run in the folder, if there is one.

    Checkpoints of a different run (other params, base model or data) are deleted so they can
    never be resumed by mistake; damaged ones are skipped with a warning (last_checkpoint), and if
    none is whole the run starts over.
    """
    folder = Path(folder)
    marker = folder / FINGERPRINT_FILE
    if folder.exists():
        try:
            recorded = json.loads(marker.read_text())["fingerprint"]
        except (OSError, ValueError, KeyError, TypeError):  # missing, or cut short by a kill
            recorded = None
        if recorded != run_fingerprint:
            if any(folder.glob("checkpoint-*")):
                print(f"train: the checkpoints in {folder} are of another run (params, data, base "
                      "model or code differ): starting over", file=sys.stderr)
            shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"fingerprint": run_fingerprint}) + "\n")
    return last_checkpoint(folder, extra_files, warn=True)


# --------------------------------------------------------------------------- one GRPO run

def run_grpo(params, rows, policy: str, output_dir: str | Path, max_steps: int,
             save_steps: int | None = None, callbacks: Sequence[TrainerCallback] = (),
             resume_from: str | None = None, reward_funcs: Sequence[RewardFunction] | None = None,
             label: str = "train", val_rows=None,
             max_sampling_rounds: int = 0) -> PipelineGRPOTrainer:
    """Train `policy` with GRPO on `rows` for max_steps (resuming from a checkpoint if given); the
    console shows a progress bar and one line every train.log_every steps, starting `label:`.
    With `val_rows` and train.eval_steps, the validation rows are scored at step 0 and every
    eval_steps steps; train.select and train.patience then pick the final weights and stop."""
    from transformers import EarlyStoppingCallback, set_seed

    from rlvr.data import to_hf_dataset
    from rlvr.evaluation import prompt_template, rollout_settings, validation_scores
    from rlvr.rewards.registry import build_reward_funcs, normalized_weights

    set_seed(params.seed)
    train = params.train
    eval_steps = train.eval_steps if val_rows else 0
    schedule = BetaSchedule(train.beta_schedule, train.grpo.beta)
    config = grpo_config(train.grpo, output_dir=output_dir, max_steps=max_steps, seed=params.seed,
                         reward_weights=params.rewards.weights, save_steps=save_steps,
                         eval_steps=eval_steps,
                         select_best=bool(eval_steps) and train.select == "best_val",
                         chat_template_kwargs=params.model.chat_template_kwargs)
    funcs = list(reward_funcs) if reward_funcs is not None else build_reward_funcs(params.rewards)
    dataset = to_hf_dataset(rows, conversational=params.model.chat_template)
    validation = eval_dataset = None
    if eval_steps:
        # the evaluate stage's sampling: its k and seed, GRPO's temperature and length
        sampled = rollout_settings(params, n=params.evaluate.samples, seed=params.evaluate.seed)
        weights = normalized_weights(params.rewards.weights)
        val_funcs = build_reward_funcs(params.rewards)  # its own: training's failure counts stay

        def validation(model, tokenizer):
            return validation_scores(model, tokenizer, val_rows, val_funcs, weights, sampled,
                                     prompt_template(params.model))

        eval_dataset = to_hf_dataset(val_rows, conversational=params.model.chat_template)
        if train.patience:
            callbacks = [*callbacks, EarlyStoppingCallback(early_stopping_patience=train.patience)]
    running_mean = (RunningMeanBaseline(train.running_mean_momentum)
                    if train.advantage == "running_mean" else None)
    if running_mean is not None and resume_from:
        running_mean.value = json.loads((Path(resume_from) / RUNNING_MEAN_FILE).read_text())["value"]
    trainer = build_trainer(policy, dataset, funcs, config, params.model,
                            [FiniteGuardCallback(output_dir if save_steps else None), *callbacks],
                            beta_schedule=schedule, running_mean=running_mean,
                            validation=validation, eval_dataset=eval_dataset,
                            max_sampling_rounds=max_sampling_rounds)
    use_console_progress(trainer, label, train.log_every)
    trainer.train(resume_from_checkpoint=resume_from)
    return trainer
