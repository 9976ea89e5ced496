"""The benchmark's measurements (scripts/bench.py): each adds its figures to the Bench it is
given. MEASUREMENTS names them, in the order a full run makes them."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

from scripts.bench_figures import (
    Figure,
    Target,
    finite_or_none,
    interleaved,
    median_interval,
    median_min,
    steady_rate,
    step_profile,
)
from scripts.bench_run import (
    BENCH_SCRIPT,
    FLOW_PROFILE,
    ROOT,
    SCALES,
    VALIDATION_DATA,
    VALIDATION_ROWS,
    Bench,
    BenchError,
    flow_breakdown,
    say,
)


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
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "prefect",
            "server",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env={**env, "PREFECT_HOME": str(home)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
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
                raise BenchError(
                    f"`prefect server start` did not answer on {api} (log: "
                    f"{bench.scratch / 'prefect-server.log'})"
                )
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
        commands = {
            "dvc": (["dvc", "repro"], env),
            "flow": (flow, env),
            "flow_server": (flow, {**env, "PREFECT_API_URL": api}),
        }
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
    bench.run([sys.executable, str(BENCH_SCRIPT), FLOW_PROFILE, str(profile_file)], project, env)
    breakdown = flow_breakdown(json.loads(profile_file.read_text()), spawned, time.time())

    def over_dvc(flow_times: list[float]) -> list[float]:
        return [f - d for f, d in zip(flow_times, times["dvc"])]

    per_rep = "per repetition: flow wall time - dvc repro wall time"
    bench.add(
        Figure("noop.dvc_repro", "no-op dvc repro", "s", times["dvc"], Target("<=", 2.0)),
        Figure(
            "noop.flow", "no-op python -m flows.pipeline (temporary server)", "s", times["flow"]
        ),
        Figure(
            "noop.flow_overhead",
            "flow overhead over no-op dvc repro (temporary server)",
            "s",
            over_dvc(times["flow"]),
            note=f"{per_rep}; no PREFECT_API_URL, so Prefect starts and stops its temporary "
            "server inside the run: Prefect's own cost, reported with no target (the "
            "target is held against a running server, as scheduled deployments run)",
        ),
        Figure(
            "noop.flow_server",
            "no-op python -m flows.pipeline (running server)",
            "s",
            times["flow_server"],
        ),
        Figure(
            "noop.flow_server_overhead",
            "flow overhead over no-op dvc repro (running server)",
            "s",
            over_dvc(times["flow_server"]),
            Target("<=", 5.0),
            note=f"{per_rep}; PREFECT_API_URL set to a `prefect server start`, as scheduled "
            "deployments run",
        ),
    )
    bench.details["noop"] = {
        "first_flow_run_seconds": round(first, 2),
        "stages_rerun": reran,
        "flow_breakdown": breakdown,
    }
    if reran:
        say(f"noop: WARNING: stages ran during the no-op measurement: {reran}")


def print_breakdown(breakdown: dict) -> None:
    """The instrumented flow run's breakdown, as lines."""
    print(f"flow breakdown (one instrumented run, {breakdown['total']:.1f} s):")
    for part, seconds in breakdown["parts"].items():
        print(f"  {seconds:7.2f} s  {part}")
    inside = breakdown["inside artifacts"]
    print(
        f"  (inside artifacts: {inside['git_state calls']} git_state calls, "
        f"{inside['git_state seconds']:.2f} s; provenance {inside['provenance seconds']:.2f} s)"
    )
    for stage, parts in breakdown["per_stage"].items():
        print(
            f"  {stage:>14}: dvc repro {parts.get('dvc', 0):.2f} s, "
            f"artifacts {parts.get('artifacts', 0):.2f} s"
        )


