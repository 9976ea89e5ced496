"""The `math` verifier's time per answer, worst case included: adversarial answers (towers of
exponents, factorials, deep nesting, long noise, the gate's LaTeX mixes) and honest ones, scored
one after another in one process, then from 4 threads at once; prints the median and the maximum.

    ./dev run python scripts/math_verifier_times.py [--answers 400]
"""

import argparse
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from rlvr.rewards.math_answers import MATH_TIMEOUT_S, math_reward, start_math_worker

PIECES = ["\\boxed{", "\\frac{", "}{", "}", "^{", "10", "9", "!", "\\sqrt{", "x", "=", "(", ")",
          "\\cdot", "\\left(", "\\right)", "e", "\\pi", "%"]
CRAFTED = ["2^{2^{2^{2^{2^{100}}}}}", "10^{10^{10^{10}}}", "99999999999!", "9" * 999,
           "(" * 20 + "1" + ")" * 20, "\\frac{" * 10 + "1" + "}{2}" * 10, "x^{x^{x^{x^{x}}}}=3",
           "\\boxed{" + "+".join(["1"] * 300) + "}", "e^{e^{e^{e^{e}}}}", "\\sqrt{" * 19 + "2" + "}" * 19]
HONEST = ["\\boxed{42}", "The answer is 3/4.", "<answer>0.75</answer>", "75%", "\\frac{3}{4}"]


def timed(answer: str) -> float:
    start = time.perf_counter()
    math_reward(answer, "\\frac{3}{4}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=400)
    args = parser.parse_args()
    rng = random.Random(0)
    answers = CRAFTED + HONEST + ["".join(rng.choices(PIECES, k=rng.randint(1, 300)))
                                  for _ in range(args.answers)]
    started = time.perf_counter()
    start_math_worker()
    print(f"worker start: {time.perf_counter() - started:.2f} s")
    times = [timed(a) for a in answers]  # most random mixes nest too deep: 0 unparsed, at once
    print(f"one thread: {len(times)} answers, median {statistics.median(times) * 1000:.1f} ms, "
          f"max {max(times):.3f} s (bound {MATH_TIMEOUT_S} s), "
          f"{sum(t >= MATH_TIMEOUT_S for t in times)} cut at the bound")
    with ThreadPoolExecutor(4) as pool:
        times = list(pool.map(timed, answers))
    # the threads queue for the process's one worker: each waits for the others' answers too
    print(f"4 threads: max {max(times):.3f} s per call (queueing for the one worker included)")
    honest = [timed(a) for a in HONEST]
    print(f"honest answers: max {max(honest) * 1000:.1f} ms")
    for answer in CRAFTED:
        print(f"  {timed(answer) * 1000:7.1f} ms  {answer[:40]!r}")


if __name__ == "__main__":
    main()
