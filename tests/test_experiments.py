"""Ablations and a beta sweep as queued DVC experiments, and their comparison, on a small budget."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from rlvr.orchestration.comparison import (
    Experiment,
    comparison_markdown,
    comparison_rows,
    differing_params,
    parse_exp_show,
    setting_rows,
    settings,
    tag_rows,
)
from tests.helpers import commit_all, dvc, make_project_copy, run_in_terminal, set_params


def test_parse_exp_show_and_the_comparison_table():
    def data(rev, beta, reward):
        return {
            "rev": rev,
            "params": {"params.yaml": {"data": {"seed": 0, "train": {"grpo": {"beta": beta}}}}},
            "metrics": {
                "metrics/recipe.json": {
                    "data": {  # the test rows' verdict, then the validation rows'
                        "verdict": "mixed",
                        "seeds": [0, 1],
                        "validation": {"verdict": "improved"},
                    }
                }
            },
        }

    rows = [
        {"rev": "workspace", "data": data("workspace", 0.05, 0.8)},
        {
            "rev": "abcdef123",
            "data": data("abcdef123", 0.05, 0.8),
            "experiments": [
                {
                    "name": "no-kl",
                    "revs": [
                        {"rev": "1234567", "name": "no-kl", "data": data("1234567", 0.0, 0.7)}
                    ],
                }
            ],
        },
    ]
    experiments = parse_exp_show(rows)
    assert [e.name for e in experiments] == ["baseline (abcdef1)", "no-kl"]
    assert differing_params(experiments) == ["train.grpo.beta"]
    # read from git: the published seed's summaries, projected as metrics
    experiments[1].eval_summary = {
        "validation": {"kl_final_vs_step0": 0.2},
        "heldout": {"kl_final_vs_step0": 0.9},  # the test rows: not what a comparison reads
    }
    experiments[1].train, experiments[1].evaluation = (
        {"reward": 0.7, "kl": 0.1},
        {"greedy": 0.5, "reward": 0.6},
    )
    header, table = comparison_rows(experiments)
    assert header[1] == "train.grpo.beta"
    assert table[1] == ["no-kl", 0.0, 0.7, 0.5, 0.6, 0.2, 0.1, "improved"]
    experiments[1].split = "heldout"  # --test: the test rows' figures and verdict
    assert comparison_rows(experiments)[1][1][5:] == [0.9, 0.1, "mixed"]


def test_runs_queued_on_two_commits_group_by_what_they_change_from_their_own_baseline():
    """A grid grown between two commits (orchestration.*) is not a setting; a run is labelled
    against its own commit's defaults, so a default changed between the commits shows."""

    def data(rev, grid, select, seed=0):
        return {
            "rev": rev,
            "params": {
                "params.yaml": {
                    "data": {
                        "seed": seed,
                        "train": {"select": select, "advantage": "group"},
                        "orchestration": {"grids": {"g": {"seed": grid}}},
                    }
                }
            },
            "metrics": {},
        }

    def commit(rev, grid, select, runs):
        return {
            "rev": rev,
            "data": data(rev, grid, select),
            "experiments": [
                {
                    "revs": [
                        {
                            "rev": f"{name}0000",
                            "name": name,
                            "data": data(f"{name}0000", grid, run_select, seed),
                        }
                    ]
                }
                for name, run_select, seed in runs
            ],
        }

    shown = [
        commit("aaaaaaa11", [0, 1], "last", [("a0", "last", 0), ("b1", "best_val", 1)]),
        commit("bbbbbbb22", [0, 1, 2, 3], "last", [("a3", "last", 3), ("b2", "best_val", 2)]),
        commit("ccccccc33", [0], "best_val", [("c1", "best_val", 1), ("c2", "last", 2)]),
    ]
    experiments = parse_exp_show(shown)
    assert [e.commit for e in experiments if not e.is_baseline] == [
        "aaaaaaa",
        "aaaaaaa",
        "bbbbbbb",
        "bbbbbbb",
        "ccccccc",
        "ccccccc",
    ]
    assert not any(k.startswith("orchestration.") for e in experiments for k in e.params)
    assert {label: [e.name for e in group] for label, group in settings(experiments).items()} == {
        "default": ["a0", "c1", "a3"],
        "train.select=best_val": ["b1", "b2"],
        "train.select=last": ["c2"],
    }
    assert differing_params(experiments) == ["seed", "train.select"]


