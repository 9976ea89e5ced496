"""The install `./dev` makes: torch's CPU build on Linux x86-64 (from PyPI, torch==2.13.0 resolves
to the CUDA build, several GB more), from PyTorch's CPU index as the Dockerfile does; a GPU machine
names another index. The set-up runs here against a stand-in `.venv/bin/python` that records what
pip was asked (no package is installed)."""

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlvr.core.lock import canonical, entries, pins

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@pytest.mark.skipif(
    (platform.system(), platform.machine()) != ("Linux", "x86_64"),
    reason="the CPU build is what ./dev installs on Linux x86-64",
)
def test_the_default_install_has_torchs_cpu_build_and_no_cuda_libraries():
    assert torch.version.cuda is None, torch.__version__
    assert torch.__version__.endswith("+cpu"), torch.__version__
    # the CUDA build requires nvidia-cublas, nvidia-cudnn, ... and triton; the CPU build none of them
    needs = [
        re.split(r"[\s;<>=!~\[]", r, maxsplit=1)[0] for r in importlib.metadata.requires("torch")
    ]
    assert needs and not [n for n in needs if n.lower().startswith(("nvidia-", "triton"))], needs


def test_dev_and_the_dockerfile_take_torch_from_the_same_cpu_index():
    dev, docker = (ROOT / "dev").read_text(), (ROOT / "Dockerfile").read_text()
    assert f"\nCPU_INDEX={CPU_INDEX}\n" in dev and "TORCH_INDEX_URL-$CPU_INDEX}" in dev
    assert f"ARG TORCH_INDEX_URL={CPU_INDEX}" in docker


# The stand-in: `-m pip show torch` answers $TORCH_HAVE's version (fails as pip does without one);
# every pip call is logged, with the text of a `-r` file other than the project's; installing
# torch fails when $PIP_FAILS is set.
STAND_IN = """#!/bin/sh
line="$*" prev=""
for a in "$@"; do  # what a requirements file of its own (torch's entry) asks for
  [ "$prev" = -r ] && case "$a" in requirements*) ;; *) line="$line [$(tr '\\n' ' ' < "$a")]" ;; esac
  prev="$a"
done
echo "$line" >> "$LOG"
if [ "$1 $2 $3" = "-m pip show" ]; then [ -n "$TORCH_HAVE" ] || exit 1; echo "Version: $TORCH_HAVE"; exit 0; fi
case "$line" in *"pip install"*"torch=="*) [ -n "$PIP_FAILS" ] && { echo "ERROR: no torch here"; exit 1; } ;; esac
exit 0
"""


