"""How torch computes on a CPU, pinned, so that another x86-64 machine computes the same bits.

What decides a CPU's floating-point results, measured here (docs/reliability.md#the-same-bits-on-another-cpu):
the kernels ATen dispatches to by the CPU's vector width (AVX2 or AVX-512: another summation
order), the code path MKL's sgemm takes (chosen by CPU vendor and model: Intel and AMD take
different ones), oneDNN's ISA, and the thread count. `params.yaml runtime` pins them:

- `runtime.torch_threads` threads for torch, OpenMP and MKL, whatever the machine's core count,
  with OpenMP's and MKL's dynamic adjustment off;
- with `runtime.reproducible` (x86-64 only): ATen's AVX2 kernels (`ATEN_CPU_CAPABILITY`; every
  x86-64 CPU of the last decade has AVX2), oneDNN capped at AVX2 (`ONEDNN_MAX_CPU_ISA`) and MKL's
  conditional numerical reproducibility on its COMPATIBLE branch (`MKL_CBWR`: the one branch MKL
  documents as giving the same results on Intel and non-Intel CPUs).

Each is read once, when torch or the library starts, so the pinning is environment variables
set before anything imports torch: every stage sets it in `stages/__init__.py` (a plain `dvc
repro`, `./dev repro` and the flows alike). A process that imported torch first is too late:
`pin` refuses it.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

from ruamel.yaml import YAML

# params.yaml `runtime`'s defaults (rlvr.params.config.RuntimeParams declares the fields with these):
# here, because a stage pins from the raw file before anything heavier is imported.
THREADS_DEFAULT = 2
REPRODUCIBLE_DEFAULT = True
# The variables a reproducible run sets, beyond the thread count (x86-64 only: the names and
# values are x86's).
PINNED_ISA = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"}
X86_64 = ("x86_64", "amd64")


def numerics_env(threads: int, reproducible: bool, machine: str | None = None) -> dict[str, str]:
    """The environment that pins torch's numerics.

    >>> numerics_env(2, False)
    {'OMP_NUM_THREADS': '2', 'MKL_NUM_THREADS': '2', 'OMP_DYNAMIC': 'FALSE', 'MKL_DYNAMIC': 'FALSE'}
    >>> numerics_env(1, True, "x86_64")["MKL_CBWR"], "MKL_CBWR" in numerics_env(1, True, "aarch64")
    ('COMPATIBLE', False)
    """
    env = {
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "OMP_DYNAMIC": "FALSE",
        "MKL_DYNAMIC": "FALSE",
    }
    if reproducible and (machine or platform.machine()).lower() in X86_64:
        env.update(PINNED_ISA)
    return env


def pin(threads: int, reproducible: bool) -> dict[str, str]:
    """Set numerics_env in this process (children inherit it); returns what it set. Must run
    before torch is imported: ATen, MKL and oneDNN read these once, when they start."""
    if "torch" in sys.modules:
        raise RuntimeError(
            "rlvr.core.numerics.pin: torch is already imported, so its numerics are "
            "already decided: pin before importing it"
        )
    env = numerics_env(threads, reproducible)
    os.environ.update(env)
    return env


def runtime_settings(raw: Mapping | None) -> tuple[int, bool]:
    """(torch_threads, reproducible) from params.yaml's `runtime` mapping as read, the defaults
    for anything absent or malformed (check_params reports a malformed value in its own line,
    before any stage that computes runs).

    >>> runtime_settings({"torch_threads": 1, "reproducible": False}), runtime_settings(None)
    ((1, False), (2, True))
    >>> runtime_settings({"torch_threads": "x", "reproducible": "no"})
    (2, True)
    """
    raw = raw if isinstance(raw, Mapping) else {}
    threads = raw.get("torch_threads", THREADS_DEFAULT)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        threads = THREADS_DEFAULT
    reproducible = raw.get("reproducible", REPRODUCIBLE_DEFAULT)
    return threads, reproducible if isinstance(reproducible, bool) else REPRODUCIBLE_DEFAULT


def pin_from_params(path: str | Path = "params.yaml") -> dict[str, str] | None:
    """pin() with params.yaml's `runtime` section (defaults where it cannot be read); None, and
    nothing set, in a process that imported torch already (a test importing a stage module):
    its numerics are decided, and a stage records what it computed with (numerics_in_force)."""
    if "torch" in sys.modules:
        return None
    try:
        raw = YAML(typ="safe").load(Path(path).read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - check_params says what is wrong with the file
        raw = None
    return pin(*runtime_settings(raw.get("runtime") if isinstance(raw, Mapping) else None))


def numerics_in_force() -> dict:
    """What this process computes with (torch imported): the machine's architecture, threads,
    ATen's kernel level, the MKL branch and the oneDNN cap. Outputs record it (the training and
    prepare summaries): the same on every x86-64 machine when pinned."""
    import torch  # here: this module pins the ISA before torch loads (a top import would undo it)

    return {
        "machine": platform.machine(),
        "pinned": all(os.environ.get(k) == v for k, v in PINNED_ISA.items()),
        "torch_threads": torch.get_num_threads(),
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR", "off"),
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "native"),
    }


def describe(numerics: Mapping | None) -> str:
    """One line for a report's provenance.

    >>> describe({"machine": "x86_64", "pinned": True, "torch_threads": 2,
    ...           "aten_cpu_capability": "AVX2", "mkl_cbwr": "COMPATIBLE",
    ...           "onednn_max_cpu_isa": "AVX2"})
    'x86_64, pinned numerics (runtime.reproducible): 2 torch threads, ATen AVX2, MKL_CBWR COMPATIBLE, oneDNN up to AVX2'
    >>> describe(None)
    'not recorded'
    """
    if not numerics:
        return "not recorded"
    mode = (
        "pinned numerics (runtime.reproducible)"
        if numerics.get("pinned")
        else "not pinned (runtime.reproducible: false): this CPU's own kernels"
    )
    return (
        f"{numerics.get('machine')}, {mode}: {numerics.get('torch_threads')} torch threads, "
        f"ATen {numerics.get('aten_cpu_capability')}, MKL_CBWR {numerics.get('mkl_cbwr')}, "
        f"oneDNN up to {numerics.get('onednn_max_cpu_isa')}"
    )
