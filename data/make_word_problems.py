"""Write a GSM8K-style sample of `math` rows (word problems whose answers are numbers, fractions
or percentages, checked by value by the `math` verifier): data/samples/word_problems.jsonl.

    python data/make_word_problems.py [--rows 64] [--seed 0]

Deterministic: the same arguments always write the same bytes (the committed file: the defaults).
For a real instruct model: its prompts are English and ask for the answer in \\boxed{}; with
`format` in rewards.funcs, set rewards.format_pattern to what your answers look like, e.g.
'\\\\boxed\\{[^{}]+\\}' (validate names each row whose correct answer the pattern would punish).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlvr.data.rows import write_jsonl
from rlvr.data.tasks.word_problems import word_problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "samples" / "word_problems.jsonl"
    )
    args = parser.parse_args()
    write_jsonl(args.out, word_problems(args.rows, args.seed))
    print(f"make_word_problems: {args.rows} rows -> {args.out}")


if __name__ == "__main__":
    main()
