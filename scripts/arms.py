"""Arms against the default on the validation rows, in chunks: each arm is the default with a few
params overridden, each RL seed trained and evaluated on its own.

    ./dev run python scripts/arms.py run SET [--seeds 0 1 2] [--commit]   # what is not recorded yet
    ./dev run python scripts/arms.py table SET                            # the table so far

SET names a group of arms (ARM_SETS below): guided (Step 26: train.guidance's arms), steps (Step 27:
the budget before train.max_steps 300). `run` trains each arm-seed that has no records file under
reports/arms/SET/ in a work clone of HEAD (../arms-work, kept between runs: `dvc repro
evaluate@<seed>` with the arm's params), one at a time, and writes its per-prompt records; with
--commit each file is committed to the current branch as it finishes, so an interrupted run loses
one chunk at most and a rerun skips what is recorded. `table` compares each arm with the default's
committed records on the validation rows (a set measured on an earlier default: with that default's
records, kept as an arm; AGAINST), an interval over both arms' seeds and the prompts, Holm over the
set's arms (rlvr/orchestration/experiments.py), and prints a markdown table.
"""

import argparse
import subprocess
import time
from pathlib import Path

from rlvr.core.files import read_jsonl
from rlvr.orchestration.experiments import (
    arms_table,
    chunk_file,
    default_records,
    make_work_clone,
    pending,
    run_chunk,
)

ROOT = Path(__file__).resolve().parents[1]
GUIDED = ["train.guides=reports/verified", "train.max_steps=400"]  # the default's budget then
ARM_SETS = {  # set -> arm -> its overrides of the default (`dvc exp run -S` syntax)
    "guided": {
        "unsolved": ["train.guidance=unsolved", *GUIDED],
        "fraction": ["train.guidance=fraction", *GUIDED],
    },
    "steps": {"steps-400": ["train.max_steps=400"]},  # the default before Step 27
}
# A set measured against an earlier default compares with that default's records, kept as an arm
AGAINST = {"guided": ("steps", "steps-400")}


def folder(arm_set: str) -> Path:
    return ROOT / "reports" / "arms" / arm_set


def run(arm_set: str, seeds: list[int], work: Path, commit: bool) -> None:
    arms = ARM_SETS[arm_set]
    todo = pending(folder(arm_set), list(arms), seeds)
    print(f"arms: {len(todo)} arm-seed(s) of {arm_set} to run: {todo or 'none'}")
    if todo:
        make_work_clone(ROOT, work)
    for arm, seed in todo:
        started, out = time.perf_counter(), chunk_file(folder(arm_set), arm, seed)
        count = run_chunk(work, arms[arm], seed, out, dvc=str(ROOT / ".venv" / "bin" / "dvc"))
        print(f"arms: {arm}@{seed}: {count} records in {time.perf_counter() - started:.0f} s")
        if commit:
            subprocess.run(["git", "add", str(out)], cwd=ROOT, check=True)
            message = f"{arm_set} arms: {arm} seed {seed}'s records (scripts/arms.py)"
            subprocess.run(["git", "commit", "-q", "-m", message], cwd=ROOT, check=True)


def table(arm_set: str, seeds: list[int]) -> None:
    arms = list(ARM_SETS[arm_set])
    if arm_set in AGAINST:
        other_set, arm = AGAINST[arm_set]
        default = {s: read_jsonl(chunk_file(folder(other_set), arm, s)) for s in seeds}
        print(f"against {other_set}/{arm}, the default these arms were measured on")
    else:
        default = default_records(ROOT, seeds)
    rows = arms_table(folder(arm_set), arms, seeds, default)
    print("| arm | seeds | minus the default's delta [95%] | P(better) | p | Holm p | verdict |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "missing_seeds" in r:
            print(f"| {r['arm']} | missing {r['missing_seeds']} | | | | | |")
            continue
        print(
            f"| {r['arm']} | {r['seeds_x']} | {r['value']:+.3f} [{r['ci_low']:+.3f}, "
            f"{r['ci_high']:+.3f}] | {r['probability_of_improvement']:.2f} | {r['p_value']:.3f} "
            f"| {r['holm_p']:.3f} | {r['holm_verdict']} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["run", "table"])
    parser.add_argument("arm_set", choices=list(ARM_SETS), metavar="SET", help=" | ".join(ARM_SETS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--work", type=Path, default=ROOT.parent / "arms-work")
    parser.add_argument("--commit", action="store_true", help="commit each chunk's records")
    args = parser.parse_args()
    if args.what == "run":
        run(args.arm_set, args.seeds, args.work, args.commit)
    else:
        table(args.arm_set, args.seeds)


if __name__ == "__main__":
    main()
