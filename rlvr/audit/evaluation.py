"""Sampling and scoring a policy on rows: the step-0 baseline, and step-0 vs final evaluation.

Generation mirrors GRPO's rollouts (same temperature, top_p and completion length, prompts rendered
the same way) so that a baseline measured here is the reward the first training step would see.
Everything is seeded: the same policy, rows and seed give the same completions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from rlvr.audit.slices import (
    SliceRule,
    audit_verdict,
    pass_at_k_curve,
    split_audit,
    verdict_line,
    weighed_regressions,
)
from rlvr.core.metric_keys import (
    CORRECTNESS_REWARD,
    GREEDY_SUCCESS,
    MEAN_LENGTH,
    MEAN_REWARD,
    SAMPLED_SUCCESS,
    TAG_SUCCESS_PREFIX,
    pass_at,
)
from rlvr.core.stats import finite_mean, paired_ci
from rlvr.data.rows import Row
from rlvr.grpo.validation import Validation
from rlvr.params.config import RewardsParams
from rlvr.rewards.grpo_math import k3_kl
from rlvr.rewards.registry import (
    REWARD_FUNCS,
    RewardFunction,
    build_reward_funcs,
    normalized_weights,
)
from rlvr.rewards.verifiers import extract_answer, format_reward

CORRECTNESS = CORRECTNESS_REWARD


@dataclass
class SampleSettings:
    """How completions are drawn (the GRPO rollout settings, or greedy)."""

    n: int = 8
    do_sample: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 12
    seed: int = 0
    batch_prompts: int = 64


def rollout_settings(params, n: int | None = None, seed: int | None = None) -> SampleSettings:
    """Sampling that matches GRPO's rollouts (params.train.grpo: temperature, top_p, completion
    length; G samples unless n is given)."""
    grpo = params.train.grpo
    return SampleSettings(
        n=n or grpo.num_generations,
        temperature=grpo.temperature,
        top_p=grpo.top_p,
        max_new_tokens=grpo.max_completion_length,
        seed=params.seed if seed is None else seed,
    )


def greedy_settings(sampled: SampleSettings) -> SampleSettings:
    """One greedy completion per prompt, with the sampled settings' length, seed and batching.

    >>> greedy_settings(SampleSettings(n=8, max_new_tokens=12, seed=3))
    SampleSettings(n=1, do_sample=False, temperature=1.0, top_p=1.0, max_new_tokens=12, seed=3, batch_prompts=64)
    """
    return SampleSettings(
        n=1,
        do_sample=False,
        max_new_tokens=sampled.max_new_tokens,
        seed=sampled.seed,
        batch_prompts=sampled.batch_prompts,
    )


@dataclass
class ScoredRow:
    """One row's completions and what every reward function gave them."""

    id: str
    completions: list[str]
    rewards: dict[str, list[float | None]]  # reward name -> one value per completion
    total: list[float]  # the weighted reward TRL would use
    lengths: list[int] = field(default_factory=list)
    prompt_text: str = ""  # the rendered prompt the model was conditioned on
    token_ids: list[list[int]] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)  # the row's verifier scored it 1
    tags: tuple[str, ...] = ()

    @property
    def mean_total(self) -> float:
        return sum(self.total) / len(self.total)

    @property
    def answers(self) -> list[str]:
        """Each completion's answer as distinctness counts it: answer_key."""
        return [answer_key(text) for text in self.completions]


def answer_key(completion: str) -> str:
    """A completion's answer with its whitespace runs collapsed and its ends stripped: ` 3 +  5`
    and `3 + 5` count as one answer when the audit counts distinct answers; `3+5` and `5+3` are
    others.

    >>> answer_key(" 3 +  5\\n"), answer_key("I say <answer>3*5</answer>")
    ('3 + 5', '3*5')
    """
    return " ".join(extract_answer(completion).split())


def prompt_template(model) -> dict | None:
    """How params.yaml's model section renders prompts: None for plain text, else the chat
    template's variables (model.chat_template_kwargs).

    >>> from rlvr.params.training_params import ModelParams
    >>> prompt_template(ModelParams()), prompt_template(ModelParams(chat_template=True))
    (None, {})
    """
    return dict(model.chat_template_kwargs) if model.chat_template else None


def render_prompt(tokenizer, prompt: str, template: Mapping | None) -> str:
    """The text the model is conditioned on: the prompt itself (template None), or its chat
    rendering with the template's variables (prompt_template), as TRL renders it."""
    if template is None:
        return prompt
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}],
        tokenize=False,
        add_generation_prompt=True,
        **template,
    )


def stop_token_ids(model, tokenizer) -> list[int]:
    """The tokens that end a completion, as TRL's GRPOTrainer takes them: the tokenizer's eos,
    then those of the model's generation_config (Qwen3 lists <|im_end|> and <|endoftext|>)."""
    configured = model.generation_config.eos_token_id
    ids = [configured] if isinstance(configured, int) else list(configured or [])
    return ids if tokenizer.eos_token_id in ids else [tokenizer.eos_token_id, *ids]


