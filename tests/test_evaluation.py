"""Evaluation: seeded sampling, the paired bootstrap CI and verdict, KL between policies, audit."""

import json
import math
import weakref
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from rlvr.audit.evaluation import audit, policy_kl
from rlvr.audit.slices import overall_verdict as verdict
from rlvr.core.stats import paired_ci
from rlvr.data.rows import read_rows
from rlvr.params.config import RewardsParams, load_params
from rlvr.policy.models import build_char_tokenizer, load_policy
from rlvr.policy.sampling import (
    SampleSettings,
    generate,
    greedy_settings,
    rollout_settings,
    sampling_calls,
    score_rows,
    summarize,
)
from rlvr.policy.verified import BATCH_SEQUENCES, completions_budget
from rlvr.rewards.registry import build_reward_funcs

ROOT = Path(__file__).resolve().parents[1]


def test_paired_ci_brackets_the_mean_and_decides_the_verdict():
    gains = [0.1, 0.3, 0.2, 0.25, 0.15, 0.2, 0.3, 0.1] * 4
    ci = paired_ci(gains, n_resamples=2000)
    assert ci["ci_low"] < ci["value"] < ci["ci_high"] and ci["ci_low"] > 0
    assert verdict(ci) == "improved"
    assert verdict(paired_ci([-g for g in gains], n_resamples=2000)) == "regressed"
    assert (
        verdict(paired_ci([0.2, -0.2, 0.1, -0.1, 0.05, -0.05] * 4, n_resamples=2000))
        == "no significant change"
    )
    assert paired_ci([0.0] * 10) == {"value": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p_value": 1.0}


def _moved(folder):
    """The tiny policy with every weight nudged: a "trained" policy that differs from it."""
    moved, tokenizer = load_policy(folder)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.05 * torch.randn_like(p, generator=torch.Generator().manual_seed(1)))
    return moved, tokenizer


@pytest.fixture(scope="module")
def policies(tiny_policy_dir):
    return {"step0": load_policy(tiny_policy_dir), "final": _moved(tiny_policy_dir)}


def test_same_seed_same_samples(policies):
    model, tokenizer = policies["step0"]
    rows = read_rows(ROOT / "data" / "grpo_train.jsonl")[:4]
    funcs = build_reward_funcs(RewardsParams())
    settings = SampleSettings(n=3, seed=7, max_new_tokens=5)
    first = score_rows(model, tokenizer, rows, funcs, [0.8, 0.2], settings)
    again = score_rows(model, tokenizer, rows, funcs, [0.8, 0.2], settings)
    assert [r.completions for r in first] == [r.completions for r in again]
    assert summarize(first)["samples"] == 12


