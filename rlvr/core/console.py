"""What a person sees of a training loop in the console: the Trainer's progress bar with one
compact line every few steps, instead of the whole log dict at every step (every logged key still
goes to history.jsonl and DVCLive)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from transformers import PrinterCallback, ProgressCallback

from rlvr.core.metric_keys import (
    BETA,
    CORRECTNESS,
    FIRST_BATCH_KL,
    GREEDY_SUCCESS,
    KEPT_SHARE,
    KL,
    LOSS,
    MEAN_REWARD,
    REWARD,
    VALIDATION_PREFIX,
)
from rlvr.core.stats import drift_kl

# What the console shows of a GRPO log line (every key still goes to history.jsonl and DVCLive).
CONSOLE_KEYS = ((REWARD, "reward"), (CORRECTNESS, "correctness"), (KL, "kl"), (BETA, "beta"))


def compact_line(
    label: str,
    step: int,
    max_steps: int,
    logs: dict[str, Any],
    keys: Sequence[tuple[str, str]],
    seconds_per_step: float | None,
) -> str:
    """One console line for a logged step: the keys a person follows, and the pace.

    >>> compact_line("train", 25, 400, {"reward": 0.5, "kl": 0.01234, "beta": 0.05, "loss": 0.1},
    ...              CONSOLE_KEYS, 0.162)
    'train: step 25/400 | reward 0.500 | kl 0.0123 | beta 0.05 | 0.16 s/step'

    Under dynamic sampling `kl` is the KL over the step's first batch, every group
    (stats.drift_kl: TRL's is over the kept groups only), followed by the share of generated
    groups kept:

    >>> compact_line("train", 25, 400, {"reward": 0.5, "kl": 6.2, FIRST_BATCH_KL: 0.17,
    ...              KEPT_SHARE: 0.05}, CONSOLE_KEYS, None)
    'train: step 25/400 | reward 0.500 | kl 0.170 | kept 0.05 of generated groups'
    """
    if FIRST_BATCH_KL in logs:
        logs = {**logs, KL: drift_kl(logs)}
    parts = [f"{label}: step {step}/{max_steps}"]
    for key, name in keys:
        value = logs.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            parts.append(f"{name} {value:.3g}" if 0 < abs(value) < 0.1 else f"{name} {value:.3f}")
    if KEPT_SHARE in logs:
        parts.append(f"kept {logs[KEPT_SHARE]:.2f} of generated groups")
    if seconds_per_step is not None:
        parts.append(f"{seconds_per_step:.2f} s/step")
    return " | ".join(parts)


class ConsoleProgress(ProgressCallback):
    """The Trainer's progress bar, with one compact line every `every` steps (and at the last)
    instead of the Trainer's whole log dict at every step."""

    def __init__(
        self, label: str, every: int, keys: Sequence[tuple[str, str]] = CONSOLE_KEYS
    ) -> None:
        super().__init__()
        self.label, self.every, self.keys = label, every, keys
        self.mark: tuple[float, int] | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        self.mark = (time.monotonic(), state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        step = state.global_step
        if (
            state.is_world_process_zero
            and self.training_bar is not None
            and logs
            and VALIDATION_PREFIX + MEAN_REWARD in logs
        ):
            self.training_bar.write(
                f"{self.label}: step {step}/{state.max_steps} | validation: mean reward "
                f"{logs[VALIDATION_PREFIX + MEAN_REWARD]:.3f} | greedy success "
                f"{logs.get(VALIDATION_PREFIX + GREEDY_SUCCESS, float('nan')):.3f}"
            )
            return
        if (
            not state.is_world_process_zero
            or self.training_bar is None
            or not logs
            or LOSS not in logs
            or (step % self.every and step != state.max_steps)
        ):
            return
        now, pace = time.monotonic(), None
        if self.mark is not None and step > self.mark[1]:
            pace = (now - self.mark[0]) / (step - self.mark[1])
        self.mark = (now, step)
        self.training_bar.write(
            compact_line(self.label, step, state.max_steps, logs, self.keys, pace)
        )


def use_console_progress(
    trainer, label: str, every: int, keys: Sequence[tuple[str, str]] = CONSOLE_KEYS
) -> None:
    """Swap the Trainer's progress printer for ConsoleProgress."""
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(ConsoleProgress(label, every, keys))
