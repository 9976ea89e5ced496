"""The full GRPO run, end to end: what the train stage calls (the smoke run: rlvr.pipeline.smoke).

Each returns plain dicts for the stage to write (metrics stay deterministic: timings and the
resume point go to separate entries) and the lines to print.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from rlvr.core.code_closure import stage_code_files
from rlvr.core.faults import DiskFull, Stopped, disk_full_line, folder_bytes, full_disk_folder
from rlvr.core.files import file_md5, remove_tree, share_with_umask, write_jsonl
from rlvr.core.metric_keys import (
    BETA,
    COMPLETIONS_SAMPLE,
    CORRECTNESS,
    LOSS,
    ON_POLICY_REWARD,
    REWARD,
    SAMPLED_COMPLETIONS,
    TRAIN_RUNTIME,
)
from rlvr.core.numerics import numerics_in_force
from rlvr.core.seeds import SeedPaths
from rlvr.core.stats import drift_kl, finite_mean, kl_source
from rlvr.core.timing import record_timing
from rlvr.data.rows import read_rows
from rlvr.grpo.callbacks import LiveCurvesCallback, loggable, validation_entry
from rlvr.grpo.checkpoints import (
    RUNNING_MEAN_FILE,
    checkpoint_problem,
    fingerprint,
    last_checkpoint,
    resumable_checkpoint,
)
from rlvr.grpo.distributed import accelerate_config_file, barrier, is_main_process
from rlvr.grpo.run import run_grpo
from rlvr.grpo.scoring import training_validation
from rlvr.params.config import Params, PathsParams
from rlvr.pipeline.gate import GateClosed
from rlvr.policy.models import policy_path, save_tokenizer
from rlvr.report.plots import plot_curves
from rlvr.report.provenance import library_versions

ROOT = Path(__file__).resolve().parents[2]  # the repository: stages/ and rlvr/
# The libraries whose versions a training run's fingerprint covers.
TRAINING_LIBRARIES = ("torch", "transformers", "trl", "accelerate")


def train_code_md5s() -> dict[str, str]:
    """The md5 of each file the train stage runs (its code deps in dvc.yaml, the same derivation),
    for the resume fingerprint: an edit to code train does not run keeps its checkpoints."""
    return {f: file_md5(ROOT / f) for f in sorted(stage_code_files(ROOT, "train"))}


def step_history(log_history: list[dict]) -> list[dict]:
    """The per-step entries of a trainer's log history, numeric and timing-free."""
    return [{"step": entry["step"], **loggable(entry)} for entry in log_history if LOSS in entry]


def completion_samples(log_history: list[dict]) -> list[dict]:
    """The groups of completions the trainer recorded (rlvr.grpo.trainer SAMPLE_EVERY), one a
    step, in step order: {"step", "prompt", "completions", "rewards", "advantages", "correct"}.

    >>> completion_samples([{"step": 1, "loss": 0.1}, {"step": 1, COMPLETIONS_SAMPLE: {"prompt": "p"}}])
    [{'step': 1, 'prompt': 'p'}]
    """
    return [
        {"step": entry["step"], **entry[COMPLETIONS_SAMPLE]}
        for entry in log_history
        if COMPLETIONS_SAMPLE in entry
    ]


# --------------------------------------------------------------------------- full run


def require_smoke(path: str | Path) -> None:
    path = Path(path)
    if not path.exists():
        raise GateClosed(f"{path} is missing: run `dvc repro smoke` first")
    report = json.loads(path.read_text())
    if not report.get("passed"):
        failed = [c["name"] for c in report.get("checks", []) if not c["passed"]]
        raise GateClosed(f"the smoke run did not pass ({path}): {', '.join(failed)}")


def sampled_completions(history: list[dict]) -> int:
    """Completions a GRPO run sampled, every rank's and every sampling round's: the running
    total its last step logged (the trainer counts them).

    >>> sampled_completions([{"sampling/completions": 128.0}, {"sampling/completions": 384.0}])
    384
    """
    return next(
        (int(e[SAMPLED_COMPLETIONS]) for e in reversed(history) if SAMPLED_COMPLETIONS in e), 0
    )


