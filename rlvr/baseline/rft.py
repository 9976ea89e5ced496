"""Rejection-sampling fine-tuning (RFT): the cheap alternative to GRPO that the audit sets beside
it. STaR (Zelikman et al. 2022) and RFT (Yuan et al. 2023): sample the base policy, keep the
answers the verifier accepts, fine-tune on them.

The budget rule (docs/pipeline.md#the-rft-baseline):

- samples: the GRPO run's sampled completions, spread evenly over the training prompts
  (`completions_budget`); GRPO with dynamic sampling may sample more (its extra rounds are not
  known before it runs), never fewer;
- kept: each prompt's completions the row's verifier scores 1, one per distinct answer (its
  answer without whitespace: `3+5` once however often or however spaced it was sampled; `5+3` is
  another);
- fine-tune: TRL's SFTTrainer on the kept pairs (rlvr.policy.models.supervised_fine_tune) for
  `audit.rft.epochs` passes (`sft_steps`), at `audit.rft.learning_rate`, from the base.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rlvr.audit.evaluation import ScoredRow, prompt_template, rollout_settings, score_rows
from rlvr.core.files import share_with_umask
from rlvr.core.timing import record_timing
from rlvr.data.rows import read_rows
from rlvr.policy.models import load_policy, policy_path, save_policy, supervised_fine_tune
from rlvr.rewards.registry import build_reward_funcs, normalized_weights

OFF_MARKER = "baseline.json"  # what models/rft/seed-<n>/ holds when audit.baseline is none
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
    distinct answer (the first sampled), in the rows' order; and one line per row (id, tags, sampled, correct, kept).

    >>> row = ScoredRow("r1", ["3+5", "3 + 5", "5+3", "8"], {}, [1, 1, 1, 0],
    ...                 prompt_text="3 5 -> 8: ", correct=[True, True, True, False], tags=("add",))
    >>> pairs, lines = kept_examples([row])
    >>> [p["completion"] for p in pairs], lines[0]["kept"], lines[0]["correct"]
    (['3+5', '5+3'], 2, 3)
    """
    examples, lines = [], []
    for row in scored:
        seen: set[str] = set()
        kept = 0
        for text, answer, ok in zip(row.completions, row.answers, row.correct):
            key = "".join(answer.split())  # `3 + 5` and `3+5` are one answer to fine-tune on
            if ok and key not in seen:
                seen.add(key)
                examples.append({"id": row.id, "prompt": row.prompt_text, "completion": text})
                kept += 1
        lines.append(
            {
                "id": row.id,
                "tags": list(row.tags),
                "sampled": len(row.completions),
                "correct": sum(row.correct),
                "kept": kept,
            }
        )
    return examples, lines


def sft_steps(examples: int, epochs: float, batch_size: int) -> int:
    """Optimizer steps for `epochs` passes over the kept pairs (at least one step).

    >>> sft_steps(120, 10, 64), sft_steps(0, 10, 64)
    (19, 1)
    """
    return max(1, math.ceil(epochs * examples / batch_size))


def kept_by_tag(lines: Sequence[dict]) -> dict[str, dict]:
    """Per tag: rows, rows with at least one kept answer, kept answers.

    >>> kept_by_tag([{"tags": ["sub"], "kept": 0}, {"tags": ["sub"], "kept": 2}])
    {'sub': {'rows': 2, 'solved': 1, 'kept': 2}}
    """
    out: dict[str, dict] = {}
    for line in lines:
        for tag in line["tags"]:
            entry = out.setdefault(tag, {"rows": 0, "solved": 0, "kept": 0})
            entry["rows"] += 1
            entry["solved"] += line["kept"] > 0
            entry["kept"] += line["kept"]
    return dict(sorted(out.items()))


def _replace_folder(staging: Path, out_dir: Path) -> None:
    """The finished folder takes the old one's place (a reader never sees half of it)."""
    share_with_umask(staging)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(staging), out_dir)


