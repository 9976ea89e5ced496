"""What the pipeline's own layer costs on top of TRL, DVC and Prefect: a benchmark that prints a
table (figure, median, min, target, met?) and writes reports/bench.json.

    ./dev bench                        the full run (~12 minutes on 2 idle CPU cores)
    ./dev bench --quick                small budgets, one repetition (~3 minutes)
    ./dev bench --only overhead,noop   a subset (names below); --out PATH writes the JSON elsewhere

(`./dev bench ARGS` runs `python scripts/bench.py ARGS` in the project's environment.)

Everything is measured in this one run, side by side, with the repetitions of the things compared
interleaved (A B, B A, A B, ...); each figure is the median and the min of its repetitions, and the
median is what is held against the target. It measures and prints; it asserts nothing. The
measurements, by the names --only takes:

  cold        a cold `dvc repro` of the default in a fresh copy of the project (tracked and
              untracked files, outputs left out: tests/helpers.py make_project_copy): its wall
              time and each stage's, from reports/timing/<stage>.json. The copy is then committed,
              and `noop`, `overhead` and `evaluation` use its up-to-date state and models/base.
  noop        on that up-to-date copy: `dvc repro` with nothing to run (target <= 2 s), and
              `python -m flows.pipeline` two ways, each on its own PREFECT_HOME, run once before
              the timed runs: with no PREFECT_API_URL (Prefect starts a temporary server inside
              the run) and against a running `prefect server start` (as scheduled deployments
              run): wall times and overheads over the no-op `dvc repro` (target <= 5 s each);
              then one instrumented flow run that says where its time goes (interpreter and
              imports, server start, its `dvc status`, each stage task's `dvc repro <stage>`,
              each stage's artifacts and the git calls in them, Prefect's own bookkeeping, exit).
  overhead    the train stage's steps/s divided by a bare trl.GRPOTrainer's, one process (target
              >= 0.98), and the reward functions' share of step time (target <= 2%). Both sides
              load the same base model (models/base of the cold copy), the same training rows
              and reward functions, and the GRPOConfig that rlvr.grpo.config.grpo_config builds from
              params.yaml; each runs in a fresh process. Bare: `trl.GRPOTrainer(...).train()`,
              saving nothing. Pipeline: what the train stage runs (rlvr.runs.train_run):
              rlvr.grpo.run.run_grpo with LiveCurvesCallback (DVCLive) and a checkpoint every
              train.save_steps. Timed: from the end of step W to the end of step N (on_step_end
              of a TrainerCallback, in the main process): N - W whole steps in steady state, a
              whole number of save_steps intervals, so the timed span holds the checkpoints in
              the train stage's proportion; generation, rewards, loss, backward, optimizer,
              logging, callbacks and checkpoint saves are in it; process start, imports, model
              loading, trainer set-up, the first W steps and what follows step N are not. The
              reward functions are wrapped with a timer on both sides. Both sides must follow
              the same trajectory (same seed, same rewards every step), which the JSON records.
              A second ratio comes from each run's typical step: 1 / (median step + the median
              extra time of a step after a checkpoint / save_steps), which a burst of another
              process's load on a shared machine barely moves, unlike the whole span's.
  overhead2   the same with 2 processes: each side runs under `accelerate launch --multi_gpu
              --num_processes 2` (DDP over gloo on CPU), the launcher the train stage uses with
              train.processes: 2 (rlvr/distributed.py); the pipeline side joins the process
              group as the stage does (start_rank).
  validation  rlvr.validation.validate_files, as the validate stage calls it (Data Docs written to
              a temporary folder), on 64 and on 6,400 training rows (both files made by
              data/make_countdown.py with 3 numbers from 1 to 20, since 2 from 1 to 12 give too few
              distinct problems), after one untimed call that imports Great Expectations.
  evaluation  rlvr.evaluation.audit on the default evaluate settings (sampled k, greedy, KL of
              final vs step 0, bootstrap CI) for a handful of held-out prompts, step 0 and final
              the cold copy's models (without a cold copy, the base model as both), loaded
              beforehand: seconds per prompt.
  scaling     s/step of the train stage's run (pipeline side, steps W..N) at ~0.5M (the default
              model.tiny), ~5M and ~30M parameters (model.tiny sizes) and for model.init:
              local_llm (chat template on), each randomly initialised (no warm start), so every
              completion runs to max_completion_length: the same tokens per step at every size.

--quick runs every measurement on tests/helpers.py SMALL_RUN (4 prompts x G=4 per step, a
checkpoint every 4 steps, 30 warm-start steps) with one repetition: it proves the bench works;
its figures are not the default's (a step of 16 completions takes ~0.03 s, so the layer's fixed
per-step costs weigh several times more than on the default's ~0.15 s step).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "reports" / "bench.json"
SCHEMA = 1
WORKER = "_worker"              # internal: one GRPO run, timed (python bench.py _worker SPEC)
FLOW_PROFILE = "_flowprofile"   # internal: one instrumented flow run (python bench.py _flowprofile)


# --------------------------------------------------------------------------- figures (pure)

@dataclasses.dataclass(frozen=True)
class Target:
    """A figure's target: its median must be `op` (">=" or "<=") `value`."""
    op: str
    value: float

    def met(self, x: float) -> bool | None:
        """Whether x meets the target (None when x is not a number).

        >>> Target(">=", 0.98).met(0.99), Target("<=", 2.0).met(2.5), Target("<=", 1).met(math.nan)
        (True, False, None)
        """
        if x is None or not math.isfinite(x):
            return None
        return x >= self.value if self.op == ">=" else x <= self.value


