"""What every test process shares, the reward gate's included: one torch thread, the offline
environment, the derandomized Hypothesis profile, and the tiny policy fixture. Imported by
tests/conftest.py and tests/rewards/conftest.py: the gate runs its tests with pytest's
`--confcutdir tests/rewards` (rlvr/core/code_closure.py), so the end-to-end tests' conftest and
helpers are no code it runs."""

import os

import pytest
from hypothesis import HealthCheck, settings

# One torch thread per test process, set before anything imports torch: the tests run on both
# cores at once (pytest-xdist: ./dev test), and two processes of two threads each
# would fight over 2 cores; the tiny models' ops gain nothing from a second thread. Stage
# subprocesses (dvc repro) inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# torch starts here, with that one thread: importing the `stages` package (a test, or a doctest's
# collection) then leaves this process's numerics alone (rlvr.core.numerics.pin_from_params), while the
# stages the tests run as subprocesses pin theirs from their params.yaml `runtime`.
import torch  # noqa: E402,F401

import rlvr  # noqa: E402,F401  (sets the offline / no-analytics environment first)

# Derandomized so the reward gate gives the same verdict on the same code, every run.
settings.register_profile(
    "default",
    derandomize=True,
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory):
    """A saved tiny Qwen3 policy with the character tokenizer (what prepare_model builds)."""
    from rlvr.policy.models import build_char_tokenizer, build_tiny_model, save_policy

    tokenizer = build_char_tokenizer()
    return save_policy(
        build_tiny_model(tokenizer), tokenizer, tmp_path_factory.mktemp("tiny_policy")
    )
