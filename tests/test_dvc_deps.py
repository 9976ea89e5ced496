"""dvc.yaml never lets the cache lie: every stage depends on all the code it runs and may read only
the params it declares; every output path has one home (params.yaml `paths`)."""

import ast
import re
from pathlib import Path

import pytest

from rlvr.core.code_closure import code_closure, stage_code_files
from rlvr.params.config import STAGES, Params, PathsParams, load_params
from rlvr.pipeline.codedeps import (
    covered,
    dvc_stage_deps,
    uncovered,
    unneeded,
    written_dvc_yaml,
)
from rlvr.pipeline.stage import ParamsView, UndeclaredParam, declared_params, stage_view

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def deps():
    return dvc_stage_deps(ROOT)


def test_every_stage_in_dvc_yaml_has_a_stage_module(deps):
    assert list(deps) == list(STAGES)
    assert all((ROOT / "stages" / f"{stage}.py").is_file() for stage in deps)


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_depends_on_every_file_it_runs(stage, deps):
    missing = uncovered(ROOT, deps, load_params(ROOT / "params.yaml").gate.tests)[stage]
    assert not missing, (
        f"dvc.yaml stage {stage} runs {missing} but does not list them in its "
        f"deps (./dev run python -m rlvr.pipeline.codedeps)"
    )


@pytest.mark.parametrize("stage", STAGES)
def test_no_stage_lists_code_it_does_not_run(stage, deps):
    """A code file a stage does not run (listed, or inside a listed folder) would rerun it for
    nothing."""
    extra = unneeded(ROOT, deps, load_params(ROOT / "params.yaml").gate.tests)[stage]
    assert not extra, f"dvc.yaml stage {stage} lists {extra} but does not run them"


def test_the_code_deps_in_dvc_yaml_are_the_writers():
    """dvc.yaml's code deps are written from the imports, never by hand: an import added, moved
    or removed anywhere must be followed by the writer, or this fails."""
    assert written_dvc_yaml(ROOT) == (ROOT / "dvc.yaml").read_text(), (
        "dvc.yaml's code deps differ from the code: ./dev run python -m rlvr.pipeline.codedeps --write"
    )


def test_the_writer_lists_files_and_keeps_data_deps_and_comments(deps):
    text = written_dvc_yaml(ROOT)
    assert "# the seeds' audit, and which seed the rest of the page shows" in text
    for stage, listed in deps.items():
        code = [d for d in listed if d.split("/")[0] in ("rlvr", "stages", "tests")]
        assert code and all(d.endswith(".py") for d in code), (stage, code)
    assert "data/grpo_train.jsonl" in deps["train"] and "configs/accelerate" in deps["train"]


def test_a_folder_a_stage_does_not_run_is_named_file_by_file(deps):
    gate_tests = load_params(ROOT / "params.yaml").gate.tests
    runs = stage_code_files(ROOT, "validate", gate_tests)
    audit = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "rlvr/audit").glob("*.py")
        if str(p.relative_to(ROOT)) not in runs
    )
    assert audit and unneeded(
        ROOT, {"validate": [*deps["validate"], "rlvr/audit"]}, gate_tests
    ) == {"validate": audit}


def test_the_report_follows_all_the_code_and_the_comments_in_params_yaml(deps):
    """It shows every stage's code digest and the rationale comments next to each param, so any
    stage's code change, or a comment-only edit, must rerun it."""
    gate_tests = load_params(ROOT / "params.yaml").gate.tests
    for stage in STAGES:
        for file in stage_code_files(ROOT, stage, gate_tests):
            assert covered(file, deps["report"]), f"report does not follow {file} ({stage} runs it)"
    assert "params.yaml" in deps["report"]


def test_the_derivation_follows_every_kind_of_import(tmp_path):
    """Imports inside functions, `from pkg import module`, relative imports, and the __init__.py
    of every package on the way all count; third-party modules do not."""
    files = {
        "stages/s.py": "import json\nfrom pkg.a import f\n",
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    from pkg import lazy\n    from .sub import deep\n",
        "pkg/lazy.py": "import torch\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/deep.py": "",
        "pkg/unused.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert code_closure(tmp_path, ["stages/s.py"]) == {
        "stages/s.py",
        "pkg/__init__.py",
        "pkg/a.py",
        "pkg/lazy.py",
        "pkg/sub/__init__.py",
        "pkg/sub/deep.py",
    }


