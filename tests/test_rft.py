"""The RFT baseline (rlvr/baseline/rft.py, stage rft): what it samples, keeps and fine-tunes, and
how the audit sets it beside GRPO (rlvr/audit/baseline.py, the report's sentence and table)."""

import json
import math
import random

import pytest

from rlvr.audit.baseline import baseline_audit, compare_baseline
from rlvr.audit.recipe import pooled_audit
from rlvr.audit.slices import SliceRule
from rlvr.baseline.rft import OFF_MARKER, train_rft, write_off_marker
from rlvr.params.config import load_params, parse_params
from rlvr.policy.sampling import ScoredRow
from rlvr.policy.verified import completions_budget, kept_examples, sample_verified
from tests.helpers import ROOT
from tests.test_recipe import N, _record
from tests.test_report_escaping import figures  # noqa: F401 (a fixture)


def test_the_budget_is_grpos_one_generation_round_a_step():
    """What GRPO samples at one generation round a step, counted from the settings the train
    stage runs with (dynamic sampling's extra rounds are not known before GRPO runs; the report
    states both counts, read from the runs)."""
    params = load_params(ROOT / "params.yaml")
    train, grpo = params.train, params.train.grpo
    budget = completions_budget(
        train.max_steps,
        grpo.per_device_train_batch_size,
        grpo.gradient_accumulation_steps,
        grpo.num_iterations,
        train.processes,
        params.data.train_rows,
    )
    per_step = grpo.per_device_train_batch_size * grpo.gradient_accumulation_steps
    assert budget.grpo_completions == train.max_steps * per_step * train.processes
    assert budget.sampled >= budget.grpo_completions > budget.sampled - params.data.train_rows
    # two updates per batch (num_iterations 2) sample half as often; two processes twice as much
    assert completions_budget(400, 128, 1, 2, 1, 64).grpo_completions == 25600
    assert completions_budget(400, 128, 1, 1, 2, 64).grpo_completions == 102400


def test_it_keeps_each_prompts_distinct_correct_answers_once():
    rows = [
        ScoredRow(
            "a",
            ["3+5", " 3 + 5", "5+3", "8", "3+5"],
            {},
            [1, 1, 1, 0, 1],
            prompt_text="3 5 -> 8: ",
            correct=[True, True, True, False, True],
            tags=("add",),
        ),
        ScoredRow("b", ["1", "2"], {}, [0, 0], prompt_text="p", correct=[False, False]),
    ]
    pairs, lines = kept_examples(rows)
    assert pairs == [
        {"id": "a", "prompt": "3 5 -> 8: ", "completion": "3+5"},
        {"id": "a", "prompt": "3 5 -> 8: ", "completion": "5+3"},
    ]
    assert [(line["id"], line["sampled"], line["correct"], line["kept"]) for line in lines] == [
        ("a", 5, 4, 2),
        ("b", 2, 0, 0),
    ]


