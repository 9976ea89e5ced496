"""The data contract, as a Great Expectations suite kept in code.

Each JSONL file becomes two pandas frames: one row per line (is it a JSON object?) and one row per
object (the fields, flattened). Built-in expectations check what they can express (row count,
presence, uniqueness, lengths, sets); the rules no built-in expresses (verifier fields well typed,
regex compiles, countdown target reachable, checked by scoring the solver's answer with the
verifier itself) are computed per row as flag columns that an expectation then requires to be
true. Every failure is reported as one plain line naming the file,
the row id (or line number) and the rule broken.

Unreadable input is data, not a crash: a line that is not UTF-8, too long, or not JSON (a NaN, an
integer of thousands of digits, nesting too deep) fails a line rule; control characters and values
beyond the bounds below fail a row rule; a countdown row whose solvability the solver cannot
decide within its budget fails one too. Only a file that cannot be read at all (missing, a
directory, not permitted) stops validation, with a DataError `<path>: <why>`.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import regex

from rlvr.data import MAX_LINE_BYTES, Line, read_lines, share_with_umask
from rlvr.rewards.registry import VERIFIERS, score_correctness, verifier_problems
from rlvr.rewards.verifiers import (COUNTDOWN_SEARCH_NODES, MAX_COUNTDOWN_VALUE,
                                    CountdownSearchExceeded, countdown_reward, countdown_solution)

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
# line break and the tab that prompts use. (Lone surrogates, which are no text at all, are
# rejected when the line is read.)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# A row's optional `tags`: 1 to MAX_TAGS distinct names of its kinds of problem, each made of
# lowercase letters, digits and `_.-` (safe in a file name, a metric key and a report as is).
MAX_TAGS = 8
TAG = re.compile(r"[a-z0-9_.-]{1,32}")
# A value quoted in a problem line is cut to this many characters.
_SHOWN_CHARS = 80

# Columns that explain a failing row; each rule names the one it prints (Rule.detail).
_DETAIL_COLUMNS = ["line_detail", "text_detail", "fields_detail", "bounds_detail", "regex_detail",
                   "countdown_detail", "exact_match_detail", "split_detail", "tags_detail"]
_RESULT_FORMAT = {"result_format": "COMPLETE",
                  "unexpected_index_column_names": ["line", "id", *_DETAIL_COLUMNS]}


@dataclass(frozen=True)
class Rule:
    """One expectation of the contract: a short name, the sentence printed when it fails, and
    what to add to it: a detail column's text, or (detail="value") the offending value."""
    name: str
    message: str
    expectation: Any
    detail: str | None = None


@dataclass
class FileReport:
    path: str
    lines: int
    rows: int
    results: list[dict]      # per rule: name, success, unexpected_count
    problems: list[str]      # one plain line per failing row (or table) and rule


# --------------------------------------------------------------------------- frames

def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _shown(text: str) -> str:
    """Text as a problem line quotes it: as is when short and printable, else escaped and cut."""
    if text.isprintable() and len(text) <= _SHOWN_CHARS:
        return text
    cut = repr(text[:_SHOWN_CHARS])
    return cut if len(text) <= _SHOWN_CHARS else f"{cut}... ({len(text)} characters)"


