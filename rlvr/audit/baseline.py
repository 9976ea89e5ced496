"""GRPO against the baseline the audit sets beside it (audit.baseline: rft, stage rft): is RL worth
it over the cheap alternative, given GRPO's one-round sample budget?

Both are audited against the same step 0 on the same held-out rows with the same sampling seeds
(rlvr.audit.against_base), each over its own RL seeds. Pooled:

- the baseline's own audit, as the recipe's (rlvr.audit.recipe.pooled_audit: its gain over step 0
  with the two-level interval over seeds and prompts, pass@1, pass@n, per tag, its verdict by
  Step 9's rules);
- GRPO - baseline, paired per prompt (rlvr.audit.recipe.recipe_difference: a bootstrap over
  GRPO's seeds, the baseline's seeds and the prompts) of the mean-reward gain, the pass@1 gain and
  the pass@n gain, on the whole split and per tag. The primary figure, the whole split's
  mean-reward gain, is `better` or `worse` only when its interval excludes 0, else `tie` (no
  significant difference); every other figure is secondary, decided by Holm's correction over
  the 11 of them (3 tags), its uncorrected call kept as `nominal_verdict`;
- one sentence that says which wins where (`sentence`), the report's and the console's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlvr.audit.recipe import (
    MIN_SEEDS,
    _aligned,
    pass_delta,
    pooled_audit,
    recipe_difference,
)
from rlvr.audit.slices import SliceRule, audit_verdict, secondary_family, verdict_line
from rlvr.core.stats import holm_decide

NAMES = {"rft": "RFT"}  # audit.baseline -> how reports name it
WINS = {"better": "GRPO", "worse": "baseline"}
HOLM_VERDICTS = {"above 0": "better", "below 0": "worse", "holds 0": "tie"}


def _fmt(d: Mapping) -> str:
    return f"{d['value']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"


def head_to_head(
    grpo: Mapping[int, Sequence[Mapping]],
    baseline: Mapping[int, Sequence[Mapping]],
    n: int,
    confidence: float = 0.95,
    n_resamples: int = 10000,
) -> dict:
    """GRPO - baseline on the same rows: the mean-reward gain, the pass@1 and pass@n gains, each
    a recipe_difference (value, interval, probability of improvement, verdict)."""
    out = {
        "delta_mean_reward": recipe_difference(grpo, baseline, confidence, n_resamples),
    }
    for k in sorted({1, n}):
        out[f"delta_pass@{k}"] = recipe_difference(
            grpo, baseline, confidence, n_resamples, value=pass_delta(n, k)
        )
    return out


def _tagged(runs: Mapping[int, Sequence[Mapping]], tag: str) -> dict[int, list[Mapping]]:
    return {s: [r for r in rs if tag in (r.get("tags") or ())] for s, rs in runs.items()}


def compare_baseline(
    kind: str,
    grpo: Mapping[int, Sequence[Mapping]],
    baseline: Mapping[int, Sequence[Mapping]],
    n: int,
    rule: SliceRule,
    confidence: float = 0.95,
    n_resamples: int = 10000,
    seed_regressions: Mapping[int, Sequence[str]] | None = None,
) -> dict:
    """The baseline's pooled audit and GRPO against it, whole and per tag (both recipes' seeds
    hold the same held-out rows). `grpo`, `baseline`: seed -> that seed's held-out records;
    `seed_regressions`: seed -> the tags the baseline's own audit of it called regressed."""
    grpo, baseline = _aligned(grpo), _aligned(baseline)
    pooled = pooled_audit(
        baseline, n, rule, confidence, n_resamples, seed_regressions=seed_regressions
    )
    verdict = audit_verdict(pooled)
    versus = head_to_head(grpo, baseline, n, confidence, n_resamples)
    tags = sorted({t for rs in grpo.values() for r in rs for t in r.get("tags") or ()})
    by_tag = {
        tag: head_to_head(_tagged(grpo, tag), _tagged(baseline, tag), n, confidence, n_resamples)
        for tag in tags
    }
    family = secondary_family(versus, list(by_tag.values()), n)
    holm_decide(family, 1 - confidence)
    for figure in family:  # a secondary figure names a winner only on Holm's decision
        figure["nominal_verdict"] = figure["verdict"]
        figure["verdict"] = HOLM_VERDICTS[figure["holm"]]
    return {
        "kind": kind,
        "name": NAMES.get(kind, kind),
        "seeds": sorted(baseline),
        "grpo_seeds": sorted(grpo),
        "pooled": pooled,
        "verdict": verdict,
        "verdict_line": verdict_line(verdict, pooled),
        "grpo_minus_baseline": versus,
        "tags": by_tag,
        "holm_family": len(family),
    }


def winner(difference: Mapping, name: str) -> str:
    """Who wins a head-to-head figure: GRPO, the baseline, or no one (the interval holds 0).

    >>> winner({"verdict": "worse"}, "RFT"), winner({"verdict": "tie"}, "RFT")
    ('RFT', 'no significant difference')
    """
    who = WINS.get(difference["verdict"])
    return name if who == "baseline" else who or "no significant difference"


