"""The retrospective: what the run did, whether it helped, and whether it can be trusted.

`build_report` assembles one markdown document from the stages' outputs (rlvr.report.render turns it
into a self-contained HTML page); the analysis it shows lives in rlvr.audit.diagnosis, the provenance in
rlvr.report.provenance. The document is a deterministic function of its inputs: no clock, no git state,
so a rerun of the same commit writes the same bytes.

Everything that comes from data, params or model output (ids, prompts, completions, names,
paths, values, messages) enters the markdown through rlvr.report.render's md_escape / md_value /
md_code or as a cell of md_table, which escapes it: the page shows it as text, never as markup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.audit.diagnosis import prompt_audit, training_health
from rlvr.core.metric_keys import GREEDY_SUCCESS, MEAN_LENGTH, MEAN_REWARD, SAMPLED_SUCCESS
from rlvr.core.seeds import seed_folder
from rlvr.report.answer import answer_box
from rlvr.report.curves import CURVES, curve_facts, seed_run, smoothing_window
from rlvr.report.knobs import not_in_force
from rlvr.report.model_card import PROTOCOL
from rlvr.report.render import (
    Md,
    ci_text,
    fmt,
    md_code,
    md_escape,
    md_image,
    md_table,
    md_value,
    plain_value,
)
from rlvr.report.versus_baseline import baseline_headline, baseline_section, holm_table


def alarms_section(alarms: dict) -> list[str]:
    """The reward-hacking, overfitting and forgetting alarms (rlvr.audit.alarms), like the KL
    diagnosis."""
    fired = alarms["fired"]
    out = [
        "### Reward-hacking, overfitting and forgetting alarms",
        "",
        (
            f"**{len(fired)} alarm(s) fired**: {md_escape(', '.join(fired))}."
            if fired
            else "**No alarm fired.**"
        )
        + " Thresholds live in params.yaml `report.alarms`.",
        "",
    ]
    out += md_table(
        ["alarm", "value seen", "threshold", "fired", "what to do"],
        [
            [
                r["rule"],
                r["value"],
                r["threshold"],
                "yes" if r["fired"] else "no",
                r["advice"] if r["fired"] else "",
            ]
            for r in alarms["rules"]
        ],
    )
    return out + [""]


def selection_section(selection: dict) -> list[str]:
    """The validation rows' scores during training and which step became models/final, why."""
    e = md_escape
    scored = selection["validation"]
    chosen = selection["chosen_step"]
    out = [
        "### Validation rows and the chosen weights",
        "",
        f"**{e(selection['reason'])}.** The validation rows (data.val_path) were scored at "
        f"{len(scored)} steps, sampled as `evaluate` samples a split; the test file was not "
        "read during training.",
        "",
    ]
    at_chosen = next((s for s in scored if s["step"] == chosen), None)
    best_any = max(scored, key=lambda s: s[MEAN_REWARD])
    if at_chosen and best_any[MEAN_REWARD] > at_chosen[MEAN_REWARD]:
        out += [
            f"The highest validation mean reward, {best_any[MEAN_REWARD]:.3f}, was at step "
            f"{best_any['step']}"
            + (" (the base model: not a checkpoint)" if best_any["step"] == 0 else "")
            + f"; the final model (step {chosen}) scored {at_chosen[MEAN_REWARD]:.3f}.",
            "",
        ]
    out += md_table(
        [
            "step",
            "validation mean reward",
            "greedy success",
            "sampled success",
            "mean length",
            "final model",
        ],
        [
            [
                s["step"],
                s.get(MEAN_REWARD),
                s.get(GREEDY_SUCCESS),
                s.get(SAMPLED_SUCCESS),
                s.get(MEAN_LENGTH),
                "chosen" if s["step"] == chosen else "",
            ]
            for s in scored
        ],
    )
    return out + [""]


SPLITS = (("heldout", "held-out"), ("train", "train"))


def _arrow(before, after) -> Md:
    """`0.220 -> 0.429` (numbers only)."""
    return Md(f"{md_value(before)} -> {md_value(after)}")


