"""Small statistics every part of the pipeline shares, with one rule for missing values: None,
NaN and infinities are skipped, and a mean of nothing is NaN."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from math import comb

from rlvr.core.metric_keys import FIRST_BATCH_KL, KL


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
    return finite_mean(values[max(0, start) : max(0, end)])


def moving_average(values: Sequence[float | None], window: int) -> list[float]:
    """Trailing moving average: point i is the finite mean of the `window` values ending at i.

    The plotted curves and the KL/beta diagnosis both smooth with this.

    >>> moving_average([1.0, 3.0, float("nan"), 5.0], 2)
    [1.0, 2.0, 3.0, 5.0]
    """
    return [window_mean(values, i - window + 1, i + 1) for i in range(len(values))]


# --------------------------------------------------------------------------- which KL to read


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
    value = entry.get(FIRST_BATCH_KL, entry.get(KL))
    return None if value is None else float(value)


def kl_source(history: Sequence[dict]) -> str:
    """What drift_kl read in this history, in words for the report and the summary.

    >>> kl_source([{"kl": 5.0, FIRST_BATCH_KL: 0.3}]), kl_source([{"kl": 0.2}])
    ('the first batch of each step, every group (dynamic sampling)', 'the trained batch')
    """
    if any(FIRST_BATCH_KL in e for e in history):
        return "the first batch of each step, every group (dynamic sampling)"
    return "the trained batch"


# --------------------------------------------------------------------------- an interval's side of 0

# An interval end closer to 0 than this holds 0. The bootstrap statistics here are means of
# rationals summed in floats (pass@k gains, means over 3 seeds): a true 0 comes out as about
# +-1e-17, and no verdict may turn on that. Every rule that reads an interval end against 0 reads
# it through above_zero / below_zero (tests/test_zero_noise.py).
ZERO_NOISE = 1e-12


def above_zero(ci: Mapping) -> bool:
    """The interval (`ci_low`, `ci_high`) lies above 0, beyond float noise.

    >>> above_zero({"ci_low": 0.01, "ci_high": 0.2}), above_zero({"ci_low": 1e-17, "ci_high": 1})
    (True, False)
    """
    return ci["ci_low"] > ZERO_NOISE


def below_zero(ci: Mapping) -> bool:
    """The interval lies below 0, beyond float noise.

    >>> below_zero({"ci_low": -0.2, "ci_high": -0.01}), below_zero({"ci_low": -1, "ci_high": -1e-17})
    (True, False)
    """
    return ci["ci_high"] < -ZERO_NOISE


# --------------------------------------------------------------------------- tests and their correction


def bootstrap_p(distribution) -> float:
    """Two-sided bootstrap p-value of "the statistic is 0": twice the smaller share of the
    resampled statistics on either side of 0 (a draw within ZERO_NOISE of 0 counts on both
    sides), with the +1 that keeps it above 0 (Davison & Hinkley 1997, eq. 4.11).

    >>> bootstrap_p([1e-17] * 9), bootstrap_p([0.5] * 9), bootstrap_p([-1, 1, 2, 3])
    (1.0, 0.2, 0.8)
    """
    import numpy as np

    draws = np.asarray(distribution, dtype=float)
    low = int(np.sum(draws <= ZERO_NOISE)) + 1
    high = int(np.sum(draws >= -ZERO_NOISE)) + 1
    return min(1.0, 2 * min(low, high) / (len(draws) + 1))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the order given: a figure is
    significant at level alpha when its adjusted p is <= alpha, and the family's chance of any
    false claim stays <= alpha. (statsmodels has it; it is not pinned for ten lines.)

    >>> holm([0.01, 0.04, 0.03, 0.5])
    [0.04, 0.09, 0.09, 0.5]
    """
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [1.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = round(running, 12)  # (3 x 0.03 is 0.09000000000000001 in floats)
    return adjusted


def holm_decide(figures: Sequence[dict], alpha: float) -> None:
    """Holm over a family of figures (each with `value` and `p_value`): sets each one's
    `p_holm` and `holm` ("above 0", "below 0" or "holds 0"), in place.

    >>> family = [{"value": 0.2, "p_value": 0.001}, {"value": -0.1, "p_value": 0.04}]
    >>> holm_decide(family, 0.05); [(d["p_holm"], d["holm"]) for d in family]
    [(0.002, 'above 0'), (0.04, 'below 0')]
    """
    for figure, adjusted in zip(figures, holm([d["p_value"] for d in figures])):
        significant = adjusted <= alpha and abs(figure["value"]) > ZERO_NOISE
        figure["p_holm"] = adjusted
        figure["holm"] = (
            ("above 0" if figure["value"] > 0 else "below 0") if significant else "holds 0"
        )


# --------------------------------------------------------------------------- paired comparison


def paired_ci(
    deltas: Sequence[float], confidence: float = 0.95, n_resamples: int = 10000, seed: int = 0
) -> dict:
    """Mean of per-prompt deltas with a bootstrap CI over prompts (scipy.stats.bootstrap, BCa;
    the percentile interval where BCa is undefined, as on a few rows that barely vary).

    `p_value`: bootstrap_p of the resampled means, for a Holm correction (holm_decide).

    >>> paired_ci([0.0] * 5), paired_ci([-1.0] * 9 + [0.0] * 7, n_resamples=2000)["ci_high"] < 0
    ({'value': 0.0, 'ci_low': 0.0, 'ci_high': 0.0, 'p_value': 1.0}, True)
    """
    # here, not at the top: scipy.stats takes ~0.8 s to import, and metric_keys imports this
    # module, so every stage and check would pay it (measured 2026-12-04, 2 cores)
    import numpy as np
    from scipy.stats import bootstrap

    values = np.asarray(deltas, dtype=float)
    mean = float(values.mean()) if len(values) else math.nan
    if len(values) < 2 or np.all(values == values[0]):
        return _constant(mean, len(values), n_resamples)
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy warns, then returns NaN, where BCa fails
            result = bootstrap(
                (values,),
                np.mean,
                confidence_level=confidence,
                n_resamples=n_resamples,
                method=method,
                random_state=np.random.default_rng(seed),
            )
        interval = result.confidence_interval
        if math.isfinite(interval.low) and math.isfinite(interval.high):
            break
    return {
        "value": mean,
        "ci_low": float(interval.low),
        "ci_high": float(interval.high),
        "p_value": bootstrap_p(result.bootstrap_distribution),
    }


def _constant(mean: float, cells: int, n_resamples: int) -> dict:
    """A statistic every resample repeats: its interval is the point; its p-value is what
    bootstrap_p gives a constant distribution (1 for one cell: no evidence at all)."""
    p = 1.0 if cells < 2 or not math.isfinite(mean) else bootstrap_p([mean] * n_resamples)
    return {"value": mean, "ci_low": mean, "ci_high": mean, "p_value": p}


def seeds_and_prompts_ci(
    deltas: Sequence[Sequence[float]],
    confidence: float = 0.95,
    n_resamples: int = 10000,
    seed: int = 0,
) -> dict:
    """Mean of a seeds x prompts table of paired deltas, with a bootstrap CI that holds both
    training noise and prompt noise: each resample draws seeds with replacement and, crossed
    with them, prompts with replacement (a two-level bootstrap; scipy.stats.bootstrap over two
    independent index samples, percentile interval). One seed: the prompts' CI alone.

    Not rliable's stratified bootstrap (rliable 1.2.0 needs arch<8, which breaks on the pinned
    pandas 3.1): rliable resamples runs within each task; here the tasks are the prompts, which
    are themselves a sample, so both levels are drawn.

    >>> seeds_and_prompts_ci([[0.0, 0.0], [0.0, 0.0]])
    {'value': 0.0, 'ci_low': 0.0, 'ci_high': 0.0, 'p_value': 1.0}
    >>> ci = seeds_and_prompts_ci([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]], n_resamples=2000)
    >>> ci["value"], ci["ci_low"] < 0.375 < ci["ci_high"]
    (0.375, True)
    """
    import numpy as np
    from scipy.stats import bootstrap

    table = np.asarray(deltas, dtype=float)
    mean = float(table.mean()) if table.size else math.nan
    if table.ndim != 2 or table.size < 2 or np.all(table == table.flat[0]):
        return _constant(mean, table.size, n_resamples)
    seeds, prompts = table.shape

    if seeds == 1:
        return paired_ci(table[0], confidence, n_resamples, seed)

    def statistic(s, p, axis=-1):  # s, p: index resamples, batched in their leading axes
        per_prompt = table[s].mean(axis=-2)  # each resample's seeds, averaged per prompt
        return np.take_along_axis(per_prompt, p, axis=-1).mean(axis=-1)

    result = bootstrap(
        (np.arange(seeds), np.arange(prompts)),
        statistic,
        paired=False,
        vectorized=True,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method="percentile",
        batch=1000,
        random_state=np.random.default_rng(seed),
    )
    interval = result.confidence_interval
    return {
        "value": mean,
        "ci_low": float(interval.low),
        "ci_high": float(interval.high),
        "p_value": bootstrap_p(result.bootstrap_distribution),
    }


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator (Chen et al. 2021): the chance that k of the n samples,
    drawn without replacement, hold at least one of the c correct ones: 1 - C(n-c, k) / C(n, k).

    >>> pass_at_k(8, 0, 4), pass_at_k(8, 8, 1), pass_at_k(4, 1, 2), pass_at_k(32, 2, 32)
    (0.0, 1.0, 0.5, 1.0)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every draw of k holds a correct one
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)  # exact integers, one rounding


def k_values(n: int) -> list[int]:
    """The k the audit reports: powers of two below n, then n itself.

    >>> k_values(32), k_values(12), k_values(1)
    ([1, 2, 4, 8, 16, 32], [1, 2, 4, 8, 12], [1])
    """
    ks = [2**i for i in range(n.bit_length()) if 2**i < n]
    return [*ks, n]


def pass_at_k_curve(counts: Sequence[int], n: int) -> dict[str, float]:
    """Mean pass@k over prompts (c correct of n each), for every k of k_values(n); keys are k as
    text (JSON object keys).

    >>> pass_at_k_curve([0, 1, 4], 4)
    {'1': 0.4166666666666667, '2': 0.5, '4': 0.6666666666666666}
    """
    return {str(k): finite_mean(pass_at_k(n, c, k) for c in counts) for k in k_values(n)}
