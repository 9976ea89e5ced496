"""What the Prefect flows need from the pipeline: the stage list (from dvc.yaml), running a stage
through `dvc repro`, failure messages that name what broke, the Failed states that carry them, the
lock that keeps two flow runs off one workspace, and the artifacts of each stage.

The artifact contents are built by pure functions (`stage_artifacts`) from the files the stages
wrote; `publish_stage_artifacts` hands them to Prefect. Keys stay the same from run to run, so
Prefect keeps every version.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from rlvr.core.errors import PipelineError
from rlvr.core.seeds import seed_paths
from rlvr.params.config import PathsParams, data_files, load_params, test_file_reader
from rlvr.report.model_card import CARD_FILE, card_body
from rlvr.report.provenance import data_and_model_hashes, git_state, read_lock


class StageFailed(PipelineError):
    """A DVC stage failed; the message names the stage and what broke."""


class WorkspaceBusy(PipelineError):
    """Another flow run holds the workspace; the message names it."""


@dataclass
class Artifact:
    key: str  # lowercase letters, digits and dashes
    kind: str  # table | markdown | link
    description: str
    table: list[dict] = field(default_factory=list)
    markdown: str = ""
    link: str = ""


def _dvc_yaml_stages(dvc_yaml: str | Path) -> dict:
    return (YAML(typ="safe").load(Path(dvc_yaml).read_text()) or {})["stages"]


def dvc_stages(dvc_yaml: str | Path = "dvc.yaml") -> list[str]:
    """Stage names in dvc.yaml's order (the order they are written, upstream first)."""
    return list(_dvc_yaml_stages(dvc_yaml))


def seeded_stages(dvc_yaml: str | Path = "dvc.yaml") -> set[str]:
    """The stages run once per RL seed (`foreach: ${audit.seeds}`: train, evaluate): one seed's
    failure leaves the others to run (`dvc repro --keep-going`)."""
    return {name for name, stage in _dvc_yaml_stages(dvc_yaml).items() if "foreach" in stage}


# The stage that pools the seeds. DVC runs it once every seed has run to the end; after a failed
# seed the flow runs it alone, on the seeds that did (recipe_alone).
RECIPE_STAGE = "recipe"


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _paths(root: Path) -> PathsParams:
    return load_params(root / "params.yaml").paths


def failure_detail(stage: str, root: Path, output: str) -> str:
    """The part of a failure a user needs: failing tests, bad rows, failed checks, or the tail."""
    if stage == "reward_tests" and "reward_tests: running" in output:
        gate = root / _paths(root).gate_verdict
        verdict = json.loads(gate.read_text()) if gate.exists() else {}
        why = ", ".join(verdict.get("failing") or []) or verdict.get("reason")
        if why:
            return f"failing reward tests: {why}"
    if stage == "validate":
        rows = [
            line
            for line in output.splitlines()
            if line.endswith("]") and ": " in line and not line.startswith(("validate:", "ERROR"))
        ]
        if rows:
            return "invalid rows:\n" + "\n".join(rows)
    if stage == "smoke":
        failed = [line for line in output.splitlines() if line.startswith("smoke check failed")]
        if failed:
            return "\n".join(failed)
    said = _stage_line(stage, output)
    return said if said else _tail(output)


