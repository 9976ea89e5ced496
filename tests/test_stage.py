"""What every stage shares (rlvr/stage.py): a pipeline error is one line, a bug is its traceback and
one line saying so, and the libraries' known noise is silenced while other warnings still show."""

import warnings

import pytest

from rlvr.config import Params, ParamsError
from rlvr.stage import KNOWN_LIBRARY_WARNINGS, quiet_library_noise, run_stage


def _run(monkeypatch, main, capsys) -> tuple[int, str]:
    monkeypatch.setattr("rlvr.stage.load_params", Params)
    with pytest.raises(SystemExit) as exited:
        run_stage("smoke", main, gated=False)
    return exited.value.code, capsys.readouterr().err


def test_a_pipeline_error_is_one_line(monkeypatch, capsys):
    def main(params):
        raise ParamsError("params.yaml: smoke.max_steps = 0: must be >= 1")

    code, err = _run(monkeypatch, main, capsys)
    assert code == 1
    assert err == "smoke: params.yaml: smoke.max_steps = 0: must be >= 1\n"


def test_a_bug_prints_its_traceback_then_one_line_that_says_so(monkeypatch, capsys):
    def main(params):
        return {}["no such key"]

    code, err = _run(monkeypatch, main, capsys)
    lines = err.strip().splitlines()
    assert code == 1
    assert lines[0] == "Traceback (most recent call last):" and "KeyError: 'no such key'" in err
    assert lines[-1] == ("smoke: FAILED on an unexpected error: this is a bug in the pipeline, "
                         "please report it with the traceback above")


def test_known_library_warnings_are_silenced_and_others_still_show():
    category, pattern = KNOWN_LIBRARY_WARNINGS[0]
    known = pattern.replace("\\", "") + " and will be removed in v6."
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet_library_noise()
        warnings.warn(known, category)
        warnings.warn("`something_else` is deprecated", FutureWarning)
        warnings.warn("a warning of the user's own", UserWarning)
    assert [str(w.message) for w in shown] == ["`something_else` is deprecated",
                                               "a warning of the user's own"]


def test_what_a_stage_measured_goes_to_its_timing_file(monkeypatch, capsys, tmp_path):
    """record_timing: the parts of a stage's time that the bench reads from JSON, not console."""
    import json

    from rlvr.timing import record_timing

    params = Params()
    params.paths.timing = str(tmp_path / "timing")

    def main(params):
        record_timing(validation_seconds=1.23456, train_runtime=10.0)
        return 0

    monkeypatch.setattr("rlvr.stage.load_params", lambda: params)
    with pytest.raises(SystemExit) as exited:
        run_stage("smoke", main, gated=False)
    code, err = exited.value.code, capsys.readouterr().err
    assert code == 0 and err.startswith("smoke: done in "), err
    timing = json.loads((tmp_path / "timing" / "smoke.json").read_text())
    assert timing["validation_seconds"] == 1.235 and timing["train_runtime"] == 10.0
    assert timing["exit_code"] == 0 and timing["seconds"] >= 0
