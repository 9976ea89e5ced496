"""The data contract, as a Great Expectations suite kept in code.

Each JSONL file becomes two pandas frames: one row per line (is it a JSON object?) and one row per
object (the fields, flattened). Built-in expectations check what they can express (row count,
presence, uniqueness, lengths, sets); the rules no built-in expresses (verifier fields well typed,
regex compiles, countdown target reachable, checked by scoring the solver's answer with the
verifier itself) are computed per row as flag columns that an expectation then requires to be
true. Every failure is reported as one plain line naming the file,
the row id (or line number) and the rule broken.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rlvr.data import Line, read_lines
from rlvr.rewards.registry import VERIFIERS, score_correctness, verifier_problems
from rlvr.rewards.verifiers import countdown_reward, countdown_solution

# Columns that explain a failing row; each rule names the one it prints (Rule.detail).
_DETAIL_COLUMNS = ["line_detail", "fields_detail", "regex_detail", "countdown_detail",
                   "exact_match_detail"]
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
    import regex

    try:
        regex.compile(verifier["pattern"])
        return True, ""
    except regex.error as error:
        return False, f"pattern {verifier['pattern']!r}: {error}"


def _countdown_solvable(verifier: Any, fields_ok: bool | None) -> tuple[bool | None, str]:
    if not fields_ok or verifier.get("type") != "countdown":
        return None, ""
    numbers, target = verifier["numbers"], verifier["target"]
    division = verifier.get("allow_division", False)
    solution = countdown_solution(numbers, target, division)
    if solution is None:
        return False, f"{target} cannot be made from {numbers}"
    # The verifier has the last word: a row counts as answerable only if it rewards an answer.
    if countdown_reward(solution, numbers, target, division) != 1.0:
        return False, (f"the verifier scores the solver's answer {solution!r} as 0, so no "
                       f"answer to {target} from {numbers} can earn a reward")
    return True, ""


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
    return pd.DataFrame({
        "line": [line.number for line in lines],
        "id": [None for _ in lines],
        "is_json_object": [line.obj is not None for line in lines],
        **{column: ["" for _ in lines] for column in _DETAIL_COLUMNS},
        "line_detail": [line.error or "" for line in lines],
    }, columns=["line", "id", "is_json_object", *_DETAIL_COLUMNS])


def rows_frame(lines: Sequence[Line]) -> pd.DataFrame:
    """One row per JSON object, with the flags the custom rules need and the text explaining them."""
    records = []
    for line in lines:
        if line.obj is None:
            continue
        obj = line.obj
        verifier = obj.get("verifier")
        kind = verifier.get("type") if isinstance(verifier, dict) else None
        fields_ok, fields_detail = _verifier_detail(verifier)
        compiles, regex_detail = _regex_compiles(verifier, fields_ok)
        solvable, solve_detail = _countdown_solvable(verifier, fields_ok)
        answerable, answer_detail = _exact_match_answerable(verifier, fields_ok)
        records.append({
            "line": line.number,
            "id": _text(obj.get("id")),
            "prompt": _text(obj.get("prompt")),
            "verifier_type": _text(kind),
            "verifier_fields_ok": fields_ok,
            "regex_compiles": compiles,
            "countdown_solvable": solvable,
            "exact_match_answerable": answerable,
            "line_detail": "",
            "fields_detail": fields_detail,
            "regex_detail": regex_detail,
            "countdown_detail": solve_detail,
            "exact_match_detail": answer_detail,
        })
    columns = ["line", "id", "prompt", "verifier_type", "verifier_fields_ok", "regex_compiles",
               "countdown_solvable", "exact_match_answerable", *_DETAIL_COLUMNS]
    return pd.DataFrame.from_records(records, columns=columns).astype(object)


# --------------------------------------------------------------------------- the suite

def line_rules() -> list[Rule]:
    import great_expectations as gx

    return [Rule("json_object", "is not a JSON object",
                 gx.expectations.ExpectColumnValuesToBeInSet(column="is_json_object",
                                                             value_set=[True]),
                 detail="line_detail")]


def row_rules(expected_rows: int | None, max_prompt_chars: int,
              other_prompts: Sequence[str], other_name: str) -> list[Rule]:
    """The contract for one file's rows. `expected_rows` None: any non-zero count."""
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
        Rule("verifier_type_known", f"verifier.type is not one of {sorted(VERIFIERS)}",
             E.ExpectColumnValuesToBeInSet(column="verifier_type", value_set=sorted(VERIFIERS)),
             detail="value"),
        Rule("verifier_fields", "verifier fields are missing or ill-typed",
             E.ExpectColumnValuesToBeInSet(column="verifier_fields_ok", value_set=[True]),
             detail="fields_detail"),
        Rule("regex_compiles", "regex verifier pattern does not compile",
             E.ExpectColumnValuesToBeInSet(column="regex_compiles", value_set=[True]),
             detail="regex_detail"),
        Rule("countdown_solvable", "countdown target is unreachable",
             E.ExpectColumnValuesToBeInSet(column="countdown_solvable", value_set=[True]),
             detail="countdown_detail"),
        Rule("exact_match_answerable", "exact_match target can never be matched",
             E.ExpectColumnValuesToBeInSet(column="exact_match_answerable", value_set=[True]),
             detail="exact_match_detail"),
        Rule("prompt_not_in_other_split", f"prompt also appears in {other_name}",
             E.ExpectColumnValuesToNotBeInSet(column="prompt", value_set=sorted(set(other_prompts)))),
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
        where = f"row {row_id} (line {item['line']})" if isinstance(row_id, str) and row_id.strip() \
            else f"line {item['line']}"
        if rule.detail == "value":
            column = rule.expectation.column
            detail = f": got {item.get(column)!r}"
        else:
            detail = f": {item[rule.detail]}" if rule.detail and item.get(rule.detail) else ""
        lines.append(f"{path}: {where}: {rule.message}{detail} [{rule.name}]")
    return lines


