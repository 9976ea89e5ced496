"""The recipe's audit: the same held-out audit as one run's (rlvr.audit.slices), pooled over the RL
seeds `audit.seeds`, so that the verdict describes the recipe, not one draw of training noise.

Each seed's per-prompt records (stage evaluate, one folder per seed) hold the same held-out
rows scored at step 0 (shared: the base model) and after that seed's training. Pooled:

- every figure is the mean over seeds of the seed's mean over prompts;
- every delta's 95% interval is a two-level bootstrap, seeds then prompts
  (rlvr.core.stats.seeds_and_prompts_ci): it holds training noise and prompt noise;
- the verdict follows Step 9's rules (rlvr.audit.slices.audit_verdict) on the pooled figures: a tag
  counts as regressed when its pooled figures say so, and "regressed in k of n seeds" counts the
  seeds whose own audit said so;
- fewer than 2 seeds that ran to the end give no recipe verdict, naming the missing ones.

The published model is one seed's, picked on the validation rows (never the test rows): the
seed whose chosen step scored the highest mean reward there, the lowest seed on a tie.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from scipy.stats import bootstrap

from rlvr.audit.slices import (
    POLICIES,
    SliceRule,
    _policy_stats,
    audit_verdict,
    judge,
    verdict_line,
    weighed_regressions,
)
from rlvr.core.stats import above_zero, below_zero, bootstrap_p, pass_at_k, seeds_and_prompts_ci

MIN_SEEDS = 2  # a recipe verdict needs at least this many seeds that ran to the end
VALIDATION = "validation"  # the split recipes are chosen on (per_prompt.jsonl's "split")
NO_VERDICT = "no recipe verdict"


class SeedsDisagree(ValueError):
    """The seeds' records do not cover the same held-out rows (a bug or a mixed-up folder)."""


def _aligned(runs: Mapping[int, Sequence[Mapping]]) -> dict[int, list[Mapping]]:
    """Each seed's records sorted by id, after checking that every seed has the same ids."""
    ordered = {seed: sorted(records, key=lambda r: r["id"]) for seed, records in runs.items()}
    ids = {seed: [r["id"] for r in records] for seed, records in ordered.items()}
    first = next(iter(ids.values()), [])
    for seed, seen in ids.items():
        if seen != first:
            raise SeedsDisagree(
                f"seed {seed}'s held-out records cover other rows than seed "
                f"{next(iter(ids))}'s ({len(seen)} against {len(first)})"
            )
    return ordered


def _table(runs: Mapping[int, Sequence[Mapping]], value) -> list[list[float]]:
    return [[value(r) for r in records] for records in runs.values()]


def reward_delta(record: Mapping) -> float:
    """A prompt's mean-reward gain over step 0."""
    return record["final_reward"] - record["step0_reward"]


def pass_delta(n: int, k: int) -> Callable[[Mapping], float]:
    """A prompt's pass@k gain over step 0 (n samples each)."""
    return lambda r: pass_at_k(n, r["final_correct"], k) - pass_at_k(n, r["step0_correct"], k)


def pooled_compare(
    runs: Mapping[int, Sequence[Mapping]],
    n: int,
    confidence: float = 0.95,
    n_resamples: int = 10000,
    seed: int = 0,
) -> dict:
    """rlvr.audit.slices.compare over several seeds' records of the same rows: each policy's figures
    pooled over seeds, and each paired delta (mean reward, pass@1, pass@n) with its two-level
    interval."""
    records = [r for rs in runs.values() for r in rs]
    out = {
        "rows": len(next(iter(runs.values()), [])),
        **{p: _policy_stats(records, p, n) for p in POLICIES},
        "delta_mean_reward": seeds_and_prompts_ci(
            _table(runs, reward_delta), confidence, n_resamples, seed
        ),
    }
    for k in sorted({1, n}):
        out[f"delta_pass@{k}"] = seeds_and_prompts_ci(
            _table(runs, pass_delta(n, k)), confidence, n_resamples, seed
        )
    return out


def pooled_audit(
    runs: Mapping[int, Sequence[Mapping]],
    n: int,
    rule: SliceRule,
    confidence: float = 0.95,
    n_resamples: int = 10000,
    seed: int = 0,
    seed_regressions: Mapping[int, Sequence[str]] | None = None,
) -> dict:
    """The split audit the verdict reads (delta_mean_reward, losses, slices), pooled over seeds;
    `seed_regressions` (seed -> the tags its own audit called regressed) counts, per tag, the
    seeds that regressed on it."""
    runs = _aligned(runs)
    whole = pooled_compare(runs, n, confidence, n_resamples, seed)
    tags = []
    for tag in sorted({t for rs in runs.values() for r in rs for t in r.get("tags") or ()}):
        tagged = {s: [r for r in rs if tag in (r.get("tags") or ())] for s, rs in runs.items()}
        entry = {"tag": tag, **pooled_compare(tagged, n, confidence, n_resamples, seed)}
        entry["regressed_seeds"] = sum(tag in seen for seen in (seed_regressions or {}).values())
        tags.append(entry)
    judged = judge(whole, tags, n, rule, 1 - confidence)
    return {**whole, "samples_per_prompt": n, "slices": tags, **judged}


