"""Small statistics every part of the pipeline shares, with one rule for missing values: None,
NaN and infinities are skipped, and a mean of nothing is NaN."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def finite_mean(values: Iterable[float | None]) -> float:
    """Mean of the finite values (None, NaN and Inf skipped); NaN when there are none.

    >>> finite_mean([1.0, None, float("nan"), 3.0])
    2.0
    >>> finite_mean([])
    nan
    """
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    return sum(kept) / len(kept) if kept else math.nan


def window_mean(values: Sequence[float | None], start: int, end: int) -> float:
    """finite_mean of values[start:end], with start and end clamped at 0."""
    return finite_mean(values[max(0, start):max(0, end)])


def moving_average(values: Sequence[float | None], window: int) -> list[float]:
    """Trailing moving average: point i is the finite mean of the `window` values ending at i.

    The plotted curves and the KL/beta diagnosis both smooth with this.

    >>> moving_average([1.0, 3.0, float("nan"), 5.0], 2)
    [1.0, 2.0, 3.0, 5.0]
    """
    return [window_mean(values, i - window + 1, i + 1) for i in range(len(values))]


# --------------------------------------------------------------------------- which KL to read

FIRST_BATCH_KL = "dynamic_sampling/kl_first_batch"


def drift_kl(entry: dict) -> float | None:
    """How far the policy had moved from the reference at a logged step (k3, per token).

    TRL's `kl` is the mean over the batch the loss sees. Under dynamic sampling that batch holds
    only the groups with reward spread: the prompts the policy is least sure of, where it moved
    most, and late in a run a handful of them. So the trainer also logs the KL over the step's
    first batch, every group kept or dropped (FIRST_BATCH_KL): the batch a run without dynamic
    sampling trains on, so the figure compares with its `kl`; the diagnosis, the alarms, the
    adaptive beta and the headline read it when it is there.

    >>> drift_kl({"kl": 5.0, FIRST_BATCH_KL: 0.3}), drift_kl({"kl": 0.2}), drift_kl({"loss": 1.0})
    (0.3, 0.2, None)
    """
    value = entry.get(FIRST_BATCH_KL, entry.get("kl"))
    return None if value is None else float(value)


def kl_source(history: Sequence[dict]) -> str:
    """What drift_kl read in this history, in words for the report and the summary.

    >>> kl_source([{"kl": 5.0, FIRST_BATCH_KL: 0.3}]), kl_source([{"kl": 0.2}])
    ('the first batch of each step, every group (dynamic sampling)', 'the trained batch')
    """
    if any(FIRST_BATCH_KL in e for e in history):
        return "the first batch of each step, every group (dynamic sampling)"
    return "the trained batch"