def test_sampling_in_calls_bounded_by_tokens(policies):
    """runtime.sampling_chunk_tokens: a bound that does not bind samples the same bytes as none;
    one that binds splits the prompts and a prompt's samples into calls (sampling_calls), each
    at most the bound, and still draws every prompt's n completions."""
    model, tokenizer = policies["step0"]
    rows = read_rows(ROOT / "data" / "grpo_train.jsonl")[:5]
    prompts = [row.prompt for row in rows]
    plain = SampleSettings(n=6, seed=7, max_new_tokens=5)
    loose = replace(plain, chunk_tokens=len(rows) * 6 * (14 + 5))  # the padded width is <= 14+5
    assert generate(model, tokenizer, prompts, loose) == generate(model, tokenizer, prompts, plain)
    lengths = [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    for bound in (3 * (max(lengths) + 5), 2 * 6 * (max(lengths) + 5)):  # samples split; prompts
        tight = replace(plain, chunk_tokens=bound)
        calls = sampling_calls(lengths, 6, 5, plain.batch_prompts, bound)
        assert len(calls) > 1
        assert all(
            (last - first) * each * (max(lengths[first:last]) + 5) <= bound
            for first, last, each in calls
        )
        drawn = generate(model, tokenizer, prompts, tight)
        assert [len(texts) for texts, _ in drawn] == [6] * len(rows)
        assert all(len(ids) <= 5 for _, token_ids in drawn for ids in token_ids)


def test_the_defaults_sampling_calls_are_not_split_by_the_chunk_bound():
    """params.yaml's runtime.sampling_chunk_tokens leaves every sampling call of the default as
    it was (so its bytes stay): smoke's step-0 baseline and train's validation, verified's
    budget and evaluate, on the default data and tokenizer."""
    params = load_params(ROOT / "params.yaml")
    rows = {
        name: read_rows(ROOT / path) for name, path in vars(params.data).items() if "path" in name
    }
    tokenizer = build_char_tokenizer()
    grpo = params.train.grpo
    budget = completions_budget(
        params.train.max_steps,
        grpo.per_device_train_batch_size,
        grpo.gradient_accumulation_steps,
        grpo.num_iterations,
        params.train.processes,
        len(rows["train_path"]),
    )
    verified = rollout_settings(params, n=budget.samples_per_prompt)
    verified.batch_prompts = max(1, BATCH_SEQUENCES // verified.n)
    evaluated = rollout_settings(params, n=params.evaluate.samples)
    widest = 0
    for settings in (rollout_settings(params), evaluated, greedy_settings(evaluated), verified):
        for split in rows.values():
            lengths = [
                len(tokenizer(r.prompt, add_special_tokens=False)["input_ids"]) for r in split
            ]
            args = (lengths, settings.n, settings.max_new_tokens, settings.batch_prompts)
            assert sampling_calls(*args, settings.chunk_tokens) == sampling_calls(*args, None)
            widest = max(
                widest,
                *(
                    (last - first) * n * (max(lengths[first:last]) + settings.max_new_tokens)
                    for first, last, n in sampling_calls(*args, None)
                ),
            )
    assert widest <= 66_000 < params.runtime.sampling_chunk_tokens  # as its help says


def test_policy_kl_is_zero_against_itself_and_positive_after_a_change(policies):
    (base, tokenizer), (moved, _) = policies["step0"], policies["final"]
    rows = read_rows(ROOT / "data" / "grpo_train.jsonl")[:3]
    scored = score_rows(
        moved,
        tokenizer,
        rows,
        build_reward_funcs(RewardsParams()),
        [0.8, 0.2],
        SampleSettings(n=2, seed=0, max_new_tokens=5),
    )
    assert policy_kl(moved, moved, tokenizer, scored) == pytest.approx(0.0, abs=1e-6)
    assert policy_kl(moved, base, tokenizer, scored) > 1e-4


def test_audit_has_the_documented_shape(policies):
    train = read_rows(ROOT / "data" / "grpo_train.jsonl")[:4]
    held = read_rows(ROOT / "data" / "grpo_test.jsonl")[:4]
    metrics, per_prompt = audit(
        policies,
        {"train": train, "heldout": held},
        build_reward_funcs(RewardsParams()),
        [0.8, 0.2],
        SampleSettings(n=2, seed=3, max_new_tokens=5),
        RewardsParams().format_pattern,
        n_resamples=500,
    )
    for split in ("train", "heldout"):
        m = metrics[split]
        for policy in ("step0", "final"):
            assert {
                "greedy_success",
                "mean_reward",
                "mean_length",
                "malformed_share",
                "rewards",
            } <= set(m[policy])
        assert set(m["delta_mean_reward"]) == {"value", "ci_low", "ci_high", "p_value"}
        assert m["kl_final_vs_step0"] > 0
        assert list(m["pass_at_k"]["step0"]) == ["1", "2"] and "delta_pass@2" in m
        assert {s["tag"] for s in m["slices"]} == {
            t for r in (train if split == "train" else held) for t in r.tags
        }
        assert {"lost", "new", "kept"} <= set(m["solutions"])
        for policy in ("step0", "final"):  # a random policy is far from certain
            assert m["diversity"][policy]["entropy"] > 0.1
    assert metrics["verdict"] in ("improved", "no significant change", "regressed", "mixed")
    assert metrics["verdict_split"] == "heldout"
    assert metrics["verdict_line"].startswith(metrics["verdict"] + ": ")
    assert len(per_prompt) == 8
    row = per_prompt[0]
    assert row["delta"] == pytest.approx(row["final_reward"] - row["step0_reward"])
    assert {"step0_greedy", "final_greedy", "step0_success", "final_success"} <= set(row)
    for row in per_prompt:
        assert row["tags"] and row["samples"] == 2
        for policy in ("step0", "final"):
            # the verifier's count agrees with the correctness reward's mean
            assert row[f"{policy}_correct"] == round(2 * row[f"{policy}_success"])
            assert 1 <= row[f"{policy}_distinct"] <= 2
            assert row[f"{policy}_distinct_correct"] <= row[f"{policy}_correct"]
            assert row[f"{policy}_tokens"] > 0 and row[f"{policy}_entropy"] >= 0


def test_audit_loads_one_policy_at_a_time_and_gets_the_same_bytes(policies, tiny_policy_dir):
    """Policies given as functions are loaded one at a time (the final first, let go before the
    base loads: evaluate never holds two models) and audit to the same bytes as both loaded."""
    rows = {"heldout": read_rows(ROOT / "data" / "grpo_test.jsonl")[:3]}
    args = (
        rows,
        build_reward_funcs(RewardsParams()),
        [0.8, 0.2],
        SampleSettings(n=2, seed=3, max_new_tokens=5),
        RewardsParams().format_pattern,
    )
    loaded = []

    def loading(load):
        def policy():
            assert all(model() is None for model in loaded)  # the one before is gone
            model, tokenizer = load(tiny_policy_dir)
            loaded.append(weakref.ref(model))
            return model, tokenizer

        return policy

    lazily = audit(
        {"step0": loading(load_policy), "final": loading(_moved)}, *args, n_resamples=200
    )
    assert len(loaded) == 2 and loaded[0]() is None is loaded[1]()
    both = audit(policies, *args, n_resamples=200)
    assert json.dumps(lazily, sort_keys=True) == json.dumps(both, sort_keys=True)


def test_token_stats_batched_equal_one_at_a_time(policies):
    from rlvr.audit.evaluation import token_stats

    model, tokenizer = policies["final"]
    completions = [[5, 6, 7], [8], [], [9, 10, 11, 12, 13]]
    batched = token_stats(model, tokenizer, "3 5 -> 8: ", completions, temperature=0.7, chunk=3)
    for ids, (logps, entropies) in zip(completions, batched):
        alone = token_stats(model, tokenizer, "3 5 -> 8: ", [ids], temperature=0.7)
        assert (len(logps), len(entropies)) == (len(ids), len(ids))
        if ids:
            assert logps == pytest.approx(alone[0][0], abs=1e-5)
            assert entropies == pytest.approx(alone[0][1], abs=1e-5)
    # the entropy of a distribution over the vocabulary: between 0 and log(vocabulary size)
    vocabulary = model.get_output_embeddings().weight.shape[0]
    assert all(0 <= e <= math.log(vocabulary) + 1e-6 for _, es in batched for e in es)
