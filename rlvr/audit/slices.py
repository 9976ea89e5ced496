"""What a mean can hide, measured: pass@k, slices by tag, solutions gained and lost, diversity,
and the verdict that weighs them. One primary figure (the split's mean-reward delta, decided by
its interval) sets the verdict's direction; the secondary figures that can make it `mixed` (pass@1
and pass@n of the split; mean reward, pass@1 and pass@n of each tag) are decided together by
Holm's correction over their bootstrap p-values. Pure functions of the per-prompt records `evaluate` writes
(rlvr.audit.evaluation.audit scores the samples; this module only counts), tested offline on synthetic
records.

RL with verifiable rewards sharpens a policy: pass@1 can rise while pass@k at large k falls below
the base model's (Yue et al. 2025), and a kind of problem whose answers the policy stops writing
can die while the mean reward rises. So the verdict is `improved` only when the decisive split's
CI is above 0 and no tag of at least `report.min_slice_rows` rows regressed; otherwise a regressed
tag makes it `mixed`.

A per-prompt record holds, for each policy (prefix `step0_` or `final_`): `reward` (mean total
reward of its samples), `correct` (how many of the `samples` completions the row's verifier
scored 1), `greedy_correct`, `distinct` (distinct completions), `distinct_correct` (distinct
correct answers), `entropy` and `tokens` (mean per-token entropy over its samples, and how many
tokens); plus `id`, `tags` and `samples`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rlvr.core.stats import (
    above_zero,
    below_zero,
    finite_mean,
    holm_decide,
    paired_ci,
    pass_at_k,
    pass_at_k_curve,
)

POLICIES = ("step0", "final")
# The one figure the verdict's direction rests on, tested alone at the audit's confidence (its
# interval); every other figure the verdict reads is secondary: Holm-corrected as one family
# (secondary_family, docs/audit.md).
PRIMARY = "delta_mean_reward"
PRIMARY_NAME = "held-out mean reward"


def crossing(curves: Mapping[str, Mapping[str, float]]) -> str | None:
    """Where the step-0 and final pass@k curves cross, in words; None when one is never below
    the other.

    >>> crossing({"step0": {"1": 0.2, "4": 0.5, "16": 0.7}, "final": {"1": 0.4, "4": 0.5,
    ...           "16": 0.6}})
    'the final model solves more prompts at k <= 1; the base model solves more at k >= 16'
    >>> crossing({"step0": {"1": 0.2, "2": 0.3}, "final": {"1": 0.4, "2": 0.5}}) is None
    True
    """
    ks = sorted(curves["step0"], key=int)
    ahead = {k: curves["final"][k] - curves["step0"][k] for k in ks}
    final_ahead = [int(k) for k in ks if ahead[k] > 0]
    base_ahead = [int(k) for k in ks if ahead[k] < 0]
    if not final_ahead or not base_ahead:
        return None

    def where(found: list[int]) -> str:
        first, last = int(ks[0]), int(ks[-1])
        if found == [int(k) for k in ks if int(k) <= found[-1]] and found[0] == first:
            return f"k <= {found[-1]}"
        if found == [int(k) for k in ks if int(k) >= found[0]] and found[-1] == last:
            return f"k >= {found[0]}"
        return "k = " + ", ".join(map(str, found))

    return (
        f"the final model solves more prompts at {where(final_ahead)}; the base model "
        f"solves more at {where(base_ahead)}"
    )


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class SliceRule:
    """When a set of rows has regressed, and which tags the verdict weighs (params.yaml
    `report`)."""

    min_rows: int = 8  # tags with fewer rows are reported, not weighed in the verdict
    drop_from: float = 0.1  # success or pass@n falling from at least this ...
    drop_to: float = 0.02  # ... to at most this: the kind of problem was forgotten


def _ci_text(d: Mapping) -> str:
    return f"{d['value']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"


def _policy_stats(records: Sequence[Mapping], policy: str, n: int) -> dict:
    counts = [r[f"{policy}_correct"] for r in records]
    return {
        "mean_reward": finite_mean(r[f"{policy}_reward"] for r in records),
        "greedy_success": finite_mean(r[f"{policy}_greedy_correct"] for r in records),
        "pass@1": finite_mean(pass_at_k(n, c, 1) for c in counts),
        f"pass@{n}": finite_mean(pass_at_k(n, c, n) for c in counts),
    }


def compare(
    records: Sequence[Mapping],
    n: int,
    confidence: float = 0.95,
    n_resamples: int = 10000,
    seed: int = 0,
) -> dict:
    """Step 0 and final on a set of rows: each policy's mean reward, greedy success, pass@1 and
    pass@n, and the paired deltas of mean reward, pass@1 and pass@n with their bootstrap CIs
    over the rows."""
    out = {
        "rows": len(records),
        **{p: _policy_stats(records, p, n) for p in POLICIES},
        "delta_mean_reward": paired_ci(
            [r["final_reward"] - r["step0_reward"] for r in records], confidence, n_resamples, seed
        ),
    }
    for k in sorted({1, n}):
        out[f"delta_pass@{k}"] = paired_ci(
            [
                pass_at_k(n, r["final_correct"], k) - pass_at_k(n, r["step0_correct"], k)
                for r in records
            ],
            confidence,
            n_resamples,
            seed,
        )
    return out


def secondary_keys(n: int) -> list[str]:
    """A set of rows' secondary deltas: pass@1 and pass@n."""
    return [f"delta_pass@{k}" for k in sorted({1, n})]