def _stage_line(stage: str, output: str) -> str | None:
    r"""The line a stage stopped with (rlvr.pipeline.stage.run_stage prints "<stage>: <why>" for a
    PipelineError and exits): the last line before DVC's "failed to reproduce", if it is the
    stage's own and not its "FAILED" summary (a bug's, whose traceback the tail keeps).

    >>> _stage_line("check_params", "Running stage 'check_params':\n> python -m x\n"
    ...             "check_params: params.yaml: a = 0: must be > 0\n"
    ...             "ERROR: failed to reproduce 'check_params': failed to run: x, exited with 1")
    'check_params: params.yaml: a = 0: must be > 0'
    >>> _stage_line("train", "train: step 3\nKeyError: 1\ntrain: FAILED on an unexpected error"
    ...             "\nERROR: failed to reproduce 'train'") is None
    True
    >>> _stage_line("train", "train@1: stopped by SIGTERM\nERROR: failed to reproduce 'train@1'")
    'train@1: stopped by SIGTERM'
    >>> _stage_line("train", "train@2: the disk is full\nWARNING: failed to run: x, exited with 1"
    ...             "\nWARNING: Stages 'recipe' will be skipped due to this failure\n"
    ...             "ERROR: failed to reproduce 'train@2'")  # --keep-going warns in between
    'train@2: the disk is full'
    """
    # DVC's own warnings (--keep-going: the stages it skips) stand between the two
    lines = [
        line for line in output.splitlines() if line.strip() and not line.startswith("WARNING: ")
    ]
    name = re.escape(stage) + r"(@\d+)?"  # a per-seed stage: train@1
    ends = [
        i for i, line in enumerate(lines) if re.match(f"ERROR: failed to reproduce '{name}'", line)
    ]
    if not ends or ends[0] == 0:
        return None
    last = lines[ends[0] - 1]
    if re.match(f"{name}: ", last) and not re.match(f"{name}: FAILED", last):
        return last
    return None


def stages_ran(output: str) -> list[str]:
    """The stages `dvc repro` says it ran (not those it skipped or restored), in its order.

    >>> stages_ran("Stage 'smoke' didn't change, skipping\\nRunning stage 'train@0':\\n> x"
    ...            "\\nRunning stage 'train@1':\\n")
    ['train@0', 'train@1']
    """
    return re.findall(r"^Running stage '([^']+)'", output, flags=re.M)


def readable(output: str) -> str:
    r"""A stage's output as a person reads it in a log: each progress bar's last state only (a bar
    redraws itself with \r), every line of every seed kept.

    >>> readable("train@0: start\n  0%|  | 0/8\r 50%|  | 4/8\r100%|  | 8/8\ntrain@0: done\n")
    'train@0: start\n100%|  | 8/8\ntrain@0: done\n'
    """
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in output.split("\n"))


def tool_env() -> dict[str, str]:
    """The environment for dvc and the stages: this interpreter's bin folder first on PATH, so a
    flow run by a worker uses the project's environment even if the worker's PATH lacks it."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def run_dvc(
    root: str | Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`dvc <args>` in root, with tool_env() plus `env`."""
    return subprocess.run(
        ["dvc", *args], cwd=root, capture_output=True, text=True, env={**tool_env(), **(env or {})}
    )


def stale_stages(root: str | Path) -> set[str] | None:
    """The stages `dvc status` says must rerun (one DVC call for the whole pipeline), or None if
    it cannot tell (then every stage goes through `dvc repro`, which decides for itself)."""
    run = run_dvc(root, "status", "--json")
    try:
        status = json.loads(run.stdout) if run.returncode == 0 else None
    except ValueError:
        status = None
    if not isinstance(status, dict):
        return None
    # "dvc.yaml:train@1" -> "train": the flow runs a per-seed stage as its whole group
    return {name.rsplit(":", 1)[-1].split("@", 1)[0] for name in status}


def stages_to_run(order: list[str], stale: set[str] | None) -> list[str]:
    """The stages a run must hand to `dvc repro`: from the first stale one on (a rerun upstream
    can change what a later stage reads), none if nothing is stale; all of them if it is unknown,
    or if a stale stage is not in `order` (a subset run: `dvc repro` reruns what it needs).

    >>> stages_to_run(["a", "b", "c", "d"], {"c"}), stages_to_run(["a", "b"], set())
    (['c', 'd'], [])
    >>> stages_to_run(["a", "b"], None), stages_to_run(["c", "d"], {"a"})
    (['a', 'b'], ['c', 'd'])
    """
    if stale is None or stale - set(order):
        return list(order)
    first = next((i for i, stage in enumerate(order) if stage in stale), len(order))
    return list(order[first:])


