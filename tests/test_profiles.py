"""The GPU profile (profiles/gpu.yaml) as DVC applies it, and the GPU check's params
(scripts/gpu_check.py) on top of it: every params rule holds. The one check that cannot pass on
this machine is named: TRL's GRPOConfig (transformers' TrainingArguments) refuses bf16 without a
CUDA device; everything else it and peft's LoraConfig check runs here."""

import importlib.util
import shutil

import pytest
from ruamel.yaml import YAML

from rlvr.core.lock import canonical, pins
from rlvr.params.config import ParamsError, load_params, read_params_file
from rlvr.params.profiles import apply_profile, read_profile
from rlvr.pipeline.checks import check_run_params
from rlvr.rewards.registry import score_correctness
from rlvr.rewards.verifiers import format_reward
from tests.helpers import ROOT

PROFILE = ROOT / "profiles/gpu.yaml"


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts/gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _leaves(node, prefix=""):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, node


@pytest.fixture
def gpu_params(tmp_path):
    """(Params, path) of params.yaml with the GPU profile applied by rlvr.params.profiles."""
    out = tmp_path / "gpu" / "params.yaml"
    return apply_profile(PROFILE, ROOT / "params.yaml", out), out


def test_the_profile_is_what_dvc_exp_run_makes_of_params_yaml(gpu_params, tmp_path):
    from dvc.utils.hydra import apply_overrides

    params, path = gpu_params
    by_dvc = tmp_path / "params.yaml"
    shutil.copyfile(ROOT / "params.yaml", by_dvc)
    apply_overrides(by_dvc, read_profile(PROFILE))  # `dvc exp run -S ...`'s own code
    assert read_params_file(path) == read_params_file(by_dvc)

    default = dict(_leaves(read_params_file(ROOT / "params.yaml")))
    profiled = dict(_leaves(read_params_file(path)))
    changed = {
        key
        for key in default.keys() | profiled.keys()
        if default.get(key, "<absent>") != profiled.get(key, "<absent>")
    }
    named = {o.split("=", 1)[0].lstrip("+") for o in read_profile(PROFILE)}
    # nothing moves that the profile does not name (train.grpo.extra: {} gains its keys)
    assert all(
        any(
            key == name or key.startswith(name + ".") or name.startswith(key + ".")
            for name in named
        )
        for key in changed
    )
    assert "model.init" in changed

    model, grpo = params.model, params.train.grpo
    assert (model.init, model.name_or_path, model.chat_template, model.lora.enabled) == (
        "pretrained",
        "Qwen/Qwen3-0.6B",
        True,
        True,
    )
    assert model.chat_template_kwargs == {"enable_thinking": False}  # Qwen3 answers directly
    assert (grpo.use_cpu, grpo.bf16, grpo.use_vllm) == (False, True, True)
    assert grpo.extra == {
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": 0.3,
        "activation_checkpointing": True,
        "model_init_kwargs": {"dtype": "bfloat16"},
    }
    assert load_params(ROOT / "params.yaml").train.grpo.use_cpu  # the default stays the CPU one


def test_the_profile_keeps_every_rule_and_only_cuda_is_missing_here(gpu_params, monkeypatch):
    import torch
    import transformers.training_args

    params, _ = gpu_params
    if not torch.cuda.is_available():
        # the one check that needs the GPU: transformers refuses bf16 with use_cpu false
        with pytest.raises(ParamsError, match="doesn't support bf16/gpu"):
            check_run_params(params)
    # every other check of the GRPOConfig and the LoraConfig, as on a GPU with bf16
    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    check_run_params(params)


def test_the_profiles_format_reward_asks_for_answer_tags(gpu_params):
    pattern = gpu_params[0].rewards.format_pattern
    verifier = {"type": "countdown", "numbers": [3, 5], "target": 15}
    tagged = "<think>3 times 5</think>\n<answer>3*5</answer>"
    assert format_reward(tagged, pattern) == 1.0 and score_correctness(tagged, verifier) == 1.0
    assert format_reward("3*5", pattern) == 0.0
    assert format_reward("<answer>15</answer> and more", pattern) == 0.0