def run_metrics(history: list[dict], window: int = 10) -> dict:
    """What a run ended at (history.jsonl has every step): the final KL and beta, and first vs
    last `window` steps' means of what they logged (with num_iterations > 1 TRL logs the reward
    only on the steps that generate)."""
    last = history[-1] if history else {}
    final = {"kl": drift_kl(last), "beta": last.get(BETA)}
    guided = {  # train.guidance: the logged reward counts the guides; the sampled answers' alone
        f"{part}{window}_mean_on_policy_reward": finite_mean(e.get(ON_POLICY_REWARD) for e in steps)
        for part, steps in (("first", history[:window]), ("last", history[-window:]))
        if any(ON_POLICY_REWARD in e for e in history)
    }
    return {
        "steps": len(history),
        "final": {key: value for key, value in final.items() if value is not None},
        f"first{window}_mean_reward": finite_mean(e.get(REWARD) for e in history[:window]),
        f"last{window}_mean_reward": finite_mean(e.get(REWARD) for e in history[-window:]),
        f"last{window}_mean_correctness": finite_mean(
            e.get(CORRECTNESS) for e in history[-window:]
        ),
        # drift_kl: the KL a run without dynamic sampling would log, so settings compare
        f"last{window}_mean_kl": finite_mean(drift_kl(e) for e in history[-window:]),
        "max_kl": max((drift_kl(e) for e in history if drift_kl(e) is not None), default=None),
        "kl_over": kl_source(history),
        **guided,
    }


def validation_history(log_history: list[dict]) -> list[dict]:
    """The validation scores, one entry per scored step (step 0 first).

    >>> validation_history([{"eval_mean_reward": 0.2, "step": 0}, {"loss": 0.1, "step": 1},
    ...                     {"eval_mean_reward": 0.3, "eval_greedy_success": 0.5, "step": 2}])
    [{'step': 0, 'mean_reward': 0.2}, {'step': 2, 'greedy_success': 0.5, 'mean_reward': 0.3}]
    """
    return [
        {"step": entry["step"], **validation_entry(entry)}
        for entry in log_history
        if validation_entry(entry)
    ]


def selection_record(params: Params, state, final: str) -> dict:
    """Which step's weights became the final model (saved to `final`), and why (the train summary
    and the report)."""
    train = params.train
    scored = validation_history(state.log_history)
    record = {
        "select": train.select,
        "last_step": state.global_step,
        "max_steps": train.max_steps,
        "validation": scored,
        "stopped_early": state.global_step < train.max_steps,
    }
    best = state.best_global_step if train.select == "best_val" else None
    if best and state.best_model_checkpoint:
        record.update(
            chosen_step=best,
            best_mean_reward=state.best_metric,
            reason=f"{final} is step {best}: the best validation mean reward "
            f"({state.best_metric:.3f}) of the {len(scored) - 1} checkpoints "
            f"scored (train.select best_val; the earliest of equals)"
            + (
                f"; stopped early at step {state.global_step} after "
                f"{train.patience} validations without a new best"
                if record["stopped_early"]
                else ""
            ),
        )
    else:
        why = (
            "train.select last"
            if train.select == "last"
            else "train.select best_val, but no scored checkpoint was kept"
        )
        record.update(
            chosen_step=state.global_step,
            reason=f"{final} is the last step, {state.global_step} ({why})",
        )
    return record


def interrupted(error: Exception, checkpoint_dir: str, own_state: list[str]) -> Exception:
    """A stop signal or a full disk during training, said with what a rerun will do (the
    checkpoint it resumes from, found as the rerun will find it); any other error as it is."""
    folder = None if isinstance(error, Stopped) else full_disk_folder(error, checkpoint_dir)
    if not isinstance(error, Stopped) and folder is None:
        return error
    resume = last_checkpoint(checkpoint_dir, own_state)
    rerun = (
        f"`dvc repro` resumes from {resume}"
        if resume
        else "`dvc repro` trains from the start (no whole checkpoint was saved yet)"
    )
    if isinstance(error, Stopped):
        return Stopped(f"{error}; {rerun}")
    needed = folder_bytes(resume) if resume and folder == checkpoint_dir else None
    damaged = [
        str(p)
        for p in sorted(Path(checkpoint_dir).glob("checkpoint-*"))
        if str(p) != resume and checkpoint_problem(p, own_state)
    ]
    return DiskFull(
        disk_full_line(
            folder, rerun + (f", skipping the damaged {damaged[-1]}" if damaged else ""), needed
        )
    )


