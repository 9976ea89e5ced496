"""The machinery of the benchmark (scripts/bench.py): the budgets, the Bench that the
measurements share (the cold copy, its base model, the figures so far), the timed GRPO worker
that runs in a fresh process, and the instrumented flow run."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from scripts.bench_figures import Figure, Target

ROOT = Path(__file__).resolve().parents[1]
BENCH_SCRIPT = ROOT / "scripts" / "bench.py"
WORKER = "_worker"  # internal: one GRPO run, timed (python bench.py _worker SPEC)
FLOW_PROFILE = "_flowprofile"  # internal: one instrumented flow run (python bench.py _flowprofile)
STAGE_DONE = ("done in ", "FAILED in ")  # the line each stage prints last (rlvr/pipeline/stage.py)


@dataclasses.dataclass(frozen=True)
class Budget:
    """How much of everything a run measures."""

    name: str
    quick: bool  # params on tests/helpers.py SMALL_RUN instead of the default
    reps: int  # interleaved repetitions of overhead, noop, validation, evaluation
    min_pairs: int  # overhead (1 process): at least this many interleaved pairs,
    max_pairs: int  # then more until the median ratio's 95% interval is
    precision: float  # within +-precision (or max_pairs are run)
    overhead2_reps: int  # the same, with 2 processes (each run costs twice as much)
    warmup_steps: int  # W: steps before the timed span
    save_intervals: int  # the timed span, in train.save_steps
    eval_prompts: int
    scaling_reps: int
    scaling_steps: tuple[int, int]  # (W, N) of each scaling run


FULL = Budget(
    "full",
    quick=False,
    reps=4,
    min_pairs=30,
    max_pairs=30,
    precision=0.01,
    overhead2_reps=2,
    warmup_steps=20,
    save_intervals=2,
    eval_prompts=8,
    scaling_reps=2,
    scaling_steps=(3, 8),
)
QUICK = Budget(
    "quick",
    quick=True,
    reps=1,
    min_pairs=1,
    max_pairs=1,
    precision=0.01,
    overhead2_reps=1,
    warmup_steps=4,
    save_intervals=2,
    eval_prompts=4,
    scaling_reps=1,
    scaling_steps=(2, 4),
)

# model.tiny sizes for the scaling figures (the first is the default), and the local_llm default.
SCALES = (
    ("tiny ~0.5M", {"init": "tiny"}),
    (
        "tiny ~5M",
        {
            "init": "tiny",
            "tiny": {
                "hidden_size": 256,
                "intermediate_size": 1024,
                "num_hidden_layers": 5,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
            },
        },
    ),
    (
        "tiny ~30M",
        {
            "init": "tiny",
            "tiny": {
                "hidden_size": 512,
                "intermediate_size": 2048,
                "num_hidden_layers": 8,
                "num_attention_heads": 8,
                "num_key_value_heads": 4,
            },
        },
    ),
    ("local_llm", {"init": "local_llm", "chat_template": True}),
)
VALIDATION_ROWS = (64, 6400)
# data/make_countdown.py arguments with enough distinct problems for 6,400 rows
VALIDATION_DATA = ("--numbers", "3", "--high", "20", "--test-rows", "64")


class BenchError(Exception):
    """A measurement could not be made (a command failed); the message says which and why."""


def say(message: str) -> None:
    print(f"bench: {message}", flush=True)


def stage_runs(dvc_yaml: Path, seeds: Sequence[int]) -> list[str]:
    """Each stage run in dvc.yaml's order, named as DVC names it and as its timing file is named:
    a seeded stage once per RL seed (train@0, train@1, ...), any other once."""
    from rlvr.orchestration.runs import dvc_stages, seeded_stages
    from rlvr.pipeline.stage import stage_label

    seeded = seeded_stages(dvc_yaml)
    return [
        stage_label(stage, seed)
        for stage in dvc_stages(dvc_yaml)
        for seed in (seeds if stage in seeded else [None])
    ]


class Bench:
    """What the measurements share: the budget, the params, a scratch folder, the cold copy and
    its base model (made once, when first needed), and the figures collected so far."""

    def __init__(self, budget: Budget, scratch: Path) -> None:
        import copy

        from rlvr.params.config import parse_params, read_params_file
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

    def run(
        self, command: Sequence[str], cwd: Path, env: dict | None = None, echo: tuple[str, ...] = ()
    ) -> tuple[float, str]:
        """Run a command; (wall seconds, its output). Lines containing an `echo` string are
        printed as they come. A failure raises BenchError with the output's tail."""
        started = time.perf_counter()
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines = []
        for line in process.stdout:
            lines.append(line)
            if echo and any(e in line for e in echo):
                say(f"  {line.rstrip()}")
        code = process.wait()
        seconds = time.perf_counter() - started
        output = "".join(lines)
        if code != 0:
            raise BenchError(f"`{' '.join(map(str, command))}` exited {code}:\n{output[-3000:]}")
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
        from rlvr.pipeline.stage import stage_label
        from tests.helpers import commit_all, make_project_copy

        project = make_project_copy(self.scratch / "project", self.overrides)
        budget = "tests/helpers.py SMALL_RUN" if self.overrides else "the default params.yaml"
        say(f"cold: `dvc repro` of {budget} in a fresh copy, {project}")
        seconds, _ = self.run(["dvc", "repro"], project, self.project_env(project), echo=STAGE_DONE)
        timing = project / self.params.paths.timing
        labels = stage_runs(project / "dvc.yaml", self.params.audit.seeds)
        recorded = {
            label: json.loads((timing / f"{label}.json").read_text())
            for label in labels
            if (timing / f"{label}.json").exists()
        }
        stages = {label: recorded.get(label, {}).get("seconds", math.nan) for label in labels}
        commit_all(project, "cold run")
        self.add(
            Figure(
                "cold.total",
                "cold dvc repro, all stages",
                "s",
                [seconds],
                note=f"one run, {budget}",
            ),
            *(Figure(f"cold.{stage}", f"  cold: {stage}", "s", [s]) for stage, s in stages.items()),
        )
        self.details["cold"] = {"params": budget, "seconds": round(seconds, 1), "stages": stages}
        first = stage_label("train", self.params.audit.seeds[0])
        train = recorded.get(first, {})
        if train.get("validation_seconds") is not None and train.get("train_runtime"):
            share = round(train["validation_seconds"] / train["train_runtime"], 6)
            self.add(
                Figure(
                    "cold.validation_share",
                    "scoring the validation rows, share of train time",
                    "share",
                    [share],
                    Target("<=", 0.15),
                    note=f"reports/timing/{first}.json: validation_seconds / train_runtime",
                )
            )
        return project

    def base_model(self) -> str:
        """The cold copy's models/base when this run made one, else one built here with
        prepare_model's code (rlvr.policy.models.prepare_base) on the same params."""
        if self._base is None:
            if self._project is not None:
                self._base = str(self._project / self.params.paths.base_model)
            else:
                from rlvr.data.rows import read_rows
                from rlvr.policy.models import prepare_base

                say("building a base model with prepare_model's code (no cold copy in this run)")
                prepare_base(
                    self.params.model,
                    read_rows(self.train_path),
                    self.params.seed,
                    self.scratch / "base",
                )
                self._base = str(self.scratch / "base")
        return self._base

    def run_worker(
        self,
        side: str,
        policy: str,
        max_steps: int,
        processes: int = 1,
        checkpoints: bool = True,
        raw: dict | None = None,
    ) -> dict:
        """One timed GRPO run in a fresh process (or `processes` ranks under accelerate launch,
        as rlvr/grpo/distributed.py launches the train stage); the main process's clock."""
        from rlvr.grpo.distributed import free_port, launch_args

        self._runs += 1
        work = self.scratch / f"run{self._runs}-{side}"
        work.mkdir(parents=True)
        spec = {
            "side": side,
            "params": raw or self.raw,
            "train_path": self.train_path,
            "policy": policy,
            "max_steps": max_steps,
            "checkpoints": checkpoints,
            "work": str(work),
            "result": str(work / "result.json"),
        }
        (work / "spec.json").write_text(json.dumps(spec))
        script = [str(BENCH_SCRIPT), WORKER, str(work / "spec.json")]
        if processes > 1:
            launcher = launch_args(
                "-", processes, use_cpu=self.params.train.grpo.use_cpu, port=free_port()
            )
            assert launcher[-2] == "-m", launcher  # '-m -': replaced by the script
            command = [
                str(Path(sys.executable).parent / "accelerate"),
                "launch",
                *launcher[:-2],
                *script,
            ]
        else:
            command = [sys.executable, *script]
        self.run(command, work, {**os.environ, "PYTHONPATH": str(ROOT)})
        result = json.loads((work / "result.json").read_text())
        shutil.rmtree(work)  # checkpoints and curves: only the clock is kept
        if result["processes"] != processes:
            raise BenchError(
                f"asked for {processes} processes, the trainer had {result['processes']}"
            )
        return result


