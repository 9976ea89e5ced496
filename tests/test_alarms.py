"""Each reward-hacking / overfitting alarm fires on a synthetic history made to trip it, and on
none made not to (rlvr.audit.alarms, thresholds as params.yaml's defaults)."""

import dataclasses

import pytest

from rlvr.audit.alarms import AlarmThresholds, check_alarms
from rlvr.params.config import parse_params

REPORT = parse_params({}).report
T = AlarmThresholds(window=REPORT.window, **dataclasses.asdict(REPORT.alarms))
STEPS = 400

FORMAT = "format reward up while correctness is flat"
LENGTH = "completion length inflating (smoothed end / start)"
SPIKE = "KL spike (a step's KL / the previous window's mean)"
OVERFIT = "overfitting: training reward up while validation falls from its peak"
NO_SIGNAL = "no learning signal: groups with no reward spread (smoothed, at the end)"


def healthy(step: int) -> dict:
    """A run that learns: correctness and format rise together, stable length and KL, most
    groups keep a reward spread."""
    x = step / STEPS
    return {
        "step": step,
        "reward": 0.2 + 0.5 * x,
        "rewards/correctness/mean": 0.1 + 0.5 * x,
        "rewards/format/mean": 0.5 + 0.3 * x,
        "completions/mean_length": 4.0 + (step % 3) * 0.1,
        "kl": 0.02 + 0.03 * x + (step % 5) * 0.002,
        "frac_reward_zero_std": 0.2 + 0.1 * x,
    }


def history(change=None) -> list[dict]:
    entries = [healthy(step) for step in range(1, STEPS + 1)]
    for entry in entries:
        if change:
            change(entry, entry["step"] / STEPS)
    return entries


RISING_VALIDATION = [{"step": s, "mean_reward": 0.2 + s / 1000} for s in range(0, STEPS + 1, 50)]


def fired(entries, validation=RISING_VALIDATION) -> list[str]:
    return check_alarms(entries, validation, T)["fired"]


def test_a_healthy_run_fires_nothing():
    assert fired(history()) == []


def _format_only(entry, x):
    entry["rewards/format/mean"] = 0.2 + 0.7 * x
    entry["rewards/correctness/mean"] = 0.1


def _longer(entry, x):
    entry["completions/mean_length"] = 4.0 + 6.0 * x


def _spike(entry, x):
    if entry["step"] == 300:
        entry["kl"] = 0.9


def _flat_groups(entry, x):
    entry["frac_reward_zero_std"] = 0.2 + 0.6 * x


OVERFITTING = [
    {"step": s, "mean_reward": 0.2 + s / 1000 if s <= 200 else 0.4 - (s - 200) / 1000}
    for s in range(0, STEPS + 1, 50)
]


@pytest.mark.parametrize(
    "alarm,change,validation",
    [
        (FORMAT, _format_only, RISING_VALIDATION),
        (LENGTH, _longer, RISING_VALIDATION),
        (SPIKE, _spike, RISING_VALIDATION),
        (OVERFIT, None, OVERFITTING),
        (NO_SIGNAL, _flat_groups, RISING_VALIDATION),
    ],
)
def test_each_alarm_fires_alone_on_the_history_made_to_trip_it(alarm, change, validation):
    assert fired(history(change), validation) == [alarm]