def baseline_sentence(comparison: Mapping, grpo_pooled: Mapping) -> str:
    """One sentence: GRPO's and the baseline's held-out gain over step 0, GRPO - baseline with its
    interval and who wins (the primary figure), then the secondary figures with their
    Holm-corrected verdicts: pass@n of the three and who wins on it, and who wins per tag (on the
    mean reward).

    >>> ci = lambda v, lo, hi: {"value": v, "ci_low": lo, "ci_high": hi}
    >>> diff = lambda v, lo, hi, verdict: {**ci(v, lo, hi), "verdict": verdict}
    >>> comparison = {"name": "RFT", "seeds": [0, 1], "holm_family": 11, "pooled": {
    ...     "rows": 64, "samples_per_prompt": 32, "delta_mean_reward": ci(0.22, 0.15, 0.29),
    ...     "final": {"pass@32": 0.67}},
    ...     "grpo_minus_baseline": {"delta_mean_reward": diff(-0.03, -0.1, 0.04, "tie"),
    ...                             "delta_pass@32": diff(-0.09, -0.19, -0.01, "worse")},
    ...     "tags": {"add": {"delta_mean_reward": diff(0.1, 0.02, 0.2, "better")},
    ...              "sub": {"delta_mean_reward": diff(-0.2, -0.3, -0.1, "worse")},
    ...              "mul": {"delta_mean_reward": diff(0.0, -0.1, 0.1, "tie")}}}
    >>> grpo = {"delta_mean_reward": ci(0.19, 0.1, 0.27), "step0": {"pass@32": 0.8},
    ...         "final": {"pass@32": 0.62}}
    >>> print(baseline_sentence(comparison, grpo))
    GRPO against the RFT baseline on the 64 held-out rows (2 seeds each): GRPO gains +0.190 [+0.100, +0.270] mean reward over step 0, RFT +0.220 [+0.150, +0.290]; GRPO - RFT -0.030 [-0.100, +0.040]: no significant difference (the primary figure); secondary figures, Holm-corrected over 11: pass@32: step 0 0.80, GRPO 0.62, RFT 0.67 (GRPO - RFT -0.090 [-0.190, -0.010]: RFT wins); by tag: GRPO wins on add, RFT on sub, no significant difference on mul.
    """  # noqa: E501 (one-line outputs and tables)
    name, pooled = comparison["name"], comparison["pooled"]
    n = pooled["samples_per_prompt"]
    d = comparison["grpo_minus_baseline"]["delta_mean_reward"]
    passn = comparison["grpo_minus_baseline"][f"delta_pass@{n}"]

    def verdict(difference: Mapping) -> str:
        who = winner(difference, name)
        return who if who.startswith("no ") else f"{who} wins"

    per: dict[str, list[str]] = {}
    for tag, entry in comparison["tags"].items():
        per.setdefault(winner(entry["delta_mean_reward"], name), []).append(tag)
    parts = [
        f"{w} wins on {', '.join(per[w])}" if w == "GRPO" else f"{w} on {', '.join(per[w])}"
        for w in ("GRPO", name, "no significant difference")
        if w in per
    ]
    ours, theirs = len(comparison.get("grpo_seeds", comparison["seeds"])), len(comparison["seeds"])
    seeds = (
        f"{ours} seeds each" if ours == theirs else f"GRPO over {ours} seeds, {name} over {theirs}"
    )
    return (
        f"GRPO against the {name} baseline on the {pooled['rows']} held-out rows "
        f"({seeds}{_budgets(comparison.get('sampled'), name)}"
        f"{_kept(comparison.get('kept'), name)}): GRPO gains "
        f"{_fmt(grpo_pooled['delta_mean_reward'])} mean reward over step 0, {name} "
        f"{_fmt(pooled['delta_mean_reward'])}; GRPO - {name} {_fmt(d)}: {verdict(d)} (the "
        f"primary figure); {_secondary(comparison.get('holm_family'))}pass@{n}: step 0 "
        f"{grpo_pooled['step0'][f'pass@{n}']:.2f}, GRPO "
        f"{grpo_pooled['final'][f'pass@{n}']:.2f}, {name} {pooled['final'][f'pass@{n}']:.2f} "
        f"(GRPO - {name} {_fmt(passn)}: {verdict(passn)})"
        + (f"; by tag: {', '.join(parts)}" if parts else "")
        + "."
    )


def _secondary(size: int | None) -> str:
    return f"secondary figures, Holm-corrected over {size}: " if size else "secondary figures: "


def count_span(counts: Sequence[int | None]) -> str:
    """1,200 or 1,200-1,500."""
    known = sorted(c for c in counts if c is not None)
    low, high = known[0], known[-1]
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"


def _budgets(sampled: Mapping | None, name: str) -> str:
    """How many completions each recipe sampled a seed, when both are known.

    >>> _budgets({"grpo": [130048, 134784], "baseline": [51200, 51200]}, "RFT")
    '; completions sampled a seed: GRPO 130,048-134,784, RFT 51,200'
    >>> _budgets(None, "RFT")
    ''
    """
    if not sampled or not all(any(c is not None for c in sampled[k]) for k in sampled):
        return ""
    return (
        f"; completions sampled a seed: GRPO {count_span(sampled['grpo'])}, "
        f"{name} {count_span(sampled['baseline'])}"
    )


