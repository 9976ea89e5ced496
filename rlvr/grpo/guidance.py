"""Off-policy guidance from verified answers, as LUFFY defines it (Yan et al. 2025, "Learning to
Reason under Off-Policy Guidance", arXiv 2504.14945; equation numbers of its later versions, v1
numbers them (2), (4), (5)): a verified answer the policy did not sample joins a GRPO group.

- Which rows take a guide (`guided_rows`): mode `unsolved`, the last row of each group that holds
  no correct answer; mode `fraction`, the last ceil(fraction x G) rows of every group (LUFFY: 1 of
  8, every group).
- Which answer (`pick_guide`): one of the prompt's verified answers, chosen by a hash of (seed,
  step, prompt id): every rank picks the same for the same prompt, whatever it holds.
- Its advantage: the group's own, over the mixed group (Eq. 4: (r - mean(G_on u G_off)) /
  std(G_on u G_off)); TRL computes it when the guide replaces a completion before scoring.
- Its loss, per token: -A x f(pi_theta(token)), f(x) = x / (x + gamma), gamma 0.1 (Eq. 6, policy
  shaping), with the off-policy importance weight pi_theta / pi_phi taken at pi_phi = 1 and no
  clip and no KL term (Sec. 3.1) (`guided_token_loss`); the on-policy rows keep TRL's clipped
  loss and its KL term.

Pure functions: the trainer (rlvr/grpo/trainer.py) wires them in.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

GAMMA = 0.1  # LUFFY's gamma (its App. E.4: 0.05-0.5 tried, 0.1 best)
MODES = ("off", "unsolved", "fraction")
GUIDED = "guided"  # the scored batch's key: a (B,) bool tensor, True where a guide replaced one


def shaped(p: Any, gamma: float = GAMMA) -> Any:
    """LUFFY's policy shaping f(x) = x / (x + gamma) (Eq. 6), on probabilities (floats or
    tensors): the gradient of f(p) is gamma / (p + gamma)^2 x dp, so a rare token of a guided
    answer weighs more than under plain importance sampling.

    >>> round(shaped(0.1), 3), round(shaped(0.9), 3), shaped(0.0)
    (0.5, 0.9, 0.0)
    """
    return p / (p + gamma)


def guided_token_loss(per_token_logps: Any, advantages: Any, gamma: float = GAMMA) -> Any:
    """The guided rows' per-token loss: -A x f(pi_theta) with pi_phi = 1 and no clip (Eq. 6).
    per_token_logps: (B, T) log-probabilities under the policy, with grad; advantages: (B,) or
    (B, 1)."""
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    return -advantages * shaped(per_token_logps.exp(), gamma)


def guided_rows(
    correct: Sequence[bool], group_size: int, mode: str, fraction: float = 0.125
) -> list[int]:
    """Indices of the rows a guide replaces; `correct` holds each row's verdict, groups of
    `group_size` consecutive rows (TRL's RepeatSampler order).

    >>> groups = [False, False, False, False, True, False, False, False]
    >>> guided_rows(groups, 4, "unsolved"), guided_rows(groups, 4, "fraction", 0.25)
    ([3], [3, 7])
    >>> guided_rows(groups, 4, "off")
    []
    """
    if mode not in MODES:
        raise ValueError(f"guidance mode {mode!r}: one of {', '.join(MODES)}")
    if len(correct) % group_size:
        raise ValueError(f"{len(correct)} rows do not make groups of {group_size}")
    if mode == "off":
        return []
    per_group = 1 if mode == "unsolved" else max(1, math.ceil(fraction * group_size))
    rows = []
    for start in range(0, len(correct), group_size):
        if mode == "unsolved" and any(correct[start : start + group_size]):
            continue
        end = start + group_size
        rows += list(range(end - per_group, end))
    return rows


def local_rows(rows: Sequence[int], local_size: int, rank: int) -> list[int]:
    """Of the guided `rows` (indices over every rank's completions, in rank order), this rank's,
    as indices into its own `local_size` completions: a group that spans two ranks is guided
    once, by the rank that holds the row.

    >>> local_rows([3, 7], 6, rank=0), local_rows([3, 7], 6, rank=1)
    ([3], [1])
    """
    start = rank * local_size
    return [r - start for r in rows if start <= r < start + local_size]


def pick_guide(answers: Sequence[str], prompt_id: str, seed: int, step: int) -> str | None:
    """One of the prompt's verified answers, the same on every rank and every rerun (a hash of
    seed, step and prompt id, never Python's salted hash()); None when it has none.

    >>> pick_guide(["3+5", "5+3"], "cd-1", 0, 7) == pick_guide(["3+5", "5+3"], "cd-1", 0, 7)
    True
    >>> pick_guide([], "cd-1", 0, 7) is None
    True
    """
    if not answers:
        return None
    digest = hashlib.sha256(f"{seed}\0{step}\0{prompt_id}".encode()).digest()
    return answers[int.from_bytes(digest[:8], "big") % len(answers)]
