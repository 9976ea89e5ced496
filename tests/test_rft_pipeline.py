"""The RFT baseline end to end on the cold run: every seed's baseline is audited on the same step-0
records as the policy (paired prompt by prompt), the recipe and the report set GRPO beside it, and
`audit.baseline: none` turns it off without retraining anything else."""

import json

import pytest

from rlvr.core.files import read_jsonl
from rlvr.core.seeds import seed_paths
from rlvr.params.config import load_params
from rlvr.report.render import md_escape
from tests.helpers import dvc, set_params

pytestmark = pytest.mark.slow

STEP0 = ("step0_reward", "step0_correct", "step0_greedy_correct", "step0_success")


def test_each_seeds_baseline_pairs_with_its_policy_and_the_report_says_which_wins(cold_run):
    params = load_params(cold_run / "params.yaml")
    seeds = params.audit.seeds
    for seed in seeds:
        run = seed_paths(params.paths, seed)
        policy = {(r["split"], r["id"]): r for r in read_jsonl(cold_run / run.eval_per_prompt)}
        baseline = {(r["split"], r["id"]): r for r in read_jsonl(cold_run / run.rft_per_prompt)}
        assert policy.keys() == baseline.keys() and len(policy) == 3 * 64  # train, val, test
        for key, record in baseline.items():  # the same base, the same sampling seeds
            assert {k: record[k] for k in STEP0} == {k: policy[key][k] for k in STEP0}, key
        summary = json.loads((cold_run / run.rft_summary).read_text())
        budget = summary["budget"]
        # SMALL_RUN: 24 GRPO steps of 16 completions = 384, 6 per training prompt
        assert (budget["grpo_completions"], budget["samples_per_prompt"]) == (384, 6)
        assert sum(line["sampled"] for line in summary["rows"]) == budget["sampled"] == 384
        assert summary["kept"] == sum(line["kept"] for line in summary["rows"]) > 0
        assert (cold_run / run.rft_model / "config.json").exists()

    recipe = json.loads((cold_run / params.paths.recipe_summary).read_text())
    baseline = recipe["baseline"]
    assert baseline["kind"] == "rft" and baseline["comparison"]["seeds"] == seeds
    tags = {s["tag"] for s in recipe["pooled"]["slices"]}
    assert set(baseline["comparison"]["tags"]) == tags == {"add", "mul", "sub"}
    # what each recipe sampled, in the sentence: RFT its one-round budget, GRPO its dynamic
    # sampling's rounds (SMALL_RUN: 16 completions a round)
    sampled = baseline["comparison"]["sampled"]
    assert sampled["baseline"] == [384] * len(seeds)
    for seed, count in zip(seeds, sampled["grpo"], strict=True):
        history = read_jsonl(cold_run / seed_paths(params.paths, seed).train_history)
        rounds = sum(entry["dynamic_sampling/oversampling"] for entry in history)
        assert count == round(rounds * 16) > 384
    assert "; completions sampled a seed: GRPO " in baseline["sentence"]
    headline = json.loads((cold_run / params.paths.recipe_metrics).read_text())["baseline"]
    versus = baseline["comparison"]["grpo_minus_baseline"]["delta_mean_reward"]
    assert headline["grpo_vs_baseline"] == versus["verdict"]
    report = (cold_run / params.paths.retrospective_md).read_text()
    assert f"**Is RL worth it here?** {md_escape(baseline['sentence'])}" in report
    assert "### GRPO against the RFT baseline" in report
    log = (cold_run.parent / "repro.log").read_text()
    for seed in seeds:
        assert (
            f"verified@{seed}: sampled 384 completions (6 per prompt: GRPO's one round a step, "
            "384) in " in log
        )
        assert f"rft@{seed}: verified@{seed} sampled 384 completions (6 per prompt); kept " in log
        assert f"rft@{seed}: this seed's verdict on heldout: " in log
    assert f"recipe: {baseline['sentence']}" in log


