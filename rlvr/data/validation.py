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

import copy
import html
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import great_expectations as gx
import pandas as pd
from great_expectations.core.run_identifier import RunIdentifier
from great_expectations.data_context.types.base import ProgressBarsConfig

from rlvr.core.files import file_md5, remove_tree, share_with_umask
from rlvr.core.metric_keys import FORMAT_REWARD
from rlvr.data.row_checks import DETAIL_COLUMNS, MAX_TAGS, lines_frame, quoted, rows_frame, shown
from rlvr.data.rows import MAX_LINE_BYTES, read_lines
from rlvr.params.training_params import TINY_ALPHABET
from rlvr.rewards.registry import VERIFIERS
from rlvr.rewards.verifiers import COUNTDOWN_SEARCH_NODES

_RESULT_FORMAT = {
    "result_format": "COMPLETE",
    "unexpected_index_column_names": ["line", "id", *DETAIL_COLUMNS],
}


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
    results: list[dict]  # per rule: name, success, unexpected_count
    problems: list[str]  # one plain line per failing row (or table) and rule


# --------------------------------------------------------------------------- the suite


def line_rules() -> list[Rule]:
    E = gx.expectations
    return [
        Rule(
            "line_text",
            "is not UTF-8 text",
            E.ExpectColumnValuesToBeInSet(column="is_text", value_set=[True]),
            detail="line_detail",
        ),
        Rule(
            "line_length",
            f"is longer than {MAX_LINE_BYTES} bytes (rlvr.data.rows.MAX_LINE_BYTES)",
            E.ExpectColumnValuesToBeInSet(column="length_ok", value_set=[True]),
            detail="line_detail",
        ),
        Rule(
            "json_object",
            "is not a JSON object",
            E.ExpectColumnValuesToBeInSet(column="is_json_object", value_set=[True]),
            detail="line_detail",
        ),
    ]


def row_rules(
    expected_rows: int | None, max_prompt_chars: int, other_prompts: dict[str, set[str]]
) -> list[Rule]:
    """The contract for one file's rows. `expected_rows` None: any non-zero count.
    `other_prompts`: the other splits' prompts by file; no prompt may be in two files."""
    E = gx.expectations
    rules = [
        Rule(
            "row_count",
            f"has a wrong number of rows (params data.train_rows = {expected_rows})"
            if expected_rows is not None
            else "has no rows",
            E.ExpectTableRowCountToEqual(value=expected_rows)
            if expected_rows is not None
            else E.ExpectTableRowCountToBeBetween(min_value=1),
        ),
    ]
    for column, field in (("id", "id"), ("prompt", "prompt"), ("verifier_type", "verifier.type")):
        rules.append(
            Rule(
                f"{column}_present",
                f"{field} is missing or not a string",
                E.ExpectColumnValuesToNotBeNull(column=column),
            )
        )
    for column in ("id", "prompt"):
        rules.append(
            Rule(
                f"{column}_not_blank",
                f"{column} is empty",
                E.ExpectColumnValuesToMatchRegex(column=column, regex=r"\S"),
            )
        )
    rules += [
        Rule("id_unique", "id is not unique", E.ExpectColumnValuesToBeUnique(column="id")),
        Rule(
            "prompt_unique", "prompt is not unique", E.ExpectColumnValuesToBeUnique(column="prompt")
        ),
        Rule(
            "prompt_length",
            f"prompt is longer than {max_prompt_chars} characters (params data.max_prompt_chars)",
            E.ExpectColumnValueLengthsToBeBetween(column="prompt", max_value=max_prompt_chars),
        ),
        Rule(
            "control_characters",
            "holds a control character other than \\n and \\t",
            E.ExpectColumnValuesToBeInSet(column="text_ok", value_set=[True]),
            detail="text_detail",
        ),
        Rule(
            "verifier_type_known",
            f"verifier.type is not one of {sorted(VERIFIERS)}",
            E.ExpectColumnValuesToBeInSet(column="verifier_type", value_set=sorted(VERIFIERS)),
            detail="value",
        ),
        Rule(
            "verifier_fields",
            "verifier fields are missing or ill-typed",
            E.ExpectColumnValuesToBeInSet(column="verifier_fields_ok", value_set=[True]),
            detail="fields_detail",
        ),
        Rule(
            "verifier_bounds",
            "verifier values are out of bounds",
            E.ExpectColumnValuesToBeInSet(column="verifier_bounds_ok", value_set=[True]),
            detail="bounds_detail",
        ),
        Rule(
            "regex_compiles",
            "regex verifier pattern does not compile",
            E.ExpectColumnValuesToBeInSet(column="regex_compiles", value_set=[True]),
            detail="regex_detail",
        ),
        Rule(
            "countdown_search_budget",
            f"countdown solvability search exceeded its budget of {COUNTDOWN_SEARCH_NODES:,} "
            "nodes (rlvr.rewards.verifiers.COUNTDOWN_SEARCH_NODES): use fewer numbers",
            E.ExpectColumnValuesToBeInSet(column="countdown_searched", value_set=[True]),
            detail="countdown_detail",
        ),
        Rule(
            "countdown_solvable",
            "countdown target is unreachable",
            E.ExpectColumnValuesToBeInSet(column="countdown_solvable", value_set=[True]),
            detail="countdown_detail",
        ),
        Rule(
            "exact_match_answerable",
            "exact_match target can never be matched",
            E.ExpectColumnValuesToBeInSet(column="exact_match_answerable", value_set=[True]),
            detail="exact_match_detail",
        ),
        Rule(
            "format_accepts_answer",
            "rewards.format_pattern rejects the row's correct answer: set the pattern for your "
            "data (or drop 'format' from rewards.funcs)",
            E.ExpectColumnValuesToBeInSet(column="format_accepts_answer", value_set=[True]),
            detail="format_detail",
        ),
        Rule(
            "tokenizer_encodes",
            "prompt or correct answer holds characters the tiny model's tokenizer cannot encode "
            "(model.init tiny reads printable ASCII only: use model.init local_llm or a "
            "pretrained model, whose byte-level tokenizers encode any text)",
            E.ExpectColumnValuesToBeInSet(column="tokenizer_encodes", value_set=[True]),
            detail="tokenizer_detail",
        ),
        Rule(
            "tags",
            f"tags are malformed (optional: a list of 1-{MAX_TAGS} distinct names)",
            E.ExpectColumnValuesToBeInSet(column="tags_ok", value_set=[True]),
            detail="tags_detail",
        ),
        Rule(
            "prompt_not_in_other_split",
            f"prompt is in another split (train, validation and test share no prompt; "
            f"checked against {', '.join(other_prompts)})",
            E.ExpectColumnValuesToNotBeInSet(
                column="prompt", value_set=sorted(set().union(*other_prompts.values()))
            ),
            detail="split_detail",
        ),
    ]
    return rules