def secondary_family(whole: Mapping, tags: Sequence[Mapping], n: int) -> list[dict]:
    """The figures Holm corrects together: the split's pass@1 and pass@n deltas, and each tag's
    mean-reward, pass@1 and pass@n deltas (every tag, weighed or not: each is reported)."""
    return [whole[k] for k in secondary_keys(n)] + [
        t[k] for t in tags for k in (PRIMARY, *secondary_keys(n))
    ]


def secondary_labels(tags: Sequence[Mapping], n: int) -> list[str]:
    """What each figure of secondary_family is, in its order.

    >>> secondary_labels([{"tag": "add"}], 8)
    ['pass@1', 'pass@8', 'add: mean reward', 'add: pass@1', 'add: pass@8']
    """
    names = ["mean reward", *(key.removeprefix("delta_") for key in secondary_keys(n))]
    return [*names[1:], *(f"{t['tag']}: {name}" for t in tags for name in names)]


def holm_family(whole: Mapping, tags: Sequence[Mapping], n: int, alpha: float) -> int:
    """holm_decide over secondary_family, in place; how many figures it holds."""
    family = secondary_family(whole, tags, n)
    holm_decide(family, alpha)
    return len(family)


def falls(d: Mapping) -> bool:
    """A delta decidedly below 0: by Holm where it is a secondary figure (it has `holm`), by its
    interval where it is the primary one."""
    return d["holm"] == "below 0" if "holm" in d else below_zero(d)


def _holm_text(d: Mapping) -> str:
    return f", Holm p {d['p_holm']:.3f}" if "p_holm" in d else ""


def regression_reasons(stats: Mapping, n: int, rule: SliceRule) -> list[str]:
    """Why a set of rows (a tag's, or a whole split's) counts as regressed; empty: it did not.
    Each reason needs a delta decidedly below 0 (`falls`: Holm-corrected for a secondary
    figure), so no reason rests on a point estimate alone:

    - its mean reward falls;
    - forgotten: its success (pass@1) falls from at least rule.drop_from to at most
      rule.drop_to, and its pass@1 delta falls;
    - its pass@n falls so (the kind of problem is forgotten), or narrowed: its pass@n delta falls
      (the base model solved rows that the final model no longer solves in n tries).

    >>> ci = lambda v, lo, hi, p: {"value": v, "ci_low": lo, "ci_high": hi, "p_holm": p,
    ...                            "holm": "below 0" if p <= 0.05 else "holds 0"}
    >>> stats = {"delta_mean_reward": ci(-0.05, -0.1, -0.01, 0.04),
    ...          "delta_pass@1": ci(-0.06, -0.1, -0.02, 0.01),
    ...          "delta_pass@8": ci(-0.31, -0.5, 0.0, 0.2),
    ...          "step0": {"pass@1": 0.16, "pass@8": 0.31}, "final": {"pass@1": 0.0, "pass@8": 0.0}}
    >>> regression_reasons(stats, 8, SliceRule())
    ['mean reward -0.050 [-0.100, -0.010], Holm p 0.040', 'success 0.16 -> 0.00, delta -0.060 [-0.100, -0.020], Holm p 0.010']
    >>> regression_reasons({**stats, "delta_pass@1": ci(-0.06, -0.1, 0.0, 0.3)}, 8, SliceRule())[1:]
    []
    """  # noqa: E501 (one-line outputs)
    reasons = []
    before, after = stats["step0"], stats["final"]

    def dropped(key: str) -> bool:
        return before[key] >= rule.drop_from and after[key] <= rule.drop_to

    def delta(key: str) -> str:
        return f", delta {_ci_text(stats[key])}{_holm_text(stats[key])}"

    if falls(stats[PRIMARY]):
        reasons.append(f"mean reward {_ci_text(stats[PRIMARY])}{_holm_text(stats[PRIMARY])}")
    if dropped("pass@1") and falls(stats["delta_pass@1"]):
        reasons.append(
            f"success {before['pass@1']:.2f} -> {after['pass@1']:.2f}" + delta("delta_pass@1")
        )
    key = f"pass@{n}"
    if n > 1 and falls(stats[f"delta_{key}"]):
        reasons.append(f"{key} {before[key]:.2f} -> {after[key]:.2f}" + delta(f"delta_{key}"))
    return reasons


