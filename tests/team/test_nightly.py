"""The nightly's steps (rlvr.team.nightly) on a one-stage project of its own, against a bare git
remote and the session's sshd as DVC remote: nights in a row (the first runs and promotes, then
nothing new, then a params commit), the DVC remote stopped at the push (one line; the clone is
kept; the next night pushes and records it first). The flow on the real project, from a
deployment on a real Prefect server: tests/team/test_nightly_deployment.py."""

import json
from pathlib import Path

import pytest
import yaml

from rlvr.orchestration.runs import run_dvc, stages_ran
from rlvr.team.nightly import (
    PENDING,
    Night,
    NightlyError,
    checkout,
    finish,
    keep,
    kept,
    plan,
    summary_line,
)
from rlvr.team.remote import pull
from tests.helpers import commit_all, dvc_repo
from tests.helpers import git as _git

# The stage: a "model" and held-out records whose rewards follow params.yaml `quality`.
MAKE = """
import json, pathlib, yaml
q = yaml.safe_load(open("params.yaml"))["quality"]
pathlib.Path("models/final").mkdir(parents=True, exist_ok=True)
pathlib.Path("models/final/weights.txt").write_text(f"quality {q}\\n")
for seed in (0, 1):
    folder = pathlib.Path(f"reports/eval/seed-{seed}")
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"{split[0]}{i:02d}", "split": split, "final_reward": min(1.0, q + 0.01 * ((i + seed) % 3)),
             "final_correct": round(8 * q), "samples": 8} for split in ("validation", "heldout") for i in range(16)]
    (folder / "per_prompt.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
pathlib.Path("metrics").mkdir(exist_ok=True)
pathlib.Path("metrics/quality.json").write_text(json.dumps({"quality": q}))
"""

DVC_YAML = """stages:
  publish:
    cmd: python make.py
    deps: [make.py]
    params: [quality]
    outs: [models/final, reports/eval]
    metrics:
      - metrics/quality.json:
          cache: false
artifacts:
  policy:
    path: models/final
    type: model
"""


@pytest.fixture
def team(ssh_home, tmp_path):
    """(the bare git remote, a developer's clone of it)."""
    params = {"quality": 0.5, "audit": {"seeds": [0, 1]}, "paths": {"eval_runs": "reports/eval"}}
    files = {"make.py": MAKE, "dvc.yaml": DVC_YAML, "params.yaml": yaml.safe_dump(params)}
    dev = dvc_repo(tmp_path / "dev", files)
    ssh_home.add_remote(dev)
    commit_all(dev, "the project")
    shared = tmp_path / "shared.git"
    _git(tmp_path, "clone", "-q", "--bare", str(dev), str(shared))
    _git(dev, "remote", "add", "origin", str(shared))
    return shared, dev


def _night(shared: Path, workdir: Path, name: str) -> dict:
    night = _run_night(shared, workdir, name)
    result = finish(night, workdir, f"nightly {name}")
    return {"night": night, **result, "line": summary_line(night, result["commit"])}


def _ran(shared: Path) -> str:
    """The branch commit the last recorded night ran (the results commit's last parent)."""
    return _git(shared, "rev-parse", "results^@").split()[-1]


def _set_quality(dev: Path, q: float) -> None:
    params = yaml.safe_load((dev / "params.yaml").read_text())
    (dev / "params.yaml").write_text(yaml.safe_dump({**params, "quality": q}))
    _git(dev, "commit", "-qam", f"quality {q}")
    _git(dev, "push", "-q", "origin", "main")


