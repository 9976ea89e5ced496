"""Experiments spread over Prefect workers: each run is its own flow run of the `experiment-run`
deployment (prefect.yaml), so any worker of the work pool, on any machine, takes it.

A worker's flow run (run_one) clones the git remote at the commit the team runs, into its own
folder on the machine's shared DVC cache, `dvc pull`s what earlier runs made, runs the experiment
(`dvc exp run -n NAME [-S ...] [targets]`) and sends it to both remotes (`dvc exp push`: the
experiment's commit to the git remote, its data to the DVC remote). The flow that submitted the
runs waits for them, `dvc exp pull`s them and compares them:

- the default's seeds (seed_runs): one run per RL seed of `audit.seeds`, its targets that seed's
  `verified@k`, `train@k`, `evaluate@k` and `rft@k`, no params changed. adopt() takes each seed's dvc.lock entries and
  outputs into the workspace (DVC then finds those stages up to date: same deps, same params), and
  the pipeline runs the recipe over every seed, as one machine would have. (Not DVC's run cache:
  DVC saves none for a stage with an uncached output that is not a metric or plot, as train's
  reports are; dvc/stage/__init__.py run(), DVC 3.67.)
- the ablations, the sweep or a grid (grid_runs): one run per combination, the whole pipeline
  each; the comparison is rlvr.orchestration.comparison's, as for the local queue.

A worker killed mid-run (its machine lost) leaves its flow run Running. Prefect's answer is flow
run heartbeats and an automation that marks a run whose heartbeats stop Crashed (docs: "Detect
zombie flows"); ensure_crash_detection() creates it, the deployment sets the heartbeat frequency,
and wait_for_runs() submits a crashed run again, so the comparison has every run.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from dvc.utils.serialize import dumps_yaml, loads_yaml

from rlvr.core.errors import PipelineError
from rlvr.core.files import remove_tree
from rlvr.orchestration.runs import dvc_stages, run_dvc, seeded_stages, stages_ran
from rlvr.params.config import ParamsError, load_params
from rlvr.params.experiments import check_queued_runs, experiment_runs
from rlvr.team.clones import clone, git, origin_url, rev
from rlvr.team.remote import (
    RemoteFailed,
    default_remote,
    dvc_error,
    pull,
    push,
    remote_dvc,
    verify_pulls,
)
from rlvr.team.trust import check_lock_entry, declared, folder_name, redacted

EXPERIMENT_FLOW = "grpo-experiment-run"  # flows/experiments.py experiment_run
DEPLOYMENT = f"{EXPERIMENT_FLOW}/experiment-run"
CRASH_AUTOMATION = "rlvr: crash flow runs whose heartbeats stopped"
HEARTBEAT_SECONDS = 30  # PREFECT_FLOWS_HEARTBEAT_FREQUENCY of the deployment (Prefect's minimum)
SILENT_HEARTBEATS = 3  # a run silent this many heartbeats is Crashed by the automation
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "CRASHED")
# what the stages run: the workers run it as committed (outputs may differ here: they are rebuilt)
WHAT_RUNS = (
    "params.yaml",
    "dvc.yaml",
    "rlvr",
    "stages",
    "configs",
    "requirements.lock",
    "pyproject.toml",
)


class SpreadError(PipelineError):
    """The spread cannot go on; the message names the run or the step and what to do."""


@dataclass
class Run:
    """One experiment a worker runs: its name, its `-S` overrides, its `dvc exp run` targets."""

    name: str
    overrides: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)

    def parameters(self, repo: str, commit: str) -> dict:
        """The experiment-run flow's parameters for this run."""
        return {
            "repo": redacted(repo),  # a flow-run parameter: kept on the server, shown in its UI
            "commit": commit,
            "name": self.name,
            "overrides": self.overrides,
            "targets": self.targets,
        }


def seed_runs(root: str | Path) -> list[Run]:
    """The default's seeds: one run per RL seed of audit.seeds, its per-seed stages (verified,
    train, evaluate, rft) in dvc.yaml's order."""
    seeds = load_params(Path(root) / "params.yaml").audit.seeds
    dvc_yaml = Path(root) / "dvc.yaml"
    seeded = seeded_stages(dvc_yaml)
    per_seed = [stage for stage in dvc_stages(dvc_yaml) if stage in seeded]
    return [Run(f"seed-{k}", [], [f"{stage}@{k}" for stage in per_seed]) for k in seeds]


def check_grid(orchestration, grid: str | None) -> None:
    """SpreadError naming the grids params.yaml has, when it lacks `grid`."""
    if grid is not None and grid not in orchestration.grids:
        raise SpreadError(
            f"--grid {grid}: params.yaml orchestration.grids has no such grid "
            f"(it has: {', '.join(orchestration.grids) or 'none'})"
        )


