"""What each row of a data file is checked for, beyond what a built-in expectation expresses:
control characters, tags, verifier fields and bounds, regex size and compilation, countdown
solvability (the solver's answer scored by the verifier itself), exact_match answerability. Each
check gives a flag (None: not checked, an earlier rule failed) and the text that explains a
failure; `lines_frame` and `rows_frame` put them in the pandas frames rlvr.data.validation's Great
Expectations suite runs on."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pandas as pd
import regex
from regex import _regex_core as regex_core  # its parser: how many elements a pattern expands to

from rlvr.data.rows import Line
from rlvr.rewards.registry import VERIFIERS, score_correctness, verifier_problems
from rlvr.rewards.verifiers import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    COUNTDOWN_SEARCH_NODES,
    MAX_COUNTDOWN_VALUE,
    CountdownSearchExceeded,
    countdown_reward,
    countdown_solution,
    format_reward,
)

# The longest exact_match target or regex pattern a row may give, in characters: far above any
# answer or format (the default format pattern has 41), far below what would slow every reward
# call. (Prompts are bounded by params data.max_prompt_chars; countdown rows by MAX_COUNTDOWN_VALUE
# and, in the verifier's field rules, MAX_COUNTDOWN_NUMBERS.)
MAX_VERIFIER_TEXT_CHARS = 1_000
# The most elements (parse-tree nodes and characters) a regex pattern may expand to once its
# counted repeats are unrolled: `a{1000}` is about 1,000, `(?:ab){1000}` about 3,000, and nested
# repeats multiply. The `regex` package's compiler spends ~300 bytes and ~0.3 microseconds per
# element, so `(a{1000}){1000}`, 15 characters, takes ~300 MB and `((a{1000}){1000}){10}`
# exhausts memory. 10,000 elements is a few MB.
MAX_REGEX_ELEMENTS = 10_000
# Characters no id, prompt or verifier text may hold: Unicode category Cc (the C0 and C1 controls,
# U+0000-U+001F and U+007F-U+009F: NUL, the ESC of terminal escape sequences, CR, ...) except the
# line break and the tab that prompts use; and Unicode's bidirectional controls (U+061C, U+200E-F,
# U+202A-E, U+2066-9), which reorder how the text around them reads without showing (an id
# `invoice\u202egnp.exe` reads as invoiceexe.png). (Lone surrogates, which are no text at all, are
# rejected when the line is read.)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# A row's optional `tags`: 1 to MAX_TAGS distinct names of its kinds of problem, each made of
# lowercase letters, digits and `_.-` (safe in a file name, a metric key and a report as is).
MAX_TAGS = 8
TAG = re.compile(r"[a-z0-9_.-]{1,32}")
# A value quoted in a problem line is cut to this many characters.
_SHOWN_CHARS = 80

# Columns that explain a failing row; each rule names the one it prints (Rule.detail).
DETAIL_COLUMNS = [
    "line_detail",
    "text_detail",
    "fields_detail",
    "bounds_detail",
    "regex_detail",
    "countdown_detail",
    "exact_match_detail",
    "format_detail",
    "tokenizer_detail",
    "split_detail",
    "tags_detail",
]
# How many of a row's characters outside the tokenizer's alphabet its problem line names.
_SHOWN_UNENCODABLE = 8


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def shown(text: str) -> str:
    """Text as a problem line quotes it: as is when short and printable, else escaped and cut."""
    if text.isprintable() and len(text) <= _SHOWN_CHARS:
        return text
    cut = repr(text[:_SHOWN_CHARS])
    return cut if len(text) <= _SHOWN_CHARS else f"{cut}... ({len(text)} characters)"


def quoted(value: Any) -> str:
    """repr(value), cut to _SHOWN_CHARS (repr escapes control characters)."""
    text = repr(value)
    if len(text) <= _SHOWN_CHARS:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return f"{text[:_SHOWN_CHARS]}...{size}"


def _controls_detail(obj: dict) -> tuple[bool, str]:
    """Do the id, the prompt and the verifier's texts hold no control character but \\n and \\t?"""
    verifier = obj.get("verifier")
    fields = [("id", obj.get("id")), ("prompt", obj.get("prompt"))]
    if isinstance(verifier, dict):
        fields += [(f"verifier.{key}", verifier.get(key)) for key in ("target", "pattern")]
    found = []
    for name, value in fields:
        control = _CONTROL.search(value) if isinstance(value, str) else None
        if control:
            found.append(
                f"{name} has U+{ord(control.group()):04X} at character {control.start() + 1}"
            )
    return not found, "; ".join(found)