def validation_score(train_summary: Mapping) -> float | None:
    """The mean reward on the validation rows at the step a run chose (None: never scored)."""
    selection = train_summary.get("selection") or {}
    chosen = selection.get("chosen_step")
    scores = [v for v in selection.get("validation") or [] if v.get("step") == chosen]
    return scores[-1].get("mean_reward") if scores else None


def pick_seed(train_summaries: Mapping[int, Mapping]) -> tuple[int, str]:
    """The seed whose model is published, and why: the best validation mean reward at each
    run's chosen step (ties: the lowest seed); the lowest seed when no run scored validation.

    >>> pick_seed({0: {}, 3: {}})
    (0, 'the lowest seed: no run scored the validation rows (train.eval_steps is 0)')
    >>> v = lambda x: {"selection": {"chosen_step": 9, "validation": [{"step": 9, "mean_reward": x}]}}
    >>> pick_seed({0: v(0.4), 1: v(0.5), 2: v(0.5)})
    (1, 'the best mean reward on the validation rows at its chosen step: 0.5000 (seed 0: 0.4000, seed 1: 0.5000, seed 2: 0.5000)')
    """  # noqa: E501 (one-line outputs and tables)
    scores = {s: validation_score(summary) for s, summary in sorted(train_summaries.items())}
    scored = {s: v for s, v in scores.items() if v is not None}
    if not scored:
        return min(scores), (
            "the lowest seed: no run scored the validation rows (train.eval_steps is 0)"
        )
    best = max(scored.values())
    chosen = min(s for s, v in scored.items() if v == best)
    others = ", ".join(f"seed {s}: {v:.4f}" for s, v in scored.items())
    return chosen, (
        f"the best mean reward on the validation rows at its chosen step: {best:.4f} ({others})"
    )


def _ci(d: Mapping) -> dict:
    return {key: round(d[key], 3) for key in ("value", "ci_low", "ci_high")}


def recipe_metrics(recipe: Mapping) -> dict:
    """metrics/recipe.json: the recipe's headline (names read by checks outside the project).
    Figures are rounded to 3 decimals, as every report prints them: `dvc exp show` prints the
    digits it gets, and a table of experiments must stay readable.

    >>> ci = {"value": 0.2, "ci_low": 0.1, "ci_high": 0.3}
    >>> recipe_metrics({"seeds": [0, 1], "verdict": "improved", "pooled": {
    ...     "delta_mean_reward": ci, "samples_per_prompt": 4,
    ...     "step0": {"pass@1": 0.2, "pass@4": 0.5}, "final": {"pass@1": 0.4, "pass@4": 0.5},
    ...     "slices": [{"tag": "add", "delta_mean_reward": ci, "delta_pass@4": ci,
    ...                 "regressed_seeds": 1, "regressed": False}]}})["tags"]
    {'add': {'delta': {'value': 0.2, 'ci_low': 0.1, 'ci_high': 0.3}, 'passn_delta': {'value': 0.2, 'ci_low': 0.1, 'ci_high': 0.3}, 'regressed_seeds': 1, 'regressed': False}}
    """  # noqa: E501 (one-line outputs and tables)
    pooled = recipe.get("pooled")
    if not pooled:
        return {"seeds": list(recipe["seeds"]), "verdict": recipe["verdict"]}
    n = pooled["samples_per_prompt"]
    extra = {}
    comparison = (recipe.get("baseline") or {}).get("comparison")
    if comparison:  # GRPO against the baseline (rlvr.audit.baseline): its headline
        theirs, versus = comparison["pooled"], comparison["grpo_minus_baseline"]
        extra["baseline"] = {
            "kind": comparison["kind"],
            "verdict": comparison["verdict"],
            "delta_mean_reward": _ci(theirs["delta_mean_reward"]),
            "pass1_final": round(theirs["final"]["pass@1"], 3),
            "passn_final": round(theirs["final"][f"pass@{n}"], 3),
            "grpo_minus_baseline": _ci(versus["delta_mean_reward"]),
            "grpo_vs_baseline": versus["delta_mean_reward"]["verdict"],
        }
    validation = recipe.get("validation")
    if validation:  # the same figures on the rows that choose (docs/audit.md)
        extra["validation"] = {
            "verdict": validation["verdict"],
            **_headline(validation["pooled"]),
        }
    return {
        "seeds": list(recipe["seeds"]),
        "verdict": recipe["verdict"],
        **_headline(pooled),
        **extra,
    }


