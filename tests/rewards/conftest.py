"""Fixtures of the reward tests. The gate runs them with `--confcutdir tests/rewards`: this file,
not tests/conftest.py, brings what every test process shares (tests/environment.py)."""

import os
import subprocess
import sys
import time

import pytest

from tests.environment import tiny_policy_dir  # noqa: F401  (first: torch's threads)


@pytest.fixture
def cpu_load():
    """Two busy processes per core for the test's duration: the load under which the `regex`
    package's own timeout (processor time, not wall time) let a 0.2 s limit run 0.5-0.6 s, and
    a training step scores its answers (the trainer uses every core)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(min(2 * (cores or 1), 32))
    ]
    time.sleep(0.3)  # let them get going
    yield
    for process in busy:
        process.kill()
    for process in busy:
        process.wait()
