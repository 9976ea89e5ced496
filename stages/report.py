"""Stage report: the retrospective, as markdown and as a self-contained HTML page.

    dvc repro report                (or: python -m stages.report)

Reads what the other stages wrote (the recipe over the seeds, the published seed's evaluation and
curves, smoke checks, validation, gate, dvc.lock) and writes reports/retrospective.md and
reports/retrospective.html (plots embedded, opens with no network): the recipe's verdict over
the seeds, each seed's line and per-tag agreement; then the published seed's run: verdict (what
was gained and what was lost: pass@k, kinds of problem, solutions, diversity), the curves (every
seed's overlaid, drawn into paths.curves_figures), KL/beta diagnosis and alarms,
hyperparameters with their rationale, smoke and data checks, per-prompt audit, GRPO vs PPO
cost, provenance. Every path comes from params.yaml `paths`.
"""

import dataclasses
import json
import os
from pathlib import Path

from rlvr.audit.alarms import AlarmThresholds, check_alarms
from rlvr.audit.diagnosis import KLThresholds, count_parameters, diagnose_kl, ppo_cost
from rlvr.core.errors import PipelineError
from rlvr.core.files import write_text_atomic
from rlvr.core.seeds import seed_paths
from rlvr.params.config import PARAMS_FILE, data_files, test_file_reader
from rlvr.pipeline.stage import ParamsView, run_stage
from rlvr.policy.models import policy_path
from rlvr.report.curves import plot_seed_curves, seed_run, smoothing_window
from rlvr.report.knobs import hyperparameter_table
from rlvr.report.picture import compose
from rlvr.report.plots import plot_answer, plot_pass_at_k, plot_per_prompt
from rlvr.report.provenance import provenance
from rlvr.report.render import to_html
from rlvr.report.retrospective import build_report


def _json(path: str):
    return json.loads(Path(path).read_text())


def _jsonl(path: str) -> list:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]


def main(params: ParamsView) -> int:
    paths = params.paths
    recipe = _json(paths.recipe_summary)
    if "published_seed" not in recipe:
        raise PipelineError(
            f"{paths.recipe_summary} names no seed with results: {recipe['verdict_line']}"
        )
    run = seed_paths(paths, recipe["published_seed"])  # the rest of the page: that one run
    per_prompt = _jsonl(run.eval_per_prompt)
    history = _jsonl(run.train_history)
    evaluation = _json(run.eval_summary)
    seed_runs = {}
    for seed in recipe["evaluated"]:  # every seed with results, overlaid on the curves
        each = seed_paths(paths, seed)
        seed_runs[seed] = seed_run(_jsonl(each.train_history), _json(each.train_summary))
    curves = plot_seed_curves(
        seed_runs,
        paths.curves_figures,
        smoothing_window(seed_runs),
        recipe["published_seed"],
        params.train.grpo.max_completion_length,
    )
    plot_per_prompt(per_prompt, paths.per_prompt_figure)
    plot_pass_at_k(evaluation, paths.pass_at_k_figure)
    plot_answer(recipe, paths.answer_figure, params.evaluate.confidence)
    base = Path(policy_path(paths.base_model))
    config = json.loads((base / "config.json").read_text()) if base.is_dir() else {}
    cost = ppo_cost(
        count_parameters(base) or 0, config.get("hidden_size", 0), params.train.grpo.num_generations
    )
    train_summary = _json(run.train_summary)
    selection = train_summary.get("selection") or {}
    report = params.report
    kl_thresholds = {f.name: getattr(report, f.name) for f in dataclasses.fields(KLThresholds)}
    report_dir = Path(paths.retrospective_md).parent
    images = {
        name: os.path.relpath(path, report_dir)
        for name, path in (
            ("answer", paths.answer_figure),
            ("curves", run.train_curves),
            ("per_prompt", paths.per_prompt_figure),
            ("seeds", paths.seeds_figure),
            ("pass_at_k", paths.pass_at_k_figure),
            *((f"curve_{name}", path) for name, path in curves.items()),
        )
    }
    prov = provenance(
        data_files(params),
        # the shown seed's models: the base, GRPO's and the baseline's (RFT's, when it ran)
        [paths.base_model, run.trained_model]
        + ([run.rft_model] if params.audit.baseline == "rft" else []),
        current_stage="report",
        read_by=test_file_reader(params),
        numerics=train_summary.get("numerics"),
    )
    # publish runs after the report (it depends on it): its dvc.lock entry is the last run's
    prov["code"].pop("publish", None)
    markdown = build_report(
        evaluation=evaluation,
        per_prompt=per_prompt,
        history=history,
        diagnosis=diagnose_kl(history, KLThresholds(**kl_thresholds)),
        alarms=check_alarms(
            history,
            selection.get("validation", []),
            AlarmThresholds(window=report.window, **dataclasses.asdict(report.alarms)),
            evaluation,
        ),
        hyperparameters=hyperparameter_table(PARAMS_FILE, params),
        smoke=_json(paths.smoke_checks),
        step0=_json(paths.step0),
        validation=_json(paths.validation_summary),
        gate=_json(paths.gate_verdict),
        cost=cost,
        params=dataclasses.asdict(params),
        prov=prov,
        images=images,
        confidence=params.evaluate.confidence,
        selection=selection,
        recipe=recipe,
        seed_runs=seed_runs,
        samples=_jsonl(run.train_completions) if Path(run.train_completions).exists() else [],
    )
    write_text_atomic(paths.retrospective_md, markdown)
    # only the report's own figures are read and inlined, never an image named by the data
    write_text_atomic(paths.retrospective_html, to_html(markdown, report_dir, images=images))
    compose(paths.retrospective_md, paths.report_picture)  # the README's picture follows the run
    print(
        f"report: {paths.retrospective_md} and {paths.retrospective_html} (self-contained); "
        f"its picture {paths.report_picture}"
    )
    return 0


if __name__ == "__main__":
    run_stage("report", main)