# --------------------------------------------------------------------------- running it


class _Runner:
    """One ephemeral GX context; each frame is validated by a checkpoint that updates Data Docs."""

    def __init__(self, docs_dir: Path | None, run_name: str) -> None:
        self.gx = gx
        # Every page names the data it validated (the files' md5s, as dvc.lock records them);
        # the run time stays the real one.
        self.run_id = RunIdentifier(run_name=run_name)
        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        self.source = self.context.data_sources.add_pandas("rows")
        self.sites = []
        if docs_dir is not None:
            self.context.add_data_docs_site(
                site_name="validation",
                site_config={
                    "class_name": "SiteBuilder",
                    "store_backend": {
                        "class_name": "TupleFilesystemStoreBackend",
                        "base_directory": str(docs_dir),
                    },
                    "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
                },
            )
            self.sites = ["validation"]

    def run(self, name: str, frame: pd.DataFrame, rules: Sequence[Rule]) -> list[tuple[Rule, Any]]:
        gx = self.gx
        batch = self.source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name)
        suite = self.context.suites.add(gx.ExpectationSuite(name=name))
        for rule in rules:
            rule.expectation.meta = {"rule": rule.name, "message": rule.message}
            suite.add_expectation(rule.expectation)
        definition = self.context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch, suite=suite)
        )
        checkpoint = self.context.checkpoints.add(
            gx.Checkpoint(
                name=name,
                validation_definitions=[definition],
                actions=[],
                result_format=_RESULT_FORMAT,
            )
        )
        result = checkpoint.run(batch_parameters={"dataframe": frame}, run_id=self.run_id)
        ((identifier, validation),) = result.run_results.items()
        if self.sites:
            self._docs(identifier, validation, name)
        by_name = {r.expectation_config.meta["rule"]: r for r in validation.results}
        return [(rule, by_name[rule.name]) for rule in rules]

    def _docs(self, identifier: Any, validation: Any, suite: str) -> None:
        """Data Docs of one validation, from a copy whose row text is HTML-escaped: GX 1.24 puts
        result values (ids, details, unexpected values) into its pages as they are, so a row id
        `<img src=x onerror=...>` would run in the reader's browser (tests/test_validation.py)."""
        from great_expectations.data_context.types.resource_identifiers import (
            ExpectationSuiteIdentifier,
        )

        shown = copy.deepcopy(validation)
        for item in shown.results:
            item.result = _escaped(item.result)
            if item.exception_info:
                item.exception_info = _escaped(item.exception_info)
        self.context.validation_results_store.set(identifier, shown)
        self.context.build_data_docs(
            site_names=self.sites,
            resource_identifiers=[identifier, ExpectationSuiteIdentifier(name=suite)],
        )


