"""The smoke run, end to end: what the smoke stage calls. The step-0 baseline (the base sampled as
GRPO's first step samples it), a short GRPO run, and its checks (rlvr.audit.smoke). The full run is
rlvr.pipeline.training, which reads only the smoke run's verdict file."""

from __future__ import annotations

import math
import tempfile

from rlvr.audit.smoke import failed_lines, smoke_checks
from rlvr.data.rows import Row, read_rows
from rlvr.grpo.distributed import is_main_process, sum_over_ranks
from rlvr.grpo.run import run_grpo
from rlvr.params.config import Params
from rlvr.pipeline.training import step_history
from rlvr.policy.models import load_policy, policy_path
from rlvr.policy.sampling import (
    correct_spread,
    prompt_template,
    rollout_settings,
    score_rows,
    summarize,
)
from rlvr.rewards.registry import build_reward_funcs, normalized_weights


def baseline(params: Params, model, tokenizer, rows: list[Row]) -> dict:
    """Step 0: the base policy's mean reward on every row, G samples each, fixed seed."""
    funcs = build_reward_funcs(params.rewards)
    settings = rollout_settings(params)
    scored = score_rows(
        model,
        tokenizer,
        rows,
        funcs,
        normalized_weights(params.rewards.weights),
        settings,
        template=prompt_template(params.model),
    )
    summary = summarize(scored)
    return {
        **summary,
        "correct_spread": correct_spread(scored),
        "samples_per_prompt": settings.n,
        "seed": settings.seed,
        "temperature": settings.temperature,
        "max_new_tokens": settings.max_new_tokens,
    }


def smoke_run(params: Params, base_dir: str) -> dict | None:
    """The step-0 baseline, a short GRPO run and its checks; None on a rank other than the main
    one (under several processes the main process measures, checks and writes)."""
    rows = read_rows(params.data.train_path)
    policy = policy_path(base_dir)
    step0 = None
    if is_main_process():
        model, tokenizer = load_policy(policy)
        step0 = baseline(params, model, tokenizer, rows)
        del model
        print(
            f"smoke: step-0 baseline on {len(rows)} prompts x {step0['samples_per_prompt']} "
            f"samples: mean reward {step0['mean_reward']:.3f}, "
            f"success {step0.get('success', math.nan):.3f}"
        )

    funcs = build_reward_funcs(params.rewards)
    with tempfile.TemporaryDirectory(prefix="smoke.") as scratch:  # no checkpoints: nothing saved
        trainer = run_grpo(
            params, rows, policy, scratch, params.smoke.max_steps, reward_funcs=funcs, label="smoke"
        )
    failures = sum_over_ranks({f.__name__: f.failures for f in funcs})
    if not is_main_process():
        return None
    history = step_history(trainer.state.log_history)
    first_line = history[0] if history else {}
    step0["first_log_line"] = first_line
    checks = smoke_checks(
        rows_loaded=len(rows),
        expected_rows=params.data.train_rows,
        num_generations=params.train.grpo.num_generations,
        max_steps=params.smoke.max_steps,
        beta=params.train.grpo.beta,
        history=history,
        batch_checks=trainer.batch_checks,
        reward_failures=failures,
        min_spread_share=params.smoke.min_spread_share,
        baseline_reward=step0["mean_reward"],
        correct_spread=step0["correct_spread"],
        group_baseline=params.train.advantage == "group",
        baseline_success=step0.get("success"),
        baseline_samples=len(rows) * step0["samples_per_prompt"],
    )
    report = {
        "passed": all(c["passed"] for c in checks),
        "checks": checks,
        "step0_mean_reward": step0["mean_reward"],
        "first_log_line": first_line,
        "last_log_line": history[-1] if history else {},
    }
    lines = [
        f"smoke: {'PASSED' if report['passed'] else 'FAILED'}: "
        f"{sum(c['passed'] for c in checks)}/{len(checks)} checks"
    ] + failed_lines(checks)
    return {"step0": step0, "report": report, "lines": lines}