def _tags_detail(obj: dict) -> tuple[bool | None, str]:
    """Is the optional `tags` field a list of 1-MAX_TAGS distinct tag names? None without one.

    >>> _tags_detail({}), _tags_detail({"tags": ["sub", "mul"]})
    ((None, ''), (True, ''))
    >>> _tags_detail({"tags": ["Sub", "sub", "sub"]})
    (False, "tag 'Sub' is not 1-32 characters of a-z 0-9 _ . -; tag 'sub' is repeated")
    """
    if "tags" not in obj:
        return None, ""
    tags = obj["tags"]
    if not isinstance(tags, list) or not 1 <= len(tags) <= MAX_TAGS:
        return False, f"tags must be a list of 1-{MAX_TAGS} strings, got {quoted(tags)}"
    found = [
        f"tag {quoted(t)} is not 1-32 characters of a-z 0-9 _ . -"
        for t in tags
        if not isinstance(t, str) or not TAG.fullmatch(t)
    ]
    names = [t for t in tags if isinstance(t, str)]
    found += [f"tag {quoted(t)} is repeated" for t in sorted(set(names)) if names.count(t) > 1]
    return not found, "; ".join(found)


def regex_elements(pattern: str) -> int:
    """How many elements `pattern` expands to when compiled: counted repeats unrolled, nested ones
    multiplied. Read from the parse tree of the `regex` package's own parser (regex._regex_core,
    private but pinned in requirements.lock; the tests pin what it reads), which costs
    microseconds where the compiler's expansion can exhaust memory. Raises regex.error where the
    pattern does not parse, RecursionError where it nests too deeply.

    >>> regex_elements("a{1000}"), regex_elements("(?:ab){1000}"), regex_elements("(a{100}){100}")
    (1001, 3001, 10201)
    """
    flags = 0
    while True:  # what regex.compile does with a global flag set mid-pattern, e.g. x(?i)y
        source = regex_core.Source(pattern)
        info = regex_core.Info(flags, source.char_type, {})
        source.ignore_space = bool(info.flags & regex.VERBOSE)
        try:
            parsed = regex_core._parse_pattern(source, info)
            break
        except regex_core._UnscopedFlagSet:
            flags = info.global_flags

    def elements(node: Any) -> int:
        if isinstance(node, regex_core.GreedyRepeat):  # and LazyRepeat, PossessiveRepeat
            return max(node.min_count, 1) * elements(node.subpattern)
        if isinstance(node, regex_core.String):
            return len(node.characters)
        total = 1
        for value in vars(node).values():
            for child in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(child, regex_core.RegexBase):
                    total += elements(child)
        return total

    return elements(parsed)


def _bounds_detail(verifier: Any, fields_ok: bool | None) -> tuple[bool | None, str]:
    """Are a well-typed verifier's values within the bounds the verifiers handle?"""
    if not fields_ok:
        return None, ""
    found = []
    if verifier["type"] == "countdown":
        values = [("target", verifier["target"])] + [("number", n) for n in verifier["numbers"]]
        for name, value in values:
            if abs(value) > MAX_COUNTDOWN_VALUE:
                digits = len(str(abs(value)))
                shown = str(value) if digits <= 32 else f"of {digits} digits"
                found.append(
                    f"{name} {shown} is beyond {MAX_COUNTDOWN_VALUE:,} in absolute "
                    "value (rlvr.rewards.verifiers.MAX_COUNTDOWN_VALUE)"
                )
                break
    for key in ("target", "pattern"):
        value = verifier.get(key)
        if isinstance(value, str) and len(value) > MAX_VERIFIER_TEXT_CHARS:
            found.append(
                f"{key} has {len(value)} characters, more than {MAX_VERIFIER_TEXT_CHARS} "
                "(rlvr.data.row_checks.MAX_VERIFIER_TEXT_CHARS)"
            )
    if verifier["type"] == "regex" and not found:
        try:
            size = regex_elements(verifier["pattern"])
        except (regex.error, RecursionError):
            size = 0  # regex_compiles reports it
        if size > MAX_REGEX_ELEMENTS:
            found.append(
                f"pattern expands to {size:,} elements when compiled (counted repeats "
                f"unrolled), more than {MAX_REGEX_ELEMENTS:,} "
                "(rlvr.data.row_checks.MAX_REGEX_ELEMENTS)"
            )
    return not found, "; ".join(found)


