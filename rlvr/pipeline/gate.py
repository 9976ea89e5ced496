"""The reward-test gate: run the offline reward tests, record the verdict, and refuse to go on
without a passing one.

Wrong reward math trains toward the wrong thing without any error, so every stage starts with
`require_gate()`: if the last gate run did not pass, the stage stops and names the failing tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from rlvr.core.code_closure import conftest_cut
from rlvr.core.errors import PipelineError
from rlvr.core.files import write_json

PYTEST_NO_TESTS = 5


class GateClosed(PipelineError):
    """The reward tests have not passed; nothing downstream may run."""


def _test_id(case: ET.Element) -> str:
    classname, name = case.get("classname", ""), case.get("name", "")
    return f"{classname.replace('.', '/')}.py::{name}" if classname else name


def run_reward_tests(
    test_paths: Sequence[str], report_path: str | Path, min_tests: int = 1
) -> dict:
    """Run pytest on the reward tests and write the verdict JSON: passed, counts, failing ids.
    Fewer than `min_tests` collected (gate.min_tests), or a path that does not exist, fails it."""
    missing = [p for p in test_paths if not Path(p).exists()]
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            *test_paths,
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
        ]
        cut = conftest_cut(test_paths)  # the conftests above it are the end-to-end tests'
        if cut:
            command.append(f"--confcutdir={cut}")
        completed = subprocess.run(command, capture_output=True, text=True)
        cases = ET.parse(junit).getroot().iter("testcase") if junit.exists() else []
        failing, counts = [], {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
        for case in cases:
            counts["tests"] += 1
            outcome = next(
                (child.tag for child in case if child.tag in ("failure", "error", "skipped")),
                "passed",
            )
            counts[{"failure": "failed", "error": "errors"}.get(outcome, outcome)] += 1
            if outcome in ("failure", "error"):
                failing.append(_test_id(case))
    enough = counts["tests"] >= max(min_tests, 1)
    passed = completed.returncode == 0 and enough and not failing and not missing
    verdict = {
        "passed": passed,
        "counts": counts,
        "min_tests": min_tests,
        "failing": failing,
        "pytest_exit_code": completed.returncode,
        "command": " ".join(command[1:3] + list(test_paths)),
    }
    if missing:
        verdict["reason"] = f"gate.tests names {', '.join(missing)}, which does not exist"
    elif completed.returncode == PYTEST_NO_TESTS:
        verdict["reason"] = "no tests were collected"
    elif completed.returncode == 0 and not enough:
        verdict["reason"] = (
            f"{counts['tests']} tests collected, fewer than gate.min_tests ({min_tests}): "
            "gate.tests names too few reward tests"
        )
    elif not passed and not failing:
        verdict["reason"] = (completed.stdout + completed.stderr).strip()[-2000:]
    write_json(report_path, verdict)
    return verdict


def require_gate(report_path: str | Path) -> None:
    """Raise GateClosed unless the last reward-test run passed."""
    path = Path(report_path)
    if not path.exists():
        raise GateClosed(f"{path} is missing: run `dvc repro reward_tests` first")
    verdict = json.loads(path.read_text(encoding="utf-8"))
    if not verdict.get("passed"):
        why = ", ".join(verdict.get("failing") or []) or verdict.get("reason", "unknown")
        raise GateClosed(f"the reward tests did not pass ({path}): {why}")
