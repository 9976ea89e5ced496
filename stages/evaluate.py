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

from rlvr.audit.against_base import audit_against_base, audit_lines
from rlvr.core.files import write_json, write_jsonl
from rlvr.core.seeds import seed_paths
from rlvr.pipeline.stage import ParamsView, run_stage


def main(params: ParamsView) -> int:
    run = seed_paths(params.paths, params.seed)
    metrics, per_prompt = audit_against_base(params, run.trained_model)
    write_json(run.eval_summary, metrics)
    write_jsonl(run.eval_per_prompt, per_prompt)
    for line in audit_lines(f"evaluate@{params.seed}", metrics, params.evaluate.confidence):
        print(line)
    return 0


if __name__ == "__main__":
    run_stage("evaluate", main, seeded=True)
