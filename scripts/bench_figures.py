"""The pure parts of the benchmark (scripts/bench.py): figures with their samples and targets,
medians and the interval of a median, the printed table, the JSON, and the step clock's
arithmetic. No process is started and nothing is timed here."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence

SCHEMA = 1  # of reports/bench.json


@dataclasses.dataclass(frozen=True)
class Target:
    """A figure's target: its median must be `op` (">=" or "<=") `value`."""

    op: str
    value: float

    def met(self, x: float) -> bool | None:
        """Whether x meets the target (None when x is not a number).

        >>> Target(">=", 0.98).met(0.99), Target("<=", 2.0).met(2.5), Target("<=", 1).met(math.nan)
        (True, False, None)
        """
        if x is None or not math.isfinite(x):
            return None
        return x >= self.value if self.op == ">=" else x <= self.value


@dataclasses.dataclass
class Figure:
    """One measured figure: its repetitions, how to show it, and its target if it has one."""

    key: str
    label: str
    unit: str  # see UNITS
    samples: list[float]
    target: Target | None = None
    note: str = ""
    interval: tuple[float, float] | None = None  # a 95% interval of the median, where measured

    def __post_init__(self):
        if self.unit not in UNITS:  # caught here, not when the table prints at the end
            raise ValueError(f"figure {self.key}: unit {self.unit!r} is not one of {list(UNITS)}")

    @property
    def median(self) -> float:
        return median_min(self.samples)[0]

    @property
    def min(self) -> float:
        return median_min(self.samples)[1]

    @property
    def met(self) -> bool | None:
        return self.target.met(self.median) if self.target else None

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "label": self.label,
            "unit": self.unit,
            "median": finite_or_none(self.median),
            "min": finite_or_none(self.min),
            "n": len(self.samples),
            "samples": [finite_or_none(s) for s in self.samples],
            "target": dataclasses.asdict(self.target) if self.target else None,
            "met": self.met,
            "note": self.note,
            "median_interval_95": list(self.interval) if self.interval else None,
        }


# How each unit is shown: a share as a percentage, times and rates with a few digits.
UNITS: dict[str, Callable[[float], str]] = {
    "x": lambda v: f"{v:.3f}",
    "share": lambda v: f"{v:.2%}",
    "s": lambda v: f"{v:.2f} s",
    "s/step": lambda v: f"{v:.3f} s/step",
    "s/prompt": lambda v: f"{v:.3f} s/prompt",
    "steps/s": lambda v: f"{v:.2f} steps/s",
}


def median_min(samples: Sequence[float]) -> tuple[float, float]:
    """(median, min) of the finite samples; (nan, nan) when there are none.

    >>> median_min([3.0, 1.0, 2.0, 10.0]), median_min([]), median_min([math.nan, 4.0])
    ((2.5, 1.0), (nan, nan), (4.0, 4.0))
    """
    finite = [s for s in samples if s is not None and math.isfinite(s)]
    if not finite:
        return math.nan, math.nan
    return statistics.median(finite), min(finite)


def finite_or_none(x: float | None) -> float | None:
    """JSON has no NaN: a missing figure is null."""
    return x if x is not None and math.isfinite(x) else None


def show(value: float, unit: str) -> str:
    """A value as the table shows it.

    >>> show(0.98765, "x"), show(0.0123, "share"), show(1.5, "s"), show(math.nan, "s")
    ('0.988', '1.23%', '1.50 s', '-')
    """
    if value is None or not math.isfinite(value):
        return "-"
    return UNITS[unit](value)


def show_target(figure: Figure) -> str:
    """The target as the table shows it.

    >>> show_target(Figure("k", "l", "share", [0.01], Target("<=", 0.02)))
    '<= 2.00%'
    """
    if figure.target is None:
        return ""
    return f"{figure.target.op} {show(figure.target.value, figure.unit)}"


MET_WORDS = {True: "yes", False: "NO", None: ""}


