"""Write the default countdown datasets: data/grpo_train.jsonl, data/grpo_val.jsonl (the validation
file: recipes are chosen on it) and data/grpo_test.jsonl (the sealed test file: it audits the
chosen recipe once, docs/audit.md).

Deterministic: the same arguments always write the same bytes. The committed files were made with

    python data/make_countdown.py

(defaults: 64 rows in each split, 2 numbers from 1 to 16, operators + - *, compact prompts,
seed 0, ids cd16-<split>-NNN). The 192 problems are drawn distinct, none of them a problem of
data/grpo_eval.jsonl (the earlier test file, which recipes were chosen on: docs/data.md), and
dealt to the three splits at random, so each is a sample of the same distribution. For a real
instruct model: python data/make_countdown.py --style instruct
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from rlvr.data.rows import write_jsonl
from rlvr.data.tasks.countdown import CountdownSpec, generate_splits, problem_key

HERE = Path(__file__).parent


def used_problems(path: Path) -> frozenset:
    """The (numbers, target) problems of a countdown JSONL file."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return frozenset(problem_key(r["verifier"]["numbers"], r["verifier"]["target"]) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-rows", type=int, default=64)
    parser.add_argument("--val-rows", type=int, default=64, help="validation rows")
    parser.add_argument("--test-rows", type=int, default=64, help="sealed test rows")
    parser.add_argument("--numbers", type=int, default=2, help="numbers per row")
    parser.add_argument("--low", type=int, default=1)
    parser.add_argument("--high", type=int, default=16)
    parser.add_argument(
        "--style",
        choices=["compact", "instruct"],
        default="compact",
        help="compact for the tiny default; instruct for a real instruct model",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--id-prefix", default="cd16")
    parser.add_argument(
        "--exclude",
        type=Path,
        action="append",
        default=None,
        help="a JSONL file whose problems no split may hold (repeatable; default: "
        "data/grpo_eval.jsonl, the earlier test file)",
    )
    parser.add_argument("--out-dir", type=Path, default=HERE)
    args = parser.parse_args()

    excluded = frozenset().union(
        *(used_problems(p) for p in (args.exclude or [HERE / "grpo_eval.jsonl"]))
    )
    spec = CountdownSpec(n_numbers=args.numbers, low=args.low, high=args.high, style=args.style)
    splits = generate_splits(
        {"train": args.train_rows, "val": args.val_rows, "test": args.test_rows},
        spec,
        seed=args.seed,
        id_prefix=args.id_prefix,
        exclude=excluded,
        shuffle=True,
    )
    for split, rows in splits.items():
        name = f"grpo_{split}.jsonl"
        write_jsonl(args.out_dir / name, rows)
        tags = Counter(t for r in rows for t in r["tags"])
        mix = ", ".join(f"{tag} {tags[tag]}" for tag in sorted(tags))
        print(f"wrote {len(rows)} rows to {args.out_dir / name} (tags: {mix})")


if __name__ == "__main__":
    main()