def test_missing_metrics_leave_blanks_not_errors():
    header, table = comparison_rows([Experiment("x", "r", {})])
    assert table == [["x", None, None, None, None, None, None]]


def _slice(tag, rows, before, after, regressed=False):
    return {
        "tag": tag,
        "rows": rows,
        "step0": {"pass@1": before},
        "final": {"pass@1": after},
        "regressed": regressed,
    }


def _runs():
    def run(name, seed, select, delta, ci_low, seconds, sub_after, regressed):
        return Experiment(
            name,
            name,
            {"seed": seed, "train.select": select, "train.beta": 0.05},
            evaluation={
                "reward0": 0.3,
                "reward": 0.3 + delta,
                "ci_low": ci_low,
                "pass1_0": 0.2,
                "pass1": 0.2 + delta,
                "passn_0": 0.8,
                "passn": 0.7,
            },
            eval_summary={
                "validation": {
                    "slices": [
                        _slice("add", 28, 0.2, 0.4),
                        _slice("sub", 16, 0.15, sub_after, regressed),
                    ]
                }
            },
            train_summary={
                "selection": {
                    "validation": [
                        {"step": 0, "pass_at_1": 0.2, "success/add": 0.2, "success/sub": 0.15},
                        {
                            "step": 50,
                            "pass_at_1": 0.3,
                            "success/add": 0.4,
                            "success/sub": sub_after,
                        },
                    ]
                }
            },
            history=[{"step": s, "reward": 0.3 + s / 100, "kl": s / 1000} for s in (1, 2, 3)],
            stage_seconds={"train": seconds} if seconds else {"report": 1.5},
        )

    return [
        Experiment(
            "baseline (abc1234)",
            "abc",
            {"seed": 0, "train.select": "last", "train.beta": 0.05},
            evaluation={"reward0": 0.0, "reward": 9.0, "ci_low": 9.0},
        ),  # not a run
        run("a", 1, "last", 0.10, -0.01, 100.0, 0.0, True),
        run("b", 0, "last", 0.20, 0.05, 110.0, 0.01, True),
        run("c", 0, "best_val", 0.30, 0.10, 120.0, 0.2, False),
        run("d", 1, "best_val", 0.20, 0.02, None, 0.1, True),  # train restored from cache
        run("e", 2, "alone", 0.9, 0.5, 1.0, 0.3, False),
    ]  # one run: not a comparison


def test_runs_that_differ_by_seed_are_one_row_per_setting_named_by_what_it_changes():
    experiments = _runs()
    groups = settings(experiments)
    assert {label: [e.name for e in group] for label, group in groups.items()} == {
        "default": ["b", "a"],
        "train.select=best_val": ["c", "d"],
        "train.select=alone": ["e"],
    }
    header, rows = setting_rows(experiments)
    assert header[:2] == ["setting", "runs (seed)"]
    assert rows[0][:6] == [
        "default",
        "0, 1",
        pytest.approx(0.15),
        "+0.050, -0.010",
        "1/2",
        "sub 2/2",
    ]
    assert rows[0][6:] == ["0.200 → 0.350", "0.800 → 0.700", pytest.approx(105.0)]
    assert rows[1][:6] == [
        "train.select=best_val",
        "0, 1",
        pytest.approx(0.25),
        "+0.100, +0.020",
        "2/2",
        "sub 1/2",
    ]
    assert rows[1][8] == pytest.approx(120.0)  # d's training was restored: not in the mean
    assert len(rows) == 2
    header, rows = tag_rows(experiments)
    assert header == ["setting", "add (28 rows)", "sub (16 rows)"]
    assert rows == [
        ["default", "0.200 → 0.400", "0.150 → 0.005"],
        ["train.select=best_val", "0.200 → 0.400", "0.150 → 0.150"],
    ]
    markdown = comparison_markdown(experiments, "figures/experiments.png")
    assert (
        "## Settings over seeds" in markdown
        and "| train.select=best\\_val | 0, 1 | 0.250 |" in markdown
    )
    # nothing repeated: no section
    assert "## Settings over seeds" not in comparison_markdown(experiments[:2], "x.png")


