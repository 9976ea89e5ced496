"""Stage train: the full GRPO run of one RL seed, with curves, checkpoints and automatic resume.

    dvc repro train                 (every seed of audit.seeds: train@0, train@1, ...)
    python -m stages.train SEED     (one seed)

Needs a passing smoke run. Trains models/base for train.max_steps GRPO steps with the RL seed
SEED (sampling and data order; the base and the smoke run are shared by every seed),
checkpointing every train.save_steps into models/checkpoints/seed-SEED/; if a run was killed, the
next one resumes from the last checkpoint by itself. Writes models/trained/seed-SEED/ and
reports/train/seed-SEED/: summary.json (the run's figures and selection), history.jsonl (every
step), curves.png and the DVCLive curves in live/ (folders from params.yaml `paths`,
rlvr/core/seeds.py). With train.guidance on, hands each prompt's verified answers, the ones stage
verified sampled for SEED and rft@SEED fine-tunes on (reports/verified/seed-SEED/answers.json), to
the trainer as guides (rlvr/grpo/guidance.py); their sampling counts in the run's sampled
completions.
"""

from rlvr.core.files import write_json
from rlvr.core.seeds import seed_paths
from rlvr.grpo.distributed import is_main_process
from rlvr.pipeline.stage import ParamsView, run_stage
from rlvr.pipeline.training import require_smoke, train_run
from rlvr.policy.verified import guides_of, read_verified


def main(params: ParamsView) -> int:
    run = seed_paths(params.paths, params.seed)
    guides, guides_sampled = None, 0
    if params.train.guidance != "off":  # a file every rank reads: no rank waits on another
        require_smoke(params.paths.smoke_checks)  # before the reading: a closed gate stops here
        verified = read_verified(run.verified_answers, params.seed)
        guides, guides_sampled = guides_of(verified), verified["budget"]["sampled"]
        if is_main_process():
            print(
                f"train@{params.seed}: guidance {params.train.guidance}: verified@{params.seed}'s "
                f"answers on {len(guides)} prompts ({guides_sampled:,} completions sampled)"
            )
    result = train_run(params, params.paths, run, guides, guides_sampled)
    if result is None:  # a rank other than the main one: the main process writes
        return 0
    write_json(run.train_summary, result["summary"])
    for line in result["lines"]:
        print(line)
    return 0


if __name__ == "__main__":
    run_stage("train", main, launchable=True, seeded=True)