def slices(
    records: Sequence[Mapping],
    n: int,
    confidence: float = 0.95,
    n_resamples: int = 10000,
    seed: int = 0,
) -> list[dict]:
    """One entry per tag found in the records (sorted): compare() on its rows. judge() then says
    whether each regressed."""
    return [
        {
            "tag": tag,
            **compare(
                [r for r in records if tag in (r.get("tags") or ())],
                n,
                confidence,
                n_resamples,
                seed,
            ),
        }
        for tag in sorted({t for r in records for t in r.get("tags") or ()})
    ]


def judge(whole: Mapping, tags: Sequence[dict], n: int, rule: SliceRule, alpha: float) -> dict:
    """Holm over the secondary family, then each tag's reasons, whether it regressed and whether
    it weighs in the verdict (rows >= rule.min_rows), in place; returns the split's `losses`
    (regression_reasons of the whole split without the mean reward, which the verdict reads
    itself) and the family's size."""
    size = holm_family(whole, tags, n, alpha)
    for entry in tags:
        entry["reasons"] = regression_reasons(entry, n, rule)
        entry["regressed"] = bool(entry["reasons"])
        entry["weighed"] = entry["rows"] >= rule.min_rows
    return {
        "losses": [
            reason
            for reason in regression_reasons(whole, n, rule)
            if not reason.startswith("mean reward")
        ],
        "holm_family": size,
    }


def solutions(records: Sequence[Mapping]) -> dict:
    """Prompts with a correct sample at step 0 and none at the end (lost), the reverse (new),
    with their ids, tags and prompts; and how many kept one.

    >>> s = solutions([{"id": "a", "tags": ["sub"], "step0_correct": 2, "final_correct": 0},
    ...                {"id": "b", "step0_correct": 0, "final_correct": 1},
    ...                {"id": "c", "step0_correct": 1, "final_correct": 5}])
    >>> s["lost"], s["new"], s["kept"]
    ([{'id': 'a', 'tags': ['sub'], 'prompt': ''}], [{'id': 'b', 'tags': [], 'prompt': ''}], 1)
    """

    def entry(r: Mapping) -> dict:
        return {"id": r["id"], "tags": list(r.get("tags") or ()), "prompt": r.get("prompt", "")}

    lost = [entry(r) for r in records if r["step0_correct"] > 0 and r["final_correct"] == 0]
    new = [entry(r) for r in records if r["step0_correct"] == 0 and r["final_correct"] > 0]
    kept = sum(r["step0_correct"] > 0 and r["final_correct"] > 0 for r in records)
    return {"lost": lost, "new": new, "kept": kept, "lost_count": len(lost), "new_count": len(new)}


def diversity(records: Sequence[Mapping], policy: str) -> dict:
    """How varied a policy's samples are: distinct correct answers per solved prompt, the share
    of distinct completions among all samples, and the mean per-token entropy of the policy on
    its own samples (weighted by tokens); None where there is nothing to measure.

    >>> diversity([{"samples": 4, "step0_correct": 2, "step0_distinct_correct": 2,
    ...             "step0_distinct": 3, "step0_entropy": 0.5, "step0_tokens": 10},
    ...            {"samples": 4, "step0_correct": 0, "step0_distinct_correct": 0,
    ...             "step0_distinct": 1, "step0_entropy": 1.0, "step0_tokens": 30}], "step0")
    {'distinct_correct_per_solved': 2.0, 'distinct_share': 0.5, 'entropy': 0.875}
    """
    solved = [r for r in records if r[f"{policy}_correct"] > 0]
    weighted = [
        (r[f"{policy}_entropy"], r[f"{policy}_tokens"])
        for r in records
        if r.get(f"{policy}_entropy") is not None and r.get(f"{policy}_tokens")
    ]
    tokens = sum(t for _, t in weighted)
    samples = sum(r["samples"] for r in records)
    # None, not NaN, where there is nothing to measure (no prompt solved): JSON has no NaN
    return {
        "distinct_correct_per_solved": finite_mean(r[f"{policy}_distinct_correct"] for r in solved)
        if solved
        else None,
        "distinct_share": sum(r[f"{policy}_distinct"] for r in records) / samples
        if samples
        else None,
        "entropy": sum(e * t for e, t in weighted) / tokens if tokens else None,
    }


# --------------------------------------------------------------------------- one split


