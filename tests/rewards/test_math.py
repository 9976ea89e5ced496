"""The `math` verifier (rlvr.rewards.math_answers, math_values, math_worker) by its rules
(docs/data.md): numbers read as numbers, e-notation included; exact values unless the row states
a tolerance; one final value, not arithmetic left to do and not several; one value per target;
and a time bound on scoring, per completion, that never depends on the completion before nor
on the machine's load."""

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.rewards import math_answers, math_values
from rlvr.rewards.math_answers import (
    MATH_TARGET_TIMEOUT_S,
    MATH_TIMEOUT_S,
    MATH_WALL_TIMEOUT_S,
    MAX_MATH_ANSWERS,
    math_reward,
    start_math_worker,
)
from rlvr.rewards.math_worker import MEMORY_HEADROOM
from rlvr.rewards.registry import score_correctness, verifier_problems


def math(target, **fields):
    return {"type": "math", "target": target, **fields}


def scores(answers, verifier):
    return [score_correctness(answer, verifier) for answer in answers]


# ---------------------------------------------------------------- 1. numbers read as numbers


def test_e_notation_is_its_value_in_targets_and_answers_bare_tagged_in_dollars_and_boxed():
    big = math("1.2538491439703905e+18")
    assert (
        scores(
            [
                "1.2538491439703905e+18",
                "1253849143970390500",
                "\\boxed{1253849143970390500}",
                "\\boxed{1.2538491439703905e+18}",
                "$1.2538491439703905e+18$",
                "<answer>1.2538491439703905E18</answer>",
                "1.2538491439703905 \\times 10^{18}",
                "<answer>$1.2538491439703905e18$</answer>",
            ],
            big,
        )
        == [1.0] * 8
    )
    # the mantissa alone, the exponent's sign flipped, the exponent off by one
    assert (
        scores(
            [
                "1.2538491439703905",
                "1.2538491439703905e-18",
                "1.2538491439703905e+17",
                "1.2538491439703905e+19",
                "\\boxed{1.2538491439703905}",
            ],
            big,
        )
        == [0.0] * 5
    )
    assert scores(["3.0e+1", "3E1", "\\boxed{3.0e+1}", "$3.0e+1$"], math("30")) == [1.0] * 4
    assert (
        scores(["0.00000000000000000456", "4.56E-18", "$4.56e-18$"], math("4.56e-18")) == [1.0] * 3
    )


def test_a_target_must_read_as_its_plain_decimal_value():
    assert verifier_problems(math("1.25E18")) == []
    assert verifier_problems(math("1e999999")) == [
        "target '1e999999' reads as no number, not as its plain decimal value 1E+999999"
    ]


# ---------------------------------------------------------------- 2. exact values, stated tolerance


@pytest.mark.parametrize(
    "answer,target,earns",
    [
        ("676793011694400.90", "676793011694400.9", 1.0),
        ("332/521.", "332/521", 1.0),
        ("42.", "42", 1.0),
        ("0.750", "3/4", 1.0),
        ("8.1900003", "8.19", 0.0),
        ("0.3333333", "1/3", 0.0),
        ("1.41421356", "\\sqrt{2}", 0.0),
        ("\\sqrt{8}/4", "\\frac{\\sqrt{2}}{2}", 1.0),
    ],
)
def test_values_compare_exactly_by_default(answer, target, earns):
    assert score_correctness(answer, math(target)) == earns


def test_a_row_may_state_its_tolerance():
    three = math("851737.58055369", sig_figs=3)
    assert (
        scores(["8.52e+05", "852000", "851737.58055369", "\\boxed{8.52 \\times 10^{5}}"], three)
        == [1.0] * 4
    )
    assert scores(["8.53e+05", "8.5e+05", "851000", "85200"], three) == [0.0] * 4
    assert scores(["1.41421356", "1.414214", "1.41"], math("\\sqrt{2}", rel_tol=1e-6)) == [
        1.0,
        1.0,
        0.0,
    ]
    assert scores(["8.1900003", "8.2", "8.21"], math("8.19", abs_tol=0.01)) == [1.0, 1.0, 0.0]