def test_a_missing_dep_is_named_with_its_stage(deps):
    """Drop one package's files from train's deps: the check names exactly the files of that
    package that train runs, and nothing else."""
    runs = stage_code_files(ROOT, "train", [])
    for package in ("rlvr/rewards/", "rlvr/grpo/"):
        without = [d for d in deps["train"] if not d.startswith(package)]
        assert uncovered(ROOT, {"train": without}) == {
            "train": sorted(f for f in runs if f.startswith(package))
        }
    assert "rlvr/rewards/verifiers.py" in runs
    without = [d for d in deps["train"] if d != "stages/__init__.py"]
    assert uncovered(ROOT, {"train": without}) == {"train": ["stages/__init__.py"]}


def test_the_gate_covers_its_tests_their_conftest_and_what_they_import():
    files = stage_code_files(ROOT, "reward_tests", ["tests/rewards"])
    assert {
        "tests/rewards/conftest.py",
        "tests/environment.py",
        "tests/rewards/test_verifiers.py",
        "rlvr/params/config.py",
        "rlvr/rewards/verifiers.py",
        "pyproject.toml",
        "requirements.lock",
    } <= files
    # pytest runs with --confcutdir tests/rewards: the end-to-end tests' conftest is no gate code
    assert not {"tests/conftest.py", "tests/helpers.py"} & files


def test_every_code_change_reaches_the_stages_that_run_it(deps):
    """The reward code runs in every stage after the gate (run_stage checks reward names), and in
    smoke, train and evaluate it scores completions."""
    for stage in ("smoke", "train", "evaluate", "report"):
        assert covered("rlvr/rewards/verifiers.py", deps[stage]), stage


# --------------------------------------------------------------------------- params


def test_declared_params_come_from_params_and_interpolations():
    smoke = declared_params("smoke", ROOT / "dvc.yaml")
    assert {"train.advantage", "train.grpo", "paths.base_model", "data.train_path"} <= smoke
    assert "train.max_steps" not in smoke
    assert "" in declared_params("report", ROOT / "dvc.yaml")  # "" = the whole file
    # the paths train's code compares train.start_model and train.guides with, and reads
    train = declared_params("train", ROOT / "dvc.yaml")
    assert {"paths.base_model", "paths.rft_models", "paths.verified", "train"} <= train
    for stage in ("verified", "rft"):  # the answers' file: one writes it, the other reads it
        assert "paths.verified" in declared_params(stage, ROOT / "dvc.yaml")
    # rft's audit samples with GRPO's rollout settings, as evaluate does
    rollout = {"train.grpo.temperature", "train.grpo.top_p", "train.grpo.max_completion_length"}
    assert rollout <= declared_params("rft", ROOT / "dvc.yaml")
    assert rollout <= declared_params("evaluate", ROOT / "dvc.yaml")


@pytest.mark.parametrize("stage", STAGES)
def test_every_declared_param_exists(stage):
    params = load_params(ROOT / "params.yaml")
    for key in declared_params(stage, ROOT / "dvc.yaml") - {""}:
        obj = params
        for part in key.split("."):
            assert hasattr(obj, part), f"dvc.yaml stage {stage} declares {key}, not in params"
            obj = getattr(obj, part)


def test_a_stage_cannot_read_a_param_it_does_not_declare():
    view = stage_view(load_params(ROOT / "params.yaml"), "evaluate", ROOT / "dvc.yaml")
    assert view.train.grpo.temperature == 1.0 and view.evaluate.samples == 32
    assert view.report.min_slice_rows == 8  # the verdict weighs the tags: evaluate declares it
    with pytest.raises(UndeclaredParam, match=r"report.window"):
        view.report.window
    with pytest.raises(UndeclaredParam, match=r"stage evaluate reads params.yaml train.max_steps"):
        view.train.max_steps
    with pytest.raises(UndeclaredParam, match=r"train.grpo.beta"):
        view.train.grpo.beta
    with pytest.raises(AttributeError, match="read-only"):
        view.seed = 3
    assert isinstance(stage_view(Params(), "report", ROOT / "dvc.yaml"), Params)


def test_which_params_training_reads_never_depends_on_their_values(tmp_path):
    """A stage's reads follow its code, not the values it reads: with train.dynamic_sampling
    false, the training config still reads the keys dynamic sampling would use, so a stage that
    forgot to declare one fails on every value alike, not only on the ones that turn it on."""
    from rlvr.grpo.config import grpo_config
    from rlvr.params.config import parse_params

    params = parse_params({"train": {"dynamic_sampling": False}})
    unread = {"train.max_sampling_rounds", "train.resample_unsolved"}
    view = ParamsView(
        params, {f"train.{name}" for name in params.train.__dataclass_fields__} - unread, "train"
    )
    with pytest.raises(UndeclaredParam, match=r"train\.max_sampling_rounds"):
        grpo_config(
            view.train,
            output_dir=tmp_path,
            max_steps=1,
            seed=0,
            reward_weights=[1.0],
            dynamic_sampling=True,
        )
    # the smoke run's config (no dynamic sampling: the caller's argument, not a value) reads neither
    grpo_config(view.train, output_dir=tmp_path, max_steps=1, seed=0, reward_weights=[1.0])


