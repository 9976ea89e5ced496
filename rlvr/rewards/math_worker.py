"""The process that reads `math` values with sympy (rlvr.rewards.math_answers starts one per
scoring process and talks to it): one JSON request per line on stdin, one JSON reply per line on
stdout. It says `ready` once its slow paths are warm, and ends when its stdin closes, or, mid
answer, when the scoring process that started it has ended (see `die_with`).

    python -m rlvr.rewards.math_worker PID      (started by math_answers, not by hand)

Only what the scoring process cannot decide alone comes here: a target or an answer that is not a
number written as one (`\\frac{\\sqrt{2}}{2}`, `\\pi/4`, or arithmetic on a row with
`allow_expressions`). LaTeX is read by latex2sympy2_extended (math-verify's parser: an ANTLR
grammar; nothing is evaluated as Python), values compare exactly with sympy unless the row states
a tolerance.

Requests: `{"score": [{...}, ...]}` -> 1 when every answer scores (see `score`; one completion's
answers, under one bound), else 0; `{"target": text}` -> "" or the reason the text is not one
value (see `target_problem`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from fractions import Fraction

import psutil

from rlvr.rewards.math_values import Tolerance

MAX_MATH_TARGET_CHARS = 200  # a target is a value: a number, a fraction, a short expression
_DIGITS = 60  # evalf precision for a stated tolerance: far past any sig_figs the contract allows


# A decimal literal, read as the exact fraction it writes (the parser's own reading is a binary
# float: `0.1 + 0.2` would not be 0.3); e-notation is read by the scoring process, not here.
_EXACT_DECIMAL = re.compile(r"(?<![\d.])(\d*)\.(\d+)(?![\d.])")
# e-notation with a fractional exponent (`1e+3.5`): no number, and the parser reads e as Euler's
_FRACTIONAL_EXPONENT = re.compile(r"\d\s*[eE]\s*[+-]?\s*\d*\.\d")


# A power of 1 (`e^1`, `e^{1}`) is arithmetic left to do, which the parser computes unseen (E).
_POWER_ONE = re.compile(r"\^\s*(?:1|\{\s*1\s*\})(?![\d.])")


# A function on a bare argument before `/` or `*` (`\log 8 / \log 2`): the parser reads
# log(8/log(2)), a reader log(8)/log(2); such text is no value until brackets say which.
_BARE_CALL = re.compile(
    r"\\(?:ln|lg|log|exp|sin|cos|tan|sec|csc|cot|arcsin|arccos|arctan|sinh|cosh|tanh)"
    r"(?:\s*_\s*(?:\{[^{}]*\}|\w))?\s*(?:\d+(?:\.\d+)?|[A-Za-z]|\\pi)\s*(?:/|\*|\\cdot|\\times)"
)


def _as_fraction(match: re.Match) -> str:
    whole, decimals = match.groups()
    return f"(\\frac{{{int(whole + decimals)}}}{{{10 ** len(decimals)}}})"


def read_value(text: str):
    """latex2sympy's reading of `text` as one constant value (a sympy Expr), or None: not LaTeX,
    free symbols (words read as products of letters), a set, a tuple, a relation, infinity."""
    # sympy and latex2sympy here and below, not at the top: ~0.9 s to import, paid only by the
    # worker process; the scoring process imports this module for its name and a constant
    import sympy
    from latex2sympy2_extended.latex2sympy2 import latex2sympy

    if _BARE_CALL.search(text):
        return None
    try:
        expr = latex2sympy(_EXACT_DECIMAL.sub(_as_fraction, text))
    except Exception:  # noqa: BLE001 - text that does not parse is not a value
        return None
    if (
        not isinstance(expr, sympy.Expr)
        or expr.free_symbols
        or expr.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan)
    ):
        return None
    return expr


def exact_value(pair: str):
    """A rational value sent as "p/q" by the scoring process (read there, exactly)."""
    import sympy

    value = Fraction(pair)
    return sympy.Rational(value.numerator, value.denominator)


def is_final(expr) -> bool:
    """A final value, not arithmetic left to do: not rational (a rational value is final only
    written as a number, which the scoring process reads itself), and no more operations than
    its simplest form, expanded or not (`\\sqrt{8}/4` is, `2\\pi - \\pi` is not), counting the
    operations its written form stands for (see `as_written`)."""
    import sympy

    simplest = sympy.simplify(expr.doit())
    if simplest.is_rational:
        return False
    # simplify may keep a power of a sum ((1+\sqrt{2})^2): its expansion is simpler (3+2\sqrt{2})
    fewest = min(sympy.count_ops(as_written(form)) for form in (simplest, sympy.expand(simplest)))
    return sympy.count_ops(as_written(expr)) <= fewest


def as_written(expr):
    """`expr` with the operations its form stands for made visible to sympy.count_ops: a natural
    log is one call (`\\ln 2` reads as log(2, E), two operations); a function call that
    evaluates to another form is that form's operations and the call (`\\sin(\\pi/4)` is
    `\\sqrt{2}/2` and more, `\\arcsin 1` is `\\pi/2` and more); an integer power of a sum or a
    product is the products it stands for (`(1+\\sqrt{2})^2` is `(1+\\sqrt{2})(1+\\sqrt{2})`)."""
    import sympy

    if expr.is_Atom:
        return expr
    args = [as_written(arg) for arg in expr.args]
    if isinstance(expr, sympy.log) and len(expr.args) == 2 and expr.args[1] == sympy.E:
        return sympy.log(args[0], evaluate=False)
    if isinstance(expr, sympy.Function):
        value = expr.func(*expr.args)  # evaluated: sin(pi/4) -> sqrt(2)/2
        if not value.has(expr.func):
            return _call(as_written(value))
    if expr.is_Pow and expr.exp.is_Integer and expr.exp > 1 and not expr.base.is_Atom:
        return sympy.Mul(*[args[0]] * int(expr.exp), evaluate=False)
    try:
        return expr.func(*args, evaluate=False)
    except TypeError:  # a head that takes no `evaluate`: counted as it is
        return expr


def _call(*args):
    import sympy

    return sympy.Function("call")(*args)


def _fraction(expr) -> Fraction | None:
    import sympy

    value = sympy.N(expr, _DIGITS)
    if not value.is_real:
        return None
    return Fraction(str(sympy.Float(value, _DIGITS)))


def equal(answer, target, tolerance: Tolerance) -> bool:
    import sympy

    if tolerance.exact:
        return sympy.simplify(answer - target) == 0
    answer_value, target_value = _fraction(answer), _fraction(target)
    return (
        answer_value is not None
        and target_value is not None
        and tolerance.close(answer_value, target_value)
    )


def score(request: dict) -> int:
    """1 when the answer's value equals the target's (within the stated tolerance), else 0.
    `answer` / `target`: LaTeX to read; `answer_value` / `target_value`: exact "p/q" instead;
    `allow_expressions`: arithmetic answers count; `tolerance`: Tolerance's fields."""
    target = (
        exact_value(request["target_value"])
        if request.get("target_value")
        else read_value(request["target"])
    )
    if request.get("answer_value"):
        answer = exact_value(request["answer_value"])
    else:
        answer = read_value(request["answer"])
        final = not _POWER_ONE.search(request["answer"]) and answer is not None and is_final(answer)
        if answer is None or not (request.get("allow_expressions") or final):
            return 0
    tolerance = Tolerance(
        **{
            name: Fraction(value) if value is not None and name != "sig_figs" else value
            for name, value in request["tolerance"].items()
        }
    )
    return int(target is not None and equal(answer, target, tolerance))