def validate_files(train_path: str, eval_path: str, train_rows: int, max_prompt_chars: int,
                   docs_dir: str | Path | None = None) -> list[FileReport]:
    """Validate the training and held-out files against the contract.

    Data Docs HTML is written to `docs_dir` (replaced whole, only once every file was validated).
    They are a view for people, not a DVC output: GX stamps them with the run time, so their bytes
    differ on every run; summary() is the record. Each page's run name carries the md5 of both
    files (`data-<train md5>-<eval md5>`, 8 hex digits each) so it says which data it shows.
    """
    from rlvr.provenance import file_md5

    staging = Path(tempfile.mkdtemp(prefix="data_docs.")) if docs_dir is not None else None
    try:
        run_name = "data-" + "-".join(file_md5(p)[:8] for p in (train_path, eval_path))
        runner = _Runner(staging, run_name)
        parsed = {path: read_lines(path) for path in (train_path, eval_path)}
        prompts = {path: [line.obj.get("prompt") for line in lines if line.obj is not None
                          and isinstance(line.obj.get("prompt"), str)]
                   for path, lines in parsed.items()}
        reports = []
        for path, other, expected in ((train_path, eval_path, train_rows),
                                      (eval_path, train_path, None)):
            lines = parsed[path]
            stem = Path(path).stem.replace("_", "-")
            checks = runner.run(f"{stem}-lines", lines_frame(lines), line_rules())
            rows = rows_frame(lines)
            checks += runner.run(f"{stem}-rows", rows,
                                 row_rules(expected, max_prompt_chars, prompts[other], other))
            problems = [p for rule, result in checks for p in _problem_lines(path, rule, result)]
            results = [{"rule": rule.name, "success": bool(result.success),
                        "unexpected_count": int(result.result.get("unexpected_count") or 0)}
                       for rule, result in checks]
            reports.append(FileReport(path, len(lines), len(rows), results, problems))
        if staging is not None:
            docs_dir = Path(docs_dir)
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
