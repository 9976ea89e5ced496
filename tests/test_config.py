"""params.yaml -> typed config: conversions DVC makes necessary, and errors that say how to fix."""

from pathlib import Path

import pytest

from rlvr.config import Params, ParamsError, load_params, parse_params

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


@pytest.mark.parametrize("raw,message", [
    ({"data": {"train_rows": "many"}}, "data.train_rows='many' must be a int"),
    ({"data": {"train_rows": 6.5}}, "data.train_rows=6.5 must be a int"),
    ({"data": {"train_rows": 0}}, "data.train_rows=0 must be a positive integer"),
    ({"data": {"rows": 64}}, "unknown key(s) ['rows'] in data"),
    ({"training": {}}, "unknown key(s) ['training'] in top level"),
    ({"rewards": {"length": {"l_min": 20}}}, "rewards.length.l_min=20.0 must be below l_max"),
    ({"gate": {"tests": []}}, "gate.tests=[] must list at least one test path"),
    ({"data": "x"}, "data must be a mapping"),
    ({"train": {"save_steps": 5, "grpo": {"num_iterations": 2}}},
     "train.save_steps=5 must fall on a fresh batch of rollouts: a multiple of num_iterations "
     "x steps_per_generation / gradient_accumulation_steps (2 x 1 / 1)"),
    ({"train": {"save_steps": 6, "grpo": {"extra": {"steps_per_generation": 4}}}},
     "train.save_steps=6 must fall on a fresh batch of rollouts"),
])
def test_bad_values_are_named_with_the_rule(raw, message):
    with pytest.raises(ParamsError) as error:
        parse_params(raw)
    assert message in str(error.value)


def test_every_field_has_a_help_string():
    import dataclasses
    import typing

    def walk(cls):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name])

    walk(Params)