def set_up(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    tmp_path.mkdir(exist_ok=True)
    for name in ("dev", "requirements.lock", "requirements-nodeps.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    stand_in = tmp_path / ".venv" / "bin" / "python"
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    log = tmp_path / "pip.log"
    base = {k: v for k, v in os.environ.items() if k not in ("TORCH_INDEX_URL", "PIP_FAILS")}
    done = subprocess.run(
        [str(tmp_path / "dev"), "run", "true"],
        env={**base, "LOG": str(log), "PYTHON": sys.executable, "TORCH_HAVE": "", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, log.read_text().splitlines() if log.exists() else []


def torch_installs(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("-m pip install") and re.search(r"\btorch==", c)]


@pytest.mark.skipif(
    (platform.system(), platform.machine()) != ("Linux", "x86_64"),
    reason="./dev picks the CPU index on Linux x86-64 only",
)
def test_a_cuda_torch_is_replaced_by_the_cpu_build_from_the_cpu_index(tmp_path):
    (torch,) = [e for e in entries((ROOT / "requirements.lock").read_text()) if e[0] == "torch"]
    done, calls = set_up(tmp_path, TORCH_HAVE="2.13.0")  # PyPI's CUDA build carries no tag
    assert done.returncode == 0, done.stderr
    (install,) = torch_installs(calls)
    assert f"--index-url {CPU_INDEX} --require-hashes -r " in install
    assert f"[torch=={torch[1]} \\" in install and all(h in install for h in torch[2])
    assert "--force-reinstall" in install and "--no-deps" in install
    # the lock's install comes after, and finds torch there
    assert calls.index(install) < next(
        i for i, c in enumerate(calls) if "-r requirements.lock" in c
    )


def test_the_cpu_build_already_there_is_kept(tmp_path):
    done, calls = set_up(tmp_path, TORCH_HAVE="2.13.0+cpu", TORCH_INDEX_URL=CPU_INDEX)
    assert done.returncode == 0, done.stderr
    assert torch_installs(calls) == []


def test_an_empty_index_leaves_torch_to_pypi_and_another_index_is_used(tmp_path):
    done, calls = set_up(tmp_path, TORCH_INDEX_URL="")
    assert done.returncode == 0, done.stderr
    assert torch_installs(calls) == []
    cuda = "https://download.pytorch.org/whl/cu128"
    done, calls = set_up(tmp_path / "gpu", TORCH_INDEX_URL=cuda)
    assert done.returncode == 0, done.stderr
    (install,) = torch_installs(calls)
    assert f"--index-url {cuda} torch==" in install  # its builds' hashes are not the lock's
    assert "--require-hashes" not in install


def test_a_failed_torch_install_stops_with_one_line_naming_the_index(tmp_path):
    done, calls = set_up(tmp_path, TORCH_INDEX_URL=CPU_INDEX, PIP_FAILS="1")
    assert done.returncode == 1
    assert "TORCH_INDEX_URL=" + CPU_INDEX in done.stderr.splitlines()[-1]
    assert not (tmp_path / ".venv" / ".installed").exists()  # the next call tries again
    assert not any("-r requirements.lock" in c for c in calls)


@pytest.mark.skipif(
    (platform.system(), platform.machine()) != ("Linux", "x86_64"),
    reason="the size the README gives is Linux x86-64's",
)
def test_the_environment_weighs_what_the_readme_says():
    """README: "2.0 GB" (the CUDA build's libraries alone would add several GB)."""
    assert "2.0 GB" in (ROOT / "README.md").read_text()
    total = sum(
        (Path(folder) / f).lstat().st_size
        for folder, _, files in os.walk(sys.prefix)
        for f in files
    )
    assert 1.7e9 < total < 2.4e9, f"{total / 1e9:.2f} GB"


@pytest.mark.parametrize("args", [[], ["--help"], ["tset"]], ids=["bare", "help", "typo"])
def test_dev_without_a_command_prints_its_usage_and_builds_nothing(tmp_path, args):
    shutil.copy(ROOT / "dev", tmp_path / "dev")
    run = subprocess.run(["bash", "dev", *args], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 2 and "./dev repro [dvc repro args]" in run.stderr, run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev"]  # no .venv, nothing else


def test_the_pipeline_flows_help_prints_its_usage_and_runs_nothing(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "flows.pipeline", "--help"],
        cwd=ROOT,
        env={**os.environ, "PREFECT_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0 and run.stdout.startswith("usage: python -m flows.pipeline")
    assert "the DVC pipeline, stage by stage" in run.stdout
    assert not any(tmp_path.iterdir())  # no Prefect database, no server, no flow run


def test_every_package_the_install_takes_is_pinned_with_its_hashes():
    """requirements.lock, requirements-nodeps.txt and the build backend name one version each, the
    two files with the sha256 of its files: a fresh clone builds what this one did, or stops."""
    import tomllib

    for name in ("requirements.lock", "requirements-nodeps.txt"):
        found = entries((ROOT / name).read_text())  # ValueError on anything but a pin
        assert found and all(hashes for _, _, hashes in found), name
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    build = project["build-system"]["requires"]
    assert build and all(re.fullmatch(r"[\w.-]+==[\w.+-]+", r) for r in build), build
    lock = pins(ROOT / "requirements.lock")
    # the project is built without isolation, by the lock's (hashed) backend
    assert all(lock[canonical(r.split("==")[0])] == r.split("==")[1] for r in build), build
    # and installed without its dependencies: the lock holds each, at the version it names
    wanted = project["project"]["dependencies"] + project["project"]["optional-dependencies"]["dev"]
    for requirement in wanted:
        name, _, version = re.sub(r"\[.*?\]", "", requirement).partition("==")
        assert lock.get(canonical(name)) == version, requirement


def test_dev_installs_every_file_by_its_hash_and_the_project_apart(tmp_path):
    done, calls = set_up(tmp_path, TORCH_HAVE="2.13.0+cpu", TORCH_INDEX_URL=CPU_INDEX)
    assert done.returncode == 0, done.stderr
    installs = [c for c in calls if c.startswith("-m pip install")]
    project = [c for c in installs if " -e " in f"{c} "]
    assert project == [installs[-1]] and "--no-deps --no-build-isolation -e ." in project[0]
    rest = installs[:-1]
    assert rest and all("--require-hashes" in c and " -r " in c for c in rest), rest
    assert [c for c in rest if c.endswith("-r requirements-nodeps.txt")] != []
    assert rest[0].endswith("]") and "[pip==25.3 \\" in rest[0]  # pip itself first


def _wheel(folder: Path, version: str, body: str) -> Path:
    """A minimal wheel of a package `demo`: one module (body) and its metadata."""
    import base64
    import hashlib
    import zipfile

    folder.mkdir(exist_ok=True)
    path = folder / f"demo-{version}-py3-none-any.whl"
    info = f"demo-{version}.dist-info"
    files = {
        "demo.py": body,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: demo\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(text)}")
        wheel.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return path


def test_lock_hashes_writes_each_files_hash_and_pip_refuses_other_bytes(tmp_path):
    """scripts/lock_hashes.py hashes what an index holds; pip, given the lock, installs that file
    and refuses a file of the same name and version with other bytes (what the hashes stop)."""
    import hashlib

    spec = importlib.util.spec_from_file_location("lock_hashes", ROOT / "scripts/lock_hashes.py")
    lock_hashes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lock_hashes)
    wheel = _wheel(tmp_path / "good", "1.0", "VERSION = '1.0'\n")
    _wheel(tmp_path / "bad", "1.0", "import os  # not the bytes that were locked\n")
    lock = tmp_path / "requirements.lock"
    lock.write_text("# the demo\ndemo==1.0\n")
    assert lock_hashes.main([str(lock), "--find-links", str(wheel.parent)]) == 0
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert lock.read_text() == f"# the demo\ndemo==1.0 \\\n    --hash=sha256:{sha}\n"
    other = tmp_path / "other.lock"
    other.write_text("demo==2.0\n")  # no index holds it: it says so and writes nothing
    assert lock_hashes.main([str(other), "--find-links", str(wheel.parent)]) == 1
    assert other.read_text() == "demo==2.0\n"

    def pip(folder: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-index",
                "--find-links",
                str(tmp_path / folder),
                "--require-hashes",
                "--target",
                str(tmp_path / f"site-{folder}"),
                "-r",
                str(lock),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert pip("good").returncode == 0
    assert (tmp_path / "site-good/demo.py").read_text() == "VERSION = '1.0'\n"
    refused = pip("bad")
    assert refused.returncode != 0 and "DO NOT MATCH THE HASHES" in refused.stderr, refused.stderr
    assert not (tmp_path / "site-bad").exists()