@pytest.mark.parametrize(
    "fields,problem",
    [
        ({"rel_tol": 0}, "rel_tol must be a number between 0 and 1 (exclusive)"),
        ({"rel_tol": "0.1"}, "rel_tol must be a number between 0 and 1 (exclusive)"),
        ({"rel_tol": True}, "rel_tol must be a number between 0 and 1 (exclusive)"),
        ({"abs_tol": -1}, "abs_tol must be a positive number"),
        ({"abs_tol": float("nan")}, "abs_tol must be a positive number"),
        ({"sig_figs": 0}, "sig_figs must be an integer from 1 to 30"),
        ({"sig_figs": 2.5}, "sig_figs must be an integer from 1 to 30"),
        ({"allow_expressions": "yes"}, "allow_expressions must be true or false"),
        (
            {"sig_figs": 3, "rel_tol": 0.01},
            "sig_figs cannot be combined with rel_tol or abs_tol: state one rule",
        ),
        ({"tolerance": 0.1}, "unknown field(s) ['tolerance'] for type math"),
        (
            {"abs_tol": 10},
            "abs_tol 10 is at least the target's size (8.19), so an answer of 0 would earn it: "
            "give a smaller abs_tol, or rel_tol",
        ),
    ],
)
def test_the_contract_checks_the_tolerance_fields(fields, problem):
    assert verifier_problems(math("8.19", **fields)) == [problem]


@given(
    st.integers(-(10**6), 10**6),
    st.integers(-(10**6), 10**6),
    st.sampled_from([0.5, 0.25, 0.125, 0.0625]),  # exact in binary: math.isclose computes exactly
)
def test_rel_tol_is_math_isclose(answer, target, rel_tol):
    """Property: relative to the larger of the answer and the target, as math.isclose is."""
    import math as pymath

    verifier = math(str(target), rel_tol=rel_tol)
    assert score_correctness(str(answer), verifier) == float(
        pymath.isclose(answer, target, rel_tol=rel_tol)
    )


# ---------------------------------------------------------------- 3. a final answer, and one


def test_arithmetic_left_to_do_earns_nothing_unless_the_row_allows_expressions():
    undone = [
        "4 * 3",
        "11 + 1",
        "4 \\times 3",
        "\\sqrt{144}",
        "24/2",
        "\\frac{24}{2}",
        "The answer is 4*3.",
    ]
    assert scores(undone, math("12")) == [0.0] * len(undone)
    assert scores(undone, math("12", allow_expressions=True)) == [1.0] * len(undone)
    assert scores(["13", "4 * 3 or 12"], math("12", allow_expressions=True)) == [0.0, 0.0]
    assert scores(["2\\pi - \\pi", "\\pi", "\\frac{\\pi}{1}"], math("\\pi")) == [0.0, 1.0, 0.0]
    assert score_correctness("2\\pi - \\pi", math("\\pi", allow_expressions=True)) == 1.0
    # a fraction in lowest terms is a value; the question's own fraction echoed back is not
    assert scores(["6/8", "\\frac{6}{8}", "3/4"], math("3/4")) == [0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    "answer,target",
    [
        ("\\sin(\\pi/4)", "\\frac{\\sqrt{2}}{2}"),
        ("\\arcsin 1", "\\frac{\\pi}{2}"),
        ("\\tan\\frac{\\pi}{6}", "\\frac{\\sqrt{3}}{3}"),
        ("(1+\\sqrt{2})^2", "3+2\\sqrt{2}"),
        ("e^1", "e"),
        ("e^{1}", "e"),
        ("\\pi \\cdot 1.0", "\\pi"),
    ],
)
def test_a_function_call_or_power_left_to_evaluate_is_arithmetic_left_to_do(answer, target):
    assert score_correctness(answer, math(target)) == 0.0
    assert score_correctness(answer, math(target, allow_expressions=True)) == 1.0


@pytest.mark.parametrize(
    "answer,target",
    [
        ("\\ln 2", "\\ln 2"),  # a natural log is one call (it reads as log(2, E))
        ("\\ln 3", "\\ln 3"),
        ("\\sqrt{8}/4", "\\frac{\\sqrt{2}}{2}"),
        ("2(1+\\sqrt{2})", "2+2\\sqrt{2}"),
        ("3+2\\sqrt{2}", "3+2\\sqrt{2}"),
        ("e^{2}", "e^2"),
    ],
)
def test_an_irrational_value_in_a_final_form_earns(answer, target):
    assert score_correctness(answer, math(target)) == 1.0


def test_a_function_on_a_bare_argument_before_a_division_is_no_value_until_bracketed():
    target = math("\\frac{\\log 8}{\\log 3}")
    assert scores(
        ["\\log 8 / \\log 3", "\\log(8)/\\log(3)", "\\frac{\\log 8}{\\log 3}"], target
    ) == [
        0.0,
        1.0,
        1.0,
    ]


