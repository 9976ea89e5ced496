"""PNG curves from a training log history (matplotlib, no network: the report embeds them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display: chosen before pyplot loads
import matplotlib.pyplot as plt  # noqa: E402

from rlvr.core.metric_keys import (
    BETA,
    COMPLETION_LENGTH,
    CORRECTNESS,
    ENTROPY,
    FIRST_BATCH_KL,
    FORMAT,
    GRAD_NORM,
    GREEDY_SUCCESS,
    KEPT_SHARE,
    KL,
    LENGTH,
    LOSS,
    MEAN_REWARD,
    NO_SPREAD_SHARE,
    PASS_AT_PREFIX,
    REWARD,
    TAG_SUCCESS_PREFIX,
)
from rlvr.core.stats import drift_kl, moving_average

PANELS = [
    ("Reward", [REWARD, CORRECTNESS, FORMAT, LENGTH]),
    ("KL to reference (k3)", [KL]),
    ("Loss", [LOSS]),
    ("Beta in force", [BETA]),
    ("Completion length (tokens)", [COMPLETION_LENGTH]),
    ("Grad norm", [GRAD_NORM]),
    ("Entropy", [ENTROPY]),
    ("Groups with no reward spread", [NO_SPREAD_SHARE]),
    ("Dynamic sampling: kept share of generated groups", [KEPT_SHARE]),
]
# Under dynamic sampling TRL's kl covers the kept groups only and reads far higher than the KL
# over each step's first batch (stats.drift_kl): two panels, so neither squashes the other.
SAMPLED_KL_PANELS = [
    ("KL to reference (k3), each step's first batch", [FIRST_BATCH_KL]),
    ("KL over the kept groups only (TRL's kl)", [KL]),
]


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend."""
    return plt


