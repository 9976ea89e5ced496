"""The typed view of params.yaml: one dataclass per section, every field with a help string.

params.yaml is read once, with ruamel.yaml (DVC writes `-S train.learning_rate=3e-5` as `3e-05`,
which PyYAML reads as a string), and each value is converted to its field's type here, so a stage
never sees a string where it expects a number. Errors name the section, the field and how to fix it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from rlvr.errors import PipelineError

PARAMS_FILE = Path("params.yaml")


class ParamsError(PipelineError, ValueError):
    """params.yaml holds a value the pipeline cannot use; the message says which and why."""


def _help(text: str, **kwargs: Any) -> Any:
    return field(metadata={"help": text}, **kwargs)


@dataclass
class DataParams:
    train_path: str = _help("JSONL file of training rows (id, prompt, verifier).",
                            default="data/grpo_train.jsonl")
    eval_path: str = _help("JSONL file of held-out rows; must share no prompt with train.",
                           default="data/grpo_eval.jsonl")
    train_rows: int = _help("Exact number of rows the training file must have.", default=64)
    max_prompt_chars: int = _help("Longest prompt allowed, in characters. TRL never truncates "
                                  "prompts, so length is bounded here, in the data.", default=200)

    def __post_init__(self) -> None:
        _require(self.train_rows > 0, "data.train_rows", self.train_rows, "must be a positive integer")
        _require(self.max_prompt_chars > 0, "data.max_prompt_chars", self.max_prompt_chars,
                 "must be a positive integer")


@dataclass
class LengthParams:
    lam: float = _help("Weight lambda of the Kimi k1.5 length term.", default=0.5)
    l_min: float = _help("Length (completion tokens) that earns the full bonus when correct.",
                         default=1.0)
    l_max: float = _help("Length at which a correct answer earns 0 and a wrong one the full "
                         "penalty.", default=12.0)
    l_target: float = _help("Wrong answers longer than this are penalised.", default=8.0)

    def __post_init__(self) -> None:
        _require(self.l_min < self.l_max, "rewards.length.l_min", self.l_min,
                 f"must be below l_max ({self.l_max})")
        _require(self.l_target < self.l_max, "rewards.length.l_target", self.l_target,
                 f"must be below l_max ({self.l_max})")


@dataclass
class RewardsParams:
    funcs: list[str] = _help("Reward functions by registry name (rlvr.rewards.REWARD_FUNCS).",
                             default_factory=lambda: ["correctness", "format"])
    weights: list[float] = _help("One weight per reward function, same order (TRL's "
                                 "reward_weights).", default_factory=lambda: [1.0, 0.2])
    format_pattern: str = _help("Regex the whole completion must match for the format reward.",
                                default=r"^\s*\(*\d+\)*(\s*[-+*/]\s*\(*\d+\)*)+\s*$")
    length: LengthParams = _help("The length term's parameters (used when 'length' is in funcs).",
                                 default_factory=LengthParams)

    def __post_init__(self) -> None:
        # Names are checked against the registry by rlvr.rewards.registry.check_reward_names
        # (every stage calls it first), so this module needs no reward code.
        _require(bool(self.funcs), "rewards.funcs", self.funcs, "must list at least one reward")
        _require(len(self.weights) == len(self.funcs), "rewards.weights", self.weights,
                 f"needs one weight per reward function ({len(self.funcs)})")
        _require(sum(self.weights) > 0, "rewards.weights", self.weights,
                 "must sum to more than 0 (the rewards are averaged with these weights)")


@dataclass
class GateParams:
    tests: list[str] = _help("Pytest paths of the offline reward tests that gate every stage "
                             "(test files and the doctests of the reward modules).",
                             default_factory=lambda: ["tests/rewards", "rlvr/rewards",
                                                      "rlvr/grpo_math.py"])

    def __post_init__(self) -> None:
        _require(bool(self.tests), "gate.tests", self.tests, "must list at least one test path")


@dataclass
class TinyModelParams:
    hidden_size: int = _help("Width of the tiny Qwen3 model.", default=128)
    intermediate_size: int = _help("MLP width.", default=512)
    num_hidden_layers: int = _help("Transformer blocks.", default=2)
    num_attention_heads: int = _help("Query heads (hidden_size must divide by it).", default=4)
    num_key_value_heads: int = _help("Key/value heads (grouped-query attention).", default=2)
    max_position_embeddings: int = _help("Longest prompt + completion, in characters.",
                                         default=256)

    def __post_init__(self) -> None:
        _require(self.hidden_size % self.num_attention_heads == 0, "model.tiny.hidden_size",
                 self.hidden_size, f"must be divisible by num_attention_heads "
                                   f"({self.num_attention_heads})")
        _require(self.num_attention_heads % self.num_key_value_heads == 0,
                 "model.tiny.num_key_value_heads", self.num_key_value_heads,
                 "must divide num_attention_heads")


@dataclass
class WarmStartParams:
    steps: int = _help("Supervised steps on well-formed expressions over each training row's "
                       "numbers, NOT checked against the target (0 = no warm start).", default=300)
    batch_size: int = _help("Examples per warm-start step.", default=128)
    learning_rate: float = _help("AdamW learning rate of the warm start.", default=3e-3)

    def __post_init__(self) -> None:
        _require(self.steps >= 0, "model.warm_start.steps", self.steps, "must be >= 0")
        _require(self.batch_size > 0, "model.warm_start.batch_size", self.batch_size,
                 "must be positive")


@dataclass
class LoraParams:
    enabled: bool = _help("Train LoRA adapters instead of all weights (large models).",
                          default=False)
    r: int = _help("LoRA rank.", default=16)
    alpha: int = _help("LoRA alpha (scale = alpha / r).", default=32)
    dropout: float = _help("Dropout on the LoRA path.", default=0.0)
    target_modules: str = _help("Which modules get adapters (peft's 'all-linear' or a name).",
                                default="all-linear")


@dataclass
class ModelParams:
    init: str = _help("'tiny': build the tiny Qwen3 default locally; 'pretrained': load "
                      "name_or_path.", default="tiny")
    name_or_path: str = _help("A local Hugging Face causal-LM folder, or a hub id where the "
                              "network allows (init: pretrained).", default="")
    chat_template: bool = _help("Wrap prompts as chat messages (instruct models); the tiny "
                                "default reads plain text.", default=False)
    tiny: TinyModelParams = _help("Sizes of the tiny default.", default_factory=TinyModelParams)
    warm_start: WarmStartParams = _help("Supervised warm start that turns the random tiny model "
                                        "into a reference policy that writes well-formed answers.",
                                        default_factory=WarmStartParams)
    lora: LoraParams = _help("LoRA adapters for GRPO (peft).", default_factory=LoraParams)

    def __post_init__(self) -> None:
        _require(self.init in ("tiny", "pretrained"), "model.init", self.init,
                 "must be 'tiny' or 'pretrained'")
        _require(self.init != "pretrained" or bool(self.name_or_path), "model.name_or_path",
                 self.name_or_path, "must name a model folder or hub id when model.init is "
                                    "'pretrained'")


@dataclass
class GRPOParams:
    """GRPOConfig fields, under TRL's own names (the rest keep TRL's defaults unless set in extra)."""
    learning_rate: float = _help("AdamW learning rate.", default=2e-4)
    beta: float = _help("KL coefficient against the reference (base) policy; 0 = no reference "
                        "model and no KL. With a schedule, the value it ends at.", default=0.05)
    num_generations: int = _help("G: completions sampled per prompt (one group).", default=8)
    per_device_train_batch_size: int = _help("Completions per step (prompts per step x G); "
                                             "must be divisible by num_generations.", default=128)
    gradient_accumulation_steps: int = _help("Micro-batches per optimizer step.", default=1)
    max_completion_length: int = _help("Longest completion, in tokens.", default=8)
    temperature: float = _help("Sampling temperature of the rollouts.", default=1.0)
    top_p: float = _help("Nucleus sampling of the rollouts.", default=1.0)
    loss_type: str = _help("TRL loss aggregation: grpo, dr_grpo, dapo, bnpo, ...", default="dapo")
    scale_rewards: str = _help("Advantage scaling: group (divide by the group std), batch, or "
                               "none.", default="group")
    epsilon: float = _help("PPO clip range of the importance ratio.", default=0.2)
    num_iterations: int = _help("Updates per generated batch (mu in the GRPO paper).", default=1)
    max_grad_norm: float = _help("Gradient clipping.", default=1.0)
    lr_scheduler_type: str = _help("Learning-rate schedule (transformers names).",
                                   default="constant")
    use_cpu: bool = _help("Train on CPU (the default machine has no GPU).", default=True)
    bf16: bool = _help("bfloat16 mixed precision (GPU only).", default=False)
    use_vllm: bool = _help("Generate rollouts with vLLM (GPU only).", default=False)
    extra: dict = _help("Any other GRPOConfig field, by TRL's name (e.g. vllm_mode: colocate).",
                        default_factory=dict)

    def __post_init__(self) -> None:
        _require(self.num_generations >= 2, "train.grpo.num_generations", self.num_generations,
                 "must be at least 2 (a group of one has no relative advantage)")
        _require(self.per_device_train_batch_size % self.num_generations == 0,
                 "train.grpo.per_device_train_batch_size", self.per_device_train_batch_size,
                 f"must be divisible by num_generations ({self.num_generations})")
        _require(self.beta >= 0, "train.grpo.beta", self.beta, "must be >= 0")
        _require(self.scale_rewards in ("group", "batch", "none"), "train.grpo.scale_rewards",
                 self.scale_rewards, "must be group, batch or none")
        _require(not (self.bf16 and self.use_cpu), "train.grpo.bf16", self.bf16,
                 "needs a GPU: set use_cpu: false, or bf16: false on CPU")


@dataclass
class BetaScheduleParams:
    kind: str = _help("constant: beta throughout; warmup: linear from beta_start to beta over "
                      "warmup_steps; adaptive: a PPO-style controller steering KL to target_kl.",
                      default="constant")
    beta_start: float = _help("Beta at step 0 (warmup; also the adaptive start).", default=0.0)
    warmup_steps: int = _help("Steps of the linear warm-up.", default=100)
    target_kl: float = _help("KL the adaptive controller aims for (per token, k3).",
                             default=0.05)
    horizon: int = _help("Adaptive controller's horizon: larger reacts more slowly.",
                         default=100)

    def __post_init__(self) -> None:
        _require(self.kind in ("constant", "warmup", "adaptive"), "train.beta_schedule.kind",
                 self.kind, "must be constant, warmup or adaptive")
        _require(self.warmup_steps > 0, "train.beta_schedule.warmup_steps", self.warmup_steps,
                 "must be positive")
        _require(self.target_kl > 0, "train.beta_schedule.target_kl", self.target_kl,
                 "must be positive")


@dataclass
class TrainParams:
    max_steps: int = _help("GRPO optimizer steps of the full run.", default=400)
    advantage: str = _help("group: GRPO's per-group baseline (TRL's own computation); "
                           "running_mean: the ablation with no group normalisation, one global "
                           "running mean of the reward as the baseline, no std scaling.",
                           default="group")
    running_mean_momentum: float = _help("running_mean: weight of the old baseline in each "
                                         "update (exponential moving average).", default=0.9)
    save_steps: int = _help("Checkpoint every this many steps; a killed run resumes from the "
                            "last one.", default=50)
    grpo: GRPOParams = _help("GRPOConfig fields (shared with the smoke run).",
                             default_factory=GRPOParams)
    beta_schedule: BetaScheduleParams = _help("How beta moves during training.",
                                              default_factory=BetaScheduleParams)

    def __post_init__(self) -> None:
        _require(self.max_steps > 0, "train.max_steps", self.max_steps, "must be positive")
        _require(self.advantage in ("group", "running_mean"), "train.advantage", self.advantage,
                 "must be group or running_mean")
        _require(0 <= self.running_mean_momentum < 1, "train.running_mean_momentum",
                 self.running_mean_momentum, "must be in [0, 1)")
        _require(self.save_steps > 0, "train.save_steps", self.save_steps, "must be positive")
        # A resumed run generates afresh at its first step: a checkpoint between two updates on
        # one generated batch could not resume identically. TRL generates every
        # steps_per_generation x num_iterations micro-batches (steps_per_generation defaults to
        # gradient_accumulation_steps, one optimizer step).
        grpo = self.grpo
        per_generation = grpo.extra.get("steps_per_generation") or grpo.gradient_accumulation_steps
        _require(isinstance(per_generation, int) and per_generation > 0,
                 "train.grpo.extra.steps_per_generation", per_generation,
                 "must be a positive integer")
        _require(self.save_steps * grpo.gradient_accumulation_steps
                 % (per_generation * grpo.num_iterations) == 0, "train.save_steps",
                 self.save_steps, f"must fall on a fresh batch of rollouts: a multiple of "
                                  f"num_iterations x steps_per_generation / "
                                  f"gradient_accumulation_steps ({grpo.num_iterations} x "
                                  f"{per_generation} / {grpo.gradient_accumulation_steps})")


@dataclass
class SmokeParams:
    max_steps: int = _help("Steps of the smoke run that proves the pipe before the full run.",
                           default=50)
    min_spread_share: float = _help("Smallest acceptable share of groups whose rewards differ "
                                    "(no spread = no gradient).", default=0.1)


@dataclass
class EvaluateParams:
    samples: int = _help("k: sampled completions per prompt for the mean sampled reward.",
                         default=8)
    seed: int = _help("Sampling seed, the same for the step-0 and the final policy (paired).",
                      default=1234)
    confidence: float = _help("Confidence level of the paired bootstrap CI.", default=0.95)
    n_resamples: int = _help("Bootstrap resamples.", default=10000)

    def __post_init__(self) -> None:
        _require(self.samples >= 1, "evaluate.samples", self.samples, "must be at least 1")
        _require(0 < self.confidence < 1, "evaluate.confidence", self.confidence,
                 "must be between 0 and 1")


@dataclass
class ReportParams:
    window: int = _help("Steps in the moving averages the KL/beta diagnosis compares.",
                        default=50)
    kl_tiny: float = _help("'Too tight' if the smoothed KL never exceeds this ...", default=0.01)
    plateau_gain: float = _help("... and the reward gains less than this over the second half.",
                                default=0.02)
    kl_high: float = _help("'Too loose' if the smoothed KL ends above this, ...", default=1.0)
    kl_rising_ratio: float = _help("... or the last quarter's KL exceeds the third quarter's by "
                                   "this factor (still climbing), ...", default=1.5)
    collapse_drop: float = _help("... or the smoothed reward ends this far below its peak.",
                                 default=0.1)


@dataclass
class OrchestrationParams:
    retries: int = _help("Retries of a training stage that fails (a killed run resumes from "
                         "its checkpoint).", default=2)
    retry_delay_seconds: int = _help("Wait before a retry.", default=10)
    retried_stages: list[str] = _help("Stages the flow retries; the gate and validation never "
                                      "are (a retry cannot fix a failing test or a bad row).",
                                      default_factory=lambda: ["prepare_model", "smoke", "train"])
    default_timeout: int = _help("Seconds a stage may run before the flow fails it.",
                                 default=1800)
    timeouts: dict = _help("Per-stage timeouts in seconds, overriding default_timeout.",
                           default_factory=lambda: {"train": 3600})
    ablations: dict = _help("Experiments flow: name -> list of `-S` overrides.",
                            default_factory=lambda: {
                                "no-kl": ["train.grpo.beta=0"],
                                "no-group-norm": ["train.advantage=running_mean"]})
    sweep: dict = _help("Experiments flow: param -> values, queued as a grid.",
                        default_factory=lambda: {"train.grpo.beta": [0.01, 0.1]})

    def __post_init__(self) -> None:
        _require(self.retries >= 0, "orchestration.retries", self.retries, "must be >= 0")
        _require(self.default_timeout > 0, "orchestration.default_timeout",
                 self.default_timeout, "must be positive")


@dataclass
class PathsParams:
    """Where every stage output lives: dvc.yaml interpolates these (${paths.*}), the stages and
    the flows read them, so no path is spelled in two places."""
    gate_verdict: str = _help("The reward-test gate's verdict (JSON).",
                              default="reports/gate/reward_tests.json")
    validation_summary: str = _help("Data validation: per file and rule (a DVC metric).",
                                    default="reports/validation/summary.json")
    data_docs: str = _help("Great Expectations Data Docs (HTML folder; not a DVC output: GX stamps "
                           "each page with the run time).",
                           default="reports/validation/data_docs")
    base_model: str = _help("The base policy: reference model and step 0.", default="models/base")
    prepare_summary: str = _help("How the base policy was made.",
                                 default="reports/prepare/summary.json")
    smoke_checks: str = _help("The smoke run's checks.", default="reports/smoke/checks.json")
    step0: str = _help("The step-0 reward baseline and the first log line.",
                       default="reports/smoke/step0.json")
    checkpoints: str = _help("Training checkpoints: a resume cache, not a result (no DVC out).",
                             default="models/checkpoints")
    final_model: str = _help("The trained policy.", default="models/final")
    train_metrics: str = _help("What the training run ended at (a DVC metric).",
                               default="reports/train/metrics.json")
    train_history: str = _help("Every logged training step (JSONL).",
                               default="reports/train/history.jsonl")
    train_curves: str = _help("Training curves (PNG).", default="reports/train/curves.png")
    train_live: str = _help("DVCLive folder of the training curves.",
                            default="reports/train/live")
    eval_metrics: str = _help("Step 0 vs final (a DVC metric).",
                              default="reports/eval/metrics.json")
    eval_per_prompt: str = _help("Step 0 vs final, one record per prompt (JSONL).",
                                 default="reports/eval/per_prompt.jsonl")
    per_prompt_figure: str = _help("Per-prompt scatter of the retrospective (PNG).",
                                   default="reports/figures/per_prompt.png")
    retrospective_md: str = _help("The retrospective, markdown.",
                                  default="reports/retrospective.md")
    retrospective_html: str = _help("The retrospective, self-contained HTML.",
                                    default="reports/retrospective.html")
    timing: str = _help("Wall time per stage (not an output: it differs on every run).",
                        default="reports/timing")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            _require(bool(value) and not Path(value).is_absolute()
                     and ".." not in Path(value).parts, f"paths.{f.name}", value,
                     "must be a non-empty path inside the repository (relative, no '..')")


@dataclass
class Params:
    seed: int = _help("Seed for everything random in the pipeline.", default=0)
    data: DataParams = _help("Where the rows are and what they must look like.",
                             default_factory=DataParams)
    rewards: RewardsParams = _help("Which rewards train the policy, and how they are weighted.",
                                   default_factory=RewardsParams)
    gate: GateParams = _help("The reward-test gate.", default_factory=GateParams)
    model: ModelParams = _help("The policy to post-train and how its base is prepared.",
                               default_factory=ModelParams)
    smoke: SmokeParams = _help("The short run that proves the pipe.", default_factory=SmokeParams)
    train: TrainParams = _help("The full GRPO run.", default_factory=TrainParams)
    evaluate: EvaluateParams = _help("Step 0 vs final audit.", default_factory=EvaluateParams)
    report: ReportParams = _help("Thresholds of the retrospective's KL/beta diagnosis.",
                                 default_factory=ReportParams)
    orchestration: OrchestrationParams = _help("The Prefect flows: retries, timeouts, "
                                               "experiments.", default_factory=OrchestrationParams)
    paths: PathsParams = _help("Where every output lives.", default_factory=PathsParams)


def _require(ok: bool, name: str, value: Any, rule: str) -> None:
    if not ok:
        raise ParamsError(f"params.yaml: {name}={value!r} {rule}")


def _convert(value: Any, annotation: Any, name: str) -> Any:
    """Convert a YAML value to the annotated type, or raise ParamsError naming the field."""
    origin = typing.get_origin(annotation)
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ParamsError(f"params.yaml: {name} must be a mapping, got {value!r}")
        return _build(annotation, value, name)
    if origin is list:
        (item_type,) = typing.get_args(annotation)
        if not isinstance(value, list):
            raise ParamsError(f"params.yaml: {name} must be a list, got {value!r}")
        return [_convert(v, item_type, f"{name}[{i}]") for i, v in enumerate(value)]
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(value, inner, name)
    try:
        if annotation is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "false"):
                return str(value).lower() == "true"
            raise ValueError
        if annotation is int:
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            return int(float(value))
        if annotation is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if annotation is str:
            return str(value)
    except (TypeError, ValueError):
        raise ParamsError(f"params.yaml: {name}={value!r} must be a {annotation.__name__}") from None
    return value


def _build(cls: type, raw: dict, prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        where = prefix or "top level"
        raise ParamsError(f"params.yaml: unknown key(s) {unknown} in {where}; known: {sorted(known)}")
    kwargs = {key: _convert(value, hints[key], f"{prefix}.{key}" if prefix else key)
              for key, value in raw.items()}
    return cls(**kwargs)


def parse_params(raw: dict) -> Params:
    """Params from an already-parsed mapping (tests use this)."""
    return _build(Params, raw or {})


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """Read and validate params.yaml."""
    with open(path, encoding="utf-8") as handle:
        raw = YAML(typ="safe").load(handle)
    return parse_params(raw)
