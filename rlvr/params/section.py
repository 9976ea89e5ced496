"""How a params.yaml section is declared and checked (rlvr/params/config.py declares them all).

A section is a pydantic dataclass made by `@section("train.grpo")`: unknown keys are errors; text a
value may arrive as ("64", "5e-01", "true": DVC's `-S` and hand edits write them) is first read as
the field's type (_from_text); then pydantic checks types, ranges (Field(ge=...)), choices
(Literal) and the rules between fields (model validators). The first problem becomes one
ParamsError line naming the key, the value and the rule, worded from the section's JSON schema,
the one editors check params.yaml with.
"""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.dataclasses import dataclass
from pydantic_core import PydanticCustomError

from rlvr.core.errors import ParamsError

# Strict after _from_text: a bool is no number, a number no bool, None no string, a tuple no list.
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]
Dict = Annotated[dict, Strict()]
NonEmptyStr = Annotated[str, Strict(), Field(min_length=1)]


def holds(check: Callable[[Any], bool], text: str) -> AfterValidator:
    """A rule of one value that no Field constraint states: its error line ends with `text`."""

    def checked(value: Any) -> Any:
        if not check(value):
            raise PydanticCustomError("rule", text)
        return value

    return AfterValidator(checked)


def require(ok: bool, name: str, value: Any, rule: str) -> None:
    """A rule between fields (a model validator's): the line names the key it blames."""
    if not ok:
        raise ParamsError(f"params.yaml: {name} = {value!r}: {rule}")


def _from_text(value: Any, annotation: Any) -> Any:
    """`value` read as `annotation` the way YAML text is: "64", " 64 " and 64.0 are the int 64,
    "5e-01" the float 0.5, "true" True, 5 the string "5". What does not read is left as it is, for
    pydantic to reject."""
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        return [_from_text(v, item) for v in value] if isinstance(value, list) else value
    if isinstance(value, bool) or value is None:
        return value
    try:
        if annotation is float and isinstance(value, (int, str)):
            number = float(value)
            return number if math.isfinite(number) else value
        if annotation is int and isinstance(value, (float, str)):
            if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
                return int(value)  # exactly, however long
            number = float(value)  # "6.4e1" from `dvc exp run -S`
            return int(number) if number == int(number) else value
    except (ValueError, OverflowError):  # not a number, or inf / nan for an int
        return value
    if annotation is bool and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if (annotation is str or typing.get_origin(annotation) is Literal) and not isinstance(
        value, (str, dict, list)
    ):
        return str(value)
    return value


def _read_text(cls: Any, value: Any, info: ValidationInfo) -> Any:
    return _from_text(value, cls.__pydantic_fields__[info.field_name].annotation)


def section(path: str) -> Callable[[type], Any]:
    """Declare the params section at `path` (dotted; "" for the whole file). Built in code
    (GRPOParams(...), dataclasses.replace), a bad value is the same ParamsError line."""

    def declare(cls: type) -> Any:
        cls._read_text = field_validator("*", mode="before")(_read_text)
        cls = dataclass(cls, config=ConfigDict(extra="forbid", allow_inf_nan=False))
        init = cls.__init__

        @functools.wraps(init)
        def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                init(self, *args, **kwargs)
            except ValidationError as error:
                raise ParamsError(one_line(error, cls, path)) from None

        cls.__init__ = checked_init
        return cls

    return declare


_adapter = functools.cache(TypeAdapter)


def validate(cls: type, raw: Any) -> Any:
    """A section (the whole file: Params) from its parsed YAML, or one ParamsError line."""
    try:
        return _adapter(cls).validate_python(raw)
    except ValidationError as error:
        raise ParamsError(one_line(error, cls)) from None


@functools.cache
def json_schema(cls: type) -> dict:
    """The JSON Schema pydantic writes for a section: the error lines word ranges from it."""
    return _adapter(cls).json_schema()


def deref(schema: dict, node: dict) -> dict:
    """`node` itself, not its {"$ref": "#/$defs/Name"}."""
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


# pydantic's error types, in our words
_WORDS = {
    "int_type": "must be an integer",
    "float_type": "must be a finite number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be a mapping",
    "dataclass_type": "must be a mapping",
    "list_type": "must be a list",
    "too_short": "must not be empty",
    "string_too_short": "must not be empty",
}
_BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
_UNKNOWN_KEY = ("unexpected_keyword_argument", "invalid_key")  # invalid_key: not a string


def one_line(error: ValidationError, cls: type, path: str = "") -> str:
    """pydantic's errors as our one line: the first problem, naming its key, its value and the
    rule, or, as YAML is read, the unknown keys of the outermost section around it that has some."""
    errors = error.errors()
    first = errors[0]
    unknown = [e["loc"] for e in errors if e["type"] in _UNKNOWN_KEY]
    for depth in range(len(first["loc"]) + 1):
        where = first["loc"][:depth]
        keys = sorted((loc[-1] for loc in unknown if loc[:-1] == where), key=str)
        if keys:
            name, node = _locate(cls, where, path)
            return (
                f"params.yaml: unknown key(s) {keys} in {name or 'top level'}; "
                f"known: {sorted(node['properties'])}"
            )
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, ParamsError):  # a model validator's require
        return str(cause)
    name, node = _locate(cls, first["loc"], path)
    return f"params.yaml: {name} = {first['input']!r}: {_rule(first, node)}"


def _locate(cls: type, loc: tuple, path: str) -> tuple[str, dict]:
    """The dotted key of an error's location (rewards.weights[1]) and its schema."""
    schema = json_schema(cls)
    name, node = path, schema
    for part in loc:
        node = deref(schema, node)
        if isinstance(part, int):
            name, node = f"{name}[{part}]", node["items"]
        else:
            name, node = f"{name}.{part}" if name else part, node["properties"][part]
    return name, deref(schema, node)


def _rule(error: dict, node: dict) -> str:
    kind = error["type"]
    if kind in _WORDS:
        return _WORDS[kind]
    if kind == "too_long":
        return f"must hold at most {node['maxItems']} items"
    if kind == "literal_error":
        return "must be one of: " + ", ".join(choice or "''" for choice in node["enum"])
    if kind in _BOUNDS:  # the whole range, as the schema states it: "must be in [0, 1)"
        low_open, high_open = "exclusiveMinimum" in node, "exclusiveMaximum" in node
        low = node["exclusiveMinimum" if low_open else "minimum"]
        if "maximum" not in node and not high_open:
            return f"must be {'>' if low_open else '>='} {low}"
        high = node["exclusiveMaximum" if high_open else "maximum"]
        return f"must be in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    return error["msg"]  # a `holds` rule words its own
