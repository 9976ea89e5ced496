"""JSONL rows <-> typed records, and the Hugging Face dataset GRPOTrainer consumes.

A row is `{"id": str, "prompt": str, "verifier": {"type": str, ...}}`. Validation (rlvr.validation)
decides whether a file is fit to train on; this module only reads, writes and converts.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.errors import PipelineError


class DataError(PipelineError, ValueError):
    """A data file cannot be read as rows; the message names the file and line."""


@dataclass(frozen=True)
class Row:
    """One prompt and the verifier that scores answers to it."""
    id: str
    prompt: str
    verifier: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "prompt": self.prompt, "verifier": dict(self.verifier)}


@dataclass(frozen=True)
class Line:
    """One line of a JSONL file as read: its number, its object (or None) and why it is not one."""
    number: int
    obj: dict[str, Any] | None
    error: str | None


def read_lines(path: str | Path) -> list[Line]:
    """Every line of a JSONL file, parsed where it is a JSON object (validation reports the rest)."""
    lines = []
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as error:
                lines.append(Line(number, None, f"not valid JSON ({error.msg})"))
                continue
            if isinstance(obj, dict):
                lines.append(Line(number, obj, None))
            else:
                lines.append(Line(number, None, f"a JSON {type(obj).__name__}, not an object"))
    return lines


def read_rows(path: str | Path) -> list[Row]:
    """Typed rows of a JSONL file; raises DataError at the first line that is not a row."""
    rows = []
    for line in read_lines(path):
        if line.obj is None:
            raise DataError(f"{path}: line {line.number}: {line.error}")
        try:
            rows.append(Row(id=line.obj["id"], prompt=line.obj["prompt"],
                            verifier=line.obj["verifier"]))
        except KeyError as missing:
            raise DataError(f"{path}: line {line.number}: field {missing} is missing") from None
    return rows


def write_jsonl(path: str | Path, rows: Iterable[Row | Mapping[str, Any]]) -> None:
    """Write rows as JSONL atomically: the file is either the old one or the complete new one."""
    write_text_atomic(path, "".join(
        json.dumps(r.to_json() if isinstance(r, Row) else dict(r), ensure_ascii=False) + "\n"
        for r in rows))


def write_json(path: str | Path, obj: Any) -> None:
    """Write indented JSON atomically (stage outputs: metrics, summaries)."""
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def write_text_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def to_hf_dataset(rows: Iterable[Row], conversational: bool = False):
    """A datasets.Dataset with columns id, prompt, verifier (as JSON text).

    conversational: prompts become one user message each (chat-template models).

    The verifier stays JSON text because rows may mix verifier types whose fields clash in type
    (countdown's integer target vs exact_match's string target), which an Arrow struct cannot hold;
    the reward functions parse it back (rlvr.rewards.registry.as_verifier).
    """
    from datasets import Dataset  # heavy import, only where a dataset is built

    rows = list(rows)
    return Dataset.from_dict({
        "id": [r.id for r in rows],
        "prompt": [[{"role": "user", "content": r.prompt}] if conversational else r.prompt
                   for r in rows],
        "verifier": [json.dumps(dict(r.verifier), sort_keys=True) for r in rows],
    })
