"""model.init: local_llm: a reduced Qwen3 with a locally trained byte-level BPE tokenizer and a
ChatML chat template, saved as an ordinary Hugging Face folder and loaded like a hub model."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rlvr.data.rows import Row, read_rows
from rlvr.data.tasks.countdown import CountdownSpec, generate_rows
from rlvr.params.config import ParamsError, parse_params
from rlvr.params.training_params import LocalLLMParams
from rlvr.policy.local_llm import (
    ENDOFTEXT,
    IM_END,
    IM_START,
    build_local_llm,
    build_local_llm_model,
    train_bpe_tokenizer,
)

ROOT = Path(__file__).resolve().parents[1]
SIZE = LocalLLMParams()  # the defaults of params.yaml model.local_llm


def _instruct_rows() -> list[Row]:
    train, _ = generate_rows(64, 64, CountdownSpec(style="instruct"), seed=0)
    return [Row(r["id"], r["prompt"], r["verifier"]) for r in train]


@pytest.fixture(scope="module")
def rows():
    return _instruct_rows()


@pytest.fixture(scope="module")
def built(rows):
    return build_local_llm(rows, SIZE, seed=0)


@pytest.fixture(scope="module")
def saved(rows, tmp_path_factory):
    """models/base as prepare_model writes it for model.init: local_llm, and its summary."""
    from rlvr.policy.models import prepare_base

    out = tmp_path_factory.mktemp("local_llm") / "base"
    params = parse_params({"model": {"init": "local_llm"}})
    return out, prepare_base(params.model, rows, 0, out)


def test_the_tokenizer_round_trips_the_task_text(built, rows):
    _, tokenizer = built
    held_out = [
        r["prompt"] for r in generate_rows(64, 64, CountdownSpec(style="instruct"), seed=0)[1]
    ]
    compact = [row.prompt for row in read_rows(ROOT / "data" / "grpo_train.jsonl")]
    for text in [row.prompt for row in rows] + held_out + compact + ["<answer>(3+5)*2</answer>"]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
    # BPE learned the task's words: a prompt takes far fewer tokens than it has bytes
    assert len(tokenizer(rows[0].prompt)["input_ids"]) < len(rows[0].prompt.encode()) / 2


@given(st.text())
@example("用 3 和 5 算出 15: 😀")  # Chinese and an emoji: bytes the task text never held
def test_the_tokenizer_round_trips_any_unicode(built, text):
    _, tokenizer = built
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_the_chat_template_renders_chatml_with_a_generation_prompt(built):
    _, tokenizer = built
    user = [{"role": "user", "content": "2 + 3?"}]
    assert tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>user\n2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    )
    turns = [
        {"role": "system", "content": "Be brief."},
        *user,
        {"role": "assistant", "content": "5"},
    ]
    assert tokenizer.apply_chat_template(turns, tokenize=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2 + 3?<|im_end|>\n"
        "<|im_start|>assistant\n5<|im_end|>\n"
    )
    # each special token is one token, never split into bytes
    ids = tokenizer.apply_chat_template(user, add_generation_prompt=True, return_dict=True)[
        "input_ids"
    ]
    assert ids[0] == tokenizer.convert_tokens_to_ids(IM_START)
    assert tokenizer.convert_tokens_to_ids(IM_END) in ids


def test_an_assistant_turn_ends_with_the_token_generation_stops_on(built):
    """As Qwen3 instruct: <|im_end|> is eos (TRL and evaluation stop on it), <|endoftext|> pads;
    generation_config stops on either, and evaluation stops where TRL's rollouts do."""
    from rlvr.policy.sampling import stop_token_ids

    model, tokenizer = built
    im_end, endoftext = tokenizer.convert_tokens_to_ids([IM_END, ENDOFTEXT])
    assert (tokenizer.eos_token, tokenizer.pad_token) == (IM_END, ENDOFTEXT)
    assert model.generation_config.eos_token_id == [im_end, endoftext]
    assert model.generation_config.pad_token_id == endoftext == model.config.pad_token_id
    assert stop_token_ids(model, tokenizer) == [im_end, endoftext]
    assert tokenizer.bos_token is None  # nothing is prepended to a prompt
    assert tokenizer("2+3")["input_ids"] == tokenizer("2+3", add_special_tokens=False)["input_ids"]


