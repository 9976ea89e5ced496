"""Stage smoke: a short GRPO run that proves the pipe, and the step-0 reward baseline.

    dvc repro smoke                 (or: python -m stages.smoke)

Measures the base policy's mean reward on every training prompt (G samples each, fixed seed),
then runs smoke.max_steps GRPO steps with the train.grpo settings and checks rows, groups,
rewards, advantages, loss / KL / grad_norm and reward spread. Writes reports/smoke/checks.json,
its headline metrics/smoke.json (a DVC metric) and reports/smoke/step0.json; exits non-zero naming
every failed check with its value.
"""

from rlvr.core.files import write_json
from rlvr.pipeline.smoke import smoke_run
from rlvr.pipeline.stage import ParamsView, run_stage
from rlvr.report.metrics import smoke_metrics


def main(params: ParamsView) -> int:
    result = smoke_run(params, base_dir=params.paths.base_model)
    if result is None:  # a rank other than the main one: the main process writes
        return 0
    write_json(params.paths.step0, result["step0"])
    write_json(params.paths.smoke_checks, result["report"])
    write_json(params.paths.smoke_metrics, smoke_metrics(result["report"]))
    for line in result["lines"]:
        print(line)
    return 0 if result["report"]["passed"] else 1


if __name__ == "__main__":
    run_stage("smoke", main, launchable=True)
