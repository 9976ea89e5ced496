"""Verifiers: exact match, format (regex), countdown arithmetic."""

import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.rewards.verifiers import (
    MAX_FORMAT_CHARS,
    REGEX_TIMEOUT_S,
    CountdownSearchExceeded,
    countdown_reward,
    countdown_solution,
    countdown_value,
    exact_match_reward,
    extract_answer,
    format_reward,
)

# ---------------------------------------------------------------- exact match


@pytest.mark.parametrize(
    "output,target,expected",
    [
        ("42", "42", 1.0),
        ("  42\n", "42", 1.0),
        ("42", " 42 ", 1.0),
        ("42.0", "42", 0.0),
        ("4 2", "42", 0.0),
        ("", "42", 0.0),
        ("Paris", "paris", 0.0),
    ],
)
def test_exact_match(output, target, expected):
    assert exact_match_reward(output, target) == expected


# ---------------------------------------------------------------- format

FORMAT = r"^\s*\(*\d+\)*(\s*[-+*/]\s*\(*\d+\)*)+\s*$"


@pytest.mark.parametrize(
    "output,expected",
    [
        ("3*5", 1.0),
        (" 3 + 5 ", 1.0),
        ("(3+5)*2", 1.0),
        ("3", 0.0),
        ("3*", 0.0),
        ("three", 0.0),
        ("3*5 is 15", 0.0),
        ("", 0.0),
    ],
)
def test_format_with_the_default_pattern(output, expected):
    assert format_reward(output, FORMAT) == expected


def test_format_accepts_compiled_patterns_and_keeps_their_flags():
    assert format_reward("ANSWER", re.compile("answer", re.IGNORECASE)) == 1.0
    assert format_reward("ANSWER", re.compile("answer")) == 0.0


def test_format_is_search_not_fullmatch():
    assert format_reward("the answer is 7", r"\d") == 1.0


def test_format_times_out_instead_of_hanging_on_catastrophic_backtracking():
    assert format_reward("a" * 5000 + "!", r"^(a|aa)+$", timeout=0.05) == 0.0


# ---------------------------------------------------------------- countdown


@pytest.mark.parametrize(
    "output,numbers,target,expected",
    [
        ("2+3*5", [2, 3, 5], 17, 1.0),  # precedence: 2 + 15
        ("2+3*5", [2, 3, 5], 25, 0.0),  # not (2 + 3) * 5
        ("(2+3)*5", [2, 3, 5], 25, 1.0),
        ("3*5", [3, 5], 15, 1.0),
        (" 3 * 5 \n", [3, 5], 15, 1.0),  # surrounding whitespace is fine
        ("5*3", [3, 5], 15, 1.0),  # any order
        ("12-4", [4, 12], 8, 1.0),
        ("4-12", [4, 12], -8, 1.0),  # negative targets are arithmetic too
        ("3+3", [3, 5], 6, 0.0),  # reuses 3
        ("3+3", [3, 3], 6, 1.0),  # two 3s given: both may be used
        ("7+8", [3, 5], 15, 0.0),  # foreign numbers
        ("15", [3, 5], 15, 0.0),  # a foreign literal
        ("3", [3, 5], 3, 1.0),  # each number at most once, not necessarily all
        ("-3+18", [3, 18], 15, 0.0),  # unary minus is not an operator of the game
        ("6/2", [6, 2], 3, 0.0),  # division only when enabled
        ("3**2", [3, 2], 9, 0.0),  # power is not allowed
        ("3.0*5", [3, 5], 15, 0.0),  # floats are not the given numbers
        ("True*15", [15], 15, 0.0),  # bools are not numbers
        ("3*5=15", [3, 5], 15, 1.0),  # a stated result that is the target is accepted ...
        ("3 * 5 = 15\n", [3, 5], 15, 1.0),
        ("3*5=16", [3, 5], 15, 0.0),  # ... a wrong one is not, even if the arithmetic hits
        ("3+5=15", [3, 5], 15, 0.0),  # the claim alone earns nothing
        ("3*5==15", [3, 5], 15, 0.0),
        ("3*5=15=15", [3, 5], 15, 0.0),
        ("=15", [3, 5], 15, 0.0),
        (
            "3*5 = \u0661\u0665",
            [3, 5],
            15,
            0.0,
        ),  # digits are ASCII, in the claim as in the expression
        ("3*5 = \uff11\uff15", [3, 5], 15, 0.0),
        ("(3 +\n5) *\n2", [3, 5, 2], 16, 1.0),  # line breaks inside an expression are spaces
        ("\u00a03*5\u00a0", [3, 5], 15, 1.0),  # so is any Unicode whitespace: no-break spaces,
        ("3\u2009*\u20095", [3, 5], 15, 1.0),  # thin spaces,
        ("3\u3000*\u30005", [3, 5], 15, 1.0),  # ideographic spaces,
        ("3*5 =\u00a015\u2003", [3, 5], 15, 1.0),  # around a stated result too
        ("3\u200b*5", [3, 5], 15, 0.0),  # a zero-width space is not whitespace (isspace)
        ("-3+5", [-3, 5], 2, 0.0),  # no unary minus: a negative number cannot be written,
        ("5+(-3)", [-3, 5], 2, 0.0),  # so the data contract rejects rows that give one
        ("5-3", [-3, 5], 2, 0.0),
        ("3 5", [3, 5], 15, 0.0),
        ("", [3, 5], 15, 0.0),
        ("(3*5", [3, 5], 15, 0.0),
        ("__import__('os').system('x')", [3, 5], 15, 0.0),
        ("x*5", [3, 5], 15, 0.0),
        ("I think <answer>3*5</answer>", [3, 5], 15, 1.0),
    ],
)
def test_countdown(output, numbers, target, expected):
    assert countdown_reward(output, numbers, target) == expected


