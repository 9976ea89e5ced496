"""The default dataset: generated deterministically, 64 train + 64 validation + 64 sealed test rows
dealt at random from one draw, no problem shared across splits nor with the earlier test file."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.data.rows import DataError, read_lines, read_rows, to_hf_dataset
from rlvr.data.tasks.countdown import CountdownSpec, generate_rows, generate_splits, problem_key
from rlvr.params.config import load_params
from rlvr.rewards.verifiers import countdown_solution

ROOT = Path(__file__).resolve().parents[1]


SPLITS = ("grpo_train.jsonl", "grpo_val.jsonl", "grpo_test.jsonl")  # what make_countdown writes
OLD_TEST = ROOT / "data" / "grpo_eval.jsonl"  # the earlier test file, read by nothing now


def test_committed_files_are_what_the_generator_writes(tmp_path):
    subprocess.run(
        [sys.executable, str(ROOT / "data" / "make_countdown.py"), "--out-dir", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(SPLITS)  # no other file written
    for name in SPLITS:
        assert (tmp_path / name).read_bytes() == (ROOT / "data" / name).read_bytes(), name
    params = load_params(ROOT / "params.yaml").data
    assert [params.train_path, params.val_path, params.eval_path] == [f"data/{n}" for n in SPLITS]


def _keys(path):
    return {problem_key(r.verifier["numbers"], r.verifier["target"]) for r in read_rows(path)}


def test_the_sealed_test_split_shares_no_problem_with_any_other_file():
    """The test rows are new: no problem of train, validation or the earlier test file (which
    recipes were chosen on), and ids of their own, so nothing pairs them with other rows."""
    keys = {name: _keys(ROOT / "data" / name) for name in SPLITS}
    old = _keys(OLD_TEST)
    assert all(len(k) == 64 for k in keys.values())
    test = keys["grpo_test.jsonl"]
    assert not test & (keys["grpo_train.jsonl"] | keys["grpo_val.jsonl"] | old)
    assert not keys["grpo_val.jsonl"] & keys["grpo_train.jsonl"]
    old_ids = {r.id for r in read_rows(OLD_TEST)}
    for name in SPLITS:
        ids = [r.id for r in read_rows(ROOT / "data" / name)]
        assert all(i.startswith("cd16-") for i in ids) and not set(ids) & old_ids, name


def test_the_splits_are_dealt_at_random_so_their_tag_mix_agrees():
    """Every split is a sample of one distribution: each tag's share in a split is within 0.15
    of its share over the three, and every tag has the rows to weigh in a verdict (>= 8)."""
    from collections import Counter

    counts = {n: Counter(t for r in read_rows(ROOT / "data" / n) for t in r.tags) for n in SPLITS}
    pooled = sum(counts.values(), Counter())
    for name, tags in counts.items():
        for tag, total in pooled.items():
            assert abs(tags[tag] / 64 - total / (64 * len(SPLITS))) <= 0.15, (name, tag, tags)
            assert tags[tag] >= 8, (name, tag)


def test_splits_share_no_problem_and_every_target_is_reachable():
    train, held_out = generate_rows(64, 64, CountdownSpec(), seed=0)
    assert len(train) == 64 and len(held_out) == 64
    key = lambda row: (tuple(sorted(row["verifier"]["numbers"])), row["verifier"]["target"])  # noqa: E731
    assert not {key(r) for r in train} & {key(r) for r in held_out}
    for row in train + held_out:
        v = row["verifier"]
        assert countdown_solution(v["numbers"], v["target"]) is not None
        assert v["target"] not in v["numbers"]


def test_splits_drawn_in_order_leave_the_earlier_ones_unchanged():
    splits = generate_splits({"train": 64, "eval": 64, "val": 64}, CountdownSpec(), seed=0)
    assert [len(rows) for rows in splits.values()] == [64, 64, 64]
    key = lambda row: (tuple(sorted(row["verifier"]["numbers"])), row["verifier"]["target"])  # noqa: E731
    keys = {name: {key(r) for r in rows} for name, rows in splits.items()}
    assert all(len(k) == 64 for k in keys.values())
    assert not keys["val"] & (keys["train"] | keys["eval"])
    assert (splits["train"], splits["eval"]) == generate_rows(64, 64, CountdownSpec(), seed=0)
    assert all(row["id"].startswith("cd-val-") for row in splits["val"])


def test_each_row_is_tagged_with_every_operator_that_makes_its_target():
    names = {
        "add": lambda a, b: [a + b],
        "sub": lambda a, b: [a - b, b - a],
        "mul": lambda a, b: [a * b],
    }
    for name in (*SPLITS, OLD_TEST.name):
        for line, row in zip(
            (ROOT / "data" / name).read_text().splitlines(), read_rows(ROOT / "data" / name)
        ):
            (a, b), target = row.verifier["numbers"], row.verifier["target"]
            assert list(row.tags) == [tag for tag, make in names.items() if target in make(a, b)], (
                name,
                row.id,
            )
            # tags come last: the prompt, numbers and target are the bytes of a row without them
            untagged = json.dumps(
                {"id": row.id, "prompt": row.prompt, "verifier": dict(row.verifier)}
            )
            assert line == untagged[:-1] + ', "tags": ' + json.dumps(list(row.tags)) + "}"
    three = generate_splits(
        {"train": 4}, CountdownSpec(n_numbers=3, ops=("+", "-", "*", "/")), seed=2
    )["train"]
    assert all(set(row["tags"]) <= {"add", "sub", "mul", "div"} and row["tags"] for row in three)


def test_other_seeds_and_sizes_give_other_rows():
    a, _ = generate_rows(8, 8, CountdownSpec(), seed=0)
    b, _ = generate_rows(8, 8, CountdownSpec(), seed=1)
    c, _ = generate_rows(8, 8, CountdownSpec(n_numbers=3), seed=0)
    assert a != b and all(len(r["verifier"]["numbers"]) == 3 for r in c)


def test_hf_dataset_keeps_mixed_verifier_types_as_json():
    rows = read_rows(ROOT / "data" / "grpo_train.jsonl")[:2]
    dataset = to_hf_dataset(rows)
    assert dataset.column_names == ["id", "prompt", "verifier"]
    assert isinstance(dataset[0]["verifier"], str)


@pytest.mark.parametrize(
    "bad,message",
    [
        (
            b'{"id": "b", "prompt": "\xff"}',
            "line 2: not UTF-8 text: byte 24 (0xff): invalid start byte",
        ),
        (b'{"id": "b", "n": NaN}', "line 2: not valid JSON (NaN is not a JSON number)"),
        (
            b'{"id": "b", "n": ' + b"1" * 5000 + b"}",
            "line 2: not valid JSON (an integer of 5000 digits; at most 4300)",
        ),
    ],
)
def test_read_rows_reports_an_unreadable_line_as_one_data_error(tmp_path, bad, message):
    """The stages that read rows themselves (prepare_model, evaluate, train) get one line too."""
    path = tmp_path / "rows.jsonl"
    path.write_bytes(
        b'{"id": "a", "prompt": "p", "verifier": {"type": "exact_match", '
        b'"target": "1"}}\n' + bad + b"\n"
    )
    with pytest.raises(DataError) as raised:
        read_rows(path)
    assert str(raised.value) == f"{path}: {message}"


def test_read_rows_reports_a_directory_as_one_data_error(tmp_path):
    with pytest.raises(DataError) as raised:
        read_rows(tmp_path)
    assert str(raised.value) == f"{tmp_path}: is a directory, not a JSONL file"


def test_lines_end_with_newline_and_crlf_files_read_the_same(tmp_path):
    row = '{"id": "a", "prompt": "p", "verifier": {"type": "exact_match", "target": "1"}}'
    (tmp_path / "lf.jsonl").write_bytes(f"{row}\n{row}\n".encode())
    (tmp_path / "crlf.jsonl").write_bytes(f"{row}\r\n{row}\r\n".encode())
    lf, crlf = (read_lines(tmp_path / name) for name in ("lf.jsonl", "crlf.jsonl"))
    assert lf == crlf and [line.number for line in lf] == [1, 2]
    assert all(line.obj is not None for line in lf)


@pytest.mark.parametrize("umask,file_mode,dir_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_outputs_get_the_usual_permissions_not_the_temporary_files_private_ones(
    tmp_path, monkeypatch, umask, file_mode, dir_mode
):
    import os
    import stat
    import tempfile

    from rlvr.core.files import share_with_umask, write_json

    monkeypatch.setattr(
        "rlvr.core.files._UMASK", umask
    )  # read once, when rlvr.core.files is imported
    write_json(tmp_path / "m.json", {"a": 1})
    staging = Path(tempfile.mkdtemp(dir=tmp_path))  # 0700, as a model folder is staged
    (staging / "sub").mkdir()
    fd, name = tempfile.mkstemp(dir=staging / "sub")  # 0600, as safetensors' files came out
    os.close(fd)
    share_with_umask(staging)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(tmp_path / "m.json") == file_mode
    assert (mode(staging), mode(staging / "sub"), mode(Path(name))) == (
        dir_mode,
        dir_mode,
        file_mode,
    )