def target_problem(text: str) -> str:
    """Why `text` is not one value a target can be ("" when it is): "not a value", "arithmetic"
    (a rational value not written as a number, decimals included), "division by zero", "not
    real", "fractional exponent", "bare call"."""
    import sympy

    if _FRACTIONAL_EXPONENT.search(text):
        return "fractional exponent"
    if _BARE_CALL.search(text):
        return "bare call"
    expr = read_value(text)
    if expr is None:
        return "not a value"
    value = expr.doit()
    if value.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        return "division by zero"
    if sympy.N(value).is_real is not True:
        return "not real"
    if sympy_rational(expr):
        return "arithmetic"
    return ""


def sympy_rational(expr) -> bool:
    import sympy

    return bool(sympy.simplify(expr.doit()).is_rational)


def reply(request: dict):
    if "target" in request and "score" not in request:
        return target_problem(request["target"])
    return int(all(score(answer) for answer in request["score"]))


# The slow paths' first calls (imports inside sympy and the parser, brackets, words, LaTeX,
# simplify, evalf) are paid here, before `ready`, not by the first answers' time bound.
WARM_UP = [
    {
        "score": [
            {"answer": "\\sqrt{8}/4", "target": "\\frac{\\sqrt{2}}{2}", "tolerance": {}},
            {
                "answer": "((1+\\sqrt{2}))",
                "target": "\\left(1+\\sqrt{2}\\right)",
                "tolerance": {"rel_tol": "1/1000"},
            },
            {"answer": "3 \\text{ apples}", "target": "\\pi", "tolerance": {"sig_figs": 3}},
        ]
    },
    {"score": [{"answer": "[2, 3]", "answer_value": None, "target": "e^{2}", "tolerance": {}}]},
    {"score": [{"answer": "\\sin(\\pi/4)", "target": "\\ln 2 + 0.5", "tolerance": {}}]},
    {"target": "2 \\times 3"},
]

