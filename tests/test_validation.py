"""The data contract: valid data passes; each kind of corruption is rejected by row and rule."""

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlvr.core.errors import PipelineError
from rlvr.data.rows import MAX_LINE_BYTES, DataError
from rlvr.data.validation import summary, validate_files
from rlvr.params.config import Params, load_params
from rlvr.rewards.verifiers import COUNTDOWN_SEARCH_NODES

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
ROWS, MAX_PROMPT = 64, 200


@pytest.fixture
def files(tmp_path):
    train, held_out = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    shutil.copy(DATA / "grpo_train.jsonl", train)
    shutil.copy(DATA / "grpo_test.jsonl", held_out)
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


def test_data_docs_show_row_text_escaped(files, tmp_path):
    """A row's id, tags and values reach the Data Docs pages as text, never as HTML that runs in
    the reader's browser (GX 1.24 writes result values into its pages unescaped)."""
    train, _ = files

    def evil(row):
        row["id"] = "<img src=x onerror=alert(1)>"
        row["tags"] = ["<script>alert(2)</script>"]

    _edit_row(train, 3, evil)
    reports = _validate(*files, docs_dir=tmp_path / "docs")
    assert any("<img src=x onerror=alert(1)>" in p for p in reports[0].problems)  # said plainly
    pages = "".join(p.read_text() for p in (tmp_path / "docs").rglob("validations/**/*.html"))
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages  # the row is shown, as text
    assert "<img src=x" not in pages and "<script>alert(2)" not in pages


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
    from rlvr.core.files import file_md5

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
    "missing_prompt": (
        _edit(lambda r: r.pop("prompt")),
        "train",
        "row cd16-train-005",
        "prompt_present",
    ),
    "empty_prompt": (_edit(_set("prompt", "")), "train", "row cd16-train-005", "prompt_not_blank"),
    "prompt_too_long": (
        _edit(_set("prompt", "x" * 201)),
        "train",
        "row cd16-train-005",
        "prompt_length",
    ),
    "duplicate_id": (_duplicate_id, "train", "row cd16-train-001 (line 5)", "id_unique"),
    "duplicate_prompt": (_duplicate_prompt, "train", "row cd16-train-005", "prompt_unique"),
    "prompt_also_in_eval": (
        _prompt_from_eval,
        "train",
        "row cd16-train-005",
        "prompt_not_in_other_split",
    ),
    "unknown_verifier_type": (
        _edit(_set_verifier("type", "vibes")),
        "train",
        "row cd16-train-005",
        "verifier_type_known",
    ),
    "verifier_without_type": (
        _edit(_verifier_without_type),
        "train",
        "row cd16-train-005",
        "verifier_type_present",
    ),
    "verifier_not_an_object": (
        _edit(_verifier_not_object),
        "train",
        "row cd16-train-005",
        "verifier_fields",
    ),
    "countdown_number_not_int": (
        _edit(_set_verifier("numbers", [3, "5"])),
        "train",
        "row cd16-train-005",
        "verifier_fields",
    ),
    "countdown_bool_number": (
        _edit(_set_verifier("numbers", [True, 5])),
        "train",
        "row cd16-train-005",
        "verifier_fields",
    ),
    "countdown_without_target": (
        _edit(_countdown_without_target),
        "train",
        "row cd16-train-005",
        "verifier_fields",
    ),
    "countdown_unknown_field": (
        _edit(_set_verifier("hint", "3*5")),
        "train",
        "row cd16-train-005",
        "verifier_fields",
    ),
    "countdown_unreachable": (
        _edit(_set_verifier("target", 100_003)),
        "train",
        "row cd16-train-005",
        "countdown_solvable",
    ),
    "countdown_negative_number": (
        _edit(_set_verifier("numbers", [-3, 5])),
        "train",
        "row cd16-train-005",
        "verifier_fields",
    ),
    "regex_does_not_compile": (
        _edit(_regex_bad_pattern),
        "train",
        "row cd16-train-005",
        "regex_compiles",
    ),
    "exact_match_blank_target": (
        _edit(_exact_match_empty_target),
        "train",
        "row cd16-train-005",
        "verifier_fields",
    ),
    "exact_match_unanswerable": (
        _edit(_set("verifier", {"type": "exact_match", "target": "<answer>42</answer>"})),
        "train",
        "row cd16-train-005",
        "exact_match_answerable",
    ),
    "eval_duplicate_id": (
        lambda t, e: _edit_row(e, 3, _set("id", "cd16-test-001")),
        "eval",
        "row cd16-test-001 (line 4)",
        "id_unique",
    ),
    "tags_not_a_list": (_edit(_set("tags", "sub")), "train", "row cd16-train-005", "tags"),
    "tags_empty": (_edit(_set("tags", [])), "train", "row cd16-train-005", "tags"),
    "tags_too_many": (
        _edit(_set("tags", [f"t{i}" for i in range(9)])),
        "train",
        "row cd16-train-005",
        "tags",
    ),
    "tag_uppercase": (_edit(_set("tags", ["Sub"])), "train", "row cd16-train-005", "tags"),
    "tag_too_long": (_edit(_set("tags", ["x" * 33])), "train", "row cd16-train-005", "tags"),
    "tag_not_a_string": (_edit(_set("tags", [3])), "train", "row cd16-train-005", "tags"),
    "tag_markup": (
        lambda t, e: _edit_row(e, 2, _set("tags", ["<b>x</b>"])),
        "eval",
        "row cd16-test-003 (line 3)",
        "tags",
    ),
    "tag_repeated": (_edit(_set("tags", ["sub", "sub"])), "train", "row cd16-train-005", "tags"),
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
    assert (
        other.problems == []
        or kind == "prompt_also_in_eval"
        and all(p.endswith("[prompt_not_in_other_split]") for p in other.problems)
    )
    assert summary([train_report, eval_report])["passed"] is False


