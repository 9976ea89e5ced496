"""The params sections that shape the policy and its GRPO run: model.* (the tiny default, the
local_llm, the warm start, LoRA, a pretrained model) and train.* (TRL's GRPOConfig fields, the
beta schedule, the pipeline's own knobs and the rules between them). rlvr.params.config assembles them
with the other sections into Params."""

from __future__ import annotations

import math
import string
from typing import Literal

from pydantic import Field, model_validator

from rlvr.params.section import Bool, Dict, Float, Int, NonEmptyStr, Str, require, section

# configs/accelerate/<name>.yaml (tests/test_distributed.py checks they exist and parse).
ACCELERATE_CONFIG_NAMES = ("ddp", "ddp_2node", "fsdp", "deepspeed_zero2", "deepspeed_zero3")
# GRPOConfig fields rlvr.grpo.config.grpo_config sets itself (train.grpo.extra must not).
PIPELINE_GRPO_FIELDS = (
    "output_dir",
    "max_steps",
    "seed",
    "data_seed",
    "reward_weights",
    "logging_steps",
    "logging_nan_inf_filter",
    "report_to",
    "save_strategy",
    "save_steps",
    "save_total_limit",
    "disable_tqdm",
    "chat_template_kwargs",
)
# GRPOConfig fields (TRL 1.16) train.grpo.extra must not set, and why: each opens a door the
# pipeline keeps shut (docs/security.md; tests/test_config.py tries each).
_HUB = (
    "uploads to the Hugging Face hub (and the report would print a token): publish with the "
    "registry"
)
_SERVER = (
    "sends the policy and prompts to a vLLM server the pipeline does not start: use vllm_mode: "
    "colocate"
)
EXTRA_REFUSED = {
    "trust_remote_code": "would run the Python code of the model's repository",
    **dict.fromkeys(
        (
            "push_to_hub",
            "hub_token",
            "hub_model_id",
            "hub_strategy",
            "hub_private_repo",
            "hub_always_push",
            "hub_revision",
            "log_completions_hub_repo",
        ),
        _HUB,
    ),
    **dict.fromkeys(
        (
            "vllm_server_base_url",
            "vllm_server_host",
            "vllm_server_port",
            "vllm_server_timeout",
            "vllm_group_port",
        ),
        _SERVER,
    ),
    **dict.fromkeys(
        ("resume_from_checkpoint", "restore_callback_states_from_checkpoint"),
        "resuming is the pipeline's (train resumes from paths.checkpoints by itself)",
    ),
    **dict.fromkeys(
        ("deepspeed", "fsdp", "fsdp_config", "accelerator_config"),
        "the launch comes from train.processes and train.accelerate_config (configs/accelerate/)",
    ),
}
# model_init_kwargs: a dtype only (profiles/gpu.yaml and the GPU check set it); the rest of a
# model's loading is the pipeline's (weights_only, remote code, revision)
MODEL_INIT_KWARGS = ("dtype",)
VLLM_MODES = ("colocate",)  # vLLM inside the training process: no server to trust

# TRL 1.16 GRPOConfig.loss_type values and transformers 5 SchedulerType values (tests check both
# against the installed libraries).
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
CLIPPED_LOSSES = ("grpo", "dr_grpo", "dapo", "bnpo")  # PPO's two-sided clip of the ratio
# guidance: clipped losses whose normaliser does not read the loss mask, so the guides' tokens,
# left out of TRL's mask (no KL, no clip there), still count in it (LUFFY's Z)
GUIDED_LOSSES = ("grpo", "dr_grpo", "dapo")
LR_SCHEDULERS = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
    "greedy",
)
# A byte-level BPE tokenizer holds the 256 byte tokens and the 3 special tokens before any merge.
LOCAL_LLM_MIN_VOCAB = 300
# What the tiny model's character tokenizer encodes (rlvr.policy.models.build_char_tokenizer): every
# printable ASCII character, newline included; anything else would be <unk>, so validate
# rejects rows that hold anything else when model.init is tiny.
TINY_ALPHABET = string.printable.replace("\x0b", "").replace("\x0c", "").replace("\r", "")


