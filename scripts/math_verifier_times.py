"""The `math` verifier's time per answer, worst case included, on this machine and under load
(two busy processes per core): honest answers of every path (numbers read in process, LaTeX read
by the worker, a fresh worker's first bracketed answer), bracket nesting depth by depth (what
MAX_MATH_NESTING is set from), and adversarial answers; prints each time and the bound. Times are
the worker's processor time, the clock of the bound (MATH_TIMEOUT_S), and the wall clock.

    ./dev run python scripts/math_verifier_times.py [--no-load] [--max-depth 12]
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager

from rlvr.rewards import math_answers
from rlvr.rewards.math_answers import (
    MATH_TARGET_TIMEOUT_S,
    MATH_TIMEOUT_S,
    MATH_WALL_TIMEOUT_S,
    MAX_MATH_NESTING,
    math_reward,
    math_target_problem,
    start_math_worker,
)

# targets honest (the slowest seen last) and not: the contract reads each in the worker
TARGETS = ["\\frac{\\sqrt{2}}{2}", "\\log_2 3", "\\frac{22}{7}\\pi^{3}", "10^{10^{10}}"]
PIECES = [
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
CRAFTED = [
    "2^{2^{2^{2^{2^{100}}}}}",
    "10^{10^{10^{10}}}",
    "99999999999!",
    "9" * 999,
    "(" * 6 + "\\sqrt{2}" + ")" * 6,
    "\\frac{" * 6 + "\\sqrt{2}" + "}{2}" * 6,
    "x^{x^{x^{x^{x}}}}=3",
    "\\boxed{" + "+".join(["\\sqrt{2}"] * 100) + "}",
    "e^{e^{e^{e^{e}}}}",
    "\\sqrt{" * 6 + "2" + "}" * 6,
    "9^{9^{9^{9}}}",
]
# (answer, target): every one scores 1; the first three are read in process, the rest by the worker
HONEST = [
    ("\\boxed{42}", "42"),
    ("The answer is 3/4.", "0.75"),
    ("<answer>1.25e+18</answer>", "1250000000000000000"),
    ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"),
    ("\\left(1+\\sqrt{2}\\right)", "1+\\sqrt{2}"),
    ("2\\pi", "\\pi \\cdot 2"),
    ("\\sqrt{3} \\text{ cm}", "\\sqrt{3}"),
    ("((\\sqrt{2}))", "\\sqrt{2}"),
]
# Answers nested `depth` deep (nesting depth + 1 with \sqrt{}'s braces), one per kind of bracket
# (the parser's slow paths).
NESTED = {
    "parentheses": lambda d: "(" * d + "\\sqrt{2}" + ")" * d,
    "braces": lambda d: "{" * d + "\\sqrt{2}" + "}" * d,
    "fractions": lambda d: "\\frac{" * d + "\\sqrt{2}" + "}{1}" * d,
    "roots": lambda d: "\\sqrt{" * d + "2" + "}" * d,
}


@contextmanager
def load(on: bool):
    cores = len(os.sched_getaffinity(0))
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(2 * cores if on else 0)
    ]
    try:
        time.sleep(0.3 if on else 0)
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()


def timed(answer: str, target: str, timeout: float = MATH_TIMEOUT_S) -> tuple[float, float, float]:
    """(score, seconds of the worker's processor time, seconds of wall clock) of scoring; a cut
    answer's processor time is the bound's (its worker is gone). A spare worker still starting
    after a kill is waited for first, outside the time (the bound is never on a worker's start)."""
    start_math_worker()
    worker = math_answers._workers[0]
    spent = worker.cpu_seconds()
    start = time.perf_counter()
    score = math_reward(answer, target, timeout=timeout)
    wall = time.perf_counter() - start
    return score, min(worker.cpu_seconds() - spent, timeout), wall


def ms(seconds: tuple[float, float]) -> str:
    return f"{seconds[0] * 1000:6.0f} ms ({seconds[1] * 1000:5.0f} wall)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-load", action="store_true", help="measure on an idle machine")
    parser.add_argument("--max-depth", type=int, default=12)
    parser.add_argument("--random", type=int, default=200, help="random LaTeX mixes to score")
    args = parser.parse_args()
    with load(not args.no_load):
        print(
            f"load: {'none' if args.no_load else f'{2 * len(os.sched_getaffinity(0))} busy processes'}"
            f"; bound {MATH_TIMEOUT_S} s of the worker's processor time per completion (at most "
            f"{MATH_WALL_TIMEOUT_S} s of wall clock); nesting cap {MAX_MATH_NESTING}"
        )
        started = time.perf_counter()
        start_math_worker()
        print(f"worker start (warm-up included): {time.perf_counter() - started:.2f} s")
        print("honest answers, a fresh worker's first ones included:")
        for answer, target in HONEST:
            score, *seconds = timed(answer, target)
            print(f"  {ms(seconds)}  score {score}  {answer!r}")
        print(
            f"nesting (parse and score with no bound; the cap holds answers to depth "
            f"{MAX_MATH_NESTING}):"
        )
        print("  depth  " + "  ".join(f"{kind:>22}" for kind in NESTED))
        math_answers.MAX_MATH_NESTING = args.max_depth + 1  # measure past the cap
        for depth in range(1, args.max_depth + 1):
            times = [timed(make(depth), "\\sqrt{2}", timeout=30)[1:] for make in NESTED.values()]
            print(f"  {depth:5}  " + "  ".join(ms(t) for t in times))
        math_answers.MAX_MATH_NESTING = MAX_MATH_NESTING
        rng = random.Random(0)
        mixes = ["".join(rng.choices(PIECES, k=rng.randint(1, 300))) for _ in range(args.random)]
        times = [timed(answer, "\\sqrt{2}")[1:] for answer in CRAFTED + mixes]
        cpu, wall = zip(*times)
        print(
            f"adversarial ({len(times)}: crafted and random LaTeX mixes): median "
            f"{statistics.median(cpu) * 1000:.1f} ms, max {max(cpu):.3f} s (wall {max(wall):.3f} "
            f"s), {sum(t >= MATH_TIMEOUT_S for t in cpu)} cut at the bound"
        )
        for answer in CRAFTED:
            score, *seconds = timed(answer, "\\sqrt{2}")
            print(f"  {ms(seconds)}  score {score}  {answer[:40]!r}")
        print(f"the contract's target check (bound {MATH_TARGET_TIMEOUT_S} s of processor time):")
        for target in TARGETS:
            start_math_worker()  # a spare after a cut: its start is no target's time
            worker = math_answers._workers[0]
            spent, start = worker.cpu_seconds(), time.perf_counter()
            problem = math_target_problem(target)
            seconds = min(worker.cpu_seconds() - spent, MATH_TARGET_TIMEOUT_S)
            print(f"  {ms((seconds, time.perf_counter() - start))}  {target!r} {problem[:50]!r}")
        worst = max(timed(answer, target)[1] for answer, target in HONEST * 3)
        print(f"honest answers after all that: max {worst * 1000:.1f} ms of the worker's time")


if __name__ == "__main__":
    main()