def hidden_section(
    evaluation: dict, confidence: float, min_slice_rows: int, figure: str
) -> list[str]:
    """What a mean can hide (rlvr.audit.slices): pass@k, the rows of each tag, the prompts that lost or
    gained every correct answer, and diversity; both splits, held-out first."""
    e = md_escape
    splits = [(key, name) for key, name in SPLITS if key in evaluation]
    held = evaluation[evaluation["verdict_split"]]
    n = held["samples_per_prompt"]
    out = [
        "### pass@k: solved in k tries",
        "",
        f"Each policy drew {n} samples per prompt; pass@k is the chance that k of them, drawn "
        "without replacement, hold a correct answer (the unbiased estimator of Chen et al. "
        "2021), averaged over prompts. Training that sharpens the policy raises pass@1 and "
        f"can lower pass@{n}: the base model then solves prompts the final one no longer does."
        f" Held-out: pass@1 {_arrow(held['pass_at_k']['step0']['1'], held['pass_at_k']['final']['1'])}"
        f" ({ci_text(held['delta_pass@1'])}), pass@{n} "
        f"{_arrow(held['pass_at_k']['step0'][str(n)], held['pass_at_k']['final'][str(n)])}"
        f" ({ci_text(held[f'delta_pass@{n}'])}), {confidence:.0%} paired bootstrap CIs over "
        "prompts. "
        + (
            f"The curves cross: {e(held['crossing'])}."
            if held["crossing"]
            else "The curves do not cross."
        ),
        "",
    ]
    ks = sorted(held["pass_at_k"]["step0"], key=int)
    out += md_table(
        ["split", "policy", *[f"pass@{k}" for k in ks]],
        [
            [name, label, *[evaluation[key]["pass_at_k"][policy].get(k) for k in ks]]
            for key, name in splits
            for policy, label in (("step0", "step 0"), ("final", "final"))
        ],
    )
    out += ["", md_image("pass@k against k, step 0 and final", figure), ""]

    out += ["### Kinds of problem (row tags)", ""]
    if not any(evaluation[key]["slices"] for key, _ in splits):
        out += [
            "The rows carry no `tags`: give each row a list of the kinds of problem it "
            'belongs to (`"tags": ["sub"]`) to see each kind apart; a mean can hide '
            "one that was forgotten.",
            "",
        ]
    else:
        out += [
            f"A tag regressed when its mean-reward CI lies below 0, its success (pass@1) or "
            f"pass@{n} fell to about nothing, or its pass@{n} CI lies below 0; a regressed "
            f"tag of at least {md_value(min_slice_rows)} rows on the held-out split makes the "
            "verdict `mixed` (params.yaml `report`).",
            "",
        ]
        out += md_table(
            [
                "split",
                "tag",
                "rows",
                "mean reward",
                f"delta [{confidence:.0%} CI]",
                "greedy success",
                "success (pass@1)",
                f"pass@{n}",
                "regressed",
            ],
            [
                [
                    name,
                    s["tag"],
                    s["rows"],
                    _arrow(s["step0"]["mean_reward"], s["final"]["mean_reward"]),
                    ci_text(s["delta_mean_reward"]),
                    _arrow(s["step0"]["greedy_success"], s["final"]["greedy_success"]),
                    _arrow(s["step0"]["pass@1"], s["final"]["pass@1"]),
                    _arrow(s["step0"][f"pass@{n}"], s["final"][f"pass@{n}"]),
                    (
                        "yes: "
                        + "; ".join(s["reasons"])
                        + ("" if s["weighed"] else " (too few rows to weigh)")
                    )
                    if s["regressed"]
                    else "no",
                ]
                for key, name in splits
                for s in evaluation[key]["slices"]
            ],
        )
        out.append("")

    out += ["### Solutions lost and gained", ""]
    for key, name in splits:
        sol = evaluation[key]["solutions"]
        out.append(
            f"{name.capitalize()}: **{sol['lost_count']}** prompts had a correct sample "
            f"at step 0 and none at the end (lost), **{sol['new_count']}** the reverse "
            f"(new), {sol['kept']} had one at both."
        )
        out.append("")
    rows = [
        [name, change, item["id"], ", ".join(item["tags"]), item.get("prompt", "")]
        for key, name in splits
        for change in ("lost", "new")
        for item in evaluation[key]["solutions"][change]
    ]
    if rows:
        out += md_table(["split", "change", "id", "tags", "prompt"], rows) + [""]

    out += [
        "### Diversity",
        "",
        "Distinct correct answers per solved prompt (answers compared with their whitespace "
        "collapsed), the share of distinct completions among all samples, and the mean "
        "per-token entropy of each policy on its own samples (nats, at the sampling "
        "temperature).",
        "",
    ]
    out += md_table(
        [
            "split",
            "policy",
            "distinct correct answers per solved prompt",
            "distinct completions share",
            "entropy",
        ],
        [
            [
                name,
                label,
                d.get("distinct_correct_per_solved"),
                d.get("distinct_share"),
                d.get("entropy"),
            ]
            for key, name in splits
            for policy, label in (("step0", "step 0"), ("final", "final"))
            for d in [evaluation[key]["diversity"][policy]]
        ],
    )
    return out + [""]


