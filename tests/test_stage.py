"""What every stage shares (rlvr/pipeline/stage.py): a pipeline error is one line, a bug is its traceback and
one line saying so, and the libraries' known noise is silenced while other warnings still show."""

import errno
import json
import os
import signal
import subprocess
import sys
import warnings

import pytest

from rlvr.params.config import Params, ParamsError
from rlvr.pipeline.stage import (
    KNOWN_LIBRARY_WARNINGS,
    failure_line,
    quiet_library_noise,
    run_stage,
)


def _run(monkeypatch, main, capsys, tmp_path) -> tuple[int, str]:
    params = Params()
    params.paths.timing = str(tmp_path / "timing")  # a failure's record, not the checkout's
    monkeypatch.setattr("rlvr.pipeline.stage.load_params", lambda: params)
    previous = signal.getsignal(signal.SIGTERM)  # run_stage sets its own
    try:
        with pytest.raises(SystemExit) as exited:
            run_stage("smoke", main, gated=False)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return exited.value.code, capsys.readouterr().err


def test_sigterm_is_one_line_and_the_exit_code_a_shell_gives_it(monkeypatch, capsys, tmp_path):
    def main(params):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10**8):  # the handler raises in here, at the next bytecode
            pass
        return 0

    code, err = _run(monkeypatch, main, capsys, tmp_path)
    assert (code, err) == (143, "smoke: stopped by SIGTERM\n")


def test_a_full_disk_is_one_line_naming_the_folder_not_a_bug(monkeypatch, capsys, tmp_path):
    from rlvr.core.files import write_json

    def main(params):
        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")  # as a write raises it

        monkeypatch.setattr("os.fdopen", full)
        write_json(tmp_path / "out" / "summary.json", {"a": 1})

    code, err = _run(monkeypatch, main, capsys, tmp_path)
    assert code == 1
    assert err.startswith(f"smoke: the disk is full: writing in {tmp_path / 'out'} failed (")
    assert err.endswith(
        " free); free some space, then rerun: `dvc repro` runs smoke again, "
        "keeping the stages before it\n"
    )
    assert not list((tmp_path / "out").iterdir())  # nothing half-written


def test_a_write_failure_that_names_no_cause_on_a_disk_with_room_is_a_bug(
    monkeypatch, capsys, tmp_path
):
    def main(params):  # torch.save's message, but this disk has room: not a full disk
        raise RuntimeError(
            "[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0: file write failed"
        )

    code, err = _run(monkeypatch, main, capsys, tmp_path)
    assert code == 1 and "Traceback (most recent call last)" in err and "this is a bug" in err


def test_a_pipeline_error_is_one_line(monkeypatch, capsys, tmp_path):
    def main(params):
        raise ParamsError("params.yaml: smoke.max_steps = 0: must be >= 1")

    code, err = _run(monkeypatch, main, capsys, tmp_path)
    assert code == 1
    assert err == "smoke: params.yaml: smoke.max_steps = 0: must be >= 1\n"
    # the line is left where the timing goes, for stage recipe to name a seed's failure
    assert failure_line(tmp_path / "timing", "smoke") == err.strip()


def test_a_bug_prints_its_traceback_then_one_line_that_says_so(monkeypatch, capsys, tmp_path):
    def main(params):
        return {}["no such key"]

    code, err = _run(monkeypatch, main, capsys, tmp_path)
    lines = err.strip().splitlines()
    assert code == 1
    assert lines[0] == "Traceback (most recent call last):" and "KeyError: 'no such key'" in err
    assert lines[-1] == (
        "smoke: FAILED on an unexpected error: this is a bug in the pipeline, "
        "please report it with the traceback above"
    )


def test_known_library_warnings_are_silenced_and_others_still_show():
    category, pattern = KNOWN_LIBRARY_WARNINGS[0]
    known = pattern.replace("\\", "") + " and will be removed in v6."
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet_library_noise()
        warnings.warn(known, category)
        warnings.warn("`something_else` is deprecated", FutureWarning)
        warnings.warn("a warning of the user's own", UserWarning)
    assert [str(w.message) for w in shown] == [
        "`something_else` is deprecated",
        "a warning of the user's own",
    ]


def test_what_a_stage_measured_goes_to_its_timing_file(monkeypatch, capsys, tmp_path):
    """record_timing: the parts of a stage's time that the bench reads from JSON, not console."""
    import json

    from rlvr.core.timing import record_timing

    params = Params()
    params.paths.timing = str(tmp_path / "timing")

    def main(params):
        record_timing(validation_seconds=1.23456, train_runtime=10.0)
        return 0

    monkeypatch.setattr("rlvr.pipeline.stage.load_params", lambda: params)
    with pytest.raises(SystemExit) as exited:
        run_stage("smoke", main, gated=False)
    code, err = exited.value.code, capsys.readouterr().err
    assert code == 0 and err.startswith("smoke: done in "), err
    timing = json.loads((tmp_path / "timing" / "smoke.json").read_text())
    assert timing["validation_seconds"] == 1.235 and timing["train_runtime"] == 10.0
    assert timing["exit_code"] == 0 and timing["seconds"] >= 0


# What each stage imports when it starts, measured on 2 cores (2026-12-06): peft ~5 s (transformers'
# Trainer imports it whenever it is installed), torch ~3 s. A stage pays for what it runs only.
START_IMPORTS = {
    "report": ("torch", "transformers", "peft", "trl"),  # reads outputs, draws, writes HTML
    "recipe": ("torch", "transformers", "peft", "trl"),
    "publish": ("torch", "transformers", "peft", "trl"),
    "reward_tests": ("torch", "transformers", "peft", "trl"),
    "evaluate": ("peft", "trl"),  # samples with the model: torch and transformers, no Trainer
    "verified": ("peft", "trl"),
    "rft": ("peft", "trl"),  # its fine-tune imports TRL when it runs, not when the stage starts
}


def test_a_stage_imports_only_the_libraries_it_runs():
    probe = (
        "import importlib, json, sys\n"
        f"for stage, absent in {START_IMPORTS!r}.items():\n"
        "    importlib.import_module('stages.' + stage)\n"
        "    print(json.dumps([stage, [m for m in absent if m in sys.modules]]))\n"
    )
    # one process, lightest stages first: a module one stage imported stays for the next
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    loaded = dict(json.loads(line) for line in out.splitlines())
    assert loaded == {stage: [] for stage in START_IMPORTS}