def repro_stage(stage: str, root: str | Path, keep_going: bool = False) -> str:
    """`dvc repro <stage>` in root (with keep_going, `--keep-going`: a per-seed stage's other
    seeds run on after one fails); its output, or StageFailed naming the stage and the cause."""
    root = Path(root)
    run = run_dvc(root, "repro", *(["--keep-going"] if keep_going else []), stage)
    output = run.stdout + run.stderr
    if run.returncode != 0:
        raise StageFailed(
            f"stage {stage} failed (dvc repro exit {run.returncode}): "
            f"{failure_detail(stage, root, output)}"
        )
    return output


def recipe_alone(root: str | Path) -> tuple[str, str]:
    """Stage recipe run outside DVC (`python -m stages.recipe`), on the seeds that ran to the end
    after another failed: its output and the recipe's verdict line (it names the failed seeds).
    DVC records nothing: `dvc repro` reruns the failed seeds, then the recipe, in its own time."""
    root = Path(root)
    run = subprocess.run(
        [sys.executable, "-m", "stages.recipe"],
        cwd=root,
        capture_output=True,
        text=True,
        env=tool_env(),
    )
    output = run.stdout + run.stderr
    if run.returncode != 0:
        raise StageFailed(
            f"stage {RECIPE_STAGE} failed on the seeds that ran (exit "
            f"{run.returncode}): {_tail(output)}"
        )
    recipe = _json(root, _paths(root).recipe_summary) or {}
    return output, (
        f"the recipe over {len(recipe.get('evaluated') or [])} of "
        f"{len(recipe.get('seeds') or [])} seeds: {recipe.get('verdict_line')}"
    )


# ------------------------------------------------------------------ how a flow run ends


def failed(error: PipelineError):
    """A Prefect Failed state whose message is the error's line and whose data is the error.

    Returned from a task or flow instead of raised: Prefect 3.9.1 logs a raised exception with its
    traceback, once for the task run (task_engine.py SyncTaskRunEngine.handle_retry,
    exc_info=True) and once for the flow run (flow_engine.py FlowRunEngine.run_context,
    logger.exception); a returned manual state is kept as it is (states.py
    return_value_to_state) and only "Finished in state Failed('<message>')" is logged. A plain
    call of the flow still raises `error` (flow_engine.py FlowRunEngine.result -> states.py
    get_state_exception, which returns the exception held in the state's data)."""
    # prefect here and below, not at the top: ~1.2 s to import, and check_params imports this
    # module (through the experiments' checks) without running a flow
    from prefect.states import Failed

    return Failed(message=str(error), data=error)


def ended(state):
    """How a flow ends after a task or subflow it ran with return_state=True did not complete:
    Failed with that run's own line when it failed on expected grounds (a PipelineError), so the
    line is the flow run's message too (the state returned as it is, Prefect 3.9.1 would name the
    flow "1/1 states failed.": states.py return_value_to_state aggregates a state holding a run
    id; guarded by tests/team/test_headlines.py); a bug, a crash or a cancellation raises, as it
    would have without return_state."""
    if state.is_failed():
        error = state.result(raise_on_failure=False)
        if isinstance(error, PipelineError):
            return failed(error)
    state.result()  # raises for any state that is not Completed
    return state


def stage_failure(stage: str, state):
    """How the flow ends after stage `stage`'s task did not complete (`state`, from
    return_state=True): as `ended`, and a stage that ran past its timeout is named with the knob."""
    # Prefect 3.9.1 names a task's timeout state "TimedOut" (task_engine.py handle_timeout)
    if state.is_failed() and state.name == "TimedOut":
        return failed(
            StageFailed(
                f"stage {stage} failed: {state.message} (params.yaml orchestration.timeouts)"
            )
        )
    return ended(state)


