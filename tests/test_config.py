"""params.yaml -> typed config: conversions DVC makes necessary, and errors that say how to fix."""

import json
import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from rlvr.params.config import Params, ParamsError, load_params, parse_params

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_params_load():
    params = load_params(ROOT / "params.yaml")
    assert isinstance(params, Params)
    assert params.data.train_rows == 64
    assert params.rewards.funcs == ["correctness", "format"]


def test_values_dvc_writes_as_strings_are_converted():
    # `dvc exp run -S data.train_rows=64` and friends can arrive as text
    params = parse_params({"data": {"train_rows": "64"}, "rewards": {"length": {"lam": "5e-01"}}})
    assert params.data.train_rows == 64 and params.rewards.length.lam == 0.5


# One bad value of each class per params section, and the exact line the user reads. Every
# message names the key, the value and the rule.
BAD_VALUES = [
    # type conversions (any section)
    ({"data": {"train_rows": "many"}}, "data.train_rows = 'many': must be an integer"),
    ({"data": {"train_rows": 6.5}}, "data.train_rows = 6.5: must be an integer"),
    ({"train": {"max_steps": float("inf")}}, "train.max_steps = inf: must be an integer"),
    (
        {"rewards": {"length": {"lam": "nan"}}},
        "rewards.length.lam = 'nan': must be a finite number",
    ),
    ({"train": {"grpo": {"beta": float("inf")}}}, "train.grpo.beta = inf: must be a finite number"),
    ({"model": {"chat_template": "maybe"}}, "model.chat_template = 'maybe': must be true or false"),
    ({"model": {"name_or_path": {"a": 1}}}, "model.name_or_path = {'a': 1}: must be a string"),
    (
        {"model": {"chat_template_kwargs": [1]}},
        "model.chat_template_kwargs = [1]: must be a mapping",
    ),
    (
        {"model": {"chat_template_kwargs": {"enable_thinking": False}}},
        "model.chat_template_kwargs = {'enable_thinking': False}: applies only with "
        "model.chat_template: true",
    ),
    ({"data": "x"}, "data = 'x': must be a mapping"),
    ({"gate": {"tests": "tests/rewards"}}, "gate.tests = 'tests/rewards': must be a list"),
    ({"train": {"grpo": {"extra": [1]}}}, "train.grpo.extra = [1]: must be a mapping"),
    ({"data": {"rows": 64}}, "unknown key(s) ['rows'] in data"),
    ({"training": {}}, "unknown key(s) ['training'] in top level"),
    # seed
    ({"seed": -1}, "seed = -1: must be in [0, 4294967295]"),
    # audit: the RL seeds
    ({"audit": {"seeds": []}}, "audit.seeds = []: must not be empty"),
    ({"audit": {"seeds": [1, 1]}}, "audit.seeds = [1, 1]: must not repeat a seed"),
    ({"audit": {"seeds": [0, "x"]}}, "audit.seeds[1] = 'x': must be an integer"),
    ({"audit": {"seeds": [0.5]}}, "audit.seeds[0] = 0.5: must be an integer"),
    ({"audit": {"seeds": [-1]}}, "audit.seeds[0] = -1: must be in [0, 4294967295]"),
    (
        {"audit": {"seeds": list(range(17))}},
        "audit.seeds = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, "
        "12, 13, 14, 15, 16]: must hold at most 16 items",
    ),
    ({"audit": {"seeds": 3}}, "audit.seeds = 3: must be a list"),
    # runtime
    ({"runtime": {"torch_threads": 0}}, "runtime.torch_threads = 0: must be in [1, 256]"),
    ({"runtime": {"reproducible": "yes"}}, "runtime.reproducible = 'yes': must be true or false"),
    # data
    ({"data": {"train_rows": 0}}, "data.train_rows = 0: must be >= 1"),
    ({"data": {"max_prompt_chars": -5}}, "data.max_prompt_chars = -5: must be >= 1"),
    ({"data": {"train_path": ""}}, "data.train_path = '': must not be empty"),
    (
        {"data": {"eval_path": "data/grpo_train.jsonl"}},
        "data.eval_path = 'data/grpo_train.jsonl': must differ from data.train_path",
    ),
    (
        {"data": {"val_path": "data/grpo_test.jsonl"}},
        "data.val_path = 'data/grpo_test.jsonl': must differ from data.train_path and "
        "data.eval_path",
    ),
    ({"data": {"val_path": ""}}, "data.val_path = '': must not be empty"),
    # rewards
    ({"rewards": {"weights": [0, 0]}}, "rewards.weights = [0.0, 0.0]: must sum to more than 0"),
    ({"rewards": {"weights": [1, -1]}}, "rewards.weights[1] = -1.0: must be >= 0"),
    (
        {"rewards": {"weights": [1]}},
        "rewards.weights = [1.0]: needs one weight per reward function",
    ),
    ({"rewards": {"funcs": [], "weights": []}}, "rewards.funcs = []: must not be empty"),
    (
        {"rewards": {"funcs": ["format", "format"]}},
        "rewards.funcs = ['format', 'format']: must name each reward function once",
    ),
    (
        {"rewards": {"format_pattern": "(("}},
        "rewards.format_pattern = '((': must be a regular expression that compiles",
    ),
    ({"rewards": {"length": {"l_min": 20}}}, "rewards.length.l_min = 20.0: must be below l_max"),
    (
        {"rewards": {"length": {"l_target": 0.5}}},
        "rewards.length.l_target = 0.5: must be in [l_min, l_max) ([1.0, 12.0))",
    ),
    ({"rewards": {"length": {"lam": -1}}}, "rewards.length.lam = -1.0: must be >= 0"),
    # gate
    ({"gate": {"tests": []}}, "gate.tests = []: must not be empty"),
    ({"gate": {"tests": [""]}}, "gate.tests[0] = '': must be a test file or folder under tests/"),
    # model
    ({"model": {"init": "huge"}}, "model.init = 'huge': must be one of: tiny, pretrained"),
    ({"model": {"init": "pretrained"}}, "model.name_or_path = '': must name a model folder"),
    (
        {"model": {"tiny": {"num_hidden_layers": 0}}},
        "model.tiny.num_hidden_layers = 0: must be >= 1",
    ),
    (
        {"model": {"tiny": {"hidden_size": 130}}},
        "model.tiny.hidden_size = 130: must be divisible by num_attention_heads (4)",
    ),
    (
        {"model": {"warm_start": {"learning_rate": 0}}},
        "model.warm_start.learning_rate = 0.0: must be > 0",
    ),
    ({"model": {"warm_start": {"steps": -1}}}, "model.warm_start.steps = -1: must be >= 0"),
    ({"model": {"lora": {"dropout": 1.0}}}, "model.lora.dropout = 1.0: must be in [0, 1)"),
    ({"model": {"lora": {"r": 0}}}, "model.lora.r = 0: must be >= 1"),
    # smoke
    ({"smoke": {"max_steps": 0}}, "smoke.max_steps = 0: must be >= 1"),
    ({"smoke": {"min_spread_share": 1.5}}, "smoke.min_spread_share = 1.5: must be in [0, 1]"),
    # train
    (
        {"train": {"grpo": {"learning_rate": -0.0001}}},
        "train.grpo.learning_rate = -0.0001: must be > 0",
    ),
    ({"train": {"grpo": {"temperature": 0}}}, "train.grpo.temperature = 0.0: must be > 0"),
    ({"train": {"grpo": {"temperature": -1}}}, "train.grpo.temperature = -1.0: must be > 0"),
    ({"train": {"grpo": {"top_p": 5}}}, "train.grpo.top_p = 5.0: must be in (0, 1]"),
    (
        {"train": {"grpo": {"max_completion_length": 0}}},
        "train.grpo.max_completion_length = 0: must be >= 1",
    ),
    (
        {"train": {"grpo": {"loss_type": "nonsense"}}},
        "train.grpo.loss_type = 'nonsense': must be one of: grpo, dr_grpo, dapo, bnpo",
    ),
    (
        {"train": {"grpo": {"lr_scheduler_type": "sometimes"}}},
        "train.grpo.lr_scheduler_type = 'sometimes': must be one of: linear, cosine",
    ),
    ({"train": {"grpo": {"num_generations": 1}}}, "train.grpo.num_generations = 1: must be >= 2"),
    (
        {"train": {"grpo": {"per_device_train_batch_size": 12}}},
        "train.grpo.per_device_train_batch_size = 12: must be divisible by num_generations (8)",
    ),
    ({"train": {"grpo": {"bf16": True}}}, "train.grpo.bf16 = True: needs a GPU"),
    ({"train": {"max_steps": 0}}, "train.max_steps = 0: must be >= 1"),
    (
        {"train": {"advantage": "global"}},
        "train.advantage = 'global': must be one of: group, running_mean",
    ),
    (
        {"train": {"running_mean_momentum": 1}},
        "train.running_mean_momentum = 1.0: must be in [0, 1)",
    ),
    (
        {"train": {"beta_schedule": {"kind": "sometimes"}}},
        "train.beta_schedule.kind = 'sometimes': must be one of: constant, warmup, adaptive",
    ),
    (
        {"train": {"beta_schedule": {"target_kl": 0}}},
        "train.beta_schedule.target_kl = 0.0: must be > 0",
    ),
    (
        {"train": {"save_steps": 5, "grpo": {"num_iterations": 2}}},
        "train.save_steps = 5: must fall on a fresh batch of rollouts: a multiple of num_iterations "
        "x steps_per_generation / gradient_accumulation_steps (2 x 1 / 1)",
    ),
    (
        {"train": {"save_steps": 6, "grpo": {"extra": {"steps_per_generation": 4}}}},
        "train.save_steps = 6: must fall on a fresh batch of rollouts",
    ),
    # evaluate
    ({"evaluate": {"n_resamples": 0}}, "evaluate.n_resamples = 0: must be >= 1"),
    ({"evaluate": {"confidence": 1}}, "evaluate.confidence = 1.0: must be in (0, 1)"),
    ({"evaluate": {"samples": 0}}, "evaluate.samples = 0: must be >= 1"),
    # report
    ({"report": {"window": 0}}, "report.window = 0: must be >= 1"),
    ({"report": {"kl_rising_ratio": 0.5}}, "report.kl_rising_ratio = 0.5: must be > 1"),
    # orchestration
    ({"orchestration": {"retries": -1}}, "orchestration.retries = -1: must be >= 0"),
    (
        {"orchestration": {"retried_stages": ["trian"]}},
        "orchestration.retried_stages[0] = 'trian': must be one of: check_params, reward_tests",
    ),
    (
        {"orchestration": {"timeouts": {"trian": 5}}},
        "orchestration.timeouts = 'trian': names no stage",
    ),
    (
        {"orchestration": {"timeouts": {"train": -5}}},
        "orchestration.timeouts['train'] = -5: must be a positive number of seconds",
    ),
    (
        {"orchestration": {"ablations": {"no kl": ["train.grpo.beta=0"]}}},
        "orchestration.ablations = 'no kl': must be a DVC experiment name",
    ),
    (
        {"orchestration": {"ablations": {"no-kl": "train.grpo.beta=0"}}},
        "orchestration.ablations.no-kl = 'train.grpo.beta=0': must be a list of `-S` overrides",
    ),
    (
        {"orchestration": {"sweep": {"train.grpo.bta": [1]}}},
        "orchestration.sweep = 'train.grpo.bta': names no params.yaml field",
    ),
    # paths
    (
        {"paths": {"final_model": "/tmp/final"}},
        "paths.final_model = '/tmp/final': must be a path inside reports/, models/, metrics/",
    ),
    (
        {"paths": {"final_model": "models/<x>"}},
        "paths.final_model = 'models/<x>': must be a path inside reports/, models/, metrics/",
    ),
    # the stages delete what paths.* name before they write it: a typo must not wipe the checkout
    *(
        (
            {"paths": {"data_docs": bad}},
            f"paths.data_docs = {bad!r}: must be a path inside reports/, models/, metrics/ "
            "(relative, not the folder itself, no '..', no '<', '>' or line break): the stages "
            "delete and rewrite what it names",
        )
        for bad in (
            ".",
            "./",
            ".git",
            ".dvc",
            "rlvr",
            "data",
            "reports",
            "models/",
            "models/..",
            "reports/../rlvr",
            "~/x",
            "",
        )
    ),
    *(
        (
            {"paths": {"report_picture": bad}},
            f"paths.report_picture = {bad!r}: must be a .png file inside docs/ or an output folder",
        )
        for bad in ("README.md", "docs/report.py", "rlvr/report.png", "docs/../rlvr/a.png", ".png")
    ),
    *(
        (
            {"gate": {"tests": ["tests/rewards", bad]}},
            f"gate.tests[1] = {bad!r}: must be a test file or folder under tests/ or rlvr/ "
            "(relative, no '..', no pytest option or ::node id): the gate runs what it names",
        )
        for bad in ("-k", "--co", "tests/rewards/test_x.py::test_one", "/tmp/t", "data", "..")
    ),
    ({"gate": {"min_tests": 0}}, "gate.min_tests = 0: must be >= 1"),
    # blank values, bools and huge numbers where they do not belong
    ({"rewards": {"format_pattern": None}}, "rewards.format_pattern = None: must be a string"),
    (
        {"model": {"init": "pretrained", "name_or_path": None}},
        "model.name_or_path = None: must be a string",
    ),
    ({"gate": {"tests": [None]}}, "gate.tests[0] = None: must be a string"),
    ({"seed": "12345678901234567890"}, "seed = 12345678901234567890: must be in [0, 4294967295]"),
    (
        {"orchestration": {"timeouts": {"train": True}}},
        "orchestration.timeouts['train'] = True: must be a positive number of seconds",
    ),
    (
        {"orchestration": {"timeouts": {"train": float("inf")}}},
        "orchestration.timeouts['train'] = inf: must be a positive number of seconds",
    ),
    # train.grpo.extra cannot bypass a rule
    (
        {"train": {"grpo": {"extra": {"learning_rate": -1}}}},
        "train.grpo.extra.learning_rate = -1: set train.grpo.learning_rate instead",
    ),
    (
        {"train": {"grpo": {"extra": {"steps_per_generation": 0}}}},
        "train.grpo.extra.steps_per_generation = 0: must be a positive integer",
    ),
    (
        {"train": {"grpo": {"extra": {"steps_per_generation": True}}}},
        "train.grpo.extra.steps_per_generation = True: must be a positive integer",
    ),
]


