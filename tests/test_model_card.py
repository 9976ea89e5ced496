"""models/final reads like a hub model: its README.md card says what made it (escaped, with a
YAML header nothing can break out of), the folder loads with from_pretrained as it is (through
peft for a LoRA adapter), a failed publish leaves the old folder whole, and the commit a card
names is the sources', so the commit that records the results reruns to the same bytes."""

import json
import subprocess

import pytest
import yaml

from rlvr.report.model_card import CARD_FILE, card_body, model_card, publish_folder
from rlvr.report.provenance import sources_state

METRICS = {
    "verdict": "mixed",
    "reward0": 0.349,
    "reward": 0.557,
    "ci_low": 0.131,
    "ci_high": 0.289,
    "greedy0": 0.312,
    "greedy": 0.469,
    "pass1_0": 0.22,
    "pass1": 0.47,
    "passn_0": 0.797,
    "passn": 0.625,
}


def _card(**changes):
    inputs = dict(
        folder="models/final",
        base="a tiny model built locally",
        base_hub_id=None,
        base_md5="b" * 32,
        adapter=None,
        data={"data/grpo_train.jsonl": "1" * 32, "data/grpo_test.jsonl": "2" * 32},
        params=[("seed", 0), ("rewards.format_pattern", r"^\s*\d+\s*$")],
        metrics=METRICS,
        verdict_line="mixed: improved overall (+0.208 [+0.131, +0.289]), regressed on sub",
        samples=32,
        confidence=0.95,
        git={"commit": "c" * 40, "changed": []},
        code_digest="d" * 64,
        weights_md5="e" * 32,
        versions={"torch": "2.13.0"},
    )
    return model_card(**{**inputs, **changes})


def test_the_card_holds_what_made_the_model():
    card = _card()
    header, body = card.split("---\n")[1], card_body(card)
    assert yaml.safe_load(header) == {
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        "tags": ["grpo", "trl", "rlvr"],
    }
    assert body.startswith("# GRPO policy: mixed\n")
    for text in (
        "| mean reward, 32 samples per prompt | 0.349 | 0.557 |",
        "| pass@32 | 0.797 | 0.625 |",
        "| greedy success | 0.312 | 0.469 |",
        "95% interval: [0.131, 0.289]",
        "Verdict (this run): mixed: improved overall",
        f"| models/base md5 (prepare\\_model) | {'b' * 32} |",
        f"| their md5 (train) | {'e' * 32} |",
        "| these weights | the full model |",
        f"| data/grpo\\_train.jsonl | {'1' * 32} |",
        f"| {'c' * 40} |",
        "| uncommitted changes | none |",
        f"| {'d' * 64} |",
        "(no uncommitted changes)",
        'AutoModelForCausalLM.from_pretrained("models/final")',
    ):
        assert text in card, text


RECIPE = {
    "seeds": [0, 1, 2],
    "verdict": "no significant change",
    "delta_mean_reward": {"value": 0.11, "ci_low": -0.02, "ci_high": 0.25},
    "pass1_final": 0.41,
    "passn_final": 0.6,
    "tags": {},
}


def test_the_card_names_the_seed_and_why_and_sets_the_recipe_beside_it():
    card = _card(
        seed=2,
        seed_reason="the best mean reward on the validation rows at its "
        "chosen step: 0.4300 (seed 0: 0.4100, seed 1: 0.4200, seed 2: 0.4300)",
        recipe=RECIPE,
    )
    body = card_body(card)
    assert body.startswith("# GRPO policy: no significant change over 3 seeds (this seed: mixed)\n")
    assert (
        "These weights are RL seed 2's: the best mean reward on the validation rows at its "
        "chosen step: 0.4300"
    ) in body and "The test rows played no part" in body
    for text in (
        "| mean reward delta \\[interval\\] | +0.208 \\[+0.131, +0.289\\] | "
        "+0.110 \\[-0.020, +0.250\\] |",
        "| pass@1 final | 0.470 | 0.410 |",
        "| pass@32 final | 0.625 | 0.600 |",
        "| verdict | mixed | no significant change |",
    ):
        assert text in body, text
    assert "## The recipe over its seeds" not in _card()  # no recipe given: none shown


def test_text_from_params_and_data_is_escaped_and_cannot_break_the_header():
    hostile = 'x"\n---\nlicense: evil\n<script>alert(1)</script> | `😀'
    card = _card(
        base=hostile,
        base_hub_id=hostile,
        data={f"data/{hostile}.jsonl": "1" * 32},
        params=[("rewards.format_pattern", "a|b<img src=x>")],
        metrics={**METRICS, "verdict": "<b>mixed</b>"},
        verdict_line=f"mixed {hostile}",
        adapter={"r": 4, "lora_alpha": 8, "base_model_name_or_path": hostile},
        folder=f"models/{hostile}",
        git={"commit": "c" * 40, "changed": ["params.yaml", f"data/{hostile}"]},
    )
    header = yaml.safe_load(card.split("---\n")[1])
    assert header["base_model"] == hostile and "license" not in header
    assert "<script>" not in card and "<img" not in card and "<b>" not in card
    assert card.count("\n---\n") == 1  # the header's end, and no other
    load = card.split("```python\n")[1].split("\n```")[0]  # the snippet is valid Python ...
    compile(load, "card", "exec")
    assert f"from_pretrained({json.dumps(f'models/{hostile}')[:8]}" in load  # ... naming the path
    assert "| rewards.format\\_pattern | a\\|b&lt;img src=x&gt; |" in card
    assert 'with uncommitted changes to `params.yaml`, <code>data/x" --- license: evil ' in card
    assert '| uncommitted changes | params.yaml, data/x" --- license: evil &lt;script&gt;' in card


