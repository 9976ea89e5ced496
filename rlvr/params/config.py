"""The typed view of params.yaml: one section (a pydantic dataclass, rlvr/params/section.py) per mapping
in it, every field with its help string (description), its type and its range, and the rules between
fields. params.schema.json and docs/params.md are generated from them (rlvr/params/reference.py);
the schema is named on params.yaml's first line, so an editor completes and checks it.

params.yaml is read once, with ruamel.yaml (DVC writes `-S train.learning_rate=3e-5` as `3e-05`,
which PyYAML reads as a string), and each value is read as its field's type, so a stage never sees a
string where it expects a number. Errors are one line naming the key, the value and how to fix it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import regex  # the package the format reward matches with (rlvr.rewards.verifiers)
from pydantic import Field, Strict, model_validator
from ruamel.yaml import YAML, YAMLError

from rlvr.core.errors import ParamsError
from rlvr.core.files import OUTPUT_FOLDERS, under_outputs
from rlvr.core.metric_keys import CORRECTNESS_REWARD
from rlvr.core.numerics import REPRODUCIBLE_DEFAULT, THREADS_DEFAULT
from rlvr.params.section import (
    Bool,
    Dict,
    Float,
    Int,
    NonEmptyStr,
    Str,
    deref,
    holds,
    json_schema,
    require,
    section,
    validate,
)
from rlvr.params.training_params import ModelParams, TrainParams

PARAMS_FILE = Path("params.yaml")
SEED_MAX = 2**32 - 1  # numpy's seed range
# The stage names of dvc.yaml (tests/test_config.py checks they agree).
STAGES = (
    "check_params",
    "reward_tests",
    "validate",
    "prepare_model",
    "smoke",
    "verified",
    "train",
    "evaluate",
    "rft",
    "recipe",
    "report",
    "publish",
)
_EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def _compiles(pattern: str) -> bool:
    try:
        regex.compile(pattern)
    except regex.error:
        return False
    return True


def _inside_repo(path: str) -> bool:
    return (
        bool(path)
        and not Path(path).is_absolute()
        and ".." not in Path(path).parts
        and not set(path) & set("<>\n\r")
    )


Regex = Annotated[str, Strict(), holds(_compiles, "must be a regular expression that compiles")]


def _output_path(path: str) -> bool:
    return _inside_repo(path) and under_outputs(path)


# What the pipeline writes, and deletes before it writes again: never `.`, `.git` or code.
OutputPath = Annotated[
    str,
    Strict(),
    holds(
        _output_path,
        f"must be a path inside {', '.join(f + '/' for f in OUTPUT_FOLDERS)} (relative, not the "
        "folder itself, no '..', no '<', '>' or line break): the stages delete and rewrite what "
        "it names",
    ),
]


def _gate_path(path: str) -> bool:
    parts = Path(path).parts
    return (
        _inside_repo(path)
        and bool(parts)
        and parts[0] in ("tests", "rlvr")
        and not path.startswith("-")
        and "::" not in path
    )


# What the gate runs: test files or folders, never a pytest option or one chosen test.
GatePath = Annotated[
    str,
    Strict(),
    holds(
        _gate_path,
        "must be a test file or folder under tests/ or rlvr/ (relative, no '..', no pytest "
        "option or ::node id): the gate runs what it names",
    ),
]


def _picture_path(path: str) -> bool:
    parts = Path(path).parts
    docs = len(parts) >= 2 and parts[0] == "docs"
    return _inside_repo(path) and path.endswith(".png") and (docs or under_outputs(path))


# A picture drawn with the report: an output path, or one beside the docs that show it.
PicturePath = Annotated[
    str,
    Strict(),
    holds(
        _picture_path,
        "must be a .png file inside docs/ or an output folder (relative, no '..', no '<', '>' "
        "or line break): the report stage rewrites it",
    ),
]


@section("data")
class DataParams:
    train_path: NonEmptyStr = Field(
        "data/grpo_train.jsonl", description="JSONL file of training rows (id, prompt, verifier)."
    )
    eval_path: NonEmptyStr = Field(
        "data/grpo_test.jsonl",
        description="JSONL file of the sealed test rows; must share no prompt with train or "
        "validation. Read only by validate and the audits (evaluate, and rft's audit of the "
        "baseline after its fine-tune), whose verdict on the chosen recipe it is: nothing that "
        "trains or chooses (selection, comparisons, the registry) reads its rows "
        "(docs/audit.md).",
    )
    val_path: NonEmptyStr = Field(
        "data/grpo_val.jsonl",
        description="JSONL file of validation rows: scored during training (held-out curves, "
        "best-checkpoint selection) and by evaluate; the comparisons, the registry and the "
        "published seed choose on them (docs/audit.md); shares no prompt with train or test.",
    )
    train_rows: Int = Field(
        64, ge=1, description="Exact number of rows the training file must have."
    )
    max_prompt_chars: Int = Field(
        200,
        ge=1,
        description="Longest prompt allowed, in characters. "
        "TRL never truncates prompts, so length is bounded here, in the "
        "data.",
    )

    @model_validator(mode="after")
    def _check(self) -> DataParams:
        require(
            self.eval_path != self.train_path,
            "data.eval_path",
            self.eval_path,
            "must differ from data.train_path (held-out rows are not training rows)",
        )
        require(
            self.val_path not in (self.train_path, self.eval_path),
            "data.val_path",
            self.val_path,
            "must differ from data.train_path and data.eval_path (three "
            "separate files: train, validation, test)",
        )
        return self


@section("rewards.length")
class LengthParams:
    lam: Float = Field(0.5, ge=0, description="Weight lambda of the Kimi k1.5 length term.")
    l_min: Float = Field(
        1.0, ge=0, description="Length (completion tokens) that earns the full bonus when correct."
    )
    l_max: Float = Field(
        12.0,
        gt=0,
        description="Length at which a correct answer earns 0 and a wrong one the full penalty.",
    )
    l_target: Float = Field(8.0, ge=0, description="Wrong answers longer than this are penalised.")

    @model_validator(mode="after")
    def _check(self) -> LengthParams:
        require(
            self.l_min < self.l_max,
            "rewards.length.l_min",
            self.l_min,
            f"must be below l_max ({self.l_max})",
        )
        require(
            self.l_min <= self.l_target < self.l_max,
            "rewards.length.l_target",
            self.l_target,
            f"must be in [l_min, l_max) ([{self.l_min}, {self.l_max}))",
        )
        return self


@section("rewards")
class RewardsParams:
    funcs: Annotated[list[Str], Strict()] = Field(
        default_factory=lambda: ["correctness", "format"],
        min_length=1,
        description="Reward functions by registry name (rlvr.rewards.REWARD_FUNCS).",
    )
    weights: Annotated[list[Annotated[float, Strict(), Field(ge=0)]], Strict()] = Field(
        default_factory=lambda: [1.0, 0.2],
        description="One weight per reward function, same order (TRL's reward_weights).",
    )
    format_pattern: Regex = Field(
        r"^\s*\(*\d+\)*(\s*[-+*/]\s*\(*\d+\)*)+\s*$",
        description="Regex the whole completion must match for the format reward.",
    )
    length: LengthParams = Field(
        default_factory=LengthParams,
        description="The length term's parameters (used when 'length' is in funcs).",
    )

    @model_validator(mode="after")
    def _check(self) -> RewardsParams:
        # Names are checked against the registry by rlvr.rewards.registry.check_reward_names
        # (every stage calls it first), so this module needs no reward code.
        require(
            len(set(self.funcs)) == len(self.funcs),
            "rewards.funcs",
            self.funcs,
            "must name each reward function once",
        )
        require(
            len(self.weights) == len(self.funcs),
            "rewards.weights",
            self.weights,
            f"needs one weight per reward function ({len(self.funcs)})",
        )
        require(
            sum(self.weights) > 0,
            "rewards.weights",
            self.weights,
            "must sum to more than 0 (the rewards are averaged with these weights)",
        )
        return self


@section("gate")
class GateParams:
    tests: Annotated[list[GatePath], Strict()] = Field(
        default_factory=lambda: ["tests/rewards", "rlvr/rewards"],
        min_length=1,
        description="Pytest paths of the offline reward tests that gate every "
        "stage (test files and the doctests of the reward modules): files or folders under "
        "tests/ or rlvr/, no pytest options or node ids.",
    )
    min_tests: Int = Field(
        250,
        ge=1,
        description="The fewest tests the gate must collect: a gate.tests narrowed to a few "
        "tests fails the gate instead of passing it.",
    )


@section("smoke")
class SmokeParams:
    max_steps: Int = Field(
        50, ge=1, description="Steps of the smoke run that proves the pipe before the full run."
    )
    min_spread_share: Float = Field(
        0.1,
        ge=0,
        le=1,
        description="Smallest acceptable share of "
        "groups whose rewards differ (no spread = no gradient).",
    )


@section("evaluate")
class EvaluateParams:
    samples: Int = Field(
        32,
        ge=1,
        description="n: sampled completions per prompt, for the mean "
        "sampled reward and pass@k up to k = n (the validation rows during "
        "training too).",
    )
    seed: Int = Field(
        1234,
        ge=0,
        le=SEED_MAX,
        description="Sampling seed, the same for the step-0 and the final policy (paired).",
    )
    confidence: Float = Field(
        0.95, gt=0, lt=1, description="Confidence level of the paired bootstrap CI."
    )
    n_resamples: Int = Field(
        100000,
        ge=1,
        description="Bootstrap resamples, for the intervals and the p-values Holm corrects: at "
        "100,000 each tail of Holm's strictest level (alpha / 11, two-sided) holds about 230 "
        "draws (docs/audit.md).",
    )


@section("report.alarms")
class AlarmParams:
    format_rise: Float = Field(
        0.1,
        ge=0,
        description="Alarm 'format up, correctness flat' when "
        "the smoothed format reward gains more than this over the run ...",
    )
    correctness_flat: Float = Field(
        0.02, ge=0, description="... while the smoothed correctness gains less than this."
    )
    length_growth: Float = Field(
        1.5,
        gt=1,
        description="Alarm 'completion length inflating' "
        "when the smoothed length ends above this many times its start.",
    )
    kl_spike_ratio: Float = Field(
        5.0,
        gt=1,
        description="Alarm 'KL spike' when one step's KL "
        "exceeds this many times the mean of the report.window steps "
        "before it ...",
    )
    kl_spike_min: Float = Field(
        0.05, ge=0, description="... and is above this (spikes of tiny KLs are noise)."
    )
    overfit_drop: Float = Field(
        0.05,
        ge=0,
        description="Alarm 'overfitting' when the validation "
        "mean reward ends this far below its peak while the training "
        "reward rose after it.",
    )
    zero_spread_share: Float = Field(
        0.5,
        ge=0,
        le=1,
        description="Alarm 'no learning signal' "
        "when the smoothed share of groups with no reward spread "
        "ends above this.",
    )
    diversity_drop: Float = Field(
        0.5,
        gt=0,
        lt=1,
        description="Alarm 'diversity collapse' when, "
        "on the decisive split, the distinct correct answers per solved "
        "prompt or the policy's entropy on its own samples end more "
        "than this share below step 0's while the mean reward rose.",
    )


@section("report")
class ReportParams:
    window: Int = Field(
        50, ge=1, description="Steps in the moving averages the KL/beta diagnosis compares."
    )
    kl_tiny: Float = Field(
        0.01, ge=0, description="'Too tight' if the smoothed KL never exceeds this ..."
    )
    plateau_gain: Float = Field(
        0.02, ge=0, description="... and the reward gains less than this over the second half."
    )
    kl_high: Float = Field(
        1.0, gt=0, description="'Too loose' if the smoothed KL ends above this, ..."
    )
    kl_rising_ratio: Float = Field(
        1.5,
        gt=1,
        description="... or the last quarter's KL exceeds "
        "the third quarter's by this factor (still climbing), ...",
    )
    collapse_drop: Float = Field(
        0.1, ge=0, description="... or the smoothed reward ends this far below its peak."
    )
    min_slice_rows: Int = Field(
        8,
        ge=1,
        description="A tag (a row's `tags`) with at least this "
        "many rows in the decisive split weighs in the verdict: if it "
        "regressed, the verdict is `mixed`, not `improved`.",
    )
    slice_drop_from: Float = Field(
        0.1,
        ge=0,
        le=1,
        description="A tag regressed when its "
        "mean-reward or pass@n CI lies below 0, or when its success or "
        "pass@n falls from at least this ...",
    )
    slice_drop_to: Float = Field(
        0.02, ge=0, le=1, description="... to at most this (below slice_drop_from)."
    )
    alarms: AlarmParams = Field(
        default_factory=AlarmParams,
        description="Thresholds of the reward-hacking, overfitting and forgetting alarms.",
    )


@section("runtime")
class RuntimeParams:
    torch_threads: Int = Field(
        THREADS_DEFAULT,
        ge=1,
        le=256,
        description="Threads torch, OpenMP and MKL compute with "
        "in each process (each rank under accelerate), whatever the machine's core count: a "
        "thread count can change a result's bits (rlvr/core/numerics.py).",
    )
    reproducible: Bool = Field(
        REPRODUCIBLE_DEFAULT,
        description="Pin the CPU's numerics (ATen's AVX2 kernels, oneDNN "
        "capped at AVX2, MKL's COMPATIBLE branch) so that x86-64 machines compute the same bits "
        "(measured: the warm start's across Intel and AMD, not yet training's); false lets each "
        "machine take its fastest kernels (rlvr/core/numerics.py; its cost and what it holds: "
        "docs/reliability.md#the-same-bits-on-another-cpu).",
    )
    sampling_chunk_tokens: Int = Field(
        80_000,
        ge=1,
        description="The most tokens one generate call holds when a stage samples (smoke's "
        "step-0 baseline, train's validation, verified, evaluate, rft): sequences x (padded "
        "prompt + completion length), the size of its KV cache. Calls split, a prompt's samples "
        "too, until each fits: 2 x layers x KV heads x head dim x bytes per value a token, so "
        "Qwen3-0.6B in bf16 (112 KiB a token) holds 8.5 GiB at 80,000, within a 24 GB GPU; the "
        "default's calls (at most 66,000 tokens) are not split (docs/gpu.md).",
    )


MAX_SEEDS = 16


def _distinct(values: list) -> bool:
    return len(set(values)) == len(values)


@section("audit.rft")
class RftParams:
    """The RFT baseline's fine-tune (rlvr/baseline/rft.py); how much it samples follows the GRPO
    run's settings, so that both spend the same sampled completions."""

    epochs: Float = Field(
        60.0,
        gt=0,
        le=10000,
        description="Passes over the kept answers (optimizer steps: ceil(epochs x kept / "
        "batch_size)); 60 scored best on the validation rows of 10-226 "
        "(docs/experiments.md#the-rft-baseline).",
    )
    batch_size: Int = Field(64, ge=1, le=65536, description="SFT batch (pairs per step).")
    learning_rate: Float = Field(
        1.0e-3,
        gt=0,
        le=1,
        description="SFT learning rate, constant; 1e-3 against 3e-4 and 3e-3 on the "
        "validation rows (docs/experiments.md#the-rft-baseline).",
    )


