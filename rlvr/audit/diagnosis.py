"""What the retrospective concludes from a run: the KL/beta diagnosis, the per-prompt audit, and
what PPO's critic would have cost. Pure functions of the stages' outputs, tested offline."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from safetensors import safe_open

from rlvr.core.metric_keys import REWARD
from rlvr.core.stats import drift_kl, kl_source, moving_average, window_mean

# --------------------------------------------------------------------------- KL / beta diagnosis


@dataclass(frozen=True)
class KLThresholds:
    kl_tiny: float  # max smoothed KL below this: the policy barely moved
    plateau_gain: float  # reward gain over the second half below this: it plateaued early
    kl_high: float  # final smoothed KL above this: far from the reference
    kl_rising_ratio: float  # last-quarter KL over third-quarter KL above this: still climbing
    collapse_drop: float  # peak minus final smoothed reward above this: it rose then collapsed
    window: int  # steps in each moving average


def diagnose_kl(history: Sequence[dict], t: KLThresholds) -> dict:
    """Label the run "too tight", "too loose" or "healthy" by explicit rules, with the values seen.

    too tight: KL stays tiny AND reward plateaus early  -> lower beta
    too loose: KL keeps climbing OR KL ends high OR reward rises then collapses -> raise beta or
               use a schedule
    healthy:   neither, and the reward rose

    The KL read is stats.drift_kl: under dynamic sampling, the KL over each step's
    first batch, every group kept or dropped.
    """
    rewards = [float(e[REWARD]) for e in history if REWARD in e]
    kls = [kl for kl in map(drift_kl, history) if kl is not None]
    n = len(rewards)
    smooth_reward = moving_average(rewards, t.window)
    smooth_kl = moving_average(kls, t.window) if kls else []
    values = {
        "steps": n,
        "reward_start": window_mean(rewards, 0, t.window),
        "reward_mid": window_mean(rewards, n // 2 - t.window, n // 2),
        "reward_end": window_mean(rewards, n - t.window, n),
        "reward_peak": max(smooth_reward, default=math.nan),
        "kl_max": max(smooth_kl, default=math.nan),
        "kl_q3": window_mean(kls, len(kls) // 2, 3 * len(kls) // 4),
        "kl_q4": window_mean(kls, 3 * len(kls) // 4, len(kls)),
        "kl_end": window_mean(kls, len(kls) - t.window, len(kls)),
        "kl_over": kl_source(history),
    }
    gain_second_half = values["reward_end"] - values["reward_mid"]
    drop = values["reward_peak"] - values["reward_end"]
    rising = values["kl_q4"] / values["kl_q3"] if kls and values["kl_q3"] > 0 else math.nan
    rules = [
        {
            "rule": "KL stays tiny",
            "value": values["kl_max"],
            "threshold": f"< {t.kl_tiny}",
            "fired": bool(kls) and values["kl_max"] < t.kl_tiny,
        },
        {
            "rule": "reward plateaus early (gain over the second half)",
            "value": gain_second_half,
            "threshold": f"< {t.plateau_gain}",
            "fired": gain_second_half < t.plateau_gain,
        },
        {
            "rule": "KL keeps climbing (last quarter / third quarter)",
            "value": rising,
            "threshold": f"> {t.kl_rising_ratio}",
            "fired": rising > t.kl_rising_ratio,
        },
        {
            "rule": "KL ends high",
            "value": values["kl_end"],
            "threshold": f"> {t.kl_high}",
            "fired": bool(kls) and values["kl_end"] > t.kl_high,
        },
        {
            "rule": "reward rises then collapses (peak - end)",
            "value": drop,
            "threshold": f"> {t.collapse_drop}",
            "fired": drop > t.collapse_drop,
        },
    ]
    fired = {r["rule"] for r in rules if r["fired"]}
    if {"KL stays tiny", "reward plateaus early (gain over the second half)"} <= fired:
        label, advice = "too tight", "lower beta: the KL penalty holds the policy at the reference"
    elif fired & {
        "KL keeps climbing (last quarter / third quarter)",
        "KL ends high",
        "reward rises then collapses (peak - end)",
    }:
        label, advice = (
            "too loose",
            (
                "raise beta, or use the warmup / adaptive schedule: the "
                "policy drifts from the reference"
            ),
        )
    elif values["reward_end"] > values["reward_start"]:
        label, advice = "healthy", "KL bounded and reward rising: keep beta"
    else:
        label, advice = (
            "no learning",
            (
                "reward did not rise although KL looks fine: check the "
                "reward spread, the learning rate and the data"
            ),
        )
    if not kls:
        advice += " (beta = 0: no KL was measured, only the reward rules apply)"
    return {"label": label, "advice": advice, "rules": rules, "values": values}


def training_health(diagnosis: dict, alarms: dict | None) -> dict:
    """One verdict on the run's health from the KL / beta diagnosis and the alarms, so that the
    report never says "healthy" beside a fired alarm: {"label", "text"}.

    healthy:          the beta rules say healthy and no alarm fired
    needs attention:  the beta rules say healthy but an alarm fired (its advice is the fix)
    otherwise:        the beta rules' label (too tight, too loose, no learning), alarms counted

    >>> training_health({"label": "healthy", "advice": "keep beta"}, {"fired": ["KL spike"]})["label"]
    'needs attention'
    """
    fired = alarms["fired"] if alarms else []
    named = f"{len(fired)} alarm(s) fired (below, each with what to do)"
    if diagnosis["label"] != "healthy":
        tail = f"; {named} as well" if fired else ("; no alarm fired" if alarms else "")
        return {"label": diagnosis["label"], "text": diagnosis["advice"] + tail}
    if fired:
        return {
            "label": "needs attention",
            "text": f"{named}; the KL / beta rules ask no change of beta (KL bounded, reward "
            "rising)",
        }
    return {
        "label": "healthy",
        "text": diagnosis["advice"] + ("; no alarm fired" if alarms else ""),
    }


# --------------------------------------------------------------------------- per-prompt audit


def prompt_audit(per_prompt: Sequence[dict], top: int = 5) -> dict:
    """Biggest gains and losses of mean reward, and prompts never / always solved (sampled)."""
    by_delta = sorted(per_prompt, key=lambda r: r["delta"])
    return {
        "gains": [r for r in reversed(by_delta) if r["delta"] > 0][:top],
        "losses": [r for r in by_delta if r["delta"] < 0][:top],
        "never_solved": [
            r for r in per_prompt if r.get("step0_success") == 0 and r.get("final_success") == 0
        ],
        "always_solved": [
            r for r in per_prompt if r.get("step0_success") == 1 and r.get("final_success") == 1
        ],
    }


# --------------------------------------------------------------------------- GRPO vs PPO


def ppo_cost(
    policy_params: int, hidden_size: int, num_generations: int, bytes_per_param_trained: int = 16
) -> dict:
    """What PPO's critic would cost for this policy, and what GRPO pays instead.

    The critic is the usual choice: the policy's backbone with a scalar value head (hidden + 1
    parameters) instead of the LM head. Trained in fp32 with AdamW it holds weights (4 bytes),
    gradients (4) and two Adam moments (8): 16 bytes per parameter.
    """
    critic = policy_params + hidden_size + 1
    return {
        "policy_parameters": policy_params,
        "critic_parameters": critic,
        "bytes_per_trained_parameter": bytes_per_param_trained,
        "critic_memory_mb": critic * bytes_per_param_trained / 2**20,
        "policy_memory_mb": policy_params * bytes_per_param_trained / 2**20,
        "ppo_rollouts_per_prompt": 1,
        "grpo_rollouts_per_prompt": num_generations,
    }


def count_parameters(model_dir: str | Path) -> int | None:
    """Parameters of a saved model, read from its safetensors headers (no weights loaded)."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with safe_open(str(file), framework="numpy") as handle:
            for name in handle.keys():
                shape = handle.get_slice(name).get_shape()
                total += math.prod(shape)
    return total
