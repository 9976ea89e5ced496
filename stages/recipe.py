"""Stage recipe: the recipe's audit, every RL seed's held-out records pooled.

    dvc repro recipe                (or: python -m stages.recipe)

Reads each seed's reports/eval/seed-<n>/ and reports/train/seed-<n>/summary.json (audit.seeds),
and writes reports/recipe/summary.json (each seed's line, the pooled figures with intervals over
seeds and prompts, the verdict by Step 9's rules, the published seed and why; with
audit.baseline rft, the RFT baseline's seeds from reports/rft/seed-<n>/ pooled the same way and
GRPO against it per tag, rlvr/audit/baseline.py), its headline
metrics/recipe.json (a DVC metric) and reports/figures/seeds.png (rlvr/audit/recipe.py). Fewer than 2
seeds with results: no recipe verdict, naming the missing seeds and the line each stopped with.
`dvc repro` runs it only once every seed has run to the end; after a failed seed, run it alone
(`python -m stages.recipe`, as the flows do) to see the seeds that did.
"""

import json
from pathlib import Path

from rlvr.audit.baseline import baseline_audit
from rlvr.audit.recipe import recipe_audit, recipe_metrics, split_runs
from rlvr.audit.slices import SliceRule
from rlvr.core.files import read_jsonl, write_json
from rlvr.core.seeds import seed_paths
from rlvr.pipeline.stage import ParamsView, failure_line, run_stage, stage_label
from rlvr.report.plots import plot_seeds


def seed_results(paths, seed: int) -> dict:
    """One seed's evaluate summary, per-prompt records and train summary (OSError, ValueError:
    missing or unreadable)."""
    run = seed_paths(paths, seed)
    return {
        "summary": json.loads(Path(run.eval_summary).read_text()),
        "records": read_jsonl(run.eval_per_prompt),
        "train": json.loads(Path(run.train_summary).read_text()),
    }


def baseline_results(paths, seed: int) -> dict:
    """One seed's RFT baseline records, the completions it sampled and the tags its own audit
    called regressed (stage rft; OSError, ValueError: missing, unreadable or empty)."""
    run = seed_paths(paths, seed)
    records = read_jsonl(run.rft_per_prompt)
    if not records:  # audit.baseline none wrote it: the baseline was off when rft ran
        raise ValueError("no records")
    summary = json.loads(Path(run.rft_summary).read_text())
    return {
        "records": records,
        "sampled": summary["budget"]["sampled"],
        "regressed_tags": list(summary.get("audit", {}).get("regressed_tags") or []),
        "kept": {  # (a summary older than the digest has none: the report then says nothing)
            "answers": summary.get("kept"),
            "digest": summary.get("kept_digest"),
            "samples_per_prompt": summary["budget"].get("samples_per_prompt"),
        },
    }


def gather(paths, seeds, read, stages: tuple[str, ...], where) -> tuple[dict, dict]:
    """seed -> read(paths, seed) for every seed that has results, and seed -> the line saying
    why one has none (the last failure line its stages left)."""
    results, failed = {}, {}
    for seed in seeds:
        try:
            results[seed] = read(paths, seed)
        except (OSError, ValueError):
            stopped = [
                line
                for line in (
                    failure_line(paths.timing, stage_label(stage, seed)) for stage in stages
                )
                if line
            ]
            failed[seed] = (
                f"no results in {where(seed_paths(paths, seed))}"
                + (f", it stopped with: {stopped[-1]}" if stopped else "")
                + "; `dvc repro` reruns what it lacks"
            )
    return results, failed


def main(params: ParamsView) -> int:
    paths, report, ev, seeds = params.paths, params.report, params.evaluate, params.audit.seeds
    rule = SliceRule(report.min_slice_rows, report.slice_drop_from, report.slice_drop_to)
    evaluated, failed = gather(
        paths, seeds, seed_results, ("train", "evaluate"), lambda run: run.eval_summary
    )
    recipe = recipe_audit(seeds, evaluated, failed, rule, ev.confidence, ev.n_resamples)
    if params.audit.baseline != "none":
        results, missing = gather(
            paths, seeds, baseline_results, ("rft",), lambda run: run.rft_per_prompt
        )
        pooled = recipe["pooled"]
        split = recipe.get("split", "heldout")
        recipe["baseline"] = baseline_audit(
            params.audit.baseline,
            seeds,
            split_runs({s: e["records"] for s, e in results.items()}, split),
            missing,
            split_runs({s: e["records"] for s, e in evaluated.items()}, split),
            pooled,
            pooled["samples_per_prompt"] if pooled else None,  # None: no comparison
            rule,
            ev.confidence,
            ev.n_resamples,
            sampled={
                "grpo": [e["train"].get("sampled_completions") for e in evaluated.values()],
                "baseline": [e["sampled"] for e in results.values()],
            },
            seed_regressions={s: e["regressed_tags"] for s, e in results.items()},
            kept={s: e["kept"] for s, e in results.items()},
        )
    write_json(paths.recipe_summary, recipe)
    write_json(paths.recipe_metrics, recipe_metrics(recipe))
    plot_seeds(recipe, paths.seeds_figure)
    for line in recipe["seed_lines"]:
        d = line["delta_mean_reward"]
        print(
            f"recipe: seed {line['seed']} (one run): delta {d['value']:+.3f} "
            f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}], {line['verdict']}"
        )
    for seed, why in recipe["failed"].items():
        print(f"recipe: seed {seed}: {why}")
    print(
        f"recipe: over {len(recipe['evaluated'])} of {len(recipe['seeds'])} seeds: "
        f"{recipe['verdict_line']}"
    )
    if "baseline" in recipe:
        print(f"recipe: {recipe['baseline']['sentence']}")
    if "published_seed" in recipe:
        print(f"recipe: publishes seed {recipe['published_seed']}: {recipe['published_reason']}")
    return 0


if __name__ == "__main__":
    run_stage("recipe", main)
