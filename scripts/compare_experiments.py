"""Compare the baseline run with its DVC experiments: reports/experiments.md and .html.

    ./dev run python scripts/compare_experiments.py

Reads `dvc exp show --json` (params and metrics) and each run's committed training history, and
writes one table (params that differ, final reward, held-out greedy success and mean reward, final
KL, verdict) with overlaid reward and KL curves (reports/figures/experiments.png).
"""

from rlvr.comparison import compare, comparison_rows


def main() -> None:
    experiments = compare()
    header, rows = comparison_rows(experiments)
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row))
    print("compare: reports/experiments.md and reports/experiments.html")


if __name__ == "__main__":
    main()