def test_a_partly_declared_section_never_prints_its_values():
    view = ParamsView(Params(), {"model.lora"}, "train")
    assert "tiny" not in repr(view.model)


# --------------------------------------------------------------------------- paths


def _string_constants(file: Path) -> list[str]:
    tree = ast.parse(file.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_output_paths_have_one_home():
    """No stage, flow or orchestration module spells an output path: they read params.paths."""
    outputs = set(vars(PathsParams()).values())
    code = [
        *ROOT.glob("stages/*.py"),
        *ROOT.glob("flows/*.py"),
        *ROOT.glob("rlvr/orchestration/*.py"),
        *(ROOT / "rlvr/pipeline" / f"{name}.py" for name in ("training", "smoke", "stage", "gate")),
    ]
    assert all(file.is_file() for file in code), [f for f in code if not f.is_file()]
    for file in code:
        spelled = [
            s
            for s in _string_constants(file)
            if s in outputs or s.startswith(("reports/", "models/"))
        ]
        assert not spelled, f"{file.relative_to(ROOT)} spells {spelled}: use params.paths"


def test_dvc_yaml_takes_every_output_path_from_params():
    text = (ROOT / "dvc.yaml").read_text()
    literal = re.findall(r"(?:reports|models)/[\w./-]*", text)
    assert not literal, f"dvc.yaml spells {literal}: use ${{paths.*}}"


def test_paths_must_stay_inside_the_repository():
    from rlvr.params.config import ParamsError, parse_params

    for bad in ("/tmp/x", "../x", ""):
        with pytest.raises(ParamsError, match=r"paths.final_model"):
            parse_params({"paths": {"final_model": bad}})


def test_each_seed_stage_writes_where_rlvr_seeds_says_it_does():
    """dvc.yaml spells the per-seed paths (${paths.eval_runs}/seed-${item}/...); the code reads
    them through rlvr.core.seeds: the two must name the same files, seed by seed."""
    from dvc.repo import Repo

    from rlvr.core.seeds import seed_paths

    paths = load_params(ROOT / "params.yaml").paths
    with Repo(str(ROOT)) as repo:
        outs = {
            stage.name: {str(out.def_path) for out in stage.outs} for stage in repo.index.stages
        }
    seeds = load_params(ROOT / "params.yaml").audit.seeds
    assert {name for name in outs if "@" in name} == {
        f"{stage}@{seed}" for stage in ("verified", "train", "evaluate", "rft") for seed in seeds
    }
    for seed in seeds:
        run = seed_paths(paths, seed)
        assert outs[f"train@{seed}"] == {
            run.trained_model,
            run.train_curves,
            run.train_history,
            run.train_summary,
            f"{run.train_live}/plots/metrics",
        }
        assert outs[f"evaluate@{seed}"] == {run.eval_summary, run.eval_per_prompt}
        assert outs[f"rft@{seed}"] == {run.rft_model, run.rft_summary, run.rft_per_prompt}
        assert outs[f"verified@{seed}"] == {run.verified_answers}


def test_checkpoints_are_a_resume_cache_not_an_output():
    """Their files hold timings, and a clone that pulls the results must not see them deleted."""
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        outs = {str(out.def_path) for stage in repo.index.stages for out in stage.outs}
    assert PathsParams().final_model in outs
    assert PathsParams().checkpoints not in outs


def test_dvc_plots_name_metric_keys_the_trainer_logs():
    """dvc.yaml's plots read DVCLive's TSVs by file name: each must be a logged metric name
    (rlvr.core.metric_keys), its column the name's last part, as DVCLive writes it."""
    import yaml

    from rlvr.core import metric_keys

    names = {v for v in vars(metric_keys).values() if isinstance(v, str)}
    plots = yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]
    files = {
        file: column
        for plot in plots
        for spec in plot.values()
        for file, column in spec["y"].items()
    }
    assert len(files) >= 5
    prefix = "${paths.train_runs}/seed-${audit.seeds[0]}/live/plots/metrics/"  # the first seed's
    for file, column in files.items():
        assert file.startswith(prefix) and file.endswith(".tsv"), file
        key = file[len(prefix) : -len(".tsv")]
        assert key in names, f"dvc.yaml plots {file}: {key} is not in rlvr.core.metric_keys"
        assert column == key.rsplit("/", 1)[-1]
