"""The default task: countdown-style arithmetic with a target that is always reachable.

Each row gives a few small numbers and a target; the answer is an expression that uses each number
at most once with the allowed operators. Targets are made by applying random operators to the
numbers, so every row has a solution, and the verifier checks the arithmetic exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

from rlvr.rewards.verifiers import countdown_solution

OPERATORS = ("+", "-", "*")
# compact: what the tiny character-level default reads (short prompts keep it fast on a CPU);
# instruct: for a real instruct model, which answers in <answer> tags (see extract_answer).
PROMPT_STYLES = {
    "compact": "{numbers} -> {target}: ",
    "instruct": (
        "Using the numbers {numbers_prose}, each at most once, and the operations {ops}, "
        "write an arithmetic expression equal to {target}. Put only the expression in "
        "<answer></answer> tags."
    ),
}


@dataclass(frozen=True)
class CountdownSpec:
    """How rows are drawn; the defaults are the pipeline's default dataset."""

    n_numbers: int = 2
    low: int = 1
    high: int = 12
    ops: tuple[str, ...] = OPERATORS
    min_target: int = 1
    style: str = "compact"


# The tag of each operator (rlvr.audit.slices reports every tag's rows apart).
OPERATOR_TAGS = {"+": "add", "-": "sub", "*": "mul", "/": "div"}


def solving_operators(
    numbers: list[int], target: int, ops: tuple[str, ...] = OPERATORS
) -> set[str]:
    """Every operator that some solution uses: each expression over a subset of the numbers
    (each at most once, any order and bracketing, exact arithmetic) that makes the target adds
    its operators. Exhaustive, so meant for a few numbers (the default rows have two).

    >>> sorted(solving_operators([3, 5], 15)), sorted(solving_operators([2, 2], 4))
    (['*'], ['*', '+'])
    >>> sorted(solving_operators([7, 3], 4)), sorted(solving_operators([8, 2], 4, ("+", "/")))
    (['-'], ['/'])
    """
    found: set[str] = set()
    goal = Fraction(target)

    def combine(a: Fraction, b: Fraction) -> list[tuple[str, Fraction]]:
        out = [("+", a + b), ("-", a - b), ("-", b - a), ("*", a * b)]
        out += [("/", a / b)] if b else []
        out += [("/", b / a)] if a else []
        return [(op, value) for op, value in out if op in ops]

    def search(items: list[tuple[Fraction, frozenset]]) -> None:
        for value, used in items:
            if value == goal:
                found.update(used)
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                rest = [item for k, item in enumerate(items) if k not in (i, j)]
                (a, used_a), (b, used_b) = items[i], items[j]
                for op, value in combine(a, b):
                    search([*rest, (value, used_a | used_b | {op})])

    search([(Fraction(n), frozenset()) for n in numbers])
    return found


def operator_tags(numbers: list[int], target: int, ops: tuple[str, ...] = OPERATORS) -> list[str]:
    """A row's tags: the operators that can make its target, by name, in OPERATOR_TAGS' order.

    >>> operator_tags([2, 2], 4), operator_tags([12, 5], 7)
    (['add', 'mul'], ['sub'])
    """
    used = solving_operators(numbers, target, ops)
    return [tag for op, tag in OPERATOR_TAGS.items() if op in used]


def _prose(numbers: list[int]) -> str:
    if len(numbers) == 1:
        return str(numbers[0])
    return ", ".join(map(str, numbers[:-1])) + " and " + str(numbers[-1])


def make_prompt(
    numbers: list[int], target: int, ops: tuple[str, ...] = OPERATORS, style: str = "compact"
) -> str:
    """The prompt of one row.

    >>> make_prompt([3, 5], 15)
    '3 5 -> 15: '
    >>> make_prompt([3, 5], 15, style="instruct")[:40]
    'Using the numbers 3 and 5, each at most '
    """
    return PROMPT_STYLES[style].format(
        target=target,
        numbers=" ".join(map(str, numbers)),
        numbers_prose=_prose(numbers),
        ops=" ".join(ops),
    )