def _quoted(value: Any) -> str:
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
            found.append(f"{name} has U+{ord(control.group()):04X} at character "
                         f"{control.start() + 1}")
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
        return False, f"tags must be a list of 1-{MAX_TAGS} strings, got {_quoted(tags)}"
    found = [f"tag {_quoted(t)} is not 1-32 characters of a-z 0-9 _ . -" for t in tags
             if not isinstance(t, str) or not TAG.fullmatch(t)]
    names = [t for t in tags if isinstance(t, str)]
    found += [f"tag {_quoted(t)} is repeated" for t in sorted(set(names))
              if names.count(t) > 1]
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
    from regex import _regex_core as core

    flags = 0
    while True:  # what regex.compile does with a global flag set mid-pattern, e.g. x(?i)y
        source = core.Source(pattern)
        info = core.Info(flags, source.char_type, {})
        source.ignore_space = bool(info.flags & regex.VERBOSE)
        try:
            parsed = core._parse_pattern(source, info)
            break
        except core._UnscopedFlagSet:
            flags = info.global_flags

    def elements(node: Any) -> int:
        if isinstance(node, core.GreedyRepeat):  # and LazyRepeat, PossessiveRepeat
            return max(node.min_count, 1) * elements(node.subpattern)
        if isinstance(node, core.String):
            return len(node.characters)
        total = 1
        for value in vars(node).values():
            for child in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(child, core.RegexBase):
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
                found.append(f"{name} {shown} is beyond {MAX_COUNTDOWN_VALUE:,} in absolute "
                             "value (rlvr.rewards.verifiers.MAX_COUNTDOWN_VALUE)")
                break
    for key in ("target", "pattern"):
        value = verifier.get(key)
        if isinstance(value, str) and len(value) > MAX_VERIFIER_TEXT_CHARS:
            found.append(f"{key} has {len(value)} characters, more than {MAX_VERIFIER_TEXT_CHARS} "
                         "(rlvr.validation.MAX_VERIFIER_TEXT_CHARS)")
    if verifier["type"] == "regex" and not found:
        try:
            size = regex_elements(verifier["pattern"])
        except (regex.error, RecursionError):
            size = 0  # regex_compiles reports it
        if size > MAX_REGEX_ELEMENTS:
            found.append(f"pattern expands to {size:,} elements when compiled (counted repeats "
                         f"unrolled), more than {MAX_REGEX_ELEMENTS:,} "
                         "(rlvr.validation.MAX_REGEX_ELEMENTS)")
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
        return False, f"pattern {_quoted(verifier['pattern'])}: nests too deeply"


def _countdown_solvable(verifier: Any, fields_ok: bool | None
                        ) -> tuple[bool | None, bool | None, str]:
    """(searched within the budget, solvable, why not): None where the rule does not apply."""
    if not fields_ok or verifier.get("type") != "countdown":
        return None, None, ""
    numbers, target = verifier["numbers"], verifier["target"]
    division = verifier.get("allow_division", False)
    try:
        solution = countdown_solution(numbers, target, division, max_nodes=COUNTDOWN_SEARCH_NODES)
    except CountdownSearchExceeded:
        return False, None, (f"{target} from {numbers}"
                             f"{' with division' if division else ''}")
    if solution is None:
        return True, False, f"{target} cannot be made from {numbers}"
    # The verifier has the last word: a row counts as answerable only if it rewards an answer.
    if countdown_reward(solution, numbers, target, division) != 1.0:
        return True, False, (f"the verifier scores the solver's answer {solution!r} as 0, so no "
                             f"answer to {target} from {numbers} can earn a reward")
    return True, True, ""


def _exact_match_answerable(verifier: Any, fields_ok: bool | None) -> tuple[bool | None, str]:
    """Does the verifier reward the target itself? (Not when it holds answer tags, which the
    verifier strips from every answer.) Regex rows have no such witness: a pattern that can
    never match is not detected."""
    if not fields_ok or verifier.get("type") != "exact_match":
        return None, ""
    if score_correctness(verifier["target"], verifier) == 1.0:
        return True, ""
    return False, (f"the verifier scores the target {verifier['target']!r} itself as 0, so no "
                   "answer can earn a reward")


def lines_frame(lines: Sequence[Line]) -> pd.DataFrame:
    """One row per line; a line that fails one line rule is None (not checked) for the others."""
    def flag(line: Line, kind: str) -> bool | None:
        if line.obj is not None:
            return True
        return False if line.kind == kind else None

    return pd.DataFrame({
        "line": [line.number for line in lines],
        "id": [None for _ in lines],
        "is_text": [flag(line, "text") for line in lines],
        "length_ok": [flag(line, "length") for line in lines],
        "is_json_object": [flag(line, "json") for line in lines],
        **{column: ["" for _ in lines] for column in _DETAIL_COLUMNS},
        "line_detail": [line.error or "" for line in lines],
    }, columns=["line", "id", "is_text", "length_ok", "is_json_object", *_DETAIL_COLUMNS])


