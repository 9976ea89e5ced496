"""Stage train: the full GRPO run, with curves, checkpoints and automatic resume.

    dvc repro train                 (or: python -m stages.train)

Needs a passing smoke run. Trains models/base for train.max_steps GRPO steps, checkpointing every
train.save_steps into models/checkpoints/; if a run was killed, the next one resumes from the last
checkpoint by itself. Writes models/final/, reports/train/metrics.json (a DVC metric), the DVCLive
curves in reports/train/live/ and reports/train/curves.png.
"""

from rlvr.config import Params
from rlvr.data import write_json
from rlvr.runs import train_run
from rlvr.stage import run_stage


def main(params: Params) -> int:
    result = train_run(params, base_dir="models/base", final_dir="models/final",
                       checkpoint_dir="models/checkpoints", report_dir="reports/train",
                       smoke_report="reports/smoke/checks.json")
    write_json("reports/train/metrics.json", result["metrics"])
    for line in result["lines"]:
        print(line)
    return 0


if __name__ == "__main__":
    run_stage("train", main)