def measure_overhead(bench: Bench, processes: int = 1) -> None:
    budget, params = bench.budget, bench.params
    name = "overhead" if processes == 1 else f"overhead{processes}"
    warmup = budget.warmup_steps
    last = warmup + budget.save_intervals * params.train.save_steps
    reps = budget.min_pairs if processes == 1 else budget.overhead2_reps
    policy = bench.base_model()
    say(
        f"{name}: {processes} process(es): bare GRPOTrainer vs the train stage's run, "
        f"{reps} or more pairs of runs of {last} steps, timed from step {warmup}'s end to "
        f"step {last}'s"
    )
    sides = ("bare", "pipeline")
    rates: dict[str, list[float]] = {side: [] for side in sides}
    shares: dict[str, list[float]] = {side: [] for side in sides}
    rewards: dict[str, list] = {side: [] for side in sides}
    profiles: dict[str, list[dict]] = {side: [] for side in sides}
    # One process: at least min_pairs pairs, then more until the median ratio's interval is
    # within +-precision (at most max_pairs), since the layer's cost is about 1% and a few pairs
    # cannot resolve it. Two processes: overhead2_reps pairs (each costs twice as much).
    most = budget.max_pairs if processes == 1 else reps
    interval = None
    for rep in range(most):
        if rep >= reps and interval and (interval[1] - interval[0]) / 2 < budget.precision:
            break
        for side in interleaved(sides, rep):
            result = bench.run_worker(side, policy, last, processes)
            rate, share = steady_rate(result["clock"], warmup, last)
            profile = step_profile(
                result["clock"],
                warmup,
                last,
                params.train.save_steps if side == "pipeline" else None,
            )
            rates[side].append(rate)
            shares[side].append(share)
            rewards[side].append(result["rewards"])
            profiles[side].append(profile)
            extra = profile.get("checkpoint_extra")
            say(
                f"{name}: pair {rep + 1} (at least {reps}, at most {most}): {side}: {rate:.2f} "
                f"steps/s (median step "
                f"{profile['median_step']:.3f} s"
                + (f", +{extra:.3f} s per checkpoint" if extra is not None else "")
                + f": {profile['typical_steps_per_s']:.2f} steps/s), reward functions "
                f"{share:.2%} of the time"
            )
        ratios = [p / b for p, b in zip(rates["pipeline"], rates["bare"])]
        interval = median_interval(ratios)
        if interval:
            say(
                f"{name}: after {rep + 1} pairs: ratio median {median_min(ratios)[0]:.4f}, 95% "
                f"interval of the median [{interval[0]:.4f}, {interval[1]:.4f}]"
            )
    ratios = [p / b for p, b in zip(rates["pipeline"], rates["bare"])]
    typical = {side: [p["typical_steps_per_s"] for p in profiles[side]] for side in sides}
    typical_ratios = [p / b for p, b in zip(typical["pipeline"], typical["bare"])]
    same = all(r == rewards["bare"][0] for side in rewards for r in rewards[side])
    procs = f"{processes} process{'es' * (processes > 1)}"
    note = (
        f"steps {warmup}..{last} of each run; checkpoints every {params.train.save_steps} "
        f"(pipeline side); same trajectory on both sides: {same}"
    )
    bench.add(
        Figure(
            f"{name}.ratio",
            f"train stage / bare GRPOTrainer steps/s, {procs}",
            "x",
            ratios,
            Target(">=", 0.99),
            note=note,
            interval=median_interval(ratios),
        ),
        Figure(
            f"{name}.ratio_typical",
            "  the same from median steps + checkpoints",
            "x",
            typical_ratios,
            Target(">=", 0.99),
            interval=median_interval(typical_ratios),
            note="1 / (median step + checkpoint extra / save_steps) on each side",
        ),
        Figure(f"{name}.bare", f"  bare GRPOTrainer, {procs}", "steps/s", rates["bare"]),
        Figure(f"{name}.pipeline", f"  train stage's run, {procs}", "steps/s", rates["pipeline"]),
        Figure(
            f"{name}.reward_share",
            f"reward functions' share of step time, {procs}",
            "share",
            shares["pipeline"],
            Target("<=", 0.02),
        ),
    )
    bench.details[name] = {
        "processes": processes,
        "timed_steps": [warmup, last],
        "save_steps": params.train.save_steps,
        "same_trajectory": same,
        "reward_share_bare": shares["bare"],
        # per side: the median over repetitions of each run's step profile
        "step_profile": {
            side: {
                key: finite_or_none(median_min([p[key] for p in profiles[side]])[0])
                for key in profiles[side][0]
            }
            for side in sides
        },
    }
    if not same:
        say(f"{name}: WARNING: the two sides' rewards differ: not the same work")


