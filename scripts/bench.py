"""What the pipeline's own layer costs on top of TRL, DVC and Prefect: a benchmark that prints a
table (figure, median, min, target, met?) and writes reports/bench.json.

    ./dev bench                        the full run (~20-35 minutes on 2 idle CPU cores, most
                                       of it the overhead pairs)
    ./dev bench --quick                small budgets, one repetition (~3 minutes)
    ./dev bench --only overhead,noop   a subset (names below); --out PATH writes the JSON elsewhere

(`./dev bench ARGS` runs `python scripts/bench.py ARGS` in the project's environment.)

Everything is measured in this one run, side by side, with the repetitions of the things compared
interleaved (A B, B A, A B, ...); each figure is the median and the min of its repetitions, and the
median is what is held against the target. It measures and prints; it asserts nothing. The
measurements, by the names --only takes:

  cold        a cold `dvc repro` of the default in a fresh copy of the project (tracked and
              untracked files, outputs left out: tests/helpers.py make_project_copy): its wall
              time and each stage's, from reports/timing/<stage>.json (with the train stage's
              seconds scoring the validation rows, rlvr.core.timing.record_timing; never console
              text). The copy is then committed,
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
              >= 0.99), and the reward functions' share of step time (target <= 2%). Pairs of
              runs, interleaved, until the 95% bootstrap interval of the median ratio is within
              +-1% (at least 4 pairs, at most 30): the layer costs about 1%, which 4 pairs
              cannot resolve; the table prints the interval next to the median. Both sides
              load the same base model (models/base of the cold copy), the same training rows
              and reward functions, and the GRPOConfig that rlvr.grpo.config.grpo_config builds from
              params.yaml; each runs in a fresh process. Bare: `trl.GRPOTrainer(...).train()`,
              saving nothing. Pipeline: what the train stage runs (rlvr.pipeline.training.train_run):
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
              train.processes: 2 (rlvr/grpo/distributed.py); the pipeline side joins the process
              group as the stage does (start_rank).
  validation  rlvr.data.validation.validate_files, as the validate stage calls it (Data Docs written to
              a temporary folder), on 64 and on 6,400 training rows (both files made by
              data/make_countdown.py with 3 numbers from 1 to 20, since 2 from 1 to 12 give too few
              distinct problems), after one untimed call that imports Great Expectations.
  evaluation  rlvr.audit.evaluation.audit on the default evaluate settings (sampled k, greedy, KL of
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
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # scripts.bench_*, and tests/helpers.py: the project copies

from scripts.bench_figures import bench_json, format_table  # noqa: E402
from scripts.bench_measure import MEASUREMENTS, print_breakdown  # noqa: E402
from scripts.bench_run import (  # noqa: E402
    FLOW_PROFILE,
    FULL,
    QUICK,
    WORKER,
    Bench,
    BenchError,
    flow_profile,
    say,
    worker,
)

DEFAULT_OUT = ROOT / "reports" / "bench.json"
# The modules a run is made of (tests read their doctests and Figure calls).
MODULES = (
    "scripts/bench.py",
    "scripts/bench_figures.py",
    "scripts/bench_run.py",
    "scripts/bench_measure.py",
)


def parse_only(text: str) -> list[str]:
    """--only's names, in the run's order.

    >>> parse_only("noop,cold")
    ['cold', 'noop']
    >>> parse_only("cold,warm")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: unknown measurement(s) ['warm']; known: cold, noop, overhead, overhead2, validation, evaluation, scaling
    """  # noqa: E501 (one-line outputs and tables)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in MEASUREMENTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown measurement(s) {unknown}; known: {', '.join(MEASUREMENTS)}"
        )
    return [n for n in MEASUREMENTS if n in names]


def machine() -> dict:
    from rlvr.core.numerics import describe, numerics_in_force

    return {
        "cpus": os.cpu_count(),
        "platform": describe(numerics_in_force()),
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "note": "a shared 2-core machine: timings are noisy; compare ratios",
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="What the pipeline's layer costs: prints a table, writes reports/bench.json.",
        epilog=f"measurements: {', '.join(MEASUREMENTS)} (see the script's docstring)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small budgets (tests/helpers.py SMALL_RUN), one repetition: ~3 minutes",
    )
    parser.add_argument(
        "--only", type=parse_only, metavar="NAME[,NAME]", help="run these measurements only"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="the JSON (default reports/bench.json; not a DVC output)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))  # tests/helpers.py: the project copies the tests make
    budget = QUICK if args.quick else FULL
    names = args.only or list(MEASUREMENTS)
    scratch = Path(tempfile.mkdtemp(prefix="bench."))
    started = time.perf_counter()
    context = machine()
    say(
        f"{budget.name} run of {', '.join(names)} on {context['cpus']} CPUs "
        f"({context['platform']}); scratch {scratch}"
    )
    bench = Bench(budget, scratch)
    errors: dict[str, str] = {}
    done: list[str] = []

    def save() -> None:  # after every measurement: a run cut short keeps what it measured
        from rlvr.core.files import write_json

        write_json(
            args.out,
            bench_json(
                bench.figures,
                mode=budget.name,
                measurements=done,
                complete=done == names,
                seconds=time.perf_counter() - started,
                machine=context,
                details=bench.details,
                errors=errors,
            ),
        )

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
    say(
        f"{len(bench.figures)} figures in {seconds / 60:.1f} minutes; targets missed: "
        f"{', '.join(missed) or 'none'}; errors: {', '.join(errors) or 'none'}; wrote {args.out}"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    if sys.argv[1:2] == [WORKER]:
        worker(sys.argv[2])
    elif sys.argv[1:2] == [FLOW_PROFILE]:
        flow_profile(sys.argv[2])
    else:
        raise SystemExit(main())
