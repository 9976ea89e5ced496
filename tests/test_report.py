"""The retrospective's pieces: KL/beta diagnosis rules, audit, PPO cost, HTML self-containment."""

import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlvr.audit.diagnosis import (
    KLThresholds,
    count_parameters,
    diagnose_kl,
    ppo_cost,
    prompt_audit,
    training_health,
)
from rlvr.core.metric_keys import FIRST_BATCH_KL
from rlvr.params.config import load_params
from rlvr.pipeline.training import run_metrics
from rlvr.report.knobs import hyperparameter_table
from rlvr.report.render import to_html

ROOT = Path(__file__).resolve().parents[1]
T = KLThresholds(
    kl_tiny=0.01, plateau_gain=0.02, kl_high=1.0, kl_rising_ratio=1.5, collapse_drop=0.1, window=10
)


def _history(reward, kl=None, steps=200):
    return [
        {"step": s, "reward": reward(s), **({"kl": kl(s)} if kl else {})}
        for s in range(1, steps + 1)
    ]


def test_healthy_kl_bounded_reward_rising():
    result = diagnose_kl(_history(lambda s: 0.3 + 0.5 * s / 200, lambda s: min(0.2, s / 500)), T)
    assert result["label"] == "healthy"
    assert not any(r["fired"] for r in result["rules"])


def test_too_tight_kl_tiny_and_reward_flat():
    result = diagnose_kl(_history(lambda s: 0.4 + 0.1 * min(s, 40) / 40, lambda s: 0.001), T)
    assert result["label"] == "too tight" and "lower beta" in result["advice"]


def test_too_loose_kl_keeps_climbing():
    result = diagnose_kl(
        _history(lambda s: 0.3 + 0.5 * s / 200, lambda s: 0.01 * math.exp(s / 40)), T
    )
    assert result["label"] == "too loose"
    fired = {r["rule"] for r in result["rules"] if r["fired"]}
    assert "KL keeps climbing (last quarter / third quarter)" in fired


def test_too_loose_reward_rises_then_collapses():
    result = diagnose_kl(
        _history(
            lambda s: 0.3 + 0.5 * s / 100 if s <= 100 else 0.8 - 0.5 * (s - 100) / 100,
            lambda s: 0.2,
        ),
        T,
    )
    assert result["label"] == "too loose"
    assert any(r["fired"] and "collapses" in r["rule"] for r in result["rules"])


def test_beta_zero_has_only_reward_rules():
    result = diagnose_kl(_history(lambda s: 0.3 + 0.5 * s / 200), T)
    assert result["label"] == "healthy" and "no KL was measured" in result["advice"]


def test_under_dynamic_sampling_the_diagnosis_reads_the_kl_over_the_first_batch():
    # TRL's kl over the kept groups reads 3-7 (the unsolved prompts); over each step's first batch
    # the policy sits as near the reference as a healthy run: healthy, not "raise beta"
    history = _history(lambda s: 0.3 + 0.5 * s / 200, lambda s: 3.0 + 4.0 * s / 200)
    for entry in history:
        entry[FIRST_BATCH_KL] = min(0.2, entry["step"] / 500)
    result = diagnose_kl(history, T)
    assert result["label"] == "healthy" and result["values"]["kl_end"] == pytest.approx(0.2)
    assert (
        result["values"]["kl_over"]
        == "the first batch of each step, every group (dynamic sampling)"
    )
    # and a first-batch KL that climbs is still too loose
    for entry in history:
        entry[FIRST_BATCH_KL] = 0.01 * math.exp(entry["step"] / 40)
    assert diagnose_kl(history, T)["label"] == "too loose"
    # the run's headline KL is the same figure, so settings with and without it compare
    metrics = run_metrics(history)
    assert metrics["last10_mean_kl"] == pytest.approx(
        sum(e[FIRST_BATCH_KL] for e in history[-10:]) / 10
    )
    assert metrics["final"]["kl"] == history[-1][FIRST_BATCH_KL]
    assert metrics["kl_over"] == "the first batch of each step, every group (dynamic sampling)"
    assert run_metrics(_history(lambda s: 0.5, lambda s: 0.3))["kl_over"] == "the trained batch"


