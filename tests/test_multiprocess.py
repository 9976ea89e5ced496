"""Two training processes on CPU (accelerate launch, DDP over gloo), train.processes: 2.

- What steers training is computed over the global batch and is the same on every rank (the
  running-mean baseline, the adaptive beta); reward failures are summed over the ranks.
- Under `dvc repro`, both ranks run (each says so once), the main process alone writes the
  metrics, history, curves, checkpoints' own state and models/final, and the logged keys are a
  single-process run's.
- A NaN on one rank stops every rank with the usual one-line message, and no traceback.
- `kill -9` of the whole run, at several checkpoints, leaves no rank behind, and the rerun resumes
  to the very end an uninterrupted 2-process run reaches.
"""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rlvr.grpo.distributed import launch_args
from tests.helpers import dvc, kill_train_after, project_env, set_params, trainer_hook
from tests.test_pipeline import CHECKPOINTS, _git_status, _results

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
LIVE = "reports/train/seed-0/live/plots/metrics"


def _history(project: Path) -> list[dict]:
    text = (project / "reports/train/seed-0/history.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def _processes_in(project: Path) -> list[psutil.Process]:
    """Live processes whose working directory is the project (ranks, launchers, dvc)."""
    found = []
    for process in psutil.process_iter(["cwd"]):
        if process.info["cwd"] == str(project) and process.status() != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def _none_left_in(project: Path, seconds: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while (left := _processes_in(project)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.fixture(scope="module")
def two_process_run(cold_run, tmp_path_factory):
    """The cold run's copy rerun with train.processes: 2 on one RL seed (smoke, train, evaluate
    and report rerun; the base model and the gates are reused; a second seed would show nothing
    more of the ranks), committed; and what `dvc repro` printed."""
    project = Path(
        shutil.copytree(cold_run, tmp_path_factory.mktemp("ranks") / "project", symlinks=True)
    )
    set_params(project, {"train": {"processes": 2}, "audit": {"seeds": [0]}})
    output = dvc(project, "repro")
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "2 ranks"],
        cwd=project,
        check=True,
    )
    return project, output


def test_what_steers_training_is_global_and_identical_on_every_rank(tiny_policy_dir, tmp_path):
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *launch_args("x", 2, use_cpu=True, port=0)[:-2],
        str(ROOT / "tests/rank_probe.py"),
        str(tmp_path),
        str(tiny_policy_dir),
    ]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["num_processes"] for r in ranks] == [2, 2]
    steps = ranks[0]["steps"]
    assert len(steps) == 6 and ranks[1]["steps"] == steps  # beta and baseline: the same everywhere
    # The baseline saw every rank's rewards (2 ranks x 8 completions), not this rank's 8.
    assert {s["rewards_seen"] for s in steps} == {16}
    assert len({s["running_mean"] for s in steps}) > 1  # it moved: the equality is not trivial
    assert len({s["beta"] for s in steps}) > 1  # the adaptive beta moved, identically
    local = [r["local_failures"] for r in ranks]
    assert all(n > 0 for n in local)  # both ranks scored failing rows
    assert [r["summed_failures"] for r in ranks] == [sum(local)] * 2
    # The logged per-step failure counts are totals over the ranks, as in a single process.
    assert ranks[0]["logged_failures"] == ranks[1]["logged_failures"]
    assert sum(ranks[0]["logged_failures"]) == sum(local)


def _probe(tiny_policy_dir, tmp_path, mode: str) -> list[dict]:
    """tests/rank_probe.py in `mode` on 2 CPU ranks; each rank's record."""
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *launch_args("x", 2, use_cpu=True, port=0)[:-2],
        str(ROOT / "tests/rank_probe.py"),
        str(tmp_path),
        str(tiny_policy_dir),
        mode,
    ]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_dynamic_sampling_runs_the_same_rounds_on_every_rank(tiny_policy_dir, tmp_path):
    """Generation gathers rewards across ranks, so a rank that stopped resampling while another
    went on would hang both: every rank runs the rounds the shortest-served rank needs."""
    ranks = [r["steps"] for r in _probe(tiny_policy_dir, tmp_path, "dynamic")]
    assert len(ranks[0]) == 6
    assert [s["rounds"] for s in ranks[0]] == [s["rounds"] for s in ranks[1]]
    # rank 0 kept every group at once, rank 1 did not: the extra rounds were rank 1's
    assert any(s["rounds"][0] > 1 for s in ranks[0])
    assert {s["kept_share"][0] for s in ranks[0] if s["rounds"][0] == 1} <= {1.0}
    assert any(s["kept_share"][0] < 1 for s in ranks[1])
    # the KL over the first batch is summed over the ranks: one figure on both
    assert [s["kl_first_batch"] for s in ranks[0]] == [s["kl_first_batch"] for s in ranks[1]]
    assert all(len(s["kl_first_batch"]) == 1 for s in ranks[0])


def test_guidance_guides_each_unsolved_group_once_over_the_ranks(tiny_policy_dir, tmp_path):
    """Off-policy guidance on 2 ranks: put back in rank order, each unsolved group holds one
    guide, in its last row, the answer any rank picks for that prompt at that step, and both
    ranks log the same share (the pipeline's params keep groups within a rank; a group split
    between ranks, which TRL allows: tests/test_guidance.py)."""
    from rlvr.grpo.guidance import pick_guides
    from tests.rank_probe import GUIDES

    ranks = _probe(tiny_policy_dir, tmp_path, "guided")
    first, second = ranks[0]["batches"], ranks[1]["batches"]
    assert len(first) == len(second) == 3  # one scored batch a step, on each rank
    for mine, theirs in zip(first, second, strict=True):
        assert mine["step"] == theirs["step"]
        ids, guided = mine["ids"] + theirs["ids"], mine["guided"] + theirs["guided"]
        texts = mine["texts"] + theirs["texts"]
        assert len(ids) == 16 and len(set(ids)) == 4
        assert guided == [False, False, False, True] * 4  # nothing sampled was correct
        for i in (3, 7, 11, 15):
            assert texts[i] == pick_guides(GUIDES, ids[i], ranks[0]["seed"], mine["step"])[0]
    assert ranks[0]["shares"] == ranks[1]["shares"] == [0.25] * 3


