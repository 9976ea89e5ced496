"""Parts of a stage's wall time that its code measured (e.g. the train stage's seconds scoring the
validation rows). rlvr.pipeline.stage writes them into the stage's timing file, paths.timing/<stage>.json,
next to the stage's own wall time: the figures the bench reads, so nobody parses console text.
Wall times differ on every run, so none of this enters an output DVC records."""

from __future__ import annotations

PARTS: dict[str, float] = {}  # this process's figures, for its stage's timing file


def record_timing(**seconds: float) -> None:
    """Add parts of this stage's wall time to its timing file. Under several processes the main
    rank records them and its launcher writes them (rlvr.pipeline.stage)."""
    PARTS.update({key: round(value, 3) for key, value in seconds.items()})