@dataclass(frozen=True)
class ReportInputs:
    """What the report stage read: each stage's outputs and the params as used. `images` maps a
    name to a PNG path relative to the report (rlvr.report.render.to_html inlines only those)."""

    evaluation: dict
    per_prompt: Sequence[dict]
    history: Sequence[dict]
    diagnosis: dict
    hyperparameters: Sequence[tuple[str, Any, str]]
    smoke: dict
    step0: dict
    validation: dict
    gate: dict
    cost: dict
    prov: dict
    params: dict
    images: dict[str, str]
    confidence: float
    selection: dict | None = None
    alarms: dict | None = None
    recipe: dict | None = (
        None  # rlvr.audit.recipe.recipe_audit: the seeds pooled (None: one run only)
    )
    # rlvr.report.curves.seed_run of every seed with results, by seed (None: `history` alone)
    seed_runs: Mapping[int, Mapping] | None = None
    # the groups of completions train recorded for the shown seed (rlvr.pipeline.training)
    samples: Sequence[dict] = ()


def per_prompt_path(r: ReportInputs) -> str:
    """Where the shown run's per-prompt records are: the published seed's folder."""
    seed = (r.recipe or {}).get("published_seed", r.params.get("seed", 0))
    return f"{r.params['paths']['eval_runs']}/{seed_folder(seed)}/per_prompt.jsonl"


# named, not linked: the page is self-contained, and it holds no link at all (no markup from the
# data can make one: tests/test_report_escaping.py)
PROTOCOL_LINE = f"The protocol (`docs/audit.md` in the repository): {PROTOCOL}."