@section("audit")
class AuditParams:
    seeds: Annotated[
        list[Annotated[int, Strict(), Field(ge=0, le=SEED_MAX)]],
        Strict(),
        holds(_distinct, "must not repeat a seed"),
    ] = Field(
        default_factory=lambda: [0, 1, 2],
        min_length=1,
        max_length=MAX_SEEDS,
        description="The RL seeds: train and evaluate run once per seed (DVC caches each on "
        "its own), and the recipe's verdict pools them (stage recipe). They share the gate, "
        "the data, the base model and the smoke run, which `seed` seeds.",
    )
    baseline: Literal["rft", "none"] = Field(
        "rft",
        description="The cheap alternative the audit sets beside GRPO, per RL seed (stage rft): "
        "rft = rejection-sampling fine-tuning from the base on its verified answers, sampled at "
        "GRPO's one generation round a step (the report says how many each recipe sampled: GRPO "
        "may sample more; rlvr/baseline/rft.py); none = no baseline (stage rft does nothing).",
    )
    rft: RftParams = Field(default_factory=RftParams, description="The RFT baseline's fine-tune.")


GRID_SETTINGS = (
    "settings"  # a grid's named sets of overrides (rlvr.orchestration.experiments.grid_commands)
)


@section("orchestration")
class OrchestrationParams:
    retries: Int = Field(
        2,
        ge=0,
        description="Retries of a training stage that fails (a killed "
        "run resumes from its checkpoint).",
    )
    retry_delay_seconds: Int = Field(10, ge=0, description="Wait before a retry.")
    retried_stages: Annotated[list[Literal[STAGES]], Strict()] = Field(
        default_factory=lambda: ["prepare_model", "smoke", "train"],
        description="Stages the "
        "flow retries; the gate and validation never are (a retry cannot fix a failing test or a "
        "bad row).",
    )
    default_timeout: Int = Field(
        1800, ge=1, description="Seconds a stage may run before the flow fails it."
    )
    timeouts: Dict = Field(
        default_factory=lambda: {"train": 3600},
        description="Per-stage timeouts in seconds, overriding default_timeout.",
    )
    ablations: Dict = Field(
        default_factory=lambda: {
            "no-kl": ["train.grpo.beta=0"],
            "no-group-norm": ["train.advantage=running_mean"],
        },
        description="Experiments flow: name -> list of `-S` overrides.",
    )
    jobs: Int = Field(
        1,
        ge=1,
        description="Experiments flow: queued experiments run this many at "
        "a time (`dvc exp run --run-all --jobs N`, each in its own temporary copy, "
        "each with runtime.torch_threads threads: keep jobs x threads within the "
        "cores).",
    )
    sweep: Dict = Field(
        default_factory=lambda: {"train.grpo.beta": [0.01, 0.1]},
        description="Experiments flow: param -> values, queued as a grid.",
    )
    start_deadline: Int = Field(
        600,
        ge=1,
        description="Experiments on workers: seconds a submitted run may wait for a worker to "
        "start it (Scheduled, Late or Pending); then it is cancelled and the flow names the work "
        "pool, once the other runs have ended.",
    )
    repos: Annotated[list[NonEmptyStr], Strict()] = Field(
        default_factory=list,
        description="Git remotes the team's flows (the nightly, an experiment worker) may clone "
        "besides their folder's origin: a flow run naming any other is refused, since the "
        "clone's code runs on the worker (docs/security.md).",
    )
    grids: Dict = Field(
        default_factory=dict,
        description="Experiments flow, only when named "
        "(`python -m flows.experiments --grid NAME`): name -> {param: values}; "
        "every combination is queued (DVC's grid of `-S` lists). A `settings` "
        "entry (setting name -> `-S` overrides) crosses each setting with them.",
    )

    @model_validator(mode="after")
    def _check(self) -> OrchestrationParams:
        for stage, seconds in self.timeouts.items():
            require(
                isinstance(seconds, (int, float))
                and not isinstance(seconds, bool)
                and math.isfinite(seconds)
                and seconds > 0,
                f"orchestration.timeouts[{stage!r}]",
                seconds,
                "must be a positive number of seconds",
            )
        for stage in self.timeouts:
            require(
                stage in STAGES,
                "orchestration.timeouts",
                stage,
                "names no stage; stages: " + ", ".join(STAGES),
            )
        for name, overrides in self.ablations.items():
            require(
                bool(_EXPERIMENT_NAME.fullmatch(str(name))),
                "orchestration.ablations",
                name,
                "must be a DVC experiment name: letters, digits, '-' and '_'",
            )
            require(
                isinstance(overrides, list)
                and bool(overrides)
                and all(isinstance(o, str) and "=" in o for o in overrides),
                f"orchestration.ablations.{name}",
                overrides,
                "must be a list of `-S` overrides such as train.grpo.beta=0",
            )
            for override in overrides:
                _require_param_key(
                    override.split("=", 1)[0].strip(), f"orchestration.ablations.{name}"
                )
        for key, values in self.sweep.items():
            _require_param_key(str(key), "orchestration.sweep")
            require(
                isinstance(values, list) and bool(values),
                f"orchestration.sweep.{key}",
                values,
                "must be a non-empty list of values",
            )
        for name, grid in self.grids.items():
            require(
                bool(_EXPERIMENT_NAME.fullmatch(str(name))),
                "orchestration.grids",
                name,
                "must be a name of letters, digits, '-' and '_'",
            )
            require(
                isinstance(grid, dict) and bool(grid),
                f"orchestration.grids.{name}",
                grid,
                "must map params to lists of values, e.g. {seed: [0, 1]}",
            )
            for key, values in grid.items():
                if key == GRID_SETTINGS:
                    _check_settings(values, f"orchestration.grids.{name}.{GRID_SETTINGS}")
                    continue
                _require_param_key(str(key), f"orchestration.grids.{name}")
                require(
                    isinstance(values, list) and bool(values),
                    f"orchestration.grids.{name}.{key}",
                    values,
                    "must be a non-empty list of values",
                )
        return self


