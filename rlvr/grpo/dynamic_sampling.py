"""DAPO's dynamic sampling (Yu et al. 2025) on TRL's scored batches: which groups carry a
gradient on this rank, and scored batches cut to some groups or merged, padded as TRL pads them.
PipelineGRPOTrainer._dynamically_sampled runs the rounds with these."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def local_group_spread(values, local_size: int, num_generations: int, rank: int) -> list[bool]:
    """For each group of this rank's `local_size` completions (groups of `num_generations`,
    consecutive), whether its `values` differ: the rewards its advantages are computed from (a
    group of equal ones has no gradient). `values` holds every rank's in rank order; NaN
    (unscorable) ones are ignored. (Not the advantages themselves: TRL's float32 mean of equal
    rewards can be off by a rounding error, which its division by std + 1e-4 lifts far from 0.)

    >>> import torch
    >>> values = torch.tensor([1., 1., 0., 1., 5., 5., float("nan"), 2.])
    >>> local_group_spread(values, 4, 2, rank=0), local_group_spread(values, 4, 2, rank=1)
    ([False, True], [False, False])
    """
    mine = values[rank * local_size : (rank + 1) * local_size].view(-1, num_generations)
    finite = torch.isfinite(mine)
    high = torch.where(finite, mine, torch.full_like(mine, -math.inf)).max(dim=1).values
    low = torch.where(finite, mine, torch.full_like(mine, math.inf)).min(dim=1).values
    return ((high - low) > 1e-6).tolist()


def loss_mask(output: dict):
    """The completion tokens TRL's loss counts in a scored batch (tool tokens left out)."""
    mask = output["completion_mask"]
    return mask * output["tool_mask"] if "tool_mask" in output else mask


def select_groups(output: dict, groups: Sequence[int], num_generations: int) -> dict:
    """The scored batch `output` (TRL's dict of per-completion tensors) cut down to `groups`."""
    rows = torch.tensor([g * num_generations + j for g in groups for j in range(num_generations)])
    size = len(output["advantages"])
    return {
        key: value.index_select(0, rows.to(value.device))
        if hasattr(value, "dim") and value.dim() > 0 and len(value) == size
        else value
        for key, value in output.items()
    }


def merge_groups(parts: Sequence[dict], pad_token_id: int) -> dict:
    """Scored batches concatenated: per-token tensors padded to the widest, prompts on the left
    (as TRL pads them), completions and their per-token values on the right; pad ids for the
    token ids, 0 elsewhere. num_items_in_batch is left to the caller (it must be recounted)."""
    merged = {}
    for key, first in parts[0].items():
        if not hasattr(first, "dim") or first.dim() == 0:
            merged[key] = first
            continue
        values = [part[key] for part in parts]
        if first.dim() > 1:
            width = max(v.shape[1] for v in values)
            fill = pad_token_id if key.endswith("_ids") else 0
            padded = []
            for v in values:
                pad = v.new_full((v.shape[0], width - v.shape[1], *v.shape[2:]), fill)
                padded.append(torch.cat([pad, v] if key.startswith("prompt_") else [v, pad], 1))
            values = padded
        merged[key] = torch.cat(values)
    return merged