WHITESPACE = [c for c in map(chr, range(0x3001)) if c.isspace()]


@given(
    st.lists(st.sampled_from(["3", "*", "5", "+", "2", "(", ")", "-"]), min_size=1, max_size=9),
    st.lists(
        st.text(st.sampled_from(WHITESPACE), min_size=1, max_size=2), min_size=10, max_size=10
    ),
)
def test_any_unicode_whitespace_between_tokens_scores_as_a_space(tokens, gaps):
    """An answer scores the same with any whitespace between its tokens: what a space gives
    (a no-break or ideographic space, a line break, ... everything str.isspace accepts)."""
    spaced = " ".join(tokens)
    padded = "".join(gap + token for gap, token in zip(gaps, tokens)) + gaps[-1]
    for target in (15, 17, 10, 3):
        assert countdown_reward(padded, [3, 5, 2], target) == countdown_reward(
            spaced, [3, 5, 2], target
        )


def test_countdown_division_when_enabled_is_exact():
    assert countdown_reward("6/4", [6, 4], 1, allow_division=True) == 0.0  # 1.5, not 1
    assert countdown_reward("(6+2)/4", [6, 2, 4], 2, allow_division=True) == 1.0
    assert countdown_reward("6/(2-2)", [6, 2, 2], 0, allow_division=True) == 0.0


def test_countdown_value_is_exact_arithmetic():
    assert countdown_value("2+3*5", [2, 3, 5]) == 17
    assert countdown_value("2+3*5", [2, 3]) is None


@pytest.mark.parametrize(
    "text",
    [
        "9" * 100_000,  # a huge literal
        "(" * 50_000 + "3" + ")" * 50_000,  # deep nesting
        "3*" * 50_000 + "5",  # 100k characters of valid-looking arithmetic
        "1" * 300 + "*" + "1" * 300,  # big numbers that would overflow if evaluated
        "3*5=" + "1" * 100_000,  # a huge stated result
        "3*5" + "=" * 100_000,
    ],
)
def test_countdown_rejects_pathological_input_quickly(text):
    assert countdown_reward(text, [3, 5], 15) == 0.0


def test_extract_answer_takes_the_last_answer_block():
    assert extract_answer("<answer>1</answer> no, <answer>2</answer>") == "2"
    assert extract_answer("<answer>3*5") == "3*5"


@pytest.mark.parametrize(
    "numbers,target,solvable",
    [
        ([3, 5], 15, True),
        ([3, 5], 2, True),
        ([3, 5], 7, False),
        ([2, 3, 5], 25, True),
        ([1, 2, 3, 4], 24, True),
        ([1, 1], 5, False),
    ],
)
def test_countdown_solution_finds_a_valid_expression(numbers, target, solvable):
    solution = countdown_solution(numbers, target)
    assert (solution is not None) == solvable
    if solution is not None:
        assert countdown_reward(solution, numbers, target) == 1.0


# ---------------------------------------------------------------- bounds: regex time, solver work


def _fastest(call, tries=3):
    """(result, the least wall time of `tries` calls): the min keeps a scheduling hiccup out."""
    times, results = [], set()
    for _ in range(tries):
        start = time.perf_counter()
        results.add(call())
        times.append(time.perf_counter() - start)
    (result,) = results
    return result, min(times)


def test_format_holds_its_wall_clock_limit_under_cpu_load(cpu_load):
    score, seconds = _fastest(lambda: format_reward("a" * 50_000 + "!", r"(a+)+$"))
    assert score == 0.0 and seconds < REGEX_TIMEOUT_S + 0.1


def test_format_scores_a_completion_over_the_length_bound_zero_without_searching():
    score, seconds = _fastest(lambda: format_reward("a" * 1_000_000, r"(a+)+$"))
    assert score == 0.0 and seconds < REGEX_TIMEOUT_S + 0.1
    assert format_reward("a" * MAX_FORMAT_CHARS, r"(a+)+$") == 1.0  # the bound itself is searched


def test_format_result_of_a_slow_search_decided_in_time_is_kept():
    """A search past the inline slice moves to the watched thread; its verdict is the same."""
    text, pattern = "a" * 28 + "c", r"^(?:(?:a|aa)+b|a+c)$"  # ~70 ms of backtracking, then a match
    assert format_reward(text, pattern, timeout=10.0) == 1.0
    assert format_reward(text[:-1] + "d", pattern, timeout=10.0) == 0.0


def test_countdown_solution_gives_up_after_its_node_budget():
    hard = ([3, 7, 11, 13, 17, 19], 999_999_937, True)  # unreachable: ~3.3 million nodes in full
    with pytest.raises(CountdownSearchExceeded) as raised:
        countdown_solution(*hard, max_nodes=1_000)
    assert raised.value.max_nodes == 1_000
    assert str(raised.value) == "the solvability search exceeded its budget of 1,000 nodes"
    with pytest.raises(CountdownSearchExceeded):  # the default budget, ~1.3 s here
        countdown_solution(*hard)
    assert countdown_solution([3, 5], 15, max_nodes=10) == "3*5"  # decided rows are unchanged
