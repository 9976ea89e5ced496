"""The reward-test gate: its verdict, and stages refusing to start without a passing one."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.pipeline.gate import GateClosed, require_gate, run_reward_tests


def _write_tests(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_sample.py").write_text(body)
    return folder


def test_verdict_counts_and_names_failing_tests(tmp_path):
    tests = _write_tests(
        tmp_path / "t",
        "def test_ok():\n    assert True\n\ndef test_broken():\n    assert 1 + 1 == 3\n",
    )
    verdict = run_reward_tests([str(tests)], tmp_path / "gate.json")
    assert verdict["passed"] is False
    assert verdict["counts"] == {"tests": 2, "passed": 1, "failed": 1, "errors": 0, "skipped": 0}
    assert len(verdict["failing"]) == 1 and verdict["failing"][0].endswith("::test_broken")
    assert json.loads((tmp_path / "gate.json").read_text()) == verdict


def test_no_tests_collected_does_not_pass(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    verdict = run_reward_tests([str(empty)], tmp_path / "gate.json")
    assert verdict["passed"] is False
    assert verdict["pytest_exit_code"] == 5 and verdict["reason"] == "no tests were collected"


def test_a_gate_narrowed_below_its_floor_or_naming_nothing_does_not_pass(tmp_path):
    tests = _write_tests(tmp_path / "t", "def test_ok():\n    assert True\n")
    verdict = run_reward_tests([str(tests)], tmp_path / "gate.json", min_tests=2)
    assert not verdict["passed"] and verdict["counts"]["passed"] == 1
    assert verdict["reason"] == (
        "1 tests collected, fewer than gate.min_tests (2): gate.tests names too few reward tests"
    )
    assert run_reward_tests([str(tests)], tmp_path / "gate.json", min_tests=1)["passed"]
    verdict = run_reward_tests([str(tests), str(tmp_path / "gone")], tmp_path / "gate.json")
    assert not verdict["passed"]
    assert verdict["reason"] == f"gate.tests names {tmp_path / 'gone'}, which does not exist"


def test_the_default_gate_collects_at_least_its_floor():
    from rlvr.params.config import Params

    gate = Params().gate
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + ["--confcutdir=tests/rewards", *gate.tests],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    collected = [line for line in listed.stdout.splitlines() if "::" in line]
    assert len(collected) >= gate.min_tests, listed.stdout[-2000:]


def test_the_gate_loads_no_conftest_above_its_tests(tmp_path, monkeypatch):
    """The gate runs pytest with --confcutdir at its tests' folder (rlvr.core.code_closure
    .conftest_cut), so the end-to-end tests' conftest, which its deps do not list, never runs in
    it: here one that fails on import is left alone, and fails the run once the gate's paths
    reach its folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/conftest.py").write_text("raise RuntimeError('not gate code')\n")
    _write_tests(tmp_path / "tests/rewards", "def test_ok():\n    assert True\n")
    verdict = run_reward_tests(["tests/rewards"], tmp_path / "gate.json")
    assert verdict["passed"] and verdict["counts"]["passed"] == 1, verdict
    verdict = run_reward_tests(["tests"], tmp_path / "gate.json")
    assert not verdict["passed"] and "not gate code" in verdict["reason"], verdict


def test_require_gate(tmp_path):
    report = tmp_path / "gate.json"
    with pytest.raises(GateClosed, match="missing"):
        require_gate(report)
    report.write_text(json.dumps({"passed": False, "failing": ["tests/x.py::test_y"]}))
    with pytest.raises(GateClosed, match=r"tests/x.py::test_y"):
        require_gate(report)
    report.write_text(json.dumps({"passed": True, "failing": []}))
    require_gate(report)


def test_a_stage_refuses_to_start_when_the_gate_failed(project_copy):
    project = project_copy()
    gate = project / "reports" / "gate" / "reward_tests.json"
    gate.parent.mkdir(parents=True, exist_ok=True)
    gate.write_text(json.dumps({"passed": False, "failing": ["tests/rewards/t.py::test_z"]}))
    run = subprocess.run(
        [sys.executable, "-m", "stages.validate"], cwd=project, capture_output=True, text=True
    )
    assert run.returncode == 1
    assert "the reward tests did not pass" in run.stderr and "test_z" in run.stderr
    assert not (project / "reports" / "validation").exists()


@pytest.mark.slow
def test_dvc_repro_stops_at_the_gate_naming_the_broken_reward_test(project_copy, dvc_env):
    """Break the countdown verifier's precedence on purpose: `dvc repro` must stop at the gate."""
    project = project_copy()
    verifiers = project / "rlvr" / "rewards" / "verifiers.py"
    source = verifiers.read_text()
    assert "            return left * right\n" in source
    verifiers.write_text(
        source.replace("            return left * right\n", "            return left + right\n")
    )
    run = subprocess.run(
        ["dvc", "repro"], cwd=project, env=dvc_env(project), capture_output=True, text=True
    )
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert "FAILED tests/rewards/test_verifiers.py::test_countdown" in output
    assert not (project / "reports" / "validation").exists()
    verdict = json.loads((project / "reports" / "gate" / "reward_tests.json").read_text())
    assert verdict["passed"] is False and verdict["counts"]["failed"] > 0