WATCH_INTERVAL_S = 0.2  # how soon a worker ends after the scoring process that started it
# What a worker may allocate past its warm size: one value needs megabytes; an answer such as
# `2^{2^{40}}` would need terabytes and fails at once instead of swapping the machine.
MEMORY_HEADROOM = 1 << 30


def die_with(parent: int) -> None:
    """Fork a watcher that kills this worker as soon as it is no longer `parent`'s child (the
    scoring process ended, however: a crash, SIGKILL, an out-of-memory kill). Its stdin closing
    ends it only between answers, and on one answer sympy can hold the interpreter's lock in a
    single C call for minutes (`10^{10^{10}}`), so no thread of its own could. The watcher ends
    with the worker. Forked here, before sympy is imported and before any thread: small, safe."""
    worker = os.getpid()
    if os.fork() != 0:
        return
    try:
        os.close(0)  # not the worker's pipes: its parent must see them close when it ends
        os.close(1)
        watched = psutil.Process(worker)
        while os.getppid() == worker and watched.ppid() == parent:
            time.sleep(WATCH_INTERVAL_S)
        if os.getppid() == worker:  # the worker lives on, orphaned: end it
            os.kill(worker, signal.SIGKILL)
    except Exception:  # noqa: BLE001 - the worker already gone: nothing to watch
        pass
    finally:
        os._exit(0)


def limit_memory(headroom: int = MEMORY_HEADROOM) -> int:
    """Cap this worker's address space at its warm size plus `headroom` (RLIMIT_AS, soft and
    hard): an answer that would take more fails with MemoryError, which scores 0, instead of
    taking the machine's memory from training. The limit, in bytes."""
    import resource

    limit = psutil.Process().memory_info().vms + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return limit


def main() -> None:
    if len(sys.argv) > 1:
        die_with(int(sys.argv[1]))
    for request in WARM_UP:
        reply(request)
    limit_memory()
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            result = reply(json.loads(line))
        except Exception:  # noqa: BLE001 - any failure scores 0; the worker carries on
            result = 0
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