def recipe_section(r: ReportInputs) -> list[str]:
    """The recipe's verdict over the seeds, first: the pooled figures, each seed's line (its own
    verdict, one run's), the per-seed deltas against the pooled band, and per-tag agreement."""
    recipe = r.recipe
    if not recipe:
        return []
    e, v = md_escape, md_value
    lines, pooled = recipe["seed_lines"], recipe.get("pooled")
    verdict, line = recipe["verdict"], recipe["verdict_line"]
    detail = line[len(verdict) + 2 :] if line.startswith(f"{verdict}: ") else line
    out = [
        f"**The recipe over {len(recipe['evaluated'])} of {len(recipe['seeds'])} seeds: "
        f"{e(verdict.capitalize())}**: {e(detail)}.",
        "",
        *baseline_headline(recipe),
        "## 0. The recipe over its seeds",
        "",
    ]
    if pooled:
        n = pooled["samples_per_prompt"]
        out += [
            f"Each RL seed (params.yaml `audit.seeds`) trained and was evaluated on its own; "
            f"the pooled figures are means over seeds, and each interval is a "
            f"{r.confidence:.0%} two-level bootstrap, seeds then prompts, so it holds "
            "training noise and prompt noise (rlvr/audit/recipe.py). The verdict follows the same "
            "rules as one run's.",
            "",
            PROTOCOL_LINE,
            "",
        ]
        out += md_table(
            ["held-out, pooled", "step 0", "final", f"delta [{r.confidence:.0%} CI]"],
            [
                [
                    "mean reward",
                    pooled["step0"]["mean_reward"],
                    pooled["final"]["mean_reward"],
                    ci_text(pooled["delta_mean_reward"]),
                ],
                [
                    "pass@1",
                    pooled["step0"]["pass@1"],
                    pooled["final"]["pass@1"],
                    ci_text(pooled["delta_pass@1"]),
                ],
                [
                    f"pass@{n}",
                    pooled["step0"][f"pass@{n}"],
                    pooled["final"][f"pass@{n}"],
                    ci_text(pooled[f"delta_pass@{n}"]),
                ],
            ],
        )
        out.append("")
    out += [
        "Each seed's line: its held-out delta with its CI over prompts alone, and its own "
        "verdict, which is one run's.",
        "",
    ]
    n = lines[0]["samples"] if lines else "n"
    out += md_table(
        [
            "seed",
            "delta [CI over prompts]",
            "pass@1 final",
            f"pass@{n} final",
            "regressed tags",
            "this run's verdict",
            "validation reward",
            "published",
        ],
        [
            [
                line["seed"],
                ci_text(line["delta_mean_reward"]),
                line["pass1_final"],
                line["passn_final"],
                ", ".join(line["regressed_tags"]) or "none",
                line["verdict"],
                line["validation_reward"],
                "yes" if line["seed"] == recipe.get("published_seed") else "",
            ]
            for line in lines
        ],
    )
    out += [""] + [f"Seed {v(seed)}: {e(why)}." for seed, why in recipe["failed"].items()]
    out += [
        "",
        md_image("each seed's held-out delta and the pooled interval", r.images["seeds"]),
        "",
    ]
    if pooled and pooled["slices"]:
        n = pooled["samples_per_prompt"]
        out += ["Per tag, pooled, and how many seeds' own audits called it regressed:", ""]
        out += md_table(
            [
                "tag",
                "rows",
                f"delta [{r.confidence:.0%} CI]",
                f"pass@{n} delta [CI]",
                "regressed (pooled)",
                f"regressed in k of {len(lines)} seeds",
            ],
            [
                [
                    s["tag"],
                    s["rows"],
                    ci_text(s["delta_mean_reward"]),
                    ci_text(s[f"delta_pass@{n}"]),
                    ("yes: " + "; ".join(s["reasons"])) if s["regressed"] else "no",
                    s["regressed_seeds"],
                ]
                for s in pooled["slices"]
            ],
        )
        out.append("")
        out += holm_table(pooled, pooled["slices"], r.confidence, "step 0 -> final, pooled")
    out += baseline_section(recipe, r.confidence)
    if "published_seed" in recipe:
        out += [
            f"The rest of this page is one run's: seed {v(recipe['published_seed'])}, the "
            f"published one ({e(recipe['published_reason'])}).",
            "",
        ]
    return out


def verdict_section(r: ReportInputs) -> list[str]:
    """The verdict line (a regressed kind of problem or a narrowing is in it), then section 1:
    held-out and train deltas, the per-prompt plot and what the mean hides."""
    e = md_escape
    evaluation, confidence = r.evaluation, r.confidence
    train, held = evaluation["train"], evaluation["heldout"]
    verdict = evaluation["verdict"]
    line = evaluation.get("verdict_line", verdict)
    detail = line[len(verdict) + 2 :] if line.startswith(f"{verdict}: ") else line
    one_run = (
        f"Seed {md_value(r.recipe['published_seed'])}, one run: "
        if r.recipe and "published_seed" in r.recipe
        else ""
    )
    out = [f"{one_run}**{e(verdict.capitalize())}**: {e(detail)}.", ""]
    out += ["## 1. Verdict" + (" of one run" if one_run else ""), ""]
    out.append(
        f"On held-out prompts: mean sampled reward "
        f"{held['step0']['mean_reward']:.3f} -> {held['final']['mean_reward']:.3f} (paired delta "
        f"{ci_text(held['delta_mean_reward'])}, {confidence:.0%} bootstrap CI over "
        f"{md_value(held['prompts'])} prompts); on the training prompts "
        f"{train['step0']['mean_reward']:.3f} -> {train['final']['mean_reward']:.3f} "
        f"({ci_text(train['delta_mean_reward'])}). The verdict is `improved` only when the "
        "held-out CI lies above 0, no kind of problem (row tag) regressed and pass@n did not "
        "narrow (rlvr/audit/slices.py); a loss of either makes it `mixed`."
    )
    out.append("")
    out += md_table(
        [
            "split",
            "prompts",
            "mean reward step 0",
            "mean reward final",
            f"delta [{confidence:.0%} CI]",
            "greedy success step 0",
            "greedy success final",
            "malformed step 0",
            "malformed final",
            "KL final vs step 0",
        ],
        [
            [
                name,
                m["prompts"],
                m["step0"]["mean_reward"],
                m["final"]["mean_reward"],
                ci_text(m["delta_mean_reward"]),
                m["step0"]["greedy_success"],
                m["final"]["greedy_success"],
                m["step0"]["malformed_share"],
                m["final"]["malformed_share"],
                m.get("kl_final_vs_step0"),
            ]
            for name, m in (("train", train), ("held-out", held))
        ],
    )
    out += ["", md_image("step 0 vs final reward per prompt", r.images["per_prompt"]), ""]
    return out + hidden_section(
        evaluation, confidence, r.params["report"]["min_slice_rows"], r.images["pass_at_k"]
    )


