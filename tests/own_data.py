"""A user's own rows, made up as a new user would: exact_match rows of two-term addition
("67 + 75 = " -> "142"), 64 for training, 64 for validation, 64 for the test file, no prompt in
two files; terms from LOW to HIGH (two-digit, 10-99: the data a new user tried). The project
ships no generator for them: the end-to-end tests of own data (tests/test_own_data.py) write
them into a copy.

    python -m tests.own_data OUT_DIR [LOW HIGH]     writes OUT_DIR/sums_{train,val,eval}.jsonl
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

FORMAT_PATTERN = r"^\s*\d+\s*$"  # a bare number: what the rows' answers look like
SPLITS = ("train", "val", "eval")


TWO_DIGIT = (10, 99)


def sums_rows(
    per_split: int = 64, low: int = 10, high: int = 99, seed: int = 0
) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    out: dict[str, list[dict]] = {split: [] for split in SPLITS}
    for split in SPLITS:
        while len(out[split]) < per_split:
            a, b = rng.randint(low, high), rng.randint(low, high)
            if (a, b) in seen:
                continue
            seen.add((a, b))
            out[split].append(
                {
                    "id": f"sum-{split}-{len(out[split]) + 1:03d}",
                    "prompt": f"{a} + {b} = ",
                    "verifier": {"type": "exact_match", "target": str(a + b)},
                }
            )
    return out


def write_sums(folder: str | Path, low: int = 10, high: int = 99) -> dict[str, Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, rows in sums_rows(low=low, high=high).items():
        paths[split] = folder / f"sums_{split}.jsonl"
        paths[split].write_text("".join(json.dumps(row) + "\n" for row in rows))
    return paths


if __name__ == "__main__":
    for path in write_sums(sys.argv[1], *map(int, sys.argv[2:4])).values():
        print(path)
