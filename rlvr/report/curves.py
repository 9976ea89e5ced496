"""The curves a GRPO user looks for, every seed overlaid: one small figure per quantity, with
labelled axes and units, and in words what a flat curve would hide (no truncation, a clip ratio
of 0, the gap between the training and the validation rows).

`seed_run` gathers what train wrote for one seed; `curve_facts` reads the figures the report
states; `plot_seed_curves` draws CURVES into a folder (matplotlib, Agg). The report stage calls
them; rlvr.report.retrospective renders the section.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlvr.core.metric_keys import (
    CLIP_RATIO,
    COMPLETION_LENGTH,
    MAX_LENGTH,
    MEAN_REWARD,
    MIN_LENGTH,
    NO_SPREAD_SHARE,
    REWARD,
    REWARD_STD,
    TRUNCATED_SHARE,
)
from rlvr.core.stats import drift_kl, moving_average


@dataclass(frozen=True)
class Curve:
    name: str  # the PNG's stem in the folder, and its image key (curve_<name>) in the report
    title: str
    ylabel: str


CURVES = (
    Curve("reward", "Training reward", "mean reward, 0 to 1"),
    Curve("kl", "KL to the reference", "KL per token, nats (k3)"),
    Curve(
        "validation", "Validation rows (dots) vs training reward (dashes)", "mean reward, 0 to 1"
    ),
    Curve("reward_std", "Reward spread within a group", "std of a group's rewards"),
    Curve("no_spread", "Groups with no reward spread (no gradient)", "share of groups, %"),
    Curve("length", "Completion length: mean, band min to max", "tokens"),
)
FIGURE_SIZE = (5.0, 3.3)  # inches at save_figure's 90 dpi: 450 px wide, two abreast on a desktop


def seed_run(history: Sequence[dict], summary: Mapping) -> dict:
    """What the curves read of one seed: its per-step history, its validation scores and the
    step its final weights are (train's summary.json `selection`)."""
    selection = summary.get("selection") or {}
    return {
        "history": list(history),
        "validation": list(selection.get("validation") or []),
        "chosen_step": selection.get("chosen_step"),
    }


def smoothing_window(runs: Mapping[int, Mapping]) -> int:
    """The moving average's width: a twentieth of the longest run, as the per-seed figure's.

    >>> smoothing_window({0: {"history": [{}] * 300}, 1: {"history": [{}] * 10}})
    15
    """
    return max(1, max((len(run["history"]) for run in runs.values()), default=0) // 20)


def _points(history: Sequence[dict], read) -> tuple[list[int], list[float]]:
    pairs = [(e["step"], read(e)) for e in history if "step" in e]
    pairs = [(step, float(value)) for step, value in pairs if value is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _key(key: str):
    return lambda entry: entry.get(key)


def _end_mean(values: Sequence[float], window: int) -> float | None:
    return moving_average(values, window)[-1] if values else None


def _peak(runs: Mapping[int, Mapping], key: str) -> dict | None:
    """The largest value of `key` over every seed and step: {value, seed, step}; None when no
    seed logged it."""
    best = None
    for seed, run in runs.items():
        for step, value in zip(*_points(run["history"], _key(key))):
            if best is None or value > best["value"]:
                best = {"value": value, "seed": seed, "step": step}
    return best


def curve_facts(runs: Mapping[int, Mapping], window: int) -> dict:
    """The figures the curves section states in words, read from every seed's run.

    - truncated / clip: the largest truncated share and PPO clip ratio over seeds and steps
      (None when not logged);
    - gaps: per seed, the training reward's moving average at the end against the validation
      mean reward at the chosen step (else the last scored one), and the share of groups with no
      reward spread at the end.

    >>> runs = {0: {"history": [{"step": s, "reward": 0.9, "frac_reward_zero_std": 0.5,
    ...                          "completions/clipped_ratio": 0.0} for s in (1, 2)],
    ...             "validation": [{"step": 0, "mean_reward": 0.3}, {"step": 2, "mean_reward": 0.4}],
    ...             "chosen_step": 2}}
    >>> facts = curve_facts(runs, 2)
    >>> facts["truncated"], facts["clip"]
    ({'value': 0.0, 'seed': 0, 'step': 1}, None)
    >>> facts["gaps"]
    [{'seed': 0, 'train_reward': 0.9, 'validation_step': 2, 'validation_reward': 0.4, 'gap': 0.5, 'no_spread_end': 0.5}]
    """
    gaps = []
    for seed, run in runs.items():
        _, rewards = _points(run["history"], _key(REWARD))
        _, no_spread = _points(run["history"], _key(NO_SPREAD_SHARE))
        scored = [v for v in run["validation"] if MEAN_REWARD in v]
        at = next((v for v in scored if v["step"] == run.get("chosen_step")), None)
        at = at or (scored[-1] if scored else None)
        train = _end_mean(rewards, window)
        gaps.append(
            {
                "seed": seed,
                "train_reward": train,
                "validation_step": at["step"] if at else None,
                "validation_reward": at[MEAN_REWARD] if at else None,
                "gap": round(train - at[MEAN_REWARD], 12) if at and train is not None else None,
                "no_spread_end": _end_mean(no_spread, window),
            }
        )
    return {
        "truncated": _peak(runs, TRUNCATED_SHARE),
        "clip": _peak(runs, CLIP_RATIO),
        "gaps": gaps,
    }


def _seed_label(seed: int, published: int | None) -> str:
    return f"seed {seed} (published)" if seed == published else f"seed {seed}"


def plot_seed_curves(
    runs: Mapping[int, Mapping],
    folder: str | Path,
    window: int,
    published: int | None = None,
    max_completion_length: int | None = None,
) -> dict[str, Path]:
    """Each of CURVES that some seed logged, as folder/<name>.png, one colour per seed (thin: per
    step, thick: the moving average over `window` steps): {name: path}, in CURVES' order."""
    from rlvr.report.plots import pyplot, save_figure  # matplotlib for the drawing alone

    plt = pyplot()
    folder = Path(folder)
    drawn: dict[str, Path] = {}
    seeds = sorted(runs)
    colour = {seed: f"C{i % 10}" for i, seed in enumerate(seeds)}
    readers = {
        "reward": _key(REWARD),
        "kl": drift_kl,
        "reward_std": _key(REWARD_STD),
        "no_spread": lambda e: None if e.get(NO_SPREAD_SHARE) is None else 100 * e[NO_SPREAD_SHARE],
        "length": _key(COMPLETION_LENGTH),
    }
    for curve in CURVES:
        fig, ax = plt.subplots(figsize=FIGURE_SIZE)
        anything = False
        for seed in seeds:
            run, c = runs[seed], colour[seed]
            label = _seed_label(seed, published)
            if curve.name == "validation":
                scored = [
                    (v["step"], v[MEAN_REWARD]) for v in run["validation"] if MEAN_REWARD in v
                ]
                if not scored:
                    continue
                anything = True
                ax.plot(
                    *zip(*scored), color=c, marker="o", markersize=4, linewidth=1.4, label=label
                )
                steps, values = _points(run["history"], _key(REWARD))
                if steps:
                    ax.plot(steps, moving_average(values, window), color=c, linestyle="--")
                chosen = [value for step, value in scored if step == run.get("chosen_step")]
                if chosen:
                    ax.plot([run["chosen_step"]], chosen, color=c, marker="*", markersize=12)
                continue
            steps, values = _points(run["history"], readers[curve.name])
            if not steps:
                continue
            anything = True
            ax.plot(steps, values, color=c, alpha=0.2, linewidth=0.7)
            ax.plot(steps, moving_average(values, window), color=c, linewidth=1.8, label=label)
            if curve.name == "length":
                low = _points(run["history"], _key(MIN_LENGTH))
                high = _points(run["history"], _key(MAX_LENGTH))
                if low[0] and low[0] == high[0]:
                    ax.fill_between(
                        low[0],
                        moving_average(low[1], window),
                        moving_average(high[1], window),
                        color=c,
                        alpha=0.12,
                        linewidth=0,
                    )
        if not anything:
            plt.close(fig)
            continue
        if curve.name == "length" and max_completion_length:
            ax.axhline(max_completion_length, color="k", linestyle=":", linewidth=1.0)
            ax.set_ylim(0, max_completion_length * 1.08)
            ax.annotate(
                f"max_completion_length {max_completion_length}",
                (0.02, max_completion_length),
                xycoords=("axes fraction", "data"),
                xytext=(0, -3),
                textcoords="offset points",
                va="top",
                fontsize=9,
            )
        ax.set_title(curve.title, fontsize=11)
        ax.set_xlabel("GRPO step", fontsize=10)
        ax.set_ylabel(curve.ylabel, fontsize=10)
        ax.tick_params(labelsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right" if curve.name == "length" else "best")
        drawn[curve.name] = save_figure(fig, folder / f"{curve.name}.png")
    return drawn
