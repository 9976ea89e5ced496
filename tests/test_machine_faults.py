"""The machine's own faults on copies of a cold run: SIGTERM during train (what a Prefect
cancellation or a pod eviction sends) and a disk that fills while a stage writes each end the
stage with one line, no traceback, saying what a rerun does; the rerun then does it and ends as
the uninterrupted run."""

import re
import shutil
import signal
import subprocess

import pytest

from rlvr.core.faults import human_bytes
from tests.helpers import dvc, project_env, trainer_hook
from tests.test_pipeline import CHECKPOINTS, _git_status, _results

pytestmark = pytest.mark.slow

# A sitecustomize.py for the run: the trainer's process group (dvc repro included) gets SIGTERM
# when step $TERM_AT_STEP begins, i.e. after that many steps are done.
TERM_HOOK = trainer_hook("""
STEP = int(os.environ["TERM_AT_STEP"])


def patch(Trainer):
    step = Trainer.training_step

    def term_then_step(trainer, *args, **kwargs):
        if trainer.state.global_step == STEP:
            os.killpg(os.getpgrp(), signal.SIGTERM)
        return step(trainer, *args, **kwargs)

    Trainer.training_step = term_then_step
""")


def _train_terminated_at(project, step: int) -> str:
    hook = project.parent / "term-hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(TERM_HOOK)
    env = {**project_env(project), "PYTHONPATH": f"{hook}:{project}", "TERM_AT_STEP": str(step)}
    run = subprocess.run(
        ["dvc", "repro", "--force", "--single-item", "train@0"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        start_new_session=True,
    )
    output = run.stdout + run.stderr
    assert run.returncode == -signal.SIGTERM, f"exit {run.returncode}: {output[-3000:]}"
    return output


def _no_traceback(output: str) -> None:
    assert "Traceback" not in output and "this is a bug" not in output, output[-3000:]


def test_sigterm_during_train_says_the_step_and_the_checkpoint_a_rerun_resumes(copy_run, cold_run):
    project = copy_run("sigterm")
    shutil.rmtree(project / CHECKPOINTS)
    # before the first checkpoint (every 4 steps), then between two
    output = _train_terminated_at(project, 3)
    assert (
        "train@0: stopped by SIGTERM after step 3 of 24; `dvc repro` trains from the start "
        "(no whole checkpoint was saved yet)"
    ) in output
    _no_traceback(output)
    output = _train_terminated_at(project, 10)
    assert (
        "train@0: stopped by SIGTERM after step 10 of 24; `dvc repro` resumes from "
        f"{CHECKPOINTS}/checkpoint-8"
    ) in output.splitlines()
    _no_traceback(output)
    output = dvc(project, "repro")
    assert f"train@0: resuming from {CHECKPOINTS}/checkpoint-8" in output
    assert _results(project) == _results(cold_run)


def _in_small_disk(project, folder: str, size: str, *command: str) -> str:
    """Run `command` in the project with `folder` on a tmpfs of `size` (a disk that fills),
    in a mount namespace of its own; what it wrote there is copied back afterwards, as if the
    user then freed space on that disk."""
    kept = project.parent / f"{project.name}-kept"
    script = (
        f'set -e; mkdir -p "{folder}"; cp -a "{folder}" "{kept}"; '
        f'mount -t tmpfs -o size={size} tmpfs "{folder}"; cp -a "{kept}/." "{folder}"; '
        f'set +e; "$@"; code=$?; rm -rf "{kept}"; cp -a "{folder}" "{kept}"; exit $code'
    )
    run = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c", script, "sh", *command],
        cwd=project,
        env=project_env(project),
        capture_output=True,
        text=True,
    )
    output = run.stdout + run.stderr
    assert run.returncode != 0, f"the disk did not fill: {output[-3000:]}"
    shutil.rmtree(project / folder, ignore_errors=True)
    shutil.copytree(kept, project / folder, symlinks=True)
    shutil.rmtree(kept)
    return output


def test_a_full_disk_is_one_line_naming_the_folder_and_what_a_rerun_does(copy_run, cold_run):
    project = copy_run("disk-full")
    shutil.rmtree(project / CHECKPOINTS)
    # A checkpoint of the small run is ~6.4 MiB: two fit in 16 MiB (checkpoint-4, -8), the
    # third (checkpoint-12) fills the disk mid-write.
    output = _in_small_disk(
        project, CHECKPOINTS, "16m", "dvc", "repro", "--force", "--single-item", "train@0"
    )
    _no_traceback(output)
    line = next(line for line in output.splitlines() if line.startswith("train@0: the disk"))
    needed = sum(f.stat().st_size for f in (project / CHECKPOINTS / "checkpoint-8").iterdir())
    assert needed > 2**20
    assert line == (
        f"train@0: the disk is full: writing in {CHECKPOINTS} failed (about "
        f"{human_bytes(needed)} needed, {line.split(' needed, ')[1].split(')')[0]}); "
        f"free some space, then rerun: `dvc repro` resumes from "
        f"{CHECKPOINTS}/checkpoint-8, skipping the damaged {CHECKPOINTS}/checkpoint-12"
    )
    assert re.search(r"needed, \d+(\.\d)? (B|KiB) free\)", line)  # what the full disk has left
    output = dvc(project, "repro")
    assert (f"train: skipping damaged checkpoint {CHECKPOINTS}/checkpoint-12") in output
    assert f"train@0: resuming from {CHECKPOINTS}/checkpoint-8" in output
    assert _results(project) == _results(cold_run)

    # Anywhere a stage writes: evaluate's reports on a disk with no room for them.
    for old in (project / "reports/eval/seed-0").iterdir():
        old.unlink()  # as `dvc repro` would before running the stage
    output = _in_small_disk(
        project,
        "reports/eval/seed-0",
        "8k",
        "dvc",
        "repro",
        "--force",
        "--single-item",
        "evaluate@0",
    )
    _no_traceback(output)
    assert ("evaluate@0: the disk is full: writing in reports/eval/seed-0 failed (") in output
    assert (
        "free some space, then rerun: `dvc repro` runs evaluate@0 again, keeping the stages "
        "before it"
    ) in output
    assert "Stage 'evaluate@0' didn't change" not in dvc(project, "repro")
    assert _git_status(project) == ""  # its reports, and everything else, as the cold run's
