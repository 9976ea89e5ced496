"""The recipe's audit over RL seeds (rlvr/audit/recipe.py, stage recipe): intervals that hold training
noise and prompt noise, Step 9's rules on the pooled figures, the published seed picked on
validation rows, and seeds that failed named, never pooled."""

import json
import random

import pytest

from rlvr.audit.recipe import (
    MIN_SEEDS,
    NO_VERDICT,
    SeedsDisagree,
    pick_seed,
    recipe_audit,
    recipe_metrics,
)
from rlvr.audit.slices import SliceRule
from rlvr.core.stats import seeds_and_prompts_ci

N = 4  # samples per prompt


def _record(i: int, tag: str, step0: int, final: int) -> dict:
    """A held-out record: `step0` and `final` correct samples of N."""
    return {
        "id": f"r{i:02d}",
        "split": "heldout",
        "tags": [tag],
        "samples": N,
        "step0_correct": step0,
        "final_correct": final,
        "step0_reward": step0 / N,
        "final_reward": final / N,
        "step0_greedy_correct": 0.0,
        "final_greedy_correct": 1.0,
    }


def _seed(rng: random.Random, sub_final: int) -> list[dict]:
    """16 `add` rows that gain, 8 `sub` rows whose final count is `sub_final`."""
    rows = [_record(i, "add", rng.randint(0, 1), rng.randint(2, 4)) for i in range(16)]
    return rows + [_record(16 + i, "sub", 2, sub_final) for i in range(8)]


def _evaluated(
    records: list[dict], validation: float, seed_verdict: str = "improved", regressed: tuple = ()
) -> dict:
    delta = {"value": 0.1, "ci_low": 0.05, "ci_high": 0.2}
    summary = {
        "verdict": seed_verdict,
        "verdict_line": f"{seed_verdict}: one run",
        "verdict_split": "heldout",
        "regressed_tags": list(regressed),
        "heldout": {
            "samples_per_prompt": N,
            "delta_mean_reward": delta,
            "pass_at_k": {"final": {"1": 0.5, str(N): 0.7}},
        },
    }
    train = {
        "selection": {
            "chosen_step": 40,
            "validation": [
                {"step": 0, "mean_reward": 0.9},
                {"step": 40, "mean_reward": validation},
            ],
        }
    }
    return {"summary": summary, "records": records, "train": train}


def test_the_interval_holds_the_seeds_noise_not_only_the_prompts():
    rng = random.Random(0)
    prompts = [rng.gauss(0.2, 0.3) for _ in range(64)]
    calm = [[p + offset for p in prompts] for offset in (-0.01, 0.0, 0.01)]
    noisy = [[p + offset for p in prompts] for offset in (-0.3, 0.0, 0.3)]
    a, b = (
        seeds_and_prompts_ci(calm, n_resamples=4000),
        seeds_and_prompts_ci(noisy, n_resamples=4000),
    )
    assert a["value"] == pytest.approx(b["value"]) == pytest.approx(sum(prompts) / 64)
    assert (b["ci_high"] - b["ci_low"]) > 2 * (a["ci_high"] - a["ci_low"])
    assert a["ci_low"] > 0 and b["ci_low"] < 0  # the same prompts; only the seeds disagree


