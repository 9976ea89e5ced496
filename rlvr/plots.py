"""PNG curves from a training log history (matplotlib, no network: the report embeds them)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

PANELS = [
    ("Reward", ["reward", "rewards/correctness/mean", "rewards/format/mean",
                "rewards/length/mean"]),
    ("KL to reference (k3)", ["kl"]),
    ("Loss", ["loss"]),
    ("Beta in force", ["beta"]),
    ("Completion length (tokens)", ["completions/mean_length"]),
    ("Grad norm", ["grad_norm"]),
    ("Entropy", ["entropy"]),
    ("Groups with no reward spread", ["frac_reward_zero_std"]),
]


def _smooth(values: Sequence[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_curves(history: Sequence[dict], path: str | Path, title: str = "GRPO training") -> Path:
    """One figure, one panel per quantity; raw values faint, a moving average on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(name, [k for k in keys if any(k in e for e in history)]) for name, keys in PANELS]
    panels = [(name, keys) for name, keys in panels if keys]
    cols = 4
    rows = max(1, -(-len(panels) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    window = max(1, len(history) // 20)
    for ax, (name, keys) in zip(axes.flat, panels):
        for i, key in enumerate(keys):
            points = [(e["step"], float(e[key])) for e in history if key in e]
            steps, values = zip(*points)
            color = f"C{i}"
            ax.plot(steps, values, color=color, alpha=0.25, linewidth=0.8)
            ax.plot(steps, _smooth(values, window), color=color, linewidth=1.6,
                    label=key.replace("rewards/", "").replace("/mean", ""))
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
