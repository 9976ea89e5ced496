"""Reward-hacking and overfitting alarms: explicit rules over a run's history and its validation
scores, with the value each rule saw and its threshold (params.yaml `report.alarms`). Pure
functions of the train stage's outputs, tested offline on synthetic histories.

- format up, correctness flat: the policy learns to look right, not to be right;
- completion length inflating: padding the answer games a length-blind reward;
- KL spike: one step jumps far from the run's recent KL (an unstable update);
- overfitting: the training reward still rises while the validation reward falls from its peak;
- no learning signal: most groups have no reward spread, so most rollouts carry no gradient
  (under dynamic sampling: the batch stays mostly empty after every sampling round);

and two over the step-0 vs final audit (`evaluate`'s summary, rlvr.audit.slices), on the split the
verdict follows:

- diversity collapse: the distinct correct answers per solved prompt, or the policy's entropy on
  its own samples, fell far while the mean reward rose (RL sharpened the policy onto fewer
  answers: pass@k at large k may fall below the base model's);
- slice forgotten: a tag of enough rows regressed (its reward CI below 0, its success or pass@n
  fell to about nothing, or its pass@n CI lies below 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlvr.audit.slices import slice_text, weighed_regressions
from rlvr.core.metric_keys import (
    COMPLETION_LENGTH,
    CORRECTNESS,
    FORMAT,
    KEPT_SHARE,
    MEAN_REWARD,
    NO_SPREAD_SHARE,
    OVERSAMPLING,
    REWARD,
)
from rlvr.core.stats import drift_kl, window_mean


@dataclass(frozen=True)
class AlarmThresholds:
    window: int  # steps in each moving average (report.window)
    format_rise: float  # format reward gains more than this ...
    correctness_flat: float  # ... while correctness gains less than this
    length_growth: float  # smoothed completion length ends this many times its start
    kl_spike_ratio: float  # a step's KL above this many times the previous window's mean
    kl_spike_min: float  # ... and above this absolute value (tiny KLs are noise)
    overfit_drop: float  # validation reward ends this far below its peak ...
    zero_spread_share: float  # smoothed share of groups with no reward spread ends above this
    diversity_drop: float  # distinct correct answers or entropy end this share below step 0's


def _points(
    history: Sequence[dict], key: str | Callable[[dict], float | None]
) -> list[tuple[int, float]]:
    """(step, value) for every entry with a finite `key` (a name, or a function of the entry)."""
    read = key if callable(key) else (lambda e: e.get(key))
    return [
        (e["step"], float(read(e)))
        for e in history
        if read(e) is not None and math.isfinite(float(read(e)))
    ]


def _series(history: Sequence[dict], key: str) -> list[float]:
    return [value for _, value in _points(history, key)]


def _gain(values: Sequence[float], window: int) -> float:
    """Smoothed end minus smoothed start (nan without values)."""
    n = len(values)
    return window_mean(values, n - window, n) - window_mean(values, 0, window)


def kl_spike(kls: Sequence[float], window: int, minimum: float) -> tuple[float, int | None]:
    """The largest ratio of a step's KL to the mean of the `window` steps before it, among
    steps whose KL is above `minimum`; with the index where it happened.

    >>> kl_spike([0.01] * 10 + [0.5] + [0.01] * 5, window=5, minimum=0.05)
    (50.0, 10)
    >>> kl_spike([0.01] * 10, window=5, minimum=0.05)
    (0.0, None)
    """
    best, where = 0.0, None
    for i in range(1, len(kls)):
        before = kls[max(0, i - window) : i]
        mean = sum(before) / len(before)
        if kls[i] > minimum and mean > 0 and kls[i] / mean > best:
            best, where = kls[i] / mean, i
    return round(best, 6), where


def _fall(before: float | None, after: float | None) -> float:
    """The share by which a figure fell (negative: it rose); nan without both.

    >>> _fall(0.5, 0.125), _fall(2.0, 3.0), _fall(None, 1.0)
    (0.75, -0.5, nan)
    """
    if before is None or after is None or not before > 0:
        return math.nan
    return (before - after) / before


def audit_rules(evaluation: dict, t: AlarmThresholds) -> list[dict]:
    """The two alarms over evaluate's summary, on the split its verdict follows."""
    split = evaluation[evaluation["verdict_split"]]
    before, after = split["diversity"]["step0"], split["diversity"]["final"]
    rise = split["delta_mean_reward"]["value"]
    figures = [
        ("distinct correct answers per solved prompt", "distinct_correct_per_solved"),
        ("entropy", "entropy"),
    ]
    falls = {key: _fall(before[key], after[key]) for _, key in figures}
    shown = ", ".join(
        f"{name} {before[key]:.3g} -> {after[key]:.3g} ({-falls[key]:+.0%})"
        for name, key in figures
        if not math.isnan(falls[key])
    )
    forgotten = weighed_regressions(split)
    return [
        {
            "rule": "diversity collapse: distinct correct answers or entropy fall while the mean "
            "reward rises",
            "value": f"{shown or 'not measured'}; mean reward {rise:+.3f}",
            "threshold": f"a fall > {t.diversity_drop:.0%} and mean reward up",
            "fired": rise > 0 and any(f > t.diversity_drop for f in falls.values()),
            "advice": "the policy sharpened onto fewer answers: read pass@k (the base model may "
            "solve more at large k); a larger beta, an entropy bonus or a higher "
            "temperature keep more of them",
        },
        {
            "rule": "slice forgotten: a tag regressed",
            "value": "; ".join(map(slice_text, forgotten)) or "none",
            "threshold": "a tag of at least report.min_slice_rows rows regressed (per-tag table)",
            "fired": bool(forgotten),
            "advice": "the policy stopped solving a kind of problem while the mean rose: the KL "
            "charges little for dropping an answer the reference gave (it is measured on "
            "the policy's own samples); more training rows of that kind, a larger beta, "
            "or an earlier checkpoint (train.select: best_val)",
        },
    ]


