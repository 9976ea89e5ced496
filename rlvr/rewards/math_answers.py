"""The `math` verifier: an answer scored against its target by value, exactly unless the row
states a tolerance; only a final answer, and only one, earns it (the rules: rlvr.rewards.math_values
and docs/data.md).

Numbers written as numbers (`0.75`, `3/4`, `\\frac{3}{4}`, `75%`, `1.25e+18`), most answers and
targets, are read and compared here, exactly (rlvr.rewards.math_values: no sympy, microseconds).
The rest (`\\frac{\\sqrt{2}}{2}`, `\\pi`, arithmetic on a row that allows expressions) goes to
a worker process that reads LaTeX with sympy (rlvr.rewards.math_worker).

Time bound. sympy can compute for minutes on adversarial text, and its parser's and
math-verify's own timeouts use `signal.alarm`, which fails outside the main thread (where a
reward may run). So each completion's answers go to the worker in one request (identical ones
once, at most MAX_MATH_ANSWERS of them), which gets at most MATH_TIMEOUT_S of the worker's
processor time (and MATH_WALL_TIMEOUT_S of wall clock: a worker stopped or starved); a worker
still busy past either is killed, the completion scores 0, and a spare worker, already starting,
takes the next one. Processor time, not wall clock, so that a correct answer earns on a busy
machine too: on 2 cores with 10 busy processes, `((\\sqrt{2}))` took 0.18 s of the worker's time
and 0.99 s of wall clock, a wall-clock bound of 1 s away from scoring it 0 (a training step keeps
every core busy). The bound is on scoring, never on a worker's start: a completion that finds the
spare still starting waits for it (at most WORKER_START_TIMEOUT_S) and is then scored on its own
merits, so no score depends on the completion before. A target's check in the contract has its
own bound, MATH_TARGET_TIMEOUT_S. A worker ends with the process that started it, mid answer too
(math_worker.die_with). Any thread, any process (each rank has its own worker). Not
multiprocessing: its spawn start re-imports the caller's main module (a stage's: torch and TRL)
in the worker, and a Pool restarts a worker that dies on start without end. The verifier never
raises.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import psutil

from rlvr.rewards import math_worker
from rlvr.rewards.math_values import (
    APPROXIMATION,
    ELLIPSIS,
    Literal,
    Tolerance,
    clean,
    final_answers,
    read_literal,
    several_values,
)
from rlvr.rewards.verifiers import extract_answer

MATH_TIMEOUT_S = 1.0  # the worker's processor time per answer it reads: a sane one takes 0-200 ms
# (the worker is warm: its start ran every slow path)
MATH_WALL_TIMEOUT_S = 5.0  # wall clock per answer, for a worker that gets no processor time
WORKER_START_TIMEOUT_S = 60.0  # a worker's start imports sympy and warms up (~2 s; more loaded)
# The contract's check of a target (validate): its own processor time. Honest targets take 1-130 ms
# (\frac{22}{7}\pi^{3} the slowest seen); each answer's scoring reads its target again, so a
# target that passes leaves most of MATH_TIMEOUT_S to the answer.
MATH_TARGET_TIMEOUT_S = 0.5
# An output boxing more values than this states no final answer (an honest one boxes one, maybe
# twice): scored 0 unread, so that no output costs more than one bound of reading.
MAX_MATH_ANSWERS = 8
# An output (or its <answer> block) past this is not searched for boxes: no answer is that long.
MAX_MATH_OUTPUT_CHARS = 100_000
# Deeper bracket nesting than this scores 0 unparsed: no final value is written so, and the
# parser's time grows steeply with it. scripts/math_verifier_times.py, 2 busy processes per core
# on 2 cores (2026-12-07), the worker's processor time: the worst bracket kind (braces) 630 ms at
# 6, the cap, within MATH_TIMEOUT_S; 1.13 s at 7 and 0.99 s at 8, at or past it.
MAX_MATH_NESTING = 6


def nesting(text: str) -> int:
    """How deep brackets of any kind nest in `text`.

    >>> nesting("\\frac{(1+2)}{3}"), nesting("((((")
    (2, 4)
    """
    depth = deepest = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth = max(depth - 1, 0)
    return deepest


class _Worker:
    """One math_worker process and the bytes it has written but not yet been asked for."""

    def __init__(self) -> None:
        self.pid = os.getpid()  # the process that started it: a forked child starts its own
        self.process = subprocess.Popen(  # it ends with this process (math_worker.die_with)
            [sys.executable, "-m", math_worker.__name__, str(self.pid)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.usage = psutil.Process(self.process.pid)
        self.pending = b""
        self.ready = False

    def cpu_seconds(self) -> float:
        """The worker's processor time so far (infinite once it has ended)."""
        try:
            times = self.usage.cpu_times()
        except psutil.Error:
            return float("inf")
        return times.user + times.system

    def reply(self, timeout: float, cpu_until: float | None = None) -> bytes | None:
        """The worker's next line, or None if none came within `timeout` seconds of wall clock
        or, with `cpu_until`, before the worker's processor time reached it."""
        deadline = time.monotonic() + timeout
        out = self.process.stdout.fileno()
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if cpu_until is not None:
                to_spend = cpu_until - self.cpu_seconds()
                if to_spend <= 0:
                    return None
                left = min(left, to_spend)  # one thread: it cannot spend that sooner
            if left <= 0:
                return None
            if not select.select([out], [], [], left)[0]:
                continue  # the wall clock or the processor time checked again above
            chunk = os.read(out, 4096)
            if not chunk:  # the worker ended
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.strip()

    def wait_ready(self, timeout: float) -> bool:
        """Is the worker ready, waiting at most `timeout` seconds? (False: still starting.)"""
        if not self.ready:
            line = self.reply(timeout)
            if line is None and self.process.poll() is None:
                return False
            if line != b"ready":
                raise RuntimeError("the math worker did not start")
            self.ready = True
        return True

    def ask(self, request: str, cpu_timeout: float) -> bytes | None:
        """The reply to `request`, or None past `cpu_timeout` seconds of the worker's processor
        time or MATH_WALL_TIMEOUT_S of wall clock (the larger of the two, for a longer bound)."""
        cpu_until = self.cpu_seconds() + cpu_timeout
        self.process.stdin.write(request.encode() + b"\n")
        self.process.stdin.flush()
        return self.reply(max(MATH_WALL_TIMEOUT_S, cpu_timeout), cpu_until=cpu_until)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


