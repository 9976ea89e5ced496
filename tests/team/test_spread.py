"""The steps of experiments spread over workers (rlvr.team.spread), without Prefect, on a
two-seed project of their own against a bare git remote and the session's sshd as DVC remote:
each seed's run in a clone of its own (a worker's), pushed with `dvc exp push`; the parent pulls
them, takes them in and finds nothing to train again. The flow on the real project, from a
deployment on a real Prefect server with workers: tests/team/test_experiments_on_workers.py."""

import json

import pytest
import yaml

from rlvr.orchestration.comparison import exp_show
from rlvr.orchestration.runs import run_dvc, stages_ran
from rlvr.params.config import load_params
from rlvr.team import spread
from tests.helpers import ROOT, commit_all, dvc_repo
from tests.helpers import git as _git

TRAIN = """
import json, pathlib, sys, yaml
seed = int(sys.argv[1])
q = yaml.safe_load(open("params.yaml"))["quality"]
pathlib.Path(f"models/seed-{seed}").mkdir(parents=True, exist_ok=True)
pathlib.Path(f"models/seed-{seed}/weights.txt").write_text(f"{q} {seed}\\n")
pathlib.Path("reports").mkdir(exist_ok=True)
pathlib.Path(f"reports/seed-{seed}.json").write_text(json.dumps({"seed": seed, "reward": q + seed}))
"""

POOL = """
import json, pathlib
runs = [json.loads(p.read_text()) for p in sorted(pathlib.Path("reports").glob("seed-*.json"))]
pathlib.Path("metrics").mkdir(exist_ok=True)
pool = {"seeds": len(runs), "best": max(r["reward"] for r in runs)}  # numbers: dvc exp show
pathlib.Path("metrics/pool.json").write_text(json.dumps(pool))
"""

DVC_YAML = """stages:
  train:
    foreach: ${audit.seeds}
    do:
      cmd: python train.py ${item}
      deps: [train.py]
      params: [quality, mode]
      outs:
        - models/seed-${item}
        - reports/seed-${item}.json:
            cache: false
  pool:
    cmd: python pool.py
    deps: [pool.py, reports]
    metrics:
      - metrics/pool.json:
          cache: false
"""


@pytest.fixture
def team(ssh_home, tmp_path):
    """(the bare git remote, a developer's clone of it, on the branch main)."""
    # mode 'off': YAML 1.1 (PyYAML) reads it as false; dvc.lock must keep DVC's 1.2 reading
    params = {"quality": 0.5, "mode": "off", "audit": {"seeds": [0, 1]}}
    files = {"train.py": TRAIN, "pool.py": POOL, "dvc.yaml": DVC_YAML}
    dev = dvc_repo(tmp_path / "dev", {**files, "params.yaml": yaml.safe_dump(params)})
    ssh_home.add_remote(dev)
    commit_all(dev, "the project")
    shared = tmp_path / "shared.git"
    _git(tmp_path, "clone", "-q", "--bare", str(dev), str(shared))
    _git(dev, "remote", "add", "origin", str(shared))
    _git(dev, "fetch", "-q", "origin")
    return shared, dev


