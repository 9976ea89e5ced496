"""The retrospective's answer to "is RL worth it here?": GRPO against the baseline the audit set
beside it (audit.baseline, rlvr.audit.baseline), one sentence for the top of the page and one
table per tag. Tags come from the data: every one enters as an md_table cell or through
md_escape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlvr.audit.baseline import count_span, winner
from rlvr.audit.slices import secondary_family, secondary_labels
from rlvr.report.render import ci_text, md_escape, md_table


def baseline_headline(recipe: Mapping | None) -> list[str]:
    """The sentence under the recipe's verdict (none when the baseline is off)."""
    baseline = (recipe or {}).get("baseline")
    if not baseline:
        return []
    return [f"**Is RL worth it here?** {md_escape(baseline['sentence'])}", ""]


def _sampled_words(sampled: Mapping | None, name: str) -> str:
    """How many completions each recipe sampled a seed, read from the run (the train summaries'
    sampled_completions, the RFT summaries' budget): RFT samples GRPO's one round a step, and
    GRPO may sample more (dynamic sampling's extra rounds).

    >>> print(_sampled_words({"grpo": [130048, 134784], "baseline": [51200] * 2}, "RFT"))
     (51,200 completions a seed, against GRPO's 130,048-134,784: one generation round a step)
    >>> _sampled_words(None, "RFT")
    ''
    """
    if not sampled or not all(any(c is not None for c in sampled[k]) for k in sampled):
        return ""
    return (
        f" ({count_span(sampled['baseline'])} completions a seed, against GRPO's "
        f"{count_span(sampled['grpo'])}: one generation round a step)"
    )


def baseline_section(recipe: Mapping | None, confidence: float) -> list[str]:
    """GRPO against the baseline: the baseline's own pooled verdict, then per tag (and all rows)
    each one's gain over step 0, GRPO - baseline with its interval and the probability that a
    GRPO seed beats a baseline seed on a prompt, pass@1 and pass@n of both, and who wins."""
    baseline = (recipe or {}).get("baseline")
    if not baseline:
        return []
    name = baseline["name"]
    out = [f"### GRPO against the {md_escape(name)} baseline", ""]
    comparison = baseline.get("comparison")
    if not comparison:
        return out + [f"{md_escape(baseline['sentence'])}.", ""]
    theirs, ours = comparison["pooled"], recipe["pooled"]
    n = theirs["samples_per_prompt"]
    out += [
        f"{md_escape(name)} (rejection-sampling fine-tuning, rlvr/baseline/rft.py) samples the "
        f"base on the training prompts{_sampled_words(comparison.get('sampled'), name)}, keeps "
        "each prompt's distinct correct answers and fine-tunes the base on them; it is audited "
        "like the policy, on the same held-out rows with the same sampling seeds, over the same "
        f"RL seeds. GRPO - {md_escape(name)} is paired per prompt; its {confidence:.0%} interval "
        "draws both recipes' seeds and the prompts (rlvr/audit/baseline.py). A winner is named "
        "on all rows' mean reward (the primary figure) only when its interval excludes 0, and on "
        "a tag only on Holm's decision (the table after this one).",
        "",
        f"{md_escape(name)}'s own verdict over its seeds: {md_escape(comparison['verdict_line'])}.",
        "",
    ]
    slices = {s["tag"]: s for s in ours["slices"]}
    their_slices = {s["tag"]: s for s in theirs["slices"]}
    rows = [("all rows", ours, theirs, comparison["grpo_minus_baseline"])]
    rows += [
        (tag, slices[tag], their_slices[tag], versus)
        for tag, versus in comparison["tags"].items()
        if tag in slices and tag in their_slices
    ]
    out += md_table(
        [
            "held-out rows",
            "rows",
            f"GRPO gain [{confidence:.0%} CI]",
            f"{name} gain [CI]",
            f"GRPO - {name} [CI]",
            f"P(GRPO > {name})",
            f"pass@1: step 0 / GRPO / {name}",
            f"pass@{n}: step 0 / GRPO / {name}",
            "wins (tags: Holm)",
        ],
        [
            [
                label,
                mine["rows"],
                ci_text(mine["delta_mean_reward"]),
                ci_text(other["delta_mean_reward"]),
                ci_text(versus["delta_mean_reward"]),
                f"{versus['delta_mean_reward']['probability_of_improvement']:.2f}",
                f"{mine['step0']['pass@1']:.2f} / {mine['final']['pass@1']:.2f} / "
                f"{other['final']['pass@1']:.2f}",
                f"{mine['step0'][f'pass@{n}']:.2f} / {mine['final'][f'pass@{n}']:.2f} / "
                f"{other['final'][f'pass@{n}']:.2f}",
                winner(versus["delta_mean_reward"], name),
            ]
            for label, mine, other, versus in rows
        ],
    )
    versus = comparison["grpo_minus_baseline"]
    tags = [{"tag": tag, **entry} for tag, entry in comparison["tags"].items()]
    return out + [""] + holm_table(versus, tags, confidence, f"GRPO - {name}")


def holm_table(whole: Mapping, tags: Sequence[Mapping], confidence: float, what: str) -> list[str]:
    """The secondary figures of one comparison (rlvr.audit.slices.secondary_family), each with its
    nominal interval, its bootstrap p, its Holm-adjusted p and the decision at 1 - confidence.
    Tags enter as md_table cells. Nothing for a summary written before Holm's correction.

    >>> d = lambda v, p, h, call: {"value": v, "ci_low": v - 0.1, "ci_high": v + 0.1,
    ...                            "p_value": p, "p_holm": h, "holm": call}
    >>> whole = {"delta_pass@1": d(0.2, 0.001, 0.003, "above 0"),
    ...          "delta_pass@4": d(-0.1, 0.04, 0.08, "holds 0")}
    >>> tag = {"tag": "a|b", "delta_mean_reward": d(0.1, 0.2, 0.4, "holds 0"),
    ...        "delta_pass@1": d(0.1, 0.3, 0.4, "holds 0"), "delta_pass@4": d(0, 1, 1, "holds 0")}
    >>> print("\\n".join(holm_table(whole, [tag], 0.95, "GRPO - RFT")[2:5]))
    | GRPO - RFT | delta \\[95% CI, nominal\\] | bootstrap p | Holm p | at 5% |
    |---|---|---|---|---|
    | pass@1 | +0.200 [+0.100, +0.300] | 0.0010 | 0.0030 | above 0 |
    """
    n = max(int(key.removeprefix("delta_pass@")) for key in whole if key.startswith("delta_pass@"))
    try:
        family = secondary_family(whole, tags, n)
    except KeyError:  # a summary from before the correction: nothing to show
        return []
    if not all("p_holm" in d for d in family):
        return []
    labels = secondary_labels(tags, n)
    alpha = 1 - confidence
    return [
        f"Secondary figures, Holm-corrected as one family of {len(family)} (docs/audit.md): each "
        f"is decided at {alpha:.0%} after Holm's correction; its interval is nominal.",
        "",
        *md_table(
            [
                what,
                f"delta [{confidence:.0%} CI, nominal]",
                "bootstrap p",
                "Holm p",
                f"at {alpha:.0%}",
            ],
            [
                [label, ci_text(d), f"{d['p_value']:.4f}", f"{d['p_holm']:.4f}", d["holm"]]
                for label, d in zip(labels, family)
            ],
        ),
        "",
    ]
