"""Off-policy guidance from verified answers, as LUFFY defines it (Yan et al. 2025, "Learning to
Reason under Off-Policy Guidance", arXiv 2504.14945; equation numbers of its later versions, v1
numbers them (2), (4), (5)): a verified answer the policy did not sample joins a GRPO group.

- Which rows take a guide (`guided_rows`): mode `unsolved`, the last row of each group that holds
  no correct answer; mode `fraction`, the last ceil(fraction x G) rows of every group (LUFFY: 1 of
  8, every group).
- Which answers (`pick_guides`, `guide_ordinals`): the k-th guided row of a group takes the k-th
  of the prompt's verified answers in an order rotated by a hash of (seed, step, prompt id):
  distinct answers within a group, and every rank picks the same for the same row, whatever it
  holds. A group with more guided rows than the prompt has answers guides as many rows as it
  has answers; the others keep their sampled answers.
- Its advantage: the group's own, over the mixed group (Eq. 4: (r - mean(G_on u G_off)) /
  std(G_on u G_off)); TRL computes it when the guide replaces a completion before scoring.
  `rescale_guided_groups` recomputes a guided group's advantages with another scaling:
  LUFFY's released code (grpo_use_std=False) subtracts the mean only.
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

from rlvr.rewards.grpo_math import group_advantages

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
    per_group = 1 if mode == "unsolved" else per_group_guides(fraction, group_size)
    rows = []
    for start in range(0, len(correct), group_size):
        if mode == "unsolved" and any(correct[start : start + group_size]):
            continue
        end = start + group_size
        rows += list(range(end - per_group, end))
    return rows


def per_group_guides(fraction: float, group_size: int) -> int:
    """How many rows of each group mode `fraction` guides: ceil(fraction x G), at least 1 and
    fewer than G (a group of guides alone has no on-policy answer to learn from).

    >>> per_group_guides(0.125, 8), per_group_guides(0.3, 8)
    (1, 3)
    """
    count = max(1, math.ceil(fraction * group_size - 1e-9))
    if count >= group_size:
        raise ValueError(
            f"guidance_fraction {fraction} guides {count} of {group_size} rows: a group needs an "
            "on-policy answer (fraction x G < G)"
        )
    return count


def guide_ordinals(rows: Sequence[int], group_size: int) -> dict[int, int]:
    """Each guided row's place among its group's guided rows (0, 1, ...): which of the prompt's
    answers it takes.

    >>> guide_ordinals([2, 3, 7], 4)
    {2: 0, 3: 1, 7: 0}
    """
    seen: dict[int, int] = {}
    ordinals = {}
    for row in rows:
        group = row // group_size
        ordinals[row] = seen.get(group, 0)
        seen[group] = ordinals[row] + 1
    return ordinals


def local_rows(rows: Sequence[int], local_size: int, rank: int) -> list[int]:
    """Of the guided `rows` (indices over every rank's completions, in rank order), this rank's,
    as indices into its own `local_size` completions: a group that spans two ranks is guided
    once, by the rank that holds the row.

    >>> local_rows([3, 7], 6, rank=0), local_rows([3, 7], 6, rank=1)
    ([3], [1])
    """
    start = rank * local_size
    return [r - start for r in rows if start <= r < start + local_size]


def pick_guides(answers: Sequence[str], prompt_id: str, seed: int, step: int) -> list[str]:
    """The prompt's verified answers in the order its guided rows take them: rotated by a hash
    of seed, step and prompt id (never Python's salted hash()), the same on every rank and every
    rerun; the k-th guided row of a group takes the k-th, so a group's guides are distinct.

    >>> pick_guides(["3+5", "5+3"], "cd-1", 0, 7) == pick_guides(["3+5", "5+3"], "cd-1", 0, 7)
    True
    >>> sorted(pick_guides(["3+5", "5+3"], "cd-1", 0, 7)), pick_guides([], "cd-1", 0, 7)
    (['3+5', '5+3'], [])
    """
    if not answers:
        return []
    digest = hashlib.sha256(f"{seed}\0{step}\0{prompt_id}".encode()).digest()
    start = int.from_bytes(digest[:8], "big") % len(answers)
    return [*answers[start:], *answers[:start]]


def rescale_guided_groups(
    advantages: Sequence[float],
    totals: Sequence[float],
    guided: Sequence[bool],
    group_size: int,
    scale: str,
) -> list[float]:
    """`advantages` (every row of the batch, groups of `group_size`), each group that holds a
    guide recomputed from its rewards `totals` with `scale` (TRL's scale_rewards: group divides
    by the group's std, none subtracts the mean only, LUFFY's released setting).

    >>> rescale_guided_groups([-0.5, 1.5, 1.0, -1.0], [0, 1, 1, 0], [0, 1, 0, 0], 2, "none")
    [-0.5, 0.5, 1.0, -1.0]
    """
    mixed = group_advantages(list(totals), group_size, scale)
    out = list(advantages)
    for start in range(0, len(out), group_size):
        if any(guided[start : start + group_size]):
            out[start : start + group_size] = mixed[start : start + group_size]
    return out
