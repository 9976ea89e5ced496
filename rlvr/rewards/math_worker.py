"""The process that scores `math` answers with math-verify (rlvr.rewards.math_answers starts one
per scoring process and talks to it): one JSON request per line on stdin, `[answer, target]`,
one reply per line on stdout, 1 or 0. It says `ready` once math-verify is imported, and ends when
its stdin closes (its parent ended).

    python -m rlvr.rewards.math_worker      (started by math_answers, not by hand)

Here, on this process's main thread, math-verify's own signal-based timeouts work too.
"""

from __future__ import annotations

import json
import sys

MAX_MATH_TARGET_CHARS = 200  # a target is a value: a number, a fraction, a short expression


def parse_target(target: str) -> list:
    """math-verify's reading of a target: bare (a number, a fraction, a percentage), else as an
    inline LaTeX expression; [] when it is not short, or not a value (words parse as a product
    of letters: a value has no free symbols).

    >>> [str(v) for v in parse_target("1/2")], [str(v) for v in parse_target("\\\\sqrt{2}")]
    (['1/2', '1/2'], ['sqrt(2)', '\\\\sqrt{2}'])
    >>> parse_target(""), parse_target("three quarters")
    ([], [])
    """
    from math_verify import parse

    if not isinstance(target, str) or not target.strip() or len(target) > MAX_MATH_TARGET_CHARS:
        return []
    parsed = parse(target) or parse(f"${target}$")
    return [] if not parsed or getattr(parsed[0], "free_symbols", None) else parsed


def score(answer: str, target: str) -> int:
    """1 when math-verify finds the answer's value equal to the target's, else 0."""
    from math_verify import parse, verify

    gold = parse_target(target)
    # bare LaTeX (`\\frac{1}{2}` with no `$`) is read as math too, as the target is
    return int(bool(gold) and verify(gold, parse(answer) or parse(f"${answer}$")))


def main() -> None:
    score("\\boxed{\\frac{1}{2}}", "50%")  # the start's slow part (imports, first parse) before `ready`
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            answer, target = json.loads(line)
            result = score(answer, target)
        except Exception:  # noqa: BLE001 - any failure scores 0; the worker carries on
            result = 0
        print(result, flush=True)


if __name__ == "__main__":
    main()