def test_forms_that_are_values_stay_accepted():
    assert (
        scores(
            [
                "\\frac{3}{4}",
                "0.75",
                "75%",
                "75\\%",
                "\\boxed{\\dfrac{3}{4}}",
                ".75",
                "x = 3/4",
                "The answer is 0.75.",
                "3/4 \\text{ of the pie}",
            ],
            math("3/4"),
        )
        == [1.0] * 9
    )
    assert (
        scores(
            ["\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}"],
            math("\\frac{\\sqrt{2}}{2}"),
        )
        == [1.0] * 3
    )
    assert scores(["-5", "- 5", "−5", "(-5)", "\\boxed{-5}"], math("-5")) == [1.0] * 5
    assert scores(["1,000", "1{,}000", "1000 dollars", "\\$1000"], math("1000")) == [1.0] * 4


@pytest.mark.parametrize(
    "line",
    [
        "So, the answer is {}.",
        "Therefore, the answer is {}.",
        "**Answer:** {}",
        "**Final Answer**: {}",
        "The answer is **{}**.",
        "#### {}",
        "Final Answer: The final answer is ${}$. I hope it is correct.",  # the Minerva format
    ],
)
def test_the_common_answer_lines_are_read(line):
    assert scores([line.format(12), line.format(13), line.format("12 or 13")], math("12")) == [
        1.0,
        0.0,
        0.0,
    ]


@pytest.mark.parametrize(
    "answer,target",
    [
        ("12 apples", "12"),
        ("1000 dollars", "1000"),
        ("12 km per hour", "12"),
        ("300 K", "300"),  # kelvin: a one-letter word keeps its case (`12 k` is 12,000)
        ("12 \\text{ cm}", "12"),
        ("90^\\circ", "90"),
        ("12 percent", "12%"),  # `12 percent` is `12%`
        ("12 per cent", "0.12"),
    ],
)
def test_words_after_a_value_are_its_unit(answer, target):
    assert score_correctness(answer, math(target)) == 1.0


@pytest.mark.parametrize(
    "answer",
    [
        "12 thousand",
        "12 million",
        "12 dozen",
        "12\\text{k}",
        "12 k",
        "12 squared",
        "12 thirds",
        "12 pi",
        "12 percent",  # 0.12
        "12 below zero",
        "12 is wrong",
        "12 is not the answer",
        "12 or more",
        "12 or thirteen",
        "12 more than 5",
        "about 12 apples or so",
    ],
)
def test_words_that_change_or_withdraw_the_value_leave_no_answer(answer):
    assert score_correctness(answer, math("12")) == 0.0


@given(st.integers(0, 10**6), st.sampled_from(sorted(math_values.NOT_UNITS)))
def test_no_word_that_changes_a_value_passes_as_its_unit(value, word):
    """Property: a right value followed by any word of NOT_UNITS earns nothing, bare or boxed."""
    target = math(str(value))
    assert score_correctness(f"{value} {word}", target) == 0.0
    assert score_correctness(f"\\boxed{{{value} \\text{{ {word}}}}}", target) == 0.0


@pytest.mark.parametrize(
    "answer,target",
    [
        ("{12}", "12"),
        ("x = {12}", "12"),
        ("{{{528/613}}}", "528/613"),
        ("\\boxed{\\boxed{12}}", "12"),
        ("\\boxed{{12}}", "12"),
        ("{\\frac{1}{2}}", "0.5"),
        ("8 860", "8860"),
        ("8\\ 860", "8860"),
        ("1 234 567", "1234567"),
        ("-1 234.5", "-1234.5"),
    ],
)
def test_grouping_braces_boxes_and_spaced_thousands_read_as_the_value(answer, target):
    assert score_correctness(answer, math(target)) == 1.0


@pytest.mark.parametrize(
    "answer,target",
    [("{1}{2}", "12"), ("8 86", "886"), ("1 2345", "12345"), ("12 345", "12"), ("{13}", "12")],
)
def test_braces_that_are_not_one_group_and_spaces_that_are_not_thousands_read_as_no_value(
    answer, target
):
    assert score_correctness(answer, math(target)) == 0.0


def test_the_readmes_examples():
    assert scores(["\\boxed{0.75}", "3/4", "75%"], math("\\frac{3}{4}")) == [1.0] * 3
    assert scores(["6/8", "0.7 or 0.75"], math("\\frac{3}{4}")) == [0.0] * 2