@dataclasses.dataclass
class Figure:
    """One measured figure: its repetitions, how to show it, and its target if it has one."""
    key: str
    label: str
    unit: str                   # see UNITS
    samples: list[float]
    target: Target | None = None
    note: str = ""

    def __post_init__(self):
        if self.unit not in UNITS:  # caught here, not when the table prints at the end
            raise ValueError(f"figure {self.key}: unit {self.unit!r} is not one of {list(UNITS)}")

    @property
    def median(self) -> float:
        return median_min(self.samples)[0]

    @property
    def min(self) -> float:
        return median_min(self.samples)[1]

    @property
    def met(self) -> bool | None:
        return self.target.met(self.median) if self.target else None

    def to_json(self) -> dict:
        return {"key": self.key, "label": self.label, "unit": self.unit,
                "median": _finite(self.median), "min": _finite(self.min),
                "n": len(self.samples), "samples": [_finite(s) for s in self.samples],
                "target": dataclasses.asdict(self.target) if self.target else None,
                "met": self.met, "note": self.note}


# How each unit is shown: a share as a percentage, times and rates with a few digits.
UNITS: dict[str, Callable[[float], str]] = {
    "x": lambda v: f"{v:.3f}",
    "share": lambda v: f"{v:.2%}",
    "s": lambda v: f"{v:.2f} s",
    "s/step": lambda v: f"{v:.3f} s/step",
    "s/prompt": lambda v: f"{v:.3f} s/prompt",
    "steps/s": lambda v: f"{v:.2f} steps/s",
}


def median_min(samples: Sequence[float]) -> tuple[float, float]:
    """(median, min) of the finite samples; (nan, nan) when there are none.

    >>> median_min([3.0, 1.0, 2.0, 10.0]), median_min([]), median_min([math.nan, 4.0])
    ((2.5, 1.0), (nan, nan), (4.0, 4.0))
    """
    finite = [s for s in samples if s is not None and math.isfinite(s)]
    if not finite:
        return math.nan, math.nan
    return statistics.median(finite), min(finite)


def _finite(x: float | None) -> float | None:
    """JSON has no NaN: a missing figure is null."""
    return x if x is not None and math.isfinite(x) else None


def show(value: float, unit: str) -> str:
    """A value as the table shows it.

    >>> show(0.98765, "x"), show(0.0123, "share"), show(1.5, "s"), show(math.nan, "s")
    ('0.988', '1.23%', '1.50 s', '-')
    """
    if value is None or not math.isfinite(value):
        return "-"
    return UNITS[unit](value)


def show_target(figure: Figure) -> str:
    """The target as the table shows it.

    >>> show_target(Figure("k", "l", "share", [0.01], Target("<=", 0.02)))
    '<= 2.00%'
    """
    if figure.target is None:
        return ""
    return f"{figure.target.op} {show(figure.target.value, figure.unit)}"


MET_WORDS = {True: "yes", False: "NO", None: ""}