def format_table(figures: Sequence[Figure]) -> str:
    """The printed table: one row per figure; targets held against the median.

    >>> print(format_table([Figure("a", "ratio", "x", [0.97, 0.99, 1.0], Target(">=", 0.98),
    ...                            interval=(0.97, 1.0)), Figure("b", "time", "s", [1.0])]))
    figure | median [95% interval] | min    | n | target   | met?
    -------+-----------------------+--------+---+----------+-----
    ratio  | 0.990 [0.970, 1.000]  | 0.970  | 3 | >= 0.980 | yes
    time   | 1.00 s                | 1.00 s | 1 |          |
    """
    header = ("figure", "median [95% interval]", "min", "n", "target", "met?")
    rows = [
        (
            f.label,
            show(f.median, f.unit)
            + (
                f" [{show(f.interval[0], f.unit)}, {show(f.interval[1], f.unit)}]"
                if f.interval
                else ""
            ),
            show(f.min, f.unit),
            str(len(f.samples)),
            show_target(f),
            MET_WORDS[f.met],
        )
        for f in figures
    ]
    widths = [max([len(header[i])] + [len(r[i]) for r in rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(header), "-+-".join("-" * w for w in widths), *(line(r) for r in rows)])


def steady_rate(clock: Sequence[Sequence[float]], warmup: int, last: int) -> tuple[float, float]:
    """(steps/s, reward functions' share of the time) from step `warmup`'s end to step `last`'s.

    clock: one (step, seconds, cumulative reward-function seconds) per finished step, as the
    worker's StepClock records them.

    >>> clock = [(1, 10.0, 0.1), (2, 10.5, 0.11), (3, 11.0, 0.12), (4, 11.5, 0.13)]
    >>> steady_rate(clock, 2, 4)
    (2.0, 0.02)
    """
    at = {int(step): (seconds, rewards) for step, seconds, rewards in clock}
    if warmup not in at or last not in at or last <= warmup:
        return math.nan, math.nan
    seconds = at[last][0] - at[warmup][0]
    return (last - warmup) / seconds, round((at[last][1] - at[warmup][1]) / seconds, 12)


def step_profile(
    clock: Sequence[Sequence[float]], warmup: int, last: int, save_steps: int | None = None
) -> dict:
    """Where a run's timed steps went: the median step (what every step costs) and, with
    checkpoints, the median extra time of a step that follows a save (the Trainer saves after
    step s ends, so the save falls in step s + 1's interval); and the steps/s they make,
    1 / (median step + extra per checkpoint / save_steps): a rate that a few seconds of another
    process's load on a shared machine barely moves, unlike the timed span's.

    >>> clock = [(s, 0.1 * s + (0.5 if s > 4 else 0.0), 0.0) for s in range(1, 9)]
    >>> step_profile(clock, 2, 8, save_steps=4)
    {'median_step': 0.1, 'checkpoint_extra': 0.5, 'typical_steps_per_s': 4.444444}
    >>> step_profile(clock, 5, 8)
    {'median_step': 0.1, 'typical_steps_per_s': 10.0}
    """
    at = {int(step): seconds for step, seconds, _ in clock}
    interval = {
        s: at[s] - at[s - 1] for s in range(warmup + 1, last + 1) if s in at and s - 1 in at
    }
    profile = {
        "median_step": round(statistics.median(interval.values()), 6) if interval else math.nan
    }
    if save_steps:
        after_save = [
            interval[s + 1]
            for s in range(warmup, last)
            if s % save_steps == 0 and s + 1 in interval
        ]
        profile["checkpoint_extra"] = (
            round(statistics.median(after_save) - profile["median_step"], 6)
            if after_save
            else math.nan
        )
    per_step = profile["median_step"] + (
        profile["checkpoint_extra"] / save_steps if save_steps else 0.0
    )
    profile["typical_steps_per_s"] = round(1 / per_step, 6) if per_step > 0 else math.nan
    return profile


def bench_json(
    figures: Sequence[Figure],
    *,
    mode: str,
    measurements: Sequence[str],
    seconds: float,
    machine: dict,
    details: dict,
    errors: dict,
    complete: bool = True,
) -> dict:
    """What reports/bench.json holds: every figure with its samples and target, and the context
    (`complete` is false in the file a run writes after each measurement but the last).

    >>> out = bench_json([Figure("a.b", "x", "s", [1.0, 2.0], Target("<=", 2.0))], mode="quick",
    ...                  measurements=["a"], seconds=1.0, machine={}, details={}, errors={})
    >>> out["figures"][0]["median"], out["figures"][0]["met"], out["targets_missed"]
    (1.5, True, [])
    """
    return {
        "schema": SCHEMA,
        "command": "./dev bench" + (" --quick" if mode == "quick" else ""),
        "mode": mode,
        "measurements": list(measurements),
        "complete": complete,
        "seconds": round(seconds, 1),
        "machine": machine,
        "figures": [f.to_json() for f in figures],
        "targets_missed": [f.key for f in figures if f.met is False],
        "details": details,
        "errors": errors,
    }


def median_interval(
    samples: Sequence[float], confidence: float = 0.95, resamples: int = 10000, seed: int = 0
) -> tuple[float, float] | None:
    """A bootstrap interval of the median of `samples` (scipy.stats.bootstrap, percentile; the
    median's BCa is ill-defined on ties), None with fewer than 3 finite samples.

    >>> low, high = median_interval([0.99, 1.0, 1.01, 0.98, 1.02, 1.0])
    >>> low <= 1.0 <= high, high - low < 0.05
    (True, True)
    >>> median_interval([1.0, 2.0]) is None
    True
    """
    import numpy as np
    from scipy.stats import bootstrap

    finite = [s for s in samples if s is not None and math.isfinite(s)]
    if len(finite) < 3:
        return None
    result = bootstrap(
        (np.array(finite),),
        np.median,
        confidence_level=confidence,
        n_resamples=resamples,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def interleaved(pair: Sequence[str], rep: int) -> list[str]:
    """The order of repetition `rep`: A B, then B A, and so on (a drift in the machine's load
    then weighs on both sides alike).

    >>> [interleaved(("bare", "pipeline"), rep) for rep in range(3)]
    [['bare', 'pipeline'], ['pipeline', 'bare'], ['bare', 'pipeline']]
    """
    return list(pair) if rep % 2 == 0 else list(reversed(pair))