def rows_frame(lines: Sequence[Line], other_prompts: dict[str, set[str]] | None = None
               ) -> pd.DataFrame:
    """One row per JSON object, with the flags the custom rules need and the text explaining them.
    `other_prompts` (file -> its prompts) names, per row, the other files holding its prompt."""
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
        searched, solvable, solve_detail = _countdown_solvable(verifier, usable)
        answerable, answer_detail = _exact_match_answerable(verifier, usable)
        tags_ok, tags_detail = _tags_detail(obj)
        records.append({
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
            "tags_ok": tags_ok,
            "line_detail": "",
            "text_detail": text_detail,
            "fields_detail": fields_detail,
            "bounds_detail": bounds_detail,
            "regex_detail": regex_detail,
            "countdown_detail": solve_detail,
            "exact_match_detail": answer_detail,
            "split_detail": ", ".join(f"also in {path}" for path, prompts in other_prompts.items()
                                      if obj.get("prompt") in prompts),
            "tags_detail": tags_detail,
        })
    columns = ["line", "id", "prompt", "verifier_type", "text_ok", "verifier_fields_ok",
               "verifier_bounds_ok", "regex_compiles", "countdown_searched", "countdown_solvable",
               "exact_match_answerable", "tags_ok", *_DETAIL_COLUMNS]
    return pd.DataFrame.from_records(records, columns=columns).astype(object)


# --------------------------------------------------------------------------- the suite

def line_rules() -> list[Rule]:
    import great_expectations as gx

    E = gx.expectations
    return [Rule("line_text", "is not UTF-8 text",
                 E.ExpectColumnValuesToBeInSet(column="is_text", value_set=[True]),
                 detail="line_detail"),
            Rule("line_length", f"is longer than {MAX_LINE_BYTES} bytes (rlvr.data.MAX_LINE_BYTES)",
                 E.ExpectColumnValuesToBeInSet(column="length_ok", value_set=[True]),
                 detail="line_detail"),
            Rule("json_object", "is not a JSON object",
                 E.ExpectColumnValuesToBeInSet(column="is_json_object", value_set=[True]),
                 detail="line_detail")]