def kept_summary(kept: Mapping[int, Mapping]) -> dict:
    """How many answers each seed of the baseline kept, at how many samples a prompt, and whether
    every seed kept the very same answers (their digests, rlvr.policy.verified.kept_digest).

    >>> same = {0: {"answers": 2, "digest": "ab", "samples_per_prompt": 800},
    ...         1: {"answers": 2, "digest": "ab", "samples_per_prompt": 800}}
    >>> kept_summary(same)
    {'answers': [2, 2], 'samples_per_prompt': [800, 800], 'same_on_every_seed': True}
    >>> kept_summary({**same, 2: {"answers": 1, "digest": "cd", "samples_per_prompt": 800}})
    {'answers': [2, 2, 1], 'samples_per_prompt': [800, 800, 800], 'same_on_every_seed': False}
    """
    seeds = [kept[s] for s in sorted(kept)]
    return {
        "answers": [entry["answers"] for entry in seeds],
        "samples_per_prompt": [entry["samples_per_prompt"] for entry in seeds],
        "same_on_every_seed": len({entry["digest"] for entry in seeds}) == 1,
    }


def _kept(kept: Mapping | None, name: str) -> str:
    """What the baseline kept, and, when every seed kept the same answers, why that is.

    >>> print(_kept({"same_on_every_seed": True, "answers": [113] * 3,
    ...              "samples_per_prompt": [800] * 3}, "RFT"))
    ; RFT kept the same 113 answers on every seed, as at 800 samples a prompt every seed finds the same distinct correct answers (the kept set saturates: the seeds differ only in fine-tuning order)
    >>> _kept({"same_on_every_seed": False, "answers": [9, 11], "samples_per_prompt": [8, 8]}, "RFT")
    '; RFT kept 9-11 answers a seed'
    >>> _kept(None, "RFT")
    ''
    """  # noqa: E501 (one-line outputs)
    if not kept or not kept.get("answers"):
        return ""
    if not kept["same_on_every_seed"] or len(kept["answers"]) < 2:
        return f"; {name} kept {count_span(kept['answers'])} answers a seed"
    return (
        f"; {name} kept the same {kept['answers'][0]:,} answers on every seed, as at "
        f"{count_span(kept['samples_per_prompt'])} samples a prompt every seed finds the same "
        "distinct correct answers (the kept set saturates: the seeds differ only in "
        "fine-tuning order)"
    )


def baseline_audit(
    kind: str,
    seeds: Sequence[int],
    evaluated: Mapping[int, Sequence[Mapping]],
    failed: Mapping[int, str],
    grpo: Mapping[int, Sequence[Mapping]] | None,
    grpo_pooled: Mapping | None,
    n: int | None,
    rule: SliceRule,
    confidence: float = 0.95,
    n_resamples: int = 10000,
    sampled: Mapping[str, Sequence[int | None]] | None = None,
    seed_regressions: Mapping[int, Sequence[str]] | None = None,
    kept: Mapping[int, Mapping] | None = None,
) -> dict:
    """The recipe summary's `baseline` entry. `evaluated`: seed -> the baseline's held-out
    records; `failed`: seed -> why it has none; `grpo`/`grpo_pooled`: GRPO's held-out records per
    seed and its pooled audit (None: GRPO has no recipe verdict); `n`: samples per prompt (None
    with no GRPO verdict); `sampled`: "grpo" and "baseline", the completions each seed sampled;
    `seed_regressions`: seed -> the tags the baseline's own audit of that seed called regressed
    (its pooled tags count them, as GRPO's do); `kept`: seed -> what the baseline kept
    (`answers`, their `digest`, `samples_per_prompt`: kept_summary).
    Fewer than MIN_SEEDS on either side: no comparison, one line saying why."""
    name = NAMES.get(kind, kind)
    out = {"kind": kind, "name": name, "seeds": list(seeds), "failed": dict(sorted(failed.items()))}
    if len(evaluated) < MIN_SEEDS or not grpo or grpo_pooled is None or n is None:
        missing = "; ".join(f"seed {s}: {line}" for s, line in sorted(failed.items()))
        return {
            **out,
            "comparison": None,
            "sentence": f"no comparison with the {name} baseline: {len(evaluated)} of "
            f"{len(seeds)} of its seeds and "
            f"{len(grpo or {})} of GRPO's ran to the end, and each side needs {MIN_SEEDS}"
            + (f" ({missing})" if missing else ""),
        }
    comparison = compare_baseline(
        kind, grpo, evaluated, n, rule, confidence, n_resamples, seed_regressions
    )
    if sampled:
        comparison["sampled"] = {side: list(counts) for side, counts in sampled.items()}
    if kept and all(entry.get("digest") for entry in kept.values()):
        comparison["kept"] = kept_summary(kept)
    return {
        **out,
        "comparison": comparison,
        "sentence": baseline_sentence(comparison, grpo_pooled),
    }
