"""Write the default countdown datasets: data/grpo_train.jsonl, data/grpo_eval.jsonl (the test
file) and data/grpo_val.jsonl (the validation file).

Deterministic: the same arguments always write the same bytes. The committed files were made with

    python data/make_countdown.py

(defaults: 64 train rows, 64 test rows, 64 validation rows, no problem in two files, 2 numbers
from 1 to 12, operators + - *, compact prompts, seed 0). For a real instruct model:
python data/make_countdown.py --style instruct
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlvr.data.rows import write_jsonl
from rlvr.data.tasks.countdown import CountdownSpec, generate_splits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-rows", type=int, default=64)
    parser.add_argument("--eval-rows", type=int, default=64, help="test rows")
    parser.add_argument(
        "--val-rows",
        type=int,
        default=64,
        help="validation rows (drawn last: train and test rows do not change)",
    )
    parser.add_argument("--numbers", type=int, default=2, help="numbers per row")
    parser.add_argument("--low", type=int, default=1)
    parser.add_argument("--high", type=int, default=12)
    parser.add_argument(
        "--style",
        choices=["compact", "instruct"],
        default="compact",
        help="compact for the tiny default; instruct for a real instruct model",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent)
    args = parser.parse_args()

    spec = CountdownSpec(n_numbers=args.numbers, low=args.low, high=args.high, style=args.style)
    splits = generate_splits(
        {"train": args.train_rows, "eval": args.eval_rows, "val": args.val_rows},
        spec,
        seed=args.seed,
    )
    for split, rows in splits.items():
        name = f"grpo_{split}.jsonl"
        write_jsonl(args.out_dir / name, rows)
        print(f"wrote {len(rows)} rows to {args.out_dir / name}")


if __name__ == "__main__":
    main()