def row_rules(expected_rows: int | None, max_prompt_chars: int,
              other_prompts: dict[str, set[str]]) -> list[Rule]:
    """The contract for one file's rows. `expected_rows` None: any non-zero count.
    `other_prompts`: the other splits' prompts by file; no prompt may be in two files."""
    import great_expectations as gx

    E = gx.expectations
    rules = [
        Rule("row_count",
             f"has a wrong number of rows (params data.train_rows = {expected_rows})"
             if expected_rows is not None else "has no rows",
             E.ExpectTableRowCountToEqual(value=expected_rows) if expected_rows is not None
             else E.ExpectTableRowCountToBeBetween(min_value=1)),
    ]
    for column, field in (("id", "id"), ("prompt", "prompt"), ("verifier_type", "verifier.type")):
        rules.append(Rule(f"{column}_present", f"{field} is missing or not a string",
                          E.ExpectColumnValuesToNotBeNull(column=column)))
    for column in ("id", "prompt"):
        rules.append(Rule(f"{column}_not_blank", f"{column} is empty",
                          E.ExpectColumnValuesToMatchRegex(column=column, regex=r"\S")))
    rules += [
        Rule("id_unique", "id is not unique", E.ExpectColumnValuesToBeUnique(column="id")),
        Rule("prompt_unique", "prompt is not unique",
             E.ExpectColumnValuesToBeUnique(column="prompt")),
        Rule("prompt_length", f"prompt is longer than {max_prompt_chars} characters "
                              "(params data.max_prompt_chars)",
             E.ExpectColumnValueLengthsToBeBetween(column="prompt", max_value=max_prompt_chars)),
        Rule("control_characters", "holds a control character other than \\n and \\t",
             E.ExpectColumnValuesToBeInSet(column="text_ok", value_set=[True]),
             detail="text_detail"),
        Rule("verifier_type_known", f"verifier.type is not one of {sorted(VERIFIERS)}",
             E.ExpectColumnValuesToBeInSet(column="verifier_type", value_set=sorted(VERIFIERS)),
             detail="value"),
        Rule("verifier_fields", "verifier fields are missing or ill-typed",
             E.ExpectColumnValuesToBeInSet(column="verifier_fields_ok", value_set=[True]),
             detail="fields_detail"),
        Rule("verifier_bounds", "verifier values are out of bounds",
             E.ExpectColumnValuesToBeInSet(column="verifier_bounds_ok", value_set=[True]),
             detail="bounds_detail"),
        Rule("regex_compiles", "regex verifier pattern does not compile",
             E.ExpectColumnValuesToBeInSet(column="regex_compiles", value_set=[True]),
             detail="regex_detail"),
        Rule("countdown_search_budget",
             f"countdown solvability search exceeded its budget of {COUNTDOWN_SEARCH_NODES:,} "
             "nodes (rlvr.rewards.verifiers.COUNTDOWN_SEARCH_NODES): use fewer numbers",
             E.ExpectColumnValuesToBeInSet(column="countdown_searched", value_set=[True]),
             detail="countdown_detail"),
        Rule("countdown_solvable", "countdown target is unreachable",
             E.ExpectColumnValuesToBeInSet(column="countdown_solvable", value_set=[True]),
             detail="countdown_detail"),
        Rule("exact_match_answerable", "exact_match target can never be matched",
             E.ExpectColumnValuesToBeInSet(column="exact_match_answerable", value_set=[True]),
             detail="exact_match_detail"),
        Rule("tags", f"tags are malformed (optional: a list of 1-{MAX_TAGS} distinct names)",
             E.ExpectColumnValuesToBeInSet(column="tags_ok", value_set=[True]),
             detail="tags_detail"),
        Rule("prompt_not_in_other_split",
             f"prompt is in another split (train, validation and test share no prompt; "
             f"checked against {', '.join(other_prompts)})",
             E.ExpectColumnValuesToNotBeInSet(
                 column="prompt", value_set=sorted(set().union(*other_prompts.values()))),
             detail="split_detail"),
    ]
    return rules


# --------------------------------------------------------------------------- running it

class _Runner:
    """One ephemeral GX context; each frame is validated by a checkpoint that updates Data Docs."""

    def __init__(self, docs_dir: Path | None, run_name: str) -> None:
        import great_expectations as gx
        from great_expectations.core.run_identifier import RunIdentifier
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.gx = gx
        # Every page names the data it validated (the files' md5s, as dvc.lock records them);
        # the run time stays the real one.
        self.run_id = RunIdentifier(run_name=run_name)
        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        self.source = self.context.data_sources.add_pandas("rows")
        self.sites = []
        if docs_dir is not None:
            self.context.add_data_docs_site(site_name="validation", site_config={
                "class_name": "SiteBuilder",
                "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                                  "base_directory": str(docs_dir)},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            })
            self.sites = ["validation"]

    def run(self, name: str, frame: pd.DataFrame, rules: Sequence[Rule]) -> list[tuple[Rule, Any]]:
        gx = self.gx
        batch = self.source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name)
        suite = self.context.suites.add(gx.ExpectationSuite(name=name))
        for rule in rules:
            rule.expectation.meta = {"rule": rule.name, "message": rule.message}
            suite.add_expectation(rule.expectation)
        definition = self.context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch, suite=suite))
        actions = [gx.checkpoint.UpdateDataDocsAction(name="docs", site_names=self.sites)] \
            if self.sites else []
        checkpoint = self.context.checkpoints.add(gx.Checkpoint(
            name=name, validation_definitions=[definition], actions=actions,
            result_format=_RESULT_FORMAT))
        result = checkpoint.run(batch_parameters={"dataframe": frame}, run_id=self.run_id)
        (validation,) = result.run_results.values()
        by_name = {r.expectation_config.meta["rule"]: r for r in validation.results}
        return [(rule, by_name[rule.name]) for rule in rules]