def _headline(pooled: Mapping) -> dict:
    """One split's pooled figures as metrics/recipe.json names them."""
    n = pooled["samples_per_prompt"]
    return {
        "delta_mean_reward": _ci(pooled["delta_mean_reward"]),
        **{
            key: round(value, 3)
            for key, value in (
                ("pass1_step0", pooled["step0"]["pass@1"]),
                ("pass1_final", pooled["final"]["pass@1"]),
                ("passn_step0", pooled["step0"][f"pass@{n}"]),
                ("passn_final", pooled["final"][f"pass@{n}"]),
            )
        },
        "tags": {
            s["tag"]: {
                "delta": _ci(s["delta_mean_reward"]),
                "passn_delta": _ci(s[f"delta_pass@{n}"]),
                "regressed_seeds": s["regressed_seeds"],
                "regressed": s["regressed"],
            }
            for s in pooled["slices"]
        },
    }


def seed_line(seed: int, summary: Mapping, train_summary: Mapping) -> dict:
    """One seed's line in the recipe's table: its own verdict (one run's) and figures."""
    split = summary[summary["verdict_split"]]
    n = split["samples_per_prompt"]
    return {
        "seed": seed,
        "samples": n,
        "verdict": summary["verdict"],
        "verdict_line": summary["verdict_line"],
        "delta_mean_reward": _ci(split["delta_mean_reward"]),
        "pass1_final": split["pass_at_k"]["final"]["1"],
        "passn_final": split["pass_at_k"]["final"][str(n)],
        "regressed_tags": list(summary.get("regressed_tags") or []),
        "validation_reward": validation_score(train_summary),
    }


def split_runs(records: Mapping[int, Sequence[Mapping]], split: str) -> dict[int, list[Mapping]]:
    """seed -> its per-prompt records of one split (`heldout`), seeds in order."""
    return {s: [r for r in rs if r.get("split") == split] for s, rs in sorted(records.items())}


def recipe_audit(
    seeds: Sequence[int],
    evaluated: Mapping[int, Mapping],
    failed: Mapping[int, str],
    rule: SliceRule,
    confidence: float = 0.95,
    n_resamples: int = 10000,
) -> dict:
    """The recipe's audit from the seeds that ran to the end. `evaluated`: seed -> {"summary"
    (evaluate's), "records" (its per-prompt records), "train" (train's summary)}; `failed`:
    seed -> the line saying why it has no result. Fewer than MIN_SEEDS seeds: no verdict."""
    lines = [seed_line(s, e["summary"], e["train"]) for s, e in sorted(evaluated.items())]
    out = {
        "seeds": list(seeds),
        "evaluated": sorted(evaluated),
        "failed": dict(sorted(failed.items())),
        "seed_lines": lines,
    }
    if evaluated:  # one seed's model is published, whatever the number of seeds
        published, why = pick_seed({s: e["train"] for s, e in evaluated.items()})
        out.update(published_seed=published, published_reason=why)
    if len(evaluated) < MIN_SEEDS:
        missing = "; ".join(f"seed {s}: {line}" for s, line in sorted(failed.items()))
        return {
            **out,
            "verdict": NO_VERDICT,
            "pooled": None,
            "verdict_line": f"{NO_VERDICT}: {len(evaluated)} of {len(seeds)} seeds ran to "
            f"the end, and a verdict needs {MIN_SEEDS}" + (f" ({missing})" if missing else ""),
        }
    split = next(iter(evaluated.values()))["summary"]["verdict_split"]
    runs = split_runs({s: e["records"] for s, e in evaluated.items()}, split)
    n = next(iter(evaluated.values()))["summary"][split]["samples_per_prompt"]
    pooled = pooled_audit(
        runs,
        n,
        rule,
        confidence,
        n_resamples,
        seed_regressions={line["seed"]: line["regressed_tags"] for line in lines},
    )
    verdict = audit_verdict(pooled)
    out.update(split=split, pooled=pooled, verdict=verdict)
    out["verdict_line"] = verdict_line(verdict, pooled)
    chosen_on = split_runs({s: e["records"] for s, e in evaluated.items()}, VALIDATION)
    if all(chosen_on.values()):  # records from before evaluate scored them have none
        regressed = {  # each seed's own audit of the validation rows, as for the held-out ones
            s: [t["tag"] for t in weighed_regressions(e["summary"][VALIDATION])]
            for s, e in evaluated.items()
        }
        on_val = pooled_audit(
            chosen_on, n, rule, confidence, n_resamples, seed_regressions=regressed
        )
        out["validation"] = {"pooled": on_val, "verdict": audit_verdict(on_val)}
    return out


# --------------------------------------------------------------------------- recipe against recipe


