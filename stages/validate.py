"""Stage validate: check the training, validation and test rows against the data contract (Great Expectations).

    dvc repro validate              (or: python -m stages.validate)

With the format reward in rewards.funcs, every row's known-correct answer must match
rewards.format_pattern; with model.init tiny, every prompt and known-correct answer must be
text its character tokenizer encodes (printable ASCII). Writes reports/validation/summary.json
(per file and rule, whether it held), its headline
metrics/data.json (a DVC metric) and the Data Docs HTML under
reports/validation/data_docs/. On any problem it prints one line per problem
(file, row id or line, rule) and exits non-zero, so nothing downstream runs.
"""

from pathlib import Path

from rlvr.core.files import write_json
from rlvr.data.validation import contract_options, summary, validate_files
from rlvr.pipeline.stage import ParamsView, run_stage
from rlvr.report.metrics import validation_metrics


def main(params: ParamsView) -> int:
    data, paths = params.data, params.paths
    print(f"validate: checking {data.train_path}, {data.val_path} and {data.eval_path}")
    reports = validate_files(
        data.train_path,
        data.eval_path,
        data.train_rows,
        data.max_prompt_chars,
        docs_dir=paths.data_docs,
        val_path=data.val_path,
        **contract_options(params),
    )
    result = summary(reports)
    write_json(paths.validation_summary, result)
    write_json(paths.validation_metrics, validation_metrics(result))
    for report in reports:
        print(f"validate: {report.path}: {report.rows} rows, {len(report.problems)} problem(s)")
        for problem in report.problems:
            print(problem)
    print(f"validate: Data Docs at {Path(paths.data_docs) / 'index.html'}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    run_stage("validate", main)