def test_tags_are_optional_and_a_bad_one_is_named_with_its_rule(files, tmp_path):
    train, held_out = files
    for path in files:  # the same rows without any tags: still valid
        _write(
            path,
            [
                json.dumps({k: v for k, v in json.loads(line).items() if k != "tags"})
                for line in _lines(path)
            ],
        )
    assert [r.problems for r in _validate(*files)] == [[], []]
    _edit_row(train, 4, _set("tags", ["sub", "Sub", 7]))
    (problem,) = _validate(*files)[0].problems
    assert problem == (
        f"{train}: row cd16-train-005 (line 5): tags are malformed (optional: a list "
        "of 1-8 distinct names): tag 'Sub' is not 1-32 characters of a-z 0-9 _ . -;"
        " tag 7 is not 1-32 characters of a-z 0-9 _ . - [tags]"
    )


def test_three_files_pass_and_a_prompt_in_two_of_them_is_named_in_both(files, tmp_path):
    train, held_out = files
    val = tmp_path / "val.jsonl"
    shutil.copy(DATA / "grpo_val.jsonl", val)
    reports = validate_files(str(train), str(held_out), ROWS, MAX_PROMPT, val_path=str(val))
    assert [r.path for r in reports] == [str(train), str(val), str(held_out)]
    assert [r.problems for r in reports] == [[], [], []]
    assert [r.rows for r in reports] == [64, 64, 64]
    # a validation prompt copied into the test file: both files say so, naming the other one
    shared = json.loads(_lines(val)[2])["prompt"]
    _edit_row(held_out, 6, _set("prompt", shared))
    train_report, val_report, test_report = validate_files(
        str(train), str(held_out), ROWS, MAX_PROMPT, val_path=str(val)
    )
    assert train_report.problems == []
    (in_val,) = val_report.problems
    assert in_val.startswith(f"{val}: row cd16-val-003 (line 3): prompt is in another split")
    assert in_val.endswith(f"also in {held_out} [prompt_not_in_other_split]")
    (in_test,) = test_report.problems
    assert in_test.startswith(f"{held_out}: row cd16-test-007 (line 7): ")
    assert in_test.endswith(f"also in {val} [prompt_not_in_other_split]")


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
    assert "row cd16-train-005" in problem and "non-negative integers" in problem
    assert "no unary minus" in problem and problem.endswith("[verifier_fields]")