def split_audit(
    records: Sequence[Mapping],
    n: int,
    rule: SliceRule,
    confidence: float = 0.95,
    n_resamples: int = 10000,
    seed: int = 0,
) -> dict:
    """Everything above for one split's records: pass@k curves, where they cross, the paired
    deltas at k = 1 and k = n, the slices, the Holm-corrected decisions (judge: `losses`, what
    the whole split lost, and each tag's reasons), the solutions lost and new, and diversity."""
    whole = compare(records, n, confidence, n_resamples, seed)
    tags = slices(records, n, confidence, n_resamples, seed)
    judged = judge(whole, tags, n, rule, 1 - confidence)
    curves = {p: pass_at_k_curve([r[f"{p}_correct"] for r in records], n) for p in POLICIES}
    return {
        "samples_per_prompt": n,
        "pass_at_k": curves,
        "crossing": crossing(curves),
        **{key: whole[key] for key in secondary_keys(n)},
        **judged,
        "slices": tags,
        "solutions": solutions(records),
        "diversity": {p: diversity(records, p) for p in POLICIES},
    }


# --------------------------------------------------------------------------- the verdict


def overall_verdict(ci: Mapping) -> str:
    """improved / regressed when the CI excludes 0 beyond float noise (core.stats.ZERO_NOISE),
    else no significant change.

    >>> overall_verdict({"ci_low": 0.1, "ci_high": 0.3}), overall_verdict({"ci_low": -0.1,
    ...                                                                     "ci_high": 0.3})
    ('improved', 'no significant change')
    """
    if above_zero(ci):
        return "improved"
    if below_zero(ci):
        return "regressed"
    return "no significant change"


def weighed_regressions(split: Mapping) -> list[Mapping]:
    """A split's regressed slices that weigh in the verdict (at least report.min_slice_rows
    rows)."""
    return [s for s in split["slices"] if s["regressed"] and s["weighed"]]


def slice_text(s: Mapping) -> str:
    """A regressed slice in a few words: `sub (16 rows: pass@8 0.31 -> 0.00)`."""
    return f"{s['tag']} ({s['rows']} rows: {'; '.join(s['reasons'])})"


def audit_verdict(split: Mapping) -> str:
    """The audit's verdict on the decisive split (an entry of evaluate's summary): `improved`
    only when its mean-reward CI is above 0, no weighed tag regressed and the split itself lost
    nothing (`losses`: it did not narrow); otherwise a loss turns `improved` or `no significant
    change` into `mixed`. `regressed` stays.

    >>> sub = {"tag": "sub", "regressed": True, "weighed": True}
    >>> up = {"delta_mean_reward": {"ci_low": 0.1, "ci_high": 0.3}, "losses": []}
    >>> audit_verdict({**up, "slices": [sub]}), audit_verdict({**up, "slices": []})
    ('mixed', 'improved')
    >>> audit_verdict({**up, "slices": [{**sub, "weighed": False}]})
    'improved'
    >>> audit_verdict({**up, "slices": [], "losses": ["pass@32 0.80 -> 0.58 (...)"]})
    'mixed'
    """
    overall = overall_verdict(split["delta_mean_reward"])
    if overall != "regressed" and (weighed_regressions(split) or split["losses"]):
        return "mixed"
    return overall


def verdict_line(verdict: str, split: Mapping) -> str:
    """The verdict in one line, as the report opens and the flow reports it (numbers and tag
    names only; tags are `[a-z0-9_.-]`): the primary figure first, by name, then what the
    Holm-corrected secondary figures found.

    >>> sub = {"tag": "sub", "rows": 16, "regressed": True, "weighed": True,
    ...        "reasons": ["pass@8 0.31 -> 0.00"]}
    >>> split = {"delta_mean_reward": {"value": 0.188, "ci_low": 0.108, "ci_high": 0.271},
    ...          "slices": [sub], "losses": []}
    >>> verdict_line("mixed", split)
    'mixed: improved on the primary figure, held-out mean reward (+0.188 [+0.108, +0.271]); Holm-corrected: regressed on sub (16 rows: pass@8 0.31 -> 0.00)'
    """  # noqa: E501 (one-line outputs)
    text = (
        f"{verdict}: {overall_verdict(split[PRIMARY])} on the primary figure, {PRIMARY_NAME} "
        f"({_ci_text(split[PRIMARY])})"
    )
    found = []
    if split["losses"]:
        found.append(f"narrowed overall ({'; '.join(split['losses'])})")
    regressed = weighed_regressions(split)
    if regressed:
        found.append("regressed on " + "; ".join(map(slice_text, regressed)))
    return text + (f"; Holm-corrected: {', '.join(found)}" if found else "")
