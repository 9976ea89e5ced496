"""The typed view of params.yaml: one section (a pydantic dataclass, rlvr/section.py) per mapping
in it, every field with its help string (description), its type and its range, and the rules between
fields. params.schema.json is generated from them (`python -m rlvr.config --schema >
params.schema.json`) and named on params.yaml's first line, so an editor completes and checks it.

params.yaml is read once, with ruamel.yaml (DVC writes `-S train.learning_rate=3e-5` as `3e-05`,
which PyYAML reads as a string), and each value is read as its field's type, so a stage never sees a
string where it expects a number. Errors are one line naming the key, the value and how to fix it.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, Strict, model_validator
from ruamel.yaml import YAML

from rlvr.errors import ParamsError
from rlvr.section import (Bool, Dict, Float, Int, NonEmptyStr, Str, deref, holds, json_schema,
                          require, section, validate)

PARAMS_FILE = Path("params.yaml")
SCHEMA_FILE = Path("params.schema.json")
SEED_MAX = 2**32 - 1  # numpy's seed range
# configs/accelerate/<name>.yaml (tests/test_distributed.py checks they exist and parse).
ACCELERATE_CONFIG_NAMES = ("ddp", "fsdp", "deepspeed_zero2", "deepspeed_zero3")
# The stage names of dvc.yaml (tests/test_config.py checks they agree).
STAGES = ("check_params", "reward_tests", "validate", "prepare_model", "smoke", "train",
          "evaluate", "report")
# GRPOConfig fields rlvr.grpo.config.grpo_config sets itself (train.grpo.extra must not).
PIPELINE_GRPO_FIELDS = ("output_dir", "max_steps", "seed", "data_seed", "reward_weights",
                        "logging_steps", "logging_nan_inf_filter", "report_to", "save_strategy",
                        "save_steps", "save_total_limit", "disable_tqdm", "chat_template_kwargs")
# TRL 1.16 GRPOConfig.loss_type values and transformers 5 SchedulerType values (tests check both
# against the installed libraries).
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
LR_SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                 "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau",
                 "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay", "greedy")
# A byte-level BPE tokenizer holds the 256 byte tokens and the 3 special tokens before any merge.
LOCAL_LLM_MIN_VOCAB = 300
_EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def _compiles(pattern: str) -> bool:
    import regex  # the package the format reward matches with (rlvr.rewards.verifiers)

    try:
        regex.compile(pattern)
    except regex.error:
        return False
    return True


def _inside_repo(path: str) -> bool:
    return bool(path) and not Path(path).is_absolute() and ".." not in Path(path).parts \
        and not set(path) & set("<>\n\r")


Regex = Annotated[str, Strict(), holds(_compiles, "must be a regular expression that compiles")]
RepoPath = Annotated[str, Strict(), holds(_inside_repo, "must be a non-empty path inside the "
                                          "repository (relative, no '..', no '<', '>' or line "
                                          "break)")]


@section("data")
class DataParams:
    train_path: NonEmptyStr = Field("data/grpo_train.jsonl", description="JSONL file of training "
                                    "rows (id, prompt, verifier).")
    eval_path: NonEmptyStr = Field("data/grpo_eval.jsonl", description="JSONL file of held-out "
                                   "test rows; must share no prompt with train or validation. Read "
                                   "only by validate and evaluate: nothing that trains or selects "
                                   "ever sees it.")
    val_path: NonEmptyStr = Field("data/grpo_val.jsonl", description="JSONL file of validation "
                                  "rows, scored during training (held-out curves, best-checkpoint "
                                  "selection); shares no prompt with train or test.")
    train_rows: Int = Field(64, ge=1, description="Exact number of rows the training file must "
                            "have.")
    max_prompt_chars: Int = Field(200, ge=1, description="Longest prompt allowed, in characters. "
                                  "TRL never truncates prompts, so length is bounded here, in the "
                                  "data.")

    @model_validator(mode="after")
    def _check(self) -> DataParams:
        require(self.eval_path != self.train_path, "data.eval_path", self.eval_path,
                 "must differ from data.train_path (held-out rows are not training rows)")
        require(self.val_path not in (self.train_path, self.eval_path), "data.val_path",
                 self.val_path, "must differ from data.train_path and data.eval_path (three "
                 "separate files: train, validation, test)")
        return self


@section("rewards.length")
class LengthParams:
    lam: Float = Field(0.5, ge=0, description="Weight lambda of the Kimi k1.5 length term.")
    l_min: Float = Field(1.0, ge=0, description="Length (completion tokens) that earns the full "
                         "bonus when correct.")
    l_max: Float = Field(12.0, gt=0, description="Length at which a correct answer earns 0 and a "
                         "wrong one the full penalty.")
    l_target: Float = Field(8.0, ge=0, description="Wrong answers longer than this are penalised.")

    @model_validator(mode="after")
    def _check(self) -> LengthParams:
        require(self.l_min < self.l_max, "rewards.length.l_min", self.l_min,
                 f"must be below l_max ({self.l_max})")
        require(self.l_min <= self.l_target < self.l_max, "rewards.length.l_target",
                 self.l_target, f"must be in [l_min, l_max) ([{self.l_min}, {self.l_max}))")
        return self


@section("rewards")
class RewardsParams:
    funcs: Annotated[list[Str], Strict()] = Field(
        default_factory=lambda: ["correctness", "format"], min_length=1,
        description="Reward functions by registry name (rlvr.rewards.REWARD_FUNCS).")
    weights: Annotated[list[Annotated[float, Strict(), Field(ge=0)]], Strict()] = Field(
        default_factory=lambda: [1.0, 0.2],
        description="One weight per reward function, same order (TRL's reward_weights).")
    format_pattern: Regex = Field(r"^\s*\(*\d+\)*(\s*[-+*/]\s*\(*\d+\)*)+\s*$", description="Regex "
                                "the whole completion must match for the format reward.")
    length: LengthParams = Field(default_factory=LengthParams, description="The length term's "
                                 "parameters (used when 'length' is in funcs).")

    @model_validator(mode="after")
    def _check(self) -> RewardsParams:
        # Names are checked against the registry by rlvr.rewards.registry.check_reward_names
        # (every stage calls it first), so this module needs no reward code.
        require(len(set(self.funcs)) == len(self.funcs), "rewards.funcs", self.funcs,
                 "must name each reward function once")
        require(len(self.weights) == len(self.funcs), "rewards.weights", self.weights,
                 f"needs one weight per reward function ({len(self.funcs)})")
        require(sum(self.weights) > 0, "rewards.weights", self.weights,
                 "must sum to more than 0 (the rewards are averaged with these weights)")
        return self


@section("gate")
class GateParams:
    tests: Annotated[list[NonEmptyStr], Strict()] = Field(
        default_factory=lambda: ["tests/rewards", "rlvr/rewards", "rlvr/grpo_math.py"],
        min_length=1, description="Pytest paths of the offline reward tests that gate every "
        "stage (test files and the doctests of the reward modules).")


@section("model.tiny")
class TinyModelParams:
    hidden_size: Int = Field(128, ge=1, description="Width of the tiny Qwen3 model.")
    intermediate_size: Int = Field(512, ge=1, description="MLP width.")
    num_hidden_layers: Int = Field(2, ge=1, description="Transformer blocks.")
    num_attention_heads: Int = Field(4, ge=1, description="Query heads (hidden_size must divide "
                                     "by it).")
    num_key_value_heads: Int = Field(2, ge=1, description="Key/value heads (grouped-query "
                                     "attention).")
    max_position_embeddings: Int = Field(256, ge=1, description="Longest prompt + completion, in "
                                         "characters.")

    @model_validator(mode="after")
    def _check(self) -> TinyModelParams:
        require(self.hidden_size % self.num_attention_heads == 0, "model.tiny.hidden_size",
                 self.hidden_size, f"must be divisible by num_attention_heads "
                                   f"({self.num_attention_heads})")
        require(self.num_attention_heads % self.num_key_value_heads == 0,
                 "model.tiny.num_key_value_heads", self.num_key_value_heads,
                 "must divide num_attention_heads")
        return self


@section("model.local_llm")
class LocalLLMParams:
    """The reduced Qwen3 of model.init: local_llm (rlvr/local_llm.py). Its defaults give ~1.8M
    parameters; Qwen3-0.6B is vocab 151936, hidden 1024, intermediate 3072, 28 layers, 16 heads,
    8 kv heads, head_dim 128."""
    vocab_size: Int = Field(512, ge=LOCAL_LLM_MIN_VOCAB, description="Embedding rows of the "
                            "model. The byte-level BPE tokenizer is trained on the task's text to "
                            "at most this many tokens (256 bytes + merges + 3 special tokens) and "
                            "the model is padded up to it, as Qwen's is.")
    hidden_size: Int = Field(256, ge=1, description="Model width.")
    intermediate_size: Int = Field(768, ge=1, description="MLP width.")
    num_hidden_layers: Int = Field(2, ge=1, description="Transformer blocks.")
    num_attention_heads: Int = Field(4, ge=1, description="Query heads.")
    num_key_value_heads: Int = Field(2, ge=1, description="Key/value heads (grouped-query "
                                     "attention; must divide num_attention_heads).")
    head_dim: Int = Field(64, ge=1, description="Width of one attention head (Qwen3 sets it apart "
                          "from hidden_size / heads); even, for the rotary embedding.")
    max_position_embeddings: Int = Field(1024, ge=1, description="Longest prompt + completion, "
                                         "in tokens.")

    @model_validator(mode="after")
    def _check(self) -> LocalLLMParams:
        require(self.num_attention_heads % self.num_key_value_heads == 0,
                 "model.local_llm.num_key_value_heads", self.num_key_value_heads,
                 f"must divide num_attention_heads ({self.num_attention_heads})")
        require(self.head_dim % 2 == 0, "model.local_llm.head_dim", self.head_dim,
                 "must be even (the rotary embedding turns pairs of dimensions)")
        return self


@section("model.warm_start")
class WarmStartParams:
    steps: Int = Field(300, ge=0, description="Supervised steps on well-formed expressions over "
                       "each training row's numbers, NOT checked against the target (0 = no warm "
                       "start).")
    batch_size: Int = Field(128, ge=1, description="Examples per warm-start step.")
    learning_rate: Float = Field(3e-3, gt=0, description="AdamW learning rate of the warm start.")


@section("model.lora")
class LoraParams:
    enabled: Bool = Field(False, description="Train LoRA adapters instead of all weights (large "
                          "models).")
    r: Int = Field(16, ge=1, description="LoRA rank.")
    alpha: Int = Field(32, gt=0, description="LoRA alpha (scale = alpha / r).")
    dropout: Float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA path.")
    target_modules: NonEmptyStr = Field("all-linear", description="Which modules get adapters "
                                        "(peft's 'all-linear' or a name).")


@section("model")
class ModelParams:
    init: Literal["tiny", "pretrained", "local_llm"] = Field(
        "tiny", description="'tiny': build the tiny Qwen3 default locally; 'pretrained': load "
        "name_or_path; 'local_llm': build a reduced Qwen3 with a byte-level BPE tokenizer and a "
        "ChatML chat template locally, saved and loaded like a hub model (model.local_llm).")
    name_or_path: Str = Field("", description="A local Hugging Face causal-LM folder, or a hub id "
                              "where the network allows (init: pretrained).")
    chat_template: Bool = Field(False, description="Wrap prompts as chat messages (instruct "
                                "models); the tiny default reads plain text.")
    chat_template_kwargs: Dict = Field(default_factory=dict, description="Variables for the chat "
                                       "template, passed to apply_chat_template in training, "
                                       "validation and evaluation alike (Qwen3: {enable_thinking: "
                                       "false}, or it writes a <think> block before the answer).")
    tiny: TinyModelParams = Field(default_factory=TinyModelParams, description="Sizes of the tiny "
                                  "default.")
    local_llm: LocalLLMParams = Field(default_factory=LocalLLMParams, description="Sizes of the "
                                      "local_llm model and its tokenizer.")
    warm_start: WarmStartParams = Field(default_factory=WarmStartParams, description="Supervised "
                                        "warm start that turns the random tiny model into a "
                                        "reference policy that writes well-formed answers "
                                        "(model.init: tiny only).")
    lora: LoraParams = Field(default_factory=LoraParams, description="LoRA adapters for GRPO "
                             "(peft).")

    @model_validator(mode="after")
    def _check(self) -> ModelParams:
        require(self.chat_template or not self.chat_template_kwargs, "model.chat_template_kwargs",
                 self.chat_template_kwargs, "applies only with model.chat_template: true")
        require(all(isinstance(key, str) for key in self.chat_template_kwargs),
                 "model.chat_template_kwargs", self.chat_template_kwargs,
                 "must map template variable names to values")
        require(self.init != "pretrained" or bool(self.name_or_path), "model.name_or_path",
                 self.name_or_path, "must name a model folder or hub id when model.init is "
                                    "'pretrained'")
        return self


@section("train.grpo")
class GRPOParams:
    """GRPOConfig fields, under TRL's own names (the rest keep TRL's defaults unless set in extra)."""
    learning_rate: Float = Field(2e-4, gt=0, description="AdamW learning rate.")
    beta: Float = Field(0.05, ge=0, description="KL coefficient against the reference (base) "
                        "policy; 0 = no reference model and no KL. With a schedule, the value it "
                        "ends at.")
    num_generations: Int = Field(8, ge=2, description="G: completions sampled per prompt (one "
                                 "group).")
    per_device_train_batch_size: Int = Field(128, ge=1, description="Completions per step "
                                             "(prompts per step x G); must be divisible by "
                                             "num_generations.")
    gradient_accumulation_steps: Int = Field(1, ge=1, description="Micro-batches per optimizer "
                                             "step.")
    max_completion_length: Int = Field(8, ge=1, description="Longest completion, in tokens.")
    temperature: Float = Field(1.0, gt=0, description="Sampling temperature of the rollouts.")
    top_p: Float = Field(1.0, gt=0, le=1, description="Nucleus sampling of the rollouts.")
    loss_type: Literal[LOSS_TYPES] = Field("dapo", description="TRL loss aggregation: grpo, "
                                           "dr_grpo, dapo, bnpo, ...")
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="Advantage scaling: group (divide by the group std), batch, or none.")
    epsilon: Float = Field(0.2, gt=0, description="PPO clip range of the importance ratio.")
    num_iterations: Int = Field(1, ge=1, description="Updates per generated batch (mu in the GRPO "
                                "paper).")
    max_grad_norm: Float = Field(1.0, gt=0, description="Gradient clipping.")
    lr_scheduler_type: Literal[LR_SCHEDULERS] = Field("constant", description="Learning-rate "
                                                      "schedule (transformers names).")
    use_cpu: Bool = Field(True, description="Train on CPU (the default machine has no GPU).")
    bf16: Bool = Field(False, description="bfloat16 mixed precision (GPU only).")
    use_vllm: Bool = Field(False, description="Generate rollouts with vLLM (GPU only).")
    extra: Dict = Field(default_factory=dict, description="Any other GRPOConfig field, by TRL's "
                        "name (e.g. vllm_mode: colocate).")

    @model_validator(mode="after")
    def _check(self) -> GRPOParams:
        # extra is for the GRPOConfig fields params.yaml does not name: a field named above (its
        # rule would be bypassed, and evaluate reads the named sampling fields) or one the
        # pipeline sets itself must not come in through it
        for key in self.extra:
            require(key not in GRPOParams.__dataclass_fields__ and key not in PIPELINE_GRPO_FIELDS,
                     f"train.grpo.extra.{key}", self.extra[key],
                     f"set train.grpo.{key} instead" if key in GRPOParams.__dataclass_fields__
                     else "is set by the pipeline (rlvr.grpo.config.grpo_config), not by params")
        require(self.per_device_train_batch_size % self.num_generations == 0,
                 "train.grpo.per_device_train_batch_size", self.per_device_train_batch_size,
                 f"must be divisible by num_generations ({self.num_generations})")
        require(not (self.bf16 and self.use_cpu), "train.grpo.bf16", self.bf16,
                 "needs a GPU: set use_cpu: false, or bf16: false on CPU")
        return self


@section("train.beta_schedule")
class BetaScheduleParams:
    kind: Literal["constant", "warmup", "adaptive"] = Field(
        "constant", description="constant: beta throughout; warmup: linear from beta_start to "
        "beta over warmup_steps; adaptive: a PPO-style controller steering KL to target_kl.")
    beta_start: Float = Field(0.0, ge=0, description="Beta at step 0 (warmup; also the adaptive "
                              "start).")
    warmup_steps: Int = Field(100, ge=1, description="Steps of the linear warm-up.")
    target_kl: Float = Field(0.05, gt=0, description="KL the adaptive controller aims for (per "
                             "token, k3).")
    horizon: Int = Field(100, ge=1, description="Adaptive controller's horizon: larger reacts "
                         "more slowly.")


@section("train")
class TrainParams:
    max_steps: Int = Field(400, ge=1, description="GRPO optimizer steps of the full run.")
    advantage: Literal["group", "running_mean"] = Field(
        "group", description="group: GRPO's per-group baseline (TRL's own computation); "
        "running_mean: the ablation with no group normalisation, one global running mean of the "
        "reward as the baseline, no std scaling.")
    running_mean_momentum: Float = Field(0.9, ge=0, lt=1, description="running_mean: weight of "
                                         "the old baseline in each update (exponential moving "
                                         "average).")
    save_steps: Int = Field(50, ge=1, description="Checkpoint every this many steps; a killed run "
                            "resumes from the last one.")
    log_every: Int = Field(25, ge=1, description="The console shows one line (step, reward, "
                           "correctness, KL, beta, s/step) every this many steps of the smoke and "
                           "training runs; every step still goes to history.jsonl and DVCLive.")
    processes: Int = Field(1, ge=1, description="Training processes (ranks) of the smoke and full "
                           "runs: above 1, the stage runs under `accelerate launch` (DDP; gloo on "
                           "CPU). per_device_train_batch_size is per rank, as in TRL: the global "
                           "batch is processes x per_device_train_batch_size x "
                           "gradient_accumulation_steps.")
    accelerate_config: Literal[("", *ACCELERATE_CONFIG_NAMES)] = Field(
        "", description="With processes above 1: '' for plain DDP, or the name of an accelerate "
        "config in configs/accelerate/ (ddp, fsdp, deepspeed_zero2, deepspeed_zero3) for "
        "multi-GPU runs.")
    eval_steps: Int = Field(50, ge=0, description="Score the policy on the validation rows "
                            "(data.val_path) at step 0 and every this many steps, as evaluate "
                            "scores a split (mean reward of evaluate.samples seeded samples, "
                            "greedy success): curves next to the training reward. 0: never.")
    select: Literal["last", "best_val"] = Field(
        "last", description="Which weights become models/final: last (the last step) or best_val "
        "(the checkpoint with the best validation mean reward, the earliest of equals; needs "
        "eval_steps, and save_steps a multiple of it).")
    patience: Int = Field(0, ge=0, description="best_val only: stop after this many validations "
                          "in a row without a new best. 0: never stop early.")
    dynamic_sampling: Bool = Field(False, description="DAPO's dynamic sampling: fill each "
                                   "training batch only with groups whose G rewards are not all "
                                   "equal (the others carry no gradient), sampling more prompts "
                                   "for up to max_sampling_rounds rounds; the loss sees only the "
                                   "kept groups. Logs dynamic_sampling/{rounds,kept_share,"
                                   "oversampling} and kl_first_batch, the KL over each step's "
                                   "first batch, every group (TRL's kl covers the kept ones "
                                   "only), which the KL diagnosis, the alarms and the adaptive "
                                   "beta read. (params.yaml turns it on: the Step 8 "
                                   "comparison.)")
    max_sampling_rounds: Int = Field(3, ge=1, description="dynamic_sampling: generation rounds "
                                     "per step at most (1 = filter only, never resample).")
    grpo: GRPOParams = Field(default_factory=GRPOParams, description="GRPOConfig fields (shared "
                             "with the smoke run).")
    beta_schedule: BetaScheduleParams = Field(default_factory=BetaScheduleParams,
                                              description="How beta moves during training.")

    @model_validator(mode="after")
    def _check(self) -> TrainParams:
        if self.select == "best_val":
            require(self.eval_steps > 0, "train.eval_steps", self.eval_steps,
                     "must be above 0 with train.select = 'best_val' (selection needs the "
                     "validation scores)")
            require(self.save_steps % self.eval_steps == 0, "train.save_steps",
                     self.save_steps, f"must be a multiple of train.eval_steps "
                     f"({self.eval_steps}) with train.select = 'best_val': the best step must "
                     "have a checkpoint")
        if self.dynamic_sampling:
            require(self.advantage == "group", "train.dynamic_sampling", True,
                     "needs train.advantage = 'group' (it drops the groups whose rewards are all "
                     "equal, which only group baselines leave without a gradient)")
        require(self.patience == 0 or self.select == "best_val", "train.patience",
                 self.patience, "needs train.select = 'best_val' (early stopping keeps the "
                 "best checkpoint); set it to 0 or select best_val")
        # A resumed run generates afresh at its first step: a checkpoint between two updates on
        # one generated batch could not resume identically. TRL generates every
        # steps_per_generation x num_iterations micro-batches (steps_per_generation defaults to
        # gradient_accumulation_steps, one optimizer step).
        grpo = self.grpo
        if self.accelerate_config:
            require(self.processes > 1, "train.processes", self.processes,
                     f"must be above 1 with train.accelerate_config = "
                     f"'{self.accelerate_config}' (one process needs no launcher config)")
            require(not grpo.use_cpu, "train.grpo.use_cpu", grpo.use_cpu,
                     f"must be false with train.accelerate_config = '{self.accelerate_config}' "
                     "(a multi-GPU config); on CPU leave accelerate_config '' (DDP over gloo)")
        per_generation = grpo.extra.get("steps_per_generation")
        if per_generation is None:
            per_generation = grpo.gradient_accumulation_steps
        require(isinstance(per_generation, int) and not isinstance(per_generation, bool)
                 and per_generation > 0,
                 "train.grpo.extra.steps_per_generation", per_generation,
                 "must be a positive integer")
        require(self.save_steps * grpo.gradient_accumulation_steps
                 % (per_generation * grpo.num_iterations) == 0, "train.save_steps",
                 self.save_steps, f"must fall on a fresh batch of rollouts: a multiple of "
                                  f"num_iterations x steps_per_generation / "
                                  f"gradient_accumulation_steps ({grpo.num_iterations} x "
                                  f"{per_generation} / {grpo.gradient_accumulation_steps})")
        if self.dynamic_sampling:
            require(per_generation == 1, "train.dynamic_sampling", True,
                     f"needs one optimizer micro-batch per generation (steps_per_generation "
                     f"{per_generation}): a batch left short of kept groups cannot be split; "
                     "set gradient_accumulation_steps and extra.steps_per_generation to 1")
            # its drift KL is measured when a batch is generated: with num_iterations > 1 most
            # steps would log TRL's kept-group KL alone, and the KL series would mix the two
            require(grpo.num_iterations == 1, "train.dynamic_sampling", True,
                     f"needs train.grpo.num_iterations = 1 (it is {grpo.num_iterations}): "
                     "the KL the diagnosis reads is measured on each generated batch; set "
                     "num_iterations to 1 or dynamic_sampling to false")
        return self


@section("smoke")
class SmokeParams:
    max_steps: Int = Field(50, ge=1, description="Steps of the smoke run that proves the pipe "
                           "before the full run.")
    min_spread_share: Float = Field(0.1, ge=0, le=1, description="Smallest acceptable share of "
                                    "groups whose rewards differ (no spread = no gradient).")


@section("evaluate")
class EvaluateParams:
    samples: Int = Field(32, ge=1, description="n: sampled completions per prompt, for the mean "
                         "sampled reward and pass@k up to k = n (the validation rows during "
                         "training too).")
    seed: Int = Field(1234, ge=0, le=SEED_MAX, description="Sampling seed, the same for the "
                      "step-0 and the final policy (paired).")
    confidence: Float = Field(0.95, gt=0, lt=1, description="Confidence level of the paired "
                              "bootstrap CI.")
    n_resamples: Int = Field(10000, ge=1, description="Bootstrap resamples.")


@section("report.alarms")
class AlarmParams:
    format_rise: Float = Field(0.1, ge=0, description="Alarm 'format up, correctness flat' when "
                               "the smoothed format reward gains more than this over the run ...")
    correctness_flat: Float = Field(0.02, ge=0, description="... while the smoothed correctness "
                                    "gains less than this.")
    length_growth: Float = Field(1.5, gt=1, description="Alarm 'completion length inflating' "
                                 "when the smoothed length ends above this many times its start.")
    kl_spike_ratio: Float = Field(5.0, gt=1, description="Alarm 'KL spike' when one step's KL "
                                  "exceeds this many times the mean of the report.window steps "
                                  "before it ...")
    kl_spike_min: Float = Field(0.05, ge=0, description="... and is above this (spikes of tiny "
                                "KLs are noise).")
    overfit_drop: Float = Field(0.05, ge=0, description="Alarm 'overfitting' when the validation "
                                "mean reward ends this far below its peak while the training "
                                "reward rose after it.")
    zero_spread_share: Float = Field(0.5, ge=0, le=1, description="Alarm 'no learning signal' "
                                     "when the smoothed share of groups with no reward spread "
                                     "ends above this.")
    diversity_drop: Float = Field(0.5, gt=0, lt=1, description="Alarm 'diversity collapse' when, "
                                  "on the decisive split, the distinct correct answers per solved "
                                  "prompt or the policy's entropy on its own samples end more "
                                  "than this share below step 0's while the mean reward rose.")


@section("report")
class ReportParams:
    window: Int = Field(50, ge=1, description="Steps in the moving averages the KL/beta diagnosis "
                        "compares.")
    kl_tiny: Float = Field(0.01, ge=0, description="'Too tight' if the smoothed KL never exceeds "
                           "this ...")
    plateau_gain: Float = Field(0.02, ge=0, description="... and the reward gains less than this "
                                "over the second half.")
    kl_high: Float = Field(1.0, gt=0, description="'Too loose' if the smoothed KL ends above "
                           "this, ...")
    kl_rising_ratio: Float = Field(1.5, gt=1, description="... or the last quarter's KL exceeds "
                                   "the third quarter's by this factor (still climbing), ...")
    collapse_drop: Float = Field(0.1, ge=0, description="... or the smoothed reward ends this far "
                                 "below its peak.")
    min_slice_rows: Int = Field(8, ge=1, description="A tag (a row's `tags`) with at least this "
                                "many rows in the decisive split weighs in the verdict: if it "
                                "regressed, the verdict is `mixed`, not `improved`.")
    slice_drop_from: Float = Field(0.1, ge=0, le=1, description="A tag regressed when its "
                                   "mean-reward or pass@n CI lies below 0, or when its success or "
                                   "pass@n falls from at least this ...")
    slice_drop_to: Float = Field(0.02, ge=0, le=1, description="... to at most this (below "
                                 "slice_drop_from).")
    alarms: AlarmParams = Field(default_factory=AlarmParams, description="Thresholds of the "
                                "reward-hacking, overfitting and forgetting alarms.")


@section("orchestration")
class OrchestrationParams:
    retries: Int = Field(2, ge=0, description="Retries of a training stage that fails (a killed "
                         "run resumes from its checkpoint).")
    retry_delay_seconds: Int = Field(10, ge=0, description="Wait before a retry.")
    retried_stages: Annotated[list[Literal[STAGES]], Strict()] = Field(
        default_factory=lambda: ["prepare_model", "smoke", "train"], description="Stages the "
        "flow retries; the gate and validation never are (a retry cannot fix a failing test or a "
        "bad row).")
    default_timeout: Int = Field(1800, ge=1, description="Seconds a stage may run before the flow "
                                 "fails it.")
    timeouts: Dict = Field(default_factory=lambda: {"train": 3600}, description="Per-stage "
                           "timeouts in seconds, overriding default_timeout.")
    ablations: Dict = Field(default_factory=lambda: {
        "no-kl": ["train.grpo.beta=0"], "no-group-norm": ["train.advantage=running_mean"]},
        description="Experiments flow: name -> list of `-S` overrides.")
    jobs: Int = Field(1, ge=1, description="Experiments flow: queued experiments run this many at "
                      "a time (`dvc exp run --run-all --jobs N`, each in its own temporary copy).")
    sweep: Dict = Field(default_factory=lambda: {"train.grpo.beta": [0.01, 0.1]},
                        description="Experiments flow: param -> values, queued as a grid.")
    grids: Dict = Field(default_factory=dict, description="Experiments flow, only when named "
                        "(`python -m flows.experiments --grid NAME`): name -> {param: values}; "
                        "every combination is queued (DVC's grid of `-S` lists).")

    @model_validator(mode="after")
    def _check(self) -> OrchestrationParams:
        for stage, seconds in self.timeouts.items():
            require(isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
                     and math.isfinite(seconds) and seconds > 0,
                     f"orchestration.timeouts[{stage!r}]", seconds,
                     "must be a positive number of seconds")
        for stage in self.timeouts:
            require(stage in STAGES, "orchestration.timeouts", stage,
                     "names no stage; stages: " + ", ".join(STAGES))
        for name, overrides in self.ablations.items():
            require(bool(_EXPERIMENT_NAME.fullmatch(str(name))), "orchestration.ablations", name,
                     "must be a DVC experiment name: letters, digits, '-' and '_'")
            require(isinstance(overrides, list) and bool(overrides)
                     and all(isinstance(o, str) and "=" in o for o in overrides),
                     f"orchestration.ablations.{name}", overrides,
                     "must be a list of `-S` overrides such as train.grpo.beta=0")
            for override in overrides:
                _require_param_key(override.split("=", 1)[0].strip(),
                                   f"orchestration.ablations.{name}")
        for key, values in self.sweep.items():
            _require_param_key(str(key), "orchestration.sweep")
            require(isinstance(values, list) and bool(values), f"orchestration.sweep.{key}",
                     values, "must be a non-empty list of values")
        for name, grid in self.grids.items():
            require(bool(_EXPERIMENT_NAME.fullmatch(str(name))), "orchestration.grids", name,
                     "must be a name of letters, digits, '-' and '_'")
            require(isinstance(grid, dict) and bool(grid), f"orchestration.grids.{name}", grid,
                     "must map params to lists of values, e.g. {seed: [0, 1]}")
            for key, values in grid.items():
                _require_param_key(str(key), f"orchestration.grids.{name}")
                require(isinstance(values, list) and bool(values),
                         f"orchestration.grids.{name}.{key}", values,
                         "must be a non-empty list of values")
        return self


@section("paths")
class PathsParams:
    """Where every stage output lives: dvc.yaml interpolates these (${paths.*}), the stages and
    the flows read them, so no path is spelled in two places."""
    gate_verdict: RepoPath = Field("reports/gate/reward_tests.json", description="The "
                                   "reward-test gate's verdict (JSON: counts, failing tests).")
    gate_metrics: RepoPath = Field("metrics/gate.json", description="The gate's headline (a DVC "
                                   "metric): passed, tests, failed.")
    validation_summary: RepoPath = Field("reports/validation/summary.json", description="Data "
                                         "validation: per file and rule.")
    validation_metrics: RepoPath = Field("metrics/data.json", description="Data validation's "
                                         "headline (a DVC metric): passed, problems.")
    data_docs: RepoPath = Field("reports/validation/data_docs", description="Great Expectations "
                                "Data Docs (HTML folder; not a DVC output: GX stamps each page "
                                "with the run time).")
    base_model: RepoPath = Field("models/base", description="The base policy: reference model "
                                 "and step 0.")
    prepare_summary: RepoPath = Field("reports/prepare/summary.json", description="How the base "
                                      "policy was made.")
    smoke_checks: RepoPath = Field("reports/smoke/checks.json", description="The smoke run's "
                                   "checks.")
    smoke_metrics: RepoPath = Field("metrics/smoke.json", description="The smoke run's headline "
                                    "(a DVC metric): passed, failed checks, step-0 reward.")
    step0: RepoPath = Field("reports/smoke/step0.json", description="The step-0 reward baseline "
                            "and the first log line.")
    checkpoints: RepoPath = Field("models/checkpoints", description="Training checkpoints: a "
                                  "resume cache, not a result (no DVC out).")
    final_model: RepoPath = Field("models/final", description="The trained policy.")
    train_summary: RepoPath = Field("reports/train/summary.json", description="What the training "
                                    "run did: first and last steps' means, final KL and beta.")
    train_metrics: RepoPath = Field("metrics/train.json", description="The training run's "
                                    "headline (a DVC metric): steps, reward, KL.")
    train_history: RepoPath = Field("reports/train/history.jsonl", description="Every logged "
                                    "training step (JSONL).")
    train_curves: RepoPath = Field("reports/train/curves.png", description="Training curves "
                                   "(PNG).")
    train_live: RepoPath = Field("reports/train/live", description="DVCLive folder of the "
                                 "training curves.")
    eval_summary: RepoPath = Field("reports/eval/summary.json", description="Step 0 vs final, "
                                   "every statistic of both splits.")
    eval_metrics: RepoPath = Field("metrics/eval.json", description="Step 0 vs final on held-out "
                                   "prompts, the headline (a DVC metric): verdict, reward, greedy "
                                   "success, the delta with its CI, pass@1 and pass@n.")
    eval_per_prompt: RepoPath = Field("reports/eval/per_prompt.jsonl", description="Step 0 vs "
                                      "final, one record per prompt (JSONL).")
    per_prompt_figure: RepoPath = Field("reports/figures/per_prompt.png", description="Per-prompt "
                                        "scatter of the retrospective (PNG).")
    pass_at_k_figure: RepoPath = Field("reports/figures/pass_at_k.png", description="pass@k "
                                       "against k, step 0 and final, of the retrospective (PNG).")
    retrospective_md: RepoPath = Field("reports/retrospective.md", description="The "
                                       "retrospective, markdown.")
    retrospective_html: RepoPath = Field("reports/retrospective.html", description="The "
                                         "retrospective, self-contained HTML.")
    timing: RepoPath = Field("reports/timing", description="Wall time per stage (not an output: "
                             "it differs on every run).")
    params_check: RepoPath = Field("reports/params/check.json", description="The params check's "
                                   "verdict: the same bytes for every valid params.yaml, so only "
                                   "the stages whose params changed rerun.")


@section("")
class Params:
    seed: Int = Field(0, ge=0, le=SEED_MAX, description="Seed for everything random in the "
                      "pipeline.")
    data: DataParams = Field(default_factory=DataParams, description="Where the rows are and what "
                             "they must look like.")
    rewards: RewardsParams = Field(default_factory=RewardsParams, description="Which rewards "
                                   "train the policy, and how they are weighted.")
    gate: GateParams = Field(default_factory=GateParams, description="The reward-test gate.")
    model: ModelParams = Field(default_factory=ModelParams, description="The policy to post-train "
                               "and how its base is prepared.")
    smoke: SmokeParams = Field(default_factory=SmokeParams, description="The short run that "
                               "proves the pipe.")
    train: TrainParams = Field(default_factory=TrainParams, description="The full GRPO run.")
    evaluate: EvaluateParams = Field(default_factory=EvaluateParams, description="Step 0 vs final "
                                     "audit.")
    report: ReportParams = Field(default_factory=ReportParams, description="Thresholds of the "
                                 "retrospective's KL/beta diagnosis.")
    orchestration: OrchestrationParams = Field(default_factory=OrchestrationParams,
                                               description="The Prefect flows: retries, timeouts, "
                                               "experiments.")
    paths: PathsParams = Field(default_factory=PathsParams, description="Where every output "
                               "lives.")


def _require_param_key(key: str, where: str) -> None:
    """`key` (dotted) must name a params.yaml field, e.g. train.grpo.beta, or a key inside a
    mapping field (train.grpo.extra.<any GRPOConfig field>)."""
    schema = node = json_schema(Params)
    for part in key.split("."):
        node = deref(schema, node)
        if node.get("type") == "object" and "properties" not in node:  # a mapping field
            return
        if part not in node.get("properties", {}):
            raise ParamsError(f"params.yaml: {where} = {key!r}: names no params.yaml field")
        node = node["properties"][part]


def params_schema() -> dict:
    """The JSON Schema of params.yaml (params.schema.json), draft 2020-12 as pydantic writes it."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            **json_schema(Params), "title": "params.yaml"}


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
    return validate(Params, raw or {})


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


if __name__ == "__main__":
    if sys.argv[1:] != ["--schema"]:
        sys.exit(f"usage: python -m rlvr.config --schema > {SCHEMA_FILE}")
    print(json.dumps(params_schema(), indent=2))