def test_the_pooled_verdict_follows_step_9s_rules_and_counts_the_seeds_that_regressed():
    rng = random.Random(1)
    # sub falls on every seed; seed 2's own audit did not call it regressed (a milder fall)
    evaluated = {
        0: _evaluated(_seed(rng, 0), 0.5, "mixed", ("sub",)),
        1: _evaluated(_seed(rng, 0), 0.6, "mixed", ("sub",)),
        2: _evaluated(_seed(rng, 1), 0.4),
    }
    recipe = recipe_audit([0, 1, 2], evaluated, {}, SliceRule(min_rows=8), n_resamples=2000)
    pooled = recipe["pooled"]
    assert pooled["delta_mean_reward"]["ci_low"] > 0  # add gains on every seed
    sub = next(s for s in pooled["slices"] if s["tag"] == "sub")
    assert sub["regressed"] and sub["regressed_seeds"] == 2
    assert sub["delta_mean_reward"]["ci_high"] < 0
    assert recipe["verdict"] == "mixed" and "regressed on sub" in recipe["verdict_line"]
    metrics = recipe_metrics(recipe)
    assert set(metrics) == {
        "seeds",
        "verdict",
        "delta_mean_reward",
        "pass1_step0",
        "pass1_final",
        "passn_step0",
        "passn_final",
        "tags",
    }
    assert set(metrics["delta_mean_reward"]) == {"value", "ci_low", "ci_high"}
    assert metrics["tags"]["sub"]["regressed_seeds"] == 2 and metrics["tags"]["sub"]["regressed"]
    assert set(metrics["tags"]["sub"]) == {"delta", "passn_delta", "regressed_seeds", "regressed"}
    assert not metrics["tags"]["add"]["regressed"]
    assert recipe["published_seed"] == 1  # the best on validation rows
    # one seed of three keeps sub whole: a resample of seeds can draw it alone, so the pooled
    # interval reaches 0, and sub is not called regressed, though two seeds' audits say it is
    evaluated[2] = _evaluated(_seed(rng, 2), 0.4)
    kept = recipe_audit([0, 1, 2], evaluated, {}, SliceRule(min_rows=8), n_resamples=2000)
    sub = next(s for s in kept["pooled"]["slices"] if s["tag"] == "sub")
    assert not sub["regressed"] and sub["regressed_seeds"] == 2
    assert sub["delta_mean_reward"]["ci_high"] == 0 and kept["verdict"] == "improved"


def test_the_recipe_scores_the_validation_rows_beside_the_test_rows_with_the_same_keys():
    rng = random.Random(4)
    evaluated = {}
    for seed in (0, 1):
        test = _seed(rng, 0)  # sub falls on the test rows ...
        chosen_on = [  # ... and holds on the validation rows, which are other problems
            {**r, "id": "v" + r["id"], "split": "validation"} for r in _seed(rng, 3)
        ]
        evaluated[seed] = _evaluated(test + chosen_on, 0.5, "mixed", ("sub",))
        evaluated[seed]["summary"]["validation"] = {"slices": []}
    recipe = recipe_audit([0, 1], evaluated, {}, SliceRule(min_rows=8), n_resamples=2000)
    assert recipe["split"] == "heldout" and recipe["pooled"]["rows"] == 24
    assert recipe["validation"]["pooled"]["rows"] == 24
    metrics = recipe_metrics(recipe)
    block = metrics["validation"]
    test_keys = set(metrics) - {"seeds", "verdict", "validation"}
    assert set(block) == test_keys | {"verdict"} and set(block["tags"]) == {"add", "sub"}
    assert set(block["tags"]["sub"]) == set(metrics["tags"]["sub"])
    assert metrics["tags"]["sub"]["regressed"] and not block["tags"]["sub"]["regressed"]
    # records from before evaluate scored the validation rows: no block, no error
    for e in evaluated.values():
        e["records"] = [r for r in e["records"] if r["split"] == "heldout"]
    old = recipe_audit([0, 1], evaluated, {}, SliceRule(min_rows=8), n_resamples=2000)
    assert "validation" not in old and "validation" not in recipe_metrics(old)


