"""Step 0 against final, prompt by prompt: both policies sampled and scored on each split
(rlvr.policy.sampling, seeded: the same policy, rows and seed give the same completions), the
records the slices read, token statistics and the KL between the policies.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch

from rlvr.audit.slices import (
    SliceRule,
    audit_verdict,
    split_audit,
    verdict_line,
    weighed_regressions,
)
from rlvr.core.stats import finite_mean, paired_ci
from rlvr.data.rows import Row
from rlvr.policy.sampling import (
    CORRECTNESS,
    SampleSettings,
    ScoredRow,
    greedy_settings,
    score_rows,
    summarize,
)
from rlvr.rewards.grpo_math import k3_kl
from rlvr.rewards.verifiers import format_reward

# --------------------------------------------------------------------------- step 0 vs final


def _mean_of(values: Sequence[float | None] | None) -> float | None:
    """finite_mean, as None (JSON null) when there is nothing to average."""
    mean = finite_mean(values or [])
    return None if math.isnan(mean) else mean


def _split_stats(
    sampled: Sequence[ScoredRow], greedy: Sequence[ScoredRow], format_pattern: str
) -> dict:
    summary = summarize(sampled)
    greedy_summary = summarize(greedy)
    texts = [t for s in sampled for t in s.completions]
    return {
        "greedy_success": greedy_summary.get("success", math.nan),
        "mean_reward": summary["mean_reward"],
        "sampled_success": summary.get("success", math.nan),
        "mean_length": summary["mean_length"],
        "malformed_share": sum(format_reward(t, format_pattern) == 0 for t in texts) / len(texts),
        "rewards": summary["rewards"],
    }


def _policy_record(
    prefix: str, sampled: ScoredRow, greedy: ScoredRow, entropies: Sequence[Sequence[float]]
) -> dict:
    """What the audit keeps of one policy on one prompt (rlvr.audit.slices reads these fields)."""
    tokens = sum(len(e) for e in entropies)
    answers = sampled.answers
    return {
        f"{prefix}_reward": sampled.mean_total,
        f"{prefix}_success": _mean_of(sampled.rewards.get(CORRECTNESS)),
        f"{prefix}_correct": sum(sampled.correct),
        f"{prefix}_greedy": greedy.completions[0],
        f"{prefix}_greedy_correct": float(greedy.correct[0]),
        f"{prefix}_distinct": len(set(answers)),
        f"{prefix}_distinct_correct": len({a for a, ok in zip(answers, sampled.correct) if ok}),
        f"{prefix}_entropy": sum(map(sum, entropies)) / tokens if tokens else None,
        f"{prefix}_tokens": tokens,
    }


Policy = tuple  # (model, tokenizer)


@contextmanager
def _loaded(policy: Policy | Callable[[], Policy]) -> Iterator[Policy]:
    """A policy given loaded, or loaded by its function and let go afterwards: only one such
    policy is in memory at a time (a 0.6B model in float32 is 2.4 GB)."""
    if not callable(policy):
        yield policy
        return
    gc.collect()  # what the caller let go of (a fine-tuned model in a trainer's cycles) goes first
    loaded = policy()
    try:
        yield loaded
    finally:
        del loaded
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _policy_pass(
    policy: Policy | Callable[[], Policy],
    splits: dict[str, Sequence[Row]],
    reward_funcs,
    weights,
    sampled: SampleSettings,
    template: Mapping | None,
    others: Mapping[str, Sequence[ScoredRow]] | None = None,
) -> dict[str, tuple]:
    """One policy on every split: its samples, its greedy answers, its token statistics on its own
    samples (entropy) and, given another policy's samples, on those (their log-probabilities,
    for the KL): forward passes, no generation. A policy loaded here is let go on return."""
    temperature, found = sampled.temperature, {}
    with _loaded(policy) as (model, tokenizer):
        for split, rows in splits.items():
            own = score_rows(model, tokenizer, rows, reward_funcs, weights, sampled, template)
            greedy = score_rows(
                model, tokenizer, rows, reward_funcs, weights, greedy_settings(sampled), template
            )
            stats = [
                token_stats(model, tokenizer, s.prompt_text, s.token_ids, temperature) for s in own
            ]
            on_others = [
                token_stats(model, tokenizer, s.prompt_text, s.token_ids, temperature)
                for s in (others or {}).get(split, [])
            ]
            found[split] = (own, greedy, stats, on_others)
    return found


def audit(
    policies: Mapping[str, Policy | Callable[[], Policy]],
    splits: dict[str, Sequence[Row]],
    reward_funcs,
    weights,
    sampled: SampleSettings,
    format_pattern: str,
    template: Mapping | None = None,
    confidence: float = 0.95,
    n_resamples: int = 10000,
    slice_rule: SliceRule | None = None,
) -> tuple[dict, list[dict]]:
    """Step 0 vs final on every split, with the same sampling seeds for both policies.

    policies: {"step0": ..., "final": ...}, each a (model, tokenizer) pair or a function that
    loads one: the final policy is sampled on every split first, then the step-0 one (each
    sampling call is seeded, so the order changes no draw), so that a policy given as a function
    is in memory alone. Returns the metrics and one record per prompt. Per split: both policies'
    stats, the paired delta of mean reward with its bootstrap CI, the KL of the final policy to
    the step-0 one, and what a mean hides (rlvr.audit.slices.split_audit: pass@k, slices by tag,
    solutions lost and new, diversity). The verdict follows the held-out split
    (rlvr.audit.slices.audit_verdict: a regressed tag makes it `mixed`).
    """
    rule = slice_rule or SliceRule()
    settings = (reward_funcs, weights, sampled, template)
    finals = _policy_pass(policies["final"], splits, *settings)
    bases = _policy_pass(policies["step0"], splits, *settings, {s: f[0] for s, f in finals.items()})
    metrics: dict = {}
    per_prompt: list[dict] = []
    for split, rows in splits.items():
        (s1, g1, finals_own, _), (s0, g0, bases_own, bases_on_final) = finals[split], bases[split]
        deltas = [b.mean_total - a.mean_total for a, b in zip(s0, s1)]
        metrics[split] = {
            "prompts": len(rows),
            "samples_per_prompt": sampled.n,
            "step0": _split_stats(s0, g0, format_pattern),
            "final": _split_stats(s1, g1, format_pattern),
            "delta_mean_reward": paired_ci(deltas, confidence, n_resamples, seed=sampled.seed),
        }
        metrics[split]["delta_greedy_success"] = (
            metrics[split]["final"]["greedy_success"] - metrics[split]["step0"]["greedy_success"]
        )
        kl_sum, kl_tokens = 0.0, 0
        records = []
        for row, a, b, ga, gb, delta, final_on_own, base_on_own, base_on_final in zip(
            rows, s0, s1, g0, g1, deltas, finals_own, bases_own, bases_on_final
        ):
            total, tokens = k3_sum([lp for lp, _ in final_on_own], [lp for lp, _ in base_on_final])
            kl_sum, kl_tokens = kl_sum + total, kl_tokens + tokens
            records.append(
                {
                    "id": row.id,
                    "split": split,
                    "prompt": row.prompt,
                    "tags": list(row.tags),
                    "samples": sampled.n,
                    "delta": delta,
                    **_policy_record("step0", a, ga, [e for _, e in base_on_own]),
                    **_policy_record("final", b, gb, [e for _, e in final_on_own]),
                }
            )
        metrics[split]["kl_final_vs_step0"] = kl_sum / kl_tokens if kl_tokens else math.nan
        metrics[split].update(
            split_audit(records, sampled.n, rule, confidence, n_resamples, seed=sampled.seed)
        )
        per_prompt += records
    decisive = "heldout" if "heldout" in metrics else next(iter(metrics))
    metrics["verdict"] = audit_verdict(metrics[decisive])
    metrics["verdict_split"] = decisive
    metrics["verdict_line"] = verdict_line(metrics["verdict"], metrics[decisive])
    metrics["regressed_tags"] = [s["tag"] for s in weighed_regressions(metrics[decisive])]
    return metrics, per_prompt


def token_stats(
    model,
    tokenizer,
    prompt: str,
    completions: Sequence[Sequence[int]],
    temperature: float = 1.0,
    chunk: int = 16,
) -> list[tuple[list[float], list[float]]]:
    """For each completion (token ids) after the prompt: the log-probability of each of its
    tokens, and the policy's entropy (nats, at `temperature`) at each of those positions.

    `chunk` completions share one forward pass (right-padded: a causal model's earlier positions
    do not see the padding); it bounds the logits' memory on a large vocabulary."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    start = len(prompt_ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out: list[tuple[list[float], list[float]]] = [([], []) for _ in completions]
    filled = [i for i, ids in enumerate(completions) if ids]
    with torch.no_grad():
        for first in range(0, len(filled), chunk):
            batch = filled[first : first + chunk]
            width = max(len(completions[i]) for i in batch)
            ids = [
                prompt_ids + list(completions[i]) + [pad] * (width - len(completions[i]))
                for i in batch
            ]
            mask = [
                [1] * (start + len(completions[i])) + [0] * (width - len(completions[i]))
                for i in batch
            ]
            input_ids = torch.tensor(ids, device=model.device)
            logits = (
                model(
                    input_ids=input_ids, attention_mask=torch.tensor(mask, device=model.device)
                ).logits[:, start - 1 : -1]
                / temperature
            )
            logps = torch.log_softmax(logits.float(), dim=-1)
            chosen = logps.gather(-1, input_ids[:, start:].unsqueeze(-1)).squeeze(-1)
            entropy = -(logps.exp() * logps).sum(-1)
            for row, i in enumerate(batch):
                n = len(completions[i])
                out[i] = (chosen[row, :n].tolist(), entropy[row, :n].tolist())
    return out