def test_a_percentage_is_its_value_over_100():
    assert scores(["30%", "\\boxed{30\\%}"], math("30")) == [0.0, 0.0]
    # a target written as a percentage also takes its count of percent: its question asks for one
    assert scores(["30%", "0.3", "30", "\\boxed{30}", "3%", "0.003"], math("30%")) == [
        1.0,
        1.0,
        1.0,
        1.0,
        0.0,
        0.0,
    ]


@pytest.mark.parametrize(
    "answer",
    [
        "31 or 30",
        "30 or 31",
        "31, 30",
        "30, 31",
        "30; 31",
        "\\boxed{31} \\boxed{30}",
        "\\boxed{30} \\boxed{31}",
        "\\boxed{30 \\text{ or } 31}",
        "30 \\pm 1",
        "30 ± 1",
        "\\{30, 31\\}",
        "30 \\\\ 31",
        "30 and 31",
    ],
)
def test_an_answer_holding_several_values_earns_nothing(answer):
    assert score_correctness(answer, math("30")) == 0.0


@pytest.mark.parametrize(
    "answer",
    [
        "x \\ne 12",
        "x \\neq 12",
        "x != 12",
        "x \\not= 12",
        "x ≠ 12",
        "\\boxed{x \\neq 12}",
        "x \\ngtr 12",
    ],
)
def test_a_negated_relation_states_no_value(answer):
    assert score_correctness(answer, math("12")) == 0.0
    assert score_correctness("x = 12", math("12")) == 1.0


@pytest.mark.parametrize(
    "answer,target",
    [
        ("0.333...", "1/3"),
        ("0.333\\ldots", "1/3"),
        ("0.333\\cdots", "1/3"),
        ("0.333…", "1/3"),
        ("\\boxed{0.5\\dots}", "1/2"),
        ("12...", "12"),
        ("1/3 = 0.333...", "1/3"),  # the value after the last `=` is the answer
    ],
)
def test_a_value_with_an_ellipsis_is_not_written_out(answer, target):
    assert score_correctness(answer, math(target)) == 0.0


def test_an_ellipsis_before_the_final_value_leaves_it_whole():
    assert score_correctness("0.333... = \\frac{1}{3}", math("1/3")) == 1.0


@given(
    st.fractions(max_denominator=10**6),
    st.sampled_from(
        ["x \\ne {}", "x != {}", "x \\not= {}", "{}...", "{}\\ldots", "\\boxed{{{}\\dots}}"]
    ),
)
def test_a_right_value_negated_or_trailing_off_never_earns(value, form):
    """Property: any value that earns written plainly earns nothing negated or with an ellipsis."""
    text = f"{value.numerator}/{value.denominator}" if value.denominator != 1 else str(value)
    target = math(f"{value.numerator}/{value.denominator}")
    assert score_correctness(text, target) == 1.0
    assert score_correctness(form.format(text), target) == 0.0


def test_one_value_stated_twice_is_one_answer():
    assert score_correctness("\\boxed{30}, so the answer is \\boxed{30.0}", math("30")) == 1.0
    assert score_correctness("\\boxed{1} \\pm 1", math("1")) == 1.0  # only the box is the answer
    assert score_correctness("1 \\pm 1", math("1")) == 0.0


@given(st.fractions(max_denominator=10**6), st.integers(0, 8))
def test_any_rational_value_earns_in_each_exact_form(value, shift):
    """Property: a value written exactly as a number, a fraction in lowest terms or a percentage
    (bare, boxed, tagged) earns its row's reward; any other value does not."""
    target = math(f"{value.numerator}/{value.denominator}")
    fraction = (
        f"{value.numerator}/{value.denominator}" if value.denominator != 1 else str(value.numerator)
    )
    forms = [fraction, f"\\boxed{{{fraction}}}", f"<answer>{fraction}</answer>"]
    scaled = value * 10**shift
    if scaled.denominator == 1:  # a terminating decimal: e-notation and a percentage
        forms += [f"{scaled.numerator}e-{shift}", f"{scaled.numerator * 100}e-{shift}%"]
    assert scores(forms, target) == [1.0] * len(forms)
    other = value + 1
    assert (
        score_correctness(
            f"{other.numerator}/{other.denominator}"
            if other.denominator != 1
            else str(other.numerator),
            target,
        )
        == 0.0
    )


