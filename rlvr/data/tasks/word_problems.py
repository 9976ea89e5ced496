"""GSM8K-style word problems with `math` verifiers: short stories whose answers are whole numbers,
fractions, decimals or percentages, each checked by value (rlvr.rewards.math_answers), so
`\\boxed{3/4}`, `0.75` and `75%` all earn the reward for a target of `3/4`.

A sample for a real instruct model (data/make_word_problems.py writes it): the tiny default
model cannot read English. Each row is tagged with its kind of problem for the audit.
"""

from __future__ import annotations

import random
from fractions import Fraction

INSTRUCTION = " Give the final answer in \\boxed{}."


def _money(rng: random.Random) -> tuple[str, str]:
    count, price, paid = rng.randint(2, 9), rng.randint(2, 12), 0
    paid = count * price + rng.randint(1, 20)
    return (
        f"Maya buys {count} notebooks at {price} dollars each and pays with {paid} dollars. "
        f"How many dollars of change does she get?",
        str(paid - count * price),
    )


def _sharing(rng: random.Random) -> tuple[str, str]:
    friends, each = rng.randint(3, 8), rng.randint(2, 9)
    left = rng.randint(1, friends - 1)
    return (
        f"Omar shares {friends * each + left} marbles equally among {friends} friends and "
        f"keeps what is left. How many marbles does each friend get?",
        str(each),
    )


def _fraction(rng: random.Random) -> tuple[str, str]:
    whole = rng.choice([12, 16, 20, 24, 30, 36])
    eaten = rng.randint(1, whole - 1)
    share = Fraction(eaten, whole)
    return (
        f"A pie is cut into {whole} equal slices and {eaten} of them are eaten. What fraction "
        f"of the pie is eaten? Answer as a fraction in lowest terms.",
        f"{share.numerator}/{share.denominator}",
    )


def _percent(rng: random.Random) -> tuple[str, str]:
    total = rng.choice([20, 25, 40, 50, 80])
    passed = rng.randint(1, total - 1)
    # a target written as a percentage: 95%, 95\%, 0.95, 95 and \boxed{95} all earn it
    # (docs/data.md, the math verifier's rules)
    return (
        f"In a class of {total} students, {passed} passed the test. What percent of the "
        f"class passed?",
        f"{passed * 100 / total:g}%",
    )


def _rate(rng: random.Random) -> tuple[str, str]:
    speed, hours = rng.randint(30, 90), rng.choice([1.5, 2.5, 3, 0.5, 4])
    distance = speed * hours
    return (
        f"A train travels at {speed} km per hour for {hours} hours. How many km does it travel?",
        f"{distance:g}",
    )


KINDS = {
    "money": _money,
    "sharing": _sharing,
    "fraction": _fraction,
    "percent": _percent,
    "rate": _rate,
}


def word_problems(rows: int, seed: int = 0, id_prefix: str = "wp") -> list[dict]:
    """`rows` distinct problems, the kinds in turn; deterministic in seed.

    >>> [(row["id"], row["tags"], row["verifier"]["type"]) for row in word_problems(2)]
    [('wp-001', ['money'], 'math'), ('wp-002', ['sharing'], 'math')]
    """
    rng = random.Random(seed)
    found: list[dict] = []
    seen: set[str] = set()
    kinds = list(KINDS.items())
    while len(found) < rows:
        kind, make = kinds[len(found) % len(kinds)]
        prompt, target = make(rng)
        if prompt in seen:
            continue
        seen.add(prompt)
        found.append(
            {
                "id": f"{id_prefix}-{len(found) + 1:03d}",
                "prompt": prompt + INSTRUCTION,
                "verifier": {"type": "math", "target": target},
                "tags": [kind],
            }
        )
    return found