def test_solvability_is_decided_by_the_verifier_not_a_second_grammar(files, monkeypatch):
    """If the solver found an answer the verifier does not reward, the row is not answerable."""
    import rlvr.data.row_checks

    monkeypatch.setattr(rlvr.data.row_checks, "countdown_reward", lambda *args, **kwargs: 0.0)
    problems = _validate(*files)[0].problems
    assert len(problems) == 64 and all(p.endswith("[countdown_solvable]") for p in problems)
    assert "the verifier scores the solver's answer" in problems[0]


def test_a_user_dataset_may_mix_verifier_types(files):
    _edit_row(files[0], 4, _set("verifier", {"type": "exact_match", "target": "42"}))
    _edit_row(files[0], 5, _set("verifier", {"type": "regex", "pattern": r"^\d+$"}))
    assert [r.problems for r in _validate(*files)] == [[], []]


def test_a_math_target_must_be_one_value(files):
    """One line a row, naming it and the rule: a target in words, a factorization (Step 14's
    differential test found 123 of 150 prime_factorization rows let through and scored on their
    last factor), a list."""
    _edit_row(files[0], 3, _set("verifier", {"type": "math", "target": "\\frac{3}{4}"}))
    _edit_row(files[0], 4, _set("verifier", {"type": "math", "target": "three quarters"}))
    _edit_row(files[0], 5, _set("verifier", {"type": "math", "target": "2 × 2 × 5 × 7 × 7"}))
    _edit_row(files[0], 6, _set("verifier", {"type": "math", "target": "1, 2", "sig_figs": 0}))
    problems = _validate(*files)[0].problems
    assert problems == [
        f"{files[0]}: row cd16-train-005 (line 5): verifier fields are missing or ill-typed: target "
        "'three quarters' is not one value: a number, a fraction, a percentage or a closed form "
        "such as \\frac{\\sqrt{2}}{2} [verifier_fields]",
        f"{files[0]}: row cd16-train-006 (line 6): verifier fields are missing or ill-typed: target "
        "'2 × 2 × 5 × 7 × 7' is arithmetic or a product, not one value written as one: write its "
        "value (a factorization or a list needs exact_match or regex) [verifier_fields]",
        f"{files[0]}: row cd16-train-007 (line 7): verifier fields are missing or ill-typed: "
        "sig_figs must be an integer from 1 to 30 [verifier_fields]",
    ]


COUNTDOWN_PATTERN = load_params(ROOT / "params.yaml").rewards.format_pattern


def test_the_format_pattern_must_accept_each_rows_correct_answer(files):
    """The format reward must not punish a correct answer: the default (countdown) pattern
    accepts every committed row's solver answer, and rejects a bare number, so an exact_match
    row whose target is one is a problem line naming the row, the answer and the pattern."""
    assert [
        r.problems
        for r in validate_files(
            str(files[0]), str(files[1]), ROWS, MAX_PROMPT, format_pattern=COUNTDOWN_PATTERN
        )
    ] == [[], []]
    _edit_row(files[0], 4, _set("verifier", {"type": "exact_match", "target": "142"}))
    _edit_row(files[0], 5, _set("verifier", {"type": "regex", "pattern": r"^\d+$"}))
    (problem,) = validate_files(
        str(files[0]), str(files[1]), ROWS, MAX_PROMPT, format_pattern=COUNTDOWN_PATTERN
    )[0].problems
    assert problem == (
        f"{files[0]}: row cd16-train-005 (line 5): rewards.format_pattern rejects the row's correct "
        f"answer: set the pattern for your data (or drop 'format' from rewards.funcs): its "
        f"correct answer '142' does not match {COUNTDOWN_PATTERN!r}, bare or in <answer> tags, "
        f"so the format reward would punish it [format_accepts_answer]"
    )
    # a math target is its row's correct answer too
    _edit_row(files[0], 4, _set("verifier", {"type": "math", "target": "0.75"}))
    (problem,) = validate_files(
        str(files[0]), str(files[1]), ROWS, MAX_PROMPT, format_pattern=COUNTDOWN_PATTERN
    )[0].problems
    assert "its correct answer '0.75' does not match" in problem
    _edit_row(files[0], 4, _set("verifier", {"type": "exact_match", "target": "142"}))
    # a pattern for the data accepts it; with no format reward there is nothing to check
    assert (
        validate_files(
            str(files[0]),
            str(files[1]),
            ROWS,
            MAX_PROMPT,
            format_pattern=r"^\s*(\d+|\(*\d+\)*(\s*[-+*/]\s*\(*\d+\)*)+)\s*$",
        )[0].problems
        == []
    )
    assert _validate(*files)[0].problems == []


