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
