"""The install `./dev` makes: torch's CPU build on Linux x86-64 (from PyPI, torch==2.13.0 resolves
to the CUDA build, several GB more), from PyTorch's CPU index as the Dockerfile does; a GPU machine
names another index. The set-up runs here against a stand-in `.venv/bin/python` that records what
pip was asked (no package is installed)."""

import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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
    assert f"TORCH_INDEX_URL-{CPU_INDEX}" in dev
    assert f"ARG TORCH_INDEX_URL={CPU_INDEX}" in docker


# The stand-in: `-m pip show torch` answers $TORCH_HAVE's version (fails as pip does without one);
# every pip call is logged; installing torch fails when $PIP_FAILS is set.
STAND_IN = """#!/bin/sh
echo "$*" >> "$LOG"
if [ "$1 $2 $3" = "-m pip show" ]; then [ -n "$TORCH_HAVE" ] || exit 1; echo "Version: $TORCH_HAVE"; exit 0; fi
case "$*" in *"pip install"*" torch=="*) [ -n "$PIP_FAILS" ] && { echo "ERROR: no torch here"; exit 1; } ;; esac
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
    pin = re.search(r"^torch==\S+$", (ROOT / "requirements.lock").read_text(), re.M).group(0)
    done, calls = set_up(tmp_path, TORCH_HAVE="2.13.0")  # PyPI's CUDA build carries no tag
    assert done.returncode == 0, done.stderr
    (install,) = torch_installs(calls)
    assert f"--index-url {CPU_INDEX} {pin}" in install and "--force-reinstall" in install
    assert "--no-deps" in install
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
    assert f"--index-url {cuda} " in install


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


def test_every_package_the_install_takes_is_pinned():
    """requirements.lock, requirements-nodeps.txt and the build backend name one version each
    (name==version): a fresh clone builds what this one did."""
    import tomllib

    for name in ("requirements.lock", "requirements-nodeps.txt"):
        lines = [line.split("#")[0].strip() for line in (ROOT / name).read_text().splitlines()]
        unpinned = [line for line in lines if line and not re.fullmatch(r"[\w.-]+==[\w.+-]+", line)]
        assert not unpinned, f"{name}: {unpinned}"
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert build and all(re.fullmatch(r"[\w.-]+==[\w.+-]+", r) for r in build), build
