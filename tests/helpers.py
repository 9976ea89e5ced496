"""Helpers of the end-to-end tests: copies of the project, and commands run inside them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The end-to-end budget: a real run of every stage in about a minute. 24 GRPO steps of 4 prompts
# cover the 64 training prompts one and a half times (a kill can land inside or at the end of a
# pass over them), with a checkpoint every 4 steps.
SMALL_RUN = {
    "model": {"warm_start": {"steps": 30}},
    "smoke": {"max_steps": 3},
    "train": {
        "max_steps": 24,
        "save_steps": 4,
        "eval_steps": 4,
        "log_every": 8,
        "grpo": {"num_generations": 4, "per_device_train_batch_size": 16},
    },
    "evaluate": {"samples": 2, "n_resamples": 500},
    # one thread: the tests run two processes at once on 2 cores (tests/conftest.py);
    # each machine's own kernels, ~2x faster than the pinned ones (tests/test_numerics.py
    # covers the pinning, and no test depends on which figures a machine computes)
    "runtime": {"torch_threads": 1, "reproducible": False},
    # two RL seeds: the fewest that give a recipe verdict (rlvr.audit.recipe.MIN_SEEDS)
    # the RFT baseline's fine-tune: a few passes prove the stage, not the method
    "audit": {"seeds": [0, 1], "rft": {"epochs": 5}},
}


def merge(target, changes) -> None:
    """Apply nested overrides to a (ruamel) mapping in place."""
    for key, value in changes.items():
        if isinstance(value, dict) and key in target:
            merge(target[key], value)
        else:
            target[key] = value


def set_params(project: Path, overrides: dict) -> None:
    """Change params.yaml in a copy, keeping its comments."""
    from ruamel.yaml import YAML

    yaml = YAML()
    params = yaml.load(project / "params.yaml")
    merge(params, overrides)
    yaml.dump(params, project / "params.yaml")


def git(root: Path, *args: str) -> str:
    """`git <args>` in root (it must succeed); its stdout, stripped."""
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()


def dvc_repo(root: Path, files: dict[str, str]) -> Path:
    """A git repository on main (committer `dev`) with DVC set up and `files` (path: text)
    written, not committed: the team tests' projects of their own."""
    from rlvr.orchestration.runs import run_dvc

    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "dev")
    git(root, "config", "user.email", "dev@example.com")
    assert run_dvc(root, "init", "-q").returncode == 0
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def commit_all(project: Path, message: str) -> None:
    """git init (if needed), add everything and commit."""
    for command in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", message],
    ):
        subprocess.run(command, cwd=project, check=True, capture_output=True)


def make_project_copy(copy: Path, overrides: dict | None = None) -> Path:
    """Copy the project's tracked files (outputs of earlier runs left out) into a fresh git
    repository at `copy`, optionally with params.yaml overrides, and commit them."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for file in files:
        if (ROOT / file).is_file() and not file.startswith("reports/"):
            (copy / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / file, copy / file)
    if overrides:
        set_params(copy, overrides)
    commit_all(copy, "project")
    return copy


def made_once(path: Path, make) -> Path:
    """`path`, made by `make(path)` by the first process to ask (test workers share it): the
    others wait on a lock beside it, then find it whole. A half-made one (its maker killed) is
    made again."""
    from filelock import FileLock

    done = path.parent / f"{path.name}.done"
    with FileLock(str(path.parent) + ".lock"):
        if not done.exists():
            shutil.rmtree(path.parent, ignore_errors=True)
            path.parent.mkdir(parents=True)
            make(path)
            done.touch()
    return path


def project_env(project: Path) -> dict:
    """The environment to run the project's commands in a copy: this venv's executables, the
    copy's code."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(project)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a user's machine: __pycache__ gets written
    return env


