"""One GRPO run from params: the config, the reward functions, the callbacks and the validation
scoring wired into a PipelineGRPOTrainer, trained to max_steps. The smoke and train stages call
run_grpo (rlvr.pipeline.training)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from transformers import EarlyStoppingCallback, ProgressCallback, TrainerCallback, set_seed

from rlvr.core.console import use_console_progress
from rlvr.core.faults import Stopped
from rlvr.data.rows import to_hf_dataset
from rlvr.grpo.callbacks import (
    BetaSchedule,
    BetaScheduleCallback,
    FiniteGuardCallback,
    LiveCurvesCallback,
)
from rlvr.grpo.config import PipelineGRPOConfig, grpo_config, peft_config
from rlvr.grpo.trainer import PipelineGRPOTrainer
from rlvr.grpo.validation import Validation
from rlvr.params.training_params import ModelParams
from rlvr.rewards.registry import RewardFunction, build_reward_funcs


def build_trainer(
    policy: str,
    train_dataset,
    reward_funcs: Sequence[RewardFunction],
    config: PipelineGRPOConfig,
    model: ModelParams,
    callbacks: Sequence[TrainerCallback],
    beta_schedule: BetaSchedule | None = None,
    validation=None,
    eval_dataset=None,
    guides: Mapping[str, Sequence[str]] | None = None,
) -> PipelineGRPOTrainer:
    """The trainer, with the beta schedule bound to it; `guides`: each row id's verified answers
    (config.guidance)."""
    callbacks = list(callbacks)
    schedule_callback = BetaScheduleCallback(beta_schedule) if beta_schedule else None
    if schedule_callback:
        callbacks.insert(0, schedule_callback)
    trainer = PipelineGRPOTrainer(
        model=policy,
        reward_funcs=list(reward_funcs),
        args=config,
        train_dataset=train_dataset,
        callbacks=callbacks,
        peft_config=peft_config(model),
        validation=validation,
        eval_dataset=eval_dataset,
        guides=guides,
    )
    if schedule_callback:
        schedule_callback.trainer = trainer
        trainer.beta = beta_schedule.value(0)
    return trainer


def run_grpo(
    params,
    rows,
    policy: str,
    output_dir: str | Path,
    max_steps: int,
    save_steps: int | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    resume_from: str | None = None,
    reward_funcs: Sequence[RewardFunction] | None = None,
    label: str = "train",
    validation: Validation | None = None,
    dynamic_sampling: bool = False,
    guides: Mapping[str, Sequence[str]] | None = None,
) -> PipelineGRPOTrainer:
    """Train `policy` with GRPO on `rows` for max_steps (resuming from a checkpoint if given); the
    console shows a progress bar and one line every train.log_every steps, starting `label:`.
    With `validation` and train.eval_steps, its rows are scored by its scorer at step 0 and
    every eval_steps steps; train.select and train.patience then pick the final weights and stop.
    dynamic_sampling: run train.dynamic_sampling as params set it (the train stage; the smoke
    run samples each batch once). guides: each row id's verified answers, for train.guidance
    (the train stage's, from stage rft; None: no guidance, the smoke run)."""
    set_seed(params.seed)
    train = params.train
    # with validation (the caller's), every param it needs, whatever their values: the reads
    # a stage makes never depend on values (rlvr/pipeline/stage.py)
    eval_steps, select, patience = (
        (train.eval_steps, train.select, train.patience) if validation else (0, "last", 0)
    )
    schedule = BetaSchedule(train.beta_schedule, train.grpo.beta)
    config = grpo_config(
        train,
        output_dir=output_dir,
        max_steps=max_steps,
        seed=params.seed,
        reward_weights=params.rewards.weights,
        save_steps=save_steps,
        dynamic_sampling=dynamic_sampling,
        guidance=guides is not None,
        eval_steps=eval_steps,
        select_best=bool(eval_steps) and select == "best_val",
        chat_template_kwargs=params.model.chat_template_kwargs,
    )
    funcs = list(reward_funcs) if reward_funcs is not None else build_reward_funcs(params.rewards)
    dataset = to_hf_dataset(rows, conversational=params.model.chat_template)
    eval_dataset = None
    if eval_steps:
        eval_dataset = to_hf_dataset(validation.rows, conversational=params.model.chat_template)
        if patience:
            callbacks = [*callbacks, EarlyStoppingCallback(early_stopping_patience=patience)]
    trainer = build_trainer(
        policy,
        dataset,
        funcs,
        config,
        params.model,
        [FiniteGuardCallback(output_dir if save_steps else None), *callbacks],
        beta_schedule=schedule,
        validation=validation.score if eval_steps else None,
        eval_dataset=eval_dataset,
        guides=guides,
    )
    if resume_from:
        trainer.resume_running_mean(resume_from)
    use_console_progress(trainer, label, train.log_every)
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    except BaseException as error:
        # a NaN stop or a crash skips on_train_end: the curves still get every logged step
        for callback in trainer.callback_handler.callbacks:
            if isinstance(callback, LiveCurvesCallback):
                callback.flush()
            if isinstance(callback, ProgressCallback) and callback.training_bar is not None:
                callback.training_bar.close()  # the line that says why starts a line of its own
                callback.training_bar = None
        if isinstance(error, Stopped):  # say where: steps done of the run's budget
            raise Stopped(
                f"{error} after step {trainer.state.global_step} of {max_steps}"
            ) from None
        raise
    return trainer