def test_the_model_has_the_params_shape_padded_to_vocab_size(built):
    model, tokenizer = built
    config = model.config
    assert type(model).__name__ == "Qwen3ForCausalLM"
    for name in (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
    ):
        assert getattr(config, name) == getattr(SIZE, name), name
    assert len(tokenizer) <= SIZE.vocab_size  # the tokenizer, trained to at most vocab_size
    assert model.get_input_embeddings().weight.shape == (SIZE.vocab_size, SIZE.hidden_size)
    assert model.lm_head.weight is model.get_input_embeddings().weight  # tied, as small Qwen3s
    h, i, q, kv = (
        SIZE.hidden_size,
        SIZE.intermediate_size,
        SIZE.num_attention_heads * SIZE.head_dim,
        SIZE.num_key_value_heads * SIZE.head_dim,
    )
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + 2 * SIZE.head_dim
    expected = SIZE.vocab_size * h + SIZE.num_hidden_layers * per_layer + h
    assert sum(p.numel() for p in model.parameters()) == expected
    assert expected < 3_000_000  # trains at an acceptable speed on 2 CPU cores


def test_a_tokenizer_larger_than_the_model_is_refused(built):
    _, tokenizer = built
    with pytest.raises(ValueError, match="more than the model's vocab_size 300"):
        build_local_llm_model(tokenizer, LocalLLMParams(vocab_size=300))


def test_few_texts_give_a_small_tokenizer_and_a_padded_model():
    tokenizer = train_bpe_tokenizer(["7 + 5", "7 * 5"], 400)
    assert 256 + 3 <= len(tokenizer) < 300
    assert tokenizer.convert_ids_to_tokens(list(range(len(tokenizer) - 3, len(tokenizer)))) == [
        ENDOFTEXT,
        IM_START,
        IM_END,
    ]  # after the learned tokens, in Qwen's order


_PREPARE = """
import sys
from rlvr.params.config import parse_params
from rlvr.policy.models import prepare_base
from tests.test_local_llm import _instruct_rows
prepare_base(parse_params({"model": {"init": "local_llm"}}).model, _instruct_rows(), 0, sys.argv[1])
"""