def generate(
    model, tokenizer, prompts: Sequence[str], settings: SampleSettings
) -> list[tuple[list[str], list[list[int]]]]:
    """Completions (texts, token ids up to and with the first stop token) for each prompt:
    settings.n, seeded."""
    torch.manual_seed(settings.seed)
    model.eval()
    tokenizer.padding_side = "left"
    stops = stop_token_ids(model, tokenizer)
    results = []
    for start in range(0, len(prompts), settings.batch_prompts):
        chunk = list(prompts[start : start + settings.batch_prompts])
        encoded = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(
            model.device
        )
        kwargs = dict(
            max_new_tokens=settings.max_new_tokens,
            num_return_sequences=settings.n,
            do_sample=settings.do_sample,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=stops,
        )
        if settings.do_sample:
            kwargs.update(temperature=settings.temperature, top_p=settings.top_p, top_k=0)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        with torch.no_grad():
            output = model.generate(**encoded, **kwargs)
        new_tokens = output[:, encoded["input_ids"].shape[1] :]
        for i in range(len(chunk)):
            texts, token_ids = [], []
            for ids in new_tokens[i * settings.n : (i + 1) * settings.n].tolist():
                end = next((k for k, t in enumerate(ids) if t in stops), None)
                if end is not None:
                    ids = ids[: end + 1]
                # padding goes, the stop token stays (Qwen pads with <|endoftext|>, a stop too)
                ids = [t for k, t in enumerate(ids) if t != tokenizer.pad_token_id or k == end]
                texts.append(tokenizer.decode(ids, skip_special_tokens=True))
                token_ids.append(ids)
            results.append((texts, token_ids))
    return results


def weighted_total(per_func: Sequence[float | None], weights: Sequence[float]) -> float:
    """TRL's combination: the weighted sum of the rewards, a None counting as nothing.

    With weights normalised to sum 1 (as the pipeline passes them) this is compose_rewards'
    weighted mean whenever no reward is None.
    """
    return sum(w * r for w, r in zip(weights, per_func) if r is not None and not math.isnan(r))


def score_rows(
    model,
    tokenizer,
    rows: Sequence[Row],
    reward_funcs: Sequence[RewardFunction],
    weights: Sequence[float],
    settings: SampleSettings,
    template: Mapping | None = None,
) -> list[ScoredRow]:
    """Sample completions for every row and score them with every reward function (prompts
    rendered by render_prompt)."""
    # Whether a sample is correct (pass@k, success) is the verifier's word, whether or not the
    # recipe lists the correctness reward; it never raises (a failure is not correct).
    correctness = RewardFunction(CORRECTNESS, REWARD_FUNCS[CORRECTNESS](RewardsParams()))
    prompts = [render_prompt(tokenizer, row.prompt, template) for row in rows]
    generated = generate(model, tokenizer, prompts, settings)
    prompt_of = dict(zip((row.id for row in rows), prompts))
    scored = []
    for row, (texts, token_ids) in zip(rows, generated):
        lengths = [len(ids) for ids in token_ids]
        prompt_text = prompt_of[row.id]
        rewards = {
            f.__name__: f(
                prompts=[row.prompt] * len(texts),
                completions=texts,
                completion_ids=[[0] * n for n in lengths],
                verifier=[row.verifier] * len(texts),
                id=[row.id] * len(texts),
            )
            for f in reward_funcs
        }
        totals = [
            weighted_total([rewards[f.__name__][i] for f in reward_funcs], weights)
            for i in range(len(texts))
        ]
        verdicts = rewards.get(CORRECTNESS) or correctness(
            prompts=[row.prompt] * len(texts),
            completions=texts,
            verifier=[row.verifier] * len(texts),
            id=[row.id] * len(texts),
        )
        scored.append(
            ScoredRow(
                row.id,
                texts,
                rewards,
                totals,
                lengths,
                prompt_text,
                token_ids,
                [v == 1.0 for v in verdicts],
                tuple(row.tags),
            )
        )
    return scored


def summarize(scored: Sequence[ScoredRow], correctness: str = CORRECTNESS) -> dict:
    """Means over every sample: total reward, each reward function, success, length."""
    samples = [(s, i) for s in scored for i in range(len(s.completions))]
    names = list(scored[0].rewards) if scored else []

    summary = {
        "prompts": len(scored),
        "samples": len(samples),
        "mean_reward": finite_mean(s.total[i] for s, i in samples),
        "mean_length": finite_mean(s.lengths[i] for s, i in samples),
        "rewards": {name: finite_mean(s.rewards[name][i] for s, i in samples) for name in names},
        "none_rewards": {
            name: sum(v is None for s in scored for v in s.rewards[name]) for name in names
        },
    }
    if correctness in names:
        summary["success"] = summary["rewards"][correctness]
    return summary


# --------------------------------------------------------------------------- validation


def correct_spread(scored: Sequence[ScoredRow]) -> float:
    """The share of rows whose samples hold both a correct and a wrong answer: the groups in
    which GRPO's correctness reward has a spread to learn from.

    >>> row = lambda correct: ScoredRow("r", [""] * 2, {}, [0, 0], correct=correct)
    >>> correct_spread([row([True, False]), row([True, True]), row([False, False])])
    0.3333333333333333
    """
    return finite_mean(float(any(s.correct) and not all(s.correct)) for s in scored)


