"""The cause in the headline: a team flow that fails ends with the one line that says what failed
and what to do as its run's message (what the Prefect UI and `prefect flow-run ls` show), not
Prefect's "1/1 states failed."; git's line is its `fatal:`/`error:` line and a push's rejected
ref, not a `hint:`; DVC's is its first ERROR, the cause, not the last, its consequence."""

import shutil

import pytest

from rlvr.core.errors import PipelineError
from rlvr.orchestration.runs import ended, failed
from rlvr.team.clones import GitFailed, git, git_cause
from rlvr.team.nightly import Night, keep
from rlvr.team.remote import dvc_error
from tests.helpers import ROOT, commit_all, dvc_repo
from tests.helpers import git as _git

PUSH_REJECTED = """To /srv/git/shared.git
 ! [rejected]        results -> results (non-fast-forward)
error: failed to push some refs to '/srv/git/shared.git'
hint: Updates were rejected because the tip of your current branch is behind
hint: its remote counterpart. If you want to integrate the remote changes,
"""
NO_REPO = """fatal: 'https://ci:s3cret@git.example/team/rlvr.git' does not appear to be a git repository
fatal: Could not read from remote repository.

Please make sure you have the correct access rights
and the repository exists.
"""


def test_git_says_why_not_its_last_line():
    assert git_cause(PUSH_REJECTED) == (
        "! [rejected] results -> results (non-fast-forward); "
        "error: failed to push some refs to '/srv/git/shared.git'"
    )
    said = git_cause(NO_REPO)
    assert (
        said == "fatal: 'https://git.example/team/rlvr.git' does not appear to be a git repository"
    )
    assert git_cause("") == "no output" and git_cause("just this\n") == "just this"


def test_a_real_rejected_push_and_a_missing_remote_are_named(tmp_path):
    shared = tmp_path / "shared.git"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(shared))
    clones = []
    for name in ("a", "b"):
        clone = tmp_path / name
        _git(tmp_path, "clone", "-q", str(shared), str(clone))
        (clone / "f").write_text(name)
        commit_all(clone, name)
        clones.append(clone)
    git(clones[0], "push", "-q", "origin", "HEAD:main")
    with pytest.raises(GitFailed) as rejected:
        git(clones[1], "push", "-q", "origin", "HEAD:main")
    line = str(rejected.value)
    assert "\n" not in line and "[rejected]" in line and str(shared) in line, line
    with pytest.raises(GitFailed) as missing:
        git(clones[1], "push", "-q", str(tmp_path / "gone.git"), "HEAD:main")
    line = str(missing.value)
    assert "does not appear to be a git repository" in line and "repository exists" not in line


def test_dvc_error_is_the_first_error_the_cause():
    output = (
        "Collecting\n"
        "ERROR: failed to connect to ssh://127.0.0.1:2222/srv/dvc - Permission denied for user root\n"
        "ERROR: failed to pull data from the cloud - 6 files failed to download\n"
    )
    assert dvc_error(output) == (
        "failed to connect to ssh://127.0.0.1:2222/srv/dvc - Permission denied for user root"
    )
    assert dvc_error("ERROR: unexpected error - disk full\n") == "disk full"


def test_a_flow_ends_with_its_tasks_line_and_a_bug_keeps_its_traceback(prefect_harness):
    from prefect import flow, task

    line = "git push failed in /w/runs/n1: ! [rejected] results -> results (non-fast-forward)"

    @task
    def fails():
        return failed(GitFailed(line))

    @task
    def crashes():
        raise ZeroDivisionError("a bug")

    @flow
    def as_is():  # what the flows did: Prefect aggregates the task's state
        return fails(return_state=True)

    @flow
    def headline(which):
        return ended(which(return_state=True))

    assert as_is(return_state=True).message == "1/1 states failed."  # Prefect 3.9.1's own
    state = headline(fails, return_state=True)
    assert state.is_failed() and state.message == line
    with pytest.raises(GitFailed, match="non-fast-forward"):
        headline(fails)
    with pytest.raises(ZeroDivisionError):
        headline(crashes)


def test_the_nightly_ends_with_the_line_that_says_why(prefect_harness, tmp_path, monkeypatch):
    """A kept night whose push fails: the night's run ends with that line, the clone kept."""
    from flows.nightly import nightly

    home = dvc_repo(tmp_path / "home", {"params.yaml": (ROOT / "params.yaml").read_text()})
    commit_all(home, "the project")
    shared = tmp_path / "shared.git"
    _git(tmp_path, "clone", "-q", "--bare", str(home), str(shared))
    _git(home, "remote", "add", "origin", str(shared))
    work = tmp_path / "work"
    night = work / "runs" / "n1"
    _git(tmp_path, "clone", "-q", str(shared), str(night))
    source = _git(night, "rev-parse", "HEAD")
    work.mkdir(exist_ok=True)
    keep(work, Night(night, "main", "results", source, None, stale=["publish"]))
    monkeypatch.setenv("RLVR_ROOT", str(home))
    monkeypatch.setenv("RLVR_NIGHTLY_DIR", str(work))

    state = nightly(return_state=True)
    assert state.is_failed(), state
    assert state.message.startswith(f"{night}: no default DVC remote: add one with `dvc remote add")
    assert state.message.endswith(
        f"the night's clone is kept at {night}: the next night pushes and records it first"
    )
    assert isinstance(state.result(raise_on_failure=False), PipelineError)
    assert night.exists()
    shutil.rmtree(work)