def test_a_format_pattern_asking_for_answer_tags_accepts_the_answer_in_them(files, tmp_path):
    """The GPU profile's pattern wants `<answer>...</answer>` (the block the verifier reads):
    the committed rows' answers pass in those tags."""
    from rlvr.params.profiles import apply_profile

    params = apply_profile(
        ROOT / "profiles/gpu.yaml", ROOT / "params.yaml", tmp_path / "gpu" / "params.yaml"
    )
    pattern = params.rewards.format_pattern
    assert "<answer>" in pattern
    assert [
        r.problems
        for r in validate_files(
            str(files[0]), str(files[1]), ROWS, MAX_PROMPT, format_pattern=pattern
        )
    ] == [[], []]


def test_text_the_tiny_tokenizer_cannot_encode_is_one_line_naming_row_and_characters(files):
    """The tiny model's character tokenizer reads printable ASCII: with model.init tiny, a
    Chinese prompt or an emoji in an answer would reach the model as <unk>, so validate names
    the row and the characters; with a byte-level tokenizer (alphabet None) they pass."""
    from rlvr.params.training_params import TINY_ALPHABET

    _edit_row(files[0], 4, _set("prompt", "用 3 和 5 算出 15: "))
    _edit_row(files[0], 5, _set("verifier", {"type": "exact_match", "target": "ok 😀"}))
    problems = validate_files(
        str(files[0]), str(files[1]), ROWS, MAX_PROMPT, alphabet=TINY_ALPHABET
    )[0].problems
    assert len(problems) == 2 and all(p.endswith("[tokenizer_encodes]") for p in problems)
    assert problems[0] == (
        f"{files[0]}: row cd16-train-005 (line 5): prompt or correct answer holds characters the "
        "tiny model's tokenizer cannot encode (model.init tiny reads printable ASCII only: use "
        "model.init local_llm or a pretrained model, whose byte-level tokenizers encode any "
        "text): '出', '和', '用', '算' [tokenizer_encodes]"
    )
    assert problems[1].startswith(f"{files[0]}: row cd16-train-006 (line 6): ")
    assert problems[1].endswith(": '😀' [tokenizer_encodes]")
    assert [r.problems for r in validate_files(str(files[0]), str(files[1]), ROWS, MAX_PROMPT)] == [
        [],
        [],
    ]


# --------------------------------------------------------------------------- unreadable input
# Each kind of unreadable input is one problem line naming the file, the line (and row id when
# the line is a row) and the rule, or, for a file that cannot be read at all, one DataError line
# `<path>: <why>`. Never a traceback.


def test_a_directory_is_one_line_naming_it(files, tmp_path):
    directory = tmp_path / "rows.jsonl"
    directory.mkdir()
    for args in ((directory, files[1]), (files[0], directory)):  # the same for either file
        with pytest.raises(PipelineError) as raised:
            _validate(*args)
        assert isinstance(raised.value, DataError)
        assert str(raised.value) == f"{directory}: is a directory, not a JSONL file"