def tag_success(scored: Sequence[ScoredRow]) -> dict[str, float]:
    """The share of correct samples (pass@1) on the rows of each tag.

    >>> row = lambda tags, correct: ScoredRow("r", [""] * 2, {}, [0, 0], correct=correct,
    ...                                       tags=tags)
    >>> tag_success([row(("add",), [True, False]), row(("add", "sub"), [False, False])])
    {'add': 0.25, 'sub': 0.0}
    """
    tags = sorted({t for s in scored for t in s.tags})
    return {tag: finite_mean(c for s in scored if tag in s.tags for c in s.correct) for tag in tags}


def training_validation(params, rows: Sequence[Row]) -> Validation:
    """How training scores the validation rows (rlvr.grpo.run_grpo runs it): as `evaluate` scores
    a split, with its k and seed, GRPO's temperature and length, the recipe's weights, and reward
    functions of its own (training's failure counts stay training's)."""
    sampled = rollout_settings(params, n=params.evaluate.samples, seed=params.evaluate.seed)
    weights = normalized_weights(params.rewards.weights)
    funcs = build_reward_funcs(params.rewards)
    template = prompt_template(params.model)

    def score(model, tokenizer) -> dict[str, float]:
        return validation_scores(model, tokenizer, rows, funcs, weights, sampled, template)

    return Validation(rows=list(rows), score=score)


def validation_scores(
    model,
    tokenizer,
    rows: Sequence[Row],
    reward_funcs,
    weights,
    sampled: SampleSettings,
    template: Mapping | None = None,
) -> dict[str, float]:
    """The policy on the validation rows, as `evaluate` scores a split: mean reward of
    `sampled.n` seeded samples per prompt, sampled and greedy success, mean length, pass@k for
    every k up to n (`pass_at_<k>`) and the success on each tag's rows (`success/<tag>`), so the
    curves show the step where a kind of problem starts to die.

    Runs in the middle of training, so it leaves training exactly as it found it: torch's RNG
    state is restored afterwards (training samples the same rollouts with or without it) and the
    model goes back to train mode.
    """
    greedy = greedy_settings(sampled)
    was_training = model.training
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=devices):
            scored = score_rows(model, tokenizer, rows, reward_funcs, weights, sampled, template)
            greedy_summary = summarize(
                score_rows(model, tokenizer, rows, reward_funcs, weights, greedy, template)
            )
    finally:
        model.train(was_training)
    samples = summarize(scored)
    curve = pass_at_k_curve([sum(s.correct) for s in scored], sampled.n)
    return {
        MEAN_REWARD: samples["mean_reward"],
        GREEDY_SUCCESS: greedy_summary.get("success", math.nan),
        SAMPLED_SUCCESS: samples.get("success", math.nan),
        MEAN_LENGTH: samples["mean_length"],
        **{pass_at(k): value for k, value in curve.items()},
        **{TAG_SUCCESS_PREFIX + tag: value for tag, value in tag_success(scored).items()},
    }


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


def audit(
    policies: dict,
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

    policies: {"step0": (model, tokenizer), "final": (model, tokenizer)}. Returns the metrics
    and one record per prompt. Per split: both policies' stats, the paired delta of mean reward
    with its bootstrap CI, the KL of the final policy to the step-0 one, and what a mean hides
    (rlvr.audit.slices.split_audit: pass@k, slices by tag, solutions lost and new, diversity). The
    verdict follows the held-out split (rlvr.audit.slices.audit_verdict: a regressed tag makes it
    `mixed`).
    """
    rule = slice_rule or SliceRule()
    greedy = greedy_settings(sampled)
    (final_model, tokenizer), (base_model, _) = policies["final"], policies["step0"]
    metrics: dict = {}
    per_prompt: list[dict] = []
    for split, rows in splits.items():
        scored = {
            name: (
                score_rows(m, t, rows, reward_funcs, weights, sampled, template),
                score_rows(m, t, rows, reward_funcs, weights, greedy, template),
            )
            for name, (m, t) in policies.items()
        }
        (s0, g0), (s1, g1) = scored["step0"], scored["final"]
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
        # Three forward passes per prompt, no generation: the final policy on its own samples
        # (its entropy; with the step-0 policy on the same samples, the KL) and the step-0
        # policy on its own (its entropy).
        kl_sum, kl_tokens = 0.0, 0
        records = []
        for row, a, b, ga, gb, delta in zip(rows, s0, s1, g0, g1, deltas):
            final_on_own = token_stats(
                final_model, tokenizer, b.prompt_text, b.token_ids, sampled.temperature
            )
            base_on_final = token_stats(
                base_model, tokenizer, b.prompt_text, b.token_ids, sampled.temperature
            )
            base_on_own = token_stats(
                base_model, tokenizer, a.prompt_text, a.token_ids, sampled.temperature
            )
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