def test_nights_in_a_row_run_what_changed_and_promote_only_a_better_model(team, tmp_path):
    shared, dev = team
    work = tmp_path / "work"

    first = _night(shared, work, "n1")
    assert first["night"].stale == first["night"].ran == ["publish"] and first["commit"]
    assert (
        first["line"].startswith("nightly: ran 1 stage(s) at main ")
        and "(publish)" in first["line"]
    )
    assert first["decision"].promoted and "first model" in first["decision"].reason
    assert _git(shared, "rev-parse", "results") == first["commit"]
    assert not first["night"].root.exists()  # recorded: the clone is gone, the cache stays

    second = _night(shared, work, "n2")
    assert second["night"].nothing_new and second["commit"] is None
    assert second["line"].startswith("nightly: nothing new at main ")
    assert "nothing trained" in second["line"]
    assert not second["decision"].promoted and "no new model" in second["decision"].reason
    assert "dvc.lock" in second["night"].carried

    _set_quality(dev, 0.9)
    third = _night(shared, work, "n3")
    assert third["night"].stale == ["publish"]
    decision = third["decision"]
    assert decision.promoted and decision.registered == "v0.0.2"
    assert decision.comparison["verdict"] == "improved"
    # the results branch: each night's first parent is the last night, the second the branch
    assert _git(shared, "rev-parse", "results^1") == first["commit"]
    assert _git(shared, "rev-parse", "results^2") == _git(shared, "rev-parse", "main")
    tags = set(_git(shared, "tag").split())
    assert {"policy@v0.0.1", "policy@v0.0.2", "policy#prod#1", "policy#prod#2"} <= tags
    # what docs/orchestration.md tells a teammate to run: the nights, and nothing of main's
    nights = _git(shared, "log", "--first-parent", "--format=%H", "results", "^main").split()
    assert nights == [third["commit"], first["commit"]]  # the second recorded nothing


def test_the_remote_down_at_the_push_keeps_the_night_and_the_next_one_pushes_it(
    team, ssh_home, tmp_path
):
    shared, dev = team
    work = tmp_path / "work"
    _night(shared, work, "n1")
    _set_quality(dev, 0.2)
    night = checkout(str(shared), "main", "results", work, "n2")
    pull(night.root)
    assert plan(night) == ["publish"]
    assert run_dvc(night.root, "repro").returncode == 0
    ssh_home.stop()
    try:
        with pytest.raises(NightlyError) as error:
            finish(night, work, "nightly n2")
    finally:
        ssh_home.start()
    line = str(error.value)
    assert "\n" not in line and line.startswith(
        f"dvc push to remote 'team' ({ssh_home.url}) failed"
    )
    assert f"the night's clone is kept at {night.root}" in line
    assert night.root.exists() and [k.root for k in kept(work)] == [night.root]
    assert _ran(shared) != _git(shared, "rev-parse", "main")  # not recorded

    # the next night finishes the kept one first (pushes, records, decides), then finds nothing new
    (earlier,) = kept(work)
    done = finish(earlier, work, "nightly n2 (kept)")
    assert done["commit"] and done["decision"].comparison["verdict"] == "regressed"
    assert not done["decision"].promoted and kept(work) == []
    assert _ran(shared) == _git(shared, "rev-parse", "main")
    after = _night(shared, work, "n3")
    assert after["night"].nothing_new and after["commit"] is None


def _run_night(shared: Path, workdir: Path, name: str):
    """A night up to its finish: cloned, pulled, run (as a night still running when another
    records)."""
    night = checkout(str(shared), "main", "results", workdir, name)
    pull(night.root)
    if plan(night):
        run = run_dvc(night.root, "repro")
        assert run.returncode == 0, run.stdout + run.stderr
        night.ran = stages_ran(run.stdout)
    return night