def dvc(project: Path, *args: str, check: bool = True) -> str:
    """Run a dvc command in a copy; its output (a failure shows the output's tail)."""
    run = subprocess.run(
        ["dvc", *args], cwd=project, env=project_env(project), capture_output=True, text=True
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0 or not check, f"dvc {' '.join(args)}: {output[-4000:]}"
    return output


def trainer_hook(patch: str) -> str:
    """A sitecustomize.py that, when a process imports transformers.trainer, runs `patch` (code
    defining `patch(Trainer)`) on its Trainer class: faults injected into a real run."""
    return (
        """
import importlib.abc, importlib.util, os, signal, sys, time
"""
        + patch
        + """

class _PatchTrainer(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "transformers.trainer":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            patch(module.Trainer)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PatchTrainer())
"""
    )


# Loaded as sitecustomize by every Python process of a run (dvc and the stage it starts): once
# `transformers.trainer` is imported, the Trainer kills its whole process group (dvc included)
# with SIGKILL right after it saved checkpoint-$KILL_AFTER_CHECKPOINT: a kill -9 that lands at
# that exact point, every time.
KILL_HOOK = trainer_hook("""
STEP = int(os.environ["KILL_AFTER_CHECKPOINT"])


def patch(Trainer):
    save = Trainer._save_checkpoint

    def save_then_die(trainer, *args, **kwargs):
        save(trainer, *args, **kwargs)
        if trainer.state.global_step != STEP:
            return
        if "LOCAL_RANK" not in os.environ:  # one process: kill the whole `dvc repro`
            os.killpg(os.getpgrp(), signal.SIGKILL)
        # A rank of a launched run (torchrun gives each its own session): once every rank has
        # saved, kill the launcher's process group, `dvc repro` with it; the ranks must then die
        # with their launcher (the sleep would outlive the test).
        import torch.distributed as dist

        dist.barrier()
        if os.environ["RANK"] == "0":
            os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)
        time.sleep(120)

    Trainer._save_checkpoint = save_then_die
""")


def kill_train_after(project: Path, step: int, resume: bool = False) -> str:
    """Train seed 0 under `dvc repro`, from scratch (checkpoints removed first) or, with `resume`,
    from the checkpoints an earlier kill left, and kill -9 the whole run right after
    checkpoint-<step> is saved. Returns the run's output."""
    import signal

    if not resume:
        shutil.rmtree(project / "models/checkpoints", ignore_errors=True)
    hook = project.parent / f"{project.name}-kill-hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(KILL_HOOK)
    env = project_env(project)
    # unbuffered: what the stage printed before the kill (its resume line) reaches the output
    env.update(
        PYTHONPATH=f"{hook}:{project}", KILL_AFTER_CHECKPOINT=str(step), PYTHONUNBUFFERED="1"
    )
    run = subprocess.run(
        ["dvc", "repro", "--force", "--single-item", "train@0"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        start_new_session=True,
    )
    output = run.stdout + run.stderr
    assert run.returncode == -signal.SIGKILL, (
        f"not killed (exit {run.returncode}): {output[-3000:]}"
    )
    return output


def run_in_terminal(project: Path, *command: str, columns: int = 200) -> str:
    """Run a command in a pseudo-terminal `columns` wide (as a person sees it: rich tables fit
    themselves to the terminal), in a copy's environment; its output with the colours removed."""
    import fcntl
    import pty
    import re
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    # COLUMNS and LINES as the terminal's own: a test worker may carry others (pytest-xdist's
    # workers set 80 x 24), which rich would believe before the terminal's size
    process = subprocess.Popen(
        list(command),
        cwd=project,
        stdin=child,
        stdout=child,
        stderr=child,
        env={**project_env(project), "TERM": "xterm", "COLUMNS": str(columns), "LINES": "50"},
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    process.wait(timeout=120)
    os.close(main)
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))


# Loaded as sitecustomize by every Python process of a run (dvc and each stage it starts):
# each open() of a watched file appends the opening process's main module to the log
# (conftest.py's forced_rerun).
OPEN_HOOK = """
import json, os, sys

_WATCHED = {os.path.realpath(p): p for p in os.environ["WATCH_FILES"].split(os.pathsep)}
_LOG = os.environ["WATCH_LOG"]


def _hook(event, args):
    if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    try:
        path = os.path.realpath(os.fsdecode(args[0]))
    except (TypeError, ValueError):
        return
    if path in _WATCHED:
        main = getattr(sys.modules.get("__main__"), "__spec__", None)
        who = main.name if main is not None else os.path.basename(sys.argv[0] or "python")
        with open(_LOG, "a") as log:  # not watched: no recursion
            log.write(json.dumps({"file": _WATCHED[path], "by": who}) + "\\n")


sys.addaudithook(_hook)
"""


def group_params(group_size: int, **train):
    """Params for scoring_trainer: groups of `group_size`, two prompts a batch, completions of
    at most 6 tokens, and `train`'s other keys (its `grpo` merged into those; with guidance on,
    train.guides the answers' folder, as check_params asks)."""
    from rlvr.params.config import parse_params

    grpo = {
        "num_generations": group_size,
        "per_device_train_batch_size": 2 * group_size,
        "max_completion_length": 6,
        **train.pop("grpo", {}),
    }
    if train.get("guidance", "off") != "off":  # train's dep on the answers' folder
        train.setdefault("guides", "reports/verified")
    return parse_params({"train": {"grpo": grpo, **train}})


def scoring_trainer(
    policy_dir,
    rows,
    output_dir,
    params,
    reward,
    name: str = "correctness",
    *,
    beta: float = 0.05,
    guides=None,
    **config,
):
    """A PipelineGRPOTrainer on `rows` for one step with one reward, `name`, from the per-sample
    scorer `reward`, in train mode: what the trainer's tests score hand-made batches with.
    `config`: grpo_config's switches (dynamic_sampling, guidance)."""
    from rlvr.data.rows import to_hf_dataset
    from rlvr.grpo.callbacks import BetaSchedule
    from rlvr.grpo.config import grpo_config
    from rlvr.grpo.run import build_trainer
    from rlvr.rewards.registry import RewardFunction

    trainer = build_trainer(
        str(policy_dir),
        to_hf_dataset(rows),
        [RewardFunction(name, reward)],
        grpo_config(
            params.train, output_dir=output_dir, max_steps=1, seed=0, reward_weights=[1.0], **config
        ),
        params.model,
        [],
        beta_schedule=BetaSchedule(params.train.beta_schedule, beta),
        guides=guides,
    )
    trainer.model.train()
    return trainer


def group_batch(rows, group_size: int) -> list[dict]:
    """What TRL's sampler hands the trainer: each row's id, prompt and verifier, group_size times."""
    import json

    return [
        {"id": r.id, "prompt": r.prompt, "verifier": json.dumps(r.verifier)}
        for r in rows
        for _ in range(group_size)
    ]
