"""Nothing lost, nothing cryptic, end to end on the cold run: a bad value of each class in
params.yaml, and each kind of unreadable data file, stops `dvc repro` with one line naming the key
(or file and line) and the rule, before any stage has removed or rewritten an earlier result."""

import json
import subprocess

import pytest

from tests.helpers import dvc, set_params

pytestmark = pytest.mark.slow

# (params.yaml change, the line the user reads), end to end for four classes: a bound, a type, TRL's
# own check, a sweep's override; tests/test_config.py has every class of every section offline (each
# case here costs a `dvc repro` of ~9 s).
BAD_PARAMS = [
    (
        {"train": {"grpo": {"learning_rate": -0.0001}}},
        "check_params: params.yaml: train.grpo.learning_rate = -0.0001: must be > 0",
    ),
    (
        {"train": {"max_steps": float("inf")}},
        "check_params: params.yaml: train.max_steps = inf: must be an integer",
    ),
    (
        {"train": {"grpo": {"extra": {"generation_batch_size": 100}}}},
        "check_params: params.yaml: train.grpo: TRL's GRPOConfig rejects it: generation_batch_size "
        "(100) must be divisible by the global batch size",
    ),
    (
        {"orchestration": {"sweep": {"train.grpo.beta": [0.1, -1]}}},
        "check_params: params.yaml: orchestration.sweep.train.grpo.beta = ['train.grpo.beta=-1']: "
        "gives a bad params.yaml: train.grpo.beta = -1.0: must be >= 0",
    ),
]


def _git(project, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=project, capture_output=True, text=True, check=True
    ).stdout


def _assert_nothing_lost(project, before: dict[str, bytes]) -> None:
    """No tracked file deleted or rewritten but params.yaml and the data the case broke, and no
    DVC output deleted."""
    deleted = [
        line for line in _git(project, "status", "--porcelain").splitlines() if "D" in line[:2]
    ]
    assert deleted == []
    status = dvc(project, "status", "--json")
    assert "deleted" not in status, status
    after = {path: (project / path).read_bytes() for path in before}
    assert [p for p in before if after[p] != before[p]] == []


def _outputs(project) -> dict[str, bytes]:
    tracked = _git(project, "ls-files", "reports").split()
    assert len(tracked) > 10
    return {path: (project / path).read_bytes() for path in tracked}


def _repro_fails_with(project, stage: str, line: str) -> str:
    """`dvc repro` fails at `stage`, whose last line (check_params: its only line) starts with
    `line`, and no traceback."""
    output = dvc(project, "repro", check=False)
    assert "Traceback" not in output, output[-3000:]
    lines = output.splitlines()
    command = lines.index(f"> python -m stages.{stage}")
    failed = next(
        i for i, text in enumerate(lines) if text.startswith("ERROR: failed to reproduce")
    )
    assert f"'{stage}'" in lines[failed]
    said = [text for text in lines[command + 1 : failed] if text.strip()]
    assert said[-1].startswith(line), output[-3000:]  # the last thing it said: why it failed
    assert len(said) == 1 or stage != "check_params", output[-3000:]
    return output


def test_a_bad_value_of_each_class_stops_dvc_repro_before_anything_is_lost(copy_run):
    project = copy_run("bad-params")
    assert json.loads(dvc(project, "status", "--json")) == {}
    before = _outputs(project)
    for change, line in BAD_PARAMS:
        set_params(project, change)
        output = _repro_fails_with(project, "check_params", line)
        # it stopped at the first stage: no other stage ran (the smoke stage would have rerun)
        assert "Running stage 'check_params'" in output
        assert (
            "Running stage 'smoke'" not in output and "Running stage 'reward_tests'" not in output
        )
        _assert_nothing_lost(project, before)
        _git(project, "checkout", "params.yaml")
    assert json.loads(dvc(project, "status", "--json")) == {}


@pytest.mark.long
def test_an_unreadable_data_file_stops_dvc_repro_with_one_line_per_problem(copy_run):
    project = copy_run("bad-data")
    before = _outputs(project)
    unchanged = {p: b for p, b in before.items() if not p.startswith("reports/validation/")}

    # a folder where the training file should be: nothing validates, nothing is written
    set_params(project, {"data": {"train_path": "data"}})
    _repro_fails_with(project, "validate", "validate: data: is a directory, not a JSONL file")
    _assert_nothing_lost(project, before)
    _git(project, "checkout", "params.yaml")

    # bytes that are not UTF-8 in one row: one problem line naming file, line and rule; the
    # validation summary says so, and every other output is as it was
    train = project / "data" / "grpo_train.jsonl"
    lines = train.read_bytes().split(b"\n")
    lines[4] = lines[4].replace(b"->", b"\xe9>")
    train.write_bytes(b"\n".join(lines))
    output = dvc(project, "repro", check=False)
    assert "Traceback" not in output, output[-3000:]
    assert (
        "data/grpo_train.jsonl: line 5: is not UTF-8 text: byte" in output
        and "invalid continuation byte [line_text]" in output
    ), output[-3000:]
    assert "ERROR: failed to reproduce 'validate'" in output
    _assert_nothing_lost(project, unchanged)
    summary = json.loads((project / "reports/validation/summary.json").read_text())
    assert summary["passed"] is False
    # DVC knows the summary on disk is not the recorded one; with the data restored, a rerun of
    # validate writes the recorded bytes again and nothing downstream has to run
    _git(project, "checkout", "data")
    assert "validate" in json.loads(dvc(project, "status", "--json"))
    rerun = dvc(project, "repro")
    assert "Running stage 'validate'" in rerun and "Running stage 'smoke'" not in rerun
    assert json.loads(dvc(project, "status", "--json")) == {}
    _assert_nothing_lost(project, before)