def test_a_missing_file_is_one_line_naming_it(files, tmp_path):
    with pytest.raises(DataError) as raised:
        _validate(files[0], tmp_path / "nowhere.jsonl")
    assert str(raised.value) == f"{tmp_path / 'nowhere.jsonl'}: no such file"


def test_an_unreadable_file_is_one_line_naming_it(files, monkeypatch):
    files[0].chmod(0)
    if os.geteuid() == 0:  # root reads it anyway: give the error the OS gives everyone else
        import rlvr.data.rows

        def refuse(path, *args, **kwargs):
            if Path(path) == files[0]:
                raise PermissionError(13, "Permission denied", str(path))
            return open(path, *args, **kwargs)

        monkeypatch.setattr(rlvr.data.rows, "open", refuse, raising=False)
    with pytest.raises(DataError) as raised:
        _validate(*files)
    assert str(raised.value) == f"{files[0]}: cannot be read: permission denied"


def test_the_validate_stage_prints_one_line_and_exits_1(files, tmp_path, monkeypatch, capsys):
    """Through the stage script: run_stage prints a PipelineError as one line, with no traceback."""
    import stages.validate
    from rlvr.pipeline.stage import run_stage

    directory = tmp_path / "rows.jsonl"
    directory.mkdir()
    params = SimpleNamespace(
        data=SimpleNamespace(
            train_path=str(directory),
            eval_path=str(files[1]),
            train_rows=ROWS,
            val_path=str(DATA / "grpo_val.jsonl"),
            max_prompt_chars=MAX_PROMPT,
        ),
        paths=SimpleNamespace(
            data_docs=str(tmp_path / "docs"),
            validation_summary=str(tmp_path / "summary.json"),
            validation_metrics=str(tmp_path / "metrics.json"),
        ),
        rewards=SimpleNamespace(funcs=["correctness", "format"], format_pattern=r"\d"),
        model=SimpleNamespace(init="tiny"),
    )
    monkeypatch.chdir(ROOT)
    recorded = Params()  # where run_stage leaves the failure's line: not the checkout's timing
    recorded.paths.timing = str(tmp_path / "timing")
    monkeypatch.setattr("rlvr.pipeline.stage.load_params", lambda: recorded)
    with pytest.raises(SystemExit) as exited:
        run_stage("validate", lambda view: stages.validate.main(params), gated=False)
    assert exited.value.code == 1
    assert capsys.readouterr().err == f"validate: {directory}: is a directory, not a JSONL file\n"


def _raw_line(index, data: bytes):
    """Replace line `index` (0-based) of a file with raw bytes."""

    def corrupt(path):
        lines = path.read_bytes().split(b"\n")
        lines[index] = data
        path.write_bytes(b"\n".join(lines))

    return corrupt


def _row_with(verifier_json: bytes, prompt: bytes = b'"p"') -> bytes:
    return b'{"id": "cd16-test-004", "prompt": ' + prompt + b', "verifier": ' + verifier_json + b"}"


def _countdown_target(target: bytes) -> bytes:
    return _row_with(b'{"type": "countdown", "numbers": [3, 5], "target": ' + target + b"}")