@given(
    st.integers(-(10**6), 10**6),
    st.integers(-(10**6), 10**6),
    st.sampled_from(["{} or {}", "{}, {}", "\\boxed{{{}}} \\boxed{{{}}}", "{}; {}"]),
)
def test_two_values_never_earn_whatever_their_order(right, other, form):
    if right == other:
        return
    target = math(str(right))
    assert score_correctness(form.format(right, other), target) == 0.0
    assert score_correctness(form.format(other, right), target) == 0.0


@given(st.integers(-(10**4), 10**4), st.integers(-(10**4), 10**4), st.sampled_from("+-*"))
def test_arithmetic_on_two_numbers_earns_only_where_expressions_are_allowed(a, b, op):
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    answer = f"{a} {op} {b}" if b >= 0 else f"{a} {op} ({b})"
    assert score_correctness(answer, math(str(value))) == 0.0
    assert score_correctness(answer, math(str(value), allow_expressions=True)) == 1.0


@given(
    st.decimals(min_value=-(10**6), max_value=10**6, allow_nan=False, places=4),
    st.decimals(min_value=-(10**6), max_value=10**6, allow_nan=False, places=4),
)
def test_arithmetic_on_decimals_is_exact_where_expressions_are_allowed(a, b):
    """Property: `0.1 + 0.2` is 0.3 (decimals are read as the fractions they write, not floats)."""
    answer = f"{a:f} + {b:f}" if b >= 0 else f"{a:f} + ({b:f})"
    assert score_correctness(answer, math(f"{a + b:f}", allow_expressions=True)) == 1.0


@given(
    st.decimals(min_value=-(10**12), max_value=10**12, allow_nan=False, places=6),
    st.integers(1, 12),
)
def test_sig_figs_accepts_the_value_rounded_and_rejects_the_next_rounding(value, figures):
    from fractions import Fraction

    from rlvr.rewards.math_values import round_sig

    exact = Fraction(value)
    if exact == 0:
        return
    rounded = round_sig(exact, figures)
    verifier = math(str(value), sig_figs=figures)
    assert score_correctness(format(rounded, "e"), verifier) == 1.0
    step = rounded.scaleb(0).as_tuple().exponent  # the last kept digit's place
    assert (
        score_correctness(
            format(
                rounded
                + (rounded.copy_abs() / rounded) * __import__("decimal").Decimal(10) ** step,
                "e",
            ),
            verifier,
        )
        == 0.0
    )


# ---------------------------------------------------------------- 5. one value per target


@pytest.mark.parametrize(
    "target,problem",
    [
        (
            "2 × 2 × 5 × 7 × 7",
            "target '2 × 2 × 5 × 7 × 7' is arithmetic or a product, not one value "
            "written as one: write its value (a factorization or a list needs exact_match or regex)",
        ),
        (
            "1, 2",
            "target '1, 2' holds several values: a math target is one value (several values "
            "need several rows, or an exact_match or regex verifier)",
        ),
        (
            "\\{1, 2\\}",
            "target '\\\\{1, 2\\\\}' holds several values: a math target is one value "
            "(several values need several rows, or an exact_match or regex verifier)",
        ),
        (
            "x + 1",
            "target 'x + 1' is not one value: a number, a fraction, a percentage or a closed "
            "form such as \\frac{\\sqrt{2}}{2}",
        ),
        (
            "three quarters",
            "target 'three quarters' is not one value: a number, a fraction, a "
            "percentage or a closed form such as \\frac{\\sqrt{2}}{2}",
        ),
        (
            "\\pi \\approx 3.14",
            "target '\\\\pi \\\\approx 3.14' is an approximation: a target is the exact value "
            "(\\pi, not 3.14), with rel_tol, abs_tol or sig_figs for how close an answer must be",
        ),
        (
            "0.333...",
            "target '0.333...' is not written out (an ellipsis): write the exact value "
            "(\\frac{1}{3}, not 0.333...), or a decimal with rel_tol, abs_tol or sig_figs",
        ),
        (
            "x \\ne 12",
            "target 'x \\\\ne 12' is not one value: a number, a fraction, a percentage or a "
            "closed form such as \\frac{\\sqrt{2}}{2}",
        ),
        (
            "12 pi",
            "target '12 pi' is not one value: a number, a fraction, a percentage or a closed "
            "form such as \\frac{\\sqrt{2}}{2}",
        ),
        (
            "2.5 \\times 4",
            "target '2.5 \\\\times 4' is arithmetic or a product, not one value written as one: "
            "write its value (a factorization or a list needs exact_match or regex)",
        ),
        ("\\pi/0", "target '\\\\pi/0' divides by zero: it has no value"),
        ("\\sqrt{-1}", "target '\\\\sqrt{-1}' is not a real number: a target is a real value"),
        (
            "1e+3.5",
            "target '1e+3.5' is e-notation with a fractional exponent, which is no number: "
            "write the value",
        ),
        (
            "\\log 8 / \\log 3",
            "target '\\\\log 8 / \\\\log 3' applies a function to a bare argument before / or *, "
            "which reads two ways: bracket it (\\frac{\\log 8}{\\log 3} or \\log(8)/\\log(3))",
        ),
    ],
)
def test_the_contract_rejects_a_target_that_is_not_one_value(target, problem):
    assert verifier_problems(math(target)) == [problem]