_lock = threading.Lock()
# This process's worker and a spare already starting, which takes over at once when the worker
# is killed (a start takes ~1 s: a run of slow answers must not pay it each time).
_workers: list[_Worker] = []


def _ready_worker() -> _Worker:
    """This process's worker, ready: a spare that took over from a killed worker, or the first
    one, is waited for here, at most WORKER_START_TIMEOUT_S; that wait is not an answer's."""
    if _workers and _workers[0].pid != os.getpid():
        _workers.clear()  # a forked child: those are its parent's
    if not _workers:
        _workers.extend([_Worker(), _Worker()])
    if not _workers[0].wait_ready(WORKER_START_TIMEOUT_S):
        raise RuntimeError("the math worker did not start")
    return _workers[0]


def _replace_worker() -> None:
    if _workers and _workers[0].pid == os.getpid():
        _workers.pop(0).stop()
        _workers.append(_Worker())  # the next spare starts now


def start_math_worker() -> None:
    """Start this process's worker (and its spare) now and wait for it (the gate's tests do, so
    that their own timing holds no start; training pays it on its first worker answer)."""
    with _lock:
        _ready_worker()


def _ask(request: Mapping[str, Any], timeout: float) -> Any:
    """The worker's reply to one request, or None: past `timeout` seconds of the worker's
    processor time on it, or MATH_WALL_TIMEOUT_S of wall clock (the worker is then killed and the
    spare takes over), or on any failure."""
    with _lock:  # one worker per process: its requests go one at a time
        try:
            worker = _ready_worker()
            line = worker.ask(json.dumps(request), timeout)
        except Exception:  # noqa: BLE001 - a reward never raises: a failure scores 0
            line = None
        if line is None:  # too slow, or the worker died
            _replace_worker()
            return None
        return json.loads(line)


