"""Compare the baseline run with its DVC experiments: reports/experiments.md and .html.

    ./dev run python scripts/compare_experiments.py [--rev COMMIT ...] [--test]

Reads `dvc exp show --json` (params and metrics; the experiments of HEAD, or of each COMMIT given:
the runs of one grid queued on several commits) and each run's committed outputs, and writes one
table of every run (params that differ, final reward, greedy success and mean reward, final KL,
verdict), one row per setting over its seeds, each setting's recipe against the default's (the
difference of deltas with a 95% interval over both recipes' seeds and the prompts, the
probability of improvement, and better / worse / tie by that interval), and each setting's curves
(reports/figures/experiments.png). Prints the first and the last table. Every figure is on the
validation rows, where recipes are chosen; --test shows the test rows instead, under a line
saying that choosing on them biases them (docs/audit.md).
"""

import argparse

from rlvr.orchestration.comparison import compare, comparison_rows, recipe_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rev",
        action="append",
        default=[],
        help="compare the experiments of this commit (default: HEAD); repeat it "
        "to compare runs queued on several commits",
    )
    parser.add_argument(
        "--test",
        action="store_true",
        help="judge on the test rows (data.eval_path) instead of the validation rows: choosing "
        "a recipe on them biases them",
    )
    args = parser.parse_args()
    experiments = compare(revs=args.rev, split="heldout" if args.test else "validation")
    for table in (comparison_rows, recipe_rows):
        header, rows = table(experiments)
        print(" | ".join(header))
        for row in rows:
            print(" | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row))
    print("compare: reports/experiments.md and reports/experiments.html")


if __name__ == "__main__":
    main()
