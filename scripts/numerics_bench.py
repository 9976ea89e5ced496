"""What pinning torch's numerics costs, what bits each setting writes, and how training fares with
a busy process beside it (Step 27): measurements for docs/reliability.md, printed as markdown.

    ./dev run python scripts/numerics_bench.py bits [--commit eb889f1]   # bits of each setting
    ./dev run python scripts/numerics_bench.py cost [--reps 2]           # seconds, interleaved
    ./dev run python scripts/numerics_bench.py load [--steps 60]         # train beside a busy process
    ./dev run python scripts/numerics_bench.py alone [--steps 150]       # 2 wait policies, quiet
    ./dev run python scripts/numerics_bench.py sgemm                     # MKL's branches alone

Everything runs in a work clone (../numerics-work: the commit's code, its outputs checked out of
the DVC cache, .venv linked), one stage process at a time, `python -m stages.<name>` as DVC runs
it, with `runtime.reproducible: false` in the clone's params.yaml and each setting's variables
in the process's environment instead (what `runtime.reproducible` would set, or a candidate).

- `bits`: prepare_model with `model.warm_start.steps: 30` per setting: first and last loss and
  the first 12 hex digits of models/base/model.safetensors' md5: the rows ../shared/DESIGN.md
  holds for an Intel Xeon (measured at eb889f1, the default).
- `cost`: prepare_model (100 warm-start steps) and train@0 (`train.max_steps` 60 from the
  committed base) per setting, the settings' runs interleaved, `--reps` rounds: wall seconds of
  the stage process (start and imports included), median, and the ratio to `unpinned`.
- `load`: train@0 for `--steps` steps alone and beside a busy neighbour (one process running torch
  matmuls on `--neighbour-threads` threads, libgomp's default wait), under each OpenMP wait
  policy (torch's wheel ships GNU libgomp; `--only` picks some): seconds, and the trained
  model's md5 (a wait policy must not change the bits).
- `alone`: train@0 for `--steps` steps on a quiet machine, libgomp's default against
  `GOMP_SPINCOUNT=1000`, interleaved (A B B A A B): seconds and md5 of each run.
- `sgemm`: the tiny model's four matmul shapes (a batch of 2,560 rows), 300 rounds, under each
  setting and 1 or 2 threads, each in a fresh process: seconds (MKL's branch alone, no stage).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ruamel.yaml import YAML

from rlvr.core.numerics import PINNED_ISA

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT.parent / "numerics-work"
NUMERICS_VARS = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
)
AVX2 = {k: v for k, v in PINNED_ISA.items() if k != "MKL_CBWR"}  # ATen's and oneDNN's caps
SETTINGS = {
    "unpinned": {},
    "compatible (the default)": dict(PINNED_ISA),
    "avx2 + MKL_CBWR=AVX2": {**AVX2, "MKL_CBWR": "AVX2"},
    "avx2, MKL free": dict(AVX2),
    "avx2 + MKL_ENABLE_INSTRUCTIONS=AVX2": {**AVX2, "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "avx2 + MKL_CBWR=AVX2 + MKL_ENABLE_INSTRUCTIONS=AVX2": {
        **AVX2,
        "MKL_CBWR": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
}
# On an AMD CPU MKL takes its AUTO branch for MKL_CBWR=AVX2 and ignores MKL_ENABLE_INSTRUCTIONS
# (Intel's documentation; the bits agree): the settings whose cost differs there.
COST_SETTINGS = ("unpinned", "compatible (the default)", "avx2, MKL free")
WAIT_POLICIES = {
    "libgomp's default": {},
    "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "GOMP_SPINCOUNT=10000": {"GOMP_SPINCOUNT": "10000"},
    "GOMP_SPINCOUNT=1000": {"GOMP_SPINCOUNT": "1000"},
    "GOMP_SPINCOUNT=100": {"GOMP_SPINCOUNT": "100"},
}
NEIGHBOUR = (
    "import sys, torch\ntorch.set_num_threads(int(sys.argv[1]))\na = torch.randn(384, 384)\n"
    "while True:\n    a = torch.tanh(a @ a)\n"
)


def sh(*cmd: str, cwd: Path = WORK, env: dict | None = None) -> str:
    return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def work_clone(commit: str | None = None) -> str:
    """The work clone at `commit` (HEAD's by default) with its outputs; the commit's short hash."""
    from rlvr.orchestration.experiments import make_work_clone

    commit = commit or sh("git", "rev-parse", "HEAD", cwd=ROOT).strip()
    make_work_clone(ROOT, WORK)
    sh("git", "checkout", "-q", "--force", commit)
    dvc_checkout()
    return commit[:7]


def dvc_checkout() -> None:
    """The commit's outputs from the DVC cache (those it holds; a stage rewrites the rest)."""
    dvc = str(ROOT / ".venv" / "bin" / "dvc")
    subprocess.run([dvc, "checkout", "--force", "--quiet"], cwd=WORK, check=False)


def set_params(**dotted) -> None:
    """The clone's params.yaml from the commit's, with runtime.reproducible false and `dotted`."""
    sh("git", "checkout", "-q", "--", "params.yaml")
    yaml = YAML()
    data = yaml.load((WORK / "params.yaml").read_text())
    for key, value in {"runtime.reproducible": False, **dotted}.items():
        *parents, last = key.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[last] = value
    with (WORK / "params.yaml").open("w") as f:
        yaml.dump(data, f)


def stage(args: list[str], env: dict[str, str]) -> float:
    clean = {k: v for k, v in os.environ.items() if k not in NUMERICS_VARS}
    started = time.perf_counter()
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", *args],
        cwd=WORK,
        env={**clean, **env},
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"numerics_bench: {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return seconds


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()[:12]


def bits(commit: str) -> None:
    work_clone(commit)
    set_params(**{"model.warm_start.steps": 30})
    print(f"bits at {commit} (30 warm-start steps)\n")
    print("| setting | first loss | last loss | md5 |\n|---|---|---|---|")
    for name, env in SETTINGS.items():
        stage(["stages.prepare_model"], env)
        summary = json.loads((WORK / "reports" / "prepare" / "summary.json").read_text())
        ws = summary["warm_start"]
        digest = md5(WORK / "models" / "base" / "model.safetensors")
        print(f"| {name} | {ws['first_loss']!r} | {ws['last_loss']!r} | {digest} |", flush=True)


def train_once(env: dict[str, str]) -> tuple[float, str]:
    paths = YAML(typ="safe").load((WORK / "params.yaml").read_text())["paths"]
    out = WORK / paths["trained_models"] / "seed-0"
    # never resume another setting's checkpoint
    for folder in (out, WORK / paths["checkpoints"] / "seed-0"):
        shutil.rmtree(folder, ignore_errors=True)
    seconds = stage(["stages.train", "0"], env)
    return seconds, md5(out / "model.safetensors")


def cost(reps: int) -> None:
    head = work_clone()
    times: dict[tuple[str, str], list[float]] = {}
    for rep in range(reps):
        order = list(COST_SETTINGS) if rep % 2 == 0 else list(reversed(COST_SETTINGS))
        for name in order:
            set_params(**{"model.warm_start.steps": 100})
            t = stage(["stages.prepare_model"], SETTINGS[name])
            times.setdefault((name, "prepare_model"), []).append(t)
            dvc_checkout()  # the committed base back for train
            set_params(**{"train.max_steps": 60})
            t, _ = train_once(SETTINGS[name])
            times.setdefault((name, "train"), []).append(t)
            print(f"numerics_bench: round {rep + 1}: {name}: done", file=sys.stderr, flush=True)
    print(f"cost at {head} ({reps} rounds, interleaved; median wall seconds)\n")
    print("| setting | prepare_model s | ratio | train s | ratio |\n|---|---|---|---|---|")
    base = {s: statistics.median(times[("unpinned", s)]) for s in ("prepare_model", "train")}
    for name in COST_SETTINGS:
        p, t = (statistics.median(times[(name, s)]) for s in ("prepare_model", "train"))
        print(
            f"| {name} | {p:.1f} | {p / base['prepare_model']:.2f} | {t:.1f} | "
            f"{t / base['train']:.2f} |"
        )


def load(steps: int, only: list[str] | None, neighbour_threads: int) -> None:
    head = work_clone()
    set_params(**{"train.max_steps": steps, "runtime.reproducible": True})
    print(
        f"train@0, {steps} steps at {head}, pinned (the default), 2 torch threads; the "
        f"neighbour: {neighbour_threads}-thread torch matmuls\n"
    )
    print("| wait policy | alone s | md5 | beside a busy process s | md5 | slowdown |")
    print("|---|---|---|---|---|---|")
    for name, env in WAIT_POLICIES.items():
        if only and name not in only:
            continue
        quiet, quiet_md5 = train_once(env)
        python = str(ROOT / ".venv" / "bin" / "python")
        neighbour = subprocess.Popen([python, "-c", NEIGHBOUR, str(neighbour_threads)])
        try:
            time.sleep(3)
            busy, busy_md5 = train_once(env)
        finally:
            neighbour.kill()
            neighbour.wait()
        print(
            f"| {name} | {quiet:.1f} | {quiet_md5} | {busy:.1f} | {busy_md5} | "
            f"{busy / quiet:.2f}x |",
            flush=True,
        )


def alone(steps: int) -> None:
    work_clone()
    set_params(**{"train.max_steps": steps, "runtime.reproducible": True})
    a, b = "libgomp's default", "GOMP_SPINCOUNT=1000"
    for name in (a, b, b, a, a, b):
        seconds, digest = train_once(WAIT_POLICIES[name])
        print(f"| {name} | {seconds:.1f} s | {digest} |", flush=True)


SGEMM = """
import time, torch
torch.manual_seed(0)
shapes = [(2560, 128, 512), (2560, 512, 128), (2560, 128, 128), (2560, 128, 100)]
pairs = [(torch.randn(m, k), torch.randn(k, n)) for m, k, n in shapes]
for _ in range(20):
    [a @ b for a, b in pairs]
started = time.perf_counter()
for _ in range(300):
    [a @ b for a, b in pairs]
print(time.perf_counter() - started)
"""


def sgemm() -> None:
    print("| setting | 1 thread s | 2 threads s |\n|---|---|---|")
    clean = {k: v for k, v in os.environ.items() if k not in NUMERICS_VARS}
    for name in COST_SETTINGS:
        seconds = []
        for threads in ("1", "2"):
            env = {
                **clean,
                **SETTINGS[name],
                "OMP_NUM_THREADS": threads,
                "MKL_NUM_THREADS": threads,
            }
            out = sh(str(ROOT / ".venv" / "bin" / "python"), "-c", SGEMM, cwd=ROOT, env=env)
            seconds.append(float(out.strip()))
        print(f"| {name} | {seconds[0]:.2f} | {seconds[1]:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("bits").add_argument("--commit", default="eb889f1")
    sub.add_parser("cost").add_argument("--reps", type=int, default=2)
    loaded = sub.add_parser("load")
    loaded.add_argument("--steps", type=int, default=60)
    loaded.add_argument("--neighbour-threads", type=int, default=1)
    loaded.add_argument("--only", nargs="+", choices=list(WAIT_POLICIES), help="these policies")
    sub.add_parser("alone").add_argument("--steps", type=int, default=150)
    sub.add_parser("sgemm")
    args = parser.parse_args()
    if args.what == "bits":
        bits(args.commit)
    elif args.what == "cost":
        cost(args.reps)
    elif args.what == "alone":
        alone(args.steps)
    elif args.what == "load":
        load(args.steps, args.only, args.neighbour_threads)
    else:
        sgemm()


if __name__ == "__main__":
    main()
