"""Stage rft: the RFT baseline of one RL seed (rejection-sampling fine-tuning), audited like the
policy, so the recipe can say whether GRPO beats the cheap alternative.

    dvc repro rft                   (every seed of audit.seeds: rft@0, rft@1, ...)
    python -m stages.rft SEED       (one seed)

audit.baseline rft: fine-tunes models/base with TRL's SFTTrainer (audit.rft) on the distinct
correct answers stage verified kept for the RL seed SEED (the base sampled as many times in all as
the GRPO run samples completions: reports/verified/seed-SEED/answers.json) and saves
models/rft/seed-SEED/; then audits it against the base exactly as stage evaluate audits the
policy (the same prompts and sampling seeds: paired prompt by prompt). Writes reports/rft/seed-SEED/
summary.json (the budget, what was kept per row and tag, the fine-tune, the audit) and
per_prompt.jsonl (rlvr/baseline/rft.py). audit.baseline none: writes only markers, in a second.
"""

from rlvr.audit.against_base import audit_against_base, audit_lines
from rlvr.baseline.rft import train_rft, write_off_marker
from rlvr.core.files import write_json, write_jsonl
from rlvr.core.seeds import seed_paths
from rlvr.pipeline.stage import ParamsView, run_stage
from rlvr.policy.verified import read_verified


def main(params: ParamsView) -> int:
    run, label = seed_paths(params.paths, params.seed), f"rft@{params.seed}"
    if params.audit.baseline == "none":
        write_off_marker(run.rft_model)
        write_json(run.rft_summary, {"baseline": "none"})
        write_jsonl(run.rft_per_prompt, [])
        print(f"{label}: audit.baseline is none: no baseline")
        return 0
    verified = read_verified(run.verified_answers, params.seed)
    summary = train_rft(params, params.seed, run.rft_model, verified)
    budget, fit = summary["budget"], summary["fine_tune"]
    tuned = (
        f"fine-tuned {fit['steps']} steps"
        if fit["steps"]
        else "nothing to fine-tune on: the baseline is the base itself"
    )
    print(
        f"{label}: verified@{params.seed} sampled {budget['sampled']:,} completions "
        f"({budget['samples_per_prompt']} per prompt); kept {summary['kept']} distinct correct answers "
        f"on {summary['rows_with_kept']} of {len(summary['rows'])} prompts; {tuned} -> "
        f"{run.rft_model}"
    )
    metrics, per_prompt = audit_against_base(params, run.rft_model)
    write_json(run.rft_summary, {**summary, "audit": metrics})
    write_jsonl(run.rft_per_prompt, per_prompt)
    for line in audit_lines(label, metrics, params.evaluate.confidence):
        print(line)
    return 0


if __name__ == "__main__":
    run_stage("rft", main, seeded=True)
