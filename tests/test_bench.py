"""scripts/bench.py: the pure parts (figures, medians, targets, the table, the JSON, the clock and
flow arithmetic) and the run's plumbing with a stand-in measurement; a slow test runs one cheap
measurement for real. The benchmark prints figures; no test here times anything."""

import ast
import doctest
import importlib.util
import json
import math
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT


@pytest.fixture(scope="module")
def bench_modules():
    """scripts/bench.py (loaded as the script runs it) and the modules it is made of."""
    spec = importlib.util.spec_from_file_location("bench_script", ROOT / "scripts/bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    import scripts.bench_figures
    import scripts.bench_measure
    import scripts.bench_run

    yield [module, scripts.bench_figures, scripts.bench_run, scripts.bench_measure]
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def bench(bench_modules):
    """Every name of the bench's modules, as one namespace (MEASUREMENTS is the dict main runs)."""
    from types import SimpleNamespace

    names = {}
    for module in reversed(bench_modules):
        names.update(vars(module))
    return SimpleNamespace(**names)


def test_its_doctests_pass(bench_modules):
    results = [doctest.testmod(module) for module in bench_modules]
    assert sum(r.attempted for r in results) >= 12 and sum(r.failed for r in results) == 0


def test_median_and_min_ignore_missing_samples(bench):
    assert bench.median_min([0.97, 1.01, 0.99]) == (0.99, 0.97)
    assert bench.median_min([2.0, math.nan, None, 1.0]) == (1.5, 1.0)
    assert all(math.isnan(x) for x in bench.median_min([math.nan]))


def test_the_median_is_held_against_the_target(bench):
    ratio = bench.Figure("r", "ratio", "x", [0.90, 0.99, 0.985], bench.Target(">=", 0.98))
    share = bench.Figure("s", "share", "share", [0.05, 0.01, 0.015], bench.Target("<=", 0.02))
    plain = bench.Figure("t", "time", "s", [1.0])
    missing = bench.Figure("m", "missing", "s", [], bench.Target("<=", 1.0))
    assert (ratio.median, ratio.min, ratio.met) == (0.985, 0.90, True)
    assert share.met is True and plain.met is None and missing.met is None
    assert bench.Target(">=", 0.98).met(0.979) is False
    assert bench.Target("<=", 5.0).met(5.0) is True


def test_the_table_has_one_aligned_row_per_figure(bench):
    figures = [
        bench.Figure(
            "a",
            "train stage / bare GRPOTrainer steps/s",
            "x",
            [0.96, 0.97],
            bench.Target(">=", 0.98),
        ),
        bench.Figure("b", "reward share", "share", [0.004], bench.Target("<=", 0.02)),
        bench.Figure("c", "no-op dvc repro", "s", [0.8, 0.9, 0.7]),
        bench.Figure("d", "not measured", "s/step", []),
    ]
    lines = bench.format_table(figures).splitlines()
    assert [c.strip() for c in lines[0].split(" | ")] == [
        "figure",
        "median [95% interval]",
        "min",
        "n",
        "target",
        "met?",
    ]
    assert len(lines) == 2 + len(figures)
    bars = {tuple(m.start() for m in re.finditer(r"\|", line)) for line in lines if "|" in line}
    assert len(bars) == 1  # every column lines up
    rows = {
        line.split(" | ")[0].strip(): [c.strip() for c in line.split(" | ")] for line in lines[2:]
    }
    assert rows["train stage / bare GRPOTrainer steps/s"][1:] == [
        "0.965",
        "0.960",
        "2",
        ">= 0.980",
        "NO",
    ]
    assert rows["reward share"][1:] == ["0.40%", "0.40%", "1", "<= 2.00%", "yes"]
    assert rows["no-op dvc repro"][1:3] == ["0.80 s", "0.70 s"]
    assert rows["not measured"][1:4] == ["-", "-", "0"]


def test_the_median_s_interval_narrows_with_more_pairs_and_is_shown(bench):
    import random

    rng = random.Random(0)
    pairs = [1.0 + rng.gauss(0, 0.02) for _ in range(40)]
    few, many = bench.median_interval(pairs[:6]), bench.median_interval(pairs)
    assert few[0] <= bench.median_min(pairs[:6])[0] <= few[1]
    assert many[1] - many[0] < few[1] - few[0]
    assert bench.median_interval([1.0, math.nan, 2.0]) is None  # too few to bound a median
    figure = bench.Figure("r", "ratio", "x", pairs, bench.Target(">=", 0.99), interval=many)
    row = bench.format_table([figure]).splitlines()[2]
    assert f"[{many[0]:.3f}, {many[1]:.3f}]" in row
    assert figure.to_json()["median_interval_95"] == list(many)


def test_the_json_holds_every_figure_with_its_samples_and_no_nan(bench):
    figures = [
        bench.Figure(
            "overhead.ratio",
            "ratio",
            "x",
            [0.97, 0.99],
            bench.Target(">=", 0.98),
            note="steps 20..120",
        ),
        bench.Figure("noop.flow", "flow", "s", [math.nan]),
    ]
    out = bench.bench_json(
        figures,
        mode="full",
        measurements=["overhead", "noop"],
        seconds=12.34,
        machine={"cpus": 2},
        details={"noop": {}},
        errors={},
    )
    text = json.dumps(out, allow_nan=False)  # strict JSON: a missing value is null
    assert json.loads(text) == out
    assert set(out) == {
        "schema",
        "command",
        "mode",
        "measurements",
        "complete",
        "seconds",
        "machine",
        "figures",
        "targets_missed",
        "details",
        "errors",
    }
    assert out["complete"] is True
    assert out["command"] == "./dev bench" and out["seconds"] == 12.3
    ratio, flow = out["figures"]
    assert ratio == {
        "key": "overhead.ratio",
        "label": "ratio",
        "unit": "x",
        "median": 0.98,
        "min": 0.97,
        "n": 2,
        "samples": [0.97, 0.99],
        "target": {"op": ">=", "value": 0.98},
        "met": True,
        "note": "steps 20..120",
        "median_interval_95": None,
    }
    assert flow["median"] is None and flow["samples"] == [None] and flow["met"] is None
    assert out["targets_missed"] == []


def test_steady_rate_times_whole_steps_between_two_step_ends(bench):
    # step 3 ends at 1.0 s, step 7 at 3.0 s: 4 steps in 2 s; rewards took 0.04 s of it
    clock = [(step, 0.5 * step - 0.5, 0.01 * step) for step in range(1, 9)]
    rate, share = bench.steady_rate(clock, 3, 7)
    assert rate == pytest.approx(2.0) and share == pytest.approx(0.02)
    assert all(math.isnan(x) for x in bench.steady_rate(clock, 3, 9))  # never reached


def test_the_flow_breakdown_adds_up_to_the_wall_time(bench):
    spans = [
        {"kind": "dvc status", "stage": None, "start": 4.5, "end": 5.0},
        {"kind": "dvc", "stage": "a", "start": 5.0, "end": 5.7},
        {"kind": "provenance", "stage": None, "start": 5.8, "end": 6.0},
        {"kind": "git", "stage": None, "start": 6.0, "end": 6.1},
        {"kind": "artifacts", "stage": "a", "start": 5.75, "end": 6.2},
        {"kind": "dvc", "stage": "b", "start": 6.3, "end": 7.0},
        {"kind": "artifacts", "stage": "b", "start": 7.05, "end": 7.1},
    ]
    marks = {"started": 0.3, "imported": 1.0, "flow_called": 1.0, "flow_returned": 8.0}
    breakdown = bench.flow_breakdown({"marks": marks, "spans": spans}, spawned=0.0, ended=9.5)
    parts = breakdown["parts"]
    assert sum(parts.values()) == pytest.approx(breakdown["total"]) and breakdown["total"] == 9.5
    assert parts["server start and flow set-up (to the first DVC call)"] == pytest.approx(3.5)
    assert parts["dvc status (1 call)"] == pytest.approx(0.5)
    assert parts["dvc repro <stage> (2 calls)"] == pytest.approx(1.4)
    assert parts["exit (server shutdown)"] == pytest.approx(1.5)
    assert breakdown["per_stage"]["a"] == {"dvc": 0.7, "artifacts": 0.45}
    assert breakdown["inside artifacts"]["git_state calls"] == 1


def test_only_takes_known_names_in_the_runs_order(bench):
    assert bench.parse_only("scaling, cold") == ["cold", "scaling"]
    with pytest.raises(Exception, match="unknown measurement"):
        bench.parse_only("cold,everything")
    assert bench.interleaved(["a", "b"], 1) == ["b", "a"]


def test_the_cold_table_names_each_seeded_run_as_its_timing_file_is_named():
    from scripts.bench_run import stage_runs

    runs = stage_runs(ROOT / "dvc.yaml", [0, 7])
    assert runs.index("train@0") < runs.index("train@7") < runs.index("evaluate@0")
    assert "train" not in runs and "evaluate" not in runs and runs.count("validate") == 1


def test_a_run_prints_the_table_writes_the_json_and_reports_a_failed_measurement(
    bench, monkeypatch, tmp_path, capsys
):
    def fine(run):
        run.add(bench.Figure("fake.ratio", "a ratio", "x", [0.9, 1.0], bench.Target(">=", 0.98)))
        run.details["fake"] = {"what": "a stand-in"}

    partial = {}

    def broken(run):
        partial.update(json.loads(out.read_text()))  # written after the first measurement
        raise bench.BenchError("`dvc repro` exited 1")

    out = tmp_path / "bench.json"
    monkeypatch.setitem(bench.MEASUREMENTS, "cold", fine)
    monkeypatch.setitem(bench.MEASUREMENTS, "noop", broken)
    assert bench.main(["--quick", "--only", "cold,noop", "--out", str(out)]) == 1
    assert (partial["complete"], partial["measurements"]) == (False, ["cold"])
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("a ratio"))
    assert [c.strip() for c in row.split(" | ")] == [
        "a ratio",
        "0.950",
        "0.900",
        "2",
        ">= 0.980",
        "NO",
    ]
    assert "noop: FAILED: BenchError: `dvc repro` exited 1" in printed
    saved = json.loads(out.read_text())
    assert saved["mode"] == "quick" and saved["measurements"] == ["cold", "noop"]
    assert saved["complete"] is True
    assert saved["targets_missed"] == ["fake.ratio"] and saved["details"]["fake"]
    assert saved["errors"] == {"noop": "BenchError: `dvc repro` exited 1"}
    assert saved["machine"]["cpus"] >= 1


