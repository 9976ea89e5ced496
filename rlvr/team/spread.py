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
zombie flows"); rlvr.team.crashes creates it, the deployment sets the heartbeat frequency,
and wait_for_runs() submits a crashed run again, so the comparison has every run.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dvc.utils.serialize import dumps_yaml, loads_yaml

from rlvr.core.errors import PipelineError
from rlvr.core.files import remove_tree
from rlvr.orchestration.runs import dvc_stages, run_dvc, seeded_stages, stages_ran
from rlvr.params.config import ParamsError, load_params
from rlvr.params.experiments import check_queued_runs, experiment_runs
from rlvr.team.clones import clone, git, held, leftovers, origin_url, remove_clone, rev
from rlvr.team.crashes import EXPERIMENT_FLOW, FINAL, ensure_crash_detection
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

DEPLOYMENT = f"{EXPERIMENT_FLOW}/experiment-run"
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
    """Run the stages before `train` that all seeds share here and push their data, so every
    worker pulls the same inputs instead of rebuilding them; the stages that ran. A per-seed
    stage before train (verified@k) is left to its seed's worker: here it would run once per
    seed, one after another."""
    order = dvc_stages(Path(root) / "dvc.yaml")
    seeded = seeded_stages(Path(root) / "dvc.yaml")
    upstream = [stage for stage in order[: order.index("train")] if stage not in seeded]
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
    "seconds", "steps" (seconds per step), "ran" (the stages DVC ran), "removed" (leftover
    clones of earlier runs on this machine, removed)}. The clone is removed when the run is
    pushed, and so are the leftovers of runs that failed or were killed; a failed run keeps
    its clone and names the others kept."""
    root = workdir / "experiments" / folder_name(label)
    with held(root):  # no other run on this machine takes its clone for a leftover
        try:
            result = _run_in(repo, commit, run, workdir, root)
        except PipelineError as error:
            left = [p for p in leftovers(root.parent, set(), remove=False) if p != root]
            if not left:
                raise
            raise type(error)(
                f"{error}; other clones kept for a look: {', '.join(map(str, left))}"
            ) from None
        remove_clone(root)
    result["removed"] = [p.name for p in leftovers(root.parent, set(), remove=True)]
    return result


def _run_in(repo: str, commit: str, run: Run, workdir: Path, root: Path) -> dict:
    laps = Laps()
    clone(repo, root, workdir)
    git(root, "checkout", "--quiet", commit)
    laps.lap("clone")
    pull(root, *run.targets)
    laps.lap("pull")
    overrides = [a for o in run.overrides for a in ("-S", o)]
    # (not --force: that would reproduce every stage above the targets, not replace a name;
    # a fresh clone has no experiment of that name)
    ran = run_dvc(root, "exp", "run", "-n", run.name, *overrides, *run.targets)
    if ran.returncode != 0:
        raise SpreadError(
            f"experiment {run.name}: dvc exp run failed in {root} (kept): "
            f"{dvc_error(ran.stdout + ran.stderr)}"
        )
    laps.lap("run")
    pushed = remote_dvc(root, "exp", "push", "--force", "origin", run.name)
    if pushed.returncode != 0:
        raise SpreadError(
            f"experiment {run.name}: dvc exp push origin failed in {root} (kept; rerun "
            f"`dvc exp push origin {run.name}` there): "
            f"{dvc_error(pushed.stdout + pushed.stderr)}"
        )
    laps.lap("push")
    return {
        "name": run.name,
        "exp": experiment_commit(root, run.name),
        "seconds": round(sum(laps.seconds.values()), 1),
        "steps": laps.seconds,
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
    return adopt_all(root, {name: stages})


def adopt_all(root: str | Path, runs: dict[str, list[str]]) -> list[str]:
    """adopt() for several experiments (name -> its stages) at once: one `dvc checkout` for all
    (each costs seconds: per seed, it was most of the flow's time to take seeds in), all or
    nothing. The paths taken."""
    root = Path(root)
    lock = root / "dvc.lock"
    ours = loads_yaml(lock.read_text()) if lock.exists() else {"schema": "2.0"}
    ours.setdefault("stages", {})
    stages = [stage for each in runs.values() for stage in each]
    # a worker wrote that lock: it may name only what our dvc.yaml declares for those stages
    # (an out of `.` would have the rmtree below take the workspace, one of `rlvr` the code)
    own = declared(root, stages)
    taken: list[tuple[str, str]] = []  # (the experiment's commit, a path it outputs)
    for name, its_stages in runs.items():
        commit = experiment_commit(root, name)
        # DVC's own YAML (1.2): PyYAML's 1.1 would read a param `off` as false and write it
        # back so, and the stage would look changed (tests/team/test_spread.py)
        theirs = loads_yaml(git(root, "show", f"{commit}:dvc.lock"))["stages"]
        for stage in its_stages:
            if stage not in theirs:
                raise SpreadError(f"experiment {name}: its dvc.lock has no stage {stage}")
            if stage not in own:
                raise SpreadError(f"experiment {name}: this dvc.yaml has no stage {stage}")
            problems = check_lock_entry(stage, theirs[stage], own[stage])
            if problems:
                raise SpreadError(
                    f"experiment {name} ({commit[:8]}): its dvc.lock disagrees with this "
                    f"dvc.yaml, nothing taken: {'; '.join(problems)}"
                )
            ours["stages"][stage] = theirs[stage]
            taken += [(commit, out["path"]) for out in theirs[stage].get("outs", [])]
    # all or nothing: what it replaces is kept aside until `dvc checkout` has worked, and put
    # back (the lock, git's files, the cached outputs by a checkout of the old lock) if not
    before = lock.read_bytes() if lock.exists() else None
    (root / ".dvc" / "tmp").mkdir(parents=True, exist_ok=True)
    aside = Path(tempfile.mkdtemp(prefix="adopt-", dir=root / ".dvc" / "tmp"))
    moved: list[tuple[Path, Path | None]] = []  # (workspace path, where its old one waits)
    try:
        _write_lock(lock, dumps_yaml(ours).encode())
        for i, (commit, path) in enumerate(taken):
            if git(root, "ls-tree", "-r", "--name-only", commit, "--", path):  # git keeps it
                target = root / path
                kept = aside / str(i) if target.exists() else None
                if kept is not None:  # files the run no longer wrote go with it
                    shutil.move(target, kept)
                moved.append((target, kept))
                git(root, "restore", f"--source={commit}", "--worktree", "--", path)
        run = run_dvc(root, "checkout", *stages)
        if run.returncode != 0:
            raise SpreadError(
                f"experiment {', '.join(runs)}: dvc checkout {' '.join(stages)} failed, nothing "
                f"taken: {dvc_error(run.stdout + run.stderr)}"
            )
    except BaseException:
        for target, kept in reversed(moved):
            if target.is_dir() and not target.is_symlink():
                remove_tree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            if kept is not None:
                shutil.move(kept, target)
        if before is None:
            lock.unlink(missing_ok=True)
        else:
            _write_lock(lock, before)
        run_dvc(root, "checkout", *stages)  # the old lock's cached outputs, where DVC took them
        raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return [path for _, path in taken]


def _write_lock(lock: Path, data: bytes) -> None:
    tmp = lock.with_suffix(".lock.tmp")
    tmp.write_bytes(data)
    tmp.replace(lock)


# Prefect: submitting the runs and waiting for them (a silent one is Crashed: rlvr.team.crashes).


class RunsFailed(SpreadError):
    """Some runs failed, were cancelled or never started; `done` holds those that completed
    (wait_for_runs waited for every run to end first)."""

    def __init__(self, message: str, done: dict[str, dict]):
        super().__init__(message)
        self.done = done


STARTED = ("RUNNING", *FINAL)  # a worker's engine has the run; before it: SCHEDULED (Late), PENDING


def wait_for_runs(
    runs: list[Run],
    parameters: Callable[[Run], dict],
    resubmits: int = 2,
    say: Callable[[str], None] = print,
    poll_seconds: float = 3,
    start_deadline: float = 600,
) -> dict[str, dict]:
    """Submit each run to DEPLOYMENT (its work pool named in what goes wrong) and wait until
    every one has ended (settle); SpreadError when the deployment is not on the server."""
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
            pool = client.read_deployment_by_name(DEPLOYMENT).work_pool_name
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

        return settle(runs, submit, client, pool, resubmits, say, poll_seconds, start_deadline)


def settle(
    runs: list[Run],
    submit: Callable[[Run], object],
    client,
    pool: str,
    resubmits: int,
    say: Callable[[str], None],
    poll_seconds: float,
    start_deadline: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, dict]:
    """Wait until every run has ended: a run that crashes is submitted again (at most
    `resubmits` times); one that no worker starts within `start_deadline` seconds of its
    submission (Scheduled, Late or Pending) is cancelled. name -> {"flow_run",
    "worker_seconds", "submissions"} when all completed; else RunsFailed naming each run that
    did not, after the others ended (they are not cancelled: what finished is taken in)."""
    from prefect.states import Cancelled

    pending = {
        run.name: {"id": submit(run), "submissions": 1, "run": run, "at": clock()} for run in runs
    }
    done: dict[str, dict] = {}
    failures: list[str] = []
    while pending:
        sleep(poll_seconds)
        for name, entry in list(pending.items()):
            flow_run = client.read_flow_run(entry["id"])
            kind = flow_run.state.type.value if flow_run.state else "PENDING"
            if kind not in STARTED and clock() - entry["at"] > start_deadline:
                client.set_flow_run_state(
                    entry["id"], Cancelled(message="no worker started it"), force=True
                )
                failures.append(
                    f"{name}: no worker of the pool {pool} started flow run {flow_run.name} "
                    f"within {start_deadline:.0f} s (orchestration.start_deadline): cancelled; "
                    f"start one: prefect worker start --pool {pool}"
                )
                say(f"experiments: {failures[-1]}")
                del pending[name]
                continue
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
                entry.update(id=submit(entry["run"]), at=clock())
                entry["submissions"] += 1
                continue
            failures.append(f"{name}: flow run {flow_run.name} {kind.lower()}: {message}")
            say(f"experiments: {failures[-1]}; waiting for the other runs")
            del pending[name]
    if failures:
        raise RunsFailed(
            f"{len(failures)} of {len(runs)} run(s) did not complete: " + "; ".join(failures),
            done,
        )
    return done


def spread(
    root: str | Path, runs: list[Run], say: Callable[[str], None] = print
) -> tuple[dict[str, dict], dict[str, float]]:
    """Everything between the runs and their comparison: the commit the workers run (ready),
    for seeds the stages before train first (prepare_seeds), the crash automation, every run
    submitted and waited for (a crashed one again), and all pulled here. (name -> what
    wait_for_runs says of it, the seconds of each part here: LAPS' first three)."""
    laps = Laps()
    repo, commit = ready(root)
    if any(run.targets for run in runs):
        ran = prepare_seeds(root)
        say(f"experiments: the stages before train here first: {', '.join(ran) or 'none'}; pushed")
    laps.lap(LAPS[0])
    ensure_crash_detection()
    deadline = load_params(Path(root) / "params.yaml").orchestration.start_deadline
    try:
        done = wait_for_runs(
            runs, lambda run: run.parameters(repo, commit), say=say, start_deadline=deadline
        )
    except RunsFailed as failed:  # what finished is taken in, for `dvc exp show`
        if failed.done:
            collect(root, list(failed.done))
        raise RunsFailed(
            f"{failed}; taken in: {', '.join(failed.done) or 'none'}", failed.done
        ) from None
    seconds = laps.lap(LAPS[1])
    collect(root, [run.name for run in runs])
    laps.lap(LAPS[2])
    again = sum(d["submissions"] - 1 for d in done.values())
    say(
        f"experiments: {len(runs)} run(s) on the workers in {seconds:.0f} s ({again} submitted again); pulled"
    )
    return done, laps.seconds


# the parts of a spread as the flow times them: here, on the workers, here again
LAPS = ("before the runs", "the runs", "pull", "take in", "the pipeline here")


class Laps:
    """Seconds between calls of lap(), each under its name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, name: str) -> float:
        now = time.monotonic()
        self.seconds[name] = round(now - self._last, 1)
        self._last = now
        return self.seconds[name]


def laps_line(seconds: dict[str, float]) -> str:
    """The parts of a spread in one line.

    >>> laps_line({"before the runs": 9.2, "the runs": 150.4, "pull": 6.0})
    'experiments: where the time went: before the runs 9 s, the runs 150 s, pull 6 s; 166 s in all'
    """
    parts = ", ".join(f"{name} {value:.0f} s" for name, value in seconds.items())
    return f"experiments: where the time went: {parts}; {sum(seconds.values()):.0f} s in all"


def take_seeds(root: str | Path, runs: list[Run]) -> None:
    """Every seed's run taken into the workspace at once (adopt_all), for the pipeline to pool."""
    adopt_all(root, {run.name: run.targets for run in runs})


def trained_here(root: str | Path, ran: list[str]) -> list[str]:
    """The per-seed stages the pipeline ran here after take_seeds: those whose inputs differ
    from the workers' (none when the workers ran this workspace's commit and inputs)."""
    seeded = seeded_stages(Path(root) / "dvc.yaml")
    return [stage for stage in ran if stage.split("@")[0] in seeded]