def grid_runs(root: str | Path, grid: str | None = None) -> list[Run]:
    """The experiments flow's runs (the ablations and the sweep, or one grid), one per run, named
    by their overrides (an ablation by its name)."""
    orchestration = load_params(Path(root) / "params.yaml").orchestration
    check_grid(orchestration, grid)
    try:  # what each run's own check_params will check, before any is submitted
        check_queued_runs(Path(root) / "params.yaml", grid)
    except ParamsError as error:
        raise SpreadError(str(error)) from None
    runs = []
    for where, overrides in experiment_runs(orchestration, grid):
        ablation = where.removeprefix("orchestration.ablations.")
        name = ablation if ablation != where else "-".join(overrides)
        runs.append(Run(folder_name(name), list(overrides)))
    return runs


def ready(root: str | Path) -> tuple[str, str]:
    """(git remote, commit) the workers run: HEAD, which must be on a branch of origin and hold
    what the stages run (WHAT_RUNS) as it is here."""
    root = Path(root)
    repo = origin_url(root)
    commit = git(root, "rev-parse", "HEAD")
    changed = git(root, "diff", "--name-only", "HEAD", "--", *WHAT_RUNS)  # staged or not
    if changed:
        first = changed.splitlines()[0]
        raise SpreadError(
            f"{root}: {first} has uncommitted changes (of {len(changed.splitlines())} file(s) the "
            f"stages run), and the workers run commit {commit[:8]}: commit and push them first"
        )
    git(root, "fetch", "--quiet", "--prune", "origin")
    if not git(root, "branch", "--remotes", "--contains", commit, "--list", "origin/*"):
        raise SpreadError(
            f"{root}: HEAD {commit[:8]} is on no branch of the git remote {redacted(repo)}: push it "
            "(each worker clones it from there)"
        )
    return repo, commit


def prepare_seeds(root: str | Path) -> list[str]:
    """Run the stages before `train` here and push their data, so every worker pulls the same
    inputs instead of rebuilding them; the stages that ran."""
    order = dvc_stages(Path(root) / "dvc.yaml")
    upstream = order[: order.index("train")]
    run = run_dvc(root, "repro", *upstream)
    if run.returncode != 0:
        raise SpreadError(
            f"dvc repro {' '.join(upstream)} failed: {dvc_error(run.stdout + run.stderr)}"
        )
    moved = _outputs_moved(root, upstream)
    if moved:  # the workers clone the commit: its dvc.lock must name these outputs
        raise SpreadError(
            f"the stages before train made new outputs here ({', '.join(moved)}): commit and "
            "push dvc.lock, then spread the seeds (each worker starts from the commit's lock)"
        )
    push(root)
    return stages_ran(run.stdout)


def _outputs_moved(root: str | Path, stages: list[str]) -> list[str]:
    """The stages whose outputs in the workspace's dvc.lock differ from HEAD's."""

    def outs(text: str) -> dict:
        found = (loads_yaml(text) or {}).get("stages", {})
        return {
            s: [(o["path"], o.get("md5")) for o in found.get(s, {}).get("outs", [])] for s in stages
        }

    head = outs(git(root, "show", "HEAD:dvc.lock"))
    here = outs((Path(root) / "dvc.lock").read_text())
    return [s for s in stages if head[s] != here[s]]


def run_one(repo: str, commit: str, run: Run, workdir: Path, label: str) -> dict:
    """A worker's run: clone `repo` at `commit` into <workdir>/experiments/<label>, pull what the
    run needs, `dvc exp run`, `dvc exp push`; {"name", "exp" (the experiment's commit),
    "seconds", "steps" (seconds per step), "ran" (the stages DVC ran)}. The clone is removed
    when the run is pushed, kept (and named) when it failed."""
    steps: dict[str, float] = {}
    clock = [time.monotonic()]

    def lap(step: str) -> None:
        now = time.monotonic()
        steps[step] = round(now - clock[0], 1)
        clock[0] = now

    root = workdir / "experiments" / folder_name(label)
    clone(repo, root, workdir)
    git(root, "checkout", "--quiet", commit)
    lap("clone")
    pull(root, *run.targets)
    lap("pull")
    overrides = [a for o in run.overrides for a in ("-S", o)]
    # (not --force: that would reproduce every stage above the targets, not replace a name;
    # a fresh clone has no experiment of that name)
    ran = run_dvc(root, "exp", "run", "-n", run.name, *overrides, *run.targets)
    if ran.returncode != 0:
        raise SpreadError(
            f"experiment {run.name}: dvc exp run failed in {root} (kept): "
            f"{dvc_error(ran.stdout + ran.stderr)}"
        )
    lap("run")
    pushed = remote_dvc(root, "exp", "push", "--force", "origin", run.name)
    if pushed.returncode != 0:
        raise SpreadError(
            f"experiment {run.name}: dvc exp push origin failed in {root} (kept; rerun "
            f"`dvc exp push origin {run.name}` there): "
            f"{dvc_error(pushed.stdout + pushed.stderr)}"
        )
    lap("push")
    exp = experiment_commit(root, run.name)
    shutil.rmtree(root, ignore_errors=True)
    return {
        "name": run.name,
        "exp": exp,
        "seconds": round(sum(steps.values()), 1),
        "steps": steps,
        "ran": stages_ran(ran.stdout),
    }