def recipe_difference(
    runs_x: Mapping[int, Sequence[Mapping]],
    runs_y: Mapping[int, Sequence[Mapping]],
    confidence: float = 0.95,
    n_resamples: int = 10000,
    seed: int = 0,
    value: Callable[[Mapping], float] | None = None,
) -> dict:
    """Recipe X against recipe Y on the same held-out rows, each over its own seeds: the
    difference of their mean held-out deltas (X - Y; `value` of a record, the mean-reward delta
    final - step0 unless given) with a bootstrap interval that draws X's
    seeds, Y's seeds and the prompts (the same prompts for both: paired), and the probability of
    improvement P(X > Y) as rliable defines it (Agarwal et al. 2021): per prompt, the chance that
    a seed of X beats a seed of Y (Mann-Whitney's U over the seed pairs, ties counting half),
    averaged over prompts. `verdict`: better or worse only when the interval excludes 0, else a
    tie; `p_value`: the bootstrap p (rlvr.core.stats.bootstrap_p), for a Holm correction.

    >>> rows = lambda gains: [{"id": f"r{i}", "step0_reward": 0.0, "final_reward": g}
    ...                       for i, g in enumerate(gains)]
    >>> x = {0: rows([0.5] * 8), 1: rows([0.6] * 8)}
    >>> y = {0: rows([0.1] * 8), 1: rows([0.2] * 8)}
    >>> d = recipe_difference(x, y, n_resamples=500)
    >>> round(d["value"], 3), d["probability_of_improvement"], d["verdict"]
    (0.4, 1.0, 'better')
    """

    value = value or reward_delta

    def table(runs):
        aligned = _aligned(runs)
        return np.array([[value(r) for r in rs] for rs in aligned.values()]), [
            r["id"] for r in next(iter(aligned.values()))
        ]

    x, ids_x = table(runs_x)
    y, ids_y = table(runs_y)
    if ids_x != ids_y:
        raise SeedsDisagree("the two recipes' held-out records cover other rows")
    value = float(x.mean() - y.mean())
    # P(X > Y) per prompt over every (seed of X, seed of Y) pair, then over prompts
    wins = (x[:, None, :] > y[None, :, :]) + 0.5 * (x[:, None, :] == y[None, :, :])
    improvement = float(wins.mean())

    def statistic(sx, sy, p, axis=-1):
        mx = np.take_along_axis(x[sx].mean(axis=-2), p, axis=-1).mean(axis=-1)
        my = np.take_along_axis(y[sy].mean(axis=-2), p, axis=-1).mean(axis=-1)
        return mx - my

    if len(x) < 2 or len(y) < 2:  # a seed level with one draw: the prompts alone
        low = high = value
        draws = [value] * n_resamples if x.shape[1] > 1 else [0.0]  # one cell: no evidence
        diffs = x.mean(axis=0) - y.mean(axis=0)
        if np.ptp(diffs) > 0:
            result = bootstrap(
                (diffs,),
                np.mean,
                confidence_level=confidence,
                n_resamples=n_resamples,
                method="percentile",
                random_state=np.random.default_rng(seed),
            )
            interval, draws = result.confidence_interval, result.bootstrap_distribution
            low, high = float(interval.low), float(interval.high)
    elif x.shape[1] < 2:  # one prompt (a tag with one row): the seeds alone
        result = bootstrap(
            (x[:, 0], y[:, 0]),
            lambda a, b, axis=-1: a.mean(axis=axis) - b.mean(axis=axis),
            paired=False,
            vectorized=True,
            confidence_level=confidence,
            n_resamples=n_resamples,
            method="percentile",
            random_state=np.random.default_rng(seed),
        )
        interval, draws = result.confidence_interval, result.bootstrap_distribution
        low, high = float(interval.low), float(interval.high)
    else:
        result = bootstrap(
            (np.arange(len(x)), np.arange(len(y)), np.arange(x.shape[1])),
            statistic,
            paired=False,
            vectorized=True,
            confidence_level=confidence,
            n_resamples=n_resamples,
            method="percentile",
            batch=1000,
            random_state=np.random.default_rng(seed),
        )
        interval, draws = result.confidence_interval, result.bootstrap_distribution
        low, high = float(interval.low), float(interval.high)
    # an interval end within float noise of 0 (pass@k gains are rationals summed in floats: an
    # exact 0 comes out as -7e-18) holds 0
    ends = {"ci_low": low, "ci_high": high}
    verdict = "better" if above_zero(ends) else "worse" if below_zero(ends) else "tie"
    return {
        "value": value,
        "ci_low": low,
        "ci_high": high,
        "p_value": bootstrap_p(draws),
        "probability_of_improvement": improvement,
        "seeds_x": len(x),
        "seeds_y": len(y),
        "verdict": verdict,
    }