_LONG_LINE = _row_with(b"{}", prompt=b'"' + b"x" * MAX_LINE_BYTES + b'"')
# Line-level: the line is not a row, so the problem names the line. (kind: line 4 of the held-out
# file becomes these bytes; the one problem line it must give, {path} standing for the file.)
UNREADABLE_LINES = {
    "not_utf8": (
        _row_with(b"{}", prompt=b'"caf\xe9"'),
        "{path}: line 4: is not UTF-8 text: byte 39 (0xe9): invalid continuation byte [line_text]",
    ),
    "lone_surrogate_escape": (
        _row_with(b"{}", prompt=b'"a\\ud800b"'),
        "{path}: line 4: is not UTF-8 text: the escape \\ud800 is a lone "
        "surrogate, not a character [line_text]",
    ),
    "integer_of_5000_digits": (
        _countdown_target(b"9" * 5000),
        "{path}: line 4: is not a JSON object: not valid JSON (an integer "
        "of 5000 digits; at most 4300) [json_object]",
    ),
    "nan": (
        _countdown_target(b"NaN"),
        "{path}: line 4: is not a JSON object: not valid JSON (NaN is not a JSON number) "
        "[json_object]",
    ),
    "infinity": (
        _countdown_target(b"-Infinity"),
        "{path}: line 4: is not a JSON object: not valid JSON (-Infinity is not a JSON "
        "number) [json_object]",
    ),
    "float_out_of_range": (
        _countdown_target(b"1e999"),
        "{path}: line 4: is not a JSON object: not valid JSON (the number "
        "1e999 is out of range) [json_object]",
    ),
    "nested_too_deeply": (
        b"[" * 100_000,
        "{path}: line 4: is not a JSON object: not valid JSON (nested too deeply) [json_object]",
    ),
    "line_too_long": (
        _LONG_LINE,
        f"{{path}}: line 4: is longer than {MAX_LINE_BYTES} bytes "
        f"(rlvr.data.rows.MAX_LINE_BYTES): {len(_LONG_LINE)} bytes [line_length]",
    ),
}


@pytest.mark.parametrize("kind", sorted(UNREADABLE_LINES))
def test_an_unreadable_line_is_one_problem_naming_file_line_and_rule(kind, files):
    data, expected = UNREADABLE_LINES[kind]
    _raw_line(3, data)(files[1])
    train_report, eval_report = _validate(*files)
    assert eval_report.problems == [expected.format(path=files[1])]
    assert train_report.problems == []


def test_the_training_file_has_the_same_line_rules(files):
    _raw_line(4, b'{"id": "cd16-train-005", "prompt": "\xff"}')(files[0])
    assert _validate(*files)[0].problems == [
        f"{files[0]}: line 5: is not UTF-8 text: byte 37 (0xff): invalid start byte [line_text]",
        f"{files[0]}: has a wrong number of rows (params data.train_rows = 64): found 63 "
        "[row_count]",
    ]