def _problem_lines(path: str, rule: Rule, result: Any) -> list[str]:
    if result.success:
        return []
    if result.exception_info and result.exception_info.get("raised_exception"):
        return [f"{path}: rule {rule.name} could not run: "
                f"{result.exception_info.get('exception_message')}"]
    unexpected = result.result.get("unexpected_index_list")
    if unexpected is None:  # a table-level rule
        observed = result.result.get("observed_value")
        return [f"{path}: {rule.message}: found {observed} [{rule.name}]"]
    lines = []
    for item in unexpected:
        row_id = item.get("id")
        where = f"row {_shown(row_id)} (line {item['line']})" \
            if isinstance(row_id, str) and row_id.strip() else f"line {item['line']}"
        if rule.detail == "value":
            detail = f": got {_quoted(item.get(rule.expectation.column))}"
        else:
            detail = f": {item[rule.detail]}" if rule.detail and item.get(rule.detail) else ""
        lines.append(f"{path}: {where}: {rule.message}{detail} [{rule.name}]")
    return lines


def validate_files(train_path: str, eval_path: str, train_rows: int, max_prompt_chars: int,
                   docs_dir: str | Path | None = None, val_path: str | None = None
                   ) -> list[FileReport]:
    """Validate the training, validation (when given) and held-out test files against the
    contract: the same rules for each, `train_rows` rows in the training file, and no prompt in
    two of the files. Reports come in that order.

    Data Docs HTML is written to `docs_dir` (replaced whole, only once every file was validated).
    They are a view for people, not a DVC output: GX stamps them with the run time, so their bytes
    differ on every run; summary() is the record. Each page's run name carries the md5 of every
    file (`data-<train md5>-[<val md5>-]<eval md5>`, 8 hex digits each) so it says which data it
    shows.
    """
    from rlvr.provenance import file_md5

    paths = [train_path, *([val_path] if val_path else []), eval_path]
    # Read first: a file that cannot be read raises DataError (one line) before anything else.
    parsed = {path: read_lines(path) for path in paths}
    staging = Path(tempfile.mkdtemp(prefix="data_docs.")) if docs_dir is not None else None
    try:
        run_name = "data-" + "-".join(file_md5(p)[:8] for p in paths)
        runner = _Runner(staging, run_name)
        prompts = {path: {line.obj.get("prompt") for line in lines if line.obj is not None
                          and isinstance(line.obj.get("prompt"), str)}
                   for path, lines in parsed.items()}
        reports = []
        for path in paths:
            lines = parsed[path]
            others = {other: prompts[other] for other in paths if other != path}
            stem = Path(path).stem.replace("_", "-")
            checks = runner.run(f"{stem}-lines", lines_frame(lines), line_rules())
            rows = rows_frame(lines, others)
            expected = train_rows if path == train_path else None
            checks += runner.run(f"{stem}-rows", rows,
                                 row_rules(expected, max_prompt_chars, others))
            problems = [p for rule, result in checks for p in _problem_lines(path, rule, result)]
            results = [{"rule": rule.name, "success": bool(result.success),
                        "unexpected_count": int(result.result.get("unexpected_count") or 0)}
                       for rule, result in checks]
            reports.append(FileReport(path, len(lines), len(rows), results, problems))
        if staging is not None:
            docs_dir = Path(docs_dir)
            share_with_umask(staging)
            shutil.rmtree(docs_dir, ignore_errors=True)
            docs_dir.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(staging), docs_dir)
        return reports
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def summary(reports: Sequence[FileReport]) -> dict:
    """The DVC metric: per file, per rule, whether it held and how many rows broke it."""
    return {
        "passed": all(not r.problems for r in reports),
        "problems": sum(len(r.problems) for r in reports),
        "files": {
            Path(r.path).stem: {
                "path": r.path, "lines": r.lines, "rows": r.rows, "problems": len(r.problems),
                "rules": {x["rule"]: {"success": x["success"],
                                      "unexpected_count": x["unexpected_count"]}
                          for x in r.results},
            } for r in reports
        },
    }
