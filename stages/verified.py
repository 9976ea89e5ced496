"""Stage verified: the base's verified answers of one RL seed, sampled once for RFT and guidance.

    dvc repro verified              (every seed of audit.seeds: verified@0, verified@1, ...)
    python -m stages.verified SEED  (one seed)

audit.baseline rft: samples models/base on the training prompts as many times in all as the GRPO
run samples completions (with its rollout settings and the RL seed SEED), keeps each prompt's
distinct correct answers and writes them, with the budget and one line per prompt, to
reports/verified/seed-SEED/answers.json (params.yaml paths.verified; rlvr/policy/verified.py).
Stage rft fine-tunes on them; train.guidance puts them in GRPO's groups, so no training rank
waits while another samples. audit.baseline none: writes a marker, in a second (train.guidance
needs audit.baseline rft).
"""

import time

from rlvr.core.files import write_json
from rlvr.core.seeds import seed_paths
from rlvr.pipeline.stage import ParamsView, run_stage
from rlvr.policy.verified import sample_verified


def main(params: ParamsView) -> int:
    path, label = seed_paths(params.paths, params.seed).verified_answers, f"verified@{params.seed}"
    if params.audit.baseline == "none":
        write_json(path, {"baseline": "none"})
        print(f"{label}: audit.baseline is none: nothing reads the base's answers; not sampled")
        return 0
    started = time.perf_counter()
    record = sample_verified(params, params.seed)
    budget, rows = record["budget"], record["rows"]
    write_json(path, record)
    print(
        f"{label}: sampled {budget['sampled']:,} completions ({budget['samples_per_prompt']} per "
        f"prompt: GRPO's one round a step, {budget['grpo_completions']:,}) in "
        f"{time.perf_counter() - started:.0f} s; kept {len(record['examples'])} distinct correct "
        f"answers on {sum(line['kept'] > 0 for line in rows)} of {len(rows)} prompts -> {path}"
    )
    return 0


if __name__ == "__main__":
    run_stage("verified", main, seeded=True)