def train_run(
    params: Params,
    paths: PathsParams,
    run: SeedPaths,
    guides: Mapping[str, Sequence[str]] | None = None,
    guides_sampled: int = 0,
) -> dict | None:
    """The full run: resume from a checkpoint of this very run if there is one, train, then
    write the final model, the history, the curves; return the metrics and the lines to print
    (None on a rank other than the main one, which alone writes). guides: train.guidance's
    verified answers per row id (None: no guidance); guides_sampled: the completions sampled to
    find them (stage verified's), counted in the run's sampled completions."""
    require_smoke(paths.smoke_checks)
    rows = read_rows(params.data.train_path)
    val_path = params.data.val_path  # read whatever eval_steps says: a stage's reads never
    val_rows = read_rows(val_path) if params.train.eval_steps else None  # depend on values
    # train.start_model: the base, or (RFT then GRPO) this seed's RFT model
    start = run.rft_model if params.train.start_model == paths.rft_models else paths.base_model
    policy = policy_path(start)
    final_dir, checkpoint_dir = run.trained_model, run.checkpoints
    # What the run depends on: params, data, base model, the code train runs (the files train's
    # deps in dvc.yaml list) and the library versions, the numerics it computes with
    # (rlvr/core/numerics.py). A checkpoint of any other run is never resumed.
    model = params.model
    # (train.log_every only changes what the console shows)
    train = dataclasses.replace(params.train, log_every=1)
    run_id = fingerprint(
        {
            "seed": params.seed,
            "train": train,
            "rewards": params.rewards,
            "model": {"chat_template": model.chat_template, "lora": model.lora},
            "versions": library_versions(TRAINING_LIBRARIES),
            "numerics": numerics_in_force(),
            "code": train_code_md5s(),
            **({"guides": guides} if guides is not None else {}),  # train.guidance's answers
        },
        Path(params.data.train_path),
        *([Path(val_path)] if val_rows else []),
        Path(start),
        *filter(None, [accelerate_config_file(train.accelerate_config)]),
    )
    own_state = [RUNNING_MEAN_FILE] if params.train.advantage == "running_mean" else []
    # The main process sorts the checkpoints out (deletes another run's); the others then read.
    resume = resumable_checkpoint(checkpoint_dir, run_id, own_state) if is_main_process() else None
    barrier()
    if not is_main_process():
        resume = last_checkpoint(checkpoint_dir, own_state)
    elif resume:
        print(f"train@{params.seed}: resuming from {resume}")
    try:
        trainer = run_grpo(
            params,
            rows,
            policy,
            checkpoint_dir,
            params.train.max_steps,
            save_steps=params.train.save_steps,
            resume_from=resume,
            callbacks=[LiveCurvesCallback(run.train_live)],
            validation=training_validation(params, val_rows) if val_rows else None,
            dynamic_sampling=True,
            guides=guides,
        )
    except Exception as error:  # noqa: BLE001 - the machine's faults get what a rerun does
        raise interrupted(error, checkpoint_dir, own_state) from error
    history = step_history(trainer.state.log_history)
    selection = selection_record(params, trainer.state, final_dir)

    # One staging folder every rank agrees on: save_model must run on every rank (FSDP and
    # DeepSpeed gather the weights), and only the main process writes.
    staging = Path(final_dir).parent / f".{Path(final_dir).name}.staging"
    if is_main_process():
        shutil.rmtree(staging, ignore_errors=True)
        staging.parent.mkdir(parents=True, exist_ok=True)
    barrier()
    trainer.save_model(str(staging))
    if not is_main_process():
        return None
    try:
        save_tokenizer(trainer.processing_class, staging)
        share_with_umask(staging)
        remove_tree(final_dir)
        shutil.move(str(staging), final_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)

    write_jsonl(run.train_history, history)
    write_jsonl(run.train_completions, completion_samples(trainer.state.log_history))
    plot_curves(
        history,
        run.train_curves,
        title=f"GRPO: {len(history)} steps, beta {params.train.beta_schedule.kind}",
        validation=selection["validation"],
        chosen_step=selection["chosen_step"],
    )
    summary = {
        **run_metrics(history),
        "sampled_completions": sampled_completions(history) + guides_sampled,
        "start_model": str(start),
        "selection": selection,
        "numerics": numerics_in_force(),
    }
    final = summary["final"]
    label = f"train@{params.seed}"  # as DVC names the stage
    lines = [
        f"{label}: {summary['steps']} steps; reward {summary['first10_mean_reward']:.3f} "
        f"(first 10) -> {summary['last10_mean_reward']:.3f} (last 10); final KL "
        f"{final.get('kl', float('nan')):.4f}; model -> {final_dir}",
        f"{label}: {selection['reason']}",
    ]
    if str(start) != str(paths.base_model):
        lines.append(f"{label}: started from {start} (RFT then GRPO; step 0 is still the base)")
    if val_rows:
        runtime = next(
            (e[TRAIN_RUNTIME] for e in reversed(trainer.state.log_history) if TRAIN_RUNTIME in e),
            None,
        )
        if runtime:
            record_timing(validation_seconds=trainer.validation_seconds, train_runtime=runtime)
            lines.append(
                f"{label}: scoring the validation rows took "
                f"{trainer.validation_seconds:.1f} s of {runtime:.1f} s "
                f"({trainer.validation_seconds / runtime:.1%})"
            )
    if resume:
        lines.append(f"{label}: resumed from {resume}")
    return {"summary": summary, "lines": lines}