def check_alarms(
    history: Sequence[dict],
    validation: Sequence[dict],
    t: AlarmThresholds,
    evaluation: dict | None = None,
) -> dict:
    """Every rule with the value it saw, its threshold, whether it fired and what to do.
    `history`: one entry per training step; `validation`: the validation scores by step
    ({"step", "mean_reward", ...}, step 0 first), empty when none were taken; `evaluation`:
    evaluate's summary (adds the diversity and forgotten-slice alarms)."""
    w = t.window
    fmt, correct = _series(history, FORMAT), _series(history, CORRECTNESS)
    lengths = _series(history, COMPLETION_LENGTH)
    kl_points = _points(history, drift_kl)  # under dynamic sampling: the first batch
    kls = [value for _, value in kl_points]
    # Without dynamic sampling the loss sees every group, so its share with no spread is the
    # share that carries no gradient. With it, those groups are dropped and the loss sees what
    # filled the batch: the empty share is 1 - kept share x oversampling (kept / needed).
    sampled = any(KEPT_SHARE in e for e in history)
    spread = (
        [
            1.0 - kept * over
            for kept, over in zip(_series(history, KEPT_SHARE), _series(history, OVERSAMPLING))
        ]
        if sampled
        else _series(history, NO_SPREAD_SHARE)
    )
    reward_points = _points(history, REWARD)

    format_gain, correct_gain = _gain(fmt, w), _gain(correct, w)
    length_ratio = (
        (window_mean(lengths, len(lengths) - w, len(lengths)) / window_mean(lengths, 0, w))
        if lengths and window_mean(lengths, 0, w) > 0
        else math.nan
    )
    spike, spike_at = kl_spike(kls, w, t.kl_spike_min)
    zero_spread = window_mean(spread, len(spread) - w, len(spread))

    val_drop = train_rise = math.nan
    peak_step = None
    if len(validation) >= 2:
        peak = max(validation, key=lambda s: s[MEAN_REWARD])  # the first of equals
        peak_step = peak["step"]
        val_drop = peak[MEAN_REWARD] - validation[-1][MEAN_REWARD]
        after = [r for s, r in reward_points if s > peak_step]
        upto = [r for s, r in reward_points if s <= peak_step]
        if after and upto:
            train_rise = window_mean(after, len(after) - w, len(after)) - window_mean(
                upto, len(upto) - w, len(upto)
            )

    rules = [
        {
            "rule": "format reward up while correctness is flat",
            "value": f"format {format_gain:+.3f}, correctness {correct_gain:+.3f}",
            "threshold": f"format > +{t.format_rise}, correctness < +{t.correctness_flat}",
            "fired": format_gain > t.format_rise and correct_gain < t.correctness_flat,
            "advice": "the policy learns the answer's shape, not the answer: lower the format "
            "weight or check the correctness verifier",
        },
        {
            "rule": "completion length inflating (smoothed end / start)",
            "value": length_ratio,
            "threshold": f"> {t.length_growth}",
            "fired": length_ratio > t.length_growth,
            "advice": "longer answers may be gaming the reward: add the length reward or lower "
            "max_completion_length",
        },
        {
            "rule": "KL spike (a step's KL / the previous window's mean)",
            "value": spike if spike_at is None else f"{spike:.1f} at step {kl_points[spike_at][0]}",
            "threshold": f"> {t.kl_spike_ratio} (and KL > {t.kl_spike_min})",
            "fired": spike > t.kl_spike_ratio,
            "advice": "an unstable update: lower the learning rate or max_grad_norm, or raise beta",
        },
        {
            "rule": "overfitting: training reward up while validation falls from its peak",
            "value": (
                "no validation scores"
                if peak_step is None
                else f"validation peaks at the last scored step, {peak_step}"
                if math.isnan(train_rise)
                else f"validation {-val_drop:+.3f} since its peak at step {peak_step}, "
                f"training {train_rise:+.3f}"
            ),
            "threshold": f"validation drop > {t.overfit_drop} and training rise > 0",
            "fired": val_drop > t.overfit_drop and train_rise > 0,
            "advice": "keep the best validation checkpoint (train.select: best_val), stop earlier "
            "(train.patience) or add training rows",
        },
        {
            "rule": (
                "no learning signal: share of the batch dynamic sampling left empty "
                "(smoothed, at the end)"
            )
            if sampled
            else "no learning signal: groups with no reward spread (smoothed, at the end)",
            "value": zero_spread,
            "threshold": f"> {t.zero_spread_share}",
            "fired": zero_spread > t.zero_spread_share,
            "advice": (
                "the training prompts are (nearly) all solved or all failed, so each step "
                "trains on a few groups: more or harder training rows (more "
                "train.max_sampling_rounds helps only while some prompts keep a spread)"
            )
            if sampled
            else (
                "most rollouts carry no gradient: harder or more varied prompts, more "
                "generations per prompt, or dynamic sampling (train.dynamic_sampling)"
            ),
        },
    ]
    if evaluation is not None:
        rules += audit_rules(evaluation, t)
    return {"rules": rules, "fired": [r["rule"] for r in rules if r["fired"]]}