def test_baseline_none_reruns_only_the_baseline_and_what_reads_it(copy_run):
    project = copy_run("baseline-none")
    set_params(project, {"audit": {"baseline": "none"}})
    log = dvc(project, "repro")
    seeds = load_params(project / "params.yaml").audit.seeds
    ran = {line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage")}
    # check_params follows every value, but its verdict is the same bytes: nothing else reruns
    assert ran == {
        "check_params",
        *(f"{stage}@{s}" for s in seeds for stage in ("verified", "rft")),
        "recipe",
        "report",
        "publish",
    }
    params = load_params(project / "params.yaml")
    for seed in seeds:
        run = seed_paths(params.paths, seed)
        assert [p.name for p in (project / run.rft_model).iterdir()] == ["baseline.json"]
        assert read_jsonl(project / run.rft_per_prompt) == []
        assert f"rft@{seed}: audit.baseline is none: no baseline" in log
        assert f"verified@{seed}: audit.baseline is none: nothing reads the base's answers" in log
        assert json.loads((project / run.verified_answers).read_text()) == {"baseline": "none"}
    recipe = json.loads((project / params.paths.recipe_summary).read_text())
    assert "baseline" not in recipe
    assert "baseline" not in json.loads((project / params.paths.recipe_metrics).read_text())
    assert "Is RL worth it" not in (project / params.paths.retrospective_md).read_text()


def test_guidance_trains_with_the_bases_verified_answers(copy_run):
    """train.guidance unsolved: train@0 reads the answers stage verified sampled for seed 0 (the
    ones rft@0 fine-tuned on), the trainer replaces answers in unsolved groups and logs it, and
    their sampling counts in the run's; neither verified@0 nor rft@0, which read no guidance
    param, is rerun."""
    project = copy_run("guidance")
    set_params(project, {"train": {"guidance": "unsolved", "guides": "reports/verified"}})
    log = dvc(project, "repro", "train@0")
    ran = {line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage")}
    assert ran == {"check_params", "train@0"}
    params = load_params(project / "params.yaml")
    run = seed_paths(params.paths, 0)
    summary = json.loads((project / run.rft_summary).read_text())
    solved = sum(line["kept"] > 0 for line in summary["rows"])
    sampled = summary["budget"]["sampled"]
    assert (
        f"train@0: guidance unsolved: verified@0's answers on {solved} prompts ({sampled:,} "
        "completions sampled)" in log
    )
    history = read_jsonl(project / run.train_history)
    shares = [
        entry["guidance/guided_share"] for entry in history if "guidance/guided_share" in entry
    ]
    assert len(shares) == len(history) and max(shares) > 0
    assert any(entry.get("guidance/guide_advantage", 0) > 0 for entry in history)
    # the sampled answers' reward, apart from the guides': every step, and in the summary
    assert all("guidance/on_policy_reward" in entry for entry in history)
    train = json.loads((project / run.train_summary).read_text())
    assert 0 <= train["last10_mean_on_policy_reward"] <= train["last10_mean_reward"] + 1e-9
    grpo = [e["sampling/completions"] for e in history if "sampling/completions" in e][-1]
    assert train["sampled_completions"] == grpo + sampled


def test_rft_then_grpo_starts_each_seed_from_its_rft_model_and_follows_it(copy_run):
    """train.start_model paths.rft_models: train@0 depends on the RFT models, so a changed RFT
    fine-tune reruns rft@0 and then train@0, which starts from models/rft/seed-0."""
    project = copy_run("rft-then-grpo")
    set_params(project, {"train": {"start_model": "models/rft"}, "audit": {"rft": {"epochs": 3}}})
    log = dvc(project, "repro", "train@0")
    ran = [line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage")]
    assert ran.index("rft@0") < ran.index("train@0")
    params = load_params(project / "params.yaml")
    run = seed_paths(params.paths, 0)
    assert json.loads((project / run.train_summary).read_text())["start_model"] == run.rft_model
    assert f"train@0: started from {run.rft_model} (RFT then GRPO; step 0 is still the base)" in log
