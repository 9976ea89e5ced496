"""The guided arms against the default on the validation rows (Step 26): train.guidance unsolved
and fraction, each RL seed trained and evaluated on its own, in chunks.

    ./dev run python scripts/guided_arms.py run [--seeds 0 1 2] [--commit]   # what is not recorded yet
    ./dev run python scripts/guided_arms.py table                            # the table so far

`run` trains each arm-seed that has no records file under reports/arms/guided/ in a work clone
of HEAD (../guided-arms-work, kept between runs: `dvc repro evaluate@<seed>` with the arm's
params), one at a time, and writes its per-prompt records; with --commit each file is committed
to the current branch as it finishes, so an interrupted run loses one chunk at most and a rerun
skips what is recorded. `table` compares each arm with the default's committed records on the
validation rows (an interval over both arms' seeds and the prompts, Holm over the 2 arms;
rlvr/orchestration/experiments.py) and prints a markdown table.
"""

import argparse
import subprocess
import time
from pathlib import Path

from rlvr.orchestration.experiments import (
    arms_table,
    chunk_file,
    default_records,
    make_work_clone,
    pending,
    run_chunk,
)

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "reports" / "arms" / "guided"
GUIDED = ["train.guides=reports/verified"]
ARMS = {
    "unsolved": ["train.guidance=unsolved", *GUIDED],
    "fraction": ["train.guidance=fraction", *GUIDED],
}


def run(seeds: list[int], work: Path, commit: bool) -> None:
    todo = pending(FOLDER, list(ARMS), seeds)
    print(f"guided_arms: {len(todo)} arm-seed(s) to run: {todo or 'none'}")
    if todo:
        make_work_clone(ROOT, work)
    for arm, seed in todo:
        started, out = time.perf_counter(), chunk_file(FOLDER, arm, seed)
        count = run_chunk(work, ARMS[arm], seed, out, dvc=str(ROOT / ".venv" / "bin" / "dvc"))
        print(
            f"guided_arms: {arm}@{seed}: {count} records in {time.perf_counter() - started:.0f} s"
        )
        if commit:
            subprocess.run(["git", "add", str(out)], cwd=ROOT, check=True)
            message = f"guided arms: {arm} seed {seed}'s records (scripts/guided_arms.py)"
            subprocess.run(["git", "commit", "-q", "-m", message], cwd=ROOT, check=True)


def table(seeds: list[int]) -> None:
    rows = arms_table(FOLDER, list(ARMS), seeds, default_records(ROOT, seeds))
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
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--work", type=Path, default=ROOT.parent / "guided-arms-work")
    parser.add_argument("--commit", action="store_true", help="commit each chunk's records")
    args = parser.parse_args()
    if args.what == "run":
        run(args.seeds, args.work, args.commit)
    else:
        table(args.seeds)


if __name__ == "__main__":
    main()