def write_off_marker(out_dir: str | Path) -> dict:
    """audit.baseline none: the seed's model folder holds only a marker (DVC needs the output)."""
    summary = {"baseline": "none"}
    out_dir = Path(out_dir)
    staging = Path(
        tempfile.mkdtemp(prefix="rft.", dir=out_dir.parent if out_dir.parent.exists() else None)
    )
    try:
        (staging / OFF_MARKER).write_text(json.dumps(summary) + "\n")
        _replace_folder(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return summary


def sample_base(params, seed: int) -> tuple[Budget, tuple, list[ScoredRow]]:
    """The base (models/base) sampled on the training rows as the budget says, with GRPO's
    rollout settings and `seed`, each completion scored: RFT's samples, and train.guidance's
    guides (the same call, so the same answers). Returns the budget, (model, tokenizer), the
    scored rows."""
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
    return budget, (model, tokenizer), scored


def verified_answers(params, seed: int) -> dict[str, list[str]]:
    """train.guidance's guides: each training row's distinct correct completions from the base's
    sampling, as RFT keeps them (`sample_base`, `kept_examples`: the very answers rft@seed
    fine-tunes on). Rows with none are left out."""
    examples, _ = kept_examples(sample_base(params, seed)[2])
    guides: dict[str, list[str]] = {}
    for example in examples:
        guides.setdefault(example["id"], []).append(example["completion"])
    return guides


def train_rft(params, seed: int, out_dir: str | Path) -> dict:
    """The RFT baseline of one RL seed: sample the base (models/base) as the budget says with
    GRPO's rollout settings and `seed`, keep the distinct correct answers, fine-tune the base on
    them, save it to out_dir (whole or not at all). The seconds sampling took go to the stage's
    timing file (rlvr.core.timing), never into the summary, an output DVC records. A base that
    answered nothing correctly gives nothing to fine-tune on: the baseline is then the base
    itself (0 steps), and the audit says what that is worth. Returns the summary: budget, what
    was kept (per row and per tag), the fine-tune."""
    from rlvr.grpo.config import peft_config  # peft: only where a baseline trains

    started = time.perf_counter()
    budget, (model, tokenizer), scored = sample_base(params, seed)
    record_timing(rft_sampling=time.perf_counter() - started)
    examples, lines = kept_examples(scored)
    grpo, rft = params.train.grpo, params.audit.rft
    steps = sft_steps(len(examples), rft.epochs, rft.batch_size) if examples else 0
    out_dir = Path(out_dir)
    staging = Path(
        tempfile.mkdtemp(prefix="rft.", dir=out_dir.parent if out_dir.parent.exists() else None)
    )
    try:
        if examples:
            with tempfile.TemporaryDirectory() as scratch:
                model, fit = supervised_fine_tune(
                    model,
                    tokenizer,
                    [{"prompt": e["prompt"], "completion": e["completion"]} for e in examples],
                    steps,
                    rft.batch_size,
                    rft.learning_rate,
                    seed,
                    scratch,
                    f"rft@{seed}: fine-tune",
                    use_cpu=grpo.use_cpu,
                    bf16=grpo.bf16,
                    peft_config=peft_config(params.model),
                )
        else:  # nothing correct to learn from: RFT leaves the base as it is
            fit = {"examples": 0, "steps": 0, "first_loss": None, "last_loss": None}
        save_policy(model, tokenizer, staging)
        _replace_folder(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {
        "baseline": "rft",
        "seed": seed,
        "budget": {**asdict(budget), "sampled": budget.sampled},
        "kept": len(examples),
        "rows_with_kept": sum(line["kept"] > 0 for line in lines),
        "kept_by_tag": kept_by_tag(lines),
        "rows": lines,
        "fine_tune": {
            **fit,
            "epochs": rft.epochs,
            "batch_size": rft.batch_size,
            "learning_rate": rft.learning_rate,
        },
    }