# Row-level: the line is a row, so the problem names its id and line. (kind: the change to row 5
# of the training file; the one problem line it must give.)
_ROW = "{path}: row cd16-train-005 (line 5): "
UNREADABLE_ROWS = {
    "countdown_target_too_large": (
        _set_verifier("target", 10**30),
        _ROW + "verifier values are out of bounds: target 1000000000000000000000000000000 is "
        "beyond 1,000,000,000 in absolute value "
        "(rlvr.rewards.verifiers.MAX_COUNTDOWN_VALUE) [verifier_bounds]",
    ),
    "countdown_number_too_large": (
        _set_verifier("numbers", [3, 10**30]),
        _ROW + "verifier values are out of bounds: number 1000000000000000000000000000000 is "
        "beyond 1,000,000,000 in absolute value "
        "(rlvr.rewards.verifiers.MAX_COUNTDOWN_VALUE) [verifier_bounds]",
    ),
    "countdown_float_target": (
        _set_verifier("target", 15.0),
        _ROW + "verifier fields are missing or ill-typed: target must be an integer "
        "[verifier_fields]",
    ),
    "countdown_seven_numbers": (
        _set_verifier("numbers", [1, 2, 3, 4, 5, 6, 7]),
        _ROW + "verifier fields are missing or ill-typed: numbers must be a list of 1-6 "
        "non-negative integers (answers have no unary minus) [verifier_fields]",
    ),
    "prompt_with_nul": (
        _set("prompt", "3 5\x00 -> 15: "),
        _ROW + "holds a control character other than \\n and \\t: prompt has U+0000 at character "
        "4 [control_characters]",
    ),
    "prompt_with_escape_sequence": (
        _set("prompt", "3 5 \x1b[2J-> 15: "),
        _ROW + "holds a control character other than \\n and \\t: prompt has U+001B at character "
        "5 [control_characters]",
    ),
    "prompt_with_bidi_override": (
        _set("prompt", "3 5 -> 15: \u202e:rewsna"),  # reads as `answer:` reversed
        _ROW + "holds a control character other than \\n and \\t: prompt has U+202E at character "
        "12 [control_characters]",
    ),
    "exact_match_target_too_long": (
        _set("verifier", {"type": "exact_match", "target": "4" * 5000}),
        _ROW + "verifier values are out of bounds: target has 5000 characters, more than 1000 "
        "(rlvr.data.row_checks.MAX_VERIFIER_TEXT_CHARS) [verifier_bounds]",
    ),
    "regex_pattern_too_long": (
        _set("verifier", {"type": "regex", "pattern": "a" * 5000}),
        _ROW + "verifier values are out of bounds: pattern has 5000 characters, more than 1000 "
        "(rlvr.data.row_checks.MAX_VERIFIER_TEXT_CHARS) [verifier_bounds]",
    ),
    "regex_pattern_expands_too_far": (
        _set("verifier", {"type": "regex", "pattern": "(a{1000}){1000}"}),  # ~300 MB to compile
        _ROW + "verifier values are out of bounds: pattern expands to 1,002,001 elements when "
        "compiled (counted repeats unrolled), more than 10,000 "
        "(rlvr.data.row_checks.MAX_REGEX_ELEMENTS) [verifier_bounds]",
    ),
    "regex_pattern_nests_too_deeply": (
        _set("verifier", {"type": "regex", "pattern": "(" * 500 + ")" * 500}),
        _ROW + "regex verifier pattern does not compile: pattern '" + "(" * 79 + "... (1000 "
        "characters): nests too deeply [regex_compiles]",
    ),
    "exact_match_target_with_control": (
        _set("verifier", {"type": "exact_match", "target": "42\r"}),
        _ROW + "holds a control character other than \\n and \\t: verifier.target has U+000D at "
        "character 3 [control_characters]",
    ),
}


@pytest.mark.parametrize("kind", sorted(UNREADABLE_ROWS))
def test_an_unreadable_row_is_one_problem_naming_file_row_and_rule(kind, files):
    change, expected = UNREADABLE_ROWS[kind]
    _edit_row(files[0], 4, change)
    train_report, eval_report = _validate(*files)
    assert train_report.problems == [expected.format(path=files[0])]
    assert eval_report.problems == []


def test_an_id_with_control_characters_is_quoted_escaped(files):
    """The problem line never carries the raw escape sequence to the terminal."""
    _edit_row(files[0], 4, _set("id", "cd\x1b[31m-005"))
    assert _validate(*files)[0].problems == [
        f"{files[0]}: row 'cd\\x1b[31m-005' (line 5): holds a control character other than \\n "
        "and \\t: id has U+001B at character 3 [control_characters]"
    ]


def test_a_countdown_row_past_the_search_budget_is_a_problem_not_a_wait(files):
    """6 numbers, division, an unreachable target: ~3.3 million nodes (~12 s) to search in full;
    the budget stops it at COUNTDOWN_SEARCH_NODES (~1.3-2 s)."""
    _edit_row(
        files[0],
        4,
        _set(
            "verifier",
            {
                "type": "countdown",
                "numbers": [3, 7, 11, 13, 17, 19],
                "target": 999_999_937,
                "allow_division": True,
            },
        ),
    )
    assert _validate(*files)[0].problems == [
        f"{files[0]}: row cd16-train-005 (line 5): countdown solvability search exceeded its budget "
        f"of {COUNTDOWN_SEARCH_NODES:,} nodes (rlvr.rewards.verifiers.COUNTDOWN_SEARCH_NODES): use "
        "fewer numbers: 999999937 from [3, 7, 11, 13, 17, 19] with division "
        "[countdown_search_budget]"
    ]