def _verifier_detail(verifier: Any) -> tuple[bool | None, str]:
    """Are a known-type verifier's fields well typed? None when the type is unknown or missing
    (that is reported by its own rule, not twice)."""
    if not isinstance(verifier, dict):
        return False, "verifier must be an object"
    if verifier.get("type") not in VERIFIERS:
        return None, ""
    problems = verifier_problems(verifier)
    return (not problems), "; ".join(problems)


def _regex_compiles(verifier: Any, fields_ok: bool | None) -> tuple[bool | None, str]:
    if not fields_ok or verifier.get("type") != "regex":
        return None, ""
    try:
        regex.compile(verifier["pattern"])
        return True, ""
    except regex.error as error:
        return False, f"pattern {verifier['pattern']!r}: {error}"
    except RecursionError:
        return False, f"pattern {quoted(verifier['pattern'])}: nests too deeply"


def _countdown_solvable(
    verifier: Any, fields_ok: bool | None
) -> tuple[bool | None, bool | None, str, str | None]:
    """(searched within the budget, solvable, why not, the solver's answer): None where the rule
    does not apply."""
    if not fields_ok or verifier.get("type") != "countdown":
        return None, None, "", None
    numbers, target = verifier["numbers"], verifier["target"]
    division = verifier.get("allow_division", False)
    try:
        solution = countdown_solution(numbers, target, division, max_nodes=COUNTDOWN_SEARCH_NODES)
    except CountdownSearchExceeded:
        return False, None, (f"{target} from {numbers}{' with division' if division else ''}"), None
    if solution is None:
        return True, False, f"{target} cannot be made from {numbers}", None
    # The verifier has the last word: a row counts as answerable only if it rewards an answer.
    if countdown_reward(solution, numbers, target, division) != 1.0:
        return (
            True,
            False,
            (
                f"the verifier scores the solver's answer {solution!r} as 0, so no "
                f"answer to {target} from {numbers} can earn a reward"
            ),
            None,
        )
    return True, True, "", solution


def _format_accepts(
    answer: str | None, format_pattern: str | None, boxed: bool = False
) -> tuple[bool | None, str]:
    """Does the format reward accept the row's known-correct answer (the countdown solver's, the
    exact_match or math target), bare or in answer tags (the block the verifier reads), or for
    a math row in `\\boxed{}` too? None where there is no such answer or no format reward."""
    if answer is None or format_pattern is None:
        return None, ""
    forms = [answer, f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}", *([f"\\boxed{{{answer}}}"] * boxed)]
    if any(format_reward(form, format_pattern) == 1.0 for form in forms):
        return True, ""
    where = (
        f"bare, in {ANSWER_OPEN} tags or in \\boxed{{}}"
        if boxed
        else f"bare or in {ANSWER_OPEN} tags"
    )
    return False, (
        f"its correct answer {quoted(answer)} does not match "
        f"{quoted(format_pattern)}, {where}, so the format reward would punish it"
    )


def _exact_match_answerable(verifier: Any, fields_ok: bool | None) -> tuple[bool | None, str]:
    """Does the verifier reward the target itself? (Not when it holds answer tags, which the
    verifier strips from every answer.) Regex rows have no such witness: a pattern that can
    never match is not detected."""
    if not fields_ok or verifier.get("type") != "exact_match":
        return None, ""
    if score_correctness(verifier["target"], verifier) == 1.0:
        return True, ""
    return False, (
        f"the verifier scores the target {verifier['target']!r} itself as 0, so no "
        "answer can earn a reward"
    )


def lines_frame(lines: Sequence[Line]) -> pd.DataFrame:
    """One row per line; a line that fails one line rule is None (not checked) for the others."""

    def flag(line: Line, kind: str) -> bool | None:
        if line.obj is not None:
            return True
        return False if line.kind == kind else None

    return pd.DataFrame(
        {
            "line": [line.number for line in lines],
            "id": [None for _ in lines],
            "is_text": [flag(line, "text") for line in lines],
            "length_ok": [flag(line, "length") for line in lines],
            "is_json_object": [flag(line, "json") for line in lines],
            **{column: ["" for _ in lines] for column in DETAIL_COLUMNS},
            "line_detail": [line.error or "" for line in lines],
        },
        columns=["line", "id", "is_text", "length_ok", "is_json_object", *DETAIL_COLUMNS],
    )