def save_figure(fig, path: str | Path) -> Path:
    """Lay out, write the PNG (folders made as needed) and close the figure."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    pyplot().close(fig)
    return path


VALIDATION_PANEL = "Validation rows vs training reward"
VALIDATION_PASS_PANEL = "Validation rows: pass@k"
VALIDATION_TAGS_PANEL = "Validation rows: success per tag"


def _validation_panel(
    ax, history: Sequence[dict], validation: Sequence[dict], chosen_step: int | None, window: int
) -> None:
    """Training reward (moving average) and the validation scores at each scored step, with
    the step whose weights became models/final marked."""
    points = [(e["step"], float(e[REWARD])) for e in history if REWARD in e]
    if points:
        steps, values = zip(*points)
        ax.plot(
            steps,
            moving_average(values, window),
            color="C0",
            linewidth=1.4,
            label="training reward",
        )
    for key, color, label in (
        (MEAN_REWARD, "C1", "validation mean reward"),
        (GREEDY_SUCCESS, "C2", "validation greedy success"),
    ):
        scored = [(e["step"], e[key]) for e in validation if key in e]
        if scored:
            ax.plot(
                *zip(*scored), color=color, marker="o", markersize=3.5, linewidth=1.2, label=label
            )
    if chosen_step is not None:
        ax.axvline(
            chosen_step,
            color="k",
            linestyle="--",
            linewidth=0.9,
            label=f"final model: step {chosen_step}",
        )
    ax.set_title(VALIDATION_PANEL, fontsize=10)
    ax.legend(fontsize=7)


def validation_series(validation: Sequence[dict], prefix: str) -> dict[str, list]:
    """(step, value) points of every validation key that starts with `prefix`, by the rest of
    the key (pass_at_<k> -> k, success/<tag> -> tag), in the order of k or of the tag name.

    >>> validation_series([{"step": 0, "pass_at_1": 0.2, "pass_at_8": 0.6},
    ...                    {"step": 50, "pass_at_1": 0.4, "pass_at_8": 0.5}], "pass_at_")
    {'1': [(0, 0.2), (50, 0.4)], '8': [(0, 0.6), (50, 0.5)]}
    """
    names = {key[len(prefix) :] for e in validation for key in e if key.startswith(prefix)}
    order = sorted(
        names, key=lambda name: (not name.isdigit(), int(name) if name.isdigit() else 0, name)
    )
    return {
        name: [(e["step"], e[prefix + name]) for e in validation if prefix + name in e]
        for name in order
    }


def _validation_lines(
    ax, series: Mapping[str, list], label: str, title: str, chosen_step: int | None
) -> None:
    for i, (name, points) in enumerate(series.items()):
        ax.plot(
            *zip(*points),
            color=f"C{i % 10}",
            marker="o",
            markersize=3,
            linewidth=1.2,
            label=label.format(name),
        )
    if chosen_step is not None:
        ax.axvline(chosen_step, color="k", linestyle="--", linewidth=0.9)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)


def panel_layout(history: Sequence[dict]) -> list[tuple[str, list[str]]]:
    """(title, logged keys) of each panel plot_curves draws: those with data in `history`.

    >>> [name for name, _ in panel_layout([{"step": 1, "reward": 0.5, "kl": 0.1}])]
    ['Reward', 'KL to reference (k3)']
    >>> [name for name, _ in panel_layout([{"step": 1, "reward": 0.5, "kl": 4.0,
    ...     FIRST_BATCH_KL: 0.1, "dynamic_sampling/kept_share": 0.2}])]  # doctest: +NORMALIZE_WHITESPACE
    ['Reward', "KL to reference (k3), each step's first batch",
     "KL over the kept groups only (TRL's kl)", 'Dynamic sampling: kept share of generated groups']
    """
    layout = PANELS
    if any(FIRST_BATCH_KL in e for e in history):
        at = next(i for i, (_, keys) in enumerate(PANELS) if keys == [KL])
        layout = [*PANELS[:at], *SAMPLED_KL_PANELS, *PANELS[at + 1 :]]
    panels = [(name, [k for k in keys if any(k in e for e in history)]) for name, keys in layout]
    return [(name, keys) for name, keys in panels if keys]


def plot_curves(
    history: Sequence[dict],
    path: str | Path,
    title: str = "GRPO training",
    validation: Sequence[dict] = (),
    chosen_step: int | None = None,
) -> Path:
    """One figure, one panel per quantity; raw values faint, a moving average on top. With
    `validation` (scores per scored step), a first panel sets it against the training reward
    and marks `chosen_step`, the step models/final holds, and the next ones draw its pass@k and
    its success on each tag's rows, so the step where a kind of problem starts to die shows."""
    plt = pyplot()
    panels = panel_layout(history)
    extra = {
        VALIDATION_PASS_PANEL: validation_series(validation, PASS_AT_PREFIX),
        VALIDATION_TAGS_PANEL: validation_series(validation, TAG_SUCCESS_PREFIX),
    }
    if validation:
        panels[:0] = [(VALIDATION_PANEL, [])] + [
            (name, []) for name, series in extra.items() if series
        ]
    cols = 4
    rows = max(1, -(-len(panels) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    window = max(1, len(history) // 20)
    for ax, (name, keys) in zip(axes.flat, panels):
        if name in (VALIDATION_PANEL, *extra):
            if name == VALIDATION_PANEL:
                _validation_panel(ax, history, validation, chosen_step, window)
            else:
                _validation_lines(
                    ax,
                    extra[name],
                    "pass@{}" if name == VALIDATION_PASS_PANEL else "{}",
                    name,
                    chosen_step,
                )
            ax.set_xlabel("step", fontsize=8)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)
            continue
        for i, key in enumerate(keys):
            points = [(e["step"], float(e[key])) for e in history if key in e]
            steps, values = zip(*points)
            color = f"C{i}"
            ax.plot(steps, values, color=color, alpha=0.25, linewidth=0.8)
            ax.plot(
                steps,
                moving_average(values, window),
                color=color,
                linewidth=1.6,
                label=key.replace("rewards/", "")
                .replace("/mean", "")
                .replace("dynamic_sampling/", ""),
            )
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(title)
    return save_figure(fig, path)


def plot_per_prompt(per_prompt: Sequence[dict], path: str | Path) -> Path:
    """Step-0 vs final mean reward, one dot per prompt, train and held-out side by side."""
    plt = pyplot()
    splits = sorted({r["split"] for r in per_prompt}, reverse=True)
    fig, axes = plt.subplots(1, len(splits), figsize=(5 * len(splits), 4.4), squeeze=False)
    for ax, split in zip(axes.flat, splits):
        rows = [r for r in per_prompt if r["split"] == split]
        colors = ["C2" if r["delta"] > 0 else "C3" if r["delta"] < 0 else "C7" for r in rows]
        ax.scatter(
            [r["step0_reward"] for r in rows],
            [r["final_reward"] for r in rows],
            c=colors,
            s=22,
            alpha=0.75,
        )
        ax.plot([0, 1], [0, 1], color="k", linewidth=0.8, linestyle="--")
        ax.set_xlim(-0.05, 1.05)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("mean reward at step 0")
        ax.set_ylabel("mean reward, final")
        up = sum(r["delta"] > 0 for r in rows)
        down = sum(r["delta"] < 0 for r in rows)
        ax.set_title(f"{split}: {up} prompts up, {down} down (of {len(rows)})", fontsize=10)
        ax.grid(alpha=0.3)
    return save_figure(fig, path)


SPLIT_NAMES = {"heldout": "held-out (test)", "validation": "validation", "train": "train"}


def plot_pass_at_k(evaluation: Mapping, path: str | Path) -> Path:
    """pass@k against k (log2 axis), step 0 and final, one panel per split (held-out first):
    where the final curve drops below the step-0 one, the base model solves more prompts in k
    tries than the trained one."""
    plt = pyplot()
    splits = [s for s in ("heldout", "train") if s in evaluation]
    fig, axes = plt.subplots(1, len(splits), figsize=(5 * len(splits), 4.0), squeeze=False)
    for ax, split in zip(axes.flat, splits):
        curves = evaluation[split]["pass_at_k"]
        for policy, color, label in (("step0", "C7", "step 0 (base)"), ("final", "C0", "final")):
            ks = sorted(curves[policy], key=int)
            ax.plot(
                [int(k) for k in ks],
                [curves[policy][k] for k in ks],
                color=color,
                marker="o",
                markersize=4,
                linewidth=1.6,
                label=label,
            )
        ax.set_xscale("log", base=2)
        ks = [int(k) for k in curves["step0"]]
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("k (samples per prompt)")
        ax.set_ylabel("pass@k")
        n = evaluation[split]["samples_per_prompt"]
        ax.set_title(
            f"{SPLIT_NAMES.get(split, split)}: pass@k, {n} samples per prompt", fontsize=10
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    return save_figure(fig, path)


def plot_seeds(recipe: Mapping, path: str | Path) -> Path:
    """Each seed's held-out delta of mean reward with its interval over prompts, and the pooled
    interval over seeds and prompts as a band: where the seeds disagree, one run's verdict is
    one draw."""
    plt = pyplot()
    lines = recipe["seed_lines"]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.0 + 0.8 * len(lines)), 3.6))
    pooled = (recipe.get("pooled") or {}).get("delta_mean_reward")
    if pooled:
        ax.axhspan(
            pooled["ci_low"],
            pooled["ci_high"],
            color="C0",
            alpha=0.15,
            label=f"pooled over {len(lines)} seeds: {pooled['value']:+.3f} "
            f"[{pooled['ci_low']:+.3f}, {pooled['ci_high']:+.3f}]",
        )
        ax.axhline(pooled["value"], color="C0", linewidth=1.2)
    for x, line in enumerate(lines):
        d = line["delta_mean_reward"]
        ax.errorbar(
            [x],
            [d["value"]],
            yerr=[[d["value"] - d["ci_low"]], [d["ci_high"] - d["value"]]],
            fmt="o",
            color="C3" if line["seed"] == recipe.get("published_seed") else "k",
            capsize=4,
        )
    ax.axhline(0.0, color="C7", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(lines)), [f"seed {line['seed']}" for line in lines])
    ax.set_xlim(-0.6, len(lines) - 0.4)
    ax.set_ylabel("held-out delta of mean reward")
    ax.set_title(f"Recipe: {recipe['verdict']} (red: the published seed)", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    if pooled:
        ax.legend(fontsize=8, loc="best")
    return save_figure(fig, path)


def settings_figure(settings: Mapping[str, Sequence[tuple[Sequence[dict], Sequence[dict]]]]):
    """One line per setting, labelled by what it changes: the mean over its runs (seeds) with a
    band from their lowest to their highest, in four panels: training reward and KL to the
    reference (moving averages), and on the validation rows pass@1 and the success of the tag
    that fell most over all the runs (the kind of problem a mean hides). `settings` maps each
    label to its runs' (training history, validation entries); the legend sits below the panels,
    off the curves."""
    plt = pyplot()
    runs = [run for group in settings.values() for run in group]
    tag = most_fallen_tag([validation for _, validation in runs])
    panels = [
        ("Training reward (moving average)", "history", lambda e: e.get(REWARD)),
        ("KL to reference (moving average)", "history", drift_kl),
        ("Validation pass@1", "validation", lambda e: e.get(PASS_AT_PREFIX + "1")),
    ]
    if tag is not None:
        panels.append(
            (
                f"Validation success, tag {_plain(tag)} (fell most)",
                "validation",
                lambda e: e.get(TAG_SUCCESS_PREFIX + tag),
            )
        )
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for i, (label, group) in enumerate(settings.items()):
        for ax, (_, source, read) in zip(axes[0], panels):
            curves = []
            for history, validation in group:
                points = [
                    (e["step"], read(e))
                    for e in (history if source == "history" else validation)
                    if read(e) is not None
                ]
                if not points:
                    continue
                steps, values = zip(*points)
                if source == "history":  # per step: smooth; validation: a few scored steps
                    values = moving_average(values, max(1, len(values) // 20))
                curves.append(dict(zip(steps, values)))
            if not curves:
                continue
            steps = sorted(set().union(*curves))
            at = [[c[s] for c in curves if s in c] for s in steps]
            ax.plot(
                steps,
                [sum(v) / len(v) for v in at],
                color=f"C{i % 10}",
                linewidth=1.5,
                label=f"{_plain(label)} ({len(group)} run{'s' * (len(group) > 1)})",
            )
            if len(curves) > 1:
                ax.fill_between(
                    steps,
                    [min(v) for v in at],
                    [max(v) for v in at],
                    color=f"C{i % 10}",
                    alpha=0.15,
                    linewidth=0,
                )
    for ax, (title, _, _) in zip(axes[0], panels):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.06 + 0.045 * ((len(labels) + 2) // 3), 1, 1))
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncol=min(3, max(1, len(labels))),
        fontsize=8,
        frameon=False,
    )
    return fig


def plot_settings(
    settings: Mapping[str, Sequence[tuple[Sequence[dict], Sequence[dict]]]], path: str | Path
) -> Path:
    """settings_figure written to `path` (PNG)."""
    fig = settings_figure(settings)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    pyplot().close(fig)
    return path


def most_fallen_tag(validations: Sequence[Sequence[dict]]) -> str | None:
    """The tag whose validation success fell most, first scored step to last, averaged over the
    runs that scored it; None where no run scored a tag.

    >>> most_fallen_tag([[{"step": 0, "success/add": 0.2, "success/sub": 0.3},
    ...                   {"step": 50, "success/add": 0.5, "success/sub": 0.1}]])
    'sub'
    """
    changes: dict[str, list[float]] = {}
    for validation in validations:
        if len(validation) < 2:
            continue
        first, last = validation[0], validation[-1]
        for key in first:
            if key.startswith(TAG_SUCCESS_PREFIX) and key in last:
                changes.setdefault(key[len(TAG_SUCCESS_PREFIX) :], []).append(
                    last[key] - first[key]
                )
    if not changes:
        return None
    return min(changes, key=lambda tag: sum(changes[tag]) / len(changes[tag]))


def _plain(text: str) -> str:
    """Text from data or params as matplotlib draws it literally ('$' would start mathtext)."""
    return str(text).replace("$", r"\$")


def plot_answer(recipe: Mapping, path: str | Path, confidence: float) -> Path:
    """The answer box's chart: held-out mean reward, pass@1 and pass@n pooled over the seeds, at
    step 0, after GRPO and after the baseline (when it ran); each trained bar carries its gain's
    interval over seeds and prompts, drawn from step 0's level. Without pooled figures (too few
    seeds ran), the chart says so."""
    plt = pyplot()
    pooled = recipe.get("pooled")
    if not pooled:
        fig, ax = plt.subplots(figsize=(6.4, 1.2))
        ax.axis("off")
        ax.text(0.5, 0.5, "No pooled figures: too few seeds ran", ha="center", va="center")
        return save_figure(fig, path)
    n = pooled["samples_per_prompt"]
    figures = [("mean reward", "mean_reward"), ("pass@1", "pass@1"), (f"pass@{n}", f"pass@{n}")]
    comparison = (recipe.get("baseline") or {}).get("comparison")
    bars = [("step 0", "C7", pooled, None), ("GRPO", "C0", pooled, "final")]
    if comparison:
        bars.append((comparison["name"], "C1", comparison["pooled"], "final"))
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    width = 0.8 / len(bars)
    for b, (label, color, split, which) in enumerate(bars):
        xs = [i + (b - (len(bars) - 1) / 2) * width for i in range(len(figures))]
        levels = [split[which or "step0"][key] for _, key in figures]
        errors = None
        if which:
            base = [split["step0"][key] for _, key in figures]
            deltas = [split[f"delta_{key}"] for _, key in figures]
            errors = [
                [lv - (b0 + d["ci_low"]) for lv, b0, d in zip(levels, base, deltas)],
                [(b0 + d["ci_high"]) - lv for lv, b0, d in zip(levels, base, deltas)],
            ]
        ax.bar(xs, levels, width, color=color, label=label, yerr=errors, capsize=3)
    ax.set_xticks(range(len(figures)), [name for name, _ in figures])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("score (0 to 1)")
    ax.set_title(
        f"{pooled['rows']} held-out rows, {len(recipe['evaluated'])} seeds pooled "
        f"(bars: the gain's {confidence:.0%} interval)",
        fontsize=10,
    )
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=9, loc="upper left")
    return save_figure(fig, path)