def test_near_misses_do_not_fire():
    # format up AND correctness up: learning, not hacking
    assert FORMAT not in fired(
        history(
            lambda e, x: e.update(
                {"rewards/format/mean": 0.2 + 0.7 * x, "rewards/correctness/mean": 0.1 + 0.3 * x}
            )
        )
    )
    # 1.4x longer: below 1.5x
    assert LENGTH not in fired(
        history(lambda e, x: e.update({"completions/mean_length": 4.0 + 1.6 * x}))
    )
    # a 10x jump of a tiny KL (0.001 -> 0.01) is noise, below kl_spike_min
    assert SPIKE not in fired(
        history(lambda e, x: e.update({"kl": 0.01 if e["step"] == 300 else 0.001}))
    )
    # validation falls but so does the training reward: a collapse, not overfitting
    falling = history(lambda e, x: e.update({"reward": 0.7 - 0.3 * x}))
    assert OVERFIT not in fired(falling, OVERFITTING)
    # validation dips by 0.03 only
    small_dip = [
        {"step": s, "mean_reward": 0.5 - (0.03 if s == STEPS else 0)}
        for s in range(0, STEPS + 1, 50)
    ]
    assert OVERFIT not in fired(history(), small_dip)
    # no validation scores at all: the rule cannot fire
    assert OVERFIT not in fired(history(), [])
    # zero spread ends at 0.45: below one half
    assert NO_SIGNAL not in fired(history(lambda e, x: e.update({"frac_reward_zero_std": 0.45})))


def test_every_rule_reports_its_value_and_threshold():
    rules = check_alarms(history(_spike), OVERFITTING, T)["rules"]
    assert [r["rule"] for r in rules] == [FORMAT, LENGTH, SPIKE, OVERFIT, NO_SIGNAL]
    spike = rules[2]
    assert spike["fired"] and spike["value"].endswith("at step 300")
    assert "validation -0.200 since its peak at step 200" in rules[3]["value"]
    assert all(r["threshold"] and r["advice"] for r in rules)


# --------------------------------------------------------------------------- dynamic sampling

EMPTY_BATCH = (
    "no learning signal: share of the batch dynamic sampling left empty (smoothed, at the end)"
)


def _sampled(kept_share, oversampling=3.0):
    """A dynamically sampled run: most generated groups have no spread (they are dropped), TRL's
    KL over the kept groups is high and jumpy, the KL over each step's first batch is not."""

    def change(entry, x):
        entry.update(
            {
                "frac_reward_zero_std": 0.9,
                "kl": 5.0 if entry["step"] == 300 else 0.5,
                "dynamic_sampling/kl_first_batch": entry["kl"],
                "dynamic_sampling/kept_share": kept_share(x),
                "dynamic_sampling/oversampling": oversampling,
            }
        )

    return history(change)


def test_under_dynamic_sampling_the_no_signal_rule_reads_the_empty_share_of_the_batch():
    # 90% of groups have no spread, but three rounds keep a third of them: the batch is full
    full = _sampled(lambda x: 1 / 3)
    assert fired(full) == []
    rule = check_alarms(full, RISING_VALIDATION, T)["rules"][-1]
    assert rule["rule"] == EMPTY_BATCH and rule["value"] == pytest.approx(0.0)
    # the kept share falls to 0.05 of 3 rounds: most of the batch stays empty at the end
    starving = _sampled(lambda x: 0.3 - 0.25 * x)
    assert fired(starving) == [EMPTY_BATCH]
    rule = check_alarms(starving, RISING_VALIDATION, T)["rules"][-1]
    last = [0.3 - 0.25 * s / STEPS for s in range(STEPS - T.window + 1, STEPS + 1)]
    assert rule["value"] == pytest.approx(1 - 3 * sum(last) / len(last))  # ~0.80
    assert "dynamic sampling" not in rule["advice"] and "max_sampling_rounds" in rule["advice"]
    # without dynamic sampling the rule and its advice are the old ones
    plain = check_alarms(history(_flat_groups), RISING_VALIDATION, T)["rules"][-1]
    assert plain["rule"] == NO_SIGNAL and "train.dynamic_sampling" in plain["advice"]


def test_under_dynamic_sampling_the_kl_spike_reads_the_kl_over_the_first_batch():
    # TRL's kl jumps 10x at step 300 on the kept groups only; the first-batch KL is flat
    assert SPIKE not in fired(_sampled(lambda x: 1 / 3))
    # and a spike of the first-batch KL fires
    spiking = _sampled(lambda x: 1 / 3)
    spiking[299]["dynamic_sampling/kl_first_batch"] = 5.0
    assert fired(spiking) == [SPIKE]
