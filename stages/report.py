"""Stage report: the retrospective, as markdown and as a self-contained HTML page.

    dvc repro report                (or: python -m stages.report)

Reads what the other stages wrote (evaluation, curves, smoke checks, validation, gate, dvc.lock)
and writes reports/retrospective.md and reports/retrospective.html (plots embedded, opens with no
network): verdict, curves, KL/beta diagnosis, hyperparameters with their rationale, smoke and data
checks, per-prompt audit, GRPO vs PPO cost, provenance.
"""

import dataclasses
import json
from pathlib import Path

from rlvr.config import PARAMS_FILE, Params
from rlvr.data import write_text_atomic
from rlvr.plots import plot_per_prompt
from rlvr.policy import policy_path
from rlvr.report import (KLThresholds, build_report, count_parameters, diagnose_kl,
                         hyperparameter_table, ppo_cost, provenance, to_html)
from rlvr.stage import run_stage

REPORTS = Path("reports")


def _json(path: str):
    return json.loads((REPORTS / path).read_text())


def _jsonl(path: str) -> list:
    return [json.loads(line) for line in (REPORTS / path).read_text().splitlines() if line]


def main(params: Params) -> int:
    per_prompt = _jsonl("eval/per_prompt.jsonl")
    history = _jsonl("train/history.jsonl")
    plot_per_prompt(per_prompt, REPORTS / "figures/per_prompt.png")
    base = Path(policy_path("models/base"))
    config = json.loads((base / "config.json").read_text()) if base.is_dir() else {}
    cost = ppo_cost(count_parameters(base) or 0, config.get("hidden_size", 0),
                    params.train.grpo.num_generations)
    markdown = build_report(
        evaluation=_json("eval/metrics.json"), per_prompt=per_prompt, history=history,
        diagnosis=diagnose_kl(history, KLThresholds(**dataclasses.asdict(params.report))),
        hyperparameters=hyperparameter_table(PARAMS_FILE, params),
        smoke=_json("smoke/checks.json"), step0=_json("smoke/step0.json"),
        validation=_json("validation/summary.json"), gate=_json("gate/reward_tests.json"),
        cost=cost, prov=provenance(), params=dataclasses.asdict(params),
        images={"curves": "train/curves.png", "per_prompt": "figures/per_prompt.png"},
        confidence=params.evaluate.confidence)
    write_text_atomic(REPORTS / "retrospective.md", markdown)
    write_text_atomic(REPORTS / "retrospective.html", to_html(markdown, REPORTS))
    print("report: reports/retrospective.md and reports/retrospective.html (self-contained)")
    return 0


if __name__ == "__main__":
    run_stage("report", main)