def test_dev_bench_runs_the_script_and_its_usage_says_so():
    dev = (ROOT / "dev").read_text().splitlines()
    assert '  bench) exec python scripts/bench.py "$@" ;;' in dev
    first, last = map(int, re.search(r"sed -n '(\d+),(\d+)p'", "\n".join(dev)).groups())
    usage = dev[first - 1 : last]
    assert all(line.startswith("#") for line in usage)  # the usage is the header comment, whole
    assert dev[last].startswith("set ") and any("./dev bench" in line for line in usage)


@pytest.mark.slow
def test_a_quick_validation_run_writes_its_figures(tmp_path):
    out = tmp_path / "bench.json"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/bench.py"),
            "--quick",
            "--only",
            "validation",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "validate 6,400 training rows" in run.stdout
    saved = json.loads(out.read_text())
    keys = {f["key"]: f for f in saved["figures"]}
    assert {"validation.rows_64", "validation.rows_6400", "validation.ratio"} <= set(keys)
    assert keys["validation.rows_6400"]["median"] > 0
    assert saved["details"]["validation"]["problems_found"] == {"64": 0, "6400": 0}


def test_every_figure_the_script_makes_has_a_unit_the_table_can_show(bench):
    # a unit the table does not know crashed a full run at its very end, after 13 minutes
    units = [
        call.args[2].value
        for path in bench.MODULES
        for call in ast.walk(ast.parse((ROOT / path).read_text()))
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Figure"
    ]
    assert sorted(bench.MODULES) == sorted(
        f"scripts/{p.name}" for p in (ROOT / "scripts").glob("bench*.py")
    )
    assert len(units) >= 15 and set(units) <= set(bench.UNITS), set(units) - set(bench.UNITS)
    with pytest.raises(ValueError, match=r"figure k: unit '%' is not one of"):
        bench.Figure("k", "label", "%", [1.0])
