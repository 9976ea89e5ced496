"""One policy against the base, as params.yaml sets the audit: the training, validation and
held-out (test) prompts, both policies sampled with evaluate.seed (so every policy audited against
the base sees the same step-0 records: GRPO's seeds and the RFT baseline's pair prompt by prompt),
evaluate.samples per prompt, the verdict's rules of `report`. Stages evaluate and rft call it.
The verdict reads the held-out rows; comparisons and the registry choose on the validation rows
(docs/audit.md)."""

from __future__ import annotations

from rlvr.audit.evaluation import audit
from rlvr.audit.slices import SliceRule
from rlvr.data.rows import read_rows
from rlvr.policy.models import load_policy, policy_path
from rlvr.policy.sampling import prompt_template, rollout_settings
from rlvr.rewards.registry import build_reward_funcs, normalized_weights


def audit_against_base(params, final_model: str) -> tuple[dict, list[dict]]:
    """rlvr.audit.evaluation.audit of the base (step0) against the policy in `final_model`
    (final): the metrics and one record per prompt."""
    splits = {  # validation: the rows that choose (recipes, the registry); heldout: the audit's
        "train": read_rows(params.data.train_path),
        "validation": read_rows(params.data.val_path),
        "heldout": read_rows(params.data.eval_path),
    }
    policies = {  # loaded one at a time by audit: never both in memory
        "step0": lambda: load_policy(policy_path(params.paths.base_model)),
        "final": lambda: load_policy(final_model),
    }
    ev, report = params.evaluate, params.report
    return audit(
        policies,
        splits,
        build_reward_funcs(params.rewards),
        normalized_weights(params.rewards.weights),
        rollout_settings(params, n=ev.samples, seed=ev.seed),
        params.rewards.format_pattern,
        template=prompt_template(params.model),
        confidence=ev.confidence,
        n_resamples=ev.n_resamples,
        slice_rule=SliceRule(report.min_slice_rows, report.slice_drop_from, report.slice_drop_to),
    )


def audit_lines(label: str, metrics: dict, confidence: float) -> list[str]:
    """The console's lines of an audit: per split, mean reward, greedy success, pass@1 and
    pass@n from step 0 to final, prompts lost and gained; then the verdict."""
    lines = []
    for split in ("train", "validation", "heldout"):
        m = metrics[split]
        n = m["samples_per_prompt"]
        d = m["delta_mean_reward"]
        curves, solved = m["pass_at_k"], m["solutions"]
        lines.append(
            f"{label}: {split}: mean reward {m['step0']['mean_reward']:.3f} -> "
            f"{m['final']['mean_reward']:.3f} (delta {d['value']:+.3f}, "
            f"{confidence:.0%} CI [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]); greedy success "
            f"{m['step0']['greedy_success']:.3f} -> {m['final']['greedy_success']:.3f}; "
            f"pass@1 {curves['step0']['1']:.3f} -> {curves['final']['1']:.3f}, pass@{n} "
            f"{curves['step0'][str(n)]:.3f} -> {curves['final'][str(n)]:.3f}; "
            f"{solved['lost_count']} prompts lost every correct answer, {solved['new_count']} "
            "gained one"
        )
    lines.append(
        f"{label}: this seed's verdict on {metrics['verdict_split']}: {metrics['verdict_line']}"
    )
    return lines
