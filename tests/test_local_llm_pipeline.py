"""The whole pipeline on model.init: local_llm, as a user with a hub instruct model runs it: chat
template on, instruct-style prompts, LoRA on, a small budget. It need not learn; every stage must
pass, the adapter must be what train saves and evaluate reloads, and the audit must be complete."""

import json
import math
import re
import subprocess
import sys
import time

import pytest

from rlvr.params.config import STAGES
from rlvr.report.metrics import eval_metrics
from tests.helpers import dvc, project_env, set_params

pytestmark = pytest.mark.slow

LOCAL_LLM_RUN = {
    "model": {
        "init": "local_llm",
        "chat_template": True,
        "lora": {"enabled": True, "r": 8, "alpha": 16},
    },
    # A random-init model is never correct: the length term (a completion that stops early is
    # penalised less) gives some groups reward spread, so the adapter really moves away from zero
    # and the evaluation of the final policy can be told from the base's.
    "rewards": {"funcs": ["correctness", "format", "length"], "weights": [1.0, 0.2, 1.0]},
    # still, most groups have no spread, which the smoke run would otherwise (rightly) stop on
    "smoke": {"max_steps": 3, "min_spread_share": 0.0},
    "train": {
        "max_steps": 6,
        "save_steps": 3,
        "eval_steps": 3,
        "log_every": 3,
        "grpo": {
            "num_generations": 4,
            "per_device_train_batch_size": 16,
            "max_completion_length": 16,
        },
    },
    "evaluate": {"samples": 2, "n_resamples": 500},
    "audit": {"seeds": [0]},  # one RL seed: the model and its audit, not the recipe's statistics
    "runtime": {"torch_threads": 1, "reproducible": False},
}
# The stages as DVC runs them: one train, evaluate and rft, seed 0's.
RUN = [
    f"{stage}@0" if stage in ("verified", "train", "evaluate", "rft") else stage for stage in STAGES
]


