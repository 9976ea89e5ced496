"""The reward registry: TRL-compatible functions that dispatch on each row's verifier and never raise."""

import json
import logging

import pytest

from rlvr.params.config import RewardsParams
from rlvr.rewards.registry import (
    REWARD_FUNCS,
    VERIFIERS,
    RewardFunction,
    build_reward_funcs,
    check_reward_names,
)

COUNTDOWN = {"type": "countdown", "numbers": [3, 5], "target": 15}
EXACT = {"type": "exact_match", "target": "Paris"}
REGEX = {"type": "regex", "pattern": r"^\d+$"}


def _funcs(**overrides):
    return {f.__name__: f for f in build_reward_funcs(RewardsParams(**overrides))}


def test_registries_hold_the_documented_names():
    assert set(VERIFIERS) == {"countdown", "exact_match", "regex", "math"}
    assert {"correctness", "format", "length"} <= set(REWARD_FUNCS)


def test_correctness_dispatches_on_each_rows_verifier_type():
    correctness = _funcs()["correctness"]
    rewards = correctness(
        prompts=["p1", "p2", "p3", "p4"],
        completions=["3*5", "Paris", "123", "5+3"],
        verifier=[COUNTDOWN, EXACT, REGEX, COUNTDOWN],
        id=["a", "b", "c", "d"],
    )
    assert rewards == [1.0, 1.0, 1.0, 0.0]


def test_verifier_may_arrive_as_json_text_and_completions_as_messages():
    correctness = _funcs()["correctness"]
    rewards = correctness(
        prompts=[[{"role": "user", "content": "q"}]],
        completions=[[{"role": "assistant", "content": "3*5"}]],
        verifier=[json.dumps(COUNTDOWN)],
        id=["a"],
    )
    assert rewards == [1.0]


def test_names_become_trl_metric_names():
    from trl.trainer.utils import get_callable_name

    funcs = build_reward_funcs(
        RewardsParams(funcs=["correctness", "format", "length"], weights=[1, 1, 1])
    )
    assert [get_callable_name(f) for f in funcs] == ["correctness", "format", "length"]


def test_length_term_uses_completion_token_counts():
    length = _funcs(funcs=["length"], weights=[1.0])["length"]
    rewards = length(
        prompts=["p", "p"],
        completions=["3*5", "3+5"],
        completion_ids=[[1, 2, 3], [1] * 12],
        verifier=[COUNTDOWN, COUNTDOWN],
        id=["a", "a"],
    )
    # correct, 3 tokens: 0.5 * (12 - 3) / (12 - 1); wrong, 12 tokens: -0.5 * (12 - 8) / (12 - 8)
    assert rewards == pytest.approx([0.5 * 9 / 11, -0.5])


def test_failures_score_none_are_counted_and_logged_once_per_row(caplog):
    correctness = _funcs()["correctness"]
    metrics = []
    broken = {"type": "countdown", "numbers": [3, 5]}  # no target: the verifier raises KeyError
    with caplog.at_level(logging.WARNING):
        rewards = correctness(
            prompts=["p"] * 4,
            completions=["3*5"] * 4,
            verifier=[broken, broken, COUNTDOWN, {"type": "nope"}],
            id=["bad", "bad", "ok", "unknown"],
            log_metric=lambda name, value: metrics.append((name, value)),
        )
    assert rewards == [None, None, 1.0, None]
    assert correctness.failures == 3
    assert metrics == [("rewards/correctness/failures", 3.0)]
    logged = [r.getMessage() for r in caplog.records if "failed on row" in r.getMessage()]
    assert len(logged) == 2 and "row bad" in logged[0] and "row unknown" in logged[1]


def test_a_raising_scorer_never_escapes():
    def explode(text, verifier, n_tokens):
        raise RuntimeError("boom")

    func = RewardFunction("explode", explode)
    assert func(prompts=["p"], completions=["x"], verifier=[COUNTDOWN], id=["r"]) == [None]
    assert func.failures == 1


def test_params_reject_unknown_reward_names_and_mismatched_weights():
    from rlvr.params.config import ParamsError

    params = RewardsParams(funcs=["correctness", "vibes"], weights=[1, 1])  # config has no registry
    with pytest.raises(
        ParamsError, match=r"rewards.funcs = .*: unknown reward function\(s\) \['vibes'\]"
    ):
        check_reward_names(params.funcs)
    with pytest.raises(ParamsError, match="unknown reward function"):
        build_reward_funcs(params)
    with pytest.raises(ParamsError, match="one weight per reward function"):
        RewardsParams(funcs=["correctness", "format"], weights=[1])
    with pytest.raises(ParamsError, match="must sum to more than 0"):
        RewardsParams(funcs=["correctness", "format"], weights=[0, 0])
