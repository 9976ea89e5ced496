"""Sampling and scoring a policy on rows, as GRPO samples it: rollout settings, prompts rendered
the same way, completions cut at the same stop tokens, every reward function's score and the
verifier's verdict. Training's validation, RFT, guidance and the audit all sample through here.

Generation mirrors GRPO's rollouts (same temperature, top_p and completion length, prompts rendered
the same way) so that a baseline measured here is the reward the first training step would see.
Everything is seeded: the same policy, rows and seed give the same completions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from rlvr.core.metric_keys import CORRECTNESS_REWARD
from rlvr.core.stats import finite_mean
from rlvr.data.rows import Row
from rlvr.params.config import RewardsParams
from rlvr.rewards.registry import REWARD_FUNCS, RewardFunction
from rlvr.rewards.verifiers import extract_answer

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
    # the most tokens one generate call holds (runtime.sampling_chunk_tokens); None: no bound
    chunk_tokens: int | None = None


def rollout_settings(params, n: int | None = None, seed: int | None = None) -> SampleSettings:
    """Sampling that matches GRPO's rollouts (params.train.grpo: temperature, top_p, completion
    length; G samples unless n is given), in calls bounded by runtime.sampling_chunk_tokens."""
    grpo = params.train.grpo
    return SampleSettings(
        n=n or grpo.num_generations,
        temperature=grpo.temperature,
        top_p=grpo.top_p,
        max_new_tokens=grpo.max_completion_length,
        seed=params.seed if seed is None else seed,
        chunk_tokens=params.runtime.sampling_chunk_tokens,
    )


def greedy_settings(sampled: SampleSettings) -> SampleSettings:
    """One greedy completion per prompt, with the sampled settings' length, seed and batching.

    >>> s = greedy_settings(SampleSettings(n=8, max_new_tokens=12, seed=3, chunk_tokens=4096))
    >>> s.n, s.do_sample, s.max_new_tokens, s.seed, s.batch_prompts, s.chunk_tokens
    (1, False, 12, 3, 64, 4096)
    """
    return SampleSettings(
        n=1,
        do_sample=False,
        max_new_tokens=sampled.max_new_tokens,
        seed=sampled.seed,
        batch_prompts=sampled.batch_prompts,
        chunk_tokens=sampled.chunk_tokens,
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


def sampling_calls(
    prompt_tokens: Sequence[int],
    n: int,
    max_new_tokens: int,
    batch_prompts: int,
    chunk_tokens: int | None,
) -> list[tuple[int, int, int]]:
    """The generate calls that draw `n` completions for each prompt (its length in tokens), as
    (first prompt, past the last, completions of each): `batch_prompts` prompts a call, each call
    split further until it holds at most `chunk_tokens` tokens (sequences x (the longest prompt,
    to which the others are padded, + max_new_tokens): the KV cache's size), one prompt's
    completions too; a call holds at least one sequence. A bound that does not bind changes no
    call, so no draw.

    >>> sampling_calls([10, 12, 14], n=4, max_new_tokens=8, batch_prompts=2, chunk_tokens=None)
    [(0, 2, 4), (2, 3, 4)]
    >>> sampling_calls([10, 12, 14], n=4, max_new_tokens=8, batch_prompts=3, chunk_tokens=160)
    [(0, 2, 4), (2, 3, 4)]
    >>> sampling_calls([10, 30], n=4, max_new_tokens=8, batch_prompts=2, chunk_tokens=80)
    [(0, 1, 4), (1, 2, 2), (1, 2, 2)]
    """
    calls = []
    for start in range(0, len(prompt_tokens), batch_prompts):
        stop, first = min(start + batch_prompts, len(prompt_tokens)), start
        while first < stop:
            width = prompt_tokens[first] + max_new_tokens
            if chunk_tokens is not None and n * width > chunk_tokens:  # its completions alone
                each = max(1, chunk_tokens // width)
                calls += [(first, first + 1, min(each, n - done)) for done in range(0, n, each)]
                first += 1
                continue
            last, longest = first + 1, prompt_tokens[first]
            while last < stop and (
                chunk_tokens is None
                or (last + 1 - first) * n * (max(longest, prompt_tokens[last]) + max_new_tokens)
                <= chunk_tokens
            ):
                longest = max(longest, prompt_tokens[last])
                last += 1
            calls.append((first, last, n))
            first = last
    return calls


def generate(
    model, tokenizer, prompts: Sequence[str], settings: SampleSettings
) -> list[tuple[list[str], list[list[int]]]]:
    """Completions (texts, token ids up to and with the first stop token) for each prompt:
    settings.n, seeded once for all the calls (sampling_calls) they take."""
    torch.manual_seed(settings.seed)
    model.eval()
    tokenizer.padding_side = "left"
    stops = stop_token_ids(model, tokenizer)
    lengths = [len(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]
    calls = sampling_calls(
        lengths, settings.n, settings.max_new_tokens, settings.batch_prompts, settings.chunk_tokens
    )
    results: list[tuple[list[str], list[list[int]]]] = [([], []) for _ in prompts]
    for first, last, samples in calls:
        chunk = list(prompts[first:last])
        encoded = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(
            model.device
        )
        kwargs = dict(
            max_new_tokens=settings.max_new_tokens,
            num_return_sequences=samples,
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
            texts, token_ids = results[first + i]
            for ids in new_tokens[i * samples : (i + 1) * samples].tolist():
                end = next((k for k, t in enumerate(ids) if t in stops), None)
                if end is not None:
                    ids = ids[: end + 1]
                # padding goes, the stop token stays (Qwen pads with <|endoftext|>, a stop too)
                ids = [t for k, t in enumerate(ids) if t != tokenizer.pad_token_id or k == end]
                texts.append(tokenizer.decode(ids, skip_special_tokens=True))
                token_ids.append(ids)
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
