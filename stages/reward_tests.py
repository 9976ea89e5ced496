"""Stage reward_tests: run the offline reward tests and write the gate's verdict.

    dvc repro reward_tests          (or: python -m stages.reward_tests)

Writes paths.gate_verdict (reports/gate/reward_tests.json: passed, counts, failing test ids) and
its headline metrics/gate.json (a DVC metric). Every other stage reads the verdict first and
refuses to start unless it says passed; a failure here exits non-zero, naming the tests.
"""

from rlvr.core.files import write_json
from rlvr.pipeline.gate import run_reward_tests
from rlvr.pipeline.stage import ParamsView, run_stage
from rlvr.report.metrics import gate_metrics


def main(params: ParamsView) -> int:
    print(f"reward_tests: running {' '.join(params.gate.tests)}")
    verdict = run_reward_tests(params.gate.tests, params.paths.gate_verdict, params.gate.min_tests)
    write_json(params.paths.gate_metrics, gate_metrics(verdict))
    counts = verdict["counts"]
    print(
        f"reward_tests: {counts['passed']}/{counts['tests']} passed -> {params.paths.gate_verdict}"
    )
    if verdict["passed"]:
        return 0
    for test_id in verdict["failing"]:
        print(f"reward_tests: FAILED {test_id}")
    if "reason" in verdict:
        print(f"reward_tests: {verdict['reason']}")
    return 1


if __name__ == "__main__":
    run_stage("reward_tests", main, gated=False)