def _seeds_text(seeds: Sequence[int]) -> str:
    """The seeds in words.

    >>> _seeds_text([0]), _seeds_text([0, 1, 2])
    ('seed 0', 'seeds 0, 1 and 2')
    """
    names = [str(s) for s in seeds]
    return (
        f"seed {names[0]}" if len(names) == 1 else f"seeds {', '.join(names[:-1])} and {names[-1]}"
    )


def _curve_lines(facts: Mapping, grpo: Mapping) -> list[str]:
    """What a flat curve would hide, in words: truncation and PPO's clip."""
    out = []
    limit = grpo.get("max_completion_length")
    truncated = facts["truncated"]
    if truncated is not None:
        cap = f"`max_completion_length` ({fmt(limit)} tokens)"
        out += [
            f"**Truncation**: no completion reached {cap} at any step of any seed: every answer "
            "ended on its own."
            if truncated["value"] == 0
            else f"**Truncation**: at most {truncated['value']:.1%} of a step's completions were "
            f"cut at {cap}, at seed {truncated['seed']}'s step {truncated['step']}; a cut "
            "completion has no end token.",
            "",
        ]
    clip = facts["clip"]
    if clip is not None:
        why = (
            ": with `num_iterations` 1 each batch is trained on once, by the policy that sampled it, "
            "so the probability ratio is 1 and PPO's clip never acts"
            if grpo.get("num_iterations") == 1
            else ""
        )
        out += [
            f"**Clip ratio**: 0 at every step of every seed{why}."
            if clip["value"] == 0
            else f"**Clip ratio**: at most {clip['value']:.1%} of a step's tokens were clipped "
            f"(seed {clip['seed']}, step {clip['step']}): PPO's clip limited those updates.",
            "",
        ]
    return out


def samples_section(samples: Sequence[dict], seed: int) -> list[str]:
    """The groups of completions training generated at a few steps, each with its reward: what
    the policy wrote, not only how it scored (prompts and completions shown as text)."""
    if not samples:
        return []

    def completion(text: str, reward: float, correct: bool | None) -> str:
        mark = "" if correct is None else (" ✓" if correct else " ✗")
        return f"{md_code(text)} {reward:.2f}{mark}"

    return [
        f"**Completions sampled during training** (seed {seed}; one group of the step's last "
        "batch, each completion with its reward; ✓: the verifier passed it):",
        "",
        *md_table(
            ["step", "prompt", "completions"],
            [
                [
                    s["step"],
                    s["prompt"],
                    Md(
                        ", ".join(
                            completion(text, reward, correct)
                            for text, reward, correct in zip(
                                s["completions"],
                                s["rewards"],
                                s.get("correct") or [None] * len(s["completions"]),
                            )
                        )
                    ),
                ]
                for s in samples
            ],
        ),
        "",
    ]