def _numbers(value, where=""):
    """(path, number) for every number in a JSON value."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{where}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield where, value


@pytest.mark.long
def test_the_pipeline_runs_a_local_llm_with_chat_prompts_and_lora(copy_run, monkeypatch):
    project = copy_run("local-llm")  # the cold run's: its reward gate holds, the rest reruns
    subprocess.run(
        [sys.executable, "data/make_countdown.py", "--style", "instruct"],
        cwd=project,
        env=project_env(project),
        check=True,
        capture_output=True,
    )
    set_params(project, LOCAL_LLM_RUN)  # instruct prompts fit data.max_prompt_chars (169 <= 200)

    started = time.perf_counter()
    output = dvc(project, "repro")
    seconds = time.perf_counter() - started

    timing = {
        stage: json.loads((project / f"reports/timing/{stage}.json").read_text()) for stage in RUN
    }
    assert all(t["exit_code"] == 0 for t in timing.values()), timing
    for stage in RUN:
        assert f"Running stage '{stage}'" in output or stage == "reward_tests", stage
    assert "Stage 'reward_tests' didn't change, skipping" in output  # (no dep of it changed)

    prepared = json.loads((project / "reports/prepare/summary.json").read_text())
    assert prepared["init"] == "local_llm" and prepared["warm_start"] is None
    assert prepared["tokenizer_vocab_size"] <= prepared["vocab_size"] == 512
    base = project / "models/base"
    assert {
        "model.safetensors",
        "tokenizer.json",
        "chat_template.jinja",
        "generation_config.json",
    } <= {p.name for p in base.iterdir()}

    # train saved the LoRA adapter (and the tokenizer), not a full model
    trained = project / "models/trained/seed-0"
    files = {p.name for p in trained.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json"} <= files
    assert "model.safetensors" not in files
    adapter = json.loads((trained / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "models/base" and adapter["r"] == 8
    _assert_the_adapter_loads_on_the_base_and_moved_it(project, monkeypatch)
    # publish: the same files with a model card, and peft loads the folder as it is
    final = project / "models/final"
    assert {p.name for p in final.iterdir()} == files | {"README.md"}
    card = (final / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: peft\n")
    assert "a LoRA adapter (r 8, alpha 16) on models/base" in card
    assert "| model.init | local\\_llm |" in card and "| model.lora | r 8, alpha 16," in card
    _assert_peft_loads_the_published_folder(project, monkeypatch)

    # evaluate reloaded base + adapter: every promised number is there and finite
    summary = json.loads((project / "reports/eval/seed-0/summary.json").read_text())
    recipe = json.loads((project / "metrics/recipe.json").read_text())
    assert recipe == {"seeds": [0], "verdict": "no recipe verdict"}  # one seed: no recipe claim
    metrics = eval_metrics(summary)  # the card's headline
    for split in ("train", "heldout"):
        for policy in ("step0", "final"):
            assert set(summary[split][policy]) >= {
                "greedy_success",
                "mean_reward",
                "sampled_success",
                "mean_length",
                "malformed_share",
                "rewards",
            }
        assert summary[split]["prompts"] == 64
    bad = [
        (path, v) for path, v in [*_numbers(summary), *_numbers(metrics)] if not math.isfinite(v)
    ]
    assert not bad, bad
    assert set(metrics) == {
        "verdict",
        "reward0",
        "reward",
        "ci_low",
        "ci_high",
        "greedy0",
        "greedy",
        "pass1_0",
        "pass1",
        "passn_0",
        "passn",
    }
    per_prompt = (project / "reports/eval/seed-0/per_prompt.jsonl").read_text().splitlines()
    assert len(per_prompt) == 3 * 64  # train, validation and test rows
    assert "evaluate@0: this seed's verdict on heldout:" in output
    # evaluate scored the trained adapter, not the base a second time
    assert max(summary[split]["kl_final_vs_step0"] for split in ("train", "heldout")) > 0

    # train logged every step, KL against the adapter-free base included
    history = [
        json.loads(line)
        for line in (project / "reports/train/seed-0/history.jsonl").read_text().splitlines()
    ]
    steps = [h for h in history if "loss" in h]
    assert len(steps) == 6 and all(
        math.isfinite(h["loss"]) and math.isfinite(h["kl"]) for h in steps
    )
    assert any(h["grad_norm"] > 0 for h in steps)

    markdown = (project / "reports/retrospective.md").read_text()
    html = (project / "reports/retrospective.html").read_text()
    for text in (
        "## 8. Provenance",
        r"| model.local\_llm.vocab\_size | `512` |",
        "| model.lora.enabled | `True` |",
        r"| model.chat\_template | `True` |",
        "model md5 models/trained/seed-0",
    ):
        assert text in markdown, text
    assert not re.search(r"\bnan\b", markdown)  # every figure was computed (Python's nan)
    assert "data:image/png;base64," in html and "Provenance" in html

    figures = {stage: timing[stage]["seconds"] for stage in RUN}
    print(
        f"\nlocal_llm pipeline: dvc repro {seconds:.1f} s; stages {figures}; "
        f"{prepared['parameters']:,} parameters; tokenizer {prepared['tokenizer_vocab_size']} "
        f"tokens (model vocab_size {prepared['vocab_size']})"
    )


def _assert_peft_loads_the_published_folder(project, monkeypatch):
    """models/final through peft's own loader, as its card says: the same outputs as what
    evaluate loaded from models/trained."""
    import torch
    from peft import AutoPeftModelForCausalLM

    from rlvr.policy.models import load_policy

    monkeypatch.chdir(project)  # the adapter names its base as models/base
    published = AutoPeftModelForCausalLM.from_pretrained("models/final")
    trained, _ = load_policy("models/trained/seed-0")
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(published(ids).logits, trained(ids).logits)


def _assert_the_adapter_loads_on_the_base_and_moved_it(project, monkeypatch):
    """models/trained loads as evaluate loads it (load_policy: the base, with the adapter on it),
    and its outputs differ from the base's: training changed the adapter."""
    import torch

    from rlvr.policy.models import load_policy

    monkeypatch.chdir(project)  # the adapter names its base as models/base, as a stage sees it
    final, tokenizer = load_policy("models/trained/seed-0")
    base, _ = load_policy("models/base")
    assert any("lora_B" in name for name, _ in final.named_parameters())
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "3 5 -> 15"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    with torch.no_grad():
        assert not torch.equal(final(ids).logits, base(ids).logits)
