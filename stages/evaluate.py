"""Stage evaluate: step 0 (the base policy) vs one seed's final policy, prompt by prompt.

    dvc repro evaluate              (every seed of audit.seeds: evaluate@0, evaluate@1, ...)
    python -m stages.evaluate SEED  (one seed)

Scores both policies on the training prompts and the held-out prompts with the same sampling
seeds: greedy success, mean sampled reward over evaluate.samples samples, each reward function,
completion length, malformed share; and what a mean hides (rlvr.audit.slices): pass@k, the rows of each
tag, the prompts that lost or gained every correct answer, diversity. Writes, in
reports/eval/seed-SEED/, summary.json (every statistic; the deltas carry a paired bootstrap CI
over the prompts, and the seed's own verdict follows the held-out split: `mixed` when a tag
regressed) and per_prompt.jsonl. Stage recipe pools the seeds.
"""

import json

from rlvr.audit.evaluation import audit, prompt_template, rollout_settings
from rlvr.audit.slices import SliceRule
from rlvr.core.files import write_json, write_text_atomic
from rlvr.core.seeds import seed_paths
from rlvr.data.rows import read_rows
from rlvr.pipeline.stage import ParamsView, run_stage
from rlvr.policy.models import load_policy, policy_path
from rlvr.rewards.registry import build_reward_funcs, normalized_weights


def main(params: ParamsView) -> int:
    run = seed_paths(params.paths, params.seed)
    splits = {
        "train": read_rows(params.data.train_path),
        "heldout": read_rows(params.data.eval_path),
    }
    policies = {
        "step0": load_policy(policy_path(params.paths.base_model)),
        "final": load_policy(run.trained_model),
    }
    ev = params.evaluate
    metrics, per_prompt = audit(
        policies,
        splits,
        build_reward_funcs(params.rewards),
        normalized_weights(params.rewards.weights),
        rollout_settings(params, n=ev.samples, seed=ev.seed),
        params.rewards.format_pattern,
        template=prompt_template(params.model),
        confidence=ev.confidence,
        n_resamples=ev.n_resamples,
        slice_rule=SliceRule(
            params.report.min_slice_rows, params.report.slice_drop_from, params.report.slice_drop_to
        ),
    )
    write_json(run.eval_summary, metrics)
    write_text_atomic(
        run.eval_per_prompt, "".join(json.dumps(r, sort_keys=True) + "\n" for r in per_prompt)
    )
    n = ev.samples
    for split in splits:
        m = metrics[split]
        d = m["delta_mean_reward"]
        curves, solved = m["pass_at_k"], m["solutions"]
        print(
            f"evaluate@{params.seed}: {split}: mean reward {m['step0']['mean_reward']:.3f} -> "
            f"{m['final']['mean_reward']:.3f} (delta {d['value']:+.3f}, "
            f"{ev.confidence:.0%} CI [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]); greedy success "
            f"{m['step0']['greedy_success']:.3f} -> {m['final']['greedy_success']:.3f}; "
            f"pass@1 {curves['step0']['1']:.3f} -> {curves['final']['1']:.3f}, pass@{n} "
            f"{curves['step0'][str(n)]:.3f} -> {curves['final'][str(n)]:.3f}; "
            f"{solved['lost_count']} prompts lost every correct answer, {solved['new_count']} "
            "gained one"
        )
    print(
        f"evaluate@{params.seed}: this seed's verdict on {metrics['verdict_split']}: "
        f"{metrics['verdict_line']}"
    )
    return 0


if __name__ == "__main__":
    run_stage("evaluate", main, seeded=True)