def test_overlapping_nights_never_block_each_other(team, tmp_path):
    """Two nights at once (the deployment's and a manual one): the one that records second is
    re-based onto the first's record when its commit is newer, dropped when it is the same or
    older, each with one line; nothing is kept to block the next night."""
    shared, dev = team
    work = tmp_path / "work"
    _night(shared, work, "n1")

    # the same commit twice: the second to finish is dropped, its clone removed
    _set_quality(dev, 0.3)
    late = _run_night(shared, work, "deployed")
    manual = _night(shared, work, "manual")
    done = finish(late, work, "nightly deployed")
    assert done["dropped"] == (
        f"nightly: not recorded: results {manual['commit'][:8]} already records "
        f"{late.source[:8]} (another night ran it meanwhile)"
    )
    assert not late.root.exists() and kept(work) == []
    assert _git(shared, "rev-parse", "results") == manual["commit"]

    # a newer commit finishing second: re-based onto the older one's record
    _set_quality(dev, 0.4)
    older = _run_night(shared, work, "older")
    _set_quality(dev, 0.5)
    newer = _run_night(shared, work, "newer")
    first = finish(older, work, "nightly older")["commit"]
    second = finish(newer, work, "nightly newer")
    assert second["rebased"] == (
        f"nightly: re-based onto results {first[:8]} (another night recorded meanwhile, an older "
        f"commit than this night's {newer.source[:8]}): {second['commit'][:8]}"
    )
    assert _git(shared, "rev-parse", "results^@").split() == [first, newer.source]
    assert "quality 0.5" in _git(shared, "show", "results:dvc.lock") or "0.5" in _git(
        shared, "show", "results:metrics/quality.json"
    )

    # an older commit finishing second: dropped, never laid over the newer record
    _set_quality(dev, 0.6)
    old = _run_night(shared, work, "old")
    _set_quality(dev, 0.7)
    recorded = _night(shared, work, "new")["commit"]
    done = finish(old, work, "nightly old")
    assert done["dropped"] == (
        f"nightly: not recorded: results {recorded[:8]} records "
        f"{_git(shared, 'rev-parse', 'main')[:8]}, newer than this night's {old.source[:8]}: an "
        "older night never lays its outputs over a newer one"
    )
    assert _git(shared, "rev-parse", "results") == recorded and kept(work) == []
    assert _night(shared, work, "next")["night"].nothing_new  # and the next night goes on


def test_a_results_commit_holds_the_outputs_only(team, tmp_path):
    """A night's stray file (a stage writing beside its outputs) stays out of the record."""
    shared, _ = team
    work = tmp_path / "work"
    night = _run_night(shared, work, "n1")
    (night.root / "stray.txt").write_text("not an output\n")
    commit = finish(night, work, "nightly n1")["commit"]
    files = _git(shared, "show", "--name-only", "--format=", commit).split()
    assert "dvc.lock" in files and "metrics/quality.json" in files and "stray.txt" not in files


def test_a_kept_night_whose_clone_was_removed_is_forgotten(tmp_path):
    work = tmp_path / "work"
    (work / "runs" / "a").mkdir(parents=True)
    for name in ("a", "b"):
        keep(work, Night(work / "runs" / name, "main", "results", "0" * 40, None))
    assert [n.root.name for n in kept(work)] == ["a"]  # b's clone was never there
    assert list(json.loads((work / PENDING).read_text())) == [str(work / "runs" / "a")]


def test_leftover_clones_are_named_or_removed_but_never_a_running_or_kept_night(tmp_path):
    """After a night that ended well, the clones of failed or killed nights go; a night running
    now (its lock held) and a kept one (pending.json) stay, whatever their age."""
    from rlvr.team.clones import CloneHeld, held, leftovers

    work = tmp_path / "work"
    for name in ("failed", "running", "kept"):
        (work / "runs" / name / ".git").mkdir(parents=True)
    keep(work, Night(work / "runs" / "kept", "main", "results", "0" * 40, None))
    pending = set(json.loads((work / PENDING).read_text()))
    with held(work / "runs" / "running"):
        with pytest.raises(CloneHeld, match="the clone of another running flow"):
            with held(work / "runs" / "running"):
                pass
        assert leftovers(work / "runs", pending, remove=False) == [work / "runs" / "failed"]
        assert (work / "runs" / "failed").exists()
        assert leftovers(work / "runs", pending, remove=True) == [work / "runs" / "failed"]
    assert sorted(p.name for p in (work / "runs").iterdir() if p.is_dir()) == ["kept", "running"]
    assert leftovers(work / "runs", pending, remove=False) == [work / "runs" / "running"]


def test_tidy_names_leftovers_after_a_failed_night_and_removes_them_after_one_that_ended_well(
    tmp_path,
):
    from rlvr.team.nightly import tidy

    work = tmp_path / "work"
    (work / "runs" / "failed" / ".git").mkdir(parents=True)
    tonight = work / "runs" / "tonight"
    tonight.with_name("tonight.lock").write_text("")
    assert tidy(work, tonight, ended_well=False) == (
        f"nightly: clones kept for a look: {work / 'runs' / 'failed'}"
    )
    assert tidy(work, tonight, ended_well=True) == (
        "nightly: removed 1 leftover clone(s) of earlier nights: failed"
    )
    assert list((work / "runs").iterdir()) == [] and tidy(work, tonight, ended_well=True) is None