def format_table(figures: Sequence[Figure]) -> str:
    """The printed table: one row per figure; targets held against the median.

    >>> print(format_table([Figure("a", "ratio", "x", [0.97, 0.99, 1.0], Target(">=", 0.98)),
    ...                     Figure("b", "time", "s", [1.0])]))
    figure | median | min    | n | target   | met?
    -------+--------+--------+---+----------+-----
    ratio  | 0.990  | 0.970  | 3 | >= 0.980 | yes
    time   | 1.00 s | 1.00 s | 1 |          |
    """
    header = ("figure", "median", "min", "n", "target", "met?")
    rows = [(f.label, show(f.median, f.unit), show(f.min, f.unit), str(len(f.samples)),
             show_target(f), MET_WORDS[f.met]) for f in figures]
    widths = [max([len(header[i])] + [len(r[i]) for r in rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(header), "-+-".join("-" * w for w in widths),
                      *(line(r) for r in rows)])


def steady_rate(clock: Sequence[Sequence[float]], warmup: int, last: int) -> tuple[float, float]:
    """(steps/s, reward functions' share of the time) from step `warmup`'s end to step `last`'s.

    clock: one (step, seconds, cumulative reward-function seconds) per finished step, as the
    worker's StepClock records them.

    >>> clock = [(1, 10.0, 0.1), (2, 10.5, 0.11), (3, 11.0, 0.12), (4, 11.5, 0.13)]
    >>> steady_rate(clock, 2, 4)
    (2.0, 0.02)
    """
    at = {int(step): (seconds, rewards) for step, seconds, rewards in clock}
    if warmup not in at or last not in at or last <= warmup:
        return math.nan, math.nan
    seconds = at[last][0] - at[warmup][0]
    return (last - warmup) / seconds, round((at[last][1] - at[warmup][1]) / seconds, 12)


def step_profile(clock: Sequence[Sequence[float]], warmup: int, last: int,
                 save_steps: int | None = None) -> dict:
    """Where a run's timed steps went: the median step (what every step costs) and, with
    checkpoints, the median extra time of a step that follows a save (the Trainer saves after
    step s ends, so the save falls in step s + 1's interval); and the steps/s they make,
    1 / (median step + extra per checkpoint / save_steps): a rate that a few seconds of another
    process's load on a shared machine barely moves, unlike the timed span's.

    >>> clock = [(s, 0.1 * s + (0.5 if s > 4 else 0.0), 0.0) for s in range(1, 9)]
    >>> step_profile(clock, 2, 8, save_steps=4)
    {'median_step': 0.1, 'checkpoint_extra': 0.5, 'typical_steps_per_s': 4.444444}
    >>> step_profile(clock, 5, 8)
    {'median_step': 0.1, 'typical_steps_per_s': 10.0}
    """
    at = {int(step): seconds for step, seconds, _ in clock}
    interval = {s: at[s] - at[s - 1] for s in range(warmup + 1, last + 1)
                if s in at and s - 1 in at}
    profile = {"median_step": round(statistics.median(interval.values()), 6)
               if interval else math.nan}
    if save_steps:
        after_save = [interval[s + 1] for s in range(warmup, last) if s % save_steps == 0
                      and s + 1 in interval]
        profile["checkpoint_extra"] = (round(statistics.median(after_save)
                                             - profile["median_step"], 6)
                                       if after_save else math.nan)
    per_step = profile["median_step"] + (profile["checkpoint_extra"] / save_steps
                                         if save_steps else 0.0)
    profile["typical_steps_per_s"] = round(1 / per_step, 6) if per_step > 0 else math.nan
    return profile


def bench_json(figures: Sequence[Figure], *, mode: str, measurements: Sequence[str],
               seconds: float, machine: dict, details: dict, errors: dict,
               complete: bool = True) -> dict:
    """What reports/bench.json holds: every figure with its samples and target, and the context
    (`complete` is false in the file a run writes after each measurement but the last).

    >>> out = bench_json([Figure("a.b", "x", "s", [1.0, 2.0], Target("<=", 2.0))], mode="quick",
    ...                  measurements=["a"], seconds=1.0, machine={}, details={}, errors={})
    >>> out["figures"][0]["median"], out["figures"][0]["met"], out["targets_missed"]
    (1.5, True, [])
    """
    return {
        "schema": SCHEMA,
        "command": "./dev bench" + (" --quick" if mode == "quick" else ""),
        "mode": mode,
        "measurements": list(measurements),
        "complete": complete,
        "seconds": round(seconds, 1),
        "machine": machine,
        "figures": [f.to_json() for f in figures],
        "targets_missed": [f.key for f in figures if f.met is False],
        "details": details,
        "errors": errors,
    }


# --------------------------------------------------------------------------- budgets

@dataclasses.dataclass(frozen=True)
class Budget:
    """How much of everything a run measures."""
    name: str
    quick: bool                     # params on tests/helpers.py SMALL_RUN instead of the default
    reps: int                       # interleaved repetitions of overhead, noop, validation, evaluation
    overhead2_reps: int             # the same, with 2 processes (each run costs twice as much)
    warmup_steps: int               # W: steps before the timed span
    save_intervals: int             # the timed span, in train.save_steps
    eval_prompts: int
    scaling_reps: int
    scaling_steps: tuple[int, int]  # (W, N) of each scaling run


FULL = Budget("full", quick=False, reps=4, overhead2_reps=2, warmup_steps=20, save_intervals=2,
              eval_prompts=8, scaling_reps=2, scaling_steps=(3, 8))
QUICK = Budget("quick", quick=True, reps=1, overhead2_reps=1, warmup_steps=4, save_intervals=2,
               eval_prompts=4, scaling_reps=1, scaling_steps=(2, 4))

# model.tiny sizes for the scaling figures (the first is the default), and the local_llm default.
SCALES = (
    ("tiny ~0.5M", {"init": "tiny"}),
    ("tiny ~5M", {"init": "tiny", "tiny": {"hidden_size": 256, "intermediate_size": 1024,
                                           "num_hidden_layers": 5, "num_attention_heads": 4,
                                           "num_key_value_heads": 2}}),
    ("tiny ~30M", {"init": "tiny", "tiny": {"hidden_size": 512, "intermediate_size": 2048,
                                            "num_hidden_layers": 8, "num_attention_heads": 8,
                                            "num_key_value_heads": 4}}),
    ("local_llm", {"init": "local_llm", "chat_template": True}),
)
VALIDATION_ROWS = (64, 6400)
# data/make_countdown.py arguments with enough distinct problems for 6,400 rows
VALIDATION_DATA = ("--numbers", "3", "--high", "20", "--eval-rows", "64")


class BenchError(Exception):
    """A measurement could not be made (a command failed); the message says which and why."""


# --------------------------------------------------------------------------- the worker

def worker(spec_file: str) -> None:
    """One timed GRPO run (in a fresh process, or in each rank under accelerate launch): the bare
    TRL trainer or the train stage's run_grpo, per the spec; the main process writes the clock."""
    from transformers import TrainerCallback, set_seed

    from rlvr.config import parse_params
    from rlvr.data import read_rows, to_hf_dataset, write_json
    from rlvr.distributed import is_main_process, launched, start_rank
    from rlvr.rewards.registry import build_reward_funcs
    from rlvr.grpo.callbacks import LiveCurvesCallback
    from rlvr.grpo.config import grpo_config, peft_config
    from rlvr.grpo.run import run_grpo

    spec = json.loads(Path(spec_file).read_text())
    params = parse_params(spec["params"])
    rows = read_rows(spec["train_path"])
    work = Path(spec["work"])

    class TimedReward:
        """A reward function with a stopwatch around it (TRL takes its name from __name__)."""

        def __init__(self, func) -> None:
            self.func, self.__name__, self.seconds = func, func.__name__, 0.0

        def __call__(self, *args, **kwargs):
            started = time.perf_counter()
            try:
                return self.func(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

    class StepClock(TrainerCallback):
        """(step, time, reward seconds so far) at the end of every step."""

        def __init__(self) -> None:
            self.ticks: list[tuple[int, float, float]] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ticks.append((state.global_step, time.perf_counter(),
                               sum(f.seconds for f in rewards)))

    rewards = [TimedReward(f) for f in build_reward_funcs(params.rewards)]
    clock = StepClock()
    if spec["side"] == "bare":
        from trl import GRPOTrainer

        set_seed(params.seed)
        config = grpo_config(params.train, output_dir=work / "out",
                             max_steps=spec["max_steps"], seed=params.seed,
                             reward_weights=params.rewards.weights,
                             chat_template_kwargs=params.model.chat_template_kwargs)
        trainer = GRPOTrainer(model=spec["policy"], reward_funcs=rewards, args=config,
                              train_dataset=to_hf_dataset(rows, params.model.chat_template),
                              peft_config=peft_config(params.model), callbacks=[clock])
        trainer.train()
    else:
        if launched():  # as the train stage's ranks do
            start_rank("bench", use_cpu=params.train.grpo.use_cpu)
        trainer = run_grpo(params, rows, spec["policy"], work / "checkpoints", spec["max_steps"],
                           save_steps=params.train.save_steps if spec["checkpoints"] else None,
                           callbacks=[LiveCurvesCallback(work / "live"), clock],
                           reward_funcs=rewards)
    if is_main_process():
        write_json(spec["result"], {
            "clock": clock.ticks, "processes": trainer.accelerator.num_processes,
            "rewards": [entry.get("reward") for entry in trainer.state.log_history
                        if "loss" in entry]})


# --------------------------------------------------------------------------- the flow profile

# What the flow profile times, where the flow module has it: name in flows/pipeline.py -> kind.
FLOW_CALLS = {"stale_stages": "dvc status", "run_dvc_stage": "dvc",
              "publish_stage_artifacts": "artifacts"}
TASK_KINDS = ("dvc status", "dvc", "artifacts")  # the calls that make up the flow's work


def flow_profile(out: str) -> None:
    """One `python -m flows.pipeline` run in the current folder (a project copy on PYTHONPATH),
    with stopwatches around its `dvc status`, each stage task's `dvc repro`, each stage's
    artifacts, and the git and provenance calls inside them; writes the marks and spans to `out`."""
    marks = {"started": time.time()}
    import flows.pipeline as pipeline_module
    import rlvr.provenance as provenance_module

    marks["imported"] = time.time()
    spans: list[dict] = []

    def stopwatch(kind: str, func):
        def timed(*args, **kwargs):
            started = time.time()
            try:
                return func(*args, **kwargs)
            finally:
                stage = args[0] if kind in ("dvc", "artifacts") else None
                spans.append({"kind": kind, "stage": stage, "start": started,
                              "end": time.time()})
        return timed

    for name, kind in FLOW_CALLS.items():
        if hasattr(pipeline_module, name):
            setattr(pipeline_module, name, stopwatch(kind, getattr(pipeline_module, name)))
    provenance_module.git_state = stopwatch("git", provenance_module.git_state)
    provenance_module.data_and_model_hashes = stopwatch(
        "provenance", provenance_module.data_and_model_hashes)
    marks["flow_called"] = time.time()
    pipeline_module.pipeline(root=os.getcwd())
    marks["flow_returned"] = time.time()
    Path(out).write_text(json.dumps({"marks": marks, "spans": spans}))


def flow_breakdown(profile: dict, spawned: float, ended: float) -> dict:
    """Where an instrumented flow run's wall time went, in seconds (see flow_profile).

    >>> spans = [{"kind": "dvc", "stage": "a", "start": 3.0, "end": 4.0},
    ...          {"kind": "artifacts", "stage": "a", "start": 4.5, "end": 5.0},
    ...          {"kind": "git", "stage": None, "start": 4.6, "end": 4.8}]
    >>> marks = {"started": 0.5, "imported": 1.5, "flow_called": 1.5, "flow_returned": 5.5}
    >>> b = flow_breakdown({"marks": marks, "spans": spans}, 0.0, 6.0)
    >>> b["parts"]["dvc repro <stage> (1 call)"], b["parts"]["Prefect between tasks"], b["total"]
    (1.0, 0.5, 6.0)
    """
    marks, spans = profile["marks"], profile["spans"]
    tasks = [s for s in spans if s["kind"] in TASK_KINDS]
    first = min((s["start"] for s in tasks), default=marks["flow_returned"])
    last = max((s["end"] for s in tasks), default=marks["flow_returned"])

    def total(kind: str) -> float:
        return sum(s["end"] - s["start"] for s in spans if s["kind"] == kind)

    def calls(kind: str, what: str) -> str:
        count = sum(s["kind"] == kind for s in spans)
        return f"{kind}{what} ({count} call{'s' * (count != 1)})"

    parts = {
        "interpreter start and imports": marks["imported"] - spawned,
        "server start and flow set-up (to the first DVC call)": first - marks["flow_called"],
        calls("dvc status", ""): total("dvc status"),
        calls("dvc", " repro <stage>"): total("dvc"),
        "artifacts (provenance, git, publishing)": total("artifacts"),
        "Prefect between tasks": (last - first) - sum(total(kind) for kind in TASK_KINDS),
        "flow end": marks["flow_returned"] - last,
        "exit (server shutdown)": ended - marks["flow_returned"],
    }
    per_stage: dict[str, dict] = {}
    for span in spans:
        if span["stage"] is not None and span["kind"] in ("dvc", "artifacts"):
            entry = per_stage.setdefault(span["stage"], {})
            entry[span["kind"]] = round(entry.get(span["kind"], 0.0)
                                        + span["end"] - span["start"], 3)
    return {"total": round(ended - spawned, 3),
            "parts": {k: round(v, 3) for k, v in parts.items()},
            "inside artifacts": {"git_state calls": sum(s["kind"] == "git" for s in spans),
                                 "git_state seconds": round(total("git"), 3),
                                 "provenance seconds": round(total("provenance"), 3)},
            "per_stage": per_stage}


# --------------------------------------------------------------------------- the run

def interleaved(pair: Sequence[str], rep: int) -> list[str]:
    """The order of repetition `rep`: A B, then B A, and so on (a drift in the machine's load
    then weighs on both sides alike).

    >>> [interleaved(("bare", "pipeline"), rep) for rep in range(3)]
    [['bare', 'pipeline'], ['pipeline', 'bare'], ['bare', 'pipeline']]
    """
    return list(pair) if rep % 2 == 0 else list(reversed(pair))


def say(message: str) -> None:
    print(f"bench: {message}", flush=True)


STAGE_DONE = ("done in ", "FAILED in ")  # the line each stage prints last (rlvr/stage.py)
VALIDATION_COST = "scoring the validation rows took"  # the train stage's line (rlvr/runs.py)


def validation_share(output: str) -> float | None:
    """The share of train time spent scoring the validation rows, from the train stage's line.

    >>> validation_share("train: scoring the validation rows took 4.2 s of 60.0 s (7.0%)")
    0.07
    >>> validation_share("train: 400 steps") is None
    True
    """
    import re

    found = re.search(VALIDATION_COST + r" ([\d.]+) s of ([\d.]+) s", output)
    return round(float(found[1]) / float(found[2]), 6) if found else None


class Bench:
    """What the measurements share: the budget, the params, a scratch folder, the cold copy and
    its base model (made once, when first needed), and the figures collected so far."""

    def __init__(self, budget: Budget, scratch: Path) -> None:
        import copy

        from rlvr.config import parse_params, read_params_file
        from tests.helpers import SMALL_RUN, merge

        self.budget, self.scratch = budget, scratch
        self.raw = read_params_file(ROOT / "params.yaml")
        self.overrides = copy.deepcopy(SMALL_RUN) if budget.quick else None
        if self.overrides:
            merge(self.raw, copy.deepcopy(self.overrides))
        self.params = parse_params(self.raw)
        self.train_path = str(ROOT / self.params.data.train_path)
        self.eval_path = str(ROOT / self.params.data.eval_path)
        self.figures: list[Figure] = []
        self.details: dict = {}
        self._project: Path | None = None
        self._base: str | None = None
        self._runs = 0

    def add(self, *figures: Figure) -> None:
        self.figures.extend(figures)

    def run(self, command: Sequence[str], cwd: Path, env: dict | None = None,
            echo: tuple[str, ...] = ()) -> tuple[float, str]:
        """Run a command; (wall seconds, its output). Lines containing an `echo` string are
        printed as they come. A failure raises BenchError with the output's tail."""
        started = time.perf_counter()
        process = subprocess.Popen(list(command), cwd=cwd, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in process.stdout:
            lines.append(line)
            if echo and any(e in line for e in echo):
                say(f"  {line.rstrip()}")
        code = process.wait()
        seconds = time.perf_counter() - started
        output = "".join(lines)
        if code != 0:
            raise BenchError(f"`{' '.join(map(str, command))}` exited {code}:\n"
                             f"{output[-3000:]}")
        return seconds, output

    def project_env(self, project: Path) -> dict:
        from tests.helpers import project_env

        return {**project_env(project), "PREFECT_HOME": str(self.scratch / "prefect-home")}

    @property
    def cold_copy(self) -> Path | None:
        """The cold copy if this run has made one (None: nothing has needed it yet)."""
        return self._project

    def project(self) -> Path:
        """The cold copy, up to date: made (and measured) by the first caller."""
        if self._project is None:
            self._project = self._cold_repro()
        return self._project

    def _cold_repro(self) -> Path:
        from rlvr.orchestration import dvc_stages
        from tests.helpers import commit_all, make_project_copy

        project = make_project_copy(self.scratch / "project", self.overrides)
        budget = "tests/helpers.py SMALL_RUN" if self.overrides else "the default params.yaml"
        say(f"cold: `dvc repro` of {budget} in a fresh copy, {project}")
        seconds, output = self.run(["dvc", "repro"], project, self.project_env(project),
                                   echo=STAGE_DONE + (VALIDATION_COST,))
        timing = project / self.params.paths.timing
        stages = {}
        for stage in dvc_stages(project / "dvc.yaml"):
            file = timing / f"{stage}.json"
            stages[stage] = json.loads(file.read_text())["seconds"] if file.exists() else math.nan
        commit_all(project, "cold run")
        self.add(Figure("cold.total", "cold dvc repro, all stages", "s", [seconds],
                        note=f"one run, {budget}"),
                 *(Figure(f"cold.{stage}", f"  cold: {stage}", "s", [s])
                   for stage, s in stages.items()))
        self.details["cold"] = {"params": budget, "seconds": round(seconds, 1),
                                "stages": stages}
        share = validation_share(output)
        if share is not None:
            self.add(Figure("cold.validation_share", "scoring the validation rows, share of "
                            "train time", "share", [share], Target("<=", 0.15),
                            note="the train stage's own line: validation seconds / train_runtime"))
        return project

    def base_model(self) -> str:
        """The cold copy's models/base when this run made one, else one built here with
        prepare_model's code (rlvr.policy.prepare_base) on the same params."""
        if self._base is None:
            if self._project is not None:
                self._base = str(self._project / self.params.paths.base_model)
            else:
                from rlvr.data import read_rows
                from rlvr.policy import prepare_base

                say("building a base model with prepare_model's code (no cold copy in this run)")
                prepare_base(self.params.model, read_rows(self.train_path), self.params.seed,
                             self.scratch / "base")
                self._base = str(self.scratch / "base")
        return self._base

    def run_worker(self, side: str, policy: str, max_steps: int, processes: int = 1,
                   checkpoints: bool = True, raw: dict | None = None) -> dict:
        """One timed GRPO run in a fresh process (or `processes` ranks under accelerate launch,
        as rlvr/distributed.py launches the train stage); the main process's clock."""
        from rlvr.distributed import free_port, launch_args

        self._runs += 1
        work = self.scratch / f"run{self._runs}-{side}"
        work.mkdir(parents=True)
        spec = {"side": side, "params": raw or self.raw, "train_path": self.train_path,
                "policy": policy, "max_steps": max_steps, "checkpoints": checkpoints,
                "work": str(work), "result": str(work / "result.json")}
        (work / "spec.json").write_text(json.dumps(spec))
        script = [str(Path(__file__).resolve()), WORKER, str(work / "spec.json")]
        if processes > 1:
            launcher = launch_args("-", processes, use_cpu=self.params.train.grpo.use_cpu,
                                   port=free_port())
            assert launcher[-2] == "-m", launcher  # '-m -': replaced by the script
            command = [str(Path(sys.executable).parent / "accelerate"), "launch",
                       *launcher[:-2], *script]
        else:
            command = [sys.executable, *script]
        self.run(command, work, {**os.environ, "PYTHONPATH": str(ROOT)})
        result = json.loads((work / "result.json").read_text())
        shutil.rmtree(work)  # checkpoints and curves: only the clock is kept
        if result["processes"] != processes:
            raise BenchError(f"asked for {processes} processes, the trainer had "
                             f"{result['processes']}")
        return result


# --------------------------------------------------------------------------- measurements

def measure_cold(bench: Bench) -> None:
    bench.project()


@contextlib.contextmanager
def running_prefect_server(bench: Bench, env: dict) -> Iterator[str]:
    """`prefect server start` on a free local port, with its own PREFECT_HOME, as a scheduled
    deployment's flows find it; yields its API URL and stops it afterwards."""
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    home = bench.scratch / "prefect-server-home"
    log = (bench.scratch / "prefect-server.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host",
                               "127.0.0.1", "--port", str(port)],
                              env={**env, "PREFECT_HOME": str(home)}, stdout=log,
                              stderr=subprocess.STDOUT)
    api = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{api}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.time() > deadline:
                raise BenchError(f"`prefect server start` did not answer on {api} (log: "
                                 f"{bench.scratch / 'prefect-server.log'})")
            time.sleep(0.5)
        yield api
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def measure_noop(bench: Bench) -> None:
    project = bench.project()
    env = bench.project_env(project)
    flow = [sys.executable, "-m", "flows.pipeline"]
    timing = project / bench.params.paths.timing
    before = {f.name: f.stat().st_mtime_ns for f in timing.glob("*.json")}
    times: dict[str, list[float]] = {"dvc": [], "flow": [], "flow_server": []}
    with running_prefect_server(bench, env) as api:
        commands = {"dvc": (["dvc", "repro"], env), "flow": (flow, env),
                    "flow_server": (flow, {**env, "PREFECT_API_URL": api})}
        say("noop: a first `python -m flows.pipeline` on each Prefect database (not timed)")
        first, _ = bench.run(flow, project, env)
        say(f"noop: first flow run {first:.1f} s")
        bench.run(flow, project, commands["flow_server"][1])
        reps = bench.budget.reps
        for rep in range(reps):
            for name in interleaved(tuple(commands), rep):
                command, command_env = commands[name]
                seconds, _ = bench.run(command, project, command_env)
                times[name].append(seconds)
                say(f"noop: rep {rep + 1}/{reps}: {name}: {seconds:.2f} s")
    after = {f.name: f.stat().st_mtime_ns for f in timing.glob("*.json")}
    reran = sorted(name for name in after if before.get(name) != after[name])
    say("noop: one instrumented flow run, temporary server (where the time goes)")
    profile_file = bench.scratch / "flow-profile.json"
    spawned = time.time()
    bench.run([sys.executable, str(Path(__file__).resolve()), FLOW_PROFILE, str(profile_file)],
              project, env)
    breakdown = flow_breakdown(json.loads(profile_file.read_text()), spawned, time.time())

    def over_dvc(flow_times: list[float]) -> list[float]:
        return [f - d for f, d in zip(flow_times, times["dvc"])]

    per_rep = "per repetition: flow wall time - dvc repro wall time"
    bench.add(
        Figure("noop.dvc_repro", "no-op dvc repro", "s", times["dvc"], Target("<=", 2.0)),
        Figure("noop.flow", "no-op python -m flows.pipeline (temporary server)", "s",
               times["flow"]),
        Figure("noop.flow_overhead", "flow overhead over no-op dvc repro (temporary server)",
               "s", over_dvc(times["flow"]), Target("<=", 5.0),
               note=f"{per_rep}; no PREFECT_API_URL, so Prefect starts and stops its temporary "
                    "server inside the run"),
        Figure("noop.flow_server", "no-op python -m flows.pipeline (running server)", "s",
               times["flow_server"]),
        Figure("noop.flow_server_overhead", "flow overhead over no-op dvc repro (running server)",
               "s", over_dvc(times["flow_server"]), Target("<=", 5.0),
               note=f"{per_rep}; PREFECT_API_URL set to a `prefect server start`, as scheduled "
                    "deployments run"))
    bench.details["noop"] = {"first_flow_run_seconds": round(first, 2), "stages_rerun": reran,
                             "flow_breakdown": breakdown}
    if reran:
        say(f"noop: WARNING: stages ran during the no-op measurement: {reran}")


def print_breakdown(breakdown: dict) -> None:
    """The instrumented flow run's breakdown, as lines."""
    print(f"flow breakdown (one instrumented run, {breakdown['total']:.1f} s):")
    for part, seconds in breakdown["parts"].items():
        print(f"  {seconds:7.2f} s  {part}")
    inside = breakdown["inside artifacts"]
    print(f"  (inside artifacts: {inside['git_state calls']} git_state calls, "
          f"{inside['git_state seconds']:.2f} s; provenance {inside['provenance seconds']:.2f} s)")
    for stage, parts in breakdown["per_stage"].items():
        print(f"  {stage:>14}: dvc repro {parts.get('dvc', 0):.2f} s, "
              f"artifacts {parts.get('artifacts', 0):.2f} s")


def measure_overhead(bench: Bench, processes: int = 1) -> None:
    budget, params = bench.budget, bench.params
    name = "overhead" if processes == 1 else f"overhead{processes}"
    warmup = budget.warmup_steps
    last = warmup + budget.save_intervals * params.train.save_steps
    reps = budget.reps if processes == 1 else budget.overhead2_reps
    policy = bench.base_model()
    say(f"{name}: {processes} process(es): bare GRPOTrainer vs the train stage's run, "
        f"{reps} x 2 runs of {last} steps, timed from step {warmup}'s end to step {last}'s")
    sides = ("bare", "pipeline")
    rates: dict[str, list[float]] = {side: [] for side in sides}
    shares: dict[str, list[float]] = {side: [] for side in sides}
    rewards: dict[str, list] = {side: [] for side in sides}
    profiles: dict[str, list[dict]] = {side: [] for side in sides}
    for rep in range(reps):
        for side in interleaved(sides, rep):
            result = bench.run_worker(side, policy, last, processes)
            rate, share = steady_rate(result["clock"], warmup, last)
            profile = step_profile(result["clock"], warmup, last,
                                   params.train.save_steps if side == "pipeline" else None)
            rates[side].append(rate)
            shares[side].append(share)
            rewards[side].append(result["rewards"])
            profiles[side].append(profile)
            extra = profile.get("checkpoint_extra")
            say(f"{name}: rep {rep + 1}/{reps}: {side}: {rate:.2f} steps/s (median step "
                f"{profile['median_step']:.3f} s"
                + (f", +{extra:.3f} s per checkpoint" if extra is not None else "")
                + f": {profile['typical_steps_per_s']:.2f} steps/s), reward functions "
                f"{share:.2%} of the time")
    ratios = [p / b for p, b in zip(rates["pipeline"], rates["bare"])]
    typical = {side: [p["typical_steps_per_s"] for p in profiles[side]] for side in sides}
    typical_ratios = [p / b for p, b in zip(typical["pipeline"], typical["bare"])]
    same = all(r == rewards["bare"][0] for side in rewards for r in rewards[side])
    procs = f"{processes} process{'es' * (processes > 1)}"
    note = (f"steps {warmup}..{last} of each run; checkpoints every {params.train.save_steps} "
            f"(pipeline side); same trajectory on both sides: {same}")
    bench.add(
        Figure(f"{name}.ratio", f"train stage / bare GRPOTrainer steps/s, {procs}", "x", ratios,
               Target(">=", 0.98), note=note),
        Figure(f"{name}.ratio_typical", "  the same from median steps + checkpoints", "x",
               typical_ratios, Target(">=", 0.98),
               note="1 / (median step + checkpoint extra / save_steps) on each side"),
        Figure(f"{name}.bare", f"  bare GRPOTrainer, {procs}", "steps/s", rates["bare"]),
        Figure(f"{name}.pipeline", f"  train stage's run, {procs}", "steps/s",
               rates["pipeline"]),
        Figure(f"{name}.reward_share", f"reward functions' share of step time, {procs}",
               "share", shares["pipeline"], Target("<=", 0.02)))
    bench.details[name] = {"processes": processes, "timed_steps": [warmup, last],
                           "save_steps": params.train.save_steps, "same_trajectory": same,
                           "reward_share_bare": shares["bare"],
                           # per side: the median over repetitions of each run's step profile
                           "step_profile": {side: {key: _finite(median_min(
                               [p[key] for p in profiles[side]])[0]) for key in profiles[side][0]}
                               for side in sides}}
    if not same:
        say(f"{name}: WARNING: the two sides' rewards differ: not the same work")


def measure_validation(bench: Bench) -> None:
    from rlvr.validation import validate_files

    folder = bench.scratch / "validation"
    files = {}
    for rows in VALIDATION_ROWS:
        out = folder / str(rows)
        bench.run([sys.executable, str(ROOT / "data/make_countdown.py"), "--train-rows",
                   str(rows), *VALIDATION_DATA, "--out-dir", str(out)], ROOT,
                  {**os.environ, "PYTHONPATH": str(ROOT)})
        files[rows] = (str(out / "grpo_train.jsonl"), str(out / "grpo_eval.jsonl"))
    max_chars = bench.params.data.max_prompt_chars

    def validate(rows: int) -> tuple[float, int]:
        started = time.perf_counter()
        reports = validate_files(*files[rows], rows, max_chars, docs_dir=folder / f"docs{rows}")
        return time.perf_counter() - started, sum(len(r.problems) for r in reports)

    say("validation: one untimed call first (imports Great Expectations)")
    validate(VALIDATION_ROWS[0])
    times: dict[int, list[float]] = {rows: [] for rows in VALIDATION_ROWS}
    problems = {}
    for rep in range(bench.budget.reps):
        for rows in interleaved(VALIDATION_ROWS, rep):
            seconds, problems[rows] = validate(rows)
            times[rows].append(seconds)
            say(f"validation: rep {rep + 1}/{bench.budget.reps}: {rows:,} rows: {seconds:.2f} s")
    small, large = VALIDATION_ROWS
    bench.add(*(Figure(f"validation.rows_{rows}", f"validate {rows:,} training rows", "s",
                       times[rows]) for rows in VALIDATION_ROWS),
              Figure("validation.ratio", f"  validation time, {large:,} / {small:,} rows", "x",
                     [b / a for a, b in zip(times[small], times[large])],
                     note=f"{large // small}x the rows"))
    bench.details["validation"] = {"problems_found": problems,
                                   "data": "data/make_countdown.py " + " ".join(VALIDATION_DATA)}


def measure_evaluation(bench: Bench) -> None:
    from rlvr.data import read_rows
    from rlvr.evaluation import audit, prompt_template, rollout_settings
    from rlvr.policy import load_policy
    from rlvr.rewards.registry import build_reward_funcs, normalized_weights

    params, ev = bench.params, bench.params.evaluate
    base = bench.base_model()
    cold = bench.cold_copy
    final = str(cold / params.paths.final_model) if cold is not None else base
    policies = {"step0": load_policy(base), "final": load_policy(final)}
    rows = read_rows(bench.eval_path)[:bench.budget.eval_prompts]
    settings = rollout_settings(params, n=ev.samples, seed=ev.seed)
    per_prompt = []
    for rep in range(bench.budget.reps):
        started = time.perf_counter()
        audit(policies, {"heldout": rows}, build_reward_funcs(params.rewards),
              normalized_weights(params.rewards.weights), settings,
              params.rewards.format_pattern, template=prompt_template(params.model),
              confidence=ev.confidence, n_resamples=ev.n_resamples)
        per_prompt.append((time.perf_counter() - started) / len(rows))
        say(f"evaluation: rep {rep + 1}/{bench.budget.reps}: {per_prompt[-1]:.3f} s per prompt")
    which = "the cold copy's base and final" if final != base else "the base model as both"
    bench.add(Figure("evaluation.per_prompt", "evaluation time per prompt", "s/prompt",
                     per_prompt, note=f"{len(rows)} held-out prompts, {which}, "
                     f"{ev.samples} samples + greedy + KL per policy"))


def measure_scaling(bench: Bench) -> None:
    import copy

    from rlvr.config import parse_params
    from rlvr.data import read_rows
    from rlvr.policy import prepare_base
    from tests.helpers import merge

    rows = read_rows(bench.train_path)
    warmup, last = bench.budget.scaling_steps
    models = {}
    for i, (name, model) in enumerate(SCALES):
        raw = copy.deepcopy(bench.raw)
        merge(raw, {"model": {**copy.deepcopy(model), "warm_start": {"steps": 0}}})
        params = parse_params(raw)
        folder = bench.scratch / f"scale{i}"
        summary = prepare_base(params.model, rows, params.seed, folder)
        models[name] = (raw, str(folder), summary["parameters"])
        say(f"scaling: {name}: {summary['parameters']:,} parameters")
    seconds: dict[str, list[float]] = {name: [] for name in models}
    for rep in range(bench.budget.scaling_reps):
        for name in interleaved(list(models), rep):
            raw, folder, _ = models[name]
            result = bench.run_worker("pipeline", folder, last, checkpoints=False, raw=raw)
            seconds[name].append(1 / steady_rate(result["clock"], warmup, last)[0])
            say(f"scaling: rep {rep + 1}/{bench.budget.scaling_reps}: {name}: "
                f"{seconds[name][-1]:.3f} s/step")
    slug = {name: name.split()[-1].lstrip("~").lower() for name in models}
    bench.add(*(Figure(f"scaling.{slug[name]}", f"s/step, {name} ({models[name][2]:,} params)",
                       "s/step", seconds[name],
                       note=f"random init; steps {warmup}..{last}") for name in models))
    bench.details["scaling"] = {name: {"parameters": models[name][2],
                                       "model": dict(SCALES)[name]} for name in models}


MEASUREMENTS: dict[str, Callable[[Bench], None]] = {
    "cold": measure_cold,
    "noop": measure_noop,
    "overhead": measure_overhead,
    "overhead2": lambda bench: measure_overhead(bench, processes=2),
    "validation": measure_validation,
    "evaluation": measure_evaluation,
    "scaling": measure_scaling,
}


def parse_only(text: str) -> list[str]:
    """--only's names, in the run's order.

    >>> parse_only("noop,cold")
    ['cold', 'noop']
    >>> parse_only("cold,warm")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: unknown measurement(s) ['warm']; known: cold, noop, overhead, overhead2, validation, evaluation, scaling
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in MEASUREMENTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown measurement(s) {unknown}; known: "
                                         f"{', '.join(MEASUREMENTS)}")
    return [n for n in MEASUREMENTS if n in names]


def machine() -> dict:
    from rlvr.provenance import compute_platform

    return {"cpus": os.cpu_count(), "platform": compute_platform(),
            "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "note": "a shared 2-core machine: timings are noisy; compare ratios"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="What the pipeline's layer costs: prints a table, writes reports/bench.json.",
        epilog=f"measurements: {', '.join(MEASUREMENTS)} (see the script's docstring)")
    parser.add_argument("--quick", action="store_true",
                        help="small budgets (tests/helpers.py SMALL_RUN), one repetition: "
                             "~3 minutes")
    parser.add_argument("--only", type=parse_only, metavar="NAME[,NAME]",
                        help="run these measurements only")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON (default "
                        "reports/bench.json; not a DVC output)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))  # tests/helpers.py: the project copies the tests make
    budget = QUICK if args.quick else FULL
    names = args.only or list(MEASUREMENTS)
    scratch = Path(tempfile.mkdtemp(prefix="bench."))
    started = time.perf_counter()
    context = machine()
    say(f"{budget.name} run of {', '.join(names)} on {context['cpus']} CPUs "
        f"({context['platform']}); scratch {scratch}")
    bench = Bench(budget, scratch)
    errors: dict[str, str] = {}
    done: list[str] = []

    def save() -> None:  # after every measurement: a run cut short keeps what it measured
        from rlvr.data import write_json

        write_json(args.out, bench_json(
            bench.figures, mode=budget.name, measurements=done, complete=done == names,
            seconds=time.perf_counter() - started, machine=context, details=bench.details,
            errors=errors))

    try:
        for name in names:
            began = time.perf_counter()
            say(f"--- {name}")
            try:
                MEASUREMENTS[name](bench)
            except Exception as error:  # noqa: BLE001 - report it, measure the rest
                if not isinstance(error, BenchError):
                    import traceback

                    traceback.print_exc()
                errors[name] = f"{type(error).__name__}: {error}"
                say(f"{name}: FAILED: {errors[name].splitlines()[0]}")
            say(f"{name}: {time.perf_counter() - began:.0f} s")
            done.append(name)
            context["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
            save()
    finally:
        if args.keep:
            say(f"scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    seconds = time.perf_counter() - started
    print()
    print(format_table(bench.figures))
    if "noop" in bench.details:
        print()
        print_breakdown(bench.details["noop"]["flow_breakdown"])
    missed = [f.label.strip() for f in bench.figures if f.met is False]
    say(f"{len(bench.figures)} figures in {seconds / 60:.1f} minutes; targets missed: "
        f"{', '.join(missed) or 'none'}; errors: {', '.join(errors) or 'none'}; wrote {args.out}")
    return 1 if errors else 0


if __name__ == "__main__":
    if sys.argv[1:2] == [WORKER]:
        worker(sys.argv[2])
    elif sys.argv[1:2] == [FLOW_PROFILE]:
        flow_profile(sys.argv[2])
    else:
        raise SystemExit(main())
