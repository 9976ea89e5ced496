"""The GRPOConfig a run trains with: TRL's fields from params.yaml's train.grpo (TRL's own names),
what the pipeline fixes (logging, checkpoints, validation), and the pipeline's own trainer knobs
on a GRPOConfig subclass, read by the trainer as self.args.* (as TRL's experimental trainers carry
theirs)."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peft import LoraConfig
from trl import GRPOConfig

from rlvr.core.metric_keys import MEAN_REWARD, VALIDATION_PREFIX
from rlvr.params.config import ParamsError
from rlvr.params.training_params import GRPOParams, ModelParams, TrainParams
from rlvr.rewards.registry import normalized_weights

PIPELINE_KNOBS = (
    "max_sampling_rounds",
    "advantage",
    "running_mean_momentum",
    "pass_at_k",
    "positive_weight",
    "unlikeliness",
    "resample_unsolved",
    "guidance",
    "guidance_fraction",
    "guidance_gamma",
    "guidance_std",
)


def _knob(name: str, help_prefix: str = "") -> Any:
    """A pipeline knob's GRPOConfig field from its one declaration, params.yaml's train.<name>
    (rlvr.params.training_params.TrainParams): its default and its help."""
    declared = TrainParams.__pydantic_fields__[name]
    return field(
        default=declared.default,
        metadata={"help": f"{help_prefix}train.{name}: {declared.description}"},
    )


@dataclass
class PipelineGRPOConfig(GRPOConfig):
    """GRPOConfig plus the knobs of rlvr.grpo.trainer.PipelineGRPOTrainer. Each is declared once,
    in params.yaml's train section (TrainParams: type, range, help); the fields take their
    default and help from there and their values are checked by its rules."""

    max_sampling_rounds: int = field(
        default=0,
        metadata={
            "help": "DAPO's dynamic sampling: train.max_sampling_rounds when train.dynamic_sampling "
            "is on, 0 when off (every group trains). "
            + TrainParams.__pydantic_fields__["dynamic_sampling"].description
        },
    )
    advantage: str = _knob("advantage")
    running_mean_momentum: float = _knob("running_mean_momentum")
    pass_at_k: int = _knob("pass_at_k")
    positive_weight: float = _knob("positive_weight")
    unlikeliness: float = _knob("unlikeliness")
    resample_unsolved: bool = _knob("resample_unsolved")
    guidance: str = _knob("guidance")
    guidance_fraction: float = _knob("guidance_fraction")
    guidance_gamma: float = _knob("guidance_gamma")
    guidance_std: bool = _knob("guidance_std")

    def __post_init__(self) -> None:
        try:
            knobs_as_params(self)
        except ParamsError as error:  # a config built in code: TRL's ValueError, our words
            raise ValueError(str(error).removeprefix("params.yaml: ")) from None
        super().__post_init__()


def knobs_as_params(config: PipelineGRPOConfig) -> TrainParams:
    """The config's pipeline knobs as params.yaml's train section would hold them, checked by its
    rules (one set of rules: rlvr.params.training_params)."""
    rounds = config.max_sampling_rounds
    if rounds < 0:  # 0 is this field's own "off"; the section's rounds start at 1
        raise ParamsError(f"params.yaml: max_sampling_rounds = {rounds}: must be >= 0 (0: off)")
    # only what the knobs' rules read (pass_at_k <= G); TRL checks the batch shapes itself
    group = config.num_generations or GRPOParams.__pydantic_fields__["num_generations"].default
    grpo = GRPOParams(
        num_generations=group, per_device_train_batch_size=group, loss_type=config.loss_type
    )
    return TrainParams(
        advantage=config.advantage,
        running_mean_momentum=config.running_mean_momentum,
        pass_at_k=config.pass_at_k,
        positive_weight=config.positive_weight,
        unlikeliness=config.unlikeliness,
        dynamic_sampling=rounds > 0,
        max_sampling_rounds=rounds
        or TrainParams.__pydantic_fields__["max_sampling_rounds"].default,
        resample_unsolved=config.resample_unsolved,
        guidance=config.guidance,
        guidance_fraction=config.guidance_fraction,
        guidance_gamma=config.guidance_gamma,
        guidance_std=config.guidance_std,
        grpo=grpo,
    )


def as_trl_config(config: GRPOConfig) -> GRPOConfig:
    """The same config as TRL's own GRPOConfig, without the pipeline's knobs: what a saved model
    folder keeps in training_args.bin, so that it loads where rlvr is not installed and a model
    trained with the same values is the same bytes whatever class trained it."""
    plain = copy.copy(config)
    plain.__class__ = GRPOConfig
    for knob in PIPELINE_KNOBS:
        plain.__dict__.pop(knob, None)
    return plain


def grpo_config(
    train: TrainParams,
    *,
    output_dir: str | Path,
    max_steps: int,
    seed: int,
    reward_weights: Sequence[float],
    save_steps: int | None = None,
    dynamic_sampling: bool = False,
    guidance: bool = False,
    eval_steps: int = 0,
    select_best: bool = False,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> PipelineGRPOConfig:
    """The run's config from params.yaml's train section: train.grpo under TRL's names, the
    pipeline's knobs (train.advantage, train.running_mean_momentum, and with dynamic_sampling and
    train.dynamic_sampling its rounds; with guidance, train.guidance as params set it, else off:
    the smoke run has no guides), plus what the pipeline fixes: log every step, report
    through our own callbacks, checkpoint every save_steps (or never), and with eval_steps > 0
    score the validation rows at step 0 and every eval_steps steps (the Trainer's own evaluation
    loop, PipelineGRPOTrainer.evaluate); select_best: at the end the Trainer loads the checkpoint
    with the best validation mean reward (the first of equals); chat_template_kwargs:
    model.chat_template_kwargs, the variables TRL renders prompts with."""
    grpo = train.grpo
    # Which params a stage reads (dvc.yaml, rlvr/pipeline/stage.py) may depend on the caller's
    # arguments (smoke: no dynamic sampling), never on params' values: read them all first.
    sampling = (
        (train.dynamic_sampling, train.max_sampling_rounds, train.resample_unsolved)
        if dynamic_sampling
        else (False, 0, False)
    )
    sampled, sampling_rounds, resample_unsolved = sampling
    defaults = TrainParams.__pydantic_fields__
    guided = (
        (train.guidance, train.guidance_fraction, train.guidance_gamma, train.guidance_std)
        if guidance
        else (
            "off",
            defaults["guidance_fraction"].default,
            defaults["guidance_gamma"].default,
            defaults["guidance_std"].default,
        )
    )
    known = set(GRPOConfig.__dataclass_fields__)  # TRL's own: the pipeline's knobs come from train
    unknown = sorted(set(grpo.extra) - known)
    if unknown:
        raise ParamsError(
            f"params.yaml: train.grpo.extra has unknown GRPOConfig field(s) "
            f"{unknown}; see trl.GRPOConfig for the names"
        )
    fields = dict(grpo.extra)
    fields.setdefault("activation_checkpointing", False)
    # Several processes: every trained weight takes part in each forward pass, so DDP need not
    # search for unused ones (an extra autograd traversal per step, and a warning per rank).
    fields.setdefault("ddp_find_unused_parameters", False)
    if eval_steps:
        fields.update(
            eval_strategy="steps",
            eval_steps=eval_steps,
            eval_on_start=True,
            # TRL's divisibility check; our evaluation batches on its own
            per_device_eval_batch_size=grpo.num_generations,
            metric_for_best_model=VALIDATION_PREFIX + MEAN_REWARD,
            greater_is_better=True,
            load_best_model_at_end=select_best,
        )
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
        max_sampling_rounds=sampling_rounds if sampled else 0,
        advantage=train.advantage,
        running_mean_momentum=train.running_mean_momentum,
        pass_at_k=train.pass_at_k,
        positive_weight=train.positive_weight,
        unlikeliness=train.unlikeliness,
        resample_unsolved=sampled and resample_unsolved,
        guidance=guided[0],
        guidance_fraction=guided[1],
        guidance_gamma=guided[2],
        guidance_std=guided[3],
        # train.grpo, field by field under TRL's names (params.yaml names each one)
        learning_rate=grpo.learning_rate,
        beta=grpo.beta,
        num_generations=grpo.num_generations,
        per_device_train_batch_size=grpo.per_device_train_batch_size,
        gradient_accumulation_steps=grpo.gradient_accumulation_steps,
        max_completion_length=grpo.max_completion_length,
        temperature=grpo.temperature,
        top_p=grpo.top_p,
        loss_type=grpo.loss_type,
        scale_rewards=grpo.scale_rewards,
        epsilon=grpo.epsilon,
        epsilon_high=grpo.epsilon_high or None,  # None: TRL takes epsilon
        top_entropy_quantile=grpo.top_entropy_quantile,
        entropy_coef=grpo.entropy_coef,
        use_adaptive_entropy=grpo.use_adaptive_entropy,
        entropy_target=grpo.entropy_target,
        num_iterations=grpo.num_iterations,
        max_grad_norm=grpo.max_grad_norm,
        lr_scheduler_type=grpo.lr_scheduler_type,
        use_cpu=grpo.use_cpu,
        bf16=grpo.bf16,
        use_vllm=grpo.use_vllm,
        **fields,
    )


def check_trl_config(params) -> None:
    """Build the GRPOConfig (and LoraConfig) the smoke and train runs will build, so TRL's own
    checks run before any stage starts; raise ParamsError naming train.grpo with TRL's reason."""
    with tempfile.TemporaryDirectory() as scratch:
        for steps, save_steps, sampled in (
            (params.smoke.max_steps, None, False),
            (params.train.max_steps, params.train.save_steps, True),
        ):
            try:
                grpo_config(
                    params.train,
                    output_dir=scratch,
                    max_steps=steps,
                    seed=params.seed,
                    reward_weights=params.rewards.weights,
                    save_steps=save_steps,
                    dynamic_sampling=sampled,
                    guidance=sampled,
                    chat_template_kwargs=params.model.chat_template_kwargs,
                )
            except (TypeError, ValueError) as error:
                if isinstance(error, ParamsError):
                    raise
                raise ParamsError(
                    f"params.yaml: train.grpo: TRL's GRPOConfig rejects it: "
                    f"{' '.join(str(error).split())}"
                ) from None
    try:
        peft_config(params.model)
    except (TypeError, ValueError) as error:
        raise ParamsError(
            f"params.yaml: model.lora: peft's LoraConfig rejects it: {' '.join(str(error).split())}"
        ) from None


def peft_config(model: ModelParams):
    """A LoraConfig when model.lora.enabled, else None (full fine-tuning)."""
    if not model.lora.enabled:
        return None

    lora = model.lora
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