def curves_section(r: ReportInputs) -> list[str]:
    """Section 2: small figures of the curves a GRPO user looks for, every seed overlaid
    (rlvr/report/curves.py), what they would hide in words, the gap between the training and the
    validation rows, the published seed's every curve folded, then its validation rows' scores
    with the chosen step."""
    published = (r.recipe or {}).get("published_seed", r.params.get("seed", 0))
    runs = r.seed_runs or {published: seed_run(r.history, {"selection": r.selection})}
    window = smoothing_window(runs)
    facts = curve_facts(runs, window)
    steps = max(len(run["history"]) for run in runs.values())
    out = [
        "## 2. Curves",
        "",
        f"{steps} GRPO steps for {_seeds_text(sorted(runs))}"
        + (f" (seed {published} published)" if len(runs) > 1 else "")
        + f": one colour per seed; thin lines per step, thick lines a moving average over "
        f"{window} steps.",
        "",
    ]
    figures = [c for c in CURVES if f"curve_{c.name}" in r.images]
    if figures:
        out += [
            '<div class="figs" markdown="1">',
            "",
            *(md_image(c.title, r.images[f"curve_{c.name}"]) for c in figures),
            "",
            "</div>",
            "",
        ]
    out += _curve_lines(facts, r.params["train"]["grpo"])
    gaps = [g for g in facts["gaps"] if g["gap"] is not None]
    if gaps:
        out += [
            "**Training rows against validation rows** (the same reward, 0 to 1): a policy that "
            "learnt its training rows by heart scores high on them and not on rows it never saw.",
            "",
            *md_table(
                [
                    "seed",
                    f"training reward (last {window} steps)",
                    "validation mean reward",
                    "gap",
                    "groups with no reward spread (end)",
                ],
                [
                    [
                        g["seed"],
                        g["train_reward"],
                        Md(f"{fmt(g['validation_reward'])} (step {g['validation_step']})"),
                        Md(f"{g['gap']:+.3f}"),
                        Md("n/a" if g["no_spread_end"] is None else f"{g['no_spread_end']:.0%}"),
                    ]
                    for g in gaps
                ],
            ),
            "",
        ]
    out += samples_section(r.samples, published)
    out += [
        f'<details markdown="1"><summary>Every curve seed {published} logged</summary>',
        "",
        md_image(f"every curve of seed {published}", r.images["curves"]),
        "",
        "</details>",
        "",
    ]
    if r.selection and r.selection.get("validation"):
        out += selection_section(r.selection)
    return out


def diagnosis_section(r: ReportInputs) -> list[str]:
    """Section 3: one verdict on the run's health (the beta rules and the alarms together), then
    the KL / beta rules, then the alarms."""
    e, v, diagnosis = md_escape, md_value, r.diagnosis
    health = training_health(diagnosis, r.alarms)
    out = [
        "## 3. Training health",
        "",
        f"**{e(health['label'])}**: {e(health['text'])}.",
        "",
        "### KL / beta diagnosis",
        "",
        f"The rules read {e(diagnosis['label'])}: {e(diagnosis['advice'])}.",
        "",
    ]
    out += md_table(
        ["rule", "value seen", "threshold", "fired"],
        [
            [x["rule"], x["value"], x["threshold"], "yes" if x["fired"] else "no"]
            for x in diagnosis["rules"]
        ],
    )
    dv = diagnosis["values"]
    out += [
        "",
        f"Moving averages over {v(r.params['report']['window'])} steps: reward "
        f"{v(dv['reward_start'])} (start) -> {v(dv['reward_mid'])} (middle) -> "
        f"{v(dv['reward_end'])} (end), peak {v(dv['reward_peak'])}; KL max "
        f"{v(dv['kl_max'])}, end {v(dv['kl_end'])}, over {e(dv.get('kl_over', '?'))}. "
        "Thresholds live in params.yaml `report`.",
        "",
    ]
    return out + (alarms_section(r.alarms) if r.alarms is not None else [])


def hyperparameters_section(r: ReportInputs) -> list[str]:
    """Section 4: the knobs that shaped the run (rlvr/report/knobs.py), with params.yaml's reason
    for each; those not in force in this run (NOT_IN_FORCE) folded apart, each with the setting it waits for."""
    rows = [
        (name, value, why, not_in_force(name, r.params)) for name, value, why in r.hyperparameters
    ]
    off = [row for row in rows if row[3]]
    out = [
        "## 4. Hyperparameters",
        "",
        *md_table(
            ["parameter", "value", "why"],
            [(name, md_code(value), why) for name, value, why, waits in rows if not waits],
        ),
        "",
    ]
    if off:
        out += [
            f'<details markdown="1"><summary>{len(off)} more, not in force in this run</summary>',
            "",
            *md_table(
                ["parameter", "value", "acts only with"],
                [(name, md_code(value), waits) for name, value, _, waits in off],
            ),
            "",
            "</details>",
            "",
        ]
    return out