def _rows(path, verifier):
    rows = [
        {"id": f"r{i}", "prompt": f"{i} {i + 1} -> ", "verifier": verifier, "tags": ["t"]}
        for i in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _params(tmp_path, base, verifier, monkeypatch):
    """A project in tmp_path (the working directory): 4 rows, the tiny policy as its base."""
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copytree(base, tmp_path / "models" / "base")
    _rows(tmp_path / "train.jsonl", verifier)
    return parse_params(
        {
            "data": {"train_path": "train.jsonl", "train_rows": 4},
            "rewards": {"funcs": ["correctness"], "weights": [1.0]},
            "train": {
                "max_steps": 4,
                "grpo": {
                    "num_generations": 4,
                    "per_device_train_batch_size": 8,
                    "max_completion_length": 4,
                },
            },
            "audit": {"rft": {"epochs": 40, "batch_size": 8, "learning_rate": 1e-2}},
        }
    )


def _completion_logprob(model, tokenizer, prompt: str, completion: str) -> float:
    import torch

    ids = tokenizer(prompt + completion, return_tensors="pt", add_special_tokens=False)
    start = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logits = model(**ids).logits[0, :-1].log_softmax(-1)
    targets = ids["input_ids"][0, 1:]
    return float(logits[start - 1 :].gather(-1, targets[start - 1 :, None]).sum())


def test_it_fine_tunes_the_base_on_what_it_kept_and_saves_it_whole(
    tmp_path, tiny_policy_dir, monkeypatch
):
    """A regex verifier that accepts any answer: every sample is correct, so what is kept is every
    distinct answer; after the fine-tune each kept answer is likelier than under the base."""
    from rlvr.policy.models import load_policy

    params = _params(
        tmp_path, tiny_policy_dir, {"type": "regex", "pattern": "[\\s\\S]*"}, monkeypatch
    )
    out = tmp_path / "models" / "rft" / "seed-0"
    assert not (tmp_path / params.data.eval_path).exists()  # the fine-tune never sees the test file
    summary = train_rft(params, 0, out, sample_verified(params, 0))
    budget = summary["budget"]
    assert budget["grpo_completions"] == 4 * 8 and budget["samples_per_prompt"] == 8
    assert [line["sampled"] for line in summary["rows"]] == [8] * 4
    assert summary["kept"] == sum(line["kept"] for line in summary["rows"]) > 4
    assert summary["kept_by_tag"] == {"t": {"rows": 4, "solved": 4, "kept": summary["kept"]}}
    assert summary["fine_tune"]["steps"] == math.ceil(40 * summary["kept"] / 8)
    # a DVC output: the same bytes on a rerun, so no wall time in it (that goes to timing)
    assert not [key for key in json.dumps(summary).split('"') if "second" in key]
    assert (out / "config.json").exists() and not list(tmp_path.glob("models/rft/rft.*"))

    # the same samples again (same seed, same base): the pairs it fine-tuned on
    from rlvr.data.rows import read_rows
    from rlvr.policy.sampling import rollout_settings, score_rows
    from rlvr.rewards.registry import build_reward_funcs

    base, tokenizer = load_policy(tiny_policy_dir)
    tuned, _ = load_policy(out)
    settings = rollout_settings(params, n=8, seed=0)
    scored = score_rows(
        base,
        tokenizer,
        read_rows(params.data.train_path),
        build_reward_funcs(params.rewards),
        [1.0],
        settings,
    )
    pairs, _ = kept_examples(scored)
    assert len(pairs) == summary["kept"]
    gains = [
        _completion_logprob(tuned, tokenizer, p["prompt"], p["completion"])
        - _completion_logprob(base, tokenizer, p["prompt"], p["completion"])
        for p in pairs
    ]
    assert sum(gains) / len(gains) > 0.5, gains


def test_a_base_that_answers_nothing_is_its_own_baseline(tmp_path, tiny_policy_dir, monkeypatch):
    """Nothing correct to fine-tune on: RFT leaves the base as it is (the audit then says what
    that is worth), and the pipeline goes on."""
    import torch

    from rlvr.policy.models import load_policy

    params = _params(
        tmp_path, tiny_policy_dir, {"type": "exact_match", "target": "no such"}, monkeypatch
    )
    out = tmp_path / "models" / "rft" / "seed-0"
    summary = train_rft(params, 0, out, sample_verified(params, 0))
    assert summary["kept"] == summary["rows_with_kept"] == 0
    assert summary["fine_tune"]["steps"] == 0
    base, _ = load_policy(tiny_policy_dir)
    same, _ = load_policy(out)
    assert all(
        torch.equal(a, b) for a, b in zip(base.state_dict().values(), same.state_dict().values())
    )


def test_baseline_none_leaves_only_a_marker(tmp_path):
    out = tmp_path / "seed-0"
    (out / "old").mkdir(parents=True)
    write_off_marker(out)
    assert [p.name for p in out.iterdir()] == [OFF_MARKER]


# --------------------------------------------------------------------------- GRPO against RFT


def _recipe(rng, add_final: int, sub_final: int) -> list[dict]:
    """16 `add` rows, 8 `sub` rows, every one at 1 correct of N at step 0; the final counts
    scatter by one around the given ones (seeds and prompts differ)."""

    def around(x):
        return max(0, min(N, x + rng.choice((-1, 0, 1))))

    return [_record(i, "add", 1, around(add_final)) for i in range(16)] + [
        _record(16 + i, "sub", 1, around(sub_final)) for i in range(8)
    ]


def test_grpo_against_rft_names_a_winner_per_tag_only_where_the_interval_excludes_0():
    rng = random.Random(3)
    grpo = {s: _recipe(rng, 4, 1) for s in range(3)}  # gains on add, keeps sub
    rft = {s: _recipe(rng, 2, 3) for s in range(3)}  # gains less on add, more on sub
    rule = SliceRule(min_rows=4)
    comparison = compare_baseline("rft", grpo, rft, N, rule, n_resamples=2000)
    tags = {t: e["delta_mean_reward"]["verdict"] for t, e in comparison["tags"].items()}
    assert tags == {"add": "better", "sub": "worse"}
    whole = comparison["grpo_minus_baseline"]["delta_mean_reward"]
    assert whole["ci_low"] < whole["value"] < whole["ci_high"]

    same = {s: _recipe(random.Random(s), 3, 1) for s in range(3)}
    twin = {s: _recipe(random.Random(10 + s), 3, 1) for s in range(3)}
    tie = compare_baseline("rft", same, twin, N, rule, n_resamples=2000)
    assert tie["grpo_minus_baseline"]["delta_mean_reward"]["verdict"] == "tie"
    assert {e["delta_mean_reward"]["verdict"] for e in tie["tags"].values()} == {"tie"}

    pooled = pooled_audit(grpo, N, rule, n_resamples=2000)
    entry = baseline_audit("rft", [0, 1, 2], rft, {}, grpo, pooled, N, rule, n_resamples=2000)
    assert entry["sentence"].startswith("GRPO against the RFT baseline on the 24 held-out rows")
    assert entry["sentence"].endswith("by tag: GRPO wins on add, RFT on sub.")


def test_the_baselines_pooled_tags_count_the_seeds_its_own_audit_called_regressed():
    """RFT's pooled per-tag `regressed_seeds`, as GRPO's: from each RFT seed's own audit (stage
    recipe reads them from reports/rft/seed-<n>/summary.json)."""
    rng = random.Random(4)
    grpo = {s: _recipe(rng, 4, 1) for s in range(3)}
    rft = {s: _recipe(rng, 2, 3) for s in range(3)}
    pooled = pooled_audit(grpo, N, SliceRule(min_rows=4), n_resamples=500)
    entry = baseline_audit(
        "rft",
        [0, 1, 2],
        rft,
        {},
        grpo,
        pooled,
        N,
        SliceRule(min_rows=4),
        n_resamples=500,
        seed_regressions={0: ["sub"], 1: [], 2: ["add", "sub"]},
    )
    counts = {s["tag"]: s["regressed_seeds"] for s in entry["comparison"]["pooled"]["slices"]}
    assert counts == {"add": 1, "sub": 2}
    unknown = baseline_audit(
        "rft", [0, 1, 2], rft, {}, grpo, pooled, N, SliceRule(min_rows=4), n_resamples=500
    )
    assert {s["regressed_seeds"] for s in unknown["comparison"]["pooled"]["slices"]} == {0}


def test_the_sentence_says_when_every_seed_kept_the_same_answers_and_why():
    rng = random.Random(5)
    grpo = {s: _recipe(rng, 4, 1) for s in range(3)}
    rft = {s: _recipe(rng, 2, 3) for s in range(3)}
    pooled = pooled_audit(grpo, N, SliceRule(), n_resamples=500)

    def sentence(digests):
        kept = {s: {"answers": 113, "digest": d, "samples_per_prompt": 800} for s, d in digests}
        entry = baseline_audit(
            "rft", [0, 1, 2], rft, {}, grpo, pooled, N, SliceRule(), n_resamples=500, kept=kept
        )
        return entry["comparison"]["kept"], entry["sentence"]

    kept, text = sentence([(0, "a"), (1, "a"), (2, "a")])
    assert kept == {
        "answers": [113] * 3,
        "samples_per_prompt": [800] * 3,
        "same_on_every_seed": True,
    }
    assert "RFT kept the same 113 answers on every seed, as at 800 samples a prompt" in text
    assert "(the kept set saturates: the seeds differ only in fine-tuning order)" in text
    kept, text = sentence([(0, "a"), (1, "b"), (2, "a")])
    assert not kept["same_on_every_seed"] and "RFT kept 113 answers a seed)" in text


def test_the_sentence_counts_each_recipes_seeds():
    rng = random.Random(2)
    grpo = {s: _recipe(rng, 4, 1) for s in range(2)}  # a GRPO seed failed; RFT's three ran
    rft = {s: _recipe(rng, 2, 3) for s in range(3)}
    pooled = pooled_audit(grpo, N, SliceRule(), n_resamples=500)
    entry = baseline_audit("rft", [0, 1, 2], rft, {}, grpo, pooled, N, SliceRule(), n_resamples=500)
    assert "held-out rows (GRPO over 2 seeds, RFT over 3): GRPO gains" in entry["sentence"]
    sampled = {"grpo": [130048, 134784], "baseline": [51200] * 3}
    entry = baseline_audit(
        "rft", [0, 1, 2], rft, {}, grpo, pooled, N, SliceRule(), n_resamples=500, sampled=sampled
    )
    assert (
        "(GRPO over 2 seeds, RFT over 3; completions sampled a seed: GRPO 130,048-134,784, RFT "
        "51,200): GRPO gains" in entry["sentence"]
    )
    assert entry["comparison"]["sampled"] == sampled


def test_no_comparison_without_two_seeds_on_each_side():
    rng = random.Random(1)
    grpo = {s: _recipe(rng, 4, 1) for s in range(2)}
    pooled = pooled_audit(grpo, N, SliceRule(), n_resamples=500)
    entry = baseline_audit(
        "rft",
        [0, 1],
        {0: _recipe(rng, 2, 2)},
        {1: "no results in reports/rft/seed-1/..."},
        grpo,
        pooled,
        N,
        SliceRule(),
        n_resamples=500,
    )
    assert entry["comparison"] is None
    assert entry["sentence"] == (
        "no comparison with the RFT baseline: 1 of 2 of its seeds and 2 of GRPO's ran to the "
        "end, and each side needs 2 (seed 1: no results in reports/rft/seed-1/...)"
    )


def test_the_report_opens_with_which_wins_and_shows_a_row_per_tag_as_text(tmp_path, figures):  # noqa: F811
    from rlvr.report.render import to_html
    from rlvr.report.retrospective import build_report
    from tests.test_report_escaping import report_inputs, visible_text

    rng = random.Random(3)
    grpo = {s: _recipe(rng, 4, 1) for s in range(3)}
    rft = {s: _recipe(rng, 2, 3) for s in range(3)}
    for runs in (grpo, rft):  # a tag with markup: shown as its text, never rendered
        for records in runs.values():
            for r in records:
                r["tags"] = ["<b>sub</b>" if t == "sub" else t for t in r["tags"]]
    rule = SliceRule(min_rows=4)
    pooled = pooled_audit(grpo, N, rule, n_resamples=1000)
    inputs, _ = report_inputs(figures)
    inputs["recipe"].update(
        pooled={**inputs["recipe"]["pooled"], **pooled},
        baseline=baseline_audit("rft", [0, 1, 2], rft, {}, grpo, pooled, N, rule, n_resamples=1000),
    )
    markdown = build_report(**inputs)
    lines = [line for line in markdown.splitlines() if line]
    box = lines[: lines.index("</div>")]  # the answer box first (rlvr/report/answer.py)
    assert any(line.startswith("**Did GRPO beat the cheap baseline, RFT?** ") for line in box)
    lines = lines[len(box) + 2 :]  # after the box's end and its chart
    assert lines[0].startswith("**The recipe over ")
    assert lines[1].startswith("**Is RL worth it here?** GRPO against the RFT baseline on the 24 ")
    table = lines[lines.index("### GRPO against the RFT baseline") :]
    rows = [line for line in table if line.startswith("| ")][1:4]  # after the header
    # all rows first, then the tags in order ('<' sorts before 'a')
    assert [row.split(" | ")[0] for row in rows] == [
        "| all rows",
        "| &lt;b&gt;sub&lt;/b&gt;",
        "| add",
    ]
    assert [row.rstrip(" |").rsplit(" | ", 1)[1] for row in rows[1:]] == ["RFT", "GRPO"]
    page = to_html(markdown, tmp_path, images=figures)
    assert "<b>sub</b>" not in page.split("<body>", 1)[1].split("<pre>")[0]
    assert "RFT on <b>sub</b>." in visible_text(page)


def test_the_recipe_stage_with_one_seed_says_there_is_no_comparison(tmp_path, monkeypatch):
    """One RL seed (a smoke of a real model): no recipe verdict, so nothing to set the baseline
    beside; the stage says so instead of failing."""
    import stages.recipe
    from rlvr.core.files import write_jsonl
    from rlvr.core.seeds import seed_paths
    from rlvr.pipeline.stage import stage_view
    from tests.test_recipe import _evaluated, _seed

    monkeypatch.chdir(tmp_path)
    params = parse_params({"audit": {"seeds": [0]}})
    run, result = seed_paths(params.paths, 0), _evaluated(_seed(random.Random(1), 2), 0.5)
    for path, value in (
        (run.eval_summary, result["summary"]),
        (run.train_summary, result["train"]),
    ):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(json.dumps(value))
    write_jsonl(run.eval_per_prompt, result["records"])
    (tmp_path / run.rft_per_prompt).parent.mkdir(parents=True)
    write_jsonl(run.rft_per_prompt, result["records"])
    (tmp_path / run.rft_summary).write_text(json.dumps({"budget": {"sampled": 51200}}))
    (tmp_path / "dvc.yaml").write_text((ROOT / "dvc.yaml").read_text())
    assert stages.recipe.main(stage_view(params, "recipe")) == 0
    recipe = json.loads((tmp_path / params.paths.recipe_summary).read_text())
    assert recipe["baseline"]["comparison"] is None
    assert recipe["baseline"]["sentence"].startswith(
        "no comparison with the RFT baseline: 1 of 1 of its seeds and 1 of GRPO's ran to the end"
    )


def test_with_lora_the_baseline_is_an_adapter_the_audit_loads(
    tmp_path, tiny_policy_dir, monkeypatch
):
    """model.lora.enabled (a real model on a GPU): RFT trains adapters, as GRPO does, and saves
    them where the audit loads the baseline from."""
    from rlvr.policy.models import load_policy

    params = _params(
        tmp_path, tiny_policy_dir, {"type": "regex", "pattern": "[\\s\\S]*"}, monkeypatch
    )
    params.model.lora.enabled = True
    out = tmp_path / "models" / "rft" / "seed-0"
    summary = train_rft(params, 0, out, sample_verified(params, 0))
    assert summary["fine_tune"]["steps"] > 0
    assert (out / "adapter_config.json").exists() and not (out / "config.json").exists()
    model, tokenizer = load_policy(out)
    assert type(model).__name__.startswith("Peft") or hasattr(model, "peft_config")
    assert tokenizer.eos_token == load_policy(tiny_policy_dir)[1].eos_token


def test_an_interval_end_within_float_noise_of_0_holds_0():
    """pass@k gains are rationals summed in floats: an interval end that is exactly 0 comes out
    as -7e-18 and must not make a winner."""
    from rlvr.audit.recipe import recipe_difference

    def runs(values):  # 2 seeds, 4 prompts: the final reward is the value, step 0 is 0
        return {
            s: [
                {"id": f"r{i}", "step0_reward": 0.0, "final_reward": v}
                for i, v in enumerate(values)
            ]
            for s in range(2)
        }

    x, y = runs([0.1 + 0.2] * 4), runs([0.3] * 4)  # 0.1 + 0.2 > 0.3 in floats, by 5.6e-17
    d = recipe_difference(x, y, n_resamples=200)
    assert 0 < d["ci_low"] <= d["ci_high"] < 1e-12 and d["verdict"] == "tie"


def test_the_guides_are_the_answers_rft_keeps(tmp_path, tiny_policy_dir, monkeypatch):
    """Stage verified's record, written and read back as a file (rlvr.policy.verified): the
    guides are the distinct correct answers rft@seed fine-tunes on, each one verified; a row
    with none has no entry; the file of another seed, a marker or no file stops with what to
    run."""
    import re

    from rlvr.core.files import write_json
    from rlvr.policy.verified import VerifiedMissing, guides_of, read_verified

    params = _params(tmp_path, tiny_policy_dir, {"type": "regex", "pattern": "^[0-9]"}, monkeypatch)
    path = tmp_path / "reports" / "verified" / "seed-0" / "answers.json"
    write_json(path, sample_verified(params, 0))
    record = read_verified(str(path), 0)
    guides = guides_of(record)
    summary = train_rft(params, 0, tmp_path / "models" / "rft" / "seed-0", record)
    kept = {line["id"]: line["kept"] for line in summary["rows"]}
    assert {row: len(answers) for row, answers in guides.items()} == {
        row: n for row, n in kept.items() if n
    }
    assert guides and sum(kept.values()) < 4 * 8  # some answers kept, not every sample
    assert summary["budget"] == record["budget"] and record["budget"]["sampled"] == 4 * 8
    for answers in guides.values():
        assert all(re.match("^[0-9]", a.strip()) for a in answers)
        assert len({"".join(a.split()) for a in answers}) == len(answers)
    with pytest.raises(VerifiedMissing, match=r"holds no sampled answers of seed 1"):
        read_verified(str(path), 1)
    write_json(path, {"baseline": "none"})
    with pytest.raises(
        VerifiedMissing, match="set audit.baseline rft and run `dvc repro verified@0`"
    ):
        read_verified(str(path), 0)
    with pytest.raises(VerifiedMissing, match=r"missing: run `dvc repro verified@2` first"):
        read_verified(str(tmp_path / "none.json"), 2)


def test_a_tag_with_one_row_gets_an_interval_over_the_seeds():
    """A tag with one held-out row: no prompts to resample, so the interval draws the seeds
    alone (the bootstrap over prompts needs two); one seed a side: the value itself."""
    from rlvr.audit.recipe import recipe_difference

    def runs(finals):
        return {
            s: [{"id": "r", "step0_reward": 0.0, "final_reward": v}] for s, v in enumerate(finals)
        }

    d = recipe_difference(runs([0.5, 0.6, 0.7]), runs([0.1, 0.2, 0.3]), n_resamples=500)
    assert d["value"] == pytest.approx(0.4) and 0.2 < d["ci_low"] <= d["ci_high"] < 0.6
    assert d["verdict"] == "better"
    d = recipe_difference(runs([0.5]), runs([0.1]), n_resamples=500)
    assert d["ci_low"] == d["ci_high"] == pytest.approx(0.4)


def test_the_comparison_holds_a_tag_with_one_row():
    """A user's held-out file may hold a kind of problem once: the per-tag comparison of the
    recipe stage still runs (it used to crash the bootstrap)."""
    rng = random.Random(5)

    def recipe(add_final):
        return _recipe(rng, add_final, 1) + [_record(99, "mod", 1, 2)]

    grpo = {s: recipe(4) for s in range(2)}
    rft = {s: recipe(2) for s in range(2)}
    comparison = compare_baseline("rft", grpo, rft, N, SliceRule(min_rows=4), n_resamples=500)
    assert comparison["tags"]["mod"]["delta_mean_reward"]["verdict"] == "tie"  # 2 - 2: no gain
