"""JSONL rows <-> typed records, and the Hugging Face dataset GRPOTrainer consumes.

A row is `{"id": str, "prompt": str, "verifier": {"type": str, ...}}`, optionally with
`"tags": [str, ...]`. Validation (rlvr.data.validation) decides whether a file is fit to train on;
this module only reads, writes and converts.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.core.errors import PipelineError
from rlvr.core.files import write_text_atomic


class DataError(PipelineError, ValueError):
    """A data file cannot be read as rows; the message names the file and line."""


@dataclass(frozen=True)
class Row:
    """One prompt and the verifier that scores answers to it; optional tags name the kinds of
    problem it belongs to (the audit reports each tag's rows apart: rlvr.audit.slices)."""

    id: str
    prompt: str
    verifier: Mapping[str, Any]
    tags: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        row = {"id": self.id, "prompt": self.prompt, "verifier": dict(self.verifier)}
        return {**row, "tags": list(self.tags)} if self.tags else row


# A line longer than this many bytes is reported, not parsed: far above any row (prompts are
# bounded by params data.max_prompt_chars, 200 by default), small enough that one runaway line
# cannot stall validation or exhaust memory.
MAX_LINE_BYTES = 1_000_000
# An integer literal longer than this many digits is not converted (Python's own limit for str ->
# int, sys.get_int_max_str_digits(), whose ValueError would otherwise escape json.loads).
MAX_INT_DIGITS = 4300


@dataclass(frozen=True)
class Line:
    """One line of a JSONL file as read: its number, its object (or None) and why it is not one.

    `kind` says what went wrong: "text" (not UTF-8 text), "length" (over MAX_LINE_BYTES) or
    "json" (text, but not a JSON object)."""

    number: int
    obj: dict[str, Any] | None
    error: str | None
    kind: str = "json"


class _NotJson(ValueError):
    """A number json.loads would accept that a JSON row may not hold."""


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _NotJson(f"an integer of {digits} digits; at most {MAX_INT_DIGITS}")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJson(f"the number {text[:20]}{'...' if len(text) > 20 else ''} is out of range")
    return value


def _parse_constant(name: str) -> float:
    raise _NotJson(f"{name} is not a JSON number")  # json.loads accepts NaN and Infinity


def _parse_line(number: int, raw: bytes) -> Line:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return Line(
            number,
            None,
            f"byte {error.start + 1} (0x{raw[error.start]:02x}): {error.reason}",
            kind="text",
        )
    try:
        obj = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
        )
    except json.JSONDecodeError as error:
        return Line(number, None, f"not valid JSON ({error.msg})")
    except _NotJson as error:
        return Line(number, None, f"not valid JSON ({error})")
    except RecursionError:
        return Line(number, None, "not valid JSON (nested too deeply)")
    if not isinstance(obj, dict):
        return Line(number, None, f"a JSON {type(obj).__name__}, not an object")
    try:  # a \ud800 escape parses to a lone surrogate, which no UTF-8 text (or pandas) can hold
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        return Line(
            number,
            None,
            f"the escape \\u{ord(error.object[error.start]):04x} is a lone "
            "surrogate, not a character",
            kind="text",
        )
    return Line(number, obj, None)


def _open_error(path: str | Path, error: OSError) -> DataError:
    if isinstance(error, FileNotFoundError):
        return DataError(f"{path}: no such file")
    if isinstance(error, IsADirectoryError):  # (os.stat said it was a file a moment before)
        return DataError(f"{path}: is a directory, not a JSONL file")
    if isinstance(error, PermissionError):
        return DataError(f"{path}: cannot be read: permission denied")
    return DataError(f"{path}: cannot be read: {error.strerror or error}")


def read_lines(path: str | Path) -> list[Line]:
    """Every line of a JSONL file, parsed where it is a JSON object (validation reports the rest).

    Lines end with \\n (a \\r before it is JSON whitespace), as `wc -l` and editors count them.
    A file that cannot be read at all (missing, a directory, not permitted) raises DataError
    `<path>: <why>`; a line that cannot be read (not UTF-8, over MAX_LINE_BYTES, not JSON) is a
    Line with its error, never an exception.
    """
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise DataError(f"{path}: is a directory, not a JSONL file")
        if not stat.S_ISREG(mode):  # a FIFO or a device could block, or never end
            raise DataError(f"{path}: is not a regular file")
        lines = []
        with open(path, "rb") as handle:
            number = 0
            while raw := handle.readline(MAX_LINE_BYTES + 1):
                number += 1
                if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                    size = len(raw)
                    while not raw.endswith(b"\n") and (raw := handle.readline(1 << 20)):
                        size += len(raw)
                    size -= raw.endswith(b"\n")
                    lines.append(Line(number, None, f"{size} bytes", kind="length"))
                else:
                    lines.append(_parse_line(number, raw))
        return lines
    except OSError as error:
        raise _open_error(path, error) from None


def read_rows(path: str | Path) -> list[Row]:
    """Typed rows of a JSONL file; raises DataError at the first line that is not a row."""
    rows = []
    for line in read_lines(path):
        if line.obj is None:
            what = {
                "text": "not UTF-8 text: ",
                "length": f"longer than {MAX_LINE_BYTES} bytes: ",
            }.get(line.kind, "")
            raise DataError(f"{path}: line {line.number}: {what}{line.error}")
        try:
            rows.append(
                Row(
                    id=line.obj["id"],
                    prompt=line.obj["prompt"],
                    verifier=line.obj["verifier"],
                    tags=tuple(line.obj.get("tags") or ()),
                )
            )
        except KeyError as missing:
            raise DataError(f"{path}: line {line.number}: field {missing} is missing") from None
    return rows


def write_jsonl(path: str | Path, rows: Iterable[Row | Mapping[str, Any]]) -> None:
    """Write rows as JSONL atomically: the file is either the old one or the complete new one."""
    write_text_atomic(
        path,
        "".join(
            json.dumps(r.to_json() if isinstance(r, Row) else dict(r), ensure_ascii=False) + "\n"
            for r in rows
        ),
    )


def to_hf_dataset(rows: Iterable[Row], conversational: bool = False):
    """A datasets.Dataset with columns id, prompt, verifier (as JSON text).

    conversational: prompts become one user message each (chat-template models).

    The verifier stays JSON text because rows may mix verifier types whose fields clash in type
    (countdown's integer target vs exact_match's string target), which an Arrow struct cannot hold;
    the reward functions parse it back (rlvr.rewards.registry.as_verifier).
    """
    # here: datasets takes ~0.9 s to import; validation and row checks read rows without it
    from datasets import Dataset

    rows = list(rows)
    return Dataset.from_dict(
        {
            "id": [r.id for r in rows],
            "prompt": [
                [{"role": "user", "content": r.prompt}] if conversational else r.prompt
                for r in rows
            ],
            "verifier": [json.dumps(dict(r.verifier), sort_keys=True) for r in rows],
        }
    )