def test_targets_that_are_one_value_pass_the_contract():
    for target in [
        "42",
        "-0.5",
        "3/4",
        "6/8",
        "\\frac{3}{4}",
        "95%",
        "1.25e+18",
        "\\frac{\\sqrt{2}}{2}",
        "\\pi",
        "2\\sqrt{3}",
        "$\\dfrac{242}{311}$",
    ]:
        assert verifier_problems(math(target)) == [], target


# ---------------------------------------------------------------- 4. the time bound

ADVERSARIAL = "10^{10^{10^{10}}}"  # sympy computes for minutes: always cut at the bound
ADVERSARIAL_TIMEOUT_S = 0.2  # its bound here: any bound cuts it, and kills its worker the same
# Honest answers, each earning 1: read by the worker (LaTeX) and in process (numbers).
HONEST = [
    ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"),
    ("\\boxed{\\frac{419}{533}}", "419/533"),
    ("\\left(1+\\sqrt{2}\\right)", "1+\\sqrt{2}"),
    ("2\\pi", "2\\pi"),
    ("0.75", "3/4"),
    ("\\sqrt{3} \\text{ cm}", "\\sqrt{3}"),
    ("((\\sqrt{2}))", "\\sqrt{2}"),
    ("\\frac{\\pi}{4}", "\\pi/4"),
    ("e^{2}", "e^2"),
    ("1.25e+18", "1250000000000000000"),
]
NUMBERS = {"\\boxed{\\frac{419}{533}}", "0.75", "1.25e+18"}  # of HONEST, the ones read in process


def _run(sequence):
    """Score a sequence of (answer, target): the honest answers' scores, in order (each
    adversarial one must score 0)."""
    honest = []
    for answer, target in sequence:
        if answer == ADVERSARIAL:
            assert math_reward(answer, target, timeout=ADVERSARIAL_TIMEOUT_S) == 0.0
        else:
            honest.append(math_reward(answer, target))
    return honest


ADV = (ADVERSARIAL, "\\sqrt{2}")
ORDERS = {
    "after one": [ADV] + HONEST,
    "after two in a row (the spare still starting)": [ADV, ADV] + HONEST,
    "reversed": [ADV] + HONEST[::-1],
    "in the middle": HONEST[:5] + [ADV] + HONEST[5:],
    "worker answers first": [ADV] + HONEST[::2] + HONEST[1::2],
}


@pytest.mark.parametrize("order", ORDERS)
def test_honest_answers_after_an_adversarial_one_all_earn_under_load(order, cpu_load):
    assert _run(ORDERS[order]) == [1.0] * len(HONEST)


def test_a_fresh_process_whose_first_answer_is_adversarial_scores_the_next_ten():
    """No worker yet: the first answer starts it (not counted), is cut, and the ten after it
    meet the spare, started with the first, and earn."""
    code = "from tests.rewards.test_math import ADV, HONEST, _run; print(_run([ADV] + HONEST))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=os.getcwd()
    )
    assert out.stdout.strip() == str([1.0] * len(HONEST)), out.stderr[-2000:]


def test_each_honest_answer_the_worker_reads_right_after_an_adversarial_one_earns():
    """Every honest answer the worker reads meets a worker that has just been killed (its spare
    still starting): the bound is on scoring, never on a start. No added load here: the bound is
    on the worker's processor time (the test above it holds load; each kill here waits for a
    spare's start, ~1 s of sympy, ~3 s under load). Numbers never meet the worker
    (test_numbers_never_wait_for_the_worker)."""
    worker_answers = [(a, t) for a, t in HONEST if a not in NUMBERS]
    sequence = [step for pair in zip([ADV] * len(worker_answers), worker_answers) for step in pair]
    assert _run(sequence) == [1.0] * len(worker_answers)