def completion_logprobs(
    model, tokenizer, prompt: str, completions: Sequence[Sequence[int]], temperature: float = 1.0
) -> list[list[float]]:
    """Per-token log-probabilities of each completion (token ids) after the prompt."""
    return [logps for logps, _ in token_stats(model, tokenizer, prompt, completions, temperature)]


def k3_sum(logps: Sequence[Sequence[float]], refs: Sequence[Sequence[float]]) -> tuple[float, int]:
    """The k3 KL summed over every token of the completions (the policy's and the reference's
    per-token log-probabilities of the same tokens), and how many tokens."""
    return (
        sum(k3_kl(x, y) for a, b in zip(logps, refs) for x, y in zip(a, b)),
        sum(len(a) for a in logps),
    )


def policy_kl(
    policy, reference, tokenizer, scored: Sequence[ScoredRow], temperature: float = 1.0
) -> float:
    """Mean per-token k3 KL(policy || reference) on the policy's own samples: how far training
    moved the policy, measured the same way whether or not training used a KL penalty."""
    total, count = 0.0, 0
    for row in scored:
        kl, tokens = k3_sum(
            *(
                completion_logprobs(m, tokenizer, row.prompt_text, row.token_ids, temperature)
                for m in (policy, reference)
            )
        )
        total, count = total + kl, count + tokens
    return total / count if count else math.nan
