"""The report's curves (rlvr/report/curves.py): every seed overlaid in small labelled figures, and
what a flat curve would hide said in words (truncation, PPO's clip, the train vs validation gap)."""

import dataclasses
import re

from PIL import Image

from rlvr.core.metric_keys import CLIP_RATIO, FIRST_BATCH_KL, TRUNCATED_SHARE
from rlvr.params.config import load_params
from rlvr.report.curves import CURVES, curve_facts, plot_seed_curves, seed_run, smoothing_window
from rlvr.report.render import to_html
from rlvr.report.retrospective import curves_section
from tests.test_report import ROOT


def _history(seed: int, steps: int = 40, truncated: float = 0.0, clip: float = 0.0) -> list[dict]:
    return [
        {
            "step": s,
            "reward": 0.4 + 0.5 * s / steps + 0.01 * seed,
            "kl": 2.0,  # TRL's, over the kept groups: the curve reads the first batch's
            FIRST_BATCH_KL: 0.01 * s,
            "reward_std": 0.4 - 0.005 * s,
            "frac_reward_zero_std": s / steps,
            "completions/mean_length": 5.0,
            "completions/min_length": 4.0,
            "completions/max_length": 6.0,
            TRUNCATED_SHARE: truncated if s == 7 else 0.0,
            CLIP_RATIO: clip if s == 9 else 0.0,
        }
        for s in range(1, steps + 1)
    ]


def _runs(**kwargs) -> dict:
    validation = [{"step": 0, "mean_reward": 0.3}, {"step": 20, "mean_reward": 0.5}]
    summary = {"selection": {"validation": validation, "chosen_step": 20}}
    return {seed: seed_run(_history(seed, **kwargs), summary) for seed in (0, 1, 2)}


def _section(runs, images, num_iterations=1) -> list[str]:
    params = dataclasses.asdict(load_params(ROOT / "params.yaml"))
    params["train"]["grpo"]["num_iterations"] = num_iterations
    inputs = type(
        "Inputs",
        (),
        dict(
            recipe={"published_seed": 1},
            params=params,
            seed_runs=runs,
            history=runs[1]["history"],
            selection=None,
            images=images,
            samples=(),
        ),
    )
    return curves_section(inputs)


def test_each_curve_is_a_small_labelled_figure_with_every_seed(tmp_path):
    runs = _runs()
    drawn = plot_seed_curves(
        runs, tmp_path, smoothing_window(runs), published=1, max_completion_length=8
    )
    assert list(drawn) == [c.name for c in CURVES]
    for path in drawn.values():
        assert Image.open(path).size[0] <= 460  # two abreast on a desktop, whole on a phone
    # a quantity no seed logged gets no figure
    for run in runs.values():
        for entry in run["history"]:
            del entry["reward_std"]
    assert "reward_std" not in plot_seed_curves(runs, tmp_path / "b", 2)


def test_the_figures_read_the_drift_kl_and_the_seeds_are_told_apart(tmp_path, monkeypatch):
    from rlvr.report import plots

    axes = []
    real = plots.save_figure

    def keep(fig, path):
        axes.append((path.stem, fig.axes[0]))
        return real(fig, path)

    monkeypatch.setattr(plots, "save_figure", keep)
    plot_seed_curves(_runs(), tmp_path, 5, published=1)
    by_name = dict(axes)
    kl = by_name["kl"]
    assert max(line.get_ydata().max() for line in kl.get_lines()) < 0.5  # not TRL's 2.0
    assert [t.get_text() for t in kl.get_legend().get_texts()] == [
        "seed 0",
        "seed 1 (published)",
        "seed 2",
    ]
    for name, ax in axes:
        assert ax.get_xlabel() == "GRPO step" and ax.get_ylabel(), name
    assert by_name["no_spread"].get_ylabel() == "share of groups, %"


def test_the_facts_a_flat_curve_hides_are_said_in_words():
    lines = [line for line in _section(_runs(), {"curves": "c.png"}) if line]
    text = "\n".join(lines)
    assert lines[1] == (
        "40 GRPO steps for seeds 0, 1 and 2 (seed 1 published): one colour per seed; thin lines "
        "per step, thick lines a moving average over 2 steps."
    )
    assert (
        "no completion reached `max_completion_length` (8 tokens) at any step of any seed" in text
    )
    assert "**Clip ratio**: 0 at every step of every seed: with `num_iterations` 1" in text
    # the gap: the training reward's end against the validation rows at the chosen step
    row = next(line for line in lines if line.startswith("| 1 |"))
    assert row == "| 1 | 0.904 | 0.500 (step 20) | +0.404 | 99% |"  # (0.8975 + 0.91) / 2

    facts = curve_facts(_runs(truncated=0.25, clip=0.125), 2)
    assert facts["truncated"] == {"value": 0.25, "seed": 0, "step": 7}
    text = "\n".join(_section(_runs(truncated=0.25, clip=0.125), {"curves": "c.png"}, 2))
    assert "at most 25.0% of a step's completions were cut at `max_completion_length`" in text
    assert "at most 12.5% of a step's tokens were clipped (seed 0, step 9)" in text
    assert "num_iterations" not in text


def test_the_figures_sit_two_abreast_and_the_seeds_every_curve_folds(tmp_path):
    images = {"curves": "all.png", **{f"curve_{c.name}": f"{c.name}.png" for c in CURVES}}
    for path in images.values():
        Image.new("RGB", (4, 4), "red").save(tmp_path / path)
    page = to_html("\n".join(_section(_runs(), images)), tmp_path, images=images)
    figures = re.search(r'<div class="figs">\s*<p>(.*?)</p>\s*</div>', page, flags=re.S)
    assert figures and figures.group(1).count("<img") == len(CURVES)  # one paragraph: inline
    folded = re.search(r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", page, flags=re.S)
    assert folded.group(1) == "Every curve seed 1 logged"
    assert 'alt="every curve of seed 1" src="data:image/png;base64,' in folded.group(2)


def test_the_readme_picture_is_drawn_from_the_reports_top_and_first_two_curves(tmp_path):
    from rlvr.report.picture import compose, report_top

    for name, size in (("reward", (450, 297)), ("kl", (450, 297)), ("all", (900, 600))):
        Image.new("RGB", size, "white").save(tmp_path / f"{name}.png")
    markdown = "\n".join(
        [
            "# GRPO run: retrospective",
            "",
            "**The recipe over 3 of 3 seeds: Mixed**: pass@32 0.86 -&gt; 0.51",
            "",
            "| held-out, pooled | step 0 | final |",
            "|---|---|---|",
            "| mean reward | 0.364 | 0.396 |",
            "",
            "## 2. Curves",
            "",
            "![Training reward](reward.png)",
            "![KL to the reference](kl.png)",
            "![every curve](all.png)",
        ]
    )
    (tmp_path / "report.md").write_text(markdown)
    title, verdict, table, curves = report_top(markdown)
    assert verdict == "The recipe over 3 of 3 seeds: Mixed: pass@32 0.86 -> 0.51"
    assert table == [["held-out, pooled", "step 0", "final"], ["mean reward", "0.364", "0.396"]]
    assert curves == ["reward.png", "kl.png"]
    out = compose(tmp_path / "report.md", tmp_path / "docs" / "report.png")
    width, height = Image.open(out).size
    assert width == 1100 and height > 297 * 1100 / 900  # the two curves side by side, text above
