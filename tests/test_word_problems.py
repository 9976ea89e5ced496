"""The GSM8K-style sample of `math` rows (data/make_word_problems.py): made by its script, valid
under the contract with a `\\boxed{}` format pattern, and each row's target earns the reward in the
forms a model writes it."""

import json
import subprocess
import sys

from rlvr.data.tasks.word_problems import KINDS, word_problems
from rlvr.data.validation import validate_files
from rlvr.params.config import RewardsParams
from rlvr.rewards.math_answers import math_reward
from tests.helpers import ROOT

SAMPLE = ROOT / "data" / "samples" / "word_problems.jsonl"
BOXED = r"\\boxed\{[^{}]+\}"


def test_the_committed_sample_is_what_the_script_writes(tmp_path):
    out = tmp_path / "sample.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "data" / "make_word_problems.py"), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    assert out.read_bytes() == SAMPLE.read_bytes()


def test_every_row_earns_its_reward_boxed_bare_and_as_a_decimal():
    rows = rows_of(SAMPLE)
    assert len(rows) == 64 and {tag for row in rows for tag in row["tags"]} == set(KINDS)
    for row in rows:
        target = row["verifier"]["target"]
        assert math_reward(f"So the answer is \\boxed{{{target.rstrip('%')}}}.", target) == 1.0
        assert math_reward(target, target) == 1.0
        assert math_reward(f"\\boxed{{{target.rstrip('%')}1}}", target) == 0.0  # another value
    fraction = next(r for r in rows if r["tags"] == ["fraction"])["verifier"]["target"]
    numerator, denominator = map(int, fraction.split("/"))
    assert math_reward(f"{numerator / denominator:.6f}", fraction) == 1.0


def test_the_sample_passes_the_contract_with_a_boxed_format_pattern(tmp_path):
    held_out = tmp_path / "eval.jsonl"
    prompts = {row["prompt"] for row in rows_of(SAMPLE)}
    rows = [
        r for r in word_problems(200, seed=1, id_prefix="wp-eval") if r["prompt"] not in prompts
    ]
    held_out.write_text("".join(json.dumps(r) + "\n" for r in rows[:16]))
    reports = validate_files(str(SAMPLE), str(held_out), 64, 200, format_pattern=BOXED)
    assert [r.problems for r in reports] == [[], []]
    # countdown's default pattern (an arithmetic expression) accepts only the fractions' `a/b`:
    # every other row is named, with the forms tried
    problems = validate_files(
        str(SAMPLE), str(held_out), 64, 200, format_pattern=RewardsParams().format_pattern
    )[0].problems
    fractions = [row for row in rows_of(SAMPLE) if row["tags"] == ["fraction"]]
    assert len(problems) == 64 - len(fractions) > 0
    assert problems[0].endswith(
        "bare, in <answer> tags or in \\boxed{}, so the format reward "
        "would punish it [format_accepts_answer]"
    )


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]