def test_prompt_audit():
    rows = [
        {"id": str(i), "delta": d, "step0_success": a, "final_success": b}
        for i, (d, a, b) in enumerate(
            [(0.5, 0.2, 0.7), (-0.2, 0.4, 0.2), (0.0, 0.0, 0.0), (0.0, 1.0, 1.0), (0.1, 0.5, 0.6)]
        )
    ]
    audit = prompt_audit(rows, top=2)
    assert [r["id"] for r in audit["gains"]] == ["0", "4"]
    assert [r["id"] for r in audit["losses"]] == ["1"]
    assert [r["id"] for r in audit["never_solved"]] == ["2"]
    assert [r["id"] for r in audit["always_solved"]] == ["3"]


def test_ppo_cost_counts_a_critic_of_the_policys_size():
    cost = ppo_cost(policy_params=1_000_000, hidden_size=128, num_generations=8)
    assert cost["critic_parameters"] == 1_000_129
    assert cost["critic_memory_mb"] == pytest.approx(1_000_129 * 16 / 2**20)
    assert (cost["ppo_rollouts_per_prompt"], cost["grpo_rollouts_per_prompt"]) == (1, 8)


def test_parameters_are_counted_from_safetensors_headers(tiny_policy_dir):
    from rlvr.policy.models import load_policy

    model, _ = load_policy(tiny_policy_dir)
    assert count_parameters(tiny_policy_dir) == sum(p.numel() for p in model.parameters())


def test_hyperparameters_carry_the_comment_next_to_them_or_the_help():
    rows = {
        name: (value, why)
        for name, value, why in hyperparameter_table(
            ROOT / "params.yaml", load_params(ROOT / "params.yaml")
        )
    }
    assert "train.grpo.learning_rate" in rows and "train.grpo.beta" in rows
    assert rows["train.grpo.beta"][1]  # a rationale, from the comment in params.yaml
    assert rows["model.tiny.intermediate_size"][1] == "MLP width."  # no comment: the help string
    assert all(why for _, why in rows.values())


def test_html_is_self_contained(tmp_path):
    from PIL import Image

    Image.new("RGB", (4, 4), "red").save(tmp_path / "plot.png")
    html = to_html(
        "# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n![a plot](plot.png)\n",
        tmp_path,
        images=["plot.png"],
    )
    assert "<table>" in html and "data:image/png;base64," in html
    assert not re.search(r"(src|href)=\"(https?:)?//", html)
    assert "plot.png" not in html


# ------------------------------------------------------------------- one verdict on the run's health

HEALTHY = {"label": "healthy", "advice": "KL bounded and reward rising: keep beta"}
LOOSE = {"label": "too loose", "advice": "raise beta"}


def test_health_is_healthy_only_when_the_beta_rules_agree_and_no_alarm_fired():
    assert training_health(HEALTHY, {"fired": []}) == {
        "label": "healthy",
        "text": "KL bounded and reward rising: keep beta; no alarm fired",
    }
    assert training_health(HEALTHY, None)["label"] == "healthy"  # a report without alarms


def test_a_fired_alarm_makes_a_healthy_beta_reading_need_attention():
    health = training_health(HEALTHY, {"fired": ["KL spike", "diversity collapse"]})
    assert health["label"] == "needs attention"
    assert health["text"].startswith("2 alarm(s) fired") and "healthy" not in health["text"]
    assert "no change of beta" in health["text"]


def test_a_beta_problem_keeps_its_label_and_counts_the_alarms_too():
    assert training_health(LOOSE, {"fired": ["KL spike"]}) == {
        "label": "too loose",
        "text": "raise beta; 1 alarm(s) fired (below, each with what to do) as well",
    }
    assert training_health(LOOSE, {"fired": []})["text"] == "raise beta; no alarm fired"