def test_the_published_seed_is_picked_on_validation_rows_never_the_test_rows():
    rng = random.Random(2)
    best_on_test = _evaluated(_seed(rng, 4), validation=0.3)  # the test rows' best ...
    evaluated = {
        0: best_on_test,
        1: _evaluated(_seed(rng, 0), validation=0.7),
        2: _evaluated(_seed(rng, 0), validation=0.7),
    }
    recipe = recipe_audit([0, 1, 2], evaluated, {}, SliceRule(), n_resamples=500)
    assert recipe["published_seed"] == 1  # ... is not picked; a tie goes to the lowest seed
    assert "0.7000 (seed 0: 0.3000, seed 1: 0.7000, seed 2: 0.7000)" in recipe["published_reason"]
    assert pick_seed({3: {}, 1: {}})[0] == 1  # nothing scored: the lowest seed, said so


def test_fewer_than_two_seeds_give_no_recipe_verdict_and_name_the_failed_ones():
    rng = random.Random(3)
    failed = {
        1: "no results in reports/eval/seed-1/summary.json, it stopped with: train@1: "
        "the disk is full",
        2: "no results in reports/eval/seed-2/summary.json",
    }
    recipe = recipe_audit(
        [0, 1, 2], {0: _evaluated(_seed(rng, 2), 0.5)}, failed, SliceRule(), n_resamples=500
    )
    assert MIN_SEEDS == 2 and recipe["verdict"] == NO_VERDICT and recipe["pooled"] is None
    assert recipe["verdict_line"].startswith(f"{NO_VERDICT}: 1 of 3 seeds ran to the end")
    assert (
        "seed 1: no results in reports/eval/seed-1/summary.json, it stopped with: train@1: "
        "the disk is full" in recipe["verdict_line"]
    )
    assert recipe["published_seed"] == 0  # what ran is still published
    assert recipe_metrics(recipe) == {"seeds": [0, 1, 2], "verdict": NO_VERDICT}
    # two of three: a verdict, from those two, still naming the third
    two = recipe_audit(
        [0, 1, 2],
        {0: _evaluated(_seed(rng, 2), 0.5), 2: _evaluated(_seed(rng, 2), 0.4)},
        {1: failed[1]},
        SliceRule(),
        n_resamples=500,
    )
    assert two["verdict"] != NO_VERDICT and two["evaluated"] == [0, 2]
    assert two["failed"] == {1: failed[1]}


def test_seeds_scored_on_other_rows_are_refused():
    rng = random.Random(4)
    short = _seed(rng, 2)[:-1]
    with pytest.raises(SeedsDisagree, match="seed 1"):
        recipe_audit(
            [0, 1],
            {0: _evaluated(_seed(rng, 2), 0.5), 1: _evaluated(short, 0.5)},
            {},
            SliceRule(),
            n_resamples=200,
        )


def test_the_stage_names_a_seed_without_results_and_the_line_it_stopped_with(tmp_path, monkeypatch):
    """After `dvc repro --keep-going` with one seed failed, `python -m stages.recipe` pools the
    others and names it (its line comes from where run_stage records a failure)."""
    import stages.recipe
    from rlvr.core.seeds import seed_paths
    from rlvr.params.config import Params

    monkeypatch.chdir(tmp_path)
    params = Params()
    rng = random.Random(5)
    for seed in (0, 2):
        run, result = seed_paths(params.paths, seed), _evaluated(_seed(rng, 2), 0.5)
        for path, value in (
            (run.eval_summary, result["summary"]),
            (run.train_summary, result["train"]),
        ):
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(json.dumps(value))
        (tmp_path / run.eval_per_prompt).write_text(
            "".join(json.dumps(r) + "\n" for r in result["records"])
        )
    (tmp_path / params.paths.timing).mkdir(parents=True)
    (tmp_path / params.paths.timing / "train@1.json").write_text(
        json.dumps({"exit_code": 1, "error": "train@1: step 6: loss = nan is not finite"})
    )
    assert stages.recipe.main(params) == 0
    recipe = json.loads((tmp_path / params.paths.recipe_summary).read_text())
    assert recipe["evaluated"] == [0, 2] and recipe["verdict"] != NO_VERDICT
    assert recipe["failed"] == {
        "1": "no results in reports/eval/seed-1/summary.json, it stopped "
        "with: train@1: step 6: loss = nan is not finite; `dvc "
        "repro` reruns what it lacks"
    }
    assert json.loads((tmp_path / params.paths.recipe_metrics).read_text())["seeds"] == [0, 1, 2]
    assert (tmp_path / params.paths.seeds_figure).stat().st_size > 5000