def test_each_seed_runs_in_a_clone_of_its_own_and_the_parent_trains_none_again(team, tmp_path):
    shared, dev = team
    repo, commit = spread.ready(dev)
    assert (repo, commit) == (str(shared), _git(dev, "rev-parse", "HEAD"))
    pushed = {}
    for seed, machine in ((0, "machine-1"), (1, "machine-2")):
        run = spread.Run(f"seed-{seed}", [], [f"train@{seed}"])
        result = spread.run_one(repo, commit, run, tmp_path / machine, f"seed-{seed}-x")
        assert result["name"] == f"seed-{seed}" and result["seconds"] > 0
        assert result["ran"] == [f"train@{seed}"]  # its seed only, nothing above it again
        assert not (tmp_path / machine / "experiments" / f"seed-{seed}-x").exists()  # removed
        pushed[seed] = result["exp"]
    # on the git remote: each experiment's commit, on this commit's baseline
    refs = _git(shared, "for-each-ref", "--format=%(objectname) %(refname)", "refs/exps").split(
        "\n"
    )
    base = f"refs/exps/{commit[:2]}/{commit[2:]}"
    assert {f"{pushed[k]} {base}/seed-{k}" for k in (0, 1)} <= set(refs)

    spread.collect(dev, ["seed-0", "seed-1"])
    paths = spread.adopt_all(dev, {"seed-0": ["train@0"], "seed-1": ["train@1"]})  # at once
    assert paths == [
        f"{kind}/seed-{seed}{ext}"
        for seed in (0, 1)
        for kind, ext in (("models", ""), ("reports", ".json"))
    ]
    for seed in (0, 1):
        assert json.loads((dev / f"reports/seed-{seed}.json").read_text()) == {
            "seed": seed,
            "reward": 0.5 + seed,
        }
        assert (dev / f"models/seed-{seed}/weights.txt").read_text() == f"0.5 {seed}\n"
    repro = run_dvc(dev, "repro")
    assert repro.returncode == 0, repro.stdout + repro.stderr
    assert stages_ran(repro.stdout) == ["pool"]  # both seeds up to date: taken, not trained
    assert json.loads((dev / "metrics/pool.json").read_text()) == {"seeds": 2, "best": 1.5}


def test_the_workers_run_only_what_the_git_remote_holds(team):
    shared, dev = team
    (dev / "params.yaml").write_text(yaml.safe_dump({"quality": 0.7, "audit": {"seeds": [0, 1]}}))
    with pytest.raises(spread.SpreadError) as error:
        spread.ready(dev)
    head = _git(dev, "rev-parse", "HEAD")[:8]
    assert str(error.value) == (
        f"{dev}: params.yaml has uncommitted changes (of 1 file(s) the stages run), and the "
        f"workers run commit {head}: commit and push them first"
    )
    commit_all(dev, "quality 0.7")
    with pytest.raises(spread.SpreadError) as error:
        spread.ready(dev)
    head = _git(dev, "rev-parse", "HEAD")[:8]
    assert str(error.value) == (
        f"{dev}: HEAD {head} is on no branch of the git remote {shared}: push it (each worker "
        "clones it from there)"
    )
    _git(dev, "push", "-q", "origin", "main")
    assert spread.ready(dev)[1].startswith(head)


def test_a_failed_experiment_keeps_its_clone_and_says_where(team, tmp_path):
    shared, dev = team
    _, commit = spread.ready(dev)
    run = spread.Run("broken", ["quality=[1, 2]"], ["train@0"])  # train.py cannot add a list
    with pytest.raises(spread.SpreadError) as error:
        spread.run_one(str(shared), commit, run, tmp_path / "machine", "broken-x")
    clone = tmp_path / "machine" / "experiments" / "broken-x"
    assert str(error.value).startswith(f"experiment broken: dvc exp run failed in {clone} (kept): ")
    assert clone.exists()


def test_a_run_that_ends_well_removes_the_leftover_clones_but_never_a_running_one(team, tmp_path):
    """A failed run names the clones kept before it; a run pushed removes them (a worker killed
    mid-run leaves one too), but never the clone of a run going on now on the machine."""
    from rlvr.team.clones import held

    shared, dev = team
    _, commit = spread.ready(dev)
    runs = tmp_path / "machine" / "experiments"
    broken = spread.Run("broken", ["quality=[1, 2]"], ["train@0"])
    with pytest.raises(spread.SpreadError):
        spread.run_one(str(shared), commit, broken, tmp_path / "machine", "broken-1")
    with pytest.raises(spread.SpreadError) as error:
        spread.run_one(str(shared), commit, broken, tmp_path / "machine", "broken-2")
    assert str(error.value).endswith(f"; other clones kept for a look: {runs / 'broken-1'}")
    (runs / "running" / ".git").mkdir(parents=True)
    with held(runs / "running"):  # another worker's run, going on
        result = spread.run_one(
            str(shared), commit, spread.Run("seed-0", [], ["train@0"]), tmp_path / "machine", "ok"
        )
    assert result["removed"] == ["broken-1", "broken-2"]
    assert sorted(p.name for p in runs.iterdir()) == ["running", "running.lock"]


