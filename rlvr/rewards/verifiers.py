"""Verifiers: pure functions that score one model output against one row's verifier.

Every verifier returns a float and never raises on model output, however adversarial: the text is
never evaluated (countdown parses with `ast` and walks a whitelist of nodes), its length is capped
before parsing or matching, and regular expressions run under a wall-clock limit (see
format_reward) so catastrophic backtracking cannot hang a training run.
"""

from __future__ import annotations

import ast
import itertools
import re
import threading
import time
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

import regex

# An answer to a countdown row with at most MAX_COUNTDOWN_NUMBERS numbers fits easily in this many
# characters; anything longer is wrong by construction and is rejected before parsing.
MAX_EXPRESSION_CHARS = 256
MAX_COUNTDOWN_NUMBERS = 6
# Countdown numbers and targets are at most this large in absolute value (the data contract checks
# it): any answer over MAX_COUNTDOWN_NUMBERS such numbers fits in MAX_EXPRESSION_CHARS and any
# target in a stated result of MAX_CLAIM_CHARS, with room to spare for every real puzzle.
MAX_COUNTDOWN_VALUE = 10**9
# countdown_solution's search is exhaustive, and grows steeply with the count of numbers: an
# unreachable target from 6 numbers with division visits ~3.3 million states (~12 s). It gives up
# after this many states (a count, not a time, so the verdict is the same on every machine): about
# 1.3 s on one CPU core, 2.1 s when the numbers are near MAX_COUNTDOWN_VALUE (bigger fractions).
COUNTDOWN_SEARCH_NODES = 400_000
# Regex matching is bounded in wall-clock time: a search still running after REGEX_TIMEOUT_S
# seconds scores as "no match" (_search_within says how the limit is held).
REGEX_TIMEOUT_S = 0.2
# A completion longer than this many characters is not searched and scores 0.0 for format: no
# answer is that long, and even a linear scan of a huge text costs time in every training step.
MAX_FORMAT_CHARS = 100_000
# How long a search runs in the caller's thread (processor time) before it moves to a watched
# thread: a sane pattern decides in microseconds, so only a pathological search pays for a thread.
_INLINE_REGEX_S = 0.005
# Python's `re` flag values differ from the `regex` package's for ASCII only.
_RE_TO_REGEX_FLAGS = {
    re.IGNORECASE: regex.IGNORECASE,
    re.MULTILINE: regex.MULTILINE,
    re.DOTALL: regex.DOTALL,
    re.VERBOSE: regex.VERBOSE,
    re.ASCII: regex.ASCII,
}
# The characters of an expression besides whitespace, which is any character str.isspace
# accepts (a no-break, thin or ideographic space as much as a line break, as str.strip and
# exact_match see it). Digits are ASCII only.
_EXPRESSION_CHARS = frozenset("0123456789+-*/()")
# A claimed result after '=' is an integer of at most this many characters (int() of a huge
# literal is slow: the bound keeps scoring fast on adversarial text), ASCII digits.
MAX_CLAIM_CHARS = 32
_CLAIM = re.compile(r"-?[0-9]{1,%d}" % MAX_CLAIM_CHARS)
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"


def extract_answer(output: str) -> str:
    """The text to verify: the last `<answer>...</answer>` block if there is one, else the output.

    Chatty instruct models wrap their answer in tags; the tiny default model answers bare.

    >>> extract_answer("I think <answer> 3*5 </answer>")
    ' 3*5 '
    >>> extract_answer("3*5")
    '3*5'
    """
    start = output.rfind(ANSWER_OPEN)
    if start < 0:
        return output
    start += len(ANSWER_OPEN)
    end = output.find(ANSWER_CLOSE, start)
    return output[start:] if end < 0 else output[start:end]


def exact_match_reward(output: str, target: str) -> float:
    """1.0 if the output equals the target once surrounding whitespace is stripped, else 0.0.

    >>> exact_match_reward(" Paris\\n", "Paris")
    1.0
    >>> exact_match_reward("paris", "Paris")
    0.0
    """
    return 1.0 if output.strip() == target.strip() else 0.0


def _as_regex(pattern: str | re.Pattern | regex.Pattern) -> regex.Pattern:
    if isinstance(pattern, regex.Pattern):
        return pattern
    if isinstance(pattern, re.Pattern):
        flags = sum(v for k, v in _RE_TO_REGEX_FLAGS.items() if pattern.flags & k)
        return regex.compile(pattern.pattern, flags)
    return regex.compile(pattern)