def collect(root: str | Path, names: list[str]) -> None:
    """`dvc exp pull` the runs from the remotes (their commits and their data)."""
    found = default_remote(root)
    if found:
        verify_pulls(root, found[0])
    run = remote_dvc(root, "exp", "pull", "--force", "origin", *names)
    if run.returncode != 0:
        raise RemoteFailed(
            f"dvc exp pull origin {' '.join(names)} failed: {dvc_error(run.stdout + run.stderr)}"
        )


def experiment_commit(root: str | Path, name: str) -> str:
    """The commit of experiment `name` on HEAD's baseline (refs/exps/<baseline>/<name>)."""
    head = git(root, "rev-parse", "HEAD")
    ref = f"refs/exps/{head[:2]}/{head[2:]}/{name}"
    found = rev(root, ref)
    if not found:
        raise SpreadError(f"experiment {name}: no {ref} after `dvc exp pull`: was it pushed?")
    return found


def adopt(root: str | Path, name: str, stages: list[str]) -> list[str]:
    """Take `stages`' dvc.lock entries and outputs from experiment `name` into the workspace:
    files git keeps from its commit, cached ones by `dvc checkout`. The paths taken."""
    root = Path(root)
    commit = experiment_commit(root, name)
    # DVC's own YAML (1.2): PyYAML's 1.1 would read a param `off` as false and write it
    # back so, and the stage would look changed (tests/team/test_spread.py)
    theirs = loads_yaml(git(root, "show", f"{commit}:dvc.lock"))["stages"]
    lock = root / "dvc.lock"
    ours = loads_yaml(lock.read_text()) if lock.exists() else {"schema": "2.0"}
    ours.setdefault("stages", {})
    # a worker wrote that lock: it may name only what our dvc.yaml declares for those stages
    # (an out of `.` would have the rmtree below take the workspace, one of `rlvr` the code)
    own = declared(root, stages)
    paths = []
    for stage in stages:
        if stage not in theirs:
            raise SpreadError(f"experiment {name}: its dvc.lock has no stage {stage}")
        if stage not in own:
            raise SpreadError(f"experiment {name}: this dvc.yaml has no stage {stage}")
        problems = check_lock_entry(stage, theirs[stage], own[stage])
        if problems:
            raise SpreadError(
                f"experiment {name} ({commit[:8]}): its dvc.lock disagrees with this dvc.yaml, "
                f"nothing taken: {'; '.join(problems)}"
            )
        ours["stages"][stage] = theirs[stage]
        paths += [out["path"] for out in theirs[stage].get("outs", [])]
    tmp = lock.with_suffix(".lock.tmp")
    tmp.write_text(dumps_yaml(ours))
    tmp.replace(lock)
    for path in paths:
        if git(root, "ls-tree", "-r", "--name-only", commit, "--", path):  # git keeps it
            target = root / path
            if target.is_dir():
                remove_tree(target)  # files the run no longer wrote go
            git(root, "restore", f"--source={commit}", "--worktree", "--", path)
    run = run_dvc(root, "checkout", *stages)
    if run.returncode != 0:
        raise SpreadError(
            f"experiment {name}: dvc checkout {' '.join(stages)} failed: "
            f"{dvc_error(run.stdout + run.stderr)}"
        )
    return paths


# Prefect: the automation that crashes silent runs, and submitting and waiting for the runs.


def ensure_crash_detection() -> str:
    """Create (once per server) the automation that marks a run of the experiment flow Crashed
    when its heartbeats stop (Prefect's "Detect zombie flows" automation); its name."""
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    try:
        Automation.read(name=CRASH_AUTOMATION)
        return CRASH_AUTOMATION
    except ValueError:  # none yet
        pass
    Automation(
        name=CRASH_AUTOMATION,
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={
                "prefect.flow-run.heartbeat",
                *(f"prefect.flow-run.{s.title()}" for s in FINAL),
            },
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            # only the experiment runs: a flow whose heartbeats come every 180 s (Prefect's
            # default) would otherwise be crashed between two of them
            match_related=ResourceSpecification(
                {"prefect.resource.role": "flow", "prefect.resource.name": EXPERIMENT_FLOW}
            ),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=HEARTBEAT_SECONDS * SILENT_HEARTBEATS),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"no heartbeat for {HEARTBEAT_SECONDS * SILENT_HEARTBEATS} s: its "
                "worker or machine is gone",
            )
        ],
    ).create()
    return CRASH_AUTOMATION


