"""Registries: verifier types (what a row's `verifier` may be) and reward functions (what a recipe lists).

A recipe names reward functions (`rewards.funcs` in params.yaml); `build_reward_funcs` turns the
names into TRL-compatible callables `(prompts, completions, **columns) -> list[float | None]`.
Each one dispatches on the row's verifier, never raises (a failure scores that sample None, is
counted, logged once per row id, and reported to TRL as the metric `rewards/<name>/failures`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import regex

from rlvr.core.metric_keys import reward_failures
from rlvr.params.config import ParamsError
from rlvr.rewards.math_answers import math_reward, math_target_problem, swallowing_tolerance
from rlvr.rewards.math_values import MAX_SIG_FIGS, Tolerance
from rlvr.rewards.math_worker import MAX_MATH_TARGET_CHARS
from rlvr.rewards.shaping import length_reward
from rlvr.rewards.verifiers import (
    MAX_COUNTDOWN_NUMBERS,
    countdown_reward,
    exact_match_reward,
    extract_answer,
    format_reward,
)

if TYPE_CHECKING:
    from rlvr.params.config import RewardsParams

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- verifier types


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _is_number_list(value: Any) -> bool:
    # Non-negative: answers have no unary minus, so a negative number could never be written.
    return (
        isinstance(value, list)
        and 1 <= len(value) <= MAX_COUNTDOWN_NUMBERS
        and all(_is_int(v) and v >= 0 for v in value)
    )


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value == value
        and abs(value) != float("inf")
    )


def _compiles(value: Any) -> bool:
    try:
        regex.compile(value)
        return True
    except (regex.error, TypeError):
        return False


@dataclass(frozen=True)
class FieldRule:
    """One field of a verifier type: whether it must be present, and the rule its value obeys."""

    check: Callable[[Any], bool]
    rule: str
    required: bool = True


@dataclass(frozen=True)
class VerifierType:
    """A kind of verifier: the fields a row must give, how an answer is scored, and the rules
    that need more than one field or more than a yes/no (run once every field obeys its own)."""

    fields: Mapping[str, FieldRule]
    score: Callable[[str, Mapping[str, Any]], float]
    problems: Callable[[Mapping[str, Any]], list[str]] = lambda verifier: []


def _math_problems(verifier: Mapping[str, Any]) -> list[str]:
    problems = []
    if "sig_figs" in verifier and ("rel_tol" in verifier or "abs_tol" in verifier):
        problems.append("sig_figs cannot be combined with rel_tol or abs_tol: state one rule")
    target = math_target_problem(verifier["target"])
    if not target and "abs_tol" in verifier:
        problems += swallowing_tolerance(verifier["target"], verifier["abs_tol"])
    return problems + ([f"target {target}"] if target else [])


VERIFIERS: dict[str, VerifierType] = {
    "countdown": VerifierType(
        fields={
            "numbers": FieldRule(
                _is_number_list,
                f"a list of 1-{MAX_COUNTDOWN_NUMBERS} non-negative integers "
                "(answers have no unary minus)",
            ),
            "target": FieldRule(_is_int, "an integer"),
            "allow_division": FieldRule(
                lambda v: isinstance(v, bool), "true or false", required=False
            ),
        },
        score=lambda answer, v: countdown_reward(
            answer, v["numbers"], v["target"], v.get("allow_division", False)
        ),
    ),
    "exact_match": VerifierType(
        fields={"target": FieldRule(_is_nonempty_str, "a non-empty string")},
        score=lambda answer, v: exact_match_reward(extract_answer(answer), v["target"]),
    ),
    "regex": VerifierType(
        fields={"pattern": FieldRule(_is_nonempty_str, "a non-empty string")},
        score=lambda answer, v: format_reward(answer, v["pattern"]),
    ),
    "math": VerifierType(  # compared by value (rlvr.rewards.math_answers; docs/data.md)
        fields={
            "target": FieldRule(
                lambda v: _is_nonempty_str(v) and len(v) <= MAX_MATH_TARGET_CHARS,
                "one value: a number, fraction, percentage or LaTeX closed form "
                f"(a string of at most {MAX_MATH_TARGET_CHARS} characters)",
            ),
            "rel_tol": FieldRule(
                lambda v: _is_number(v) and 0 < v < 1,
                "a number between 0 and 1 (exclusive)",
                required=False,
            ),
            "abs_tol": FieldRule(
                lambda v: _is_number(v) and v > 0, "a positive number", required=False
            ),
            "sig_figs": FieldRule(
                lambda v: _is_int(v) and 1 <= v <= MAX_SIG_FIGS,
                f"an integer from 1 to {MAX_SIG_FIGS}",
                required=False,
            ),
            "allow_expressions": FieldRule(
                lambda v: isinstance(v, bool), "true or false", required=False
            ),
        },
        score=lambda answer, v: math_reward(
            answer,
            v["target"],
            tolerance=Tolerance.of(v),
            allow_expressions=v.get("allow_expressions", False),
        ),
        problems=_math_problems,
    ),
}


def verifier_problems(verifier: Any) -> list[str]:
    """Why a verifier dict is malformed (empty list when it is well formed).

    >>> verifier_problems({"type": "countdown", "numbers": [3, 5], "target": 15})
    []
    >>> verifier_problems({"type": "countdown", "numbers": [3, "5"]})
    ['numbers must be a list of 1-6 non-negative integers (answers have no unary minus)', 'target is missing']
    """
    if not isinstance(verifier, Mapping):
        return ["verifier must be an object"]
    kind = verifier.get("type")
    if kind not in VERIFIERS:
        return [f"type {kind!r} is not one of {sorted(VERIFIERS)}"]
    problems = []
    spec = VERIFIERS[kind]
    for name, rule in spec.fields.items():
        if name not in verifier:
            if rule.required:
                problems.append(f"{name} is missing")
        elif not rule.check(verifier[name]):
            problems.append(f"{name} must be {rule.rule}")
    extra = sorted(set(verifier) - set(spec.fields) - {"type"})
    if extra:
        problems.append(f"unknown field(s) {extra} for type {kind}")
    return problems or spec.problems(verifier)


def score_correctness(answer: str, verifier: Mapping[str, Any]) -> float:
    """Score one answer with the row's own verifier (dispatch on its type).

    >>> score_correctness("3*5", {"type": "countdown", "numbers": [3, 5], "target": 15})
    1.0
    """
    return VERIFIERS[verifier["type"]].score(answer, verifier)


# --------------------------------------------------------------------------- reward functions


def completion_text(completion: Any) -> str:
    """Plain text of a TRL completion: a string, or a conversational list of messages."""
    if isinstance(completion, str):
        return completion
    return "".join(str(message.get("content", "")) for message in completion)


def as_verifier(value: Any) -> Mapping[str, Any]:
    """A verifier column value: a dict, or its JSON text (how mixed types survive Arrow)."""
    return json.loads(value) if isinstance(value, str) else value


# Score one sample: (completion text, the row's verifier, completion length in tokens) -> reward.
SampleScorer = Callable[[str, Mapping[str, Any], int], float]


class RewardFunction:
    """A TRL reward function built from a per-sample scorer; it never raises.

    TRL calls it with prompts, completions, completion_ids, every dataset column (we need
    `verifier`, and `id` to name failing rows) and `log_metric`.
    """

    def __init__(self, name: str, scorer: SampleScorer) -> None:
        self.__name__ = name  # TRL names the reward's metrics after it
        self.scorer = scorer
        self.failures = 0
        self._logged_rows: set[str] = set()

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        verifiers = columns.get("verifier") or [None] * len(completions)
        ids = columns.get("id") or [f"#{i}" for i in range(len(completions))]
        rewards: list[float | None] = []
        batch_failures = 0
        for i, completion in enumerate(completions):
            try:
                text = completion_text(completion)
                n_tokens = len(completion_ids[i]) if completion_ids is not None else len(text)
                rewards.append(float(self.scorer(text, as_verifier(verifiers[i]), n_tokens)))
            except Exception as error:  # noqa: BLE001 - a reward must never crash training
                rewards.append(None)
                batch_failures += 1
                row = str(ids[i])
                if row not in self._logged_rows:
                    self._logged_rows.add(row)
                    log.warning(
                        "reward %s failed on row %s (scored None): %s: %s",
                        self.__name__,
                        row,
                        type(error).__name__,
                        error,
                    )
        self.failures += batch_failures
        log_metric = columns.get("log_metric")
        if callable(log_metric):
            log_metric(reward_failures(self.__name__), float(batch_failures))
        return rewards

    def peek(self, completion: Any, verifier: Any, n_tokens: int) -> float | None:
        """One completion's score, None where the scorer raises, counting and logging nothing:
        the trainer's look before TRL scores the batch (off-policy guidance)."""
        try:
            return float(self.scorer(completion_text(completion), as_verifier(verifier), n_tokens))
        except Exception:  # noqa: BLE001 - TRL's scoring of the same completion reports it
            return None