def format_reward(
    output: str, pattern: str | re.Pattern | regex.Pattern, timeout: float = REGEX_TIMEOUT_S
) -> float:
    """1.0 if the pattern matches somewhere in the output (re.search semantics), else 0.0.

    Anchor the pattern (^...$) to demand the whole output. A search that has not decided within
    `timeout` seconds of wall-clock time scores 0.0 instead of hanging, and an output longer than
    MAX_FORMAT_CHARS scores 0.0 without being searched. An invalid pattern raises (it is a
    configuration error, caught earlier by validation).

    >>> format_reward("3*5", r"^\\d+([-+*]\\d+)+$")
    1.0
    >>> format_reward("three times five", re.compile(r"^\\d"))
    0.0
    """
    compiled = _as_regex(pattern)
    if len(output) > MAX_FORMAT_CHARS:
        return 0.0
    return 1.0 if _search_within(compiled, output, timeout) else 0.0


def _search_within(compiled: regex.Pattern, text: str, timeout: float | None) -> bool:
    """Does `compiled` match in `text`, decided within `timeout` seconds on the wall clock?

    The `regex` package's own timeout counts processor time (C clock(), the whole process's), not
    wall time: on a loaded machine a search that got a third of a core ran three times its limit
    (0.2 s became 0.5-0.6 s with two busy processes per core). So the search runs under that
    timeout first for _INLINE_REGEX_S; one that is still undecided continues in a worker thread
    (the `regex` package releases the GIL) that the caller waits for on the wall clock, for what
    is left of `timeout`. Past it the caller scores "no match" and returns; the abandoned worker
    stops by itself once its own processor-time timeout (the same remainder) runs out. (Other busy
    threads of the process advance that clock too, so it can end a search sooner, never later.)
    """
    if timeout is None:
        return compiled.search(text) is not None
    started = time.monotonic()
    inline = min(timeout, _INLINE_REGEX_S)
    try:
        return compiled.search(text, timeout=inline) is not None
    except TimeoutError:
        pass
    remaining = timeout - (time.monotonic() - started)
    if inline >= timeout or remaining <= 0:
        return False
    outcome: list = []
    decided = threading.Event()

    def search() -> None:
        try:
            outcome.append(compiled.search(text, timeout=remaining, concurrent=True) is not None)
        except TimeoutError:
            outcome.append(False)
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller
            outcome.append(error)
        finally:
            decided.set()

    threading.Thread(target=search, name="format_reward-search", daemon=True).start()
    if not decided.wait(remaining):
        return False
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


class _Rejected(Exception):
    """The expression is not a legal countdown answer."""