@section("model.tiny")
class TinyModelParams:
    hidden_size: Int = Field(128, ge=1, description="Width of the tiny Qwen3 model.")
    intermediate_size: Int = Field(512, ge=1, description="MLP width.")
    num_hidden_layers: Int = Field(2, ge=1, description="Transformer blocks.")
    num_attention_heads: Int = Field(
        4, ge=1, description="Query heads (hidden_size must divide by it)."
    )
    num_key_value_heads: Int = Field(
        2, ge=1, description="Key/value heads (grouped-query attention)."
    )
    max_position_embeddings: Int = Field(
        256, ge=1, description="Longest prompt + completion, in characters."
    )

    @model_validator(mode="after")
    def _check(self) -> TinyModelParams:
        require(
            self.hidden_size % self.num_attention_heads == 0,
            "model.tiny.hidden_size",
            self.hidden_size,
            f"must be divisible by num_attention_heads ({self.num_attention_heads})",
        )
        require(
            self.num_attention_heads % self.num_key_value_heads == 0,
            "model.tiny.num_key_value_heads",
            self.num_key_value_heads,
            "must divide num_attention_heads",
        )
        return self


@section("model.local_llm")
class LocalLLMParams:
    """The reduced Qwen3 of model.init: local_llm (rlvr/policy/local_llm.py). Its defaults give ~1.8M
    parameters; Qwen3-0.6B is vocab 151936, hidden 1024, intermediate 3072, 28 layers, 16 heads,
    8 kv heads, head_dim 128."""

    vocab_size: Int = Field(
        512,
        ge=LOCAL_LLM_MIN_VOCAB,
        description="Embedding rows of the "
        "model. The byte-level BPE tokenizer is trained on the task's text to "
        "at most this many tokens (256 bytes + merges + 3 special tokens) and "
        "the model is padded up to it, as Qwen's is.",
    )
    hidden_size: Int = Field(256, ge=1, description="Model width.")
    intermediate_size: Int = Field(768, ge=1, description="MLP width.")
    num_hidden_layers: Int = Field(2, ge=1, description="Transformer blocks.")
    num_attention_heads: Int = Field(4, ge=1, description="Query heads.")
    num_key_value_heads: Int = Field(
        2,
        ge=1,
        description="Key/value heads (grouped-query attention; must divide num_attention_heads).",
    )
    head_dim: Int = Field(
        64,
        ge=1,
        description="Width of one attention head (Qwen3 sets it apart "
        "from hidden_size / heads); even, for the rotary embedding.",
    )
    max_position_embeddings: Int = Field(
        1024, ge=1, description="Longest prompt + completion, in tokens."
    )

    @model_validator(mode="after")
    def _check(self) -> LocalLLMParams:
        require(
            self.num_attention_heads % self.num_key_value_heads == 0,
            "model.local_llm.num_key_value_heads",
            self.num_key_value_heads,
            f"must divide num_attention_heads ({self.num_attention_heads})",
        )
        require(
            self.head_dim % 2 == 0,
            "model.local_llm.head_dim",
            self.head_dim,
            "must be even (the rotary embedding turns pairs of dimensions)",
        )
        return self


@section("model.warm_start")
class WarmStartParams:
    steps: Int = Field(
        300,
        ge=0,
        description="Supervised steps on well-formed expressions over "
        "each training row's numbers, NOT checked against the target (0 = no warm "
        "start).",
    )
    batch_size: Int = Field(128, ge=1, description="Examples per warm-start step.")
    learning_rate: Float = Field(3e-3, gt=0, description="AdamW learning rate of the warm start.")


@section("model.lora")
class LoraParams:
    enabled: Bool = Field(
        False, description="Train LoRA adapters instead of all weights (large models)."
    )
    r: Int = Field(16, ge=1, description="LoRA rank.")
    alpha: Int = Field(32, gt=0, description="LoRA alpha (scale = alpha / r).")
    dropout: Float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA path.")
    target_modules: NonEmptyStr = Field(
        "all-linear", description="Which modules get adapters (peft's 'all-linear' or a name)."
    )


