"""Stage train: the full GRPO run, with curves, checkpoints and automatic resume.

    dvc repro train                 (or: python -m stages.train)

Needs a passing smoke run. Trains models/base for train.max_steps GRPO steps, checkpointing every
train.save_steps into models/checkpoints/; if a run was killed, the next one resumes from the last
checkpoint by itself. Writes models/trained/ (stage publish makes it models/final),
reports/train/summary.json and its headline metrics/train.json (a DVC metric), the DVCLive
curves in reports/train/live/, reports/train/history.jsonl and reports/train/curves.png (every
path from params.yaml `paths`).
"""

from rlvr.config import Params
from rlvr.data import write_json
from rlvr.metrics import train_metrics
from rlvr.runs import train_run
from rlvr.stage import run_stage


def main(params: Params) -> int:
    result = train_run(params, params.paths)
    if result is None:  # a rank other than the main one: the main process writes
        return 0
    write_json(params.paths.train_summary, result["summary"])
    write_json(params.paths.train_metrics, train_metrics(result["summary"]))
    for line in result["lines"]:
        print(line)
    return 0


if __name__ == "__main__":
    run_stage("train", main, launchable=True)