@pytest.mark.parametrize("raw,message", BAD_VALUES, ids=[m.split(":")[0] for _, m in BAD_VALUES])
def test_bad_values_are_named_with_the_rule(raw, message):
    with pytest.raises(ParamsError) as error:
        parse_params(raw)
    assert str(error.value).startswith("params.yaml: ")
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_every_number_and_choice_has_a_rule():
    """Every int and float field, and every number in a list, states its range (Field(ge=...)),
    where an editor shows it: in the schema."""
    from rlvr.params.reference import params_schema
    from rlvr.params.section import deref

    schema = params_schema()

    def walk(node, name):
        node = deref(schema, node)
        for key, child in node.get("properties", {}).items():
            yield from walk(child, f"{name}.{key}" if name else key)
        if "items" in node:
            yield from walk(node["items"], f"{name}[]")
        if node.get("type") in ("integer", "number") and not {"minimum", "exclusiveMinimum"} & set(
            node
        ):
            yield name

    assert list(walk(schema, "")) == []


def test_the_committed_table_of_knobs_is_the_models():
    """docs/params.md comes from the same declarations as the schema and the checks: every key,
    its default, its values and its help."""
    from rlvr.params.reference import REFERENCE_FILE, params_reference

    text = (ROOT / REFERENCE_FILE).read_text()
    assert text == params_reference() + "\n", (
        f"{REFERENCE_FILE} is stale: ./dev run python -m rlvr.params.reference --docs > "
        f"{REFERENCE_FILE}"
    )
    assert "| `train.grpo.beta` | `0.05` | >= 0 | KL coefficient" in text
    assert "| `train.running_mean_momentum` | `0.9` | [0, 1) |" in text