def _check_settings(settings: Any, where: str) -> None:
    """A grid's named settings: name -> a list of `-S` overrides (empty: the params as they are)."""
    require(
        isinstance(settings, dict) and bool(settings),
        where,
        settings,
        "must map setting names to lists of `-S` overrides, e.g. {default: [], "
        "no-kl: [train.grpo.beta=0]}",
    )
    for name, overrides in settings.items():
        require(
            bool(_EXPERIMENT_NAME.fullmatch(str(name))),
            where,
            name,
            "must be a name of letters, digits, '-' and '_'",
        )
        require(
            isinstance(overrides, list) and all(isinstance(o, str) and "=" in o for o in overrides),
            f"{where}.{name}",
            overrides,
            "must be a list of `-S` overrides such as train.grpo.beta=0 (or [])",
        )
        for override in overrides:
            _require_param_key(override.split("=", 1)[0].strip(), f"{where}.{name}")


@section("paths")
class PathsParams:
    """Where every stage output lives: dvc.yaml interpolates these (${paths.*}), the stages and
    the flows read them, so no path is spelled in two places."""

    gate_verdict: OutputPath = Field(
        "reports/gate/reward_tests.json",
        description="The reward-test gate's verdict (JSON: counts, failing tests).",
    )
    gate_metrics: OutputPath = Field(
        "metrics/gate.json",
        description="The gate's headline (a DVC metric): passed, tests, failed.",
    )
    validation_summary: OutputPath = Field(
        "reports/validation/summary.json", description="Data validation: per file and rule."
    )
    validation_metrics: OutputPath = Field(
        "metrics/data.json",
        description="Data validation's headline (a DVC metric): passed, problems.",
    )
    data_docs: OutputPath = Field(
        "reports/validation/data_docs",
        description="Great Expectations "
        "Data Docs (HTML folder; not a DVC output: GX stamps each page "
        "with the run time).",
    )
    base_model: OutputPath = Field(
        "models/base", description="The base policy: reference model and step 0."
    )
    prepare_summary: OutputPath = Field(
        "reports/prepare/summary.json", description="How the base policy was made."
    )
    smoke_checks: OutputPath = Field(
        "reports/smoke/checks.json", description="The smoke run's checks."
    )
    smoke_metrics: OutputPath = Field(
        "metrics/smoke.json",
        description="The smoke run's headline "
        "(a DVC metric): passed, failed checks, step-0 reward.",
    )
    step0: OutputPath = Field(
        "reports/smoke/step0.json", description="The step-0 reward baseline and the first log line."
    )
    checkpoints: OutputPath = Field(
        "models/checkpoints",
        description="Training checkpoints, "
        "one folder per RL seed (seed-<n>/): a resume cache, not a "
        "result (no DVC out).",
    )
    trained_models: OutputPath = Field(
        "models/trained",
        description="The trained policies, one folder per RL seed "
        "(seed-<n>/, rlvr/core/seeds.py), as train saves them (full weights or a LoRA adapter); "
        "evaluate, report and publish read them.",
    )
    final_model: OutputPath = Field(
        "models/final",
        description="The published policy: one seed's trained weights (picked "
        "on the validation rows) and a README.md model card (stage publish).",
    )
    train_runs: OutputPath = Field(
        "reports/train",
        description="Each seed's training run in "
        "seed-<n>/: summary.json (first and last steps' means, final KL "
        "and beta, the selection), history.jsonl (every logged step), completions.jsonl (a group "
        "of completions at a few steps), curves.png and live/ (DVCLive).",
    )
    eval_runs: OutputPath = Field(
        "reports/eval",
        description="Each seed's step 0 vs final in "
        "seed-<n>/: summary.json (every statistic of both splits, the "
        "seed's own verdict) and per_prompt.jsonl (one record per "
        "prompt).",
    )
    verified: OutputPath = Field(
        "reports/verified",
        description="The base's verified answers of each RL seed in seed-<n>/answers.json "
        "(stage verified: the budget, one line per training prompt, the distinct correct "
        "answers), which stage rft fine-tunes on and train.guidance puts in GRPO's groups.",
    )
    rft_models: OutputPath = Field(
        "models/rft",
        description="The RFT baseline's fine-tuned policies, one folder per RL seed (seed-<n>/; "
        "only a baseline.json when audit.baseline is none).",
    )
    rft_runs: OutputPath = Field(
        "reports/rft",
        description="Each seed's RFT baseline in seed-<n>/: summary.json (the budget, what was "
        "kept per row, the fine-tune, the same audit as evaluate's) and per_prompt.jsonl.",
    )
    recipe_summary: OutputPath = Field(
        "reports/recipe/summary.json",
        description="The recipe's "
        "audit over the seeds: each seed's line, the pooled "
        "figures and intervals, the verdict, the published seed.",
    )
    recipe_metrics: OutputPath = Field(
        "metrics/recipe.json",
        description="The recipe's headline "
        "(a DVC metric): seeds, verdict, the pooled delta with its "
        "interval, pass@1 and pass@n, per tag.",
    )
    seeds_figure: OutputPath = Field(
        "reports/figures/seeds.png",
        description="Each seed's held-out delta with its interval, and the pooled band (PNG).",
    )
    answer_figure: OutputPath = Field(
        "reports/figures/answer.png",
        description="Step 0, GRPO and the baseline on the held-out rows, pooled over the seeds: "
        "the chart under the retrospective's answer box (PNG).",
    )
    curves_figures: OutputPath = Field(
        "reports/figures/curves",
        description="The retrospective's training curves, every seed overlaid: a small PNG per "
        "quantity (rlvr/report/curves.py CURVES).",
    )
    per_prompt_figure: OutputPath = Field(
        "reports/figures/per_prompt.png",
        description="Per-prompt scatter of the retrospective (PNG).",
    )
    pass_at_k_figure: OutputPath = Field(
        "reports/figures/pass_at_k.png",
        description="pass@k against k, step 0 and final, of the retrospective (PNG).",
    )
    retrospective_md: OutputPath = Field(
        "reports/retrospective.md", description="The retrospective, markdown."
    )
    retrospective_html: OutputPath = Field(
        "reports/retrospective.html", description="The retrospective, self-contained HTML."
    )
    report_picture: PicturePath = Field(
        "docs/report.png",
        description="The README's picture of the retrospective: its verdict, headline table and "
        "first curves (rlvr/report/picture.py), drawn with every report.",
    )
    timing: OutputPath = Field(
        "reports/timing",
        description="Wall time per stage (not an output: it differs on every run).",
    )
    params_check: OutputPath = Field(
        "reports/params/check.json",
        description="The params check's "
        "verdict: the same bytes for every valid params.yaml, so only "
        "the stages whose params changed rerun.",
    )