def _correctness(params: RewardsParams) -> SampleScorer:
    return lambda text, verifier, n_tokens: score_correctness(text, verifier)


def _format(params: RewardsParams) -> SampleScorer:
    pattern = regex.compile(params.format_pattern)
    return lambda text, verifier, n_tokens: format_reward(text, pattern)


def _length(params: RewardsParams) -> SampleScorer:
    p = params.length
    return lambda text, verifier, n_tokens: length_reward(
        n_tokens, score_correctness(text, verifier) == 1.0, p.lam, p.l_min, p.l_max, p.l_target
    )


REWARD_FUNCS: dict[str, Callable[[RewardsParams], SampleScorer]] = {
    "correctness": _correctness,
    "format": _format,
    "length": _length,
}


def check_reward_names(funcs: Sequence[str]) -> None:
    """Raise ParamsError unless every name is in REWARD_FUNCS (every stage checks this first).

    >>> check_reward_names(["correctness", "vibes"])
    Traceback (most recent call last):
    ...
    rlvr.core.errors.ParamsError: params.yaml: rewards.funcs = ['correctness', 'vibes']: unknown reward function(s) ['vibes']; known: ['correctness', 'format', 'length']
    """  # noqa: E501 (one-line outputs and tables)
    unknown = [name for name in funcs if name not in REWARD_FUNCS]
    if unknown:
        raise ParamsError(
            f"params.yaml: rewards.funcs = {list(funcs)!r}: unknown reward "
            f"function(s) {unknown}; known: {sorted(REWARD_FUNCS)}"
        )


def build_reward_funcs(params: RewardsParams) -> list[RewardFunction]:
    """The reward functions a recipe lists, in order (weights stay in params.rewards.weights)."""
    check_reward_names(params.funcs)
    return [RewardFunction(name, REWARD_FUNCS[name](params)) for name in params.funcs]


def normalized_weights(weights: Sequence[float]) -> list[float]:
    """Reward weights scaled to sum 1: TRL sums weighted rewards, so its logged `reward` is then
    the weighted mean that compose_rewards defines.

    >>> normalized_weights([1.0, 0.25])
    [0.8, 0.2]
    """
    total = sum(weights)
    if total <= 0:
        raise ValueError(f"reward weights must have a positive sum, got {list(weights)}")
    return [w / total for w in weights]