def test_the_report_opens_its_health_section_with_the_one_verdict():
    from rlvr.report.retrospective import diagnosis_section

    history = _history(lambda s: 0.3 + 0.5 * s / 200, lambda s: min(0.2, s / 500))
    inputs = SimpleNamespace(
        diagnosis=diagnose_kl(history, T),
        alarms={"fired": ["KL spike"], "rules": []},
        params={"report": {"window": 50}},
    )
    lines = [line for line in diagnosis_section(inputs) if line]
    assert lines[:2] == [
        "## 3. Training health",
        "**needs attention**: 1 alarm(s) fired (below, each with what to do); the KL / beta rules "
        "ask no change of beta (KL bounded, reward rising).",
    ]
    # the beta rules' own reading follows, plain: no second verdict in bold
    assert "The rules read healthy: KL bounded and reward rising: keep beta." in lines
    assert not any("**healthy**" in line for line in lines)


def test_every_knob_that_shaped_the_run_is_shown_and_those_not_in_force_are_folded():
    import dataclasses

    from rlvr.report.retrospective import hyperparameters_section

    def section(overrides):
        params = load_params(ROOT / "params.yaml")
        for dotted, value in overrides.items():
            obj, *path, last = [params, *dotted.split(".")]
            for part in path:
                obj = getattr(obj, part)
            setattr(obj, last, value)
        rows = hyperparameter_table(ROOT / "params.yaml", params)
        inputs = SimpleNamespace(hyperparameters=rows, params=dataclasses.asdict(params))
        text = "\n".join(hyperparameters_section(inputs))
        shown, folded = text.split("<details", 1)
        return rows, shown, folded

    rows, shown, folded = section({})
    names = [name for name, _, _ in rows]
    # the knobs the alarms and the docs name are in the table, with a reason each
    for knob in (
        "train.dynamic_sampling",
        "train.max_sampling_rounds",
        "train.advantage",
        "train.select",
        "train.eval_steps",
        "audit.seeds",
        "smoke.max_steps",
    ):
        assert knob in names and f"| {knob.replace('_', chr(92) + '_')} |" in shown, knob
    # inactive ones are folded, each with what it waits for; nothing is lost
    assert (
        "| train.beta\\_schedule.warmup\\_steps | `100` | train.beta\\_schedule.kind warmup |"
        in folded
    )
    assert "| train.grpo.use\\_vllm | `False` | a GPU (train.grpo.use\\_cpu false) |" in folded
    assert "| train.beta\\_schedule.warmup\\_steps |" not in shown
    assert "| train.grpo.use\\_vllm |" not in shown
    assert all(f"| {n.replace('_', chr(92) + '_')} |" in shown + folded for n in names)
    # a schedule that uses them shows them
    _, shown, folded = section({"train.beta_schedule.kind": "warmup"})
    assert "| train.beta\\_schedule.warmup\\_steps | `100` |" in shown
    assert "train.beta\\_schedule.target\\_kl" in folded


def test_the_committed_report_gives_each_models_md5_as_dvc_lock_records_it():
    """The shown seed's base, GRPO and RFT models, each md5 from the stage that wrote it."""
    import json

    from rlvr.report.provenance import produced_hashes, read_lock

    markdown = (ROOT / "reports/retrospective.md").read_text()
    rows = dict(re.findall(r"^\| model md5 (\S+) \| (\S+) \|$", markdown, flags=re.M))
    seed = json.loads((ROOT / "reports/recipe/summary.json").read_text())["published_seed"]
    assert set(rows) == {"models/base", f"models/trained/seed-{seed}", f"models/rft/seed-{seed}"}
    produced = produced_hashes(read_lock(ROOT / "dvc.lock"))
    assert {path: produced[path] for path in rows} == rows