# --------------------------------------------------------------------------- the worker


def worker(spec_file: str) -> None:
    """One timed GRPO run (in a fresh process, or in each rank under accelerate launch): the bare
    TRL trainer or the train stage's run_grpo, per the spec; the main process writes the clock."""
    from transformers import TrainerCallback, set_seed

    from rlvr.core.files import write_json
    from rlvr.core.metric_keys import LOSS, REWARD
    from rlvr.data.rows import read_rows, to_hf_dataset
    from rlvr.grpo.callbacks import LiveCurvesCallback
    from rlvr.grpo.config import grpo_config, peft_config
    from rlvr.grpo.distributed import is_main_process, launched, start_rank
    from rlvr.grpo.run import run_grpo
    from rlvr.params.config import parse_params
    from rlvr.rewards.registry import build_reward_funcs

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
            self.ticks.append(
                (state.global_step, time.perf_counter(), sum(f.seconds for f in rewards))
            )

    rewards = [TimedReward(f) for f in build_reward_funcs(params.rewards)]
    clock = StepClock()
    if spec["side"] == "bare":
        from trl import GRPOTrainer

        set_seed(params.seed)
        config = grpo_config(
            params.train,
            output_dir=work / "out",
            max_steps=spec["max_steps"],
            seed=params.seed,
            reward_weights=params.rewards.weights,
            chat_template_kwargs=params.model.chat_template_kwargs,
        )
        trainer = GRPOTrainer(
            model=spec["policy"],
            reward_funcs=rewards,
            args=config,
            train_dataset=to_hf_dataset(rows, params.model.chat_template),
            peft_config=peft_config(params.model),
            callbacks=[clock],
        )
        trainer.train()
    else:
        if launched():  # as the train stage's ranks do
            start_rank("bench", use_cpu=params.train.grpo.use_cpu)
        trainer = run_grpo(
            params,
            rows,
            spec["policy"],
            work / "checkpoints",
            spec["max_steps"],
            save_steps=params.train.save_steps if spec["checkpoints"] else None,
            callbacks=[LiveCurvesCallback(work / "live"), clock],
            reward_funcs=rewards,
        )
    if is_main_process():
        write_json(
            spec["result"],
            {
                "clock": clock.ticks,
                "processes": trainer.accelerator.num_processes,
                "rewards": [
                    entry.get(REWARD) for entry in trainer.state.log_history if LOSS in entry
                ],
            },
        )


