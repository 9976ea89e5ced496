"""The typed view of params.yaml: one dataclass per section, every field with a help string.

params.yaml is read once, with ruamel.yaml (DVC writes `-S train.learning_rate=3e-5` as `3e-05`,
which PyYAML reads as a string), and each value is converted to its field's type here, so a stage
never sees a string where it expects a number. Errors name the section, the field and how to fix it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from rlvr.errors import PipelineError

PARAMS_FILE = Path("params.yaml")


class ParamsError(PipelineError, ValueError):
    """params.yaml holds a value the pipeline cannot use; the message says which and why."""


@dataclass(frozen=True)
class Rule:
    """What a value must satisfy, and the words that say so in the error."""
    holds: Callable[[Any], bool]
    text: str


def at_least(low: float) -> Rule:
    return Rule(lambda v: v >= low, f"must be >= {low}")


def above(low: float) -> Rule:
    return Rule(lambda v: v > low, f"must be > {low}")


def within(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Rule:
    """low <= v <= high, either end open: `within(0, 1, low_open=True)` is (0, 1]."""
    return Rule(lambda v: (v > low if low_open else v >= low)
                and (v < high if high_open else v <= high),
                f"must be in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}")


def one_of(*choices: str) -> Rule:
    return Rule(lambda v: v in choices,
                "must be one of: " + ", ".join(choice or "''" for choice in choices))


def _compiles(pattern: str) -> bool:
    import regex  # the package the format reward matches with (rlvr.rewards.verifiers)

    try:
        regex.compile(pattern)
    except regex.error:
        return False
    return True


NON_EMPTY = Rule(bool, "must not be empty")
POSITIVE = above(0)
COUNT = at_least(1)
SEED = within(0, 2**32 - 1)  # numpy's seed range
COMPILES = Rule(_compiles, "must be a regular expression that compiles")
SECONDS = Rule(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
               and math.isfinite(v) and v > 0, "must be a positive number of seconds")
# configs/accelerate/<name>.yaml (tests/test_distributed.py checks they exist and parse).
ACCELERATE_CONFIG_NAMES = ("ddp", "fsdp", "deepspeed_zero2", "deepspeed_zero3")
# The stage names of dvc.yaml (tests/test_config.py checks they agree).
STAGES = ("check_params", "reward_tests", "validate", "prepare_model", "smoke", "train",
          "evaluate", "report")
# GRPOConfig fields rlvr.training.grpo_config sets itself (train.grpo.extra must not).
PIPELINE_GRPO_FIELDS = ("output_dir", "max_steps", "seed", "data_seed", "reward_weights",
                        "logging_steps", "logging_nan_inf_filter", "report_to", "save_strategy",
                        "save_steps", "save_total_limit", "disable_tqdm", "chat_template_kwargs")
# TRL 1.16 GRPOConfig.loss_type values and transformers 5 SchedulerType values (tests check both
# against the installed libraries).
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
LR_SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                 "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau",
                 "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay", "greedy")


def _help(text: str, rule: Rule | None = None, each: Rule | None = None, **kwargs: Any) -> Any:
    """A field with its help string, the rule its value must satisfy, and the rule each item of a
    list (or each value of a mapping) must satisfy."""
    return field(metadata={"help": text, "rule": rule, "each": each}, **kwargs)


@dataclass
class DataParams:
    train_path: str = _help("JSONL file of training rows (id, prompt, verifier).",
                            rule=NON_EMPTY, default="data/grpo_train.jsonl")
    eval_path: str = _help("JSONL file of held-out test rows; must share no prompt with train "
                           "or validation. Read only by validate and evaluate: nothing that "
                           "trains or selects ever sees it.",
                           rule=NON_EMPTY, default="data/grpo_eval.jsonl")
    val_path: str = _help("JSONL file of validation rows, scored during training (held-out "
                          "curves, best-checkpoint selection); shares no prompt with train or "
                          "test.", rule=NON_EMPTY, default="data/grpo_val.jsonl")
    train_rows: int = _help("Exact number of rows the training file must have.", rule=COUNT,
                            default=64)
    max_prompt_chars: int = _help("Longest prompt allowed, in characters. TRL never truncates "
                                  "prompts, so length is bounded here, in the data.", rule=COUNT,
                                  default=200)

    def __post_init__(self) -> None:
        _require(self.eval_path != self.train_path, "data.eval_path", self.eval_path,
                 "must differ from data.train_path (held-out rows are not training rows)")
        _require(self.val_path not in (self.train_path, self.eval_path), "data.val_path",
                 self.val_path, "must differ from data.train_path and data.eval_path (three "
                 "separate files: train, validation, test)")


@dataclass
class LengthParams:
    lam: float = _help("Weight lambda of the Kimi k1.5 length term.", rule=at_least(0), default=0.5)
    l_min: float = _help("Length (completion tokens) that earns the full bonus when correct.",
                         rule=at_least(0), default=1.0)
    l_max: float = _help("Length at which a correct answer earns 0 and a wrong one the full "
                         "penalty.", rule=POSITIVE, default=12.0)
    l_target: float = _help("Wrong answers longer than this are penalised.", rule=at_least(0),
                            default=8.0)

    def __post_init__(self) -> None:
        _require(self.l_min < self.l_max, "rewards.length.l_min", self.l_min,
                 f"must be below l_max ({self.l_max})")
        _require(self.l_min <= self.l_target < self.l_max, "rewards.length.l_target",
                 self.l_target, f"must be in [l_min, l_max) ([{self.l_min}, {self.l_max}))")


@dataclass
class RewardsParams:
    funcs: list[str] = _help("Reward functions by registry name (rlvr.rewards.REWARD_FUNCS).",
                             rule=NON_EMPTY, default_factory=lambda: ["correctness", "format"])
    weights: list[float] = _help("One weight per reward function, same order (TRL's "
                                 "reward_weights).", each=at_least(0),
                                 default_factory=lambda: [1.0, 0.2])
    format_pattern: str = _help("Regex the whole completion must match for the format reward.",
                                rule=COMPILES, default=r"^\s*\(*\d+\)*(\s*[-+*/]\s*\(*\d+\)*)+\s*$")
    length: LengthParams = _help("The length term's parameters (used when 'length' is in funcs).",
                                 default_factory=LengthParams)

    def __post_init__(self) -> None:
        # Names are checked against the registry by rlvr.rewards.registry.check_reward_names
        # (every stage calls it first), so this module needs no reward code.
        _require(len(set(self.funcs)) == len(self.funcs), "rewards.funcs", self.funcs,
                 "must name each reward function once")
        _require(len(self.weights) == len(self.funcs), "rewards.weights", self.weights,
                 f"needs one weight per reward function ({len(self.funcs)})")
        _require(sum(self.weights) > 0, "rewards.weights", self.weights,
                 "must sum to more than 0 (the rewards are averaged with these weights)")


@dataclass
class GateParams:
    tests: list[str] = _help("Pytest paths of the offline reward tests that gate every stage "
                             "(test files and the doctests of the reward modules).",
                             rule=NON_EMPTY, each=NON_EMPTY,
                             default_factory=lambda: ["tests/rewards", "rlvr/rewards",
                                                      "rlvr/grpo_math.py"])


@dataclass
class TinyModelParams:
    hidden_size: int = _help("Width of the tiny Qwen3 model.", rule=COUNT, default=128)
    intermediate_size: int = _help("MLP width.", rule=COUNT, default=512)
    num_hidden_layers: int = _help("Transformer blocks.", rule=COUNT, default=2)
    num_attention_heads: int = _help("Query heads (hidden_size must divide by it).", rule=COUNT,
                                     default=4)
    num_key_value_heads: int = _help("Key/value heads (grouped-query attention).", rule=COUNT,
                                     default=2)
    max_position_embeddings: int = _help("Longest prompt + completion, in characters.",
                                         rule=COUNT, default=256)

    def __post_init__(self) -> None:
        _require(self.hidden_size % self.num_attention_heads == 0, "model.tiny.hidden_size",
                 self.hidden_size, f"must be divisible by num_attention_heads "
                                   f"({self.num_attention_heads})")
        _require(self.num_attention_heads % self.num_key_value_heads == 0,
                 "model.tiny.num_key_value_heads", self.num_key_value_heads,
                 "must divide num_attention_heads")


# A byte-level BPE tokenizer holds the 256 byte tokens and the 3 special tokens before any merge.
LOCAL_LLM_MIN_VOCAB = 300


@dataclass
class LocalLLMParams:
    """The reduced Qwen3 of model.init: local_llm (rlvr/local_llm.py). Its defaults give ~1.8M
    parameters; Qwen3-0.6B is vocab 151936, hidden 1024, intermediate 3072, 28 layers, 16 heads,
    8 kv heads, head_dim 128."""
    vocab_size: int = _help("Embedding rows of the model. The byte-level BPE tokenizer is trained "
                            "on the task's text to at most this many tokens (256 bytes + merges "
                            "+ 3 special tokens) and the model is padded up to it, as Qwen's is.",
                            rule=at_least(LOCAL_LLM_MIN_VOCAB), default=512)
    hidden_size: int = _help("Model width.", rule=COUNT, default=256)
    intermediate_size: int = _help("MLP width.", rule=COUNT, default=768)
    num_hidden_layers: int = _help("Transformer blocks.", rule=COUNT, default=2)
    num_attention_heads: int = _help("Query heads.", rule=COUNT, default=4)
    num_key_value_heads: int = _help("Key/value heads (grouped-query attention; must divide "
                                     "num_attention_heads).", rule=COUNT, default=2)
    head_dim: int = _help("Width of one attention head (Qwen3 sets it apart from hidden_size / "
                          "heads); even, for the rotary embedding.", rule=COUNT, default=64)
    max_position_embeddings: int = _help("Longest prompt + completion, in tokens.", rule=COUNT,
                                         default=1024)

    def __post_init__(self) -> None:
        _require(self.num_attention_heads % self.num_key_value_heads == 0,
                 "model.local_llm.num_key_value_heads", self.num_key_value_heads,
                 f"must divide num_attention_heads ({self.num_attention_heads})")
        _require(self.head_dim % 2 == 0, "model.local_llm.head_dim", self.head_dim,
                 "must be even (the rotary embedding turns pairs of dimensions)")


@dataclass
class WarmStartParams:
    steps: int = _help("Supervised steps on well-formed expressions over each training row's "
                       "numbers, NOT checked against the target (0 = no warm start).",
                       rule=at_least(0), default=300)
    batch_size: int = _help("Examples per warm-start step.", rule=COUNT, default=128)
    learning_rate: float = _help("AdamW learning rate of the warm start.", rule=POSITIVE,
                                 default=3e-3)


@dataclass
class LoraParams:
    enabled: bool = _help("Train LoRA adapters instead of all weights (large models).",
                          default=False)
    r: int = _help("LoRA rank.", rule=COUNT, default=16)
    alpha: int = _help("LoRA alpha (scale = alpha / r).", rule=POSITIVE, default=32)
    dropout: float = _help("Dropout on the LoRA path.", rule=within(0, 1, high_open=True),
                           default=0.0)
    target_modules: str = _help("Which modules get adapters (peft's 'all-linear' or a name).",
                                rule=NON_EMPTY, default="all-linear")


@dataclass
class ModelParams:
    init: str = _help("'tiny': build the tiny Qwen3 default locally; 'pretrained': load "
                      "name_or_path; 'local_llm': build a reduced Qwen3 with a byte-level BPE "
                      "tokenizer and a ChatML chat template locally, saved and loaded like a "
                      "hub model (model.local_llm).",
                      rule=one_of("tiny", "pretrained", "local_llm"), default="tiny")
    name_or_path: str = _help("A local Hugging Face causal-LM folder, or a hub id where the "
                              "network allows (init: pretrained).", default="")
    chat_template: bool = _help("Wrap prompts as chat messages (instruct models); the tiny "
                                "default reads plain text.", default=False)
    chat_template_kwargs: dict = _help("Variables for the chat template, passed to "
                                       "apply_chat_template in training, validation and "
                                       "evaluation alike (Qwen3: {enable_thinking: false}, or "
                                       "it writes a <think> block before the answer).",
                                       default_factory=dict)
    tiny: TinyModelParams = _help("Sizes of the tiny default.", default_factory=TinyModelParams)
    local_llm: LocalLLMParams = _help("Sizes of the local_llm model and its tokenizer.",
                                      default_factory=LocalLLMParams)
    warm_start: WarmStartParams = _help("Supervised warm start that turns the random tiny model "
                                        "into a reference policy that writes well-formed answers "
                                        "(model.init: tiny only).",
                                        default_factory=WarmStartParams)
    lora: LoraParams = _help("LoRA adapters for GRPO (peft).", default_factory=LoraParams)

    def __post_init__(self) -> None:
        _require(self.chat_template or not self.chat_template_kwargs, "model.chat_template_kwargs",
                 self.chat_template_kwargs, "applies only with model.chat_template: true")
        _require(all(isinstance(key, str) for key in self.chat_template_kwargs),
                 "model.chat_template_kwargs", self.chat_template_kwargs,
                 "must map template variable names to values")
        _require(self.init != "pretrained" or bool(self.name_or_path), "model.name_or_path",
                 self.name_or_path, "must name a model folder or hub id when model.init is "
                                    "'pretrained'")


@dataclass
class GRPOParams:
    """GRPOConfig fields, under TRL's own names (the rest keep TRL's defaults unless set in extra)."""
    learning_rate: float = _help("AdamW learning rate.", rule=POSITIVE, default=2e-4)
    beta: float = _help("KL coefficient against the reference (base) policy; 0 = no reference "
                        "model and no KL. With a schedule, the value it ends at.", rule=at_least(0),
                        default=0.05)
    num_generations: int = _help("G: completions sampled per prompt (one group).", rule=at_least(2),
                                 default=8)
    per_device_train_batch_size: int = _help("Completions per step (prompts per step x G); "
                                             "must be divisible by num_generations.", rule=COUNT,
                                             default=128)
    gradient_accumulation_steps: int = _help("Micro-batches per optimizer step.", rule=COUNT,
                                             default=1)
    max_completion_length: int = _help("Longest completion, in tokens.", rule=COUNT, default=8)
    temperature: float = _help("Sampling temperature of the rollouts.", rule=POSITIVE, default=1.0)
    top_p: float = _help("Nucleus sampling of the rollouts.", rule=within(0, 1, low_open=True),
                         default=1.0)
    loss_type: str = _help("TRL loss aggregation: grpo, dr_grpo, dapo, bnpo, ...",
                           rule=one_of(*LOSS_TYPES), default="dapo")
    scale_rewards: str = _help("Advantage scaling: group (divide by the group std), batch, or "
                               "none.", rule=one_of("group", "batch", "none"), default="group")
    epsilon: float = _help("PPO clip range of the importance ratio.", rule=POSITIVE, default=0.2)
    num_iterations: int = _help("Updates per generated batch (mu in the GRPO paper).", rule=COUNT,
                                default=1)
    max_grad_norm: float = _help("Gradient clipping.", rule=POSITIVE, default=1.0)
    lr_scheduler_type: str = _help("Learning-rate schedule (transformers names).",
                                   rule=one_of(*LR_SCHEDULERS), default="constant")
    use_cpu: bool = _help("Train on CPU (the default machine has no GPU).", default=True)
    bf16: bool = _help("bfloat16 mixed precision (GPU only).", default=False)
    use_vllm: bool = _help("Generate rollouts with vLLM (GPU only).", default=False)
    extra: dict = _help("Any other GRPOConfig field, by TRL's name (e.g. vllm_mode: colocate).",
                        default_factory=dict)

    def __post_init__(self) -> None:
        # extra is for the GRPOConfig fields params.yaml does not name: a field named above (its
        # rule would be bypassed, and evaluate reads the named sampling fields) or one the
        # pipeline sets itself must not come in through it
        for key in self.extra:
            _require(key not in GRPOParams.__dataclass_fields__ and key not in PIPELINE_GRPO_FIELDS,
                     f"train.grpo.extra.{key}", self.extra[key],
                     f"set train.grpo.{key} instead" if key in GRPOParams.__dataclass_fields__
                     else "is set by the pipeline (rlvr.training.grpo_config), not by params")
        _require(self.per_device_train_batch_size % self.num_generations == 0,
                 "train.grpo.per_device_train_batch_size", self.per_device_train_batch_size,
                 f"must be divisible by num_generations ({self.num_generations})")
        _require(not (self.bf16 and self.use_cpu), "train.grpo.bf16", self.bf16,
                 "needs a GPU: set use_cpu: false, or bf16: false on CPU")


@dataclass
class BetaScheduleParams:
    kind: str = _help("constant: beta throughout; warmup: linear from beta_start to beta over "
                      "warmup_steps; adaptive: a PPO-style controller steering KL to target_kl.",
                      rule=one_of("constant", "warmup", "adaptive"), default="constant")
    beta_start: float = _help("Beta at step 0 (warmup; also the adaptive start).", rule=at_least(0),
                              default=0.0)
    warmup_steps: int = _help("Steps of the linear warm-up.", rule=COUNT, default=100)
    target_kl: float = _help("KL the adaptive controller aims for (per token, k3).",
                             rule=POSITIVE, default=0.05)
    horizon: int = _help("Adaptive controller's horizon: larger reacts more slowly.",
                         rule=COUNT, default=100)



@dataclass
class TrainParams:
    max_steps: int = _help("GRPO optimizer steps of the full run.", rule=COUNT, default=400)
    advantage: str = _help("group: GRPO's per-group baseline (TRL's own computation); "
                           "running_mean: the ablation with no group normalisation, one global "
                           "running mean of the reward as the baseline, no std scaling.",
                           rule=one_of("group", "running_mean"), default="group")
    running_mean_momentum: float = _help("running_mean: weight of the old baseline in each "
                                         "update (exponential moving average).",
                                         rule=within(0, 1, high_open=True), default=0.9)
    save_steps: int = _help("Checkpoint every this many steps; a killed run resumes from the "
                            "last one.", rule=COUNT, default=50)
    log_every: int = _help("The console shows one line (step, reward, correctness, KL, beta, "
                           "s/step) every this many steps of the smoke and training runs; every "
                           "step still goes to history.jsonl and DVCLive.", rule=COUNT, default=25)
    processes: int = _help("Training processes (ranks) of the smoke and full runs: above 1, "
                           "the stage runs under `accelerate launch` (DDP; gloo on CPU). "
                           "per_device_train_batch_size is per rank, as in TRL: the global "
                           "batch is processes x per_device_train_batch_size x "
                           "gradient_accumulation_steps.", rule=COUNT, default=1)
    accelerate_config: str = _help("With processes above 1: '' for plain DDP, or the name of an "
                                   "accelerate config in configs/accelerate/ (ddp, fsdp, "
                                   "deepspeed_zero2, deepspeed_zero3) for multi-GPU runs.",
                                   rule=one_of("", *ACCELERATE_CONFIG_NAMES), default="")
    eval_steps: int = _help("Score the policy on the validation rows (data.val_path) at step 0 "
                            "and every this many steps, as evaluate scores a split (mean reward "
                            "of evaluate.samples seeded samples, greedy success): curves next to "
                            "the training reward. 0: never.", rule=at_least(0), default=50)
    select: str = _help("Which weights become models/final: last (the last step) or best_val "
                        "(the checkpoint with the best validation mean reward, the earliest of "
                        "equals; needs eval_steps, and save_steps a multiple of it).",
                        rule=one_of("last", "best_val"), default="last")
    patience: int = _help("best_val only: stop after this many validations in a row without a "
                          "new best. 0: never stop early.", rule=at_least(0), default=0)
    dynamic_sampling: bool = _help("DAPO's dynamic sampling: fill each training batch only with "
                                   "groups whose G rewards are not all equal (the others carry "
                                   "no gradient), sampling more prompts for up to "
                                   "max_sampling_rounds rounds; the loss sees only the kept "
                                   "groups. Logs dynamic_sampling/{rounds,kept_share,"
                                   "oversampling} and kl_first_batch, the KL over each step's "
                                   "first batch, every group (TRL's kl covers the kept ones "
                                   "only), which the KL diagnosis, the alarms and the adaptive "
                                   "beta read. (params.yaml turns it on: the Step 8 "
                                   "comparison.)", default=False)
    max_sampling_rounds: int = _help("dynamic_sampling: generation rounds per step at most (1 = "
                                     "filter only, never resample).", rule=COUNT, default=3)
    grpo: GRPOParams = _help("GRPOConfig fields (shared with the smoke run).",
                             default_factory=GRPOParams)
    beta_schedule: BetaScheduleParams = _help("How beta moves during training.",
                                              default_factory=BetaScheduleParams)

    def __post_init__(self) -> None:
        if self.select == "best_val":
            _require(self.eval_steps > 0, "train.eval_steps", self.eval_steps,
                     "must be above 0 with train.select = 'best_val' (selection needs the "
                     "validation scores)")
            _require(self.save_steps % self.eval_steps == 0, "train.save_steps",
                     self.save_steps, f"must be a multiple of train.eval_steps "
                     f"({self.eval_steps}) with train.select = 'best_val': the best step must "
                     "have a checkpoint")
        if self.dynamic_sampling:
            _require(self.advantage == "group", "train.dynamic_sampling", True,
                     "needs train.advantage = 'group' (it drops the groups whose rewards are all "
                     "equal, which only group baselines leave without a gradient)")
        _require(self.patience == 0 or self.select == "best_val", "train.patience",
                 self.patience, "needs train.select = 'best_val' (early stopping keeps the "
                 "best checkpoint); set it to 0 or select best_val")
        # A resumed run generates afresh at its first step: a checkpoint between two updates on
        # one generated batch could not resume identically. TRL generates every
        # steps_per_generation x num_iterations micro-batches (steps_per_generation defaults to
        # gradient_accumulation_steps, one optimizer step).
        grpo = self.grpo
        if self.accelerate_config:
            _require(self.processes > 1, "train.processes", self.processes,
                     f"must be above 1 with train.accelerate_config = "
                     f"'{self.accelerate_config}' (one process needs no launcher config)")
            _require(not grpo.use_cpu, "train.grpo.use_cpu", grpo.use_cpu,
                     f"must be false with train.accelerate_config = '{self.accelerate_config}' "
                     "(a multi-GPU config); on CPU leave accelerate_config '' (DDP over gloo)")
        per_generation = grpo.extra.get("steps_per_generation")
        if per_generation is None:
            per_generation = grpo.gradient_accumulation_steps
        _require(isinstance(per_generation, int) and not isinstance(per_generation, bool)
                 and per_generation > 0,
                 "train.grpo.extra.steps_per_generation", per_generation,
                 "must be a positive integer")
        _require(self.save_steps * grpo.gradient_accumulation_steps
                 % (per_generation * grpo.num_iterations) == 0, "train.save_steps",
                 self.save_steps, f"must fall on a fresh batch of rollouts: a multiple of "
                                  f"num_iterations x steps_per_generation / "
                                  f"gradient_accumulation_steps ({grpo.num_iterations} x "
                                  f"{per_generation} / {grpo.gradient_accumulation_steps})")
        if self.dynamic_sampling:
            _require(per_generation == 1, "train.dynamic_sampling", True,
                     f"needs one optimizer micro-batch per generation (steps_per_generation "
                     f"{per_generation}): a batch left short of kept groups cannot be split; "
                     "set gradient_accumulation_steps and extra.steps_per_generation to 1")
            # its drift KL is measured when a batch is generated: with num_iterations > 1 most
            # steps would log TRL's kept-group KL alone, and the KL series would mix the two
            _require(grpo.num_iterations == 1, "train.dynamic_sampling", True,
                     f"needs train.grpo.num_iterations = 1 (it is {grpo.num_iterations}): "
                     "the KL the diagnosis reads is measured on each generated batch; set "
                     "num_iterations to 1 or dynamic_sampling to false")


@dataclass
class SmokeParams:
    max_steps: int = _help("Steps of the smoke run that proves the pipe before the full run.",
                           rule=COUNT, default=50)
    min_spread_share: float = _help("Smallest acceptable share of groups whose rewards differ "
                                    "(no spread = no gradient).", rule=within(0, 1), default=0.1)


@dataclass
class EvaluateParams:
    samples: int = _help("n: sampled completions per prompt, for the mean sampled reward and "
                         "pass@k up to k = n (the validation rows during training too).",
                         rule=COUNT, default=32)
    seed: int = _help("Sampling seed, the same for the step-0 and the final policy (paired).",
                      rule=SEED, default=1234)
    confidence: float = _help("Confidence level of the paired bootstrap CI.",
                              rule=within(0, 1, low_open=True, high_open=True), default=0.95)
    n_resamples: int = _help("Bootstrap resamples.", rule=COUNT, default=10000)



@dataclass
class AlarmParams:
    format_rise: float = _help("Alarm 'format up, correctness flat' when the smoothed format "
                               "reward gains more than this over the run ...", rule=at_least(0),
                               default=0.1)
    correctness_flat: float = _help("... while the smoothed correctness gains less than this.",
                                    rule=at_least(0), default=0.02)
    length_growth: float = _help("Alarm 'completion length inflating' when the smoothed length "
                                 "ends above this many times its start.", rule=above(1),
                                 default=1.5)
    kl_spike_ratio: float = _help("Alarm 'KL spike' when one step's KL exceeds this many times "
                                  "the mean of the report.window steps before it ...",
                                  rule=above(1), default=5.0)
    kl_spike_min: float = _help("... and is above this (spikes of tiny KLs are noise).",
                                rule=at_least(0), default=0.05)
    overfit_drop: float = _help("Alarm 'overfitting' when the validation mean reward ends this "
                                "far below its peak while the training reward rose after it.",
                                rule=at_least(0), default=0.05)
    zero_spread_share: float = _help("Alarm 'no learning signal' when the smoothed share of "
                                     "groups with no reward spread ends above this.",
                                     rule=within(0, 1), default=0.5)
    diversity_drop: float = _help("Alarm 'diversity collapse' when, on the decisive split, the "
                                  "distinct correct answers per solved prompt or the policy's "
                                  "entropy on its own samples end more than this share below "
                                  "step 0's while the mean reward rose.",
                                  rule=within(0, 1, low_open=True, high_open=True), default=0.5)


@dataclass
class ReportParams:
    window: int = _help("Steps in the moving averages the KL/beta diagnosis compares.",
                        rule=COUNT, default=50)
    kl_tiny: float = _help("'Too tight' if the smoothed KL never exceeds this ...",
                           rule=at_least(0), default=0.01)
    plateau_gain: float = _help("... and the reward gains less than this over the second half.",
                                rule=at_least(0), default=0.02)
    kl_high: float = _help("'Too loose' if the smoothed KL ends above this, ...", rule=POSITIVE,
                           default=1.0)
    kl_rising_ratio: float = _help("... or the last quarter's KL exceeds the third quarter's by "
                                   "this factor (still climbing), ...", rule=above(1), default=1.5)
    collapse_drop: float = _help("... or the smoothed reward ends this far below its peak.",
                                 rule=at_least(0), default=0.1)
    min_slice_rows: int = _help("A tag (a row's `tags`) with at least this many rows in the "
                                "decisive split weighs in the verdict: if it regressed, the "
                                "verdict is `mixed`, not `improved`.", rule=COUNT, default=8)
    slice_drop_from: float = _help("A tag regressed when its mean-reward or pass@n CI lies "
                                   "below 0, or when its success or pass@n falls from at least "
                                   "this ...",
                                   rule=within(0, 1), default=0.1)
    slice_drop_to: float = _help("... to at most this (below slice_drop_from).",
                                 rule=within(0, 1), default=0.02)
    alarms: AlarmParams = _help("Thresholds of the reward-hacking, overfitting and forgetting "
                                "alarms.",
                                default_factory=AlarmParams)


@dataclass
class OrchestrationParams:
    retries: int = _help("Retries of a training stage that fails (a killed run resumes from "
                         "its checkpoint).", rule=at_least(0), default=2)
    retry_delay_seconds: int = _help("Wait before a retry.", rule=at_least(0), default=10)
    retried_stages: list[str] = _help("Stages the flow retries; the gate and validation never "
                                      "are (a retry cannot fix a failing test or a bad row).",
                                      each=one_of(*STAGES),
                                      default_factory=lambda: ["prepare_model", "smoke", "train"])
    default_timeout: int = _help("Seconds a stage may run before the flow fails it.",
                                 rule=COUNT, default=1800)
    timeouts: dict = _help("Per-stage timeouts in seconds, overriding default_timeout.",
                           each=SECONDS, default_factory=lambda: {"train": 3600})
    ablations: dict = _help("Experiments flow: name -> list of `-S` overrides.",
                            default_factory=lambda: {
                                "no-kl": ["train.grpo.beta=0"],
                                "no-group-norm": ["train.advantage=running_mean"]})
    jobs: int = _help("Experiments flow: queued experiments run this many at a time (`dvc exp "
                      "run --run-all --jobs N`, each in its own temporary copy).", rule=COUNT,
                      default=1)
    sweep: dict = _help("Experiments flow: param -> values, queued as a grid.",
                        default_factory=lambda: {"train.grpo.beta": [0.01, 0.1]})
    grids: dict = _help("Experiments flow, only when named (`python -m flows.experiments --grid "
                        "NAME`): name -> {param: values}; every combination is queued (DVC's "
                        "grid of `-S` lists).", default_factory=dict)

    def __post_init__(self) -> None:
        for stage in self.timeouts:
            _require(stage in STAGES, "orchestration.timeouts", stage,
                     "names no stage; stages: " + ", ".join(STAGES))
        for name, overrides in self.ablations.items():
            _require(bool(_EXPERIMENT_NAME.fullmatch(str(name))), "orchestration.ablations", name,
                     "must be a DVC experiment name: letters, digits, '-' and '_'")
            _require(isinstance(overrides, list) and bool(overrides)
                     and all(isinstance(o, str) and "=" in o for o in overrides),
                     f"orchestration.ablations.{name}", overrides,
                     "must be a list of `-S` overrides such as train.grpo.beta=0")
            for override in overrides:
                _require_param_key(override.split("=", 1)[0].strip(),
                                   f"orchestration.ablations.{name}")
        for key, values in self.sweep.items():
            _require_param_key(str(key), "orchestration.sweep")
            _require(isinstance(values, list) and bool(values), f"orchestration.sweep.{key}",
                     values, "must be a non-empty list of values")
        for name, grid in self.grids.items():
            _require(bool(_EXPERIMENT_NAME.fullmatch(str(name))), "orchestration.grids", name,
                     "must be a name of letters, digits, '-' and '_'")
            _require(isinstance(grid, dict) and bool(grid), f"orchestration.grids.{name}", grid,
                     "must map params to lists of values, e.g. {seed: [0, 1]}")
            for key, values in grid.items():
                _require_param_key(str(key), f"orchestration.grids.{name}")
                _require(isinstance(values, list) and bool(values),
                         f"orchestration.grids.{name}.{key}", values,
                         "must be a non-empty list of values")


@dataclass
class PathsParams:
    """Where every stage output lives: dvc.yaml interpolates these (${paths.*}), the stages and
    the flows read them, so no path is spelled in two places."""
    gate_verdict: str = _help("The reward-test gate's verdict (JSON: counts, failing tests).",
                              default="reports/gate/reward_tests.json")
    gate_metrics: str = _help("The gate's headline (a DVC metric): passed, tests, failed.",
                              default="metrics/gate.json")
    validation_summary: str = _help("Data validation: per file and rule.",
                                    default="reports/validation/summary.json")
    validation_metrics: str = _help("Data validation's headline (a DVC metric): passed, "
                                    "problems.", default="metrics/data.json")
    data_docs: str = _help("Great Expectations Data Docs (HTML folder; not a DVC output: GX stamps "
                           "each page with the run time).",
                           default="reports/validation/data_docs")
    base_model: str = _help("The base policy: reference model and step 0.", default="models/base")
    prepare_summary: str = _help("How the base policy was made.",
                                 default="reports/prepare/summary.json")
    smoke_checks: str = _help("The smoke run's checks.", default="reports/smoke/checks.json")
    smoke_metrics: str = _help("The smoke run's headline (a DVC metric): passed, failed checks, "
                               "step-0 reward.", default="metrics/smoke.json")
    step0: str = _help("The step-0 reward baseline and the first log line.",
                       default="reports/smoke/step0.json")
    checkpoints: str = _help("Training checkpoints: a resume cache, not a result (no DVC out).",
                             default="models/checkpoints")
    final_model: str = _help("The trained policy.", default="models/final")
    train_summary: str = _help("What the training run did: first and last steps' means, final "
                               "KL and beta.", default="reports/train/summary.json")
    train_metrics: str = _help("The training run's headline (a DVC metric): steps, reward, KL.",
                               default="metrics/train.json")
    train_history: str = _help("Every logged training step (JSONL).",
                               default="reports/train/history.jsonl")
    train_curves: str = _help("Training curves (PNG).", default="reports/train/curves.png")
    train_live: str = _help("DVCLive folder of the training curves.",
                            default="reports/train/live")
    eval_summary: str = _help("Step 0 vs final, every statistic of both splits.",
                              default="reports/eval/summary.json")
    eval_metrics: str = _help("Step 0 vs final on held-out prompts, the headline (a DVC metric): "
                              "verdict, reward, greedy success, the delta with its CI, pass@1 "
                              "and pass@n.",
                              default="metrics/eval.json")
    eval_per_prompt: str = _help("Step 0 vs final, one record per prompt (JSONL).",
                                 default="reports/eval/per_prompt.jsonl")
    per_prompt_figure: str = _help("Per-prompt scatter of the retrospective (PNG).",
                                   default="reports/figures/per_prompt.png")
    pass_at_k_figure: str = _help("pass@k against k, step 0 and final, of the retrospective "
                                  "(PNG).", default="reports/figures/pass_at_k.png")
    retrospective_md: str = _help("The retrospective, markdown.",
                                  default="reports/retrospective.md")
    retrospective_html: str = _help("The retrospective, self-contained HTML.",
                                    default="reports/retrospective.html")
    timing: str = _help("Wall time per stage (not an output: it differs on every run).",
                        default="reports/timing")
    params_check: str = _help("The params check's verdict: the same bytes for every valid "
                              "params.yaml, so only the stages whose params changed rerun.",
                              default="reports/params/check.json")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            _require(bool(value) and not Path(value).is_absolute()
                     and ".." not in Path(value).parts and not set(value) & set("<>\n\r"),
                     f"paths.{f.name}", value, "must be a non-empty path inside the repository "
                                               "(relative, no '..', no '<', '>' or line break)")


@dataclass
class Params:
    seed: int = _help("Seed for everything random in the pipeline.", rule=SEED, default=0)
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


_EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def _require(ok: bool, name: str, value: Any, rule: str) -> None:
    if not ok:
        raise ParamsError(f"params.yaml: {name} = {value!r}: {rule}")


def _require_param_key(key: str, where: str) -> None:
    """`key` (dotted) must name a params.yaml field, e.g. train.grpo.beta."""
    cls: Any = Params
    for part in key.split("."):
        hints = typing.get_type_hints(cls) if dataclasses.is_dataclass(cls) else {}
        if part not in hints:
            raise ParamsError(f"params.yaml: {where} = {key!r}: names no params.yaml field")
        cls = hints[part]
        if cls is dict:  # train.grpo.extra.<any GRPOConfig field>
            return


def _check_rules(cls: type, values: dict[str, Any], prefix: str) -> None:
    """Each field's own rule (and each item's), before the dataclass checks fields together."""
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        name, value = f"{prefix}.{f.name}" if prefix else f.name, values[f.name]
        rule, each = f.metadata.get("rule"), f.metadata.get("each")
        if rule is not None:
            _require(rule.holds(value), name, value, rule.text)
        if each is not None:
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                try:
                    ok = each.holds(item)
                except TypeError:
                    ok = False
                _require(ok, f"{name}[{key!r}]" if isinstance(value, dict) else f"{name}[{key}]",
                         item, each.text)


_TYPE_WORDS = {int: "an integer", float: "a finite number", bool: "true or false",
               str: "a string"}


def _convert(value: Any, annotation: Any, name: str) -> Any:
    """Convert a YAML value to the annotated type, or raise ParamsError naming the field."""
    origin = typing.get_origin(annotation)
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ParamsError(f"params.yaml: {name} = {value!r}: must be a mapping")
        return _build(annotation, value, name)
    if origin is list:
        (item_type,) = typing.get_args(annotation)
        if not isinstance(value, list):
            raise ParamsError(f"params.yaml: {name} = {value!r}: must be a list")
        return [_convert(v, item_type, f"{name}[{i}]") for i, v in enumerate(value)]
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(value, inner, name)
    if annotation is dict:
        _require(isinstance(value, dict), name, value, "must be a mapping")
        return value
    try:
        if annotation is float:
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise ValueError
            number = float(value)
            if math.isfinite(number):
                return number
            raise ValueError
        if annotation is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "false"):
                return str(value).lower() == "true"
            raise ValueError
        if annotation is int:
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise ValueError
            if isinstance(value, int):
                return value
            if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
                return int(value)  # exactly, however long
            number = float(value)  # "6.4e1" from `dvc exp run -S`
            if number != int(number):
                raise ValueError
            return int(number)
        if annotation is str:
            # a blank YAML value is None: never the text "None"
            if value is None or isinstance(value, (bool, dict, list)):
                raise ValueError
            return str(value)
    except (TypeError, ValueError, OverflowError):
        raise ParamsError(f"params.yaml: {name} = {value!r}: must be {_TYPE_WORDS[annotation]}"
                          ) from None
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
    _check_rules(cls, kwargs, prefix)
    return cls(**kwargs)


def read_params_file(path: str | Path = PARAMS_FILE) -> dict:
    """params.yaml as a mapping, or ParamsError naming the file and what is wrong with it."""
    from ruamel.yaml import YAMLError

    try:
        with open(path, encoding="utf-8") as handle:
            raw = YAML(typ="safe").load(handle)
    except (OSError, UnicodeDecodeError) as error:
        raise ParamsError(f"{path}: cannot be read: {error}") from None
    except YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ParamsError(f"{path}:{where}: not valid YAML: "
                          f"{getattr(error, 'problem', None) or error}") from None
    if raw is not None and not isinstance(raw, dict):
        raise ParamsError(f"{path}: must be a mapping of sections, got a {type(raw).__name__}")
    return raw or {}


def parse_params(raw: dict) -> Params:
    """Params from an already-parsed mapping (tests use this)."""
    return _build(Params, raw or {})


def data_files(params: Params) -> list[str]:
    """The data files in the order reports list them: train, validation, test."""
    return [params.data.train_path, params.data.val_path, params.data.eval_path]


def test_file_reader(params: Params) -> dict[str, str]:
    """Only validate and evaluate open the test file. Reports and artifacts take its md5 from
    validate's deps in dvc.lock (validate runs before every stage that trains, selects or
    reports), so the file is never opened for a hash: {test file: "validate"}."""
    return {params.data.eval_path: "validate"}


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """Read and validate params.yaml."""
    return parse_params(read_params_file(path))