def measure_validation(bench: Bench) -> None:
    from rlvr.data.validation import validate_files

    folder = bench.scratch / "validation"
    files = {}
    for rows in VALIDATION_ROWS:
        out = folder / str(rows)
        bench.run(
            [
                sys.executable,
                str(ROOT / "data/make_countdown.py"),
                "--train-rows",
                str(rows),
                *VALIDATION_DATA,
                "--out-dir",
                str(out),
            ],
            ROOT,
            {**os.environ, "PYTHONPATH": str(ROOT)},
        )
        files[rows] = (str(out / "grpo_train.jsonl"), str(out / "grpo_test.jsonl"))
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
    bench.add(
        *(
            Figure(f"validation.rows_{rows}", f"validate {rows:,} training rows", "s", times[rows])
            for rows in VALIDATION_ROWS
        ),
        Figure(
            "validation.ratio",
            f"  validation time, {large:,} / {small:,} rows",
            "x",
            [b / a for a, b in zip(times[small], times[large])],
            note=f"{large // small}x the rows",
        ),
    )
    bench.details["validation"] = {
        "problems_found": problems,
        "data": "data/make_countdown.py " + " ".join(VALIDATION_DATA),
    }


def measure_evaluation(bench: Bench) -> None:
    from rlvr.audit.evaluation import audit
    from rlvr.core.seeds import seed_paths
    from rlvr.data.rows import read_rows
    from rlvr.policy.models import load_policy
    from rlvr.policy.sampling import prompt_template, rollout_settings
    from rlvr.rewards.registry import build_reward_funcs, normalized_weights

    params, ev = bench.params, bench.params.evaluate
    base = bench.base_model()
    cold = bench.cold_copy
    first = seed_paths(params.paths, params.audit.seeds[0]).trained_model  # one seed's model
    final = str(cold / first) if cold is not None else base
    policies = {"step0": load_policy(base), "final": load_policy(final)}
    rows = read_rows(bench.eval_path)[: bench.budget.eval_prompts]
    settings = rollout_settings(params, n=ev.samples, seed=ev.seed)
    per_prompt = []
    for rep in range(bench.budget.reps):
        started = time.perf_counter()
        audit(
            policies,
            {"heldout": rows},
            build_reward_funcs(params.rewards),
            normalized_weights(params.rewards.weights),
            settings,
            params.rewards.format_pattern,
            template=prompt_template(params.model),
            confidence=ev.confidence,
            n_resamples=ev.n_resamples,
        )
        per_prompt.append((time.perf_counter() - started) / len(rows))
        say(f"evaluation: rep {rep + 1}/{bench.budget.reps}: {per_prompt[-1]:.3f} s per prompt")
    which = "the cold copy's base and final" if final != base else "the base model as both"
    bench.add(
        Figure(
            "evaluation.per_prompt",
            "evaluation time per prompt",
            "s/prompt",
            per_prompt,
            note=f"{len(rows)} held-out prompts, {which}, "
            f"{ev.samples} samples + greedy + KL per policy",
        )
    )


def measure_scaling(bench: Bench) -> None:
    import copy

    from rlvr.data.rows import read_rows
    from rlvr.params.config import parse_params
    from rlvr.policy.models import prepare_base
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
            say(
                f"scaling: rep {rep + 1}/{bench.budget.scaling_reps}: {name}: "
                f"{seconds[name][-1]:.3f} s/step"
            )
    slug = {name: name.split()[-1].lstrip("~").lower() for name in models}
    bench.add(
        *(
            Figure(
                f"scaling.{slug[name]}",
                f"s/step, {name} ({models[name][2]:,} params)",
                "s/step",
                seconds[name],
                note=f"random init; steps {warmup}..{last}",
            )
            for name in models
        )
    )
    bench.details["scaling"] = {
        name: {"parameters": models[name][2], "model": dict(SCALES)[name]} for name in models
    }


MEASUREMENTS: dict[str, Callable[[Bench], None]] = {
    "cold": measure_cold,
    "noop": measure_noop,
    "overhead": measure_overhead,
    "overhead2": lambda bench: measure_overhead(bench, processes=2),
    "validation": measure_validation,
    "evaluation": measure_evaluation,
    "scaling": measure_scaling,
}