def _draw(rng: random.Random, spec: CountdownSpec) -> tuple[list[int], int]:
    """Numbers and a target made by folding them with random operators (so it is reachable).

    A target equal to one of the numbers is drawn again: answering it needs no arithmetic.
    """
    while True:
        numbers = [rng.randint(spec.low, spec.high) for _ in range(spec.n_numbers)]
        order = numbers[:]
        rng.shuffle(order)
        value = order[0]
        for n in order[1:]:
            op = rng.choice(spec.ops)
            value = value + n if op == "+" else value - n if op == "-" else value * n
        if value >= spec.min_target and value not in numbers:
            return numbers, value


def problem_key(numbers: list[int], target: int) -> tuple:
    """A problem as the splits compare them: numbers sorted, so '3 and 5 -> 15' and
    '5 and 3 -> 15' are one problem."""
    return (tuple(sorted(numbers)), target)


def generate_splits(
    sizes: dict[str, int],
    spec: CountdownSpec = CountdownSpec(),
    seed: int = 0,
    id_prefix: str = "cd",
    exclude: frozenset = frozenset(),
    shuffle: bool = False,
) -> dict[str, list[dict]]:
    """Rows for each named split (`{"train": 64, "val": 64, "test": 64}`), with no (numbers,
    target) problem in two splits nor in `exclude` (problem_key), each tagged with the operators
    that can make its target (operator_tags); deterministic in seed.

    The problems are drawn one after another. Without `shuffle` the splits take them in order,
    so a split added at the end leaves the earlier splits' rows unchanged, but when the draw
    nearly exhausts the spec's problems the last split gets the rare ones; with `shuffle` they
    are dealt to the splits at random, so every split is a sample of the same distribution.

    >>> splits = generate_splits({"train": 3, "val": 2}, seed=0)
    >>> [row["id"] for row in splits["val"]]
    ['cd-val-001', 'cd-val-002']
    """
    total = sum(sizes.values())
    rng = random.Random(seed)
    seen: set[tuple] = set()
    rows: list[tuple[str, dict]] = []
    attempts = 0
    while len(rows) < total:
        attempts += 1
        if attempts > 1000 * total:
            raise ValueError(f"cannot draw {total} distinct problems from {spec}")
        numbers, target = _draw(rng, spec)
        key = problem_key(numbers, target)
        if key in seen or key in exclude:
            continue
        seen.add(key)
        # Reachable by construction, so the search ends at an answer: no budget needed.
        assert countdown_solution(numbers, target, max_nodes=None) is not None
        verifier = {"type": "countdown", "numbers": numbers, "target": target}
        rows.append(
            (
                make_prompt(numbers, target, spec.ops, spec.style),
                verifier,
                operator_tags(numbers, target, spec.ops),
            )
        )

    if shuffle:
        rng.shuffle(rows)
    splits, start = {}, 0
    for name, size in sizes.items():
        splits[name] = [
            {
                "id": f"{id_prefix}-{name}-{i:03d}",
                "prompt": prompt,
                "verifier": verifier,
                "tags": tags,
            }
            for i, (prompt, verifier, tags) in enumerate(rows[start : start + size], start=1)
        ]
        start += size
    return splits


def generate_rows(
    n_train: int,
    n_eval: int,
    spec: CountdownSpec = CountdownSpec(),
    seed: int = 0,
    id_prefix: str = "cd",
) -> tuple[list[dict], list[dict]]:
    """Train and held-out rows with no problem in common (generate_splits with two splits)."""
    splits = generate_splits({"train": n_train, "eval": n_eval}, spec, seed, id_prefix)
    return splits["train"], splits["eval"]


def well_formed_expressions(
    numbers: list[int], rng: random.Random, k: int, ops: tuple[str, ...] = OPERATORS
) -> list[str]:
    """Up to k distinct expressions that use every number once with random operators and order.

    They are well formed but NOT checked against any target: warm-start data that teaches the
    answer format, not the answer.

    >>> sorted(well_formed_expressions([3, 5], random.Random(0), k=100))
    ['3*5', '3+5', '3-5', '5*3', '5+3', '5-3']
    """
    found: set[str] = set()
    for _ in range(20 * k):
        order = numbers[:]
        rng.shuffle(order)
        text = str(order[0]) + "".join(rng.choice(ops) + str(n) for n in order[1:])
        found.add(text)
        if len(found) >= k:
            break
    return sorted(found)