def test_each_setting_meets_the_default_as_recipe_against_recipe_over_every_seed():
    """A setting's runs each hold several RL seeds (audit.seeds): their records are pooled per
    setting and compared with the default's, over seeds and prompts (rlvr.audit.recipe)."""
    import random

    from rlvr.orchestration.comparison import recipe_rows

    rng = random.Random(3)
    prompts = [rng.random() * 0.3 for _ in range(40)]

    def run(name, params, gain, spread, seeds=(0, 1)):
        records = {
            f"{name} seed {s}": [
                {
                    "id": f"v{i}",
                    "split": "validation",
                    "step0_reward": 0.2,
                    "final_reward": 0.2 + p + gain + offset,
                }
                for i, p in enumerate(prompts)
            ]
            for s, offset in zip(seeds, (rng.gauss(0, spread) for _ in seeds))
        }
        return Experiment(name, name, {"seed": 0, **params}, records=records)

    base = {"train.beta": 0.05, "train.resample_unsolved": True}
    experiments = [
        Experiment("baseline (abc1234)", "abc", {"seed": 0, **base}),
        run("default", base, 0.0, 0.01, seeds=(0, 1, 2)),
        run("better", {**base, "train.beta": 0.01}, 0.2, 0.01),
        run("noisy", {**base, "train.beta": 0.1}, 0.2, 0.5),
        run("worse", {**base, "train.resample_unsolved": False}, -0.2, 0.01),
    ]
    header, rows = recipe_rows(experiments)
    assert header[:3] == ["setting", "seeds", "seeds of the default"]
    calls = {row[0]: (row[1], row[2], row[-1]) for row in rows}
    assert calls == {
        "train.beta=0.01": (2, 3, "better"),
        "train.beta=0.1": (2, 3, "tie"),
        "train.resample_unsolved=false": (2, 3, "worse"),
    }
    better = next(row for row in rows if row[0] == "train.beta=0.01")
    value, low, high = map(float, re.findall(r"[+-][0-9.]+", better[3]))
    assert 0.15 < low < value < high < 0.25 and better[4] == 1.0
    markdown = comparison_markdown(experiments, "x.png")
    assert "## Recipe against recipe" in markdown and "| train.beta=0.1 | 2 | 3 |" in markdown
    # another validation file: said, not compared
    experiments[2].records = {k: v[:-1] for k, v in experiments[2].records.items()}
    assert [row for row in recipe_rows(experiments)[1] if row[0] == "train.beta=0.01"] == [
        ["train.beta=0.01", 2, 3, "scored on other rows", None, "not compared"]
    ]


def test_experiments_md_ranks_on_validation_rows_and_shows_test_rows_only_when_asked():
    experiments = _runs()
    top = comparison_markdown(experiments, "x.png").splitlines()[2]
    assert top.startswith("Every figure below is on the **validation rows** (`data.val_path`)")
    assert "validation delta mean reward (mean)" in comparison_markdown(experiments, "x.png")
    for e in experiments:
        e.split = "heldout"
    shown = comparison_markdown(experiments, "x.png", split="heldout")
    assert "choosing a recipe on them biases them" in shown.splitlines()[2]
    assert "test delta mean reward (mean)" in shown