def test_a_bad_profile_or_override_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "params.yaml"
    with pytest.raises(ParamsError, match="DVC cannot apply it: Could not override 'train.nope'"):
        apply_profile(PROFILE, ROOT / "params.yaml", out, ["train.nope=1"])
    with pytest.raises(ParamsError, match="train.grpo.beta = -1.0: must be >= 0"):
        apply_profile(PROFILE, ROOT / "params.yaml", out, ["train.grpo.beta=-1"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("model.init: tiny\n")
    with pytest.raises(ParamsError, match="must be a list of `-S` overrides"):
        apply_profile(bad, ROOT / "params.yaml", out)
    assert list(tmp_path.iterdir()) == [bad]


@pytest.mark.parametrize("mode", ["cuda", "cpu", "cpu_full"])
def test_the_gpu_checks_params_keep_every_rule(gpu_params, tmp_path, mode, monkeypatch):
    import transformers.training_args

    gpu_check = _gpu_check()
    yaml = YAML()
    raw = yaml.load(gpu_params[1].read_text())
    for key, value in gpu_check.check_overrides(mode, vllm=False).items():
        gpu_check.set_param(raw, key, value)
    out = tmp_path / "check.yaml"
    yaml.dump(raw, out)
    params = load_params(out)
    size = params.model.local_llm
    assert params.model.init == "local_llm" and params.model.lora.enabled
    assert params.smoke.max_steps == gpu_check.SMOKE_STEPS[mode]
    if mode == "cuda":  # Qwen3-0.6B's shape, bf16 on the GPU
        assert (size.vocab_size, size.hidden_size, size.num_hidden_layers, size.head_dim) == (
            151936,
            1024,
            28,
            128,
        )
        assert params.train.grpo.bf16 and not params.train.grpo.use_cpu
        monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    elif mode == "cpu_full":  # --cpu-full: the real size in fp32 on the CPU, little work
        grpo = params.train.grpo
        assert (size.vocab_size, size.hidden_size, size.num_hidden_layers, size.head_dim) == (
            151936,
            1024,
            28,
            128,
        )
        assert params.model.lora.r == 16 and grpo.use_cpu and not grpo.bf16
        assert not grpo.use_vllm and grpo.extra["model_init_kwargs"] == {"dtype": "float32"}
        assert (
            grpo.num_generations,
            params.data.train_rows,
            params.train.max_steps,
            grpo.max_completion_length,
        ) == (2, 2, 2, 16)
        # one RL seed and its RFT baseline; sampling in bounded calls
        assert (params.audit.seeds, params.audit.baseline) == ([0], "rft")
        assert params.runtime.sampling_chunk_tokens == gpu_check.CPU_FULL_CHUNK_TOKENS
    else:
        assert params.train.grpo.use_cpu and not params.train.grpo.bf16
    check_run_params(params)
    with pytest.raises(KeyError, match="train.nope is not in params.yaml"):
        gpu_check.set_param(raw, "train.nope", 1)


def test_the_gpu_checks_figures_come_from_trls_log_lines():
    gpu_check = _gpu_check()
    history = [
        {"loss": 0.1, "step_time": 3.0, "num_tokens": 1000.0, "completions/mean_length": 100.0},
        {"loss": 0.2, "step_time": 1.0, "num_tokens": 2000.0, "completions/mean_length": 50.0},
        {"train_runtime": 4.5},
    ]
    figures = gpu_check.throughput(history, completions_per_step=8)
    assert figures["steps"] == 2 and figures["steps_per_s"] == 0.5
    assert figures["steady_steps_per_s"] == 1.0
    assert figures["completion_tokens_per_s"] == (100 + 50) * 8 / 4
    assert figures["tokens_per_s"] == 2000 / 4


def test_the_cpu_full_figures_are_printed_from_the_checks_json(tmp_path, capsys):
    gpu_check = _gpu_check()
    report = tmp_path / "gpu_check.json"
    gpu_check.record(str(report), "prepare_model", {"peak_rss_gib": 3.29})
    gpu_check.record(str(report), None, {"median_step_s": 12.6})  # the smoke run's figures
    gpu_check.record(
        str(report),
        "train",
        {
            "peak_rss_gib": 3.6,
            "median_step_s": 26.1,
            "weights": "adapter_model.safetensors",
            "weights_mib": 38.5,
        },
    )
    assert gpu_check.summary(str(report)) == 0
    assert capsys.readouterr().out.splitlines() == [
        "gpu_check: peak RSS per stage, GiB: prepare_model 3.29, train 3.6",
        "gpu_check: peak RSS against train's: prepare_model 0.91x",
        "gpu_check: seconds per step (median): smoke 12.6, train 26.1",
        "gpu_check: what train saved: adapter_model.safetensors 38.5 MiB",
    ]


def test_the_gpu_wheels_are_pinned_and_the_stages_need_nothing_else():
    gpu_check = _gpu_check()
    lock = pins(ROOT / "requirements.lock")
    names = [
        line.split("#")[0].strip()
        for line in (ROOT / "scripts/gpu_wheels.txt").read_text().splitlines()
    ]
    names = [name for name in names if name]
    assert {"trl", "datasets", "transformers", "ruamel.yaml"} <= set(names)
    assert {canonical(name) for name in names} <= set(lock)
    assert not set(names) & set(gpu_check.ABSENT_ON_GPU)