def test_the_same_rows_and_seed_give_the_same_folder_bytes(saved, tmp_path):
    """Another process (another hash seed) writes the same tokenizer and weights, byte for byte."""
    base, _ = saved
    subprocess.run(
        [sys.executable, "-c", _PREPARE, str(tmp_path / "again")],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONHASHSEED": "123"},
    )
    files = sorted(p.name for p in base.iterdir())
    assert files == sorted(p.name for p in (tmp_path / "again").iterdir())
    assert {"tokenizer.json", "model.safetensors", "chat_template.jinja"} <= set(files)
    for name in files:
        assert (base / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name


def test_the_saved_folder_loads_like_a_hub_model(saved, built):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.policy.models import describe_base, load_policy, policy_path

    base, summary = saved
    model, tokenizer = built
    assert policy_path(base) == str(base)  # a folder, as a downloaded hub model is
    loaded = AutoModelForCausalLM.from_pretrained(base)
    loaded_tokenizer = AutoTokenizer.from_pretrained(base)
    assert (loaded_tokenizer.eos_token, loaded_tokenizer.pad_token) == (IM_END, ENDOFTEXT)
    assert loaded_tokenizer.chat_template == tokenizer.chat_template
    assert loaded.generation_config.eos_token_id == model.generation_config.eos_token_id
    text = "<|im_start|>user\nUsing the numbers 3 and 5<|im_end|>\n"
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    assert ids.tolist() == loaded_tokenizer(text, return_tensors="pt")["input_ids"].tolist()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert type(load_policy(base)[0]).__name__ == "Qwen3ForCausalLM"
    assert summary == {
        "init": "local_llm",
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokenizer_vocab_size": len(tokenizer),
        "vocab_size": SIZE.vocab_size,
        "warm_start": None,
        "seconds": summary["seconds"],
    }
    assert "no warm start" in describe_base(summary)
    assert json.loads((base / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]


def test_chat_template_variables_reach_evaluation_and_trl_alike(built, tmp_path):
    """model.chat_template_kwargs (Qwen3's enable_thinking): evaluation renders a prompt with
    them, and TRL, given the GRPOConfig the pipeline builds, renders the same text."""
    import copy

    from trl.data_utils import apply_chat_template

    from rlvr.grpo.config import grpo_config
    from rlvr.policy.sampling import prompt_template, render_prompt

    tokenizer = copy.deepcopy(built[1])
    # Qwen3's template closes an empty think block when enable_thinking is false
    tokenizer.chat_template += (
        "{% if add_generation_prompt and enable_thinking is defined and "
        "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    )
    params = parse_params(
        {"model": {"chat_template": True, "chat_template_kwargs": {"enable_thinking": False}}}
    )
    assert prompt_template(params.model) == {"enable_thinking": False}
    assert prompt_template(parse_params({}).model) is None
    prompt = "3 5 -> 15"
    ours = render_prompt(tokenizer, prompt, prompt_template(params.model))
    assert ours.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert render_prompt(tokenizer, prompt, {}).endswith("<|im_start|>assistant\n")
    assert render_prompt(tokenizer, prompt, None) == prompt
    config = grpo_config(
        params.train,
        output_dir=tmp_path,
        max_steps=1,
        seed=0,
        reward_weights=params.rewards.weights,
        chat_template_kwargs=params.model.chat_template_kwargs,
    )
    assert config.chat_template_kwargs == {"enable_thinking": False}
    trl_text = apply_chat_template(
        {"prompt": [{"role": "user", "content": prompt}]}, tokenizer, **config.chat_template_kwargs
    )["prompt"]
    assert trl_text == ours


def test_greedy_evaluation_runs_on_chat_prompts(built, rows):
    from rlvr.policy.sampling import SampleSettings, score_rows, summarize
    from rlvr.rewards.registry import build_reward_funcs

    model, tokenizer = built
    params = parse_params({})
    scored = score_rows(
        model,
        tokenizer,
        rows[:2],
        build_reward_funcs(params.rewards),
        [0.8, 0.2],
        SampleSettings(n=1, do_sample=False, max_new_tokens=6),
        template={},
    )
    assert scored[0].prompt_text.endswith("<|im_start|>assistant\n")
    assert all(1 <= n <= 6 for s in scored for n in s.lengths)
    assert math.isfinite(summarize(scored)["mean_reward"])


@pytest.mark.parametrize(
    "values,message",
    [
        (
            {"num_attention_heads": 4, "num_key_value_heads": 3},
            "model.local_llm.num_key_value_heads = 3: must divide num_attention_heads (4)",
        ),
        ({"head_dim": 33}, "model.local_llm.head_dim = 33: must be even"),
        ({"vocab_size": 256}, "model.local_llm.vocab_size = 256: must be >= 300"),
        ({"hidden_size": 0}, "model.local_llm.hidden_size = 0: must be >= 1"),
        ({"layers": 2}, "unknown key(s) ['layers'] in model.local_llm"),
    ],
)
def test_bad_local_llm_params_are_named(values, message):
    with pytest.raises(ParamsError) as error:
        parse_params({"model": {"init": "local_llm", "local_llm": values}})
    assert message in str(error.value)


def test_params_yaml_holds_the_local_llm_block_and_the_choice():
    from rlvr.params.config import load_params
    from rlvr.report.knobs import hyperparameter_table

    params = load_params(ROOT / "params.yaml")
    assert params.model.local_llm == LocalLLMParams()
    assert parse_params({"model": {"init": "local_llm"}}).model.init == "local_llm"
    params.model.init = "local_llm"
    rows = {name: why for name, _, why in hyperparameter_table(ROOT / "params.yaml", params)}
    assert rows["model.local_llm.vocab_size"] and rows["model.lora.r"]
    assert "model.tiny.hidden_size" not in rows and "model.warm_start.steps" not in rows
