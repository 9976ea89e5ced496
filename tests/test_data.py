"""The default dataset: generated deterministically, 64 + 64 rows, no problem shared across splits."""

import subprocess
import sys
from pathlib import Path

from rlvr.data import read_rows, to_hf_dataset
from rlvr.rewards import countdown_solution
from rlvr.tasks.countdown import CountdownSpec, generate_rows

ROOT = Path(__file__).resolve().parents[1]


def test_committed_files_are_what_the_generator_writes(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "data" / "make_countdown.py"), "--out-dir",
                    str(tmp_path)], check=True, capture_output=True)
    for name in ("grpo_train.jsonl", "grpo_eval.jsonl"):
        assert (tmp_path / name).read_bytes() == (ROOT / "data" / name).read_bytes(), name


def test_splits_share_no_problem_and_every_target_is_reachable():
    train, held_out = generate_rows(64, 64, CountdownSpec(), seed=0)
    assert len(train) == 64 and len(held_out) == 64
    key = lambda row: (tuple(sorted(row["verifier"]["numbers"])), row["verifier"]["target"])  # noqa: E731
    assert not {key(r) for r in train} & {key(r) for r in held_out}
    for row in train + held_out:
        v = row["verifier"]
        assert countdown_solution(v["numbers"], v["target"]) is not None
        assert v["target"] not in v["numbers"]


def test_other_seeds_and_sizes_give_other_rows():
    a, _ = generate_rows(8, 8, CountdownSpec(), seed=0)
    b, _ = generate_rows(8, 8, CountdownSpec(), seed=1)
    c, _ = generate_rows(8, 8, CountdownSpec(n_numbers=3), seed=0)
    assert a != b and all(len(r["verifier"]["numbers"]) == 3 for r in c)


def test_hf_dataset_keeps_mixed_verifier_types_as_json():
    rows = read_rows(ROOT / "data" / "grpo_train.jsonl")[:2]
    dataset = to_hf_dataset(rows)
    assert dataset.column_names == ["id", "prompt", "verifier"]
    assert isinstance(dataset[0]["verifier"], str)
