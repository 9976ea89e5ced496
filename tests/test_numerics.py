"""Pinned CPU numerics (rlvr/core/numerics.py): what a stage computes with, and the same bits under
what another x86-64 CPU would change."""

import json
import os
import subprocess
import sys

import pytest

from rlvr.core.numerics import PINNED_ISA, numerics_env, runtime_settings
from tests.helpers import ROOT, set_params


def in_stage_process(project, code: str, env: dict | None = None, prefix=()) -> str:
    """Run `code` in a fresh Python that imports `stages` first (as `python -m stages.X` does),
    in `project`, with extra `env`; its stdout."""
    done = subprocess.run(
        [*prefix, sys.executable, "-c", f"import stages\n{code}"],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


NUMERICS = (
    "import json, torch\nfrom rlvr.core.numerics import numerics_in_force\n"
    "print(json.dumps(numerics_in_force()))"
)


@pytest.mark.parametrize("threads", [1, 3])
def test_a_stage_computes_with_the_pinned_numerics_whatever_the_environment_says(tmp_path, threads):
    (tmp_path / "params.yaml").write_text(f"runtime: {{torch_threads: {threads}}}\n")
    numerics = json.loads(
        in_stage_process(
            tmp_path,
            NUMERICS,
            env={"OMP_NUM_THREADS": "7", "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AUTO"},
        )
    )
    assert numerics["torch_threads"] == threads
    if numerics["machine"] in ("x86_64", "AMD64"):
        assert numerics["pinned"] and numerics["aten_cpu_capability"] == "AVX2", numerics
        assert numerics["mkl_cbwr"] == "COMPATIBLE" and numerics["onednn_max_cpu_isa"] == "AVX2"


def test_reproducible_false_leaves_the_kernels_to_the_machine(tmp_path):
    (tmp_path / "params.yaml").write_text("runtime: {torch_threads: 1, reproducible: false}\n")
    numerics = json.loads(
        in_stage_process(
            tmp_path,
            NUMERICS,
            env={name: "" for name in PINNED_ISA} | {"ATEN_CPU_CAPABILITY": "default"},
        )
    )
    assert not numerics["pinned"] and numerics["torch_threads"] == 1
    assert numerics["mkl_cbwr"] in ("off", "")


def test_the_tests_stages_spin_briefly_and_a_stage_leaves_the_wait_policy_alone(tmp_path):
    """tests/conftest.py: the stages the tests start beside each other sleep after 1,000 rounds;
    a stage keeps whatever wait policy its environment names (pin sets none)."""
    (tmp_path / "params.yaml").write_text("runtime: {torch_threads: 2}\n")
    code = "import os\nprint([os.environ.get(n) for n in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')])"
    if os.environ.get("GOMP_SPINCOUNT") == "1000":  # (unless the runner named its own)
        assert in_stage_process(tmp_path, code).strip() == "[None, '1000']"
    owner = in_stage_process(
        tmp_path, code, env={"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": ""}
    )
    assert owner.strip() == "['ACTIVE', '']"


def test_pinning_after_torch_is_imported_is_refused_not_silently_late(tmp_path):
    code = "import torch\nfrom rlvr.core.numerics import pin\npin(1, True)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode != 0 and "torch is already imported" in done.stderr


def test_the_pinned_environment_is_the_same_on_every_x86_machine_and_absent_elsewhere():
    assert numerics_env(2, True, "x86_64") == numerics_env(2, True, "AMD64")
    assert numerics_env(2, True, "x86_64").items() >= PINNED_ISA.items()
    assert not set(PINNED_ISA) & set(numerics_env(2, True, "aarch64"))
    assert not set(PINNED_ISA) & set(numerics_env(2, False, "x86_64"))
    assert runtime_settings({"torch_threads": True}) == (2, True)  # a bool is not a count


def _other_level() -> str | None:
    """An ATen kernel level this CPU takes besides AVX2 (what another CPU would dispatch to)."""
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    return "avx512" if " avx512f" in flags and " avx512bw" in flags else None


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    """The probe (tests/numerics_probe.py) under what another x86-64 CPU would change: ATen's
    kernel level and the visible core count; pinned and not."""
    from tests.helpers import make_project_copy

    project = make_project_copy(tmp_path_factory.mktemp("numerics") / "p")
    level = _other_level()
    variants = {
        "this CPU": ({}, ()),
        "ATen avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, ()),
        **({f"ATen {level}": ({"ATEN_CPU_CAPABILITY": level}, ())} if level else {}),
        "1 visible core": ({}, ("taskset", "-c", "0")),
        # not what another CPU changes, but what a machine's owner may: the threads' wait policy
        # (the tests' stages spin 1,000 rounds, tests/conftest.py; these, for good)
        "threads that spin (GOMP_SPINCOUNT=infinite)": ({"GOMP_SPINCOUNT": "infinite"}, ()),
    }
    results = {}
    for reproducible in (True, False):
        set_params(project, {"runtime": {"torch_threads": 2, "reproducible": reproducible}})
        for name, (env, prefix) in variants.items():
            if not reproducible and (prefix or "GOMP_SPINCOUNT" in env):
                continue  # (the thread count is pinned in both modes; the policy moves no bits)
            out = in_stage_process(
                project,
                "import runpy, sys\nsys.argv = ['p', 'out']\n"
                "runpy.run_module('tests.numerics_probe', run_name='__main__')",
                env=env,
                prefix=prefix,
            )
            results[reproducible, name] = json.loads(out.strip().splitlines()[-1])
    return results


def _digests(results, reproducible):
    return {
        name: (r["base"], r["trained"], r["samples"])
        for (mode, name), r in results.items()
        if mode is reproducible
    }


@pytest.mark.slow
def test_pinned_numerics_compute_the_same_bits_under_what_another_cpu_would_change(probes):
    pinned = _digests(probes, True)
    assert len(pinned) >= 3 and len(set(pinned.values())) == 1, pinned


@pytest.mark.slow
def test_without_the_pinning_another_kernel_level_computes_other_bits(probes):
    if _other_level() is None:
        pytest.skip("this CPU takes one ATen kernel level only (AVX2): nothing to vary")
    unpinned = _digests(probes, False)
    assert len(set(unpinned.values())) == len(unpinned) - 1, unpinned  # 'this CPU' = its level