def checks_section(r: ReportInputs) -> list[str]:
    """Section 5: the reward-test gate, the smoke checks and the data validation."""
    v, gate, smoke, step0, validation = md_value, r.gate, r.smoke, r.step0, r.validation
    out = [
        "## 5. Smoke checks and data validation",
        "",
        f"Reward-test gate: **{'passed' if gate.get('passed') else 'FAILED'}** "
        f"({v(gate.get('counts', {}).get('passed'))}/{v(gate.get('counts', {}).get('tests'))} "
        "tests).",
        "",
        f"Smoke run: **{'passed' if smoke.get('passed') else 'FAILED'}**; step-0 baseline "
        f"mean reward {v(step0.get('mean_reward'))} over {v(step0.get('prompts'))} prompts "
        f"x {v(step0.get('samples_per_prompt'))} samples (seed {v(step0.get('seed'))}).",
        "",
    ]
    out += md_table(
        ["check", "passed", "value", "expected"],
        [
            [c["name"], "yes" if c["passed"] else "NO", plain_value(c["value"]), c["expected"]]
            for c in smoke.get("checks", [])
        ],
    )
    out += [
        "",
        f"Data validation: **{'passed' if validation.get('passed') else 'FAILED'}** "
        f"({v(validation.get('problems', 0))} problems; Data Docs in "
        f"{md_code(r.params['paths']['data_docs'] + '/')}).",
        "",
    ]
    out += md_table(
        ["file", "rows", "rules held", "problems"],
        [
            [
                f["path"],
                f["rows"],
                f"{sum(x['success'] for x in f['rules'].values())}/{len(f['rules'])}",
                f["problems"],
            ]
            for f in validation.get("files", {}).values()
        ],
    )
    return out + [""]


def audit_section(r: ReportInputs) -> list[str]:
    """Section 6: the held-out prompts that gained and lost most, never and always solved, and
    the training prompts in one line."""
    e, per_prompt = md_escape, r.per_prompt
    audit = prompt_audit([x for x in per_prompt if x["split"] == "heldout"])
    out = ["## 6. Per-prompt audit (held-out)", ""]
    for title, key in (("Biggest gains", "gains"), ("Biggest losses", "losses")):
        out += [f"**{title}**", ""]
        rows = [
            [
                x["id"],
                x["prompt"],
                x["step0_reward"],
                x["final_reward"],
                x["delta"],
                x["step0_greedy"],
                x["final_greedy"],
            ]
            for x in audit[key]
        ]
        out += (
            md_table(
                ["id", "prompt", "step 0", "final", "delta", "greedy step 0", "greedy final"], rows
            )
            if rows
            else ["none"]
        )
        out.append("")
    for title, key in (
        ("Never solved (no sample correct, neither at step 0 nor at the end)", "never_solved"),
        ("Always solved (every sample correct, at step 0 and at the end)", "always_solved"),
    ):
        ids = [x["id"] for x in audit[key]]
        out += [
            f"**{title}**: {len(ids)}" + (f": {e(', '.join(map(str, ids)))}" if ids else ""),
            "",
        ]
    train_rows = [x for x in per_prompt if x["split"] == "train"]
    train_audit = prompt_audit(train_rows)
    return out + [
        f"On the {len(train_rows)} training prompts: {sum(x['delta'] > 0 for x in train_rows)} "
        f"gained, {sum(x['delta'] < 0 for x in train_rows)} lost, "
        f"{len(train_audit['never_solved'])} never solved, "
        f"{len(train_audit['always_solved'])} always solved "
        f"(every row is in {md_code(per_prompt_path(r))}).",
        "",
    ]


