"""Rejection-sampling fine-tuning (RFT): the cheap alternative to GRPO that the audit sets beside
it. STaR (Zelikman et al. 2022) and RFT (Yuan et al. 2023): sample the base policy, keep the
answers the verifier accepts, fine-tune on them.

The budget rule (docs/pipeline.md#the-rft-baseline):

- samples: the GRPO run's sampled completions, spread evenly over the training prompts
  (`completions_budget`); GRPO with dynamic sampling may sample more (its extra rounds are not
  known before it runs), never fewer; stage verified samples them (rlvr/policy/verified.py) and
  writes what it kept, which RFT and train.guidance read;
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
from collections.abc import Sequence
from pathlib import Path

from rlvr.core.files import remove_tree, share_with_umask
from rlvr.policy.models import load_policy, policy_path, save_policy, supervised_fine_tune
from rlvr.policy.verified import kept_digest

OFF_MARKER = "baseline.json"  # what models/rft/seed-<n>/ holds when audit.baseline is none


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
    remove_tree(out_dir)
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


def train_rft(params, seed: int, out_dir: str | Path, verified: dict) -> dict:
    """The RFT baseline of one RL seed: fine-tune the base (models/base) on the distinct correct
    answers stage verified kept for `seed` (`verified`, rlvr.policy.verified.read_verified),
    save it to out_dir (whole or not at all). A base that answered nothing correctly gives
    nothing to fine-tune on: the baseline is then the base itself (0 steps), and the audit says
    what that is worth. Returns the summary: budget, what was kept (per row and per tag), the
    fine-tune."""
    from rlvr.grpo.config import peft_config  # peft: only where a baseline trains

    model, tokenizer = load_policy(policy_path(params.paths.base_model))
    examples, lines = verified["examples"], verified["rows"]
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
        "budget": verified["budget"],
        "kept": len(examples),
        "rows_with_kept": sum(line["kept"] > 0 for line in lines),
        "kept_digest": kept_digest(lines),  # the same on two seeds: they kept the same answers
        "kept_by_tag": kept_by_tag(lines),
        "rows": lines,
        "fine_tune": {
            **fit,
            "epochs": rft.epochs,
            "batch_size": rft.batch_size,
            "learning_rate": rft.learning_rate,
        },
    }