# --------------------------------------------------------------------------- the flow profile

# What the flow profile times, where the flow module has it: name in flows/pipeline.py -> kind.
FLOW_CALLS = {
    "stale_stages": "dvc status",
    "repro_stage": "dvc",
    "publish_stage_artifacts": "artifacts",
}
TASK_KINDS = ("dvc status", "dvc", "artifacts")  # the calls that make up the flow's work


def flow_profile(out: str) -> None:
    """One `python -m flows.pipeline` run in the current folder (a project copy on PYTHONPATH),
    with stopwatches around its `dvc status`, each stage task's `dvc repro`, each stage's
    artifacts, and the git and provenance calls inside them; writes the marks and spans to `out`."""
    marks = {"started": time.time()}
    import flows.pipeline as pipeline_module
    import rlvr.report.provenance as provenance_module

    marks["imported"] = time.time()
    spans: list[dict] = []

    def stopwatch(kind: str, func):
        def timed(*args, **kwargs):
            started = time.time()
            try:
                return func(*args, **kwargs)
            finally:
                stage = args[0] if kind in ("dvc", "artifacts") else None
                spans.append({"kind": kind, "stage": stage, "start": started, "end": time.time()})

        return timed

    for name, kind in FLOW_CALLS.items():
        if hasattr(pipeline_module, name):
            setattr(pipeline_module, name, stopwatch(kind, getattr(pipeline_module, name)))
    provenance_module.git_state = stopwatch("git", provenance_module.git_state)
    provenance_module.data_and_model_hashes = stopwatch(
        "provenance", provenance_module.data_and_model_hashes
    )
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
            entry[span["kind"]] = round(
                entry.get(span["kind"], 0.0) + span["end"] - span["start"], 3
            )
    return {
        "total": round(ended - spawned, 3),
        "parts": {k: round(v, 3) for k, v in parts.items()},
        "inside artifacts": {
            "git_state calls": sum(s["kind"] == "git" for s in spans),
            "git_state seconds": round(total("git"), 3),
            "provenance seconds": round(total("provenance"), 3),
        },
        "per_stage": per_stage,
    }
