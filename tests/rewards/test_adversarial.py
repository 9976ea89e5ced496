"""Property test: arbitrary text never crashes a verifier or a reward function, and never hangs."""

import time

from hypothesis import given
from hypothesis import strategies as st

from rlvr.params.config import RewardsParams
from rlvr.rewards.math_answers import MATH_WALL_TIMEOUT_S, math_reward, start_math_worker
from rlvr.rewards.registry import build_reward_funcs
from rlvr.rewards.verifiers import countdown_reward, exact_match_reward, format_reward

FORMAT = RewardsParams().format_pattern
ALL_FUNCS = build_reward_funcs(
    RewardsParams(funcs=["correctness", "format", "length"], weights=[1, 1, 1])
)
VERIFIERS = [
    {"type": "countdown", "numbers": [3, 5], "target": 15},
    {"type": "countdown", "numbers": [6, 2, 4], "target": 2, "allow_division": True},
    {"type": "exact_match", "target": "42"},
    {"type": "regex", "pattern": r"^(\d+\s*[-+*/]\s*)+\d+$"},
    {"type": "math", "target": "\\frac{3}{4}"},  # numbers: read in the scoring process
    {"type": "math", "target": "\\frac{\\sqrt{2}}{2}"},  # the rest: the worker, under its bound
    {"type": "math", "target": "12", "allow_expressions": True},  # arithmetic: the worker too
]
# Arithmetic-looking text reaches deeper into the countdown parser than random unicode does.
arithmetic = st.text(alphabet="0123456789+-*/() .eE_jx<>answer", max_size=400)
anything = st.text(max_size=2000)
huge = st.builds(
    lambda ch, n: ch * n, st.sampled_from(["9", "(", "*", "a", " "]), st.integers(0, 100_000)
)
# LaTeX that asks sympy for huge or deeply nested work: towers, factorials, nested fractions.
latex = st.builds(
    lambda parts: "".join(parts),
    st.lists(
        st.sampled_from(
            [
                "\\boxed{",
                "\\frac{",
                "}{",
                "}",
                "^{",
                "10",
                "9",
                "!",
                "\\sqrt{",
                "x",
                "=",
                "(",
                ")",
                "\\cdot",
                "\\left(",
                "\\right)",
                "e",
                "\\pi",
                "%",
            ]
        ),
        max_size=300,
    ),
)
texts = st.one_of(arithmetic, anything, huge, latex)
BOUND_S = 2.0  # far above the ~1 ms a verifier takes; only a hang or blow-up breaks it
# The math worker's bound is on scoring, never on a start: after a completion that cost a worker
# its life, the next example first waits for the spare, outside its timing. Each completion's
# answers, however many boxes, get up to 1 s of its processor time together, which a loaded
# machine stretches up to MATH_WALL_TIMEOUT_S.


def bound(worker_answers: int) -> float:
    """An example's bound: the verifiers' own, and each completion the math worker reads."""
    return BOUND_S + worker_answers * MATH_WALL_TIMEOUT_S


@given(texts)
def test_every_verifier_returns_a_score_in_bounded_time(text):
    start_math_worker()
    start = time.perf_counter()
    scores = [
        countdown_reward(text, [3, 5], 15),
        countdown_reward(text, [6, 2, 4], 2, allow_division=True),
        exact_match_reward(text, "42"),
        format_reward(text, FORMAT),
        math_reward(text, "\\frac{3}{4}"),
        math_reward(text, "\\frac{\\sqrt{2}}{2}"),
    ]
    assert time.perf_counter() - start < bound(worker_answers=2)
    assert all(s in (0.0, 1.0) for s in scores)


@given(texts, st.sampled_from(VERIFIERS))
def test_every_reward_function_returns_a_float_per_completion(text, verifier):
    start_math_worker()
    start = time.perf_counter()
    for func in ALL_FUNCS:
        rewards = func(
            prompts=["p"],
            completions=[text],
            completion_ids=[[0] * len(text)],
            verifier=[verifier],
            id=["row"],
        )
        assert len(rewards) == 1 and isinstance(rewards[0], float)
    # correctness and length each score a math answer
    assert time.perf_counter() - start < bound(
        worker_answers=2 if verifier["type"] == "math" else 0
    )
