"""Shared fixtures. Everything is offline: tiny models are built locally, never downloaded."""

import os

import pytest
from hypothesis import HealthCheck, settings

import rlvr  # noqa: F401  (sets the offline / no-analytics environment first)

# Derandomized so the reward gate gives the same verdict on the same code, every run.
settings.register_profile("default", derandomize=True, max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory):
    """A saved tiny Qwen3 policy with the character tokenizer (what prepare_model builds)."""
    from rlvr.policy import build_char_tokenizer, build_tiny_model, save_policy

    tokenizer = build_char_tokenizer()
    return save_policy(build_tiny_model(tokenizer), tokenizer,
                       tmp_path_factory.mktemp("tiny_policy"))
