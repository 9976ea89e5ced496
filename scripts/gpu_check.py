"""The Python half of scripts/gpu_check.sh (run it through that script): the check's params, the
stages run as `python -m stages.<name>` runs them, and the figures.

    gpu_check.py deps                       the wheels' pins import, and what they need is there
    gpu_check.py params MODE BASE OUT       BASE (params.yaml + profiles/gpu.yaml) sized for MODE
    gpu_check.py stage NAME MODE [JSON]     run stages/NAME.py; for smoke print the figures
    gpu_check.py budget MODE bounded|unbounded [JSON]   verified's sampling at 8x --cpu-full's budget
    gpu_check.py summary JSON               the --cpu-full figures: RSS, s/step, adapter size

MODE is `cuda` (Qwen3-0.6B's shape, bf16 on the GPU), `cpu` (the --cpu-dry-run: tiny sizes,
fp32, 2 steps) or `cpu_full` (the --cpu-full run: Qwen3-0.6B's shape in fp32 on the CPU, G = 2,
2 prompts, 2 smoke and 2 train steps, then verified, evaluate, rft, recipe, report and publish,
and verified's sampling again at 8 times its budget, in bounded calls and not). The figures come from
what TRL already logs every step (step_time, num_tokens,
completions/mean_length) and torch.cuda's peak-memory counters: nothing in the library knows it
is being measured.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import runpy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())  # the project copy the check runs in

SMOKE_STEPS = {"cuda": 20, "cpu": 2, "cpu_full": 2}
CHECK_ROWS = {"cuda": 16, "cpu": 16, "cpu_full": 2}  # the step-0 baseline samples each G times
# runtime.sampling_chunk_tokens at --cpu-full: ~7 sequences a call (KV cache in fp32 at this
# shape: 229 KiB a token, 115 MiB a call), so that its sampling splits
CPU_FULL_CHUNK_TOKENS = 512
# verified's sampling again at 8 times the check's budget (4 a prompt), bounded and not: a real
# run's 300-800 a prompt takes hours at this shape on 2 cores; 32 is enough to show the peak
# does not grow with the budget under the bound (unbounded, it holds 64 sequences in one call).
BUDGET_SAMPLES_PER_PROMPT = 32
UNBOUNDED = 10**9  # a chunk bound that never binds
# Qwen3-0.6B's config.json, with model.local_llm's names (max_position_embeddings as Qwen's)
QWEN3_0_6B = {
    "vocab_size": 151936,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
}
TINY = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "max_position_embeddings": 512,
}
# What the GPU machine does not have and the check does not bring: the dry run makes them
# unimportable, so it proves the stages run without them.
ABSENT_ON_GPU = ("dvc", "dvclive", "prefect", "great_expectations", "hydra", "omegaconf")


def check_overrides(mode: str, vllm: bool) -> dict:
    """params.yaml keys (dotted) -> values the check sets on top of the GPU profile."""
    overrides = {
        "model.init": "local_llm",  # Qwen3's architecture, random init, BPE tokenizer
        "data.train_rows": CHECK_ROWS[mode],
        "smoke.max_steps": SMOKE_STEPS[mode],
        "smoke.min_spread_share": 0.0,  # a random-init model earns no reward spread
        "train.grpo.max_completion_length": {"cuda": 128, "cpu": 8, "cpu_full": 16}[mode],
        "train.grpo.use_vllm": vllm,  # the profile's choice where vllm is installed
    }
    if mode == "cuda":
        overrides.update({f"model.local_llm.{k}": v for k, v in QWEN3_0_6B.items()})
    elif mode == "cpu_full":  # the real size, the whole pipeline, as little work as shows it
        overrides.update({f"model.local_llm.{k}": v for k, v in QWEN3_0_6B.items()})
        overrides.update(
            {
                "train.grpo.use_cpu": True,
                "train.grpo.bf16": False,
                "train.grpo.use_vllm": False,
                "train.grpo.extra.model_init_kwargs": {"dtype": "float32"},
                "train.grpo.num_generations": 2,
                "train.grpo.per_device_train_batch_size": 4,
                "train.max_steps": 2,
                "train.save_steps": 2,
                "train.eval_steps": 2,
                "train.log_every": 1,
                "evaluate.samples": 2,
                "evaluate.n_resamples": 200,
                # small enough that verified's calls split (8 sequences of ~70 tokens)
                "runtime.sampling_chunk_tokens": CPU_FULL_CHUNK_TOKENS,
                # one RL seed (the copy keeps the committed reports: recipe would pool the
                # committed seeds 1-2 with the check's seed 0) and its RFT baseline
                "audit.seeds": [0],
                "audit.baseline": "rft",
            }
        )
    else:
        overrides.update({f"model.local_llm.{k}": v for k, v in TINY.items()})
        overrides.update(
            {
                "train.grpo.use_cpu": True,
                "train.grpo.bf16": False,
                "train.grpo.per_device_train_batch_size": 16,
                "train.grpo.extra.model_init_kwargs": {"dtype": "float32"},
            }
        )
    return overrides


def set_param(raw: dict, key: str, value) -> None:
    """Set a dotted params key in a loaded params.yaml; the key must exist (as with DVC's -S),
    except inside train.grpo.extra, which takes any GRPOConfig field."""
    *parents, last = key.split(".")
    node = raw
    for i, part in enumerate(parents):
        if part not in node:
            raise KeyError(f"{'.'.join(parents[: i + 1])} is not in params.yaml")
        node = node[part]
    if last not in node and not key.startswith("train.grpo.extra."):
        raise KeyError(f"{key} is not in params.yaml")
    node[last] = value


def write_params(mode: str, base: str, out: str) -> None:
    """OUT = BASE with the check's overrides, checked like check_params checks params.yaml (TRL's
    GRPOConfig too: on the GPU machine this is the part that needs CUDA)."""
    import importlib.util

    from ruamel.yaml import YAML

    from rlvr.params.config import load_params
    from rlvr.pipeline.checks import check_run_params

    yaml = YAML()  # round trip: the profile's comments stay
    raw = yaml.load(Path(base).read_text(encoding="utf-8"))
    vllm = importlib.util.find_spec("vllm") is not None
    for key, value in check_overrides(mode, vllm).items():
        set_param(raw, key, value)
    with open(out, "w", encoding="utf-8") as handle:
        yaml.dump(raw, handle)
    params = load_params(out)
    check_run_params(params)
    grpo, size = params.train.grpo, params.model.local_llm
    print(
        f"gpu_check: params: {params.model.init} {size.num_hidden_layers} layers x "
        f"{size.hidden_size} (vocab {size.vocab_size}), LoRA "
        f"{'r' + str(params.model.lora.r) if params.model.lora.enabled else 'off'}, "
        f"{'bf16' if grpo.bf16 else 'fp32'} on {'cpu' if grpo.use_cpu else 'cuda'}, generation "
        f"{'vLLM ' + grpo.extra.get('vllm_mode', '') if grpo.use_vllm else 'transformers (no vllm)'}"
        f", {params.smoke.max_steps} steps of {grpo.per_device_train_batch_size} completions "
        f"(G={grpo.num_generations}) of <= {grpo.max_completion_length} tokens; checked"
    )


def check_wheels(requirements: str = "scripts/gpu_wheels.txt") -> int:
    """Every package of scripts/gpu_wheels.txt imports at requirements.lock's version, and every
    dependency it declares is there at a version it accepts; one line per problem."""
    from importlib import metadata

    from packaging.requirements import Requirement

    from rlvr.core.lock import canonical, pins

    lock = pins("requirements.lock")
    names = [line.split("#")[0].strip() for line in Path(requirements).read_text().splitlines()]
    problems = []
    for name in filter(None, names):
        version = metadata.version(name)
        wanted = lock[canonical(name)]
        if version != wanted:
            problems.append(f"{name} is {version}, not requirements.lock's {wanted}")
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                continue
            try:
                found = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                problems.append(f"{name} needs {requirement}, which is not installed")
                continue
            if not requirement.specifier.contains(found, prereleases=True):
                problems.append(f"{name} needs {requirement}, found {found}")
    for problem in problems:
        print(f"gpu_check: {problem}: add it to scripts/gpu_wheels.txt", file=sys.stderr)
    return 1 if problems else 0


def throughput(history: list[dict], completions_per_step: int) -> dict:
    """steps/s and tokens/s from TRL's per-step log lines (`loss` ones): step_time (s),
    num_tokens (prompt + completion tokens so far), completions/mean_length.

    >>> f = throughput([{"loss": 0, "step_time": 2.0, "num_tokens": 300, "completions/mean_length": 10},
    ...                 {"loss": 0, "step_time": 1.0, "num_tokens": 600, "completions/mean_length": 20}], 10)
    >>> f["steps"], f["seconds"], f["steps_per_s"], f["steady_steps_per_s"]
    (2, 3.0, 0.667, 1.0)
    >>> f["completion_tokens_per_s"], f["tokens_per_s"]
    (100.0, 200.0)
    """
    from rlvr.core.metric_keys import COMPLETION_LENGTH, LOSS, NUM_TOKENS, STEP_TIME

    steps = [entry for entry in history if LOSS in entry]
    times = [entry[STEP_TIME] for entry in steps]
    seconds = sum(times)
    completion_tokens = sum(e[COMPLETION_LENGTH] * completions_per_step for e in steps)
    return {
        "steps": len(steps),
        "seconds": round(seconds, 3),
        "steps_per_s": round(len(steps) / seconds, 3),
        # without the first step (CUDA context, kernel autotuning, allocator warm-up)
        "steady_steps_per_s": round((len(steps) - 1) / sum(times[1:]), 3)
        if len(steps) > 1
        else None,
        "median_step_s": round(statistics.median(times), 3),
        "completion_tokens_per_step": round(completion_tokens / len(steps), 1),
        "completion_tokens_per_s": round(completion_tokens / seconds, 1),
        "tokens_per_s": round(steps[-1][NUM_TOKENS] / seconds, 1),
    }


# one per RL seed in dvc.yaml (rlvr.pipeline.stage.run_stage)
SEEDED_STAGES = ("verified", "train", "evaluate", "rft")


def run_stage(name: str, mode: str, report: str | None) -> int:
    """Run stages/<name>.py as `python -m stages.<name>` does; for smoke, keep its trainer (the
    one run_grpo returns in rlvr.pipeline.smoke, as in rlvr.pipeline.training for train) and
    print the figures."""
    if mode == "cpu":  # (cpu_full runs train, whose curves are DVCLive's: nothing made absent)
        for absent in ABSENT_ON_GPU:
            sys.modules[absent] = None  # `import dvc` fails, find_spec("dvc") is None
    import torch

    import rlvr.pipeline.smoke
    import rlvr.pipeline.training
    from rlvr.params.config import load_params

    marks, kept = {"start": time.perf_counter()}, {}
    run_grpo = rlvr.pipeline.training.run_grpo

    def keeping_run_grpo(*args, **kwargs):
        marks["trainer"] = time.perf_counter()  # the model is loaded and step 0 measured
        if torch.cuda.is_available() and mode == "cuda":  # the peak of the GRPO run alone
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        kept["trainer"] = run_grpo(*args, **kwargs)
        marks["trained"] = time.perf_counter()
        return kept["trainer"]

    rlvr.pipeline.training.run_grpo = keeping_run_grpo  # train's run
    rlvr.pipeline.smoke.run_grpo = keeping_run_grpo  # smoke's
    cuda = torch.cuda.is_available() and mode == "cuda"
    # a per-seed stage (train, evaluate) runs the first seed of audit.seeds, as train@<seed> does
    seeded = [str(load_params("params.yaml").audit.seeds[0])] if name in SEEDED_STAGES else []
    sys.argv = [f"stages/{name}.py", *seeded]
    try:
        runpy.run_module(f"stages.{name}", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    seconds = time.perf_counter() - marks["start"]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB -> GiB
    print(f"gpu_check: {name}: exit {code} in {seconds:.1f} s, peak RSS {rss:.2f} GiB")
    stage = {"exit_code": code, "seconds": round(seconds, 1), "peak_rss_gib": round(rss, 2)}
    if name == "train" and "trained" in marks:
        stage.update(train_figures(kept["trainer"]))
        print(
            f"gpu_check: train: {stage['steps']} steps, {stage['median_step_s']} s per step "
            f"(median), {stage['weights']} {stage['weights_mib']} MiB in {stage['folder']}"
        )
    if report:
        record(report, name, stage)
    if name != "smoke":
        return code
    if "trained" not in marks:
        print(
            f"gpu_check: smoke stopped before its GRPO run finished (exit {code})", file=sys.stderr
        )
        return code or 1
    trainer = kept["trainer"]
    args = trainer.args
    per_step = (
        args.per_device_train_batch_size
        * args.gradient_accumulation_steps
        * trainer.accelerator.num_processes
        // args.num_iterations
    )
    figures = throughput(trainer.state.log_history, per_step)
    figures.update(
        exit_code=code,
        stage_seconds=round(seconds, 1),
        load_and_step0_baseline_seconds=round(marks["trainer"] - marks["start"], 1),
        grpo_run_seconds=round(marks["trained"] - marks["trainer"], 1),
        device=torch.cuda.get_device_name() if cuda else "cpu",
        peak_gpu_memory_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2)
        if cuda
        else None,
        peak_gpu_memory_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2)
        if cuda
        else None,
        versions={
            m: sys.modules[m].__version__
            for m in ("torch", "transformers", "trl", "peft")
            if m in sys.modules
        },
        python=sys.version.split()[0],
    )
    memory = (
        f"{figures['peak_gpu_memory_allocated_gib']} GiB allocated, "
        f"{figures['peak_gpu_memory_reserved_gib']} GiB reserved"
        if cuda
        else "n/a (cpu dry run)"
        if mode == "cpu"
        else "n/a (CPU: see the peak RSS)"
    )
    print(
        f"gpu_check: {figures['steps']} steps in {figures['seconds']} s: "
        f"{figures['steps_per_s']} steps/s ({figures['steady_steps_per_s']} without the first)"
    )
    print(
        f"gpu_check: tokens/s: {figures['completion_tokens_per_s']} completion, "
        f"{figures['tokens_per_s']} prompt+completion "
        f"({figures['completion_tokens_per_step']} completion tokens per step)"
    )
    print(f"gpu_check: peak GPU memory of the GRPO run: {memory}")
    print(
        f"gpu_check: smoke stage {figures['stage_seconds']} s: model load + step-0 baseline "
        f"{figures['load_and_step0_baseline_seconds']} s, GRPO run (trainer set-up included) "
        f"{figures['grpo_run_seconds']} s"
    )
    if report:
        record(report, None, figures)
    return code


def sample_budget(mode: str, bounded: bool, report: str | None) -> int:
    """Stage verified's sampling (rlvr.policy.verified.sample_base) of the check's base at
    BUDGET_SAMPLES_PER_PROMPT completions a prompt, in calls of at most
    runtime.sampling_chunk_tokens (`bounded`) or in today's one-call-per-batch grouping: its time
    and peak RSS, recorded as stage verified_budget[_unbounded]."""
    from dataclasses import replace

    from rlvr.params.config import load_params
    from rlvr.policy.verified import sample_base

    params = load_params("params.yaml")
    grpo = params.train.grpo
    per_step = (
        grpo.per_device_train_batch_size * grpo.gradient_accumulation_steps * params.train.processes
    ) // grpo.num_iterations
    steps = -(-BUDGET_SAMPLES_PER_PROMPT * CHECK_ROWS[mode] // per_step)  # the budget's run length
    chunk = params.runtime.sampling_chunk_tokens if bounded else UNBOUNDED
    sized = replace(
        params,
        train=replace(params.train, max_steps=steps),
        runtime=replace(params.runtime, sampling_chunk_tokens=chunk),
    )
    start = time.perf_counter()
    budget, scored = sample_base(sized, 0)
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB -> GiB
    drawn = sum(len(row.completions) for row in scored)
    name = "verified_budget" if bounded else "verified_budget_unbounded"
    calls = f"calls of <= {chunk} tokens" if bounded else "one call per prompt batch (no bound)"
    print(
        f"gpu_check: {name}: {drawn} completions ({budget.samples_per_prompt} a prompt) in "
        f"{seconds:.1f} s, {calls}, peak RSS {rss:.2f} GiB"
    )
    stage = {
        "exit_code": 0 if drawn == budget.sampled else 1,
        "seconds": round(seconds, 1),
        "peak_rss_gib": round(rss, 2),
        "completions": drawn,
        "chunk_tokens": chunk if bounded else None,
    }
    if report:
        record(report, name, stage)
    return stage["exit_code"]


def train_figures(trainer) -> dict:
    """Seconds per train step (TRL's step_time) and the size of what train saved."""
    from rlvr.core.metric_keys import LOSS, STEP_TIME
    from rlvr.core.seeds import seed_paths
    from rlvr.grpo.checkpoints import WEIGHT_FILES
    from rlvr.params.config import load_params

    times = [e[STEP_TIME] for e in trainer.state.log_history if LOSS in e]
    params = load_params("params.yaml")
    # the stage trained the first seed of audit.seeds (the check runs one: rlvr.core.seeds)
    folder = Path(seed_paths(params.paths, params.audit.seeds[0]).trained_model)
    weights = next(folder / name for name in WEIGHT_FILES if (folder / name).exists())
    return {
        "steps": len(times),
        "median_step_s": round(statistics.median(times), 2),
        "folder": str(folder),
        "weights": weights.name,
        "weights_mib": round(weights.stat().st_size / 2**20, 1),
    }


def record(report: str, stage: str | None, figures: dict) -> None:
    """Add figures to the check's JSON: a stage's under stages/<name>, the smoke run's on top."""
    path = Path(report)
    found = json.loads(path.read_text()) if path.exists() else {}
    if stage:
        found.setdefault("stages", {})[stage] = figures
    else:
        found.update(figures)
    path.write_text(json.dumps(found, indent=2) + "\n")


def summary(report: str) -> int:
    """The --cpu-full run's figures in four lines, from the check's JSON."""
    figures = json.loads(Path(report).read_text())
    stages, train = figures["stages"], figures["stages"]["train"]
    print(
        "gpu_check: peak RSS per stage, GiB: "
        + ", ".join(f"{name} {stage['peak_rss_gib']}" for name, stage in stages.items())
    )
    print(
        "gpu_check: peak RSS against train's: "
        + ", ".join(
            f"{name} {stage['peak_rss_gib'] / train['peak_rss_gib']:.2f}x"
            for name, stage in stages.items()
            if name != "train"
        )
    )
    print(
        f"gpu_check: seconds per step (median): smoke {figures['median_step_s']}, train "
        f"{train['median_step_s']}"
    )
    print(f"gpu_check: what train saved: {train['weights']} {train['weights_mib']} MiB")
    return 0


def main(argv: list[str]) -> int:
    command, *rest = argv
    if command == "deps":
        return check_wheels(*rest)
    if command == "params":
        from rlvr.params.config import ParamsError

        try:
            write_params(*rest)
        except (ParamsError, KeyError) as error:
            print(f"gpu_check: the check's params are bad: {error}", file=sys.stderr)
            return 1
        return 0
    if command == "summary":
        return summary(*rest)
    if command == "budget":
        mode, bound, *report = rest
        return sample_budget(mode, bound == "bounded", report[0] if report else None)
    if command == "stage":
        name, mode, *report = rest
        return run_stage(name, mode, report[0] if report else None)
    raise SystemExit(f"gpu_check.py: unknown command {command!r}; see its docstring")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
