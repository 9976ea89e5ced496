"""The base's verified answers: the base policy sampled on the training rows as GRPO's one-round
budget allows (GRPO's rollout settings, one seed), each row's distinct correct completions kept.
Stage verified samples them once per seed and writes them to a file (`sample_verified`,
`read_verified`); RFT fine-tunes on them (rlvr/baseline/rft.py) and train.guidance puts them in
GRPO's groups (`guides_of`): the same answers, sampled once.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rlvr.core.errors import PipelineError
from rlvr.data.rows import read_rows
from rlvr.policy.models import load_policy, policy_path
from rlvr.policy.sampling import ScoredRow, prompt_template, rollout_settings, score_rows
from rlvr.rewards.registry import build_reward_funcs, normalized_weights

BATCH_SEQUENCES = 3200  # sequences per generate call: ~4 prompts x 800 samples (fastest here)


@dataclass(frozen=True)
class Budget:
    """How many completions RFT samples, counted from the GRPO run's settings."""

    grpo_completions: int  # what GRPO samples at one generation round per step
    prompts: int
    samples_per_prompt: int

    @property
    def sampled(self) -> int:
        return self.samples_per_prompt * self.prompts


def completions_budget(
    max_steps: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    num_iterations: int,
    processes: int,
    prompts: int,
) -> Budget:
    """GRPO samples per_device_train_batch_size x gradient_accumulation_steps x processes
    completions for every num_iterations optimizer steps (TRL's GRPOTrainer reuses a batch
    num_iterations times); RFT samples as many, each training prompt ceil(total / prompts)
    times.

    >>> b = completions_budget(400, 128, 1, 1, 1, 64)
    >>> b.grpo_completions, b.samples_per_prompt, b.sampled
    (51200, 800, 51200)
    >>> completions_budget(10, 6, 1, 2, 1, 4).samples_per_prompt   # 30 completions over 4 prompts
    8
    """
    total = max_steps * per_device_train_batch_size * gradient_accumulation_steps * processes
    total //= num_iterations
    return Budget(total, prompts, max(1, math.ceil(total / prompts)))


def kept_examples(scored: Sequence[ScoredRow]) -> tuple[list[dict], list[dict]]:
    """The fine-tuning pairs (id, prompt, completion): per row, its correct completions, one per
    distinct answer (the first sampled), in the rows' order; and one line per row (id, tags,
    sampled, correct, kept, and the kept answers without whitespace, as they were first sampled).

    >>> row = ScoredRow("r1", ["3+5", "3 + 5", "5+3", "8"], {}, [1, 1, 1, 0],
    ...                 prompt_text="3 5 -> 8: ", correct=[True, True, True, False], tags=("add",))
    >>> pairs, lines = kept_examples([row])
    >>> [p["completion"] for p in pairs], lines[0]["kept"], lines[0]["correct"], lines[0]["answers"]
    (['3+5', '5+3'], 2, 3, ['3+5', '5+3'])
    """
    examples, lines = [], []
    for row in scored:
        answers: list[str] = []
        for text, answer, ok in zip(row.completions, row.answers, row.correct):
            key = "".join(answer.split())  # `3 + 5` and `3+5` are one answer to fine-tune on
            if ok and key not in answers:
                answers.append(key)
                examples.append({"id": row.id, "prompt": row.prompt_text, "completion": text})
        lines.append(
            {
                "id": row.id,
                "tags": list(row.tags),
                "sampled": len(row.completions),
                "correct": sum(row.correct),
                "kept": len(answers),
                "answers": answers,
            }
        )
    return examples, lines


def kept_digest(lines: Sequence[dict]) -> str:
    """One digest of the answers kept on every row (kept_examples' lines), whatever order they
    were sampled in: two seeds that kept the same answers have the same digest.

    >>> a = [{"id": "r1", "answers": ["3+5", "5+3"]}, {"id": "r2", "answers": []}]
    >>> b = [{"id": "r2", "answers": []}, {"id": "r1", "answers": ["5+3", "3+5"]}]
    >>> kept_digest(a) == kept_digest(b) != kept_digest([{"id": "r1", "answers": ["3+5"]}])
    True
    """
    kept = sorted((line["id"], sorted(line["answers"])) for line in lines if line["answers"])
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()


def sample_base(params, seed: int) -> tuple[Budget, list[ScoredRow]]:
    """The base (models/base) sampled on the training rows as the budget says, with GRPO's
    rollout settings and `seed`, each completion scored: stage verified's samples. Returns the
    budget and the scored rows."""
    rows = read_rows(params.data.train_path)
    train, grpo = params.train, params.train.grpo
    budget = completions_budget(
        train.max_steps,
        grpo.per_device_train_batch_size,
        grpo.gradient_accumulation_steps,
        grpo.num_iterations,
        train.processes,
        len(rows),
    )
    model, tokenizer = load_policy(policy_path(params.paths.base_model))
    settings = rollout_settings(params, n=budget.samples_per_prompt, seed=seed)
    settings.batch_prompts = max(1, BATCH_SEQUENCES // settings.n)
    scored = score_rows(
        model,
        tokenizer,
        rows,
        build_reward_funcs(params.rewards),
        normalized_weights(params.rewards.weights),
        settings,
        prompt_template(params.model),
    )
    return budget, scored


def sample_verified(params, seed: int) -> dict:
    """Stage verified's record for `seed`: the budget, one line per training row (sampled,
    correct, kept, the kept answers) and the examples to fine-tune on (id, prompt, completion:
    each row's distinct correct completions, the first sampled of each answer)."""
    budget, scored = sample_base(params, seed)
    examples, lines = kept_examples(scored)
    return {
        "seed": seed,
        "budget": {**asdict(budget), "sampled": budget.sampled},
        "rows": lines,
        "examples": examples,
    }


class VerifiedMissing(PipelineError):
    """Stage verified's file is missing or is not a record of the seed asked for."""


def read_verified(path: str, seed: int) -> dict:
    """The record stage verified wrote for `seed` at `path`; a missing file, a marker (no
    sampling: audit.baseline none) or another seed's record stops with what to run."""
    file = Path(path)
    if not file.exists():
        raise VerifiedMissing(f"{path} is missing: run `dvc repro verified@{seed}` first")
    try:
        record = json.loads(file.read_text())
    except ValueError as error:
        raise VerifiedMissing(f"{path} is not JSON ({error}): run `dvc repro verified@{seed}`")
    if not isinstance(record, dict) or record.get("seed") != seed or "examples" not in record:
        raise VerifiedMissing(
            f"{path} holds no sampled answers of seed {seed} (audit.baseline none writes a "
            f"marker): set audit.baseline rft and run `dvc repro verified@{seed}`"
        )
    return record


def guides_of(record: dict) -> dict[str, list[str]]:
    """train.guidance's guides from stage verified's record: each training row's distinct correct
    completions, the very answers RFT fine-tunes on, in the order they were sampled; rows with
    none are left out.

    >>> guides_of({"examples": [{"id": "r1", "prompt": "p", "completion": "3+5"},
    ...                         {"id": "r1", "prompt": "p", "completion": "5+3"}]})
    {'r1': ['3+5', '5+3']}
    """
    guides: dict[str, list[str]] = {}
    for example in record["examples"]:
        guides.setdefault(example["id"], []).append(example["completion"])
    return guides