@section("model")
class ModelParams:
    init: Literal["tiny", "pretrained", "local_llm"] = Field(
        "tiny",
        description="'tiny': build the tiny Qwen3 default locally; 'pretrained': load "
        "name_or_path; 'local_llm': build a reduced Qwen3 with a byte-level BPE tokenizer and a "
        "ChatML chat template locally, saved and loaded like a hub model (model.local_llm).",
    )
    name_or_path: Str = Field(
        "",
        description="A local Hugging Face causal-LM folder, or a hub id "
        "where the network allows (init: pretrained).",
    )
    revision: Str = Field(
        "",
        description="The hub commit, branch or tag of name_or_path ('': the cached main); "
        "prepare_model records the commit it resolved and the sha256 of each weight file in "
        "models/base/source.json, and every stage loads that snapshot (init: pretrained).",
    )
    chat_template: Bool = Field(
        False,
        description="Wrap prompts as chat messages (instruct "
        "models); the tiny default reads plain text.",
    )
    chat_template_kwargs: Dict = Field(
        default_factory=dict,
        description="Variables for the chat "
        "template, passed to apply_chat_template in training, "
        "validation and evaluation alike (Qwen3: {enable_thinking: "
        "false}, or it writes a <think> block before the answer).",
    )
    tiny: TinyModelParams = Field(
        default_factory=TinyModelParams, description="Sizes of the tiny default."
    )
    local_llm: LocalLLMParams = Field(
        default_factory=LocalLLMParams,
        description="Sizes of the local_llm model and its tokenizer.",
    )
    warm_start: WarmStartParams = Field(
        default_factory=WarmStartParams,
        description="Supervised "
        "warm start that turns the random tiny model into a "
        "reference policy that writes well-formed answers "
        "(model.init: tiny only).",
    )
    lora: LoraParams = Field(
        default_factory=LoraParams, description="LoRA adapters for GRPO (peft)."
    )

    @model_validator(mode="after")
    def _check(self) -> ModelParams:
        require(
            self.chat_template or not self.chat_template_kwargs,
            "model.chat_template_kwargs",
            self.chat_template_kwargs,
            "applies only with model.chat_template: true",
        )
        require(
            all(isinstance(key, str) for key in self.chat_template_kwargs),
            "model.chat_template_kwargs",
            self.chat_template_kwargs,
            "must map template variable names to values",
        )
        require(
            self.init != "pretrained" or bool(self.name_or_path),
            "model.name_or_path",
            self.name_or_path,
            "must name a model folder or hub id when model.init is 'pretrained'",
        )
        return self