class _NoEmptyExcInfo(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info == (None, None, None):
            record.exc_info = None
        return True


def quiet_returned_failures() -> None:
    """Prefect 3.9.1 logs a task's returned Failed state, once its retries are spent, with
    exc_info=True outside any `except` (task_engine.py SyncTaskRunEngine.handle_retry), which
    prints a bare "NoneType: None" under the line: drop that empty exc_info on the task-run
    logger (a real exception's traceback is untouched). Idempotent. Guarded by
    tests/test_flow_failures.py (no "NoneType: None" in the console)."""
    logger = logging.getLogger("prefect.task_runs")
    if not any(isinstance(f, _NoEmptyExcInfo) for f in logger.filters):
        logger.addFilter(_NoEmptyExcInfo())


# ------------------------------------------------------------------ one flow run per workspace

# Git ignores .dvc/tmp (.dvc/.gitignore) and DVC never reads it as data; DVC's own lock is
# .dvc/tmp/lock, taken by every `dvc repro` the flow starts, so ours must be another file.
WORKSPACE_LOCK = ".dvc/tmp/rlvr-flow.lock"


def flow_run_holder() -> dict:
    """Who takes the workspace: this process's Prefect flow run (name, id, flow), pid and time."""
    from prefect.runtime import flow_run

    return {
        "flow_run": flow_run.name,
        "flow_run_id": flow_run.id,
        "flow": flow_run.flow_name,
        "pid": os.getpid(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def busy_line(root: str | Path, holder: dict | None) -> str:
    """One line naming the run that holds the workspace.

    >>> print(busy_line("/w", {"flow_run": "calm-fox", "flow_run_id": "f00", "pid": 42,
    ...                        "flow": "grpo-pipeline", "started": "2026-12-01T02:00:00+00:00"}))
    ... # doctest: +NORMALIZE_WHITESPACE
    workspace /w is in use by flow run 'calm-fox' (id f00, flow grpo-pipeline), pid 42,
    started 2026-12-01T02:00:00+00:00: wait for it to end or stop it
    >>> print(busy_line("/w", {"pid": 7, "started": "t"}))  # doctest: +NORMALIZE_WHITESPACE
    workspace /w is in use by a process outside any flow run, pid 7, started t:
    wait for it to end or stop it
    >>> print(busy_line("/w", None))  # doctest: +NORMALIZE_WHITESPACE
    workspace /w is in use by another process that has not yet said who it is:
    try again in a moment
    """
    if not holder:  # it has the lock but has not written its record yet
        return (
            f"workspace {root} is in use by another process that has not yet said who it "
            f"is: try again in a moment"
        )
    if holder.get("flow_run"):
        who = (
            f"flow run '{holder['flow_run']}' (id {holder.get('flow_run_id')}, flow "
            f"{holder.get('flow')})"
        )
    else:
        who = "a process outside any flow run"
    return (
        f"workspace {root} is in use by {who}, pid {holder.get('pid')}, started "
        f"{holder.get('started')}: wait for it to end or stop it"
    )


@contextmanager
def workspace_lock(root: str | Path, holder: dict | None = None) -> Iterator[dict]:
    """Hold the workspace `root` for one flow run, or raise WorkspaceBusy naming the run that
    holds it. The lock is the OS's (flock on WORKSPACE_LOCK): it goes with its process, so a
    killed holder never blocks the next run; the file's content says who holds it (`holder`,
    default flow_run_holder()). The descriptor is not inherited (PEP 446), so a `dvc repro` that
    outlives a killed flow does not keep the workspace."""
    lock = Path(root) / WORKSPACE_LOCK
    if not lock.parent.parent.is_dir():
        raise PipelineError(f"{root}: not a DVC repository (no .dvc folder)")
    lock.parent.mkdir(exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)  # no O_TRUNC: the holder's record stays
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                os.close(fd)
                raise
            text = os.pread(fd, 65536, 0).decode("utf-8", "replace")
            os.close(fd)
            try:
                recorded = json.loads(text)
            except ValueError:
                recorded = None
            raise WorkspaceBusy(busy_line(root, recorded)) from None
        try:  # the file we locked is still the one at the path (nobody removed it meanwhile)
            if os.path.samestat(os.fstat(fd), os.stat(lock)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    record = holder or flow_run_holder()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        yield record
    finally:
        os.ftruncate(fd, 0)  # no stale record for the next one to read
        os.close(fd)  # releases the lock


def audit_verdict(root: str | Path) -> str | None:
    """The recipe's verdict over its seeds (paths.recipe_metrics' `verdict`), None before stage
    recipe has run."""
    return (_json(Path(root), _paths(Path(root)).recipe_metrics) or {}).get("verdict")


def run_summary(result: dict) -> str:
    """A completed pipeline run in one line: the artifacts it published and the verdict.

    >>> run_summary({"artifacts": {"a": ["x", "y"], "b": []}, "verdict": "improved"})
    'artifacts x, y; audit verdict: improved'
    >>> run_summary({"artifacts": {"a": []}, "verdict": None})
    'artifacts none; audit verdict: none yet'
    """
    keys = ", ".join(key for keys in result["artifacts"].values() for key in keys) or "none"
    return f"artifacts {keys}; audit verdict: {result['verdict'] or 'none yet'}"


# ------------------------------------------------------------------ artifacts


def provenance_line(root: Path) -> str:
    """git commit, the md5s of the data files and the models (each from the stage that wrote it
    in dvc.lock) and the stage wall times, for artifact descriptions."""
    params = load_params(root / "params.yaml")
    paths = params.paths
    trained = [seed_paths(paths, seed).trained_model for seed in params.audit.seeds]
    # Not rlvr.report.provenance.provenance: its compute platform imports torch (2 s per flow run).
    found = data_and_model_hashes(
        data_files(params),
        [paths.base_model, *trained],
        read_lock(root / "dvc.lock"),
        root,
        test_file_reader(params),
    )
    hashes = ", ".join(
        f"{path} {md5[:12]}" for path, md5 in {**found["data"], **found["models"]}.items()
    )
    git = git_state(root)
    dirty = " (uncommitted changes)" if git["dirty"] else ""
    seconds = [
        f"{f.stem} {json.loads(f.read_text()).get('seconds')} s"
        for f in sorted((root / paths.timing).glob("*.json"))
    ]
    return f"git {git['commit'][:12]}{dirty}; dvc.lock: {hashes}" + (
        f"; wall time: {', '.join(seconds)}" if seconds else ""
    )


def _json(root: Path, path: str) -> Any:
    file = root / path
    return json.loads(file.read_text()) if file.exists() else None


def _reward_tests_artifacts(root: Path, where: str) -> list[Artifact]:
    gate = _json(root, _paths(root).gate_verdict) or {}
    return [
        Artifact(
            "reward-tests",
            "table",
            f"Reward-test gate. {where}",
            table=[
                {
                    "gate": "passed" if gate.get("passed") else "FAILED",
                    **gate.get("counts", {}),
                    "failing": ", ".join(gate.get("failing", [])),
                }
            ],
        )
    ]


def _validate_artifacts(root: Path, where: str) -> list[Artifact]:
    summary = _json(root, _paths(root).validation_summary) or {"files": {}}
    rows = [
        {
            "file": f["path"],
            "rule": rule,
            "held": r["success"],
            "rows breaking it": r["unexpected_count"],
        }
        for f in summary["files"].values()
        for rule, r in f["rules"].items()
    ]
    return [
        Artifact(
            "data-validation", "table", f"Data validation per file and rule. {where}", table=rows
        )
    ]


def _smoke_artifacts(root: Path, where: str) -> list[Artifact]:
    checks = _json(root, _paths(root).smoke_checks) or {"checks": []}
    return [
        Artifact(
            "smoke-checks",
            "table",
            f"Smoke-run checks. {where}",
            table=[
                {
                    "check": c["name"],
                    "passed": c["passed"],
                    "value": json.dumps(c["value"]),
                    "expected": str(c["expected"]),
                }
                for c in checks["checks"]
            ],
        )
    ]


def _seeds(root: Path) -> list[int]:
    return load_params(root / "params.yaml").audit.seeds


def _train_artifacts(root: Path, where: str) -> list[Artifact]:
    paths = _paths(root)
    step0 = _json(root, paths.step0) or {}
    lines = [
        "# Training summary",
        "",
        f"Step-0 baseline mean reward: {step0.get('mean_reward', float('nan')):.3f}",
        "",
        "| seed | steps | mean reward, first 10 steps | last 10 steps | final KL | final beta "
        "| curves |",
        "|---|---|---|---|---|---|---|",
    ]
    for seed in _seeds(root):
        run = seed_paths(paths, seed)
        m = _json(root, run.train_summary) or {}
        lines.append(
            f"| {seed} | {m.get('steps')} | "
            f"{m.get('first10_mean_reward', float('nan')):.3f} | "
            f"{m.get('last10_mean_reward', float('nan')):.3f} | "
            f"{m.get('last10_mean_kl', float('nan')):.4f} | "
            f"{m.get('final', {}).get('beta')} | "
            f"{(root / run.train_curves).resolve().as_uri()} |"
        )
    return [
        Artifact(
            "training-summary",
            "markdown",
            f"GRPO training summary, per RL seed. {where}",
            markdown="\n".join(lines),
        )
    ]


def _split_row(seed: str, split: str, s: dict, verdict: str | None) -> dict:
    d, n = s["delta_mean_reward"], str(s["samples_per_prompt"])
    curves, solved = s["pass_at_k"], s.get("solutions") or {}
    return {
        "seed": seed,
        "split": split,
        "mean reward step 0": s["step0"]["mean_reward"],
        "mean reward final": s["final"]["mean_reward"],
        "delta": d["value"],
        "ci low": d["ci_low"],
        "ci high": d["ci_high"],
        "greedy success step 0": s["step0"].get("greedy_success"),
        "greedy success final": s["final"].get("greedy_success"),
        "pass@1 step 0": curves["step0"]["1"],
        "pass@1 final": curves["final"]["1"],
        f"pass@{n} step 0": curves["step0"][n],
        f"pass@{n} final": curves["final"][n],
        "prompts lost": solved.get("lost_count"),
        "prompts new": solved.get("new_count"),
        "regressed tags": ", ".join(
            t["tag"] for t in s["slices"] if t["regressed"] and t["weighed"]
        ),
        "KL final vs step 0": s.get("kl_final_vs_step0"),
        "verdict": verdict,
    }


def _evaluate_artifacts(root: Path, where: str) -> list[Artifact]:
    """Each seed's step 0 vs final (its own verdict, one run's), then the recipe pooled over the
    seeds: the verdict the description opens with."""
    paths = _paths(root)
    rows = []
    for seed in _seeds(root):
        ev = _json(root, seed_paths(paths, seed).eval_summary) or {}
        rows += [
            _split_row(str(seed), split, ev[split], ev.get("verdict"))
            for split in ("train", "validation", "heldout")
            if split in ev
        ]
    recipe = _json(root, paths.recipe_summary) or {}
    pooled = recipe.get("pooled")
    if pooled:
        n = pooled["samples_per_prompt"]
        curves = {
            p: {"1": pooled[p]["pass@1"], str(n): pooled[p][f"pass@{n}"]}
            for p in ("step0", "final")
        }
        rows.append(
            _split_row(
                f"pooled over {len(recipe['evaluated'])}",
                recipe["split"],
                {**pooled, "pass_at_k": curves},
                recipe["verdict"],
            )
        )
    baseline = recipe.get("baseline") or {}
    theirs = (baseline.get("comparison") or {}).get("pooled")
    if theirs:  # the baseline over its seeds, beside GRPO (rlvr.audit.baseline)
        n = theirs["samples_per_prompt"]
        curves = {
            p: {"1": theirs[p]["pass@1"], str(n): theirs[p][f"pass@{n}"]}
            for p in ("step0", "final")
        }
        rows.append(
            _split_row(
                f"{baseline['name']} baseline, pooled over {len(baseline['comparison']['seeds'])}",
                recipe["split"],
                {**theirs, "pass_at_k": curves},
                baseline["comparison"]["verdict"],
            )
        )
    # the verdict line says what was lost, where a mean would hide it (rlvr.audit.slices.verdict_line)
    missing = "".join(
        f" Seed {seed} has no results: {why}." for seed, why in (recipe.get("failed") or {}).items()
    )
    versus = f" {baseline['sentence']}" if baseline else ""
    return [
        Artifact(
            "evaluation-audit",
            "table",
            f"Step 0 vs final, per RL seed and pooled; "
            f"{recipe.get('verdict_line', 'no recipe yet')}.{missing}{versus} {where}",
            table=rows,
        )
    ]


def _report_artifacts(root: Path, where: str) -> list[Artifact]:
    paths = _paths(root)
    md = root / paths.retrospective_md
    return [
        Artifact(
            "retrospective",
            "markdown",
            f"The retrospective. {where}",
            markdown=md.read_text() if md.exists() else "",
        ),
        Artifact(
            "retrospective-html",
            "link",
            f"Self-contained HTML report. {where}",
            link=(root / paths.retrospective_html).resolve().as_uri(),
        ),
    ]


def _publish_artifacts(root: Path, where: str) -> list[Artifact]:
    final = _paths(root).final_model
    card = root / final / CARD_FILE
    text = (
        card_body(card.read_text())
        if card.exists()
        else f"{final}/{CARD_FILE} is not here (models live in the DVC cache): `dvc pull` or "
        "`dvc repro publish` brings it"
    )
    return [
        Artifact("model-card", "markdown", f"The published model's card. {where}", markdown=text)
    ]


# stage -> what it publishes once it has run. Stages not listed publish nothing (and pay nothing:
# the flow runs no artifact task for them).
ARTIFACT_BUILDERS: dict[str, Callable[[Path, str], list[Artifact]]] = {
    "reward_tests": _reward_tests_artifacts,
    "validate": _validate_artifacts,
    # the evaluation artifact waits for recipe: it carries the recipe's verdict over the seeds
    "smoke": _smoke_artifacts,
    "train": _train_artifacts,
    RECIPE_STAGE: _evaluate_artifacts,
    "report": _report_artifacts,
    "publish": _publish_artifacts,
}


def stage_artifacts(stage: str, root: Path) -> list[Artifact]:
    """The artifacts a finished stage publishes (none for stages without one), each described
    with the provenance line."""
    build = ARTIFACT_BUILDERS.get(stage)
    return build(root, provenance_line(root)) if build else []


def publish(artifact: Artifact) -> None:
    from prefect.artifacts import (
        create_link_artifact,
        create_markdown_artifact,
        create_table_artifact,
    )

    if artifact.kind == "table":
        create_table_artifact(
            table=artifact.table, key=artifact.key, description=artifact.description
        )
    elif artifact.kind == "markdown":
        create_markdown_artifact(
            markdown=artifact.markdown, key=artifact.key, description=artifact.description
        )
    else:
        create_link_artifact(
            link=artifact.link,
            link_text=artifact.key,
            key=artifact.key,
            description=artifact.description,
        )


def publish_stage_artifacts(stage: str, root: Path) -> list[str]:
    artifacts = stage_artifacts(stage, root)
    for artifact in artifacts:
        publish(artifact)
    return [a.key for a in artifacts]