def _escaped(value: Any) -> Any:
    """Every string inside `value` (lists, tuples, dicts' values) HTML-escaped."""
    if isinstance(value, str):
        return html.escape(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_escaped(v) for v in value)
    if isinstance(value, dict):
        return {k: _escaped(v) for k, v in value.items()}
    return value


def _problem_lines(path: str, rule: Rule, result: Any) -> list[str]:
    if result.success:
        return []
    if result.exception_info and result.exception_info.get("raised_exception"):
        return [
            f"{path}: rule {rule.name} could not run: "
            f"{result.exception_info.get('exception_message')}"
        ]
    unexpected = result.result.get("unexpected_index_list")
    if unexpected is None:  # a table-level rule
        observed = result.result.get("observed_value")
        return [f"{path}: {rule.message}: found {observed} [{rule.name}]"]
    lines = []
    for item in unexpected:
        row_id = item.get("id")
        where = (
            f"row {shown(row_id)} (line {item['line']})"
            if isinstance(row_id, str) and row_id.strip()
            else f"line {item['line']}"
        )
        if rule.detail == "value":
            detail = f": got {quoted(item.get(rule.expectation.column))}"
        else:
            detail = f": {item[rule.detail]}" if rule.detail and item.get(rule.detail) else ""
        lines.append(f"{path}: {where}: {rule.message}{detail} [{rule.name}]")
    return lines


def contract_options(params) -> dict:
    """The rules the run's own params add to the contract (validate_files' keywords): the format
    reward's pattern when the format reward is on, and the tiny tokenizer's alphabet when the
    policy is the tiny model (other policies' tokenizers are byte-level)."""
    rewards = params.rewards
    return {
        "format_pattern": rewards.format_pattern if FORMAT_REWARD in rewards.funcs else None,
        "alphabet": TINY_ALPHABET if params.model.init == "tiny" else None,
    }


def validate_files(
    train_path: str,
    eval_path: str,
    train_rows: int,
    max_prompt_chars: int,
    docs_dir: str | Path | None = None,
    val_path: str | None = None,
    format_pattern: str | None = None,
    alphabet: str | None = None,
) -> list[FileReport]:
    """Validate the training, validation (when given) and held-out test files against the
    contract: the same rules for each, `train_rows` rows in the training file, no prompt in
    two of the files, (given the format reward's `format_pattern`) every row's known-correct
    answer in that format and (given the tokenizer's `alphabet`) every prompt and known-correct
    answer in that alphabet. Reports come in that order.

    Data Docs HTML is written to `docs_dir` (replaced whole, only once every file was validated).
    They are a view for people, not a DVC output: GX stamps them with the run time, so their bytes
    differ on every run; summary() is the record. Each page's run name carries the md5 of every
    file (`data-<train md5>-[<val md5>-]<eval md5>`, 8 hex digits each) so it says which data it
    shows.
    """
    paths = [train_path, *([val_path] if val_path else []), eval_path]
    # Read first: a file that cannot be read raises DataError (one line) before anything else.
    parsed = {path: read_lines(path) for path in paths}
    staging = Path(tempfile.mkdtemp(prefix="data_docs.")) if docs_dir is not None else None
    try:
        run_name = "data-" + "-".join(file_md5(p)[:8] for p in paths)
        runner = _Runner(staging, run_name)
        prompts = {
            path: {
                line.obj.get("prompt")
                for line in lines
                if line.obj is not None and isinstance(line.obj.get("prompt"), str)
            }
            for path, lines in parsed.items()
        }
        reports = []
        for path in paths:
            lines = parsed[path]
            others = {other: prompts[other] for other in paths if other != path}
            stem = Path(path).stem.replace("_", "-")
            checks = runner.run(f"{stem}-lines", lines_frame(lines), line_rules())
            rows = rows_frame(lines, others, format_pattern, alphabet)
            expected = train_rows if path == train_path else None
            checks += runner.run(
                f"{stem}-rows", rows, row_rules(expected, max_prompt_chars, others)
            )
            problems = [p for rule, result in checks for p in _problem_lines(path, rule, result)]
            results = [
                {
                    "rule": rule.name,
                    "success": bool(result.success),
                    "unexpected_count": int(result.result.get("unexpected_count") or 0),
                }
                for rule, result in checks
            ]
            reports.append(FileReport(path, len(lines), len(rows), results, problems))
        if staging is not None:
            docs_dir = Path(docs_dir)
            share_with_umask(staging)
            remove_tree(docs_dir)
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
                "path": r.path,
                "lines": r.lines,
                "rows": r.rows,
                "problems": len(r.problems),
                "rules": {
                    x["rule"]: {"success": x["success"], "unexpected_count": x["unexpected_count"]}
                    for x in r.results
                },
            }
            for r in reports
        },
    }
