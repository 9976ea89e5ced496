"""The box that opens the retrospective (`id="answer"`): in words, whether training helped on the
primary figure, what it lost, and whether GRPO beat the cheap baseline, then the reward's scale.
Every figure is the recipe's over its seeds (rlvr/audit/recipe.py); the chart under the box is
rlvr.report.plots.plot_answer."""

from __future__ import annotations

from collections.abc import Mapping

from rlvr.audit.baseline import count_span
from rlvr.audit.slices import overall_verdict, weighed_regressions
from rlvr.report.render import Md, ci_text, md_escape
from rlvr.rewards.registry import normalized_weights

HELPED = {
    "improved": "Yes",
    "regressed": "No, it got worse",
    "no significant change": "Not significantly",
}
BEAT = {"better": "Yes", "worse": "No, {name} did better", "tie": "No significant difference"}


def reward_scale(rewards: Mapping) -> Md:
    """What a reward of 0.17 means: the weighted sum the run trains on.

    >>> print(reward_scale({"funcs": ["correctness", "format"], "weights": [1.0, 0.2]}))
    A completion's reward is 0.83 × correctness + 0.17 × format (params.yaml `rewards`, weights scaled to sum 1).
    """  # noqa: E501 (one-line output)
    weights = normalized_weights(rewards["weights"])
    terms = " + ".join(f"{w:.2f} × {md_escape(f)}" for w, f in zip(weights, rewards["funcs"]))
    return Md(f"A completion's reward is {terms} (params.yaml `rewards`, weights scaled to sum 1).")


def answer_box(recipe: Mapping | None, rewards: Mapping, confidence: float) -> list[str]:
    """The box's markdown lines (none without a recipe)."""
    if not recipe:
        return []
    pooled = recipe.get("pooled")
    if not pooled:  # too few seeds ran: the recipe's line says which and why
        return [
            '<div id="answer" markdown="1">',
            "",
            f"**No answer yet**: {md_escape(recipe['verdict_line'])}.",
            "",
            reward_scale(rewards),
            "",
            "</div>",
            "",
        ]
    primary = pooled["delta_mean_reward"]
    seeds, rows = len(recipe["evaluated"]), pooled["rows"]
    helped = (
        f"**Did training help?** {HELPED[overall_verdict(primary)]}: held-out mean reward "
        f"{pooled['step0']['mean_reward']:.3f} at step 0, {pooled['final']['mean_reward']:.3f} "
        f"after GRPO ({ci_text(primary)}, a {confidence:.0%} interval over {seeds} seeds and "
        f"{rows} prompts)."
    )
    # a loss reads "pass@32 0.86 -> 0.51, delta ..., Holm p ...": the figure and its move
    losses = [loss.split(", delta")[0].replace(" -> ", " → ") for loss in pooled["losses"]]
    tags = [s["tag"] for s in weighed_regressions(pooled)]
    lost = "; ".join(
        [*map(md_escape, losses), *([f"regressed on {md_escape(', '.join(tags))}"] if tags else [])]
    )
    lost_line = (
        f"**What did it lose?** {lost} (Holm-corrected)."
        if lost
        else "**What did it lose?** Nothing significant (Holm-corrected over the secondary figures)."
    )
    out = ['<div id="answer" markdown="1">', "", helped, "", lost_line, ""]
    baseline = (recipe.get("baseline") or {}).get("comparison")
    if baseline:
        name = md_escape(baseline["name"])
        versus = baseline["grpo_minus_baseline"]["delta_mean_reward"]
        sampled = baseline.get("sampled") or {}
        cost = (
            f"; {name} sampled {count_span(sampled['baseline'])} completions a seed, GRPO "
            f"{count_span(sampled['grpo'])}"
            if all(any(c is not None for c in sampled.get(k) or []) for k in ("baseline", "grpo"))
            else ""
        )
        out += [
            f"**Did GRPO beat the cheap baseline, {name}?** "
            f"{BEAT[versus['verdict']].format(name=name)}: GRPO − {name} {ci_text(versus)} "
            f"on mean reward{cost}.",
            "",
        ]
    return [*out, reward_scale(rewards), "", "</div>", ""]
