"""Evaluation: seeded sampling, the paired bootstrap CI and verdict, KL between policies, audit."""

import math
from pathlib import Path

import pytest
import torch

from rlvr.audit.evaluation import audit, policy_kl
from rlvr.audit.slices import overall_verdict as verdict
from rlvr.core.stats import paired_ci
from rlvr.data.rows import read_rows
from rlvr.params.config import RewardsParams
from rlvr.policy.models import load_policy
from rlvr.policy.sampling import SampleSettings, score_rows, summarize
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


@pytest.fixture(scope="module")
def policies(tiny_policy_dir):
    base = load_policy(tiny_policy_dir)
    moved, tokenizer = load_policy(tiny_policy_dir)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.05 * torch.randn_like(p, generator=torch.Generator().manual_seed(1)))
    return {"step0": base, "final": (moved, tokenizer)}


def test_same_seed_same_samples(policies):
    model, tokenizer = policies["step0"]
    rows = read_rows(ROOT / "data" / "grpo_train.jsonl")[:4]
    funcs = build_reward_funcs(RewardsParams())
    settings = SampleSettings(n=3, seed=7, max_new_tokens=5)
    first = score_rows(model, tokenizer, rows, funcs, [0.8, 0.2], settings)
    again = score_rows(model, tokenizer, rows, funcs, [0.8, 0.2], settings)
    assert [r.completions for r in first] == [r.completions for r in again]
    assert summarize(first)["samples"] == 12


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