def test_the_interval_is_the_evaluations_and_no_git_says_so():
    assert "Mean reward delta, 90% interval: [0.131, 0.289]." in _card(confidence=0.9)
    card = _card(git={"commit": "unknown", "changed": []})
    assert "by `dvc repro` outside a git repository (no commit to name)." in card
    assert "no uncommitted changes" not in card


def test_a_lora_card_says_peft_and_names_the_adapters_base():
    card = _card(adapter={"r": 16, "lora_alpha": 32, "base_model_name_or_path": "models/base"})
    assert "library_name: peft" in card
    assert "a LoRA adapter (r 16, alpha 32) on models/base" in card
    assert 'AutoPeftModelForCausalLM.from_pretrained("models/final")' in card


def test_the_published_folder_loads_with_from_pretrained_as_it_is(tiny_policy_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = tmp_path / "models/final"
    publish_folder(tiny_policy_dir, final, _card())
    assert (final / CARD_FILE).read_text().startswith("---\nlibrary_name: transformers")
    model = AutoModelForCausalLM.from_pretrained(final)
    tokenizer = AutoTokenizer.from_pretrained(final)
    assert model.num_parameters() > 0 and tokenizer("12+3")["input_ids"]
    assert not list(tmp_path.glob("models/.*staging*"))


def test_a_published_lora_adapter_loads_with_peft_on_its_base(tiny_policy_dir, tmp_path):
    import torch
    from peft import AutoPeftModelForCausalLM, LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_policy_dir)
    adapted = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    )
    with torch.no_grad():  # an adapter that moves the model (LoRA's B starts at zero)
        for name, weight in adapted.named_parameters():
            if "lora_B" in name:
                weight.fill_(0.01)
    trained = tmp_path / "models/trained"
    adapted.save_pretrained(trained)
    adapter = json.loads((trained / "adapter_config.json").read_text())
    publish_folder(trained, tmp_path / "models/final", _card(adapter=adapter))

    loaded = AutoPeftModelForCausalLM.from_pretrained(tmp_path / "models/final")
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, adapted(ids).logits)
        base = AutoModelForCausalLM.from_pretrained(tiny_policy_dir)
        assert not torch.allclose(loaded(ids).logits, base(ids).logits)
    assert "library_name: peft" in (tmp_path / "models/final" / CARD_FILE).read_text()


def test_publish_replaces_the_old_folder_and_a_failure_leaves_it_whole(tmp_path, monkeypatch):
    from pathlib import Path

    final, weights = tmp_path / "final", tmp_path / "trained"
    for folder, text in ((final, "old"), (weights, "new")):
        folder.mkdir()
        (folder / "model.safetensors").write_text(text)
    with pytest.raises(FileNotFoundError):  # nothing to copy
        publish_folder(tmp_path / "missing", final, "card")
    assert [p.read_text() for p in final.iterdir()] == ["old"]

    rename = Path.rename
    monkeypatch.setattr(
        Path,
        "rename",
        lambda self, to: (
            (_ for _ in ()).throw(OSError("injected"))
            if self.name.endswith(".staging")
            else rename(self, to)
        ),
    )
    with pytest.raises(OSError, match="injected"):  # the old folder moved aside, the new refused
        publish_folder(weights, final, "card")
    assert [p.read_text() for p in final.iterdir()] == ["old"]

    monkeypatch.setattr(Path, "rename", rename)
    publish_folder(weights, final, "card")
    assert {p.name: p.read_text() for p in final.iterdir()} == {
        "model.safetensors": "new",
        CARD_FILE: "card",
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final", "trained"]  # nothing left


def test_the_card_names_the_commit_of_what_ran_not_the_one_that_records_results(tmp_path):
    def git(*args):
        return subprocess.run(
            ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    git("init", "-q")
    for source in ("params.yaml", "rlvr/pipeline/training.py", "data/train.jsonl"):
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / source).write_text("0\n")
    git("add", "-A")
    git("commit", "-qm", "sources")
    sources = git("rev-parse", "HEAD").strip()
    for output in ("dvc.lock", "reports/eval/summary.json", "metrics/eval.json", "README.md"):
        (tmp_path / output).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / output).write_text("{}")
    git("add", "-A")
    git("commit", "-qm", "results and docs")
    lock = {
        "train": {
            "deps": [
                {"path": "rlvr/pipeline/training.py"},
                {"path": "data/train.jsonl"},
                {"path": "reports/smoke/checks.json"},
            ],
            "outs": [{"path": "reports/eval/summary.json"}],
        },
        "smoke": {
            "deps": [{"path": "rlvr/pipeline/training.py"}],
            "outs": [{"path": "reports/smoke/checks.json"}],
        },
    }
    assert sources_state(lock, cwd=tmp_path) == {"commit": sources, "changed": []}
    assert sources != git("rev-parse", "HEAD").strip()
    (tmp_path / "rlvr/pipeline/training.py").write_text("1\n")
    (tmp_path / "README.md").write_text("docs\n")
    (tmp_path / "reports/smoke/checks.json").parent.mkdir(parents=True)
    (tmp_path / "reports/smoke/checks.json").write_text("{}")  # an output, though a dep
    git("add", "reports/smoke/checks.json")
    assert sources_state(lock, cwd=tmp_path) == {
        "commit": sources,
        "changed": ["rlvr/pipeline/training.py"],
    }
    git("commit", "-qam", "a code change")
    assert sources_state(lock, cwd=tmp_path) == {
        "commit": git("rev-parse", "HEAD").strip(),
        "changed": [],
    }
