"""The `math` verifier: an answer scored against its target (a number, fraction, percentage or
LaTeX expression) by value with HF's math-verify, as open-r1's accuracy reward does: `\\boxed{}`
answers, plain numbers, fractions and percentages compare by what they are worth, not by text.

Time bound. sympy can compute for minutes on adversarial text, and math-verify's own timeouts use
`signal.alarm`, which fails outside the main thread (where a reward may run). So the answers go
to a worker process (rlvr.rewards.math_worker, one per scoring process, started on first use),
and each answer gets at most MATH_TIMEOUT_S of wall clock; a worker still busy past it is
killed, the answer scores 0 and a spare worker, already starting, takes the next answer (an
answer that finds the spare still starting within its own bound scores 0 too: the bound holds
for every call, not just the unlucky one). Any thread, any process
(each rank has its own worker). Not multiprocessing: its spawn start re-imports the caller's
main module (a stage's: torch and TRL) in the worker, and a Pool restarts a worker that dies on
start without end. The verifier never raises.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time

from rlvr.rewards import math_worker
from rlvr.rewards.verifiers import extract_answer

MATH_TIMEOUT_S = 0.5  # per answer: a sane one parses and compares in milliseconds (the worker
# is warm: its start parsed an answer); a quarter of the gate's 2 s per adversarial example
WORKER_START_TIMEOUT_S = 60.0  # a worker's start imports sympy and math-verify (~1-2 s)
# Longer answers score 0 unparsed: a final answer is short, and parsing time grows with length.
MAX_MATH_ANSWER_CHARS = 1_000
# Deeper bracket nesting than this scores 0 unparsed: no final value is written so, and parsing
# such text takes math-verify most of a second.
MAX_MATH_NESTING = 20


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
        self.process = subprocess.Popen(
            [sys.executable, "-m", math_worker.__name__], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.pending = b""
        self.ready = False

    def reply(self, timeout: float) -> bytes | None:
        """The worker's next line, or None if none came within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        out = self.process.stdout.fileno()
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return None
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
                raise RuntimeError("the math-verify worker did not start")
            self.ready = True
        return True

    def ask(self, answer: str, target: str, timeout: float) -> bytes | None:
        self.process.stdin.write(json.dumps([answer, target]).encode() + b"\n")
        self.process.stdin.flush()
        return self.reply(timeout)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


_lock = threading.Lock()
# This process's worker and a spare already starting, which takes over at once when the worker
# is killed (a start takes ~1 s: a run of slow answers must not pay it each time).
_workers: list[_Worker] = []


def _ready_worker() -> _Worker:
    """This process's worker: the first one is waited for (the process pays its start once); a
    spare that took over may still be starting (math_reward's bound covers that wait)."""
    if _workers and _workers[0].pid != os.getpid():
        _workers.clear()  # a forked child: those are its parent's
    if not _workers:
        _workers.extend([_Worker(), _Worker()])
        if not _workers[0].wait_ready(WORKER_START_TIMEOUT_S):
            raise RuntimeError("the math-verify worker did not start")
    return _workers[0]


def _replace_worker() -> None:
    if _workers and _workers[0].pid == os.getpid():
        _workers.pop(0).stop()
        _workers.append(_Worker())  # the next spare starts now


def start_math_worker() -> None:
    """Start this process's worker (and its spare) now and wait for it, so that the first
    answer's time bound is its own (the gate's tests do; training pays the start once). A spare
    that took over from a killed worker is waited for too."""
    with _lock:
        if not _ready_worker().wait_ready(WORKER_START_TIMEOUT_S):
            raise RuntimeError("the math-verify worker did not start")


def math_reward(output: str, target: str, timeout: float = MATH_TIMEOUT_S) -> float:
    """1.0 when the answer (the last `<answer>` block, else the whole output) has the target's
    value by math-verify, else 0.0; 0.0 past `timeout` seconds, on an answer longer than
    MAX_MATH_ANSWER_CHARS or nested deeper than MAX_MATH_NESTING, or on any failure.

    >>> math_reward("so the answer is \\\\boxed{\\\\frac{1}{2}}", "0.5")
    1.0
    >>> math_reward("<answer>50%</answer>", "1/2"), math_reward("41", "42")
    (1.0, 0.0)
    """
    return _scored(extract_answer(output) if isinstance(output, str) else "", target, timeout)


def math_target_parses(target: str) -> bool:
    """Does math-verify read the target as a value (it then equals itself)? The contract's rule.

    >>> math_target_parses("\\\\frac{3}{4}"), math_target_parses("three quarters")
    (True, False)
    """
    return isinstance(target, str) and len(target) <= math_worker.MAX_MATH_TARGET_CHARS and \
        _scored(target, target, WORKER_START_TIMEOUT_S) == 1.0


def _scored(answer: str, target: str, timeout: float) -> float:
    if (not isinstance(answer, str) or not answer.strip() or len(answer) > MAX_MATH_ANSWER_CHARS
            or nesting(answer) > MAX_MATH_NESTING or not isinstance(target, str)):
        return 0.0
    with _lock:  # one worker per process: its answers go one at a time
        try:
            worker = _ready_worker()  # the first start of this process's worker is not counted
            started = time.monotonic()
            if not worker.wait_ready(timeout):  # a spare still starting: no time left to score
                return 0.0
            reply = worker.ask(answer, target, max(timeout - (time.monotonic() - started), 0))
        except Exception:  # noqa: BLE001 - a reward never raises: a failure scores 0
            reply = None
        if reply is None:  # too slow, or the worker died: the spare takes the next answer
            _replace_worker()
            return 0.0
        return 1.0 if reply == b"1" else 0.0
