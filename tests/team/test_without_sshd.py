"""The README's test command on a machine without openssh-server: every team test that needs sshd
skips with its one line (none fails on a missing program), and under RLVR_REQUIRE_SERVERS (.ci/run)
the same tests fail instead of passing unnoticed. The team tests run in a pytest of their own
with RLVR_SSHD naming a program that does not exist."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.team.servers import NO_SSHD

ROOT = Path(__file__).resolve().parents[2]
# every fast team test file that starts sshd: the session's server (ssh_server / ssh_home) or
# one of its own (test_remote's stopped server)
NEEDS_SSHD = [
    "tests/team/test_remote.py",
    "tests/team/test_nightly.py",
    "tests/team/test_spread.py",
]


def _team_tests(tmp_path: Path, tests: list[str], *, require: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("RLVR_REQUIRE_SERVERS", None)
    env["RLVR_SSHD"] = str(tmp_path / "no-such-sshd")
    if require:
        env["RLVR_REQUIRE_SERVERS"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rsfE", "-p", "no:cacheprovider", "-n", "0"]
        + ["--basetemp", str(tmp_path / "pytest"), *tests],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _sshd_tests() -> list[str]:
    """The node ids of those files' tests that ask for sshd, read from their source."""
    found = []
    for name in NEEDS_SSHD:
        source = (ROOT / name).read_text()
        team = re.search(r"^def team\((.*?)\)", source, flags=re.M | re.S)
        fixtures = ["ssh_server", "ssh_home"] + (["team"] if team and "ssh" in team[1] else [])
        tests = re.finditer(r"^def (test_\w+)\((.*?)\):\n(.*?)(?=^def |\Z)", source, re.M | re.S)
        for match in tests:
            test, args, body = match.groups()
            if any(re.search(rf"\b{f}\b", args) for f in fixtures) or "SSHServer(" in body:
                found.append(f"{name}::{test}")
    return found


@pytest.fixture(scope="module")
def sshd_tests() -> list[str]:
    tests = _sshd_tests()
    assert len(tests) >= 10, tests  # the files above hold at least this many sshd tests today
    return tests


def test_without_sshd_the_team_tests_skip_with_one_line(tmp_path, sshd_tests):
    run = _team_tests(tmp_path, sshd_tests, require=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "FileNotFoundError" not in out and " failed" not in out and " error" not in out, out
    skips = re.findall(r"^SKIPPED \[\d+\] (\S+): (.*)$", out, flags=re.M)
    assert len(skips) == len(sshd_tests), out[-3000:]
    assert {reason for _, reason in skips} == {NO_SSHD}
    assert re.search(rf"\b{len(sshd_tests)} skipped\b", out), out[-500:]


def test_required_servers_turn_the_missing_sshd_into_failures(tmp_path, sshd_tests):
    run = _team_tests(tmp_path, sshd_tests, require=True)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-3000:]
    assert "FileNotFoundError" not in out and " skipped" not in out, out[-3000:]
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, flags=re.M)
    assert sorted(failed) == sorted(sshd_tests), out[-3000:]
    assert out.count(NO_SSHD) >= len(sshd_tests)