def _evaluate(node: ast.AST, available: Counter, allow_division: bool) -> Fraction:
    """Evaluate a whitelisted arithmetic tree, consuming the numbers it uses from `available`."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        if available[node.value] <= 0:
            raise _Rejected(f"{node.value} is not available")
        available[node.value] -= 1
        return Fraction(node.value)
    if isinstance(node, ast.BinOp):
        left = _evaluate(node.left, available, allow_division)
        right = _evaluate(node.right, available, allow_division)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div) and allow_division:
            if right == 0:
                raise _Rejected("division by zero")
            return left / right
    raise _Rejected(f"{type(node).__name__} is not allowed")


def countdown_value(
    expression: str, numbers: Sequence[int], allow_division: bool = False
) -> Fraction | None:
    """The exact value of a legal countdown expression, or None if it is not legal.

    Legal: only the given numbers, each at most once; + - * (and / when allowed); parentheses.
    No unary minus (so a negative number can never be written: the data contract rejects rows
    that give one), no other literals, no names. Precedence is Python's, which is arithmetic's.
    Any whitespace (line breaks, no-break or ideographic spaces) counts as a space.

    >>> countdown_value("2+3*5", [2, 3, 5])
    Fraction(17, 1)
    >>> countdown_value("5*5", [2, 3, 5]) is None
    True
    >>> countdown_value("(2 +\\n 3) * 5", [2, 3, 5])
    Fraction(25, 1)
    >>> countdown_value("\\u00a02\\u2009*\\u30005", [2, 5])
    Fraction(10, 1)
    """
    if not all(c in _EXPRESSION_CHARS or c.isspace() for c in expression):
        return None
    text = " ".join(expression.split())
    if not text or len(text) > MAX_EXPRESSION_CHARS:
        return None
    try:
        tree = ast.parse(text, mode="eval")
        return _evaluate(tree.body, Counter(numbers), allow_division)
    except (_Rejected, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def countdown_reward(
    output: str, numbers: Sequence[int], target: int, allow_division: bool = False
) -> float:
    """1.0 if the output is a legal expression over `numbers` that equals `target`, else 0.0.

    Format and length are separate rewards; this one only checks the arithmetic. An answer may
    state its result after the expression (`3*5 = 15`): it then scores 1.0 only if the stated
    result is the target too.

    >>> countdown_reward("2+3*5", [2, 3, 5], 17)
    1.0
    >>> countdown_reward("3*5 = 15", [3, 5], 15), countdown_reward("3*5 = 16", [3, 5], 15)
    (1.0, 0.0)
    >>> countdown_reward("2+3*5", [2, 3, 5], 25)
    0.0
    >>> countdown_reward("(2+3)*5", [2, 3, 5], 25)
    1.0
    >>> countdown_reward("__import__('os')", [2, 3, 5], 25)
    0.0
    """
    expression, equals, claim = extract_answer(output).partition("=")
    if equals and not (_CLAIM.fullmatch(claim.strip()) and int(claim) == target):
        return 0.0
    value = countdown_value(expression, numbers, allow_division)
    return 1.0 if value is not None and value == target else 0.0


class CountdownSearchExceeded(Exception):
    """countdown_solution visited its budget of nodes (search states) without finding an answer
    or ruling one out."""

    def __init__(self, max_nodes: int) -> None:
        super().__init__(f"the solvability search exceeded its budget of {max_nodes:,} nodes")
        self.max_nodes = max_nodes


def countdown_solution(
    numbers: Sequence[int],
    target: int,
    allow_division: bool = False,
    max_nodes: int | None = COUNTDOWN_SEARCH_NODES,
) -> str | None:
    """An expression over `numbers` (each at most once) that hits `target`, or None if none exists.

    Exhaustive search over every way of combining pairs; meant for the few numbers a countdown
    row has (at most MAX_COUNTDOWN_NUMBERS). After `max_nodes` states (None: no limit) without a
    verdict it raises CountdownSearchExceeded; the count of states is deterministic, so the verdict
    is the same on every machine.

    >>> countdown_solution([3, 5], 15)
    '3*5'
    >>> countdown_solution([3, 5], 7) is None
    True
    """
    if len(numbers) > MAX_COUNTDOWN_NUMBERS:
        raise ValueError(
            f"at most {MAX_COUNTDOWN_NUMBERS} numbers can be searched, got {len(numbers)}"
        )
    seen: set[tuple] = set()
    nodes = 0

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        nonlocal nodes
        nodes += 1
        if max_nodes is not None and nodes > max_nodes:
            raise CountdownSearchExceeded(max_nodes)
        for value, text in items:
            if value == target:
                return text
        key = tuple(sorted(v for v, _ in items))
        if key in seen:
            return None
        seen.add(key)
        for i, j in itertools.permutations(range(len(items)), 2):
            (a, ta), (b, tb) = items[i], items[j]
            rest = [items[k] for k in range(len(items)) if k not in (i, j)]
            candidates = [(a + b, f"{ta}+{tb}"), (a - b, f"{ta}-({tb})"), (a * b, f"({ta})*({tb})")]
            if allow_division and b != 0:
                candidates.append((a / b, f"({ta})/({tb})"))
            for value, text in candidates:
                found = search(rest + [(value, text)])
                if found is not None:
                    return _simplify(found, numbers, target, allow_division)
        return None

    return search([(Fraction(n), str(n)) for n in numbers])


def _simplify(text: str, numbers: Sequence[int], target: int, allow_division: bool) -> str:
    """Drop redundant parentheses while the expression keeps its value (for readable solutions)."""
    changed = True
    while changed:
        changed = False
        for open_at in [i for i, ch in enumerate(text) if ch == "("]:
            depth = 0
            for close_at in range(open_at, len(text)):
                depth += {"(": 1, ")": -1}.get(text[close_at], 0)
                if depth == 0:
                    break
            candidate = text[:open_at] + text[open_at + 1 : close_at] + text[close_at + 1 :]
            if countdown_value(candidate, numbers, allow_division) == target:
                text, changed = candidate, True
                break
    return text
