"""What training scores every train.eval_steps steps: the validation rows and the scorer of a
policy on them. The caller builds it (rlvr.grpo.scoring.training_validation: the evaluate
stage's sampling), so the trainer runs the scorer it is given and imports no sampling code."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.data.rows import Row


@dataclass(frozen=True)
class Validation:
    rows: Sequence[Row]
    score: Callable[[Any, Any], dict[str, float]]  # (model, tokenizer) -> the logged scores