def test_recipe_against_recipe_is_a_tie_unless_the_interval_over_seeds_and_prompts_excludes_0():
    from rlvr.audit.recipe import recipe_difference

    rng = random.Random(6)
    prompts = [rng.random() for _ in range(32)]

    def recipe(shift, spread):  # 4 seeds; each seed moves every prompt by its own offset
        return {
            s: [
                {"id": f"r{i}", "step0_reward": 0.0, "final_reward": p + shift + offset}
                for i, p in enumerate(prompts)
            ]
            for s, offset in enumerate(rng.gauss(0, spread) for _ in range(4))
        }

    better = recipe_difference(recipe(0.2, 0.01), recipe(0.0, 0.01), n_resamples=2000)
    assert better["verdict"] == "better" and better["ci_low"] > 0
    assert better["probability_of_improvement"] > 0.9
    # the same mean gap, but seeds that scatter more than it: no claim
    noisy = recipe_difference(recipe(0.2, 0.4), recipe(0.0, 0.4), n_resamples=2000)
    assert noisy["verdict"] == "tie" and noisy["ci_low"] < 0 < noisy["ci_high"]
    x, y = recipe(0.0, 0.05), recipe(0.0, 0.05)
    same, back = (
        recipe_difference(x, y, n_resamples=2000),
        recipe_difference(y, x, n_resamples=2000),
    )
    assert same["verdict"] == back["verdict"] == "tie"
    assert same["probability_of_improvement"] + back["probability_of_improvement"] == 1.0


def _excludes_zero(ci: dict) -> int:
    """+1 or -1 when a pooled interval lies above or below 0, else 0."""
    return 1 if ci["ci_low"] > 0 else -1 if ci["ci_high"] < 0 else 0


@pytest.mark.slow
@pytest.mark.long
def test_the_recipe_verdict_survives_other_floats(copy_run):
    """The cold run's recipe (SMALL_RUN: one thread, each machine's own kernels) again with 2
    threads and the pinned kernels: other floats, so other models and per-seed figures. The
    recipe's verdict stays, and no tag whose pooled interval excludes 0 in one run excludes it
    on the other side in the other (per-seed verdicts may differ). The default's full table:
    docs/experiments.md#the-verdict-under-other-floats."""
    from ruamel.yaml import YAML

    from tests.helpers import dvc, set_params

    def models(project):  # each seed's trained model, as dvc.lock hashes it
        lock = YAML(typ="safe").load((project / "dvc.lock").read_text())["stages"]
        return {
            name: [o["md5"] for o in stage["outs"] if o["path"].startswith("models/")]
            for name, stage in lock.items()
            if name.startswith("train@")
        }

    project = copy_run("other-floats")
    before, trained = json.loads((project / "metrics/recipe.json").read_text()), models(project)
    set_params(project, {"runtime": {"torch_threads": 2, "reproducible": True}})
    dvc(project, "repro", "recipe")
    after = json.loads((project / "metrics/recipe.json").read_text())
    if models(project) == trained:
        pytest.skip(
            "this CPU computes the same models with 1 and 2 threads, pinned or not: "
            "no other floats to survive"
        )
    assert after["seeds"] == before["seeds"] and after["verdict"] == before["verdict"], (
        before,
        after,
    )
    for tag, figures in before["tags"].items():
        for key in ("delta", "passn_delta"):
            one, other = _excludes_zero(figures[key]), _excludes_zero(after["tags"][tag][key])
            assert one * other >= 0, (tag, key, figures[key], after["tags"][tag][key])