@section("")
class Params:
    seed: Int = Field(
        0,
        ge=0,
        le=SEED_MAX,
        description="Seed for what the RL seeds share: the "
        "base model's warm start and the smoke run (each RL run's own seed is one "
        "of audit.seeds).",
    )
    data: DataParams = Field(
        default_factory=DataParams, description="Where the rows are and what they must look like."
    )
    rewards: RewardsParams = Field(
        default_factory=RewardsParams,
        description="Which rewards train the policy, and how they are weighted.",
    )
    gate: GateParams = Field(default_factory=GateParams, description="The reward-test gate.")
    model: ModelParams = Field(
        default_factory=ModelParams,
        description="The policy to post-train and how its base is prepared.",
    )
    smoke: SmokeParams = Field(
        default_factory=SmokeParams, description="The short run that proves the pipe."
    )
    train: TrainParams = Field(default_factory=TrainParams, description="The full GRPO run.")
    evaluate: EvaluateParams = Field(
        default_factory=EvaluateParams, description="Step 0 vs final audit."
    )
    report: ReportParams = Field(
        default_factory=ReportParams,
        description="Thresholds of the retrospective's KL/beta diagnosis.",
    )
    audit: AuditParams = Field(
        default_factory=AuditParams,
        description="The recipe's audit: which RL seeds it trains and pools.",
    )
    runtime: RuntimeParams = Field(
        default_factory=RuntimeParams,
        description="How torch computes: threads and pinned CPU numerics.",
    )
    orchestration: OrchestrationParams = Field(
        default_factory=OrchestrationParams,
        description="The Prefect flows: retries, timeouts, experiments.",
    )
    paths: PathsParams = Field(default_factory=PathsParams, description="Where every output lives.")

    @model_validator(mode="after")
    def _check(self) -> Params:
        # the remedies that tell a correct sample from a wrong one read the correctness reward
        train = self.train
        for key, on in (
            ("train.advantage", train.advantage == "pass_at_k"),
            ("train.unlikeliness", train.unlikeliness > 0),
            ("train.resample_unsolved", train.resample_unsolved),
            ("train.guidance", train.guidance == "unsolved"),
        ):
            require(
                not on or CORRECTNESS_REWARD in self.rewards.funcs,
                key,
                getattr(train, key.split(".")[1]),
                f"needs '{CORRECTNESS_REWARD}' in rewards.funcs (it tells a correct sample "
                f"from a wrong one)",
            )
        starts = (self.paths.base_model, self.paths.rft_models)
        require(
            train.start_model in starts,
            "train.start_model",
            train.start_model,
            f"must be paths.base_model ({starts[0]}) or paths.rft_models ({starts[1]})",
        )
        if train.start_model == self.paths.rft_models:
            require(
                self.audit.baseline == "rft" and not self.model.lora.enabled,
                "train.start_model",
                train.start_model,
                "starts from stage rft's models: needs audit.baseline rft and model.lora "
                "off (an adapter of an adapter is not supported)",
            )
        require(
            train.guidance == "off" or self.audit.baseline == "rft",
            "train.guidance",
            train.guidance,
            "takes its guides from stage verified, which samples with audit.baseline rft: "
            "needs audit.baseline rft",
        )
        # DVC has no conditional deps: train depends on ${train.guides}, the answers' folder
        # when guidance is on, else the base, which it reads anyway
        guides = self.paths.verified if train.guidance != "off" else self.paths.base_model
        require(
            train.guides == guides,
            "train.guides",
            train.guides,
            f"must be {guides} with train.guidance {train.guidance!r} (paths.verified when "
            f"guidance is on, paths.base_model when off: the path train's stage depends on)",
        )
        return self


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


def read_params_file(path: str | Path = PARAMS_FILE) -> dict:
    """params.yaml as a mapping, or ParamsError naming the file and what is wrong with it."""
    try:
        with open(path, encoding="utf-8") as handle:
            raw = YAML(typ="safe").load(handle)
    except (OSError, UnicodeDecodeError) as error:
        raise ParamsError(f"{path}: cannot be read: {error}") from None
    except YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ParamsError(
            f"{path}:{where}: not valid YAML: {getattr(error, 'problem', None) or error}"
        ) from None
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
    """Only validate and the audits (evaluate, rft) open the test file. Reports and artifacts take its md5 from
    validate's deps in dvc.lock (validate runs before every stage that trains, selects or
    reports), so the file is never opened for a hash: {test file: "validate"}."""
    return {params.data.eval_path: "validate"}


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """Read and validate params.yaml."""
    return parse_params(read_params_file(path))
