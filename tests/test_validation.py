"""The data contract: valid data passes; each kind of corruption is rejected by row and rule."""

import json
import shutil
from pathlib import Path

import pytest

from rlvr.validation import summary, validate_files

DATA = Path(__file__).resolve().parents[1] / "data"
ROWS, MAX_PROMPT = 64, 200


@pytest.fixture
def files(tmp_path):
    train, held_out = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    shutil.copy(DATA / "grpo_train.jsonl", train)
    shutil.copy(DATA / "grpo_eval.jsonl", held_out)
    return train, held_out


def _lines(path):
    return path.read_text().splitlines()


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")


def _edit_row(path, index, change):
    lines = _lines(path)
    row = json.loads(lines[index])
    change(row)
    lines[index] = json.dumps(row)
    _write(path, lines)


def _validate(train, held_out, docs_dir=None):
    return validate_files(str(train), str(held_out), ROWS, MAX_PROMPT, docs_dir=docs_dir)


def test_the_committed_data_passes_and_writes_data_docs(files, tmp_path):
    reports = _validate(*files, docs_dir=tmp_path / "docs")
    assert [r.problems for r in reports] == [[], []]
    assert [r.rows for r in reports] == [64, 64]
    result = summary(reports)
    assert result["passed"] is True and result["problems"] == 0
    assert all(rule["success"] for f in result["files"].values() for rule in f["rules"].values())
    assert (tmp_path / "docs" / "index.html").exists()
    pages = list((tmp_path / "docs").rglob("validations/**/*.html"))
    assert len(pages) == 4
    from rlvr.provenance import file_md5

    run_name = f"data-{file_md5(files[0])[:8]}-{file_md5(files[1])[:8]}"  # which data it shows
    assert all(run_name in str(page.relative_to(tmp_path)) for page in pages)


def _set(key, value):
    return lambda row: row.__setitem__(key, value)


def _set_verifier(key, value):
    return lambda row: row["verifier"].__setitem__(key, value)


def _replace_line(text):
    def corrupt(train, held_out):
        lines = _lines(train)
        lines[4] = text
        _write(train, lines)
    return corrupt


def _edit(change, index=4):
    return lambda train, held_out: _edit_row(train, index, change)


def _drop_last_row(train, held_out):
    _write(train, _lines(train)[:-1])


def _duplicate_id(train, held_out):
    first = json.loads(_lines(train)[0])["id"]
    _edit_row(train, 4, _set("id", first))


def _duplicate_prompt(train, held_out):
    first = json.loads(_lines(train)[0])["prompt"]
    _edit_row(train, 4, _set("prompt", first))


def _prompt_from_eval(train, held_out):
    other = json.loads(_lines(held_out)[0])["prompt"]
    _edit_row(train, 4, _set("prompt", other))


def _verifier_not_object(row):
    row["verifier"] = "countdown 3 5 15"


def _verifier_without_type(row):
    del row["verifier"]["type"]


def _countdown_without_target(row):
    del row["verifier"]["target"]


def _regex_bad_pattern(row):
    row["verifier"] = {"type": "regex", "pattern": "(unclosed"}


def _exact_match_empty_target(row):
    row["verifier"] = {"type": "exact_match", "target": "  "}


