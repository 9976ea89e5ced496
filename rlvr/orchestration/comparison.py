"""The comparison of DVC experiments (rlvr.orchestration.experiments queues and runs them): one table of every
run (params that differ, final reward, success, final KL, verdict), one row per setting
over its seeds (the goal figures and the per-tag success), and the curves of each setting, from
`dvc exp show --json` and each experiment's committed outputs. Every figure is on the validation
rows, where recipes are chosen; the test rows only with `split="heldout"` (docs/audit.md).
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.audit.recipe import SeedsDisagree, recipe_difference
from rlvr.audit.slices import audit_verdict
from rlvr.core.files import write_text_atomic
from rlvr.core.seeds import seed_paths
from rlvr.core.stats import above_zero
from rlvr.orchestration.runs import run_dvc
from rlvr.params.config import PathsParams, load_params
from rlvr.report.metrics import eval_metrics, train_metrics
from rlvr.report.plots import plot_settings
from rlvr.report.render import md_escape, md_image, md_table, to_html

# Where each run's results live (params.yaml `paths`; the defaults, unless compare is given others).
DEFAULT_PATHS = PathsParams()

# Which rows judge the runs (evaluate's split names): recipes are ranked and chosen on the
# validation rows; the test rows audit the chosen one once (docs/audit.md).
SPLIT_WORDS = {"validation": "validation", "heldout": "test"}
SPLIT_LINES = {
    "validation": "Every figure below is on the **validation rows** (`data.val_path`): recipes "
    "are ranked and chosen on them. The test rows (`data.eval_path`) audit the chosen recipe "
    "once (docs/audit.md); `--test` shows them here instead.",
    "heldout": "Every figure below is on the **test rows** (`data.eval_path`), shown with "
    "`--test`: choosing a recipe on them biases them, and the audit of the chosen one is then no "
    "longer unbiased. Rank and choose on the validation rows (the default).",
}


def rows_name(experiments: Sequence[Experiment]) -> str:
    """What the experiments are judged on, in words: 'validation' or 'test'."""
    return SPLIT_WORDS[experiments[0].split if experiments else "validation"]


BASELINE = "baseline ("  # how parse_exp_show names the commit's own run: "baseline (abc1234)"

# Params that steer the flows (grids, ablations), not a run: a grid grown between two commits
# must not make their runs look like different settings.
NOT_RUN_PARAMS = "orchestration."


@dataclass
class Experiment:
    name: str
    rev: str
    params: dict[str, Any]
    train: dict = field(default_factory=dict)
    evaluation: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    eval_summary: dict = field(default_factory=dict)  # the evaluate stage's detail
    train_summary: dict = field(default_factory=dict)  # the train stage's (selection included)
    recipe: dict = field(default_factory=dict)  # metrics/recipe.json: the verdict over its seeds
    stage_seconds: dict[str, float] = field(default_factory=dict)  # stages it ran (queue log)
    # each RL seed's per-prompt records of `split` ("<name> seed <n>" -> records): the recipe's
    # evidence, which recipe_rows compares setting against default
    records: dict[str, list[dict]] = field(default_factory=dict)
    commit: str = ""  # the baseline commit it was queued on (parse_exp_show)
    split: str = "validation"  # the rows it is judged on (compare's `split`)

    @property
    def is_baseline(self) -> bool:
        """The commit's own run, not one of its DVC experiments (see parse_exp_show)."""
        return self.name.startswith(BASELINE)

    @property
    def delta(self) -> float | None:
        """The paired delta of mean reward on its split, step 0 -> final: the evaluate stage's
        summary keeps it (metrics/eval.json only its CI, and reward0 and reward)."""
        summary = self.eval_summary.get(self.split, {}).get("delta_mean_reward", {})
        if "value" in summary:
            return summary["value"]
        reward0, reward = self.evaluation.get("reward0"), self.evaluation.get("reward")
        return None if reward0 is None or reward is None else reward - reward0


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else key))
        return out
    return {prefix: tree}


def _entry(name: str, data: dict, paths: PathsParams, commit: str) -> Experiment:
    params = data.get("params", {}).get("params.yaml", {}).get("data", {})
    metrics = data.get("metrics", {})
    return Experiment(
        name=name,
        rev=data["rev"],
        commit=commit,
        params={k: v for k, v in _flatten(params).items() if not k.startswith(NOT_RUN_PARAMS)},
        recipe=metrics.get(paths.recipe_metrics, {}).get("data", {}),
    )