def wait_for_runs(
    runs: list[Run],
    parameters: Callable[[Run], dict],
    resubmits: int = 2,
    say: Callable[[str], None] = print,
    poll_seconds: float = 3,
) -> dict[str, dict]:
    """Submit each run to DEPLOYMENT and wait for all; a run that crashes is submitted again (at
    most `resubmits` times). name -> {"flow_run", "worker_seconds", "submissions"}; SpreadError
    naming the run when one fails, is cancelled or keeps crashing."""
    from prefect import get_client
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    names = [run.name for run in runs]
    if len(set(names)) != len(names):
        raise SpreadError(
            f"two runs share a name: {sorted(n for n in names if names.count(n) > 1)}"
        )
    with get_client(sync_client=True) as client:
        try:
            client.read_deployment_by_name(DEPLOYMENT)
        except ObjectNotFound:
            raise SpreadError(
                f"no deployment {DEPLOYMENT} on the Prefect server ({client.api_url}): deploy it "
                "with `prefect --no-prompt deploy --name experiment-run` (and start a worker on "
                "the pool rlvr-process)"
            ) from None

    def submit(run: Run):
        flow_run = run_deployment(
            DEPLOYMENT, parameters=parameters(run), timeout=0, flow_run_name=f"exp-{run.name}"
        )
        say(f"experiments: {run.name} submitted (flow run {flow_run.name})")
        return flow_run.id

    pending = {run.name: {"id": submit(run), "submissions": 1, "run": run} for run in runs}
    done: dict[str, dict] = {}
    with get_client(sync_client=True) as client:
        while pending:
            time.sleep(poll_seconds)
            for name, entry in list(pending.items()):
                flow_run = client.read_flow_run(entry["id"])
                kind = flow_run.state.type.value if flow_run.state else "PENDING"
                if kind not in FINAL:
                    continue
                if kind == "COMPLETED":
                    done[name] = {
                        "flow_run": flow_run.name,
                        "worker_seconds": round(flow_run.total_run_time.total_seconds(), 1),
                        "submissions": entry["submissions"],
                    }
                    del pending[name]
                    continue
                message = ((flow_run.state.message or "").strip().splitlines() or [kind.lower()])[0]
                if kind == "CRASHED" and entry["submissions"] <= resubmits:
                    say(f"experiments: {name} crashed ({message}): submitted again")
                    entry["id"] = submit(entry["run"])
                    entry["submissions"] += 1
                    continue
                raise SpreadError(
                    f"experiment {name}: flow run {flow_run.name} {kind.lower()}: {message}"
                )
    return done


def spread(
    root: str | Path, runs: list[Run], say: Callable[[str], None] = print
) -> tuple[dict[str, dict], float]:
    """Everything between the runs and their comparison: the commit the workers run (ready),
    for seeds the stages before train first (prepare_seeds), the crash automation, every run
    submitted and waited for (a crashed one again), and all pulled here. (name -> what
    wait_for_runs says of it, the seconds from the first submission to the last run's end)."""
    repo, commit = ready(root)
    if any(run.targets for run in runs):
        ran = prepare_seeds(root)
        say(f"experiments: the stages before train here first: {', '.join(ran) or 'none'}; pushed")
    ensure_crash_detection()
    started = time.monotonic()
    done = wait_for_runs(runs, lambda run: run.parameters(repo, commit), say=say)
    seconds = time.monotonic() - started
    collect(root, [run.name for run in runs])
    again = sum(d["submissions"] - 1 for d in done.values())
    say(
        f"experiments: {len(runs)} run(s) on the workers in {seconds:.0f} s ({again} submitted again); pulled"
    )
    return done, seconds


def take_seeds(root: str | Path, runs: list[Run]) -> None:
    """Each seed's run taken into the workspace (adopt), for the pipeline to pool."""
    for run in runs:
        adopt(root, run.name, run.targets)


def trained_here(root: str | Path, ran: list[str]) -> list[str]:
    """The per-seed stages the pipeline ran here after take_seeds: those whose inputs differ
    from the workers' (none when the workers ran this workspace's commit and inputs)."""
    seeded = seeded_stages(Path(root) / "dvc.yaml")
    return [stage for stage in ran if stage.split("@")[0] in seeded]