# (corruption, file, where it must be reported: "row <id>" or "line <n>", rule)
CORRUPTIONS = {
    "invalid_json": (_replace_line('{"id": "x", "prompt": '), "train", "line 5", "json_object"),
    "json_array_line": (_replace_line("[1, 2, 3]"), "train", "line 5", "json_object"),
    "blank_line": (_replace_line(""), "train", "line 5", "json_object"),
    "too_few_rows": (_drop_last_row, "train", None, "row_count"),
    "missing_id": (_edit(lambda r: r.pop("id")), "train", "line 5", "id_present"),
    "id_not_a_string": (_edit(_set("id", 7)), "train", "line 5", "id_present"),
    "blank_id": (_edit(_set("id", "  ")), "train", "line 5", "id_not_blank"),
    "missing_prompt": (_edit(lambda r: r.pop("prompt")), "train", "row cd-train-005", "prompt_present"),
    "empty_prompt": (_edit(_set("prompt", "")), "train", "row cd-train-005", "prompt_not_blank"),
    "prompt_too_long": (_edit(_set("prompt", "x" * 201)), "train", "row cd-train-005", "prompt_length"),
    "duplicate_id": (_duplicate_id, "train", "row cd-train-001 (line 5)", "id_unique"),
    "duplicate_prompt": (_duplicate_prompt, "train", "row cd-train-005", "prompt_unique"),
    "prompt_also_in_eval": (_prompt_from_eval, "train", "row cd-train-005", "prompt_not_in_other_split"),
    "unknown_verifier_type": (_edit(_set_verifier("type", "vibes")), "train", "row cd-train-005",
                              "verifier_type_known"),
    "verifier_without_type": (_edit(_verifier_without_type), "train", "row cd-train-005",
                              "verifier_type_present"),
    "verifier_not_an_object": (_edit(_verifier_not_object), "train", "row cd-train-005",
                               "verifier_fields"),
    "countdown_number_not_int": (_edit(_set_verifier("numbers", [3, "5"])), "train",
                                 "row cd-train-005", "verifier_fields"),
    "countdown_bool_number": (_edit(_set_verifier("numbers", [True, 5])), "train",
                              "row cd-train-005", "verifier_fields"),
    "countdown_without_target": (_edit(_countdown_without_target), "train", "row cd-train-005",
                                 "verifier_fields"),
    "countdown_unknown_field": (_edit(_set_verifier("hint", "3*5")), "train", "row cd-train-005",
                                "verifier_fields"),
    "countdown_unreachable": (_edit(_set_verifier("target", 100_003)), "train", "row cd-train-005",
                              "countdown_solvable"),
    "countdown_negative_number": (_edit(_set_verifier("numbers", [-3, 5])), "train",
                                  "row cd-train-005", "verifier_fields"),
    "regex_does_not_compile": (_edit(_regex_bad_pattern), "train", "row cd-train-005",
                               "regex_compiles"),
    "exact_match_blank_target": (_edit(_exact_match_empty_target), "train", "row cd-train-005",
                                 "verifier_fields"),
    "exact_match_unanswerable": (_edit(_set("verifier", {"type": "exact_match",
                                                         "target": "<answer>42</answer>"})),
                                 "train", "row cd-train-005", "exact_match_answerable"),
    "eval_duplicate_id": (lambda t, e: _edit_row(e, 3, _set("id", "cd-eval-001")), "eval",
                          "row cd-eval-001 (line 4)", "id_unique"),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corruption_is_rejected_naming_row_and_rule(kind, files):
    corrupt, which, where, rule = CORRUPTIONS[kind]
    corrupt(*files)
    train_report, eval_report = _validate(*files)
    report, other = (train_report, eval_report) if which == "train" else (eval_report, train_report)
    matching = [p for p in report.problems if p.endswith(f"[{rule}]")]
    assert matching, f"{kind}: no [{rule}] problem in {report.problems}"
    assert all(p.startswith(f"{report.path}: ") for p in report.problems)
    if where is not None:
        assert any(f": {where}" in p for p in matching), f"{kind}: {where} not in {matching}"
    assert other.problems == [] or kind == "prompt_also_in_eval" and all(
        p.endswith("[prompt_not_in_other_split]") for p in other.problems)
    assert summary([train_report, eval_report])["passed"] is False


def test_the_problem_lines_explain_the_rule():
    assert len(CORRUPTIONS) >= 12
    assert len({rule for _, _, _, rule in CORRUPTIONS.values()}) >= 12


def test_row_count_message_names_the_param(files):
    _drop_last_row(*files)
    (problem,) = _validate(*files)[0].problems
    assert "data.train_rows = 64" in problem and "found 63" in problem


def test_unreachable_target_names_the_numbers(files):
    _edit_row(files[0], 4, _set_verifier("target", 100_003))
    (problem,) = _validate(*files)[0].problems
    assert "100003 cannot be made from" in problem


def test_negative_numbers_are_rejected_because_no_answer_could_use_them(files):
    """{"numbers": [-3, 5], "target": 2}: the solver writes -3+5, but the verifier has no unary
    minus, so -3+5, 5+(-3) and 5-3 all score 0. The row is rejected, saying why."""
    _edit_row(files[0], 4, _set("verifier", {"type": "countdown", "numbers": [-3, 5], "target": 2}))
    (problem,) = _validate(*files)[0].problems
    assert "row cd-train-005" in problem and "non-negative integers" in problem
    assert "no unary minus" in problem and problem.endswith("[verifier_fields]")


def test_solvability_is_decided_by_the_verifier_not_a_second_grammar(files, monkeypatch):
    """If the solver found an answer the verifier does not reward, the row is not answerable."""
    import rlvr.validation

    monkeypatch.setattr(rlvr.validation, "countdown_reward", lambda *args, **kwargs: 0.0)
    problems = _validate(*files)[0].problems
    assert len(problems) == 64 and all(p.endswith("[countdown_solvable]") for p in problems)
    assert "the verifier scores the solver's answer" in problems[0]


def test_a_user_dataset_may_mix_verifier_types(files):
    _edit_row(files[0], 4, _set("verifier", {"type": "exact_match", "target": "42"}))
    _edit_row(files[0], 5, _set("verifier", {"type": "regex", "pattern": r"^\d+$"}))
    assert [r.problems for r in _validate(*files)] == [[], []]
