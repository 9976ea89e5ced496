"""The callbacks of a GRPO run: the beta schedule (constant, linear warm-up, or a PPO-style
adaptive controller toward a target KL; the beta in force is logged every step), the guard that
stops the run at the first non-finite loss, KL or grad_norm, and the DVCLive curves (on resume it
first replays the history restored from the checkpoint, so an interrupted run ends with the same
files as an uninterrupted one)."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from rlvr.core.errors import PipelineError
from rlvr.core.metric_keys import (
    GUARDED_KEYS,
    LOSS,
    MEAN_REWARD,
    TIMING_KEYS,
    VALIDATION_CURVE_PREFIX,
    VALIDATION_PREFIX,
)
from rlvr.core.stats import drift_kl
from rlvr.grpo.checkpoints import last_checkpoint
from rlvr.params.training_params import BetaScheduleParams


class NonFiniteMetric(PipelineError):
    """Training produced NaN or Inf in a guarded metric; the run stopped."""


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
        self.trainer = None  # set by rlvr.grpo.run.build_trainer

    def on_train_begin(self, args, state, control, **kwargs):
        # On resume, the adaptive controller's value is not in the checkpoint: rebuild it by
        # observing the restored history's KLs again, in order (the same arithmetic as before).
        self.schedule.reset()
        for entry in state.log_history:
            if LOSS in entry and drift_kl(entry) is not None:
                self.schedule.observe_kl(drift_kl(entry))

    def on_step_begin(self, args, state, control, **kwargs):
        if self.trainer is not None:
            self.trainer.beta = self.schedule.value(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # drift_kl: under dynamic sampling, the KL over the first batch, not the kept groups
        if logs and LOSS in logs and drift_kl(logs) is not None:
            self.schedule.observe_kl(drift_kl(logs))


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
                    f"Last good checkpoint: {last or 'none'}. Lower the learning rate or raise beta."
                )


def loggable(logs: dict[str, Any]) -> dict[str, float]:
    """The numeric, non-timing entries of a log line."""
    return {
        k: float(v)
        for k, v in logs.items()
        if isinstance(v, (int, float))
        and not isinstance(v, bool)
        and k not in TIMING_KEYS
        and k not in ("step", "epoch")
    }


def validation_entry(logs: dict[str, Any]) -> dict[str, float]:
    """The validation scores of a log entry (PipelineGRPOTrainer.evaluate's), without the
    prefix; {} for a training entry.

    >>> validation_entry({"eval_mean_reward": 0.5, "eval_greedy_success": 0.25, "step": 50})
    {'greedy_success': 0.25, 'mean_reward': 0.5}
    >>> validation_entry({"loss": 0.1, "reward": 0.4})
    {}
    """
    if VALIDATION_PREFIX + MEAN_REWARD not in logs:
        return {}
    return {
        key[len(VALIDATION_PREFIX) :]: float(value)
        for key, value in sorted(logs.items())
        if key.startswith(VALIDATION_PREFIX)
    }  # sorted: as a restored history has them


class LiveCurvesCallback(TrainerCallback):
    """Training curves with DVCLive, one point per logged step (step = global step).

    DVCLive's log_metric opens and appends to one TSV per key per call, and make_summary rewrites
    metrics.json: about 3.5 ms a step for the ~30 keys a GRPO step logs, 2.5% of a step of the
    default run. So the points wait in memory and are written every `flush_every` steps, at each
    checkpoint and at the end: each key's TSV is appended once per flush, in DVCLive's row format,
    and the summary is DVCLive's own (tests/test_training.py checks every file byte for byte
    against DVCLive writing point by point). A run killed between flushes loses no point: its
    resume replays the history restored from the checkpoint.
    """

    def __init__(self, live_dir: str | Path, flush_every: int = 25) -> None:
        self.live_dir = Path(live_dir)
        self.flush_every = flush_every
        self.live = None
        self.pending: list[tuple[int, dict[str, float]]] = []
        self.summarized: set[str] = set()  # keys already in the summary, in DVCLive's order

    def _log(self, step: int, logs: dict[str, Any]) -> None:
        values = loggable(logs)
        validation = validation_entry(logs)
        if validation:  # the validation rows' curves: val/mean_reward, val/greedy_success, ...
            values = {VALIDATION_CURVE_PREFIX + key: value for key, value in validation.items()}
        elif not values or LOSS not in logs:
            return
        # sorted: a replayed history keeps one order
        self.pending.append((step, dict(sorted(values.items()))))
        if len(self.pending) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Write the waiting points: one append per key's TSV, then DVCLive's summary."""
        if self.live is None or not self.pending:
            return
        from dvclive.plots import Metric  # see on_train_begin

        rows: dict[str, list[tuple[int, Any]]] = {}
        for step, values in self.pending:
            for key, value in values.items():
                # as DVCLive writes them: NaN and Inf as text
                value = value if math.isfinite(value) else str(value)
                if key not in self.summarized:  # the summary's key order: first logged, first
                    self.live.log_metric(key, value, plot=False)
                    self.summarized.add(key)
                rows.setdefault(key, []).append((step, value))
            self.live.summary.setdefault("step", step)  # where make_summary first puts it
        for key, points in rows.items():
            path = Metric(key, self.live.plots_dir).output_path
            new = not path.exists()
            with open(path, "a", encoding="utf-8", newline="") as handle:
                writer = csv.writer(handle, delimiter="\t", lineterminator=os.linesep)
                if new:
                    writer.writerow(["step", os.path.basename(key)])
                writer.writerows(points)
            self.live.step = points[-1][0]
            self.live.log_metric(key, points[-1][1], plot=False)  # the latest value
        self.live.step = self.pending[-1][0]
        self.live.make_summary()
        self.pending.clear()

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:  # the main process alone writes the curves
            return
        # here, not at the top: the GPU machine's wheels have no dvclive, and the GPU check
        # (scripts/gpu_check.py ABSENT_ON_GPU) trains without the curves
        from dvclive import Live

        self.live = Live(dir=str(self.live_dir), dvcyaml=None, save_dvc_exp=False, resume=False)
        self.summarized.clear()
        self.pending.clear()
        for entry in state.log_history:  # restored from a checkpoint: replay it
            self._log(entry["step"], entry)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.live is not None and logs:
            self._log(state.global_step, logs)

    def on_save(self, args, state, control, **kwargs):
        self.flush()

    def on_train_end(self, args, state, control, **kwargs):
        if self.live is not None:
            self.flush()
            self.live.end()