@section("train.grpo")
class GRPOParams:
    """GRPOConfig fields, under TRL's own names (the rest keep TRL's defaults unless set in extra)."""

    learning_rate: Float = Field(2e-4, gt=0, description="AdamW learning rate.")
    beta: Float = Field(
        0.05,
        ge=0,
        description="KL coefficient against the reference (base) "
        "policy; 0 = no reference model and no KL. With a schedule, the value it "
        "ends at.",
    )
    num_generations: Int = Field(
        8, ge=2, description="G: completions sampled per prompt (one group)."
    )
    per_device_train_batch_size: Int = Field(
        128,
        ge=1,
        description="Completions per step "
        "(prompts per step x G); must be divisible by "
        "num_generations.",
    )
    gradient_accumulation_steps: Int = Field(
        1, ge=1, description="Micro-batches per optimizer step."
    )
    max_completion_length: Int = Field(8, ge=1, description="Longest completion, in tokens.")
    temperature: Float = Field(1.0, gt=0, description="Sampling temperature of the rollouts.")
    top_p: Float = Field(1.0, gt=0, le=1, description="Nucleus sampling of the rollouts.")
    loss_type: Literal[LOSS_TYPES] = Field(
        "dapo", description="TRL loss aggregation: grpo, dr_grpo, dapo, bnpo, ..."
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="Advantage scaling: group (divide by the group std), batch, or none."
    )
    epsilon: Float = Field(0.2, gt=0, description="PPO clip range of the importance ratio.")
    epsilon_high: Float = Field(
        0.0,
        ge=0,
        description="DAPO's clip-higher (Yu et al. 2025; 0.28 "
        "there): the upper clip range, wider than epsilon so unlikely "
        "tokens can rise. 0 = epsilon (TRL's default). Acts only when "
        "the policy ratio can leave 1: num_iterations > 1.",
    )
    top_entropy_quantile: Float = Field(
        1.0,
        ge=0,
        le=1,
        description="Train only on the top "
        "quantile of tokens by entropy (Wang et al. 2025, 'Beyond "
        "the 80/20 Rule'; 0.2 there). 1 = every token.",
    )
    entropy_coef: Float = Field(
        0.0,
        ge=0,
        description="Entropy bonus in the loss (mean per-token "
        "entropy x this); with use_adaptive_entropy, its start. 0 = off.",
    )
    use_adaptive_entropy: Bool = Field(
        False,
        description="Skywork-OR1's adaptive entropy "
        "control: entropy_coef rises while the entropy is below "
        "entropy_target and falls otherwise (TRL's "
        "entropy_coef_delta, _min, _max through extra).",
    )
    entropy_target: Float = Field(
        0.2,
        gt=0,
        description="use_adaptive_entropy: the mean "
        "per-token entropy (nats) it steers to; the tiny policy's is "
        "~0.4 at step 0.",
    )
    num_iterations: Int = Field(
        1, ge=1, description="Updates per generated batch (mu in the GRPO paper)."
    )
    max_grad_norm: Float = Field(1.0, gt=0, description="Gradient clipping.")
    lr_scheduler_type: Literal[LR_SCHEDULERS] = Field(
        "constant", description="Learning-rate schedule (transformers names)."
    )
    use_cpu: Bool = Field(True, description="Train on CPU (the default machine has no GPU).")
    bf16: Bool = Field(False, description="bfloat16 mixed precision (GPU only).")
    use_vllm: Bool = Field(False, description="Generate rollouts with vLLM (GPU only).")
    extra: Dict = Field(
        default_factory=dict,
        description="Any other GRPOConfig field, by TRL's name (e.g. vllm_mode: colocate).",
    )

    @model_validator(mode="after")
    def _check(self) -> GRPOParams:
        # extra is for the GRPOConfig fields params.yaml does not name: a field named above (its
        # rule would be bypassed, and evaluate reads the named sampling fields) or one the
        # pipeline sets itself must not come in through it
        for key in self.extra:
            require(
                key not in GRPOParams.__dataclass_fields__ and key not in PIPELINE_GRPO_FIELDS,
                f"train.grpo.extra.{key}",
                self.extra[key],
                f"set train.grpo.{key} instead"
                if key in GRPOParams.__dataclass_fields__
                else "is set by the pipeline (rlvr.grpo.config.grpo_config), not by params",
            )
            require(
                key not in EXTRA_REFUSED,
                f"train.grpo.extra.{key}",
                "***" if "token" in key else self.extra[key],  # a secret is not repeated
                f"is refused: it {EXTRA_REFUSED.get(key)}",
            )
        kwargs = self.extra.get("model_init_kwargs", {})
        require(
            isinstance(kwargs, dict) and set(kwargs) <= set(MODEL_INIT_KWARGS),
            "train.grpo.extra.model_init_kwargs",
            kwargs,
            f"must be a mapping of {', '.join(MODEL_INIT_KWARGS)} only (e.g. {{dtype: "
            "bfloat16}): how a model loads is the pipeline's",
        )
        require(
            self.extra.get("vllm_mode", VLLM_MODES[0]) in VLLM_MODES,
            "train.grpo.extra.vllm_mode",
            self.extra.get("vllm_mode"),
            f"must be {' or '.join(VLLM_MODES)}: server mode talks to a vLLM server the "
            "pipeline does not start",
        )
        require(
            self.per_device_train_batch_size % self.num_generations == 0,
            "train.grpo.per_device_train_batch_size",
            self.per_device_train_batch_size,
            f"must be divisible by num_generations ({self.num_generations})",
        )
        require(
            not (self.bf16 and self.use_cpu),
            "train.grpo.bf16",
            self.bf16,
            "needs a GPU: set use_cpu: false, or bf16: false on CPU",
        )
        # with one update per generated batch the loss sees the policy that sampled it: the
        # ratio is exactly 1 and no clip range ever acts
        off_policy = (
            self.num_iterations > 1
            or self.extra.get("steps_per_generation", 1) > self.gradient_accumulation_steps
        )
        require(
            self.epsilon_high == 0 or off_policy or self.loss_type not in CLIPPED_LOSSES,
            "train.grpo.epsilon_high",
            self.epsilon_high,
            "has no effect with num_iterations 1: the policy ratio is exactly 1 when the "
            "loss is computed, so clipping never acts; set num_iterations to 2 or more",
        )
        return self