def parse_exp_show(rows: Sequence[dict], paths: PathsParams = DEFAULT_PATHS) -> list[Experiment]:
    """The baseline commits and their experiments from `dvc exp show --json`, the params that
    steer a run only (the workspace is skipped: it is not a recorded run; so is a failed
    experiment, whose files are its baseline's: failed_experiments names those)."""
    found = []
    for row in rows:
        if row.get("rev") == "workspace" or not row.get("data"):
            continue
        commit = row["rev"][:7]
        found.append(_entry(f"{BASELINE}{commit})", row["data"], paths, commit))
        for experiment in row.get("experiments") or []:
            for rev in experiment.get("revs", []):
                if rev.get("data") and not rev.get("error"):
                    found.append(
                        _entry(rev.get("name") or rev["rev"][:7], rev["data"], paths, commit)
                    )
    return found


def failed_experiments(rows: Sequence[dict]) -> list[str]:
    """The names of the experiments `dvc exp show --json` marks as failed."""
    return [
        rev.get("name") or rev.get("rev", "?")[:7]
        for row in rows
        for experiment in row.get("experiments") or []
        for rev in experiment.get("revs", [])
        if rev.get("error")
    ]


def exp_show(cwd: str | Path = ".", revs: Sequence[str] = ()) -> list[dict]:
    """`dvc exp show --json`: the experiments of HEAD, or of each commit of `revs`."""
    rows = []
    for rev in revs or [None]:
        run = run_dvc(cwd, "exp", "show", "--json", *(["--rev", rev] if rev else []))
        if run.returncode != 0:
            raise RuntimeError(f"dvc exp show failed: {run.stderr[-2000:]}")
        rows += json.loads(run.stdout)
    return rows


def _committed(rev: str, cwd: str | Path, path: str) -> str | None:
    run = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=cwd, capture_output=True, text=True)
    return run.stdout if run.returncode == 0 else None


def read_history(rev: str, cwd: str | Path, history: str) -> list[dict]:
    """The training history committed in an experiment's (or the baseline's) git revision."""
    text = _committed(rev, cwd, history)
    return [json.loads(line) for line in (text or "").splitlines() if line]


def read_json(rev: str, cwd: str | Path, path: str) -> dict:
    """A JSON output committed in an experiment's git revision ({} if it has none)."""
    text = _committed(rev, cwd, path)
    return json.loads(text) if text else {}


# The line every stage ends with (rlvr.pipeline.stage), in the log `dvc queue logs` keeps of a queued run.
_STAGE_DONE = re.compile(r"^(\w+)(?:@\S+)?: done in ([0-9.]+) s$", re.MULTILINE)


def read_records(
    e: Experiment, cwd: str | Path, paths: PathsParams, recipe: dict
) -> dict[str, list[dict]]:
    """Each seed's per-prompt records of the run's split committed in its revision, for the
    seeds its recipe pooled ({} for a run without a recipe, or from before evaluate scored the
    validation rows)."""
    split = e.split
    out = {}
    for seed in recipe.get("evaluated") or []:
        text = _committed(e.rev, cwd, seed_paths(paths, seed).eval_per_prompt) or ""
        records = [
            r for r in map(json.loads, filter(None, text.splitlines())) if r.get("split") == split
        ]
        if records:
            out[f"{e.name} seed {seed}"] = records
    return out


def stage_seconds(log: str) -> dict[str, float]:
    """Wall time of each stage a run ran, from its `NAME: done in S s` lines (a stage DVC skipped
    or restored from its run cache has none); a stage's seeds (`train@0`, `train@1`) add up.

    >>> stage_seconds("Stage 'smoke' didn't change, skipping\\ntrain@0: done in 59.2 s\\n"
    ...               "train@1: done in 60.8 s\\n")
    {'train': 120.0}
    """
    seconds: dict[str, float] = {}
    for name, spent in _STAGE_DONE.findall(log):
        seconds[name] = round(seconds.get(name, 0.0) + float(spent), 1)
    return seconds


def queue_log(name: str, cwd: str | Path = ".") -> str:
    """What a queued experiment printed (`dvc queue logs`; empty once the queue forgot it)."""
    run = run_dvc(cwd, "queue", "logs", name)
    return run.stdout if run.returncode == 0 else ""


def differing_params(experiments: Sequence[Experiment]) -> list[str]:
    keys = sorted({k for e in experiments for k in e.params})
    return [k for k in keys if len({json.dumps(e.params.get(k)) for e in experiments}) > 1]