def _exact(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def _target_literal(target: str) -> Literal | None:
    """A target written as a number (a fraction need not be in lowest terms)."""
    return read_literal(clean(target), reduced=False)


def math_reward(
    output: str,
    target: str,
    timeout: float = MATH_TIMEOUT_S,
    tolerance: Tolerance = Tolerance(),
    allow_expressions: bool = False,
) -> float:
    """1.0 when the output states one final answer (every `\\boxed{}` in it, else the text) whose
    value is the target's, exactly or within `tolerance`, else 0.0. 0.0 too past `timeout` seconds
    of the worker's processor time (or MATH_WALL_TIMEOUT_S of wall clock) on the output's answers,
    all of them together; on more than MAX_MATH_ANSWERS boxes, an answer longer than
    math_values.MAX_ANSWER_CHARS or nested deeper than MAX_MATH_NESTING; or on any failure.
    `allow_expressions`: arithmetic (`4*3`) is an answer.

    >>> math_reward("so the answer is \\\\boxed{\\\\frac{1}{2}}", "0.5")
    1.0
    >>> math_reward("<answer>50%</answer>", "1/2"), math_reward("41", "42"), math_reward("6*7", "42")
    (1.0, 0.0, 0.0)
    """
    if (
        not isinstance(output, str)
        or not isinstance(target, str)
        or len(extract_answer(output)) > MAX_MATH_OUTPUT_CHARS
    ):
        return 0.0
    answers = final_answers(output)
    if not answers or len(answers) > MAX_MATH_ANSWERS:
        return 0.0
    gold = _target_literal(target)
    for_worker = []
    for answer in dict.fromkeys(answers):  # a value stated twice is read once
        verdict = _answer_scores(answer, target, gold, tolerance, allow_expressions)
        if verdict is False:
            return 0.0
        if verdict is not True:
            for_worker.append(verdict)
    if for_worker and _ask({"score": for_worker}, timeout) != 1:
        return 0.0
    return 1.0


def _answer_scores(
    answer: str,
    target: str,
    gold: Literal | None,
    tolerance: Tolerance,
    allow_expressions: bool,
) -> bool | dict[str, Any]:
    """Does `answer` earn the target, decided here, or the worker's request that decides it?"""
    if nesting(answer) > MAX_MATH_NESTING or several_values(answer):
        return False
    literal = read_literal(answer, reduced=not allow_expressions)
    if literal is not None and gold is not None:
        return bool(
            tolerance.close(literal.value, gold.value)
            or (
                gold.percent
                and not literal.percent
                and tolerance.close(literal.value, gold.value * 100)
            )
        )
    if literal is None and gold is not None and not allow_expressions:
        return False  # a rational target's answer is final only written as a number
    return {
        "answer": answer,
        "target": clean(target),
        "allow_expressions": allow_expressions,
        "answer_value": _exact(literal.value) if literal else None,
        "target_value": _exact(gold.value) if gold else None,
        "tolerance": tolerance.as_json(),
    }


# the worker's reasons a target is no value (math_worker.target_problem), as the contract says them
_TARGET_PROBLEMS = {
    "division by zero": "divides by zero: it has no value",
    "not real": "is not a real number: a target is a real value",
    "fractional exponent": (
        "is e-notation with a fractional exponent, which is no number: write the value"
    ),
    "bare call": (
        "applies a function to a bare argument before / or *, which reads two ways: bracket it "
        "(\\frac{\\log 8}{\\log 3} or \\log(8)/\\log(3))"
    ),
}


def math_target_problem(target: Any) -> str:
    """Why a `math` target is not one value the verifier reads ("" when it is), in words that
    finish "target ...": the contract's rule.

    >>> math_target_problem("\\\\frac{3}{4}"), math_target_problem("1.25e+18")
    ('', '')
    >>> math_target_problem("2 × 2 × 5 × 7 × 7")
    "'2 × 2 × 5 × 7 × 7' is arithmetic or a product, not one value written as one: write its value (a factorization or a list needs exact_match or regex)"
    """  # noqa: E501 (one-line outputs and tables)
    if (
        not isinstance(target, str)
        or not target.strip()
        or len(target) > math_worker.MAX_MATH_TARGET_CHARS
    ):
        return (
            f"must be a non-empty string of at most {math_worker.MAX_MATH_TARGET_CHARS} characters"
        )
    if APPROXIMATION.search(target):
        return (
            f"{target!r} is an approximation: a target is the exact value (\\pi, not 3.14), "
            "with rel_tol, abs_tol or sig_figs for how close an answer must be"
        )
    if ELLIPSIS.search(target):
        return (
            f"{target!r} is not written out (an ellipsis): write the exact value "
            "(\\frac{1}{3}, not 0.333...), or a decimal with rel_tol, abs_tol or sig_figs"
        )
    text = clean(target)
    if several_values(text):
        return (
            f"{target!r} holds several values: a math target is one value (several "
            "values need several rows, or an exact_match or regex verifier)"
        )
    gold = _target_literal(target)
    plain = _plain_reading_problem(target, gold)
    if plain is not None:
        return plain
    if gold is not None:
        return ""
    if nesting(text) > MAX_MATH_NESTING:
        return f"{target!r} nests brackets deeper than {MAX_MATH_NESTING}"
    problem = _ask({"target": text}, MATH_TARGET_TIMEOUT_S)
    if problem == "":
        return ""
    if problem is None:
        return (
            f"{target!r} took over {MATH_TARGET_TIMEOUT_S} s to read (the bound of a target): "
            "write its value in a simpler form"
        )
    if problem in _TARGET_PROBLEMS:
        return f"{target!r} {_TARGET_PROBLEMS[problem]}"
    if problem == "arithmetic":
        return (
            f"{target!r} is arithmetic or a product, not one value written as one: write "
            "its value (a factorization or a list needs exact_match or regex)"
        )
    return (
        f"{target!r} is not one value: a number, a fraction, a percentage or a closed form "
        "such as \\frac{\\sqrt{2}}{2}"
    )


def swallowing_tolerance(target: str, abs_tol: float) -> list[str]:
    """The contract's rule for `abs_tol`: below the size of a target written as a number (other
    than 0), else an answer of 0 earns the row.

    >>> swallowing_tolerance("0.003", 0.01)
    ["abs_tol 0.01 is at least the target's size (0.003), so an answer of 0 would earn it: give a smaller abs_tol, or rel_tol"]
    >>> swallowing_tolerance("0.003", 0.001), swallowing_tolerance("0", 0.01)
    ([], [])
    """  # noqa: E501 (a one-line output)
    gold = _target_literal(target)
    if gold is None or gold.value == 0 or Fraction(str(abs_tol)) < abs(gold.value):
        return []
    return [
        f"abs_tol {abs_tol} is at least the target's size ({target}), so an answer of 0 would "
        "earn it: give a smaller abs_tol, or rel_tol"
    ]


def _plain_reading_problem(target: str, gold: Literal | None) -> str | None:
    """A target that is a plain decimal number (e-notation included) must read as that number:
    "" when it does, the problem when not, None when the target is not a plain decimal."""
    try:
        plain = Decimal(target.strip())
    except InvalidOperation:
        return None
    if not plain.is_finite():
        return f"{target!r} is not a finite number"
    if gold is None or Fraction(plain) != gold.value:
        read = "no number" if gold is None else str(gold.value)
        return f"{target!r} reads as {read}, not as its plain decimal value {plain}"
    return ""