@pytest.mark.long
def test_both_ranks_run_and_the_main_process_alone_writes(two_process_run, cold_run):
    project, output = two_process_run
    for stage in ("smoke", "train@0"):
        assert output.count(f"{stage}: launching 2 processes with accelerate (DDP, gloo)") == 1
        for rank in (0, 1):
            assert output.count(f"{stage}: rank {rank} of 2 running") == 1, output[-3000:]
    assert "Traceback" not in output and "find_unused_parameters" not in output
    steps = list(range(1, 25))
    # One writer: one line per step in the history and in every DVCLive curve, in order.
    assert [entry["step"] for entry in _history(project)] == steps
    curves = sorted((project / LIVE).rglob("*.tsv"))
    assert len(curves) > 20
    scored = list(range(0, 25, 4))  # the validation curves: step 0 and every train.eval_steps
    for curve in curves:
        rows = curve.read_text().splitlines()
        # val/<score>.tsv and val/success/<tag>.tsv: the validation rows' curves
        expected = scored if "val" in curve.relative_to(project / LIVE).parts else steps
        assert [int(row.split("\t")[0]) for row in rows[1:]] == expected, curve
    # the 4 scores, pass@1 and pass@2 (SMALL_RUN draws 2 samples), the success on each tag's rows
    assert sorted(c.stem for c in curves if c.parent.name == "val") == [
        "greedy_success",
        "mean_length",
        "mean_reward",
        "pass_at_1",
        "pass_at_2",
        "sampled_success",
    ]
    assert sorted(c.stem for c in curves if c.parent.name == "success") == ["add", "mul", "sub"]
    # The logged keys are a single-process run's.
    assert set(_history(project)[-1]) == set(_history(cold_run)[-1])
    assert json.loads((project / "reports/smoke/checks.json").read_text())["passed"]
    summary = json.loads((project / "reports/train/seed-0/summary.json").read_text())
    assert summary["steps"] == 24
    checkpoint = sorted((project / CHECKPOINTS).glob("checkpoint-*"))[-1]
    assert {p.name for p in checkpoint.glob("rng_state*")} == {"rng_state_0.pth", "rng_state_1.pth"}
    assert (project / "models/final/model.safetensors").is_file()
    assert not list((project / "models").glob(".*staging*"))
    assert dvc(project, "status", "--json").strip() == "{}"


NAN_HOOK = trainer_hook("""
AT = int(os.environ["NAN_AT_STEP"])


def patch(Trainer):
    step = Trainer.training_step

    def nan_on_rank_one(trainer, *args, **kwargs):
        loss = step(trainer, *args, **kwargs)
        if os.environ.get("RANK") == "1" and trainer.state.global_step + 1 >= AT:
            loss = loss * float("nan")
        return loss

    Trainer.training_step = nan_on_rank_one
""")


@pytest.mark.long
def test_a_nan_on_one_rank_stops_every_rank_with_the_usual_line(two_process_run, tmp_path):
    project = Path(shutil.copytree(two_process_run[0], tmp_path / "nan", symlinks=True))
    shutil.rmtree(project / CHECKPOINTS)  # train from scratch, not resume the finished run
    hook = tmp_path / "nan-hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(NAN_HOOK)
    env = {**project_env(project), "PYTHONPATH": f"{hook}:{project}", "NAN_AT_STEP": "6"}
    run = subprocess.run(
        ["dvc", "repro", "--force", "--single-item", "train@0"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    output = run.stdout + run.stderr
    assert run.returncode != 0
    lines = [line for line in output.splitlines() if "is not finite" in line]
    assert len(lines) == 1, output[-3000:]
    assert lines[0].startswith(
        "train@0: step 6: loss = nan is not finite; training stopped. "
        f"Last good checkpoint: {CHECKPOINTS}/checkpoint-4"
    )
    assert "Traceback" not in output and "ChildFailedError" not in output
    assert not _none_left_in(project)
    assert not (project / f"{CHECKPOINTS}/checkpoint-8").exists()


@pytest.mark.long
def test_kill_9_of_the_whole_run_resumes_to_the_uninterrupted_end(two_process_run, tmp_path):
    """Killed after checkpoint-8, resumed and killed again after checkpoint-20, resumed to the
    end: each kill leaves no rank behind and both ranks' state saved."""
    reference = two_process_run[0]
    project = Path(shutil.copytree(reference, tmp_path / "killed", symlinks=True))
    for step in (8, 20):
        output = kill_train_after(project, step, resume=step != 8)
        if step != 8:
            assert f"train@0: resuming from {CHECKPOINTS}/checkpoint-8" in output
        left = _none_left_in(project)
        assert not left, f"processes outlived the kill: {[p.cmdline() for p in left]}"
        checkpoint = project / CHECKPOINTS / f"checkpoint-{step}"
        assert {p.name for p in checkpoint.glob("rng_state*")} == {
            "rng_state_0.pth",
            "rng_state_1.pth",
        }
        assert not (project / CHECKPOINTS / f"checkpoint-{step + 4}").exists()
    output = dvc(project, "repro")
    assert f"train@0: resuming from {CHECKPOINTS}/checkpoint-20" in output
    assert _results(project) == _results(reference)
    assert _git_status(project) == ""