def comparison_rows(experiments: Sequence[Experiment]) -> tuple[list[str], list[list[Any]]]:
    params = differing_params(experiments)
    header = [
        "experiment",
        *params,
        "final reward (last 10 steps)",
        f"{rows_name(experiments)} greedy success",
        f"{rows_name(experiments)} mean reward",
        f"KL final vs step 0 ({rows_name(experiments)} samples)",
        "training KL (last 10 steps)",
        f"verdict on the {rows_name(experiments)} rows (the recipe's, over its seeds)",
    ]
    rows = []
    for e in experiments:
        rows.append(
            [
                e.name,
                *[e.params.get(p) for p in params],
                e.train.get("reward"),
                e.evaluation.get("greedy"),
                e.evaluation.get("reward"),
                e.eval_summary.get(e.split, {}).get("kl_final_vs_step0"),
                e.train.get("kl"),
                _recipe_verdict(e) or e.evaluation.get("verdict"),
            ]
        )
    return header, rows


def _recipe_verdict(e: Experiment) -> str | None:
    """The recipe's verdict over its seeds on the run's split (metrics/recipe.json: the test
    rows' at its top, the validation rows' in its `validation` block)."""
    return (
        e.recipe.get("verdict")
        if e.split == "heldout"
        else (e.recipe.get("validation") or {}).get("verdict")
    )


def settings(experiments: Sequence[Experiment], over: str = "seed") -> dict[str, list[Experiment]]:
    """The runs (not the baseline commits' own) grouped by their params other than `over`, each
    group labelled by what it changes from its baseline commit's params (of the first baseline
    if its own is not listed; "default": nothing; with no baseline, the params the runs differ
    in), its runs in `over` order: runs queued on several commits of the same defaults group
    together.

    >>> base = Experiment("baseline (abc)", "abc", {"seed": 0, "train.unlikeliness": 0.0})
    >>> runs = [Experiment(n, n, {"seed": seed, "train.unlikeliness": u})
    ...         for n, seed, u in (("a", 1, 0.0), ("b", 0, 0.0), ("c", 0, 0.25))]
    >>> {label: [e.name for e in group] for label, group in settings([base, *runs]).items()}
    {'default': ['b', 'a'], 'train.unlikeliness=0.25': ['c']}
    """
    runs = [e for e in experiments if not e.is_baseline]
    bases = {e.commit: e.params for e in experiments if e.is_baseline}
    first = next(iter(bases.values()), None)
    keys = (
        sorted({k for e in experiments for k in e.params})
        if first is not None
        else differing_params(runs)
    )
    groups: dict[str, list[Experiment]] = {}
    for e in runs:
        base = bases.get(e.commit, first)
        changed = [
            f"{k}={_spelled(e.params.get(k))}"
            for k in keys
            if k != over
            and (base is None or json.dumps(e.params.get(k)) != json.dumps(base.get(k)))
            and not _same_number(e.params.get(k), (base or {}).get(k))
        ]
        groups.setdefault(", ".join(changed) or "default", []).append(e)
    for group in groups.values():
        group.sort(key=lambda e: json.dumps(e.params.get(over)))
    return groups


def _same_number(a: Any, b: Any) -> bool:
    """0 and 0.0 (a `-S` override may spell a float as an int) are one value; True is not 1."""
    return (
        isinstance(a, (int, float))
        and isinstance(b, (int, float))
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )


def _spelled(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _mean(values: Sequence[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def _pair(group: Sequence[Experiment], before: str, after: str) -> str | None:
    """'0.220 → 0.429': the mean over the runs of metrics/eval.json's `before` and `after`."""
    a, b = (_mean([e.evaluation.get(k) for e in group]) for k in (before, after))
    return None if a is None or b is None else f"{a:.3f} → {b:.3f}"


def _slices(e: Experiment) -> list[dict]:
    """The per-tag slices of a run's evaluation on its split (Step 9's audit)."""
    return e.eval_summary.get(e.split, {}).get("slices", [])


def setting_rows(
    experiments: Sequence[Experiment], over: str = "seed", timed: str = "train"
) -> tuple[list[str], list[list[Any]]]:
    """One row per setting with more than one run (settings): the mean over its runs of the
    mean-reward delta on the runs' split, each run's CI low and how many are above 0 (beyond
    float noise: core.stats.above_zero), the tags
    that regressed (the verdict's rule) and in how many runs, pass@1 and pass@n step 0
    -> final, and the mean wall time of stage `timed` over the runs that ran it (not those DVC
    restored from its cache)."""
    header = [
        "setting",
        f"runs ({over})",
        f"{rows_name(experiments)} delta mean reward (mean)",
        "CI low of each run",
        "runs with CI above 0",
        "tags regressed (runs)",
        "pass@1 step 0 → final",
        "pass@n step 0 → final",
        f"{timed} stage, s (mean)",
    ]
    rows = []
    for label, group in settings(experiments, over).items():
        if len(group) < 2:
            continue
        lows = [e.evaluation.get("ci_low") for e in group]
        regressed: dict[str, int] = {}
        for e in group:
            for tag in sorted({s["tag"] for s in _slices(e) if s.get("regressed")}):
                regressed[tag] = regressed.get(tag, 0) + 1
        rows.append(
            [
                label,
                ", ".join(str(e.params.get(over)) for e in group),
                _mean([e.delta for e in group]),
                ", ".join("?" if low is None else f"{low:+.3f}" for low in lows),
                f"{sum(low is not None and above_zero({'ci_low': low}) for low in lows)}/{len(group)}",
                ", ".join(f"{tag} {n}/{len(group)}" for tag, n in regressed.items()) or "none",
                _pair(group, "pass1_0", "pass1"),
                _pair(group, "passn_0", "passn"),
                _mean([e.stage_seconds.get(timed) for e in group]),
            ]
        )
    return header, rows


def tag_rows(
    experiments: Sequence[Experiment], over: str = "seed"
) -> tuple[list[str], list[list[Any]]]:
    """Per setting with more than one run: each tag's sampled success (pass@1) at step 0
    -> final, the mean over the runs; the tags in the order the evaluation lists them."""
    grouped = {
        label: group for label, group in settings(experiments, over).items() if len(group) > 1
    }
    tags: dict[str, int] = {}
    for group in grouped.values():
        for e in group:
            for s in _slices(e):
                tags.setdefault(s["tag"], s.get("rows", 0))
    header = ["setting", *[f"{tag} ({rows} rows)" for tag, rows in tags.items()]]
    rows = []
    for label, group in grouped.items():
        row = [label]
        for tag in tags:
            found = [s for e in group for s in _slices(e) if s["tag"] == tag]
            a = _mean([s.get("step0", {}).get("pass@1") for s in found])
            b = _mean([s.get("final", {}).get("pass@1") for s in found])
            row.append(None if a is None or b is None else f"{a:.3f} → {b:.3f}")
        rows.append(row)
    return header, rows


def recipe_rows(
    experiments: Sequence[Experiment], over: str = "seed"
) -> tuple[list[str], list[list[Any]]]:
    """Each setting's recipe against the default's, over every seed of their runs (rlvr.audit.recipe.
    recipe_difference): the difference of their mean-reward deltas (the runs' split) with a 95% interval
    over both recipes' seeds and the prompts, rliable's probability of improvement, and the call:
    better or worse only when the interval excludes 0, else a tie. The default is the setting
    that changes nothing (else the baseline commits' own runs); settings scored on other
    rows are said so, not compared."""
    groups = settings(experiments, over)
    reference = groups.get("default") or [e for e in experiments if e.is_baseline]
    pooled = {
        label: {seed: records for e in group for seed, records in e.records.items()}
        for label, group in groups.items()
    }
    default = {seed: records for e in reference for seed, records in e.records.items()}
    header = [
        "setting",
        "seeds",
        "seeds of the default",
        f"{rows_name(experiments)} delta minus the default's [95% interval, seeds and prompts]",
        "P(setting > default)",
        "call",
    ]
    rows = []
    for label, runs in pooled.items():
        if label == "default" or not runs or not default:
            continue
        try:
            d = recipe_difference(runs, default)
        except SeedsDisagree:
            rows.append(
                [
                    label,
                    len(runs),
                    len(default),
                    "scored on other rows",
                    None,
                    "not compared",
                ]
            )
            continue
        rows.append(
            [
                label,
                len(runs),
                len(default),
                f"{d['value']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]",
                round(d["probability_of_improvement"], 3),
                d["verdict"],
            ]
        )
    return header, rows


def _section(title: str, text: str, header: list[str], rows: list[list[Any]]) -> list[str]:
    return ["", f"## {title}", "", text, "", *md_table(header, rows)]


def comparison_markdown(
    experiments: Sequence[Experiment],
    image: str,
    failed: Sequence[str] = (),
    split: str = "validation",
) -> str:
    header, rows = comparison_rows(experiments)
    lines = [
        "# Experiments",
        "",
        SPLIT_LINES[split],
        "",
        f"{len(experiments)} runs: the baseline commit(s) and their DVC experiments "
        "(`dvc exp show`). Columns between the name and the results are the params that "
        "differ.",
        "",
    ]
    if failed:
        lines += [
            f"Failed, so left out (`dvc queue logs NAME` says why): "
            f"{md_escape(', '.join(failed))}.",
            "",
        ]
    lines += md_table(header, rows)
    header, rows = setting_rows(experiments)
    if rows:
        lines += _section(
            "Settings over seeds",
            "Runs that differ only by seed, one row per setting, named by what it changes from "
            f"its baseline commit: the {rows_name(experiments)} rows' mean-reward delta step 0 -> "
            "final, the 95% bootstrap CI low of each run, the tags that regressed (the verdict's "
            "rule), pass@1 and pass@n, and the train stage's wall time (`dvc queue logs`; runs "
            "whose training DVC restored from its cache are left out of that mean).",
            header,
            rows,
        )
        header, rows = tag_rows(experiments)
        lines += [
            "",
            f"Success (pass@1) per tag on the {rows_name(experiments)} rows, step 0 -> final, "
            "mean over the runs:",
            "",
        ]
        lines += md_table(header, rows)
    header, rows = recipe_rows(experiments)
    if rows:
        lines += _section(
            "Recipe against recipe",
            "Each setting against the default, every RL seed of their runs pooled: the difference "
            f"of their {rows_name(experiments)} mean-reward deltas, with a 95% bootstrap interval that draws both "
            "recipes' seeds and the prompts (paired: the same rows), and the probability that a "
            "seed of the setting beats a seed of the default on a prompt (rliable's probability "
            "of improvement). A setting is better or worse only when the interval excludes 0; "
            "otherwise it is a tie.",
            header,
            rows,
        )
    lines += [
        "",
        md_image("each setting's curves: mean over its runs, band from lowest to highest", image),
        "",
    ]
    return "\n".join(lines)


def setting_curves(experiments: Sequence[Experiment]) -> dict[str, list[tuple[list, list]]]:
    """What plot_settings draws: each setting's runs' (training history, validation entries);
    the baseline commit's run too, unless a setting is the default (the same params)."""
    groups = settings(experiments)
    curves = {
        label: [(e.history, _validation(e)) for e in group] for label, group in groups.items()
    }
    for e in experiments:
        if e.is_baseline and "default" not in groups:
            curves = {e.name: [(e.history, _validation(e))], **curves}
    return curves


def _validation(e: Experiment) -> list[dict]:
    return e.train_summary.get("selection", {}).get("validation", [])


def compare(
    cwd: str | Path = ".",
    out_dir: str | Path = "reports",
    revs: Sequence[str] = (),
    split: str = "validation",
) -> list[Experiment]:
    """Write reports/experiments.md, .html and the settings' curves of the experiments of HEAD
    (or of the commits `revs`, e.g. a grid run over several commits), judged on `split`: the
    validation rows, or "heldout", the test rows (a recipe chosen on them biases them); return
    the experiments."""
    paths = load_params(Path(cwd) / "params.yaml").paths
    shown = exp_show(cwd, revs)
    experiments = parse_exp_show(shown, paths)
    for e in experiments:
        # the run's figures are its published seed's (the recipe's verdict is in e.recipe)
        recipe = read_json(e.rev, cwd, paths.recipe_summary)
        seed = recipe.get("published_seed", 0)
        e.split = split
        e.records = read_records(e, cwd, paths, recipe)
        run = seed_paths(paths, seed)
        e.history = read_history(e.rev, cwd, run.train_history)
        e.eval_summary = read_json(e.rev, cwd, run.eval_summary)
        e.train_summary = read_json(e.rev, cwd, run.train_summary)
        e.evaluation = eval_metrics(e.eval_summary, split) if split in e.eval_summary else {}
        if e.evaluation and split != e.eval_summary.get("verdict_split"):
            e.evaluation["verdict"] = audit_verdict(e.eval_summary[split])  # the same rules
        e.train = train_metrics(e.train_summary) if e.train_summary else {}
        if not e.is_baseline:
            e.stage_seconds = stage_seconds(queue_log(e.name, cwd))
    out = Path(cwd) / out_dir
    plot_settings(setting_curves(experiments), out / "figures" / "experiments.png")
    figure = "figures/experiments.png"
    markdown = comparison_markdown(experiments, figure, failed_experiments(shown), split)
    write_text_atomic(out / "experiments.md", markdown)
    write_text_atomic(
        out / "experiments.html", to_html(markdown, out, images=[figure], title="Experiments")
    )
    return experiments