@section("train.beta_schedule")
class BetaScheduleParams:
    kind: Literal["constant", "warmup", "adaptive"] = Field(
        "constant",
        description="constant: beta throughout; warmup: linear from beta_start to "
        "beta over warmup_steps; adaptive: a PPO-style controller steering KL to target_kl.",
    )
    beta_start: Float = Field(
        0.0, ge=0, description="Beta at step 0 (warmup; also the adaptive start)."
    )
    warmup_steps: Int = Field(100, ge=1, description="Steps of the linear warm-up.")
    target_kl: Float = Field(
        0.05, gt=0, description="KL the adaptive controller aims for (per token, k3)."
    )
    horizon: Int = Field(
        100, ge=1, description="Adaptive controller's horizon: larger reacts more slowly."
    )


@section("train")
class TrainParams:
    max_steps: Int = Field(300, ge=1, description="GRPO optimizer steps of the full run.")
    advantage: Literal["group", "running_mean", "pass_at_k"] = Field(
        "group",
        description="group: GRPO's per-group baseline (TRL's own computation); "
        "running_mean: the ablation with no group normalisation, one global running mean of the "
        "reward as the baseline, no std scaling; pass_at_k: Pass@k training's analytic "
        "advantages (Chen et al. 2025) on the correctness reward alone, k = train.pass_at_k: a "
        "group's wrong samples lose less credit once it has a correct one, so a rare correct "
        "answer keeps its pull (rlvr.grpo.advantages.pass_at_k_advantages).",
    )
    pass_at_k: Int = Field(
        4,
        ge=1,
        description="advantage pass_at_k: the k of the pass@k the "
        "group advantages maximise (1 = GRPO's advantages); at most "
        "num_generations.",
    )
    positive_weight: Float = Field(
        1.0,
        gt=0,
        le=1,
        description="Weighted REINFORCE (Zhu et al. "
        "2025, lambda 0.1 there): positive advantages are scaled by "
        "this, negative ones kept, so the loss pushes down wrong "
        "answers more than it pulls up liked ones. 1 = off.",
    )
    unlikeliness: Float = Field(
        0.0,
        ge=0,
        le=1,
        description="The unlikeliness reward (He et al. "
        "2025): a correct sample's correctness reward becomes "
        "1 - unlikeliness x (G - rank) / G, rank 0 being its group's "
        "most likely correct sample under the policy, so rare correct "
        "answers earn more. Costs one forward pass per batch. 0 = off; "
        "not with advantage pass_at_k.",
    )
    resample_unsolved: Bool = Field(
        False,
        description="dynamic_sampling only (ignored without "
        "it, as max_sampling_rounds): a prompt whose group "
        "had no correct answer is sampled again (G more) in the next "
        "round, before new prompts are drawn: more samples where "
        "there is no signal, so a rare answer the policy still gives "
        "now and then is found.",
    )
    start_model: str = Field(
        "models/base",
        description="The policy GRPO starts from, and its KL reference: paths.base_model (the "
        "base), or paths.rft_models (each RL seed from stage rft's model of that seed: RFT then "
        "GRPO; needs audit.baseline rft, full fine-tuning). A path, so that dvc.yaml's train "
        "stage depends on what it starts from. Step 0 stays the base: evaluate measures the "
        "gain over it.",
    )
    guidance: Literal["off", "unsolved", "fraction"] = Field(
        "off",
        description="Off-policy guidance (LUFFY, Yan et al. 2025, arXiv 2504.14945): a "
        "verified answer of the base, from stage verified's sampling of the same seed (the "
        "answers RFT fine-tunes on; set train.guides to paths.verified), replaces a "
        "sampled one in a group. unsolved: the last answer of each group with no correct one; "
        "fraction: the last ceil(guidance_fraction x G) answers of every group. The group's "
        "advantage covers the guide (Eq. 4); its tokens take the shaped loss "
        "-A x p / (p + guidance_gamma), with no clip and no KL (Eq. 6; rlvr/grpo/guidance.py). "
        "Needs "
        "audit.baseline rft. off: none.",
    )
    guides: Str = Field(
        "models/base",
        description="What train's stage depends on for train.guidance's answers (DVC has no "
        "conditional deps): paths.verified (stage verified's answers of each seed) when "
        "guidance is on, paths.base_model (the base, read anyway) when off.",
    )
    guidance_fraction: Float = Field(
        0.125,
        gt=0,
        le=1,
        description="guidance fraction: the share of each group a guide replaces, rounded "
        "up (LUFFY: 1 of 8).",
    )
    guidance_gamma: Float = Field(
        0.1,
        gt=0,
        description="guidance: gamma of the policy shaping f(p) = p / (p + gamma) on the "
        "guides' tokens (LUFFY Eq. 6: 0.1; smaller weighs rare tokens more).",
    )
    guidance_std: Bool = Field(
        True,
        description="guidance: the groups a guide joined divide their advantages by the "
        "group's std as train.grpo.scale_rewards says (LUFFY Eq. 4), or, false, subtract the "
        "mean only (LUFFY's released code, grpo_use_std=False); the other groups keep "
        "train.grpo.scale_rewards. Needs train.advantage group when false.",
    )
    running_mean_momentum: Float = Field(
        0.9,
        ge=0,
        lt=1,
        description="running_mean: weight of "
        "the old baseline in each update (exponential moving "
        "average).",
    )
    save_steps: Int = Field(
        50,
        ge=1,
        description="Checkpoint every this many steps; a killed run resumes from the last one.",
    )
    log_every: Int = Field(
        25,
        ge=1,
        description="The console shows one line (step, reward, "
        "correctness, KL, beta, s/step) every this many steps of the smoke and "
        "training runs; every step still goes to history.jsonl and DVCLive.",
    )
    processes: Int = Field(
        1,
        ge=1,
        description="Training processes (ranks) of the smoke and full "
        "runs: above 1, the stage runs under `accelerate launch` (DDP; gloo on "
        "CPU). per_device_train_batch_size is per rank, as in TRL: the global "
        "batch is processes x per_device_train_batch_size x "
        "gradient_accumulation_steps.",
    )
    accelerate_config: Literal[("", *ACCELERATE_CONFIG_NAMES)] = Field(
        "",
        description="With processes above 1: '' for plain DDP, or the name of an accelerate "
        "config in configs/accelerate/ (ddp, ddp_2node, fsdp, deepspeed_zero2, deepspeed_zero3) "
        "for multi-GPU runs; ddp_2node spans 2 machines (docs/gpu.md).",
    )
    eval_steps: Int = Field(
        50,
        ge=0,
        description="Score the policy on the validation rows "
        "(data.val_path) at step 0 and every this many steps, as evaluate "
        "scores a split (mean reward of evaluate.samples seeded samples, "
        "greedy success): curves next to the training reward. 0: never.",
    )
    select: Literal["last", "best_val"] = Field(
        "last",
        description="Which weights become models/final: last (the last step) or best_val "
        "(the checkpoint with the best validation mean reward, the earliest of equals; needs "
        "eval_steps, and save_steps a multiple of it).",
    )
    patience: Int = Field(
        0,
        ge=0,
        description="best_val only: stop after this many validations "
        "in a row without a new best. 0: never stop early.",
    )
    dynamic_sampling: Bool = Field(
        False,
        description="DAPO's dynamic sampling: fill each "
        "training batch only with groups whose G rewards are not all "
        "equal (the others carry no gradient), sampling more prompts "
        "for up to max_sampling_rounds rounds; the loss sees only the "
        "kept groups. Logs dynamic_sampling/{rounds,kept_share,"
        "oversampling} and kl_first_batch, the KL over each step's "
        "first batch, every group (TRL's kl covers the kept ones "
        "only), which the KL diagnosis, the alarms and the adaptive "
        "beta read. (params.yaml turns it on: the Step 8 "
        "comparison.)",
    )
    max_sampling_rounds: Int = Field(
        3,
        ge=1,
        description="dynamic_sampling: generation rounds "
        "per step at most (1 = filter only, never resample).",
    )
    grpo: GRPOParams = Field(
        default_factory=GRPOParams, description="GRPOConfig fields (shared with the smoke run)."
    )
    beta_schedule: BetaScheduleParams = Field(
        default_factory=BetaScheduleParams, description="How beta moves during training."
    )

    @model_validator(mode="after")
    def _check(self) -> TrainParams:
        if self.select == "best_val":
            require(
                self.eval_steps > 0,
                "train.eval_steps",
                self.eval_steps,
                "must be above 0 with train.select = 'best_val' (selection needs the "
                "validation scores)",
            )
            require(
                self.save_steps % self.eval_steps == 0,
                "train.save_steps",
                self.save_steps,
                f"must be a multiple of train.eval_steps "
                f"({self.eval_steps}) with train.select = 'best_val': the best step must "
                "have a checkpoint",
            )
        if self.dynamic_sampling:
            require(
                self.advantage in ("group", "pass_at_k"),
                "train.dynamic_sampling",
                True,
                "needs train.advantage = 'group' or 'pass_at_k' (it drops the groups that "
                "carry no gradient, which only group baselines leave)",
            )
        require(
            self.guidance == "off" or self.grpo.loss_type in GUIDED_LOSSES,
            "train.guidance",
            self.guidance,
            f"needs train.grpo.loss_type one of {', '.join(GUIDED_LOSSES)} (the guides' "
            f"shaped loss is normalised as those normalise theirs, over every token), not "
            f"{self.grpo.loss_type!r}",
        )
        if self.guidance == "fraction":
            guided = math.ceil(self.guidance_fraction * self.grpo.num_generations - 1e-9)
            require(
                guided < self.grpo.num_generations,
                "train.guidance_fraction",
                self.guidance_fraction,
                f"guides {guided} of train.grpo.num_generations = {self.grpo.num_generations} "
                "answers of each group: a group needs an on-policy answer (fraction x G < G)",
            )
        require(
            self.guidance == "off" or self.guidance_std or self.advantage == "group",
            "train.guidance_std",
            self.guidance_std,
            f"false rescales the guided groups' group advantages: needs train.advantage "
            f"group, not {self.advantage!r}",
        )
        require(
            self.unlikeliness == 0 or self.advantage != "pass_at_k",
            "train.unlikeliness",
            self.unlikeliness,
            "has no effect with train.advantage = 'pass_at_k' (its "
            "advantages read only which answers are correct); set one of them",
        )
        if self.advantage == "pass_at_k":
            require(
                self.pass_at_k <= self.grpo.num_generations,
                "train.pass_at_k",
                self.pass_at_k,
                f"must be at most train.grpo.num_generations "
                f"({self.grpo.num_generations}): pass@k is estimated from one group",
            )
        require(
            self.patience == 0 or self.select == "best_val",
            "train.patience",
            self.patience,
            "needs train.select = 'best_val' (early stopping keeps the "
            "best checkpoint); set it to 0 or select best_val",
        )
        # A resumed run generates afresh at its first step: a checkpoint between two updates on
        # one generated batch could not resume identically. TRL generates every
        # steps_per_generation x num_iterations micro-batches (steps_per_generation defaults to
        # gradient_accumulation_steps, one optimizer step).
        grpo = self.grpo
        if self.accelerate_config:
            require(
                self.processes > 1,
                "train.processes",
                self.processes,
                f"must be above 1 with train.accelerate_config = "
                f"'{self.accelerate_config}' (one process needs no launcher config)",
            )
            require(
                not grpo.use_cpu,
                "train.grpo.use_cpu",
                grpo.use_cpu,
                f"must be false with train.accelerate_config = '{self.accelerate_config}' "
                "(a multi-GPU config); on CPU leave accelerate_config '' (DDP over gloo)",
            )
        per_generation = grpo.extra.get("steps_per_generation")
        if per_generation is None:
            per_generation = grpo.gradient_accumulation_steps
        require(
            isinstance(per_generation, int)
            and not isinstance(per_generation, bool)
            and per_generation > 0,
            "train.grpo.extra.steps_per_generation",
            per_generation,
            "must be a positive integer",
        )
        require(
            self.save_steps
            * grpo.gradient_accumulation_steps
            % (per_generation * grpo.num_iterations)
            == 0,
            "train.save_steps",
            self.save_steps,
            f"must fall on a fresh batch of rollouts: a multiple of "
            f"num_iterations x steps_per_generation / "
            f"gradient_accumulation_steps ({grpo.num_iterations} x "
            f"{per_generation} / {grpo.gradient_accumulation_steps})",
        )
        if self.dynamic_sampling:
            require(
                per_generation == 1,
                "train.dynamic_sampling",
                True,
                f"needs one optimizer micro-batch per generation (steps_per_generation "
                f"{per_generation}): a batch left short of kept groups cannot be split; "
                "set gradient_accumulation_steps and extra.steps_per_generation to 1",
            )
        return self
