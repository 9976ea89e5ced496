"""The typed view of params.yaml: one dataclass per section, every field with a help string.

params.yaml is read once, with ruamel.yaml (DVC writes `-S train.learning_rate=3e-5` as `3e-05`,
which PyYAML reads as a string), and each value is converted to its field's type here, so a stage
never sees a string where it expects a number. Errors name the section, the field and how to fix it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

PARAMS_FILE = Path("params.yaml")


class ParamsError(ValueError):
    """params.yaml holds a value the pipeline cannot use; the message says which and why."""


def _help(text: str, **kwargs: Any) -> Any:
    return field(metadata={"help": text}, **kwargs)


@dataclass
class DataParams:
    train_path: str = _help("JSONL file of training rows (id, prompt, verifier).",
                            default="data/grpo_train.jsonl")
    eval_path: str = _help("JSONL file of held-out rows; must share no prompt with train.",
                           default="data/grpo_eval.jsonl")
    train_rows: int = _help("Exact number of rows the training file must have.", default=64)
    max_prompt_chars: int = _help("Longest prompt allowed, in characters. TRL never truncates "
                                  "prompts, so length is bounded here, in the data.", default=200)

    def __post_init__(self) -> None:
        _require(self.train_rows > 0, "data.train_rows", self.train_rows, "must be a positive integer")
        _require(self.max_prompt_chars > 0, "data.max_prompt_chars", self.max_prompt_chars,
                 "must be a positive integer")


@dataclass
class LengthParams:
    lam: float = _help("Weight lambda of the Kimi k1.5 length term.", default=0.5)
    l_min: float = _help("Length (completion tokens) that earns the full bonus when correct.",
                         default=1.0)
    l_max: float = _help("Length at which a correct answer earns 0 and a wrong one the full "
                         "penalty.", default=12.0)
    l_target: float = _help("Wrong answers longer than this are penalised.", default=8.0)

    def __post_init__(self) -> None:
        _require(self.l_min < self.l_max, "rewards.length.l_min", self.l_min,
                 f"must be below l_max ({self.l_max})")
        _require(self.l_target < self.l_max, "rewards.length.l_target", self.l_target,
                 f"must be below l_max ({self.l_max})")


@dataclass
class RewardsParams:
    funcs: list[str] = _help("Reward functions by registry name (rlvr.rewards.REWARD_FUNCS).",
                             default_factory=lambda: ["correctness", "format"])
    weights: list[float] = _help("One weight per reward function, same order (TRL's "
                                 "reward_weights).", default_factory=lambda: [1.0, 0.2])
    format_pattern: str = _help("Regex the whole completion must match for the format reward.",
                                default=r"^\s*\(*\d+\)*(\s*[-+*/]\s*\(*\d+\)*)+\s*$")
    length: LengthParams = _help("The length term's parameters (used when 'length' is in funcs).",
                                 default_factory=LengthParams)

    def __post_init__(self) -> None:
        from rlvr.rewards.registry import REWARD_FUNCS

        unknown = [name for name in self.funcs if name not in REWARD_FUNCS]
        _require(not unknown, "rewards.funcs", self.funcs,
                 f"unknown reward function(s) {unknown}; known: {sorted(REWARD_FUNCS)}")
        _require(len(self.weights) == len(self.funcs), "rewards.weights", self.weights,
                 f"needs one weight per reward function ({len(self.funcs)})")


@dataclass
class GateParams:
    tests: list[str] = _help("Pytest paths of the offline reward tests that gate every stage "
                             "(test files and the doctests of the reward modules).",
                             default_factory=lambda: ["tests/rewards", "rlvr/rewards",
                                                      "rlvr/grpo_math.py"])

    def __post_init__(self) -> None:
        _require(bool(self.tests), "gate.tests", self.tests, "must list at least one test path")


@dataclass
class Params:
    seed: int = _help("Seed for everything random in the pipeline.", default=0)
    data: DataParams = _help("Where the rows are and what they must look like.",
                             default_factory=DataParams)
    rewards: RewardsParams = _help("Which rewards train the policy, and how they are weighted.",
                                   default_factory=RewardsParams)
    gate: GateParams = _help("The reward-test gate.", default_factory=GateParams)


def _require(ok: bool, name: str, value: Any, rule: str) -> None:
    if not ok:
        raise ParamsError(f"params.yaml: {name}={value!r} {rule}")


def _convert(value: Any, annotation: Any, name: str) -> Any:
    """Convert a YAML value to the annotated type, or raise ParamsError naming the field."""
    origin = typing.get_origin(annotation)
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ParamsError(f"params.yaml: {name} must be a mapping, got {value!r}")
        return _build(annotation, value, name)
    if origin is list:
        (item_type,) = typing.get_args(annotation)
        if not isinstance(value, list):
            raise ParamsError(f"params.yaml: {name} must be a list, got {value!r}")
        return [_convert(v, item_type, f"{name}[{i}]") for i, v in enumerate(value)]
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(value, inner, name)
    try:
        if annotation is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "false"):
                return str(value).lower() == "true"
            raise ValueError
        if annotation is int:
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            return int(float(value))
        if annotation is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if annotation is str:
            return str(value)
    except (TypeError, ValueError):
        raise ParamsError(f"params.yaml: {name}={value!r} must be a {annotation.__name__}") from None
    return value


def _build(cls: type, raw: dict, prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        where = prefix or "top level"
        raise ParamsError(f"params.yaml: unknown key(s) {unknown} in {where}; known: {sorted(known)}")
    kwargs = {key: _convert(value, hints[key], f"{prefix}.{key}" if prefix else key)
              for key, value in raw.items()}
    return cls(**kwargs)


def parse_params(raw: dict) -> Params:
    """Params from an already-parsed mapping (tests use this)."""
    return _build(Params, raw or {})


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """Read and validate params.yaml."""
    with open(path, encoding="utf-8") as handle:
        raw = YAML(typ="safe").load(handle)
    return parse_params(raw)
