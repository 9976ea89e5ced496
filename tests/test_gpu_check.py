"""scripts/gpu_check.sh end to end except CUDA itself: its --cpu-dry-run runs every step of the GPU
check on this machine (profile, wheels' dependencies, data, params, prepare_model, the smoke stage
and the figures), and without a GPU the real mode stops at once with one line."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT


def _run(*args, env=None, timeout=300):
    return subprocess.run(
        ["bash", str(ROOT / "scripts/gpu_check.sh"), *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_the_gpu_check_runs_end_to_end_on_cpu(tmp_path):
    run = _run("--cpu-dry-run", env={"OUT": str(tmp_path)})
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "gpu_check: params: local_llm 2 layers x 64 (vocab 512), LoRA r16, fp32 on cpu" in output
    assert "smoke: PASSED: 12/12 checks" in output
    assert "gpu_check: 2 steps in " in output and " steps/s (" in output
    assert "gpu_check: tokens/s: " in output
    assert "gpu_check: peak GPU memory of the GRPO run: n/a (cpu dry run)" in output
    assert run.stdout.rstrip().splitlines()[-1].startswith("gpu_check: PASSED in ")
    figures = json.loads((tmp_path / "gpu_check.json").read_text())
    assert figures["steps"] == 2 and figures["exit_code"] == 0
    assert (
        figures["steps_per_s"] > 0
        and figures["tokens_per_s"] > figures["completion_tokens_per_s"] > 0
    )
    assert figures["completion_tokens_per_step"] <= 16 * 8  # 16 completions of <= 8 tokens
    assert not (ROOT / "gpu_check.json").exists()


def test_without_a_gpu_the_check_stops_at_once_with_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    run = _run(env={"PYTHON": sys.executable}, timeout=120)
    assert run.returncode == 1
    assert run.stdout == ""
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("gpu_check: FAILED: no CUDA device: torch ")
    assert "bash scripts/gpu_check.sh --cpu-dry-run" in line