def _encodable(prompt: Any, answer: str | None, alphabet: str | None) -> tuple[bool | None, str]:
    """Does the tokenizer's `alphabet` (None: it encodes any text) hold every character of the
    prompt and of the known-correct answer?"""
    if alphabet is None or not isinstance(prompt, str):
        return None, ""
    missing = sorted(set(prompt + (answer or "")) - set(alphabet))
    if not missing:
        return True, ""
    shown = ", ".join(quoted(c) for c in missing[:_SHOWN_UNENCODABLE])
    more = (
        f" and {len(missing) - _SHOWN_UNENCODABLE} more"
        if len(missing) > _SHOWN_UNENCODABLE
        else ""
    )
    return False, f"{shown}{more}"


def rows_frame(
    lines: Sequence[Line],
    other_prompts: dict[str, set[str]] | None = None,
    format_pattern: str | None = None,
    alphabet: str | None = None,
) -> pd.DataFrame:
    """One row per JSON object, with the flags the custom rules need and the text explaining them.
    `other_prompts` (file -> its prompts) names, per row, the other files holding its prompt;
    `format_pattern`: the format reward's pattern (None: no format reward), which must accept
    each row's known-correct answer; `alphabet`: the characters the policy's tokenizer encodes
    (None: any text), which must hold each row's prompt and known-correct answer."""
    other_prompts = other_prompts or {}
    records = []
    for line in lines:
        if line.obj is None:
            continue
        obj = line.obj
        verifier = obj.get("verifier")
        kind = verifier.get("type") if isinstance(verifier, dict) else None
        text_ok, text_detail = _controls_detail(obj)
        fields_ok, fields_detail = _verifier_detail(verifier)
        bounds_ok, bounds_detail = _bounds_detail(verifier, fields_ok)
        usable = fields_ok and bounds_ok  # the checks below run only on values in bounds
        compiles, regex_detail = _regex_compiles(verifier, usable)
        searched, solvable, solve_detail, solution = _countdown_solvable(verifier, usable)
        answerable, answer_detail = _exact_match_answerable(verifier, usable)
        known = (
            solution
            if solvable
            else verifier["target"]
            if answerable or (usable and kind == "math")
            else None
        )
        formatted, format_detail = _format_accepts(known, format_pattern, kind == "math")
        encodable, tokenizer_detail = _encodable(obj.get("prompt"), known, alphabet)
        tags_ok, tags_detail = _tags_detail(obj)
        records.append(
            {
                "line": line.number,
                "id": _text(obj.get("id")),
                "prompt": _text(obj.get("prompt")),
                "verifier_type": _text(kind),
                "text_ok": text_ok,
                "verifier_fields_ok": fields_ok,
                "verifier_bounds_ok": bounds_ok,
                "regex_compiles": compiles,
                "countdown_searched": searched,
                "countdown_solvable": solvable,
                "exact_match_answerable": answerable,
                "format_accepts_answer": formatted,
                "tokenizer_encodes": encodable,
                "tags_ok": tags_ok,
                "line_detail": "",
                "text_detail": text_detail,
                "fields_detail": fields_detail,
                "bounds_detail": bounds_detail,
                "regex_detail": regex_detail,
                "countdown_detail": solve_detail,
                "exact_match_detail": answer_detail,
                "format_detail": format_detail,
                "tokenizer_detail": tokenizer_detail,
                "split_detail": ", ".join(
                    f"also in {path}"
                    for path, prompts in other_prompts.items()
                    if obj.get("prompt") in prompts
                ),
                "tags_detail": tags_detail,
            }
        )
    columns = [
        "line",
        "id",
        "prompt",
        "verifier_type",
        "text_ok",
        "verifier_fields_ok",
        "verifier_bounds_ok",
        "regex_compiles",
        "countdown_searched",
        "countdown_solvable",
        "exact_match_answerable",
        "format_accepts_answer",
        "tokenizer_encodes",
        "tags_ok",
        *DETAIL_COLUMNS,
    ]
    return pd.DataFrame.from_records(records, columns=columns).astype(object)