def test_the_runs_of_the_default_seeds_and_of_the_grids():
    seeds = load_params(ROOT / "params.yaml").audit.seeds
    assert len(seeds) >= 2
    assert [(r.name, r.overrides, r.targets) for r in spread.seed_runs(ROOT)] == [
        (f"seed-{k}", [], [f"verified@{k}", f"train@{k}", f"evaluate@{k}", f"rft@{k}"])
        for k in seeds
    ]
    runs = {r.name: r.overrides for r in spread.grid_runs(ROOT)}
    assert runs["no-kl"] == ["train.grpo.beta=0"]
    assert runs["train.grpo.beta-0.01"] == ["train.grpo.beta=0.01"]
    step8 = spread.grid_runs(ROOT, "step8")
    assert len(step8) == 16 and len({r.name for r in step8}) == 16  # one experiment name each


def test_a_grid_run_on_a_worker_comes_back_with_its_params(team, tmp_path):
    """A grid's run (the whole pipeline with its `-S` overrides) pushed by a worker and pulled
    here: `dvc exp show` (what the comparison reads) lists it with its params and metrics."""
    shared, dev = team
    repo, commit = spread.ready(dev)
    run = spread.Run("quality-0.7", ["quality=0.7"], [])
    result = spread.run_one(repo, commit, run, tmp_path / "machine-1", "quality-0.7-x")
    assert result["ran"] == ["train@0", "train@1", "pool"]
    spread.collect(dev, ["quality-0.7"])
    (data,) = [
        rev["data"]
        for row in exp_show(dev)  # what rlvr.orchestration.comparison.compare reads
        for experiment in row.get("experiments") or []
        for rev in experiment["revs"]
        if rev.get("name") == "quality-0.7"
    ]
    assert data["params"]["params.yaml"]["data"]["quality"] == 0.7
    assert data["metrics"]["metrics/pool.json"]["data"] == {"seeds": 2, "best": 1.7}


def test_a_grid_params_yaml_lacks_is_one_line_before_anything_is_submitted():
    with pytest.raises(spread.SpreadError) as error:
        spread.grid_runs(ROOT, "nope")
    grids = ", ".join(load_params(ROOT / "params.yaml").orchestration.grids)
    assert str(error.value) == (
        f"--grid nope: params.yaml orchestration.grids has no such grid (it has: {grids})"
    )


def test_the_parent_runs_only_what_every_seed_shares_before_train(ssh_home, tmp_path):
    """prepare_seeds runs and pushes the stages before train that all seeds share; a per-seed
    one (verified@k) is left to each seed's worker, not run here once per seed in a row."""
    stages = """stages:
  prep:
    cmd: python -c "import pathlib; pathlib.Path('prep.txt').write_text('shared')"
    outs: [prep.txt]
  verified:
    foreach: ${audit.seeds}
    do:
      cmd: python -c "import pathlib; pathlib.Path('verified-${item}.txt').write_text('v')"
      deps: [prep.txt]
      outs:
        - verified-${item}.txt
  train:
    foreach: ${audit.seeds}
    do:
      cmd: python -c "import pathlib; pathlib.Path('model-${item}.txt').write_text('m')"
      deps:
        - verified-${item}.txt
      outs:
        - model-${item}.txt
"""
    params = yaml.safe_dump({"audit": {"seeds": [0, 1]}})
    dev = dvc_repo(tmp_path / "dev", {"dvc.yaml": stages, "params.yaml": params})
    ssh_home.add_remote(dev, folder="prepare")
    run = run_dvc(dev, "repro", "prep")  # the commit's lock names prep's output
    assert run.returncode == 0, run.stdout + run.stderr
    commit_all(dev, "the project")
    assert spread.prepare_seeds(dev) == []  # up to date, pushed
    assert not (dev / "verified-0.txt").exists() and not (dev / "verified-1.txt").exists()
    assert [r.targets[0] for r in spread.seed_runs(dev)] == ["verified@0", "verified@1"]