def test_the_committed_schema_is_the_models_and_params_yaml_names_it():
    from rlvr.params.reference import SCHEMA_FILE, params_schema

    assert json.loads((ROOT / SCHEMA_FILE).read_text()) == params_schema(), (
        f"{SCHEMA_FILE} is stale: ./dev run python -m rlvr.params.reference --schema > {SCHEMA_FILE}"
    )
    first_line = (ROOT / "params.yaml").read_text().splitlines()[0]
    assert first_line == f"# yaml-language-server: $schema={SCHEMA_FILE}"


def test_an_editor_checking_params_yaml_with_the_schema_names_each_bad_key(tmp_path):
    """What an editor does with the committed schema (yaml-language-server validates with it):
    the real params.yaml passes; a wrong type, an out-of-range value and an unknown key are each
    rejected at their key."""
    import jsonschema

    from rlvr.params.config import read_params_file

    schema = json.loads((ROOT / "params.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    editor = jsonschema.Draft202012Validator(schema)
    assert list(editor.iter_errors(read_params_file(ROOT / "params.yaml"))) == []
    bad = _params_file(tmp_path, {"train": {"max_steps": "many", "grpo": {"beta": -1, "bta": 0}}})
    assert sorted((e.json_path, e.message) for e in editor.iter_errors(read_params_file(bad))) == [
        ("$.train.grpo", "Additional properties are not allowed ('bta' was unexpected)"),
        ("$.train.grpo.beta", "-1 is less than the minimum of 0"),
        ("$.train.max_steps", "'many' is not of type 'integer'"),
    ]


def test_the_defaults_satisfy_every_rule():
    import dataclasses

    assert parse_params(dataclasses.asdict(Params())) == Params()


def test_the_choices_agree_with_the_installed_libraries():
    from transformers.trainer_utils import SchedulerType
    from trl import GRPOConfig

    from rlvr.orchestration.runs import dvc_stages
    from rlvr.params.config import STAGES
    from rlvr.params.training_params import LOSS_TYPES, LR_SCHEDULERS

    assert set(LR_SCHEDULERS) == {kind.value for kind in SchedulerType}
    help_text = GRPOConfig.__dataclass_fields__["loss_type"].metadata["help"]
    supported = help_text.split("Supported values are ", 1)[1].split(". ", 1)[0]
    assert set(LOSS_TYPES) == set(re.findall(r"'(\w+)'", supported))
    assert list(STAGES) == dvc_stages(ROOT / "dvc.yaml")


def _params_file(tmp_path, changes: dict) -> Path:
    """A copy of the committed params.yaml with `changes` merged in (comments kept)."""
    from tests.helpers import merge

    yaml = YAML()
    params = yaml.load(ROOT / "params.yaml")
    merge(params, changes)
    path = tmp_path / "params.yaml"
    yaml.dump(params, path)
    return path


@pytest.mark.parametrize(
    "changes,message",
    [
        (
            {"orchestration": {"sweep": {"train.grpo.beta": [0.1, -1]}}},
            "orchestration.sweep.train.grpo.beta = ['train.grpo.beta=-1']: gives a bad params.yaml: "
            "train.grpo.beta = -1.0: must be >= 0",
        ),
        (
            {"orchestration": {"ablations": {"hot": ["train.grpo.temperature=0"]}}},
            "orchestration.ablations.hot = ['train.grpo.temperature=0']: gives a bad params.yaml: "
            "train.grpo.temperature = 0.0: must be > 0",
        ),
        # as in `dvc exp run -S`: a key that params.yaml does not have cannot be set
        (
            {"orchestration": {"ablations": {"more": ["train.grpo.extra.steps_per_generation=2"]}}},
            "orchestration.ablations.more = ['train.grpo.extra.steps_per_generation=2']: DVC cannot "
            "apply it",
        ),
        (
            {"orchestration": {"ablations": {"vibes": ["rewards.funcs=[correctness,vibes]"]}}},
            "orchestration.ablations.vibes = ['rewards.funcs=[correctness,vibes]']: gives a bad "
            "params.yaml: rewards.funcs = ['correctness', 'vibes']: unknown reward function(s)",
        ),
        (
            {"rewards": {"funcs": ["correctness", "vibes"]}},
            "rewards.funcs = ['correctness', 'vibes']: unknown reward function(s) ['vibes']",
        ),
        # a grid: every combination is checked, here one that two rules forbid together
        (
            {
                "orchestration": {
                    "grids": {
                        "ds": {
                            "train.advantage": ["group", "running_mean"],
                            "train.dynamic_sampling": [False, True],
                        }
                    }
                }
            },
            "orchestration.grids.ds = ['train.advantage=running_mean', "
            "'train.dynamic_sampling=true']: gives a bad params.yaml: train.dynamic_sampling = True: "
            "needs train.advantage = 'group'",
        ),
        (
            {"orchestration": {"grids": {"g": {"train.nope": [1]}}}},
            "orchestration.grids.g = 'train.nope': names no params.yaml field",
        ),
        # two thresholds that only make sense in order: a tag is forgotten when it falls from one
        # to the other
        (
            {"report": {"slice_drop_to": 0.1}},
            "report.slice_drop_to = 0.1: must be below report.slice_drop_from (0.1)",
        ),
        ({"report": {"slice_drop_from": 1.5}}, "report.slice_drop_from = 1.5: must be in [0, 1]"),
    ],
)
def test_check_params_checks_every_experiment_the_flow_would_run(tmp_path, changes, message):
    from rlvr.pipeline.checks import check_params_file

    check_params_file(ROOT / "params.yaml")  # the committed params and grid are valid
    with pytest.raises(ParamsError, match=re.escape(message)):
        check_params_file(_params_file(tmp_path, changes))


def test_the_experiments_are_the_params_dvc_would_run(tmp_path):
    from rlvr.params.experiments import experiment_params

    runs = [(where, params) for where, _, params in experiment_params(ROOT / "params.yaml")]
    assert [where for where, _ in runs] == [
        "orchestration.ablations.no-kl",
        "orchestration.ablations.no-group-norm",
        "orchestration.sweep.train.grpo.beta",
        "orchestration.sweep.train.grpo.beta",
        *["orchestration.grids.step8"] * 16,
        *[
            f"orchestration.grids.step11.settings.{name}"
            for name in (
                "default",
                "no-resample",
                "pass-at-k",
                "positive-weight",
                "unlikeliness",
                "resample-and-pass-at-k",
                "clip-higher",
            )
            for _ in range(4)
        ],
    ]
    assert runs[0][1].train.grpo.beta == 0 and runs[1][1].train.advantage == "running_mean"
    assert [params.train.grpo.beta for _, params in runs[2:4]] == [0.01, 0.1]
    # the grid: every combination, each applied (booleans spelled as YAML's, as DVC queues them)
    grid = {(p.seed, p.train.select, p.train.dynamic_sampling) for _, p in runs[4:20]}
    assert grid == {
        (seed, select, dynamic)
        for seed in range(4)
        for select in ("last", "best_val")
        for dynamic in (False, True)
    }
    # a grid of named settings: each setting's overrides, crossed with the seeds
    settings = {
        (
            where.rsplit(".", 1)[1],
            p.seed,
            p.train.advantage,
            p.train.positive_weight,
            p.train.unlikeliness,
            p.train.resample_unsolved,
            p.train.grpo.num_iterations,
            p.train.grpo.epsilon_high,
        )
        for where, p in runs[20:]
    }
    assert settings == {
        (name, seed, *knobs)
        for seed in range(4)
        for name, knobs in (
            ("default", ("group", 1.0, 0.0, True, 1, 0.0)),
            ("no-resample", ("group", 1.0, 0.0, False, 1, 0.0)),
            ("pass-at-k", ("pass_at_k", 1.0, 0.0, False, 1, 0.0)),
            ("positive-weight", ("group", 0.1, 0.0, False, 1, 0.0)),
            ("unlikeliness", ("group", 1.0, 0.25, False, 1, 0.0)),
            ("resample-and-pass-at-k", ("pass_at_k", 1.0, 0.0, True, 1, 0.0)),
            ("clip-higher", ("group", 1.0, 0.0, False, 2, 0.28)),
        )
    }


def test_an_unknown_grid_is_one_line_naming_the_grids():
    from flows.experiments import queue_experiments
    from rlvr.orchestration.runs import StageFailed

    with pytest.raises(
        StageFailed,
        match=r"--grid nope: params.yaml orchestration.grids has no "
        r"such grid \(it has: step8, step11\)",
    ):
        queue_experiments.fn(str(ROOT), "nope")


def test_the_flow_checks_what_each_queued_run_will_check_inside_it(tmp_path):
    """A grid value can make an ablation invalid inside the grid's runs (their check_params
    checks the ablations on their own params.yaml): the flow says so before queueing."""
    from flows.experiments import queue_experiments
    from rlvr.orchestration.runs import StageFailed
    from rlvr.params.experiments import check_queued_runs

    path = _params_file(
        tmp_path,
        {
            "train": {"dynamic_sampling": False},
            "orchestration": {
                "ablations": {"no-group-norm": ["train.advantage=running_mean"]},
                "grids": {
                    "ds": {
                        "seed": [0, 1],
                        "train.dynamic_sampling": [False, True],
                        "train.advantage": ["group"],
                    }
                },
            },
        },
    )  # pinned, as the step8 grid does
    check_queued_runs(path)  # the ablations and sweep on the workspace's params: valid
    message = (
        "orchestration.grids.ds = ['seed=0', 'train.dynamic_sampling=true', "
        "'train.advantage=group']: its own "
        "check_params would fail: orchestration.ablations.no-group-norm = "
        "['train.advantage=running_mean']: gives a bad params.yaml: "
        "train.dynamic_sampling = True: needs train.advantage = 'group'"
    )
    with pytest.raises(ParamsError, match=re.escape(message)):
        check_queued_runs(path, "ds")
    with pytest.raises(StageFailed, match=re.escape(message)):  # before any `dvc exp run`
        queue_experiments.fn(str(tmp_path), "ds")
    assert not (tmp_path / ".dvc").exists()


@pytest.mark.slow
def test_every_run_of_the_committed_grid_passes_its_own_check_params(tmp_path, monkeypatch):
    from rlvr.params import experiments
    from rlvr.params.experiments import check_queued_runs, experiment_params
    from tests.helpers import SMALL_RUN, set_params

    applied = []
    apply_overrides = experiments.apply_overrides
    monkeypatch.setattr(
        experiments,
        "apply_overrides",
        lambda path, overrides, where: (
            applied.append(overrides) or apply_overrides(path, overrides, where)
        ),
    )
    # each step11 run checks, as its own check_params will, every experiment on its params:
    # the ablations, the sweep and both grids; each distinct params.yaml once
    assert check_queued_runs(ROOT / "params.yaml", "step11") == 28
    orchestration = load_params(ROOT / "params.yaml").orchestration
    runs = experiments.experiment_runs(orchestration, "step11")
    every = experiments.every_experiment(orchestration)
    distinct = {experiments.final_overrides(r, e) for _, r in runs for _, e in every}
    assert len(runs) == 28 and len(every) == 48 and len(distinct) < 28 * 48 / 3
    assert len(applied) == 28 + len(distinct)
    monkeypatch.undo()
    # the slow tests' budgets (checkpoints every 3 or 4 steps) carry the same experiments, which
    # their check_params checks: each must still be valid on top of them
    for name, budget in (
        ("small_run", SMALL_RUN),
        ("small_budget", {"train": {"max_steps": 6, "save_steps": 3, "eval_steps": 3}}),
    ):  # 3: odd, as no grid has
        copy = tmp_path / name / "params.yaml"
        copy.parent.mkdir()
        copy.write_text((ROOT / "params.yaml").read_text())
        set_params(copy.parent, budget)
        assert len(list(experiment_params(copy))) == 4 + 16 + 28, name


def test_train_grpo_extra_cannot_bypass_a_rule_or_the_pipeline():
    import ast
    import inspect

    from trl import GRPOConfig

    from rlvr.grpo.config import PipelineGRPOConfig, grpo_config
    from rlvr.params.training_params import PIPELINE_GRPO_FIELDS, GRPOParams

    call = next(
        node
        for node in ast.walk(ast.parse(inspect.getsource(grpo_config)))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "PipelineGRPOConfig"
    )
    # the subclass's own knobs come from params.train, never from train.grpo.extra
    knobs = set(PipelineGRPOConfig.__dataclass_fields__) - set(GRPOConfig.__dataclass_fields__)
    assert knobs == {
        "max_sampling_rounds",
        "advantage",
        "running_mean_momentum",
        "pass_at_k",
        "positive_weight",
        "unlikeliness",
        "resample_unsolved",
        "guidance",
        "guidance_fraction",
        "guidance_gamma",
        "guidance_std",
    }
    from_grpo = set(GRPOParams.__dataclass_fields__)  # train.grpo, field by field
    assert set(PIPELINE_GRPO_FIELDS) == {k.arg for k in call.keywords if k.arg} - knobs - from_grpo
    for key in PIPELINE_GRPO_FIELDS:
        with pytest.raises(ParamsError, match=f"train.grpo.extra.{key} = .*: is set by the "):
            parse_params({"train": {"grpo": {"extra": {key: 1}}}})


def test_train_grpo_extra_opens_no_door():
    """Remote code, the hub (its token never repeated), a vLLM server, resuming, logging, the
    launch and how a model loads are refused through train.grpo.extra, each with its reason;
    the GPU profile's extras still pass. Every refused key is a GRPOConfig field (a renamed one
    would pass unseen)."""
    from trl import GRPOConfig

    from rlvr.params.training_params import EXTRA_REFUSED

    assert set(EXTRA_REFUSED) <= set(GRPOConfig.__dataclass_fields__)
    for key, why in EXTRA_REFUSED.items():
        with pytest.raises(ParamsError) as error:
            parse_params({"train": {"grpo": {"extra": {key: "hf_secret"}}}})
        line = str(error.value)
        assert line.startswith(f"params.yaml: train.grpo.extra.{key} = ") and why in line
        assert ("hf_secret" in line) == ("token" not in key)
    for extra, says in (
        ({"model_init_kwargs": {"dtype": "bfloat16", "weights_only": False}}, "dtype only"),
        ({"model_init_kwargs": {"trust_remote_code": True}}, "dtype only"),
        ({"model_init_kwargs": "auto"}, "dtype only"),
        ({"vllm_mode": "server"}, "must be colocate"),
    ):
        with pytest.raises(ParamsError, match=says):
            parse_params({"train": {"grpo": {"extra": extra}}})
    gpu = {
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": 0.3,
        "activation_checkpointing": True,
        "model_init_kwargs": {"dtype": "bfloat16"},
    }
    assert parse_params({"train": {"grpo": {"extra": gpu}}}).train.grpo.extra == gpu


def test_what_trl_and_peft_reject_is_a_params_error():
    from rlvr.grpo.config import check_trl_config

    check_trl_config(Params())
    with pytest.raises(
        ParamsError,
        match=re.escape(
            "params.yaml: train.grpo: TRL's GRPOConfig rejects it: generation_batch_size (100) "
            "must be divisible by the global batch size (128)."
        ),
    ):
        check_trl_config(
            parse_params({"train": {"grpo": {"extra": {"generation_batch_size": 100}}}})
        )


@pytest.mark.parametrize(
    "text,message",
    [
        ("seed: [0\n", "line 2: not valid YAML"),
        ("- 1\n- 2\n", "must be a mapping of sections, got a list"),
    ],
)
def test_an_unreadable_params_file_is_one_line(tmp_path, text, message):
    from rlvr.params.config import read_params_file

    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ParamsError, match=re.escape(message)):
        read_params_file(path)
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ParamsError, match="dir.yaml: cannot be read"):
        read_params_file(tmp_path / "dir.yaml")


def test_every_field_has_a_help_string():
    from rlvr.params.reference import params_schema

    schema = params_schema()
    for section in [schema, *schema["$defs"].values()]:
        for name, field in section["properties"].items():
            assert field.get("description"), f"{section['title']}.{name} has no help"
