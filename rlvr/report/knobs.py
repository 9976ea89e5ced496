"""The knobs the retrospective reports: which params.yaml sections shape a run, each knob's
reason (the comment next to it, else its help), and which knobs act only under another setting
(NOT_IN_FORCE), so the report can fold those apart."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

REPORTED_SECTIONS = (
    "seed",
    "rewards",
    "model.init",
    "model.tiny",
    "model.warm_start",
    "smoke",
    "train",
    "evaluate",
    "audit",
    "runtime",
)
# The knobs that act only under another setting: (prefix of the dotted name, that setting in
# words, whether it holds in these params). The report folds them apart when it does not hold.
NOT_IN_FORCE: tuple[tuple[str, str, Any], ...] = (
    ("rewards.length.", "'length' in rewards.funcs", lambda p: "length" in p["rewards"]["funcs"]),
    ("model.lora.", "model.lora.enabled true", lambda p: p["model"]["lora"]["enabled"]),
    (
        "train.running_mean_momentum",
        "train.advantage running_mean",
        lambda p: p["train"]["advantage"] == "running_mean",
    ),
    (
        "train.pass_at_k",
        "train.advantage pass_at_k",
        lambda p: p["train"]["advantage"] == "pass_at_k",
    ),
    ("train.accelerate_config", "train.processes above 1", lambda p: p["train"]["processes"] > 1),
    ("train.patience", "train.select best_val", lambda p: p["train"]["select"] == "best_val"),
    (
        "train.max_sampling_rounds",
        "train.dynamic_sampling true",
        lambda p: p["train"]["dynamic_sampling"],
    ),
    (
        "train.resample_unsolved",
        "train.dynamic_sampling true",
        lambda p: p["train"]["dynamic_sampling"],
    ),
    ("train.guides", "train.guidance on", lambda p: p["train"]["guidance"] != "off"),
    (
        "train.guidance_fraction",
        "train.guidance fraction",
        lambda p: p["train"]["guidance"] == "fraction",
    ),
    ("train.guidance_gamma", "train.guidance on", lambda p: p["train"]["guidance"] != "off"),
    ("train.guidance_std", "train.guidance on", lambda p: p["train"]["guidance"] != "off"),
    (
        "train.grpo.epsilon_high",
        "train.grpo.num_iterations above 1",
        lambda p: p["train"]["grpo"]["num_iterations"] > 1,
    ),
    (
        "train.grpo.entropy_target",
        "train.grpo.use_adaptive_entropy true",
        lambda p: p["train"]["grpo"]["use_adaptive_entropy"],
    ),
    (
        "train.grpo.bf16",
        "a GPU (train.grpo.use_cpu false)",
        lambda p: not p["train"]["grpo"]["use_cpu"],
    ),
    (
        "train.grpo.use_vllm",
        "a GPU (train.grpo.use_cpu false)",
        lambda p: not p["train"]["grpo"]["use_cpu"],
    ),
    ("train.grpo.extra", "a field in it", lambda p: bool(p["train"]["grpo"]["extra"])),
    (
        "train.beta_schedule.beta_start",
        "train.beta_schedule.kind warmup or adaptive",
        lambda p: p["train"]["beta_schedule"]["kind"] != "constant",
    ),
    (
        "train.beta_schedule.warmup_steps",
        "train.beta_schedule.kind warmup",
        lambda p: p["train"]["beta_schedule"]["kind"] == "warmup",
    ),
    (
        "train.beta_schedule.target_kl",
        "train.beta_schedule.kind adaptive",
        lambda p: p["train"]["beta_schedule"]["kind"] == "adaptive",
    ),
    (
        "train.beta_schedule.horizon",
        "train.beta_schedule.kind adaptive",
        lambda p: p["train"]["beta_schedule"]["kind"] == "adaptive",
    ),
    ("audit.rft.", "audit.baseline rft", lambda p: p["audit"]["baseline"] == "rft"),
)


def not_in_force(name: str, params: Mapping) -> str:
    """The setting a knob waits for when it does not act in these params (NOT_IN_FORCE), else "".

    >>> p = {"train": {"beta_schedule": {"kind": "constant"}}}
    >>> not_in_force("train.beta_schedule.horizon", p), not_in_force("train.beta_schedule.kind", p)
    ('train.beta_schedule.kind adaptive', '')
    """
    for prefix, setting, holds in NOT_IN_FORCE:
        if name == prefix or (prefix.endswith(".") and name.startswith(prefix)):
            try:
                return "" if holds(params) else setting
            except (KeyError, TypeError):  # a params dict without that section: nothing to hide
                return ""
    return ""


# The model sections that describe the base policy, by model.init (the tiny default's are above).
CHAT = ("model.chat_template", "model.chat_template_kwargs")
MODEL_SECTIONS = {
    "tiny": ("model.tiny", "model.warm_start"),
    "local_llm": ("model.local_llm", *CHAT, "model.lora"),
    "pretrained": ("model.name_or_path", *CHAT, "model.lora"),
}


def reported_sections(init: str) -> tuple[str, ...]:
    """REPORTED_SECTIONS with the model sections that describe `init`'s base policy.

    >>> reported_sections("local_llm")[2:7]
    ('model.init', 'model.local_llm', 'model.chat_template', 'model.chat_template_kwargs', 'model.lora')
    """
    tiny = MODEL_SECTIONS["tiny"]
    at = REPORTED_SECTIONS.index(tiny[0])
    return (*REPORTED_SECTIONS[:at], *MODEL_SECTIONS[init], *REPORTED_SECTIONS[at + len(tiny) :])


def _help_text(params_obj: Any, dotted: str) -> str:
    obj, parts = params_obj, dotted.split(".")
    for part in parts[:-1]:
        obj = getattr(obj, part, None)
    field = getattr(type(obj), "__pydantic_fields__", {}).get(parts[-1])  # a params section's
    return field.description or "" if field is not None else ""


def hyperparameter_table(params_path: str | Path, params_obj: Any) -> list[tuple[str, Any, str]]:
    """(name, value, why) for every reported knob: the why is the comment next to it in
    params.yaml, or the field's help string in rlvr/params/config.py when there is none."""
    root = YAML().load(Path(params_path).read_text())
    rows: list[tuple[str, Any, str]] = []

    def comment(node: CommentedMap, key: str) -> str:
        tokens = node.ca.items.get(key) if isinstance(node, CommentedMap) else None
        token = tokens[2] if tokens and len(tokens) > 2 else None
        return token.value.strip().lstrip("#").strip() if token is not None else ""

    def walk(node: Any, parent: Any, key: str, dotted: str) -> None:
        if isinstance(node, CommentedMap) and node:
            for child in node:
                walk(node[child], node, child, f"{dotted}.{child}" if dotted else child)
            return
        why = comment(parent, key) or _help_text(params_obj, dotted)
        value = list(node) if isinstance(node, list) else node
        rows.append((dotted, value, why))

    for section in reported_sections(params_obj.model.init):
        node, parent, key = root, None, ""
        for part in section.split("."):
            parent, key, node = node, part, node[part]
        walk(node, parent, key, section)
    return rows