def test_an_answer_past_its_bound_scores_0_and_the_next_one_is_scored_on_its_own():
    start_math_worker()
    start = time.perf_counter()
    assert math_reward("\\sqrt{2}", "\\sqrt{2}", timeout=0.0) == 0.0  # no reply can come in 0 s
    assert time.perf_counter() - start < 1.0  # the worker killed, not waited for
    assert math_reward("\\sqrt{2}", "\\sqrt{2}") == 1.0  # waits for the spare, then scores


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_may_not_take_the_machines_memory():
    """Its address space is capped at its warm size plus MEMORY_HEADROOM, so an answer that would
    need more fails at once (MemoryError: it scores 0) instead of taking training's memory."""
    start_math_worker()
    pid = math_answers._workers[0].process.pid
    limits = Path(f"/proc/{pid}/limits").read_text().splitlines()
    soft, hard = next(line for line in limits if line.startswith("Max address space")).split()[3:5]
    size = psutil.Process(pid).memory_info().vms
    assert soft == hard and size < int(soft) <= size + MEMORY_HEADROOM
    grab = subprocess.run(
        [
            sys.executable,
            "-c",
            "from rlvr.rewards.math_worker import limit_memory\n"
            "limit_memory(256 << 20)\ntry:\n    bytearray(1 << 30)\nexcept MemoryError:\n"
            "    print('refused')",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert grab.stdout.strip() == "refused", grab.stderr


def test_a_stopped_worker_costs_one_completion_its_wall_clock_bound():
    """A worker that never replies and spends no processor time (stopped with SIGSTOP, as one
    starved on a machine far too busy looks from outside) costs that completion
    MATH_WALL_TIMEOUT_S, then is replaced."""
    start_math_worker()
    os.kill(math_answers._workers[0].process.pid, signal.SIGSTOP)
    start = time.perf_counter()
    assert math_reward("\\sqrt{2}", "\\sqrt{2}") == 0.0
    assert MATH_WALL_TIMEOUT_S <= time.perf_counter() - start < MATH_WALL_TIMEOUT_S + 1
    assert math_reward("\\sqrt{2}", "\\sqrt{2}") == 1.0


def test_the_bound_is_the_workers_processor_time_so_a_busy_machine_costs_no_score():
    """A worker that gets no processor time for longer than MATH_TIMEOUT_S (paused here, as on a
    machine busy with training: on 2 cores with 10 busy processes `((\\sqrt{2}))` took 0.18 s of
    the worker's time and 0.99 s of wall clock) still scores its answer."""
    start_math_worker()
    pid = math_answers._workers[0].process.pid
    pause = MATH_TIMEOUT_S + 0.5
    assert pause < MATH_WALL_TIMEOUT_S
    os.kill(pid, signal.SIGSTOP)
    start = time.perf_counter()
    threading.Timer(pause, os.kill, (pid, signal.SIGCONT)).start()
    assert math_reward("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2") == 1.0  # ~10 ms of its time
    assert time.perf_counter() - start >= pause
    assert math_answers._workers[0].process.pid == pid  # the same worker: not killed


@pytest.mark.parametrize("repeat", range(3))
def test_honest_latex_answers_earn_every_time_while_other_processes_keep_every_core_busy(
    repeat, cpu_load
):
    """The bound counts the worker's processor time, so the machine's load changes no score."""
    start_math_worker()
    worker_answers = [(a, t) for a, t in HONEST if a not in NUMBERS]
    assert [math_reward(a, t) for a, t in worker_answers] == [1.0] * len(worker_answers)


def test_a_completions_answers_go_to_the_worker_in_one_request_identical_ones_once(monkeypatch):
    """The bound holds per completion, not per `\\boxed{}`: its answers are one request with one
    bound, a value boxed twice is read once, and numbers never go (read in process)."""
    asked = []
    ask = math_answers._ask
    monkeypatch.setattr(
        math_answers,
        "_ask",
        lambda request, timeout: asked.append((request, timeout)) or ask(request, timeout),
    )
    twice = "\\boxed{\\sqrt{2}} so \\boxed{\\sqrt{2} \\text{ m}}, that is \\boxed{\\sqrt{2}}"
    assert math_reward(twice, "\\sqrt{2}", timeout=0.9) == 1.0
    assert [([r["answer"] for r in req["score"]], t) for req, t in asked] == [(["\\sqrt{2}"], 0.9)]
    asked.clear()
    two = "\\boxed{\\sqrt{2}}, or \\boxed{\\frac{\\sqrt{8}}{2}} \\boxed{1.5}"
    assert math_reward(two, "\\sqrt{2}") == 0.0  # 1.5 is not sqrt(2)
    assert [[r["answer"] for r in req["score"]] for req, _ in asked] == [
        ["\\sqrt{2}", "\\frac{\\sqrt{8}}{2}", "1.5"]
    ]
    asked.clear()
    assert math_reward("\\boxed{12} and \\boxed{12.0}", "12") == 1.0
    assert asked == []


def test_an_output_boxing_more_values_than_the_cap_states_no_answer():
    assert math_reward("\\boxed{12} " * MAX_MATH_ANSWERS, "12") == 1.0
    assert math_reward("\\boxed{12} " * (MAX_MATH_ANSWERS + 1), "12") == 0.0
    assert math_reward("\\boxed{\\sqrt{2}}" * (MAX_MATH_ANSWERS + 1), "\\sqrt{2}") == 0.0


def test_the_contracts_check_of_a_target_has_a_short_bound_of_its_own():
    """`10^{10^{10}}` held validate for 60 s: its check is cut at MATH_TARGET_TIMEOUT_S of the
    worker's processor time, and says so."""
    start_math_worker()
    start = time.perf_counter()
    problem = verifier_problems(math("10^{10^{10}}"))
    assert time.perf_counter() - start < MATH_WALL_TIMEOUT_S + 1
    assert problem == [
        f"target '10^{{10^{{10}}}}' took over {MATH_TARGET_TIMEOUT_S} s to read (the bound of a "
        "target): write its value in a simpler form"
    ]
    assert verifier_problems(math("\\frac{22}{7}\\pi^{3}")) == []  # the slowest honest one seen


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE  # ended, not yet reaped by its new parent
    except psutil.NoSuchProcess:
        return True


def test_a_worker_ends_with_the_process_that_started_it_even_mid_answer():
    """A scoring process killed while its worker computes (sympy holds the interpreter's lock on
    `10^{10^{10^{10}}}` for minutes, reading no stdin) leaves no worker behind, busy or spare."""
    code = (
        "from rlvr.rewards import math_answers as m\n"
        "m.start_math_worker()\n"
        "print(*[w.process.pid for w in m._workers], flush=True)\n"
        f"m.math_reward({ADVERSARIAL!r}, '\\\\sqrt{{2}}', timeout=600)\n"
    )
    scorer = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    try:
        workers = [psutil.Process(int(pid)) for pid in scorer.stdout.readline().split()]
        assert len(workers) == 2
        busy = workers[0].cpu_times().user
        deadline = time.monotonic() + 30
        while workers[0].cpu_times().user < busy + 0.5 and time.monotonic() < deadline:
            time.sleep(0.1)  # until the worker is deep in the answer
        assert workers[0].cpu_times().user >= busy + 0.5
    finally:
        scorer.kill()
        scorer.wait()
    deadline = time.monotonic() + 10
    while not all(_gone(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(w) for w in workers)


def test_numbers_never_wait_for_the_worker():
    """Numbers written as numbers are read in the scoring process: no worker, no bound."""
    start_math_worker()
    os.kill(math_answers._workers[0].process.pid, signal.SIGSTOP)
    try:
        start = time.perf_counter()
        assert scores(["\\boxed{42}", "4.2e+1", "84/2"], math("42")) == [1.0, 1.0, 0.0]
        assert [math_reward(a, t) for a, t in HONEST if a in NUMBERS] == [1.0] * len(NUMBERS)
        assert time.perf_counter() - start < 0.1
    finally:
        os.kill(math_answers._workers[0].process.pid, signal.SIGCONT)


def test_math_works_off_the_main_thread_and_in_two_processes():
    cases = [
        ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\sqrt{3}/2"),
        ("7", "8"),
        ("\\boxed{3/4}", "0.75"),
        ("\\sqrt{5}", "\\sqrt{6}"),
    ] * 2
    with ThreadPoolExecutor(4) as threads:
        assert list(threads.map(math_reward, *zip(*cases))) == [1.0, 0.0] * 4
    with ProcessPoolExecutor(2) as processes:  # each process starts its own worker
        assert list(processes.map(math_reward, *zip(*cases))) == [1.0, 0.0] * 4