def cost_section(r: ReportInputs) -> list[str]:
    """Section 7: what PPO's critic would cost next to this policy."""
    v, cost = md_value, r.cost
    return [
        "## 7. GRPO vs PPO cost",
        "",
        '<details markdown="1"><summary>What PPO\'s critic would cost next to this policy'
        "</summary>",
        "",
        f"PPO would train a critic next to this policy: the same backbone with a value head, "
        f"{v(cost['critic_parameters'])} parameters, {cost['critic_memory_mb']:.1f} MB of "
        f"weights, gradients and AdamW state at {v(cost['bytes_per_trained_parameter'])} bytes "
        f"per parameter (the policy itself needs {cost['policy_memory_mb']:.1f} MB). GRPO has "
        f"no critic: its baseline is the mean reward of the "
        f"{v(cost['grpo_rollouts_per_prompt'])} completions sampled per prompt, so it saves "
        f"that memory and the critic's forward and backward passes, and pays with "
        f"{v(cost['grpo_rollouts_per_prompt'])} rollouts per prompt instead of "
        f"{v(cost['ppo_rollouts_per_prompt'])}.",
        "",
        "</details>",
        "",
    ]


def code_rows(code: Mapping[str, Mapping]) -> list[list[str]]:
    """The provenance's code digests, one row per stage; a foreach stage's items (train@0,
    train@1, ...) share one row when they ran the same code, and keep their own when not.

    >>> same, other = {"files": 61, "digest": "dd3f4fcfdebcb3da00"}, {"files": 3, "digest": "aa"}
    >>> for row in code_rows({"train@0": same, "train@1": same, "train@2": other}):
    ...     print(row)
    ['code of stages train@0, train@1', '61 files, sha256 dd3f4fcfdebcb3da']
    ['code of stage train@2', '3 files, sha256 aa']
    """
    groups: dict[tuple[str, int, str], list[str]] = {}
    for stage, c in code.items():
        groups.setdefault((stage.split("@")[0], c["files"], str(c["digest"])), []).append(stage)
    return [
        [
            f"code of stage{'s' if len(stages) > 1 else ''} {', '.join(stages)}",
            f"{files} files, sha256 {digest[:16]}",
        ]
        for (_, files, digest), stages in groups.items()
    ]


def provenance_section(r: ReportInputs) -> list[str]:
    """Section 8: data and model md5s, each stage's code digest, versions, the params as used."""
    params, prov = r.params, r.prov
    out = [
        "## 8. Provenance",
        "",
        "Each model md5 is the one dvc.lock records for the stage that wrote the model; each "
        "data md5 is of the file as the pipeline read it; each stage's code digest covers the "
        "code and environment files dvc.lock records as that stage's deps. This page holds "
        "no clock time and no git state, so rerunning the same commit writes it byte for "
        "byte: the commit that holds it with its dvc.lock is its provenance. Wall times are "
        f"in {md_code(params['paths']['timing'] + '/')} and the Prefect artifacts.",
        "",
        '<details markdown="1"><summary>Data and model md5s, code digests, library versions'
        "</summary>",
        "",
    ]
    out += md_table(
        ["what", "value"],
        [
            ["seed", params.get("seed")],
            *[[f"data md5 {path}", md5] for path, md5 in prov["data"].items()],
            *[[f"model md5 {path}", md5] for path, md5 in prov["models"].items()],
            *code_rows(prov["code"]),
            *[[f"{name} version", version] for name, version in prov["versions"].items()],
            ["platform (float results depend on it)", prov["platform"]],
        ],
    )
    return out + [
        "",
        "</details>",
        "",
        "<details><summary>params.yaml as used</summary>",
        "",
        "```json",
        json.dumps(params, indent=2, default=str),
        "```",
        "",
        "</details>",
        "",
    ]


def answer_section(r: ReportInputs) -> list[str]:
    """The answer first, in words (rlvr/report/answer.py), then the chart of step 0, GRPO and the
    baseline."""
    box = answer_box(r.recipe, r.params["rewards"], r.confidence)
    if not box:
        return []
    alt = "held-out mean reward, pass@1 and pass@n: step 0, GRPO and the baseline"
    return [*box, md_image(alt, r.images["answer"]), ""]


SECTIONS = (
    answer_section,
    recipe_section,
    verdict_section,
    curves_section,
    diagnosis_section,
    hyperparameters_section,
    checks_section,
    audit_section,
    cost_section,
    provenance_section,
)


def build_report(**inputs: Any) -> str:
    """The retrospective as markdown: the title, then each of SECTIONS in order; `inputs` are
    ReportInputs' fields."""
    r = ReportInputs(**inputs)
    out = ["# GRPO run: retrospective", ""]
    for section in SECTIONS:
        out += section(r)
    return "\n".join(out)
