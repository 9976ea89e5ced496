"""The GRPOConfig a run trains with: TRL's fields from params.yaml's train.grpo (TRL's own names),
what the pipeline fixes (logging, checkpoints, validation), and the pipeline's own trainer knobs
on a GRPOConfig subclass, read by the trainer as self.args.* (as TRL's experimental trainers carry
theirs)."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Mapping, Sequence
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import GRPOConfig

from rlvr.params.config import ParamsError
from rlvr.params.training_params import GRPOParams, ModelParams, TrainParams
from rlvr.core.metric_keys import MEAN_REWARD, VALIDATION_PREFIX
from rlvr.rewards.registry import normalized_weights

ADVANTAGES = ("group", "running_mean", "pass_at_k")
PIPELINE_KNOBS = ("max_sampling_rounds", "advantage", "running_mean_momentum", "pass_at_k",
                  "positive_weight", "unlikeliness", "resample_unsolved")


@dataclass
class PipelineGRPOConfig(GRPOConfig):
    """GRPOConfig plus the knobs of rlvr.grpo.trainer.PipelineGRPOTrainer (params.yaml's train
    section names them and says why they have their values)."""

    max_sampling_rounds: int = field(default=0, metadata={
        "help": "DAPO's dynamic sampling: generation rounds per step at most, filling the batch "
                "only with groups whose rewards differ; 0 turns it off (every group trains)."})
    advantage: str = field(default="group", metadata={
        "help": "group: TRL's per-group baseline; running_mean: the ablation with no group "
                "normalisation, advantage = reward - one running mean over all past batches."})
    running_mean_momentum: float = field(default=0.9, metadata={
        "help": "advantage running_mean: weight of the old baseline in each update, in [0, 1)."})
    pass_at_k: int = field(default=4, metadata={
        "help": "advantage pass_at_k: the k of Pass@k training's analytic advantages (Chen et al. "
                "2025), computed on the correctness reward; 1..num_generations."})
    positive_weight: float = field(default=1.0, metadata={
        "help": "W-REINFORCE (Zhu et al. 2025): positive advantages are scaled by this, in "
                "(0, 1]; 1 leaves them."})
    unlikeliness: float = field(default=0.0, metadata={
        "help": "The unlikeliness reward (He et al. 2025): a correct sample's correctness reward "
                "is lowered by this x (G - rank) / G, rank 0 the group's most likely correct "
                "sample; in [0, 1], 0 = off. Not with advantage 'pass_at_k'."})
    resample_unsolved: bool = field(default=False, metadata={
        "help": "Dynamic sampling: prompts whose group had no correct answer are sampled again "
                "in the next round, before new prompts are drawn."})

    def __post_init__(self) -> None:
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"advantage = {self.advantage!r}: must be one of {ADVANTAGES}")
        if not 0 <= self.running_mean_momentum < 1:
            raise ValueError(f"running_mean_momentum = {self.running_mean_momentum}: must be "
                             "in [0, 1)")
        if self.max_sampling_rounds < 0:
            raise ValueError(f"max_sampling_rounds = {self.max_sampling_rounds}: must be >= 0")
        if self.max_sampling_rounds and self.advantage == "running_mean":
            raise ValueError("max_sampling_rounds needs group advantages (dynamic sampling "
                             "drops the groups that carry no gradient)")
        if self.pass_at_k < 1:
            raise ValueError(f"pass_at_k = {self.pass_at_k}: must be >= 1")
        if not 0 < self.positive_weight <= 1:
            raise ValueError(f"positive_weight = {self.positive_weight}: must be in (0, 1]")
        if not 0 <= self.unlikeliness <= 1:
            raise ValueError(f"unlikeliness = {self.unlikeliness}: must be in [0, 1]")
        if self.unlikeliness and self.advantage == "pass_at_k":
            raise ValueError("unlikeliness has no effect with advantage 'pass_at_k'")
        if self.resample_unsolved and not self.max_sampling_rounds:
            raise ValueError("resample_unsolved needs dynamic sampling (max_sampling_rounds)")
        super().__post_init__()


def as_trl_config(config: GRPOConfig) -> GRPOConfig:
    """The same config as TRL's own GRPOConfig, without the pipeline's knobs: what a saved model
    folder keeps in training_args.bin, so that it loads where rlvr is not installed and a model
    trained with the same values is the same bytes whatever class trained it."""
    plain = copy.copy(config)
    plain.__class__ = GRPOConfig
    for knob in PIPELINE_KNOBS:
        plain.__dict__.pop(knob, None)
    return plain


def grpo_config(train: TrainParams, *, output_dir: str | Path, max_steps: int, seed: int,
                reward_weights: Sequence[float], save_steps: int | None = None,
                dynamic_sampling: bool = False, eval_steps: int = 0, select_best: bool = False,
                chat_template_kwargs: Mapping[str, Any] | None = None) -> PipelineGRPOConfig:
    """The run's config from params.yaml's train section: train.grpo under TRL's names, the
    pipeline's knobs (train.advantage, train.running_mean_momentum, and with dynamic_sampling and
    train.dynamic_sampling its rounds), plus what the pipeline fixes: log every step, report
    through our own callbacks, checkpoint every save_steps (or never), and with eval_steps > 0
    score the validation rows at step 0 and every eval_steps steps (the Trainer's own evaluation
    loop, PipelineGRPOTrainer.evaluate); select_best: at the end the Trainer loads the checkpoint
    with the best validation mean reward (the first of equals); chat_template_kwargs:
    model.chat_template_kwargs, the variables TRL renders prompts with."""
    grpo = train.grpo
    fields = {f.name: getattr(grpo, f.name) for f in dataclasses.fields(GRPOParams)
              if f.name != "extra"}  # getattr: through a stage's params view
    known = set(GRPOConfig.__dataclass_fields__)  # TRL's own: the pipeline's knobs come from train
    unknown = sorted(set(grpo.extra) - known)
    if unknown:
        raise ParamsError(f"params.yaml: train.grpo.extra has unknown GRPOConfig field(s) "
                          f"{unknown}; see trl.GRPOConfig for the names")
    fields["epsilon_high"] = grpo.epsilon_high or None  # None: TRL takes epsilon
    fields.update(grpo.extra)
    fields.setdefault("activation_checkpointing", False)
    # Several processes: every trained weight takes part in each forward pass, so DDP need not
    # search for unused ones (an extra autograd traversal per step, and a warning per rank).
    fields.setdefault("ddp_find_unused_parameters", False)
    if eval_steps:
        fields.update(eval_strategy="steps", eval_steps=eval_steps, eval_on_start=True,
                      # TRL's divisibility check; our evaluation batches on its own
                      per_device_eval_batch_size=grpo.num_generations,
                      metric_for_best_model=VALIDATION_PREFIX + MEAN_REWARD,
                      greater_is_better=True, load_best_model_at_end=select_best)
    return PipelineGRPOConfig(
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
        max_sampling_rounds=train.max_sampling_rounds if dynamic_sampling and
        train.dynamic_sampling else 0,
        advantage=train.advantage,
        running_mean_momentum=train.running_mean_momentum,
        pass_at_k=train.pass_at_k,
        positive_weight=train.positive_weight,
        unlikeliness=train.unlikeliness,
        resample_unsolved=dynamic_sampling and train.dynamic_sampling and train.resample_unsolved,
        **fields,
    )


def check_trl_config(params) -> None:
    """Build the GRPOConfig (and LoraConfig) the smoke and train runs will build, so TRL's own
    checks run before any stage starts; raise ParamsError naming train.grpo with TRL's reason."""
    with tempfile.TemporaryDirectory() as scratch:
        for steps, save_steps, sampled in ((params.smoke.max_steps, None, False),
                                           (params.train.max_steps, params.train.save_steps, True)):
            try:
                grpo_config(params.train, output_dir=scratch, max_steps=steps,
                            seed=params.seed, reward_weights=params.rewards.weights,
                            save_steps=save_steps, dynamic_sampling=sampled,
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