def test_the_experiments_figure_draws_one_line_per_setting_with_the_legend_off_the_curves():
    from rlvr.orchestration.comparison import setting_curves
    from rlvr.report.plots import pyplot, settings_figure

    curves = setting_curves(_runs())
    assert list(curves) == ["default", "train.select=best_val", "train.select=alone"]
    figure = settings_figure(curves)
    axes = figure.axes
    assert [ax.get_title() for ax in axes] == [
        "Training reward (moving average)",
        "KL to reference (moving average)",
        "Validation pass@1",
        "Validation success, tag sub (fell most)",
    ]
    for ax in axes:
        assert [line.get_label() for line in ax.get_lines()] == [
            "default (2 runs)",
            "train.select=best_val (2 runs)",
            "train.select=alone (1 run)",
        ]
        assert len(ax.collections) == 2  # a band for each setting of several runs
    sub = axes[3].get_lines()[0].get_ydata().tolist()
    assert sub == pytest.approx([0.15, 0.005])  # the mean of the default's two seeds
    figure.canvas.draw()
    legend = figure.legends[0].get_window_extent()
    assert all(legend.y1 <= ax.get_tightbbox().y0 for ax in axes)  # below every panel
    pyplot().close(figure)


@pytest.mark.slow
@pytest.mark.long
def test_experiments_flow_runs_ablations_and_sweep_and_publishes_the_comparison(
    copy_run, dvc_env, prefect_harness, artifact_versions
):
    from flows.experiments import experiments

    # the shared cold run; two experiments at a time: the flow's parallel path (orchestration.jobs)
    project = copy_run("exps")
    set_params(project, {"orchestration": {"jobs": 2}})
    # three runs: one ablation (no-group-norm: the one that changes more than a value) and the
    # sweep's two betas; a second ablation would be the same path again
    yaml = YAML()
    params = yaml.load(project / "params.yaml")
    del params["orchestration"]["ablations"]["no-kl"]
    yaml.dump(params, project / "params.yaml")
    env = dvc_env(project)

    def run(*command):
        done = subprocess.run(list(command), cwd=project, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    run("dvc", "repro")  # the baseline run, committed: experiments are compared against it
    run("git", "add", "-A")
    run("git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "baseline run")

    rows = experiments(root=str(project))  # orchestration.ablations + orchestration.sweep

    assert len(rows) == 4  # baseline, no-group-norm, beta 0.01 and 0.1
    table = (project / "reports" / "experiments.md").read_text()
    assert "| no-group-norm |" in table and "| no-kl |" not in table
    assert table.count("| baseline (") == 1
    assert "train.advantage" in table and "train.grpo.beta" in table
    # each setting's seeds against the default's, with the call the interval allows
    recipe = table[table.index("## Recipe against recipe") :]
    assert "| no-group-norm |" not in recipe and re.search(
        r"\| train\.grpo\.beta=0\.01 \| 2 \| 2 \| [+-]\d\.\d{3} \\\[[+-]\d\.\d{3}, "
        r"[+-]\d\.\d{3}\\\] \| [01]\.\d+ \| (better|worse|tie) \|",
        recipe,
    ), recipe
    assert all(
        row[-1] in ("improved", "no significant change", "regressed", "mixed") for row in rows
    )
    assert (project / "reports" / "figures" / "experiments.png").stat().st_size > 10_000
    assert "data:image/png;base64," in (project / "reports" / "experiments.html").read_text()
    from rlvr.orchestration.comparison import compare

    timed = {e.name: e.stage_seconds for e in compare(project)}  # from each run's queue log
    assert len(timed) == 4 and all(
        seconds.get("train", 0) > 1
        for name, seconds in timed.items()
        if not name.startswith("baseline (")
    ), timed
    (artifact,) = artifact_versions("experiments-comparison")
    assert "no-group-norm" in str(artifact.data) and "git " in artifact.description

    # The sweep's rows in `dvc exp show` (its width, whatever the values: the test below)
    run("dvc", "exp", "remove", "no-group-norm")
    shown = json.loads(
        subprocess.run(
            ["dvc", "exp", "show", "--json"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    betas = [
        exp["data"]["params"]["params.yaml"]["data"]["train"]["grpo"]["beta"]
        for commit in shown
        for exp in [
            commit,
            *[run for group in commit.get("experiments") or [] for run in group["revs"]],
        ]
    ]
    assert sorted(betas) == [0.01, 0.05, 0.05, 0.1], shown  # workspace, baseline, sweep
    sweep = [
        (run["rev"][:7], run["name"])
        for commit in shown
        for group in commit.get("experiments") or []
        for run in group["revs"]
    ]
    assert len(sweep) == 2, shown  # the two sweep experiments, by rev and name
    # dvc metrics diff between the baseline and a sweep experiment: one line per headline figure
    # (--all: a small-budget sweep may change only the KL, and DVC hides unchanged figures)
    diff = subprocess.run(
        ["dvc", "metrics", "diff", "--all", "HEAD", sweep[0][0]],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = diff.strip().splitlines()
    # about 50 lines for the test rows' headline and as many for the validation block's
    assert 10 <= len(lines) <= 100, diff
    assert any(line.split()[1].startswith("validation.delta_mean_reward") for line in lines[1:])
    assert {line.split()[0] for line in lines[1:]} == {
        f"metrics/{name}.json" for name in ("data", "gate", "smoke", "recipe")
    }, diff


def test_the_queue_commands_queue_exactly_the_runs_the_flow_checks():
    """flows.experiments queues with queue_commands / grid_commands (DVC's `-S` lists, one call
    for several runs) and checks experiment_runs first (one entry per run): DVC's own sweep
    expansion of the commands gives those runs, no more, no fewer."""
    from dvc.utils.hydra import get_hydra_sweeps, to_hydra_overrides

    from rlvr.orchestration.experiments import grid_commands, queue_commands
    from rlvr.params.config import OrchestrationParams, load_params
    from rlvr.params.experiments import experiment_runs

    def meaning(overrides):  # (key, parsed value): 'x=false' and DVC's 'x=False' are one run
        return sorted((o.key_or_group, repr(o.value())) for o in to_hydra_overrides(overrides))

    def queued(commands):
        runs = []
        for args in commands:
            overrides = [args[i + 1] for i, a in enumerate(args) if a == "-S"]
            runs += [
                meaning(sweep["params.yaml"])
                for sweep in get_hydra_sweeps({"params.yaml": overrides})
            ]
        return sorted(runs)

    def checked(runs):
        return sorted(meaning(overrides) for _, overrides in runs)

    committed = load_params(Path(__file__).resolve().parents[1] / "params.yaml").orchestration
    made_up = OrchestrationParams(
        ablations={"a": ["train.grpo.beta=0", "seed=3"]},
        sweep={"train.dynamic_sampling": [False, True], "train.grpo.beta": [0.01, 0.1, 0.2]},
        grids={
            "g": {"seed": [0, 1], "train.select": ["last", "best_val"], "train.eval_steps": [50]},
            "s": {
                "seed": [0, 1],
                "settings": {"default": [], "two": ["train.grpo.beta=0", "train.select=best_val"]},
            },
        },
    )
    for orchestration in (committed, made_up):
        assert queued(queue_commands(orchestration)) == checked(experiment_runs(orchestration))
        for name, grid in orchestration.grids.items():
            assert queued(grid_commands(grid)) == checked(experiment_runs(orchestration, name))
    assert (
        len(checked(experiment_runs(made_up))) == 6
        and len(queued(grid_commands(made_up.grids["g"]))) == 4
    )
    assert len(queued(grid_commands(made_up.grids["s"]))) == 4  # 2 settings x 2 seeds


FAKE_DVC = """import os, sys, time
state = os.environ["FAKE_DVC_STATE"]
args = sys.argv[1:]
with open(state + ".calls", "a") as calls:
    calls.write(" ".join(args) + "\\n")
if args[:2] == ["exp", "run"]:  # every task done at once, then a worker that never stops
    print("following logs"); sys.stdout.flush()
    while not os.path.exists(state + ".stopped"):
        time.sleep(0.05)
    if os.environ.get("FAKE_DVC_DEAF"):  # the stop message lost too: only a signal ends it
        time.sleep(3600)
elif args[:2] == ["queue", "status"]:
    print("Task     Name   Created    Status")
    print("2b2e2d7  a      04:41 PM   " + os.environ.get("FAKE_DVC_TASK", "Success"))
    print("Worker status: 1 active, 0 idle")
elif args[:2] == ["queue", "stop"]:
    open(state + ".stopped", "w").close()
"""


@pytest.mark.parametrize(
    "deaf,task,code", [(False, "Success", 0), (True, "Success", 0), (False, "Failed", 1)]
)
def test_a_queue_whose_worker_never_stops_is_stopped_once_it_is_done(
    tmp_path, deaf, task, code, monkeypatch
):
    from rlvr.orchestration.experiments import run_queue_to_end

    script = tmp_path / "fake_dvc.py"
    script.write_text(FAKE_DVC)
    state = tmp_path / "state"
    monkeypatch.setenv("FAKE_DVC_STATE", str(state))
    monkeypatch.setenv("FAKE_DVC_TASK", task)
    if deaf:
        monkeypatch.setenv("FAKE_DVC_DEAF", "1")
    run = run_queue_to_end(tmp_path, 2, poll=0.2, grace=0.5, dvc=(sys.executable, str(script)))
    calls = (tmp_path / "state.calls").read_text().splitlines()
    assert calls[0] == "exp run --run-all --jobs 2" and "queue stop" in calls
    assert run.returncode == code and run.stdout.startswith("following logs")
    assert ("terminated" if deaf else "idle workers were stopped") in run.stdout


def test_a_queue_that_ends_by_itself_is_left_alone(tmp_path, monkeypatch):
    from rlvr.orchestration.experiments import run_queue_to_end

    script = tmp_path / "fake_dvc.py"
    script.write_text("import sys; print('done'); sys.exit(3)")
    run = run_queue_to_end(tmp_path, 1, poll=0.1, grace=0.5, dvc=(sys.executable, str(script)))
    assert (run.returncode, run.stdout) == (3, "done\n")


def test_a_failed_experiment_is_named_and_left_out_not_shown_with_its_baselines_figures():
    """DVC lists a failed experiment with its baseline's files: it must not read as a run."""
    from rlvr.orchestration.comparison import failed_experiments

    shown = [
        {
            "rev": "abc1234",
            "data": {"rev": "abc1234", "params": {}, "metrics": {}},
            "experiments": [
                {"revs": [{"name": "ok-run", "rev": "1" * 40, "data": {"rev": "1" * 40}}]},
                {
                    "revs": [
                        {
                            "name": "broke_1",
                            "rev": "2" * 40,
                            "data": {"rev": "2" * 40},
                            "error": {"msg": "Experiment run failed", "type": ""},
                        }
                    ]
                },
            ],
        }
    ]
    assert [e.name for e in parse_exp_show(shown)] == ["baseline (abc1234)", "ok-run"]
    assert failed_experiments(shown) == ["broke_1"]
    markdown = comparison_markdown(parse_exp_show(shown), "x.png", failed_experiments(shown))
    assert "Failed, so left out (`dvc queue logs NAME` says why): broke\\_1." in markdown


def widest_metrics(paths, wide: float, verdict: str) -> dict:
    """Every headline metric (rlvr.report.metrics, rlvr.audit.recipe) at its widest: what a sweep of a
    training knob changes (the recipe's verdict, its pooled figures and intervals, per tag) at
    `wide` and `verdict`; what it shares (the gate, the data, the smoke run, the seeds, step 0)
    at the widest fixed values."""
    from rlvr.audit.recipe import recipe_metrics
    from rlvr.report.metrics import gate_metrics, smoke_metrics, validation_metrics

    shared = -0.111111111111111
    ci = {"value": wide, "ci_low": wide, "ci_high": wide}
    tags = [
        {
            "tag": tag,
            "delta_mean_reward": ci,
            "delta_pass@32": ci,
            "regressed_seeds": 16,
            "regressed": verdict == "regressed",
        }
        for tag in ("add", "mul", "sub")
    ]
    pooled = {
        "delta_mean_reward": ci,
        "samples_per_prompt": 32,
        "slices": tags,
        "step0": {"pass@1": shared, "pass@32": shared},
        "final": {"pass@1": wide, "pass@32": wide},
    }
    recipe = {
        "seeds": list(range(16)),
        "verdict": verdict,
        "pooled": pooled,
        "validation": {"verdict": verdict, "pooled": pooled},  # the rows that choose
    }
    return {
        paths.gate_metrics: gate_metrics(
            {"passed": False, "counts": {"tests": 10000, "failed": 1000}}
        ),
        paths.validation_metrics: validation_metrics({"passed": False, "problems": 1000}),
        paths.smoke_metrics: smoke_metrics(
            {"passed": False, "step0_mean_reward": shared, "checks": [{"passed": False}] * 10}
        ),
        paths.recipe_metrics: recipe_metrics(recipe),
    }


def test_a_beta_sweep_fits_a_200_column_exp_show_whatever_the_values(tmp_path):
    """The table DVC users compare runs in, as a person sees it after a beta sweep, in a
    200-column terminal, the per-tag figures and the validation block dropped (`--drop
    'tags|validation'`, as docs/pipeline.md says: prefixed names that long do not fit beside them):
    DVC folds the columns that do not fit, last first, into "…". Its order is names, metrics,
    params, then a hash per changed dependency file: the experiment names, every headline metric
    and the changed param must be whole; only dependency hashes may fold. The values are the
    widest each metric can take (negative, the longest verdict), not what this machine's floats
    give."""
    from ruamel.yaml import YAML

    from rlvr.params.config import load_params

    project = make_project_copy(tmp_path / "p")
    paths = load_params(project / "params.yaml").paths
    # The pipeline's metrics in dvc.yaml's order, as top-level entries: `dvc exp save` then
    # records these values without running a stage (it needs every stage's outs otherwise).
    stages = YAML(typ="safe").load((project / "dvc.yaml").read_text())["stages"]
    metrics = [
        getattr(paths, re.fullmatch(r"\$\{paths\.(\w+)\}", path)[1])
        for stage in stages.values()
        for entry in stage.get("metrics", [])
        for path in entry
    ]
    assert len(metrics) == 4, metrics
    (project / "dvc.lock").unlink()
    (project / "dvc.yaml").write_text(json.dumps({"metrics": metrics, "params": ["params.yaml"]}))

    def write(wide, verdict):
        for path, metrics in widest_metrics(paths, wide, verdict).items():
            (project / path).parent.mkdir(parents=True, exist_ok=True)
            (project / path).write_text(json.dumps(metrics))

    write(-0.123456789012345, "no significant change")
    commit_all(project, "baseline with the widest metrics")
    for beta, wide, verdict in (
        (0.01, -0.987654321098765, "no significant change"),
        (0.1, -0.555555555555555, "regressed"),
    ):
        set_params(project, {"train": {"grpo": {"beta": beta}}})
        write(wide, verdict)
        dvc(project, "exp", "save", "-n", f"beta-{beta}")
    subprocess.run(["git", "checkout", "--", "."], cwd=project, check=True)  # back to baseline
    table = run_in_terminal(
        project, "dvc", "exp", "show", "--only-changed", "--drop", "tags|validation", "--no-pager"
    )
    lines = [line.rstrip() for line in table.splitlines() if line.strip()]
    assert max(map(len, lines)) <= 200, table
    header = lines[1]
    columns = [
        "Experiment",
        "verdict",
        "delta_mean_reward.value",
        "ci_low",
        "ci_high",
        "pass1_final",
        "passn_final",
        "train.grpo.beta",
    ]
    found = [header.find(column) for column in columns]
    assert -1 not in found and found == sorted(found), (columns, table)
    assert "…" not in header[: found[-1] + len(columns[-1])], table
    betas = [line[found[-1] : found[-1] + len(columns[-1])].strip() for line in lines[3:-1]]
    assert sorted(betas) == ["0.01", "0.05", "0.05", "0.1"], table  # workspace, baseline, sweep
    assert "no significant change" in table and "-0.988" in table, table
