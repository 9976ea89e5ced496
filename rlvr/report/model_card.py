"""The published model: models/final = the trained weights (train's models/trained) plus a
README.md model card, so the folder reads like a hub model and loads with `from_pretrained` as it
is (through peft when it holds a LoRA adapter).

The card says what made the weights: the base model, the data md5s, the key params, the audit's
headline figures and verdict, the commit (and which files the run depends on differed from it)
and the code digest.
Every hash is the one of the run that made the thing (rlvr.report.provenance). Text from params or data
(paths, names, the pattern) enters the markdown escaped (rlvr.report.render), and the YAML header
holds only JSON-quoted strings.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.core.errors import PipelineError
from rlvr.core.files import remove_tree
from rlvr.core.seeds import seed_paths
from rlvr.params.config import data_files, test_file_reader
from rlvr.report.metrics import eval_metrics
from rlvr.report.provenance import (
    UNKNOWN_COMMIT,
    library_versions,
    provenance,
    read_lock,
    sources_state,
)
from rlvr.report.render import md_code, md_escape, md_table

# The protocol in one sentence (docs/audit.md holds it in full): the card and the report
# (rlvr.report.retrospective) both print it.
PROTOCOL = (
    "the sealed test rows (`data.eval_path`) audit the recipe chosen on the validation rows "
    "(`data.val_path`); the verdict rests on one primary figure, the held-out mean reward gain "
    "over step 0, and every other figure is secondary, Holm-corrected"
)

CARD_FILE = "README.md"
ADAPTER_CONFIG = "adapter_config.json"
HEADLINE = (  # metrics/eval.json key (step 0), key (final), what it is
    ("reward0", "reward", "mean reward, {n} samples per prompt"),
    ("greedy0", "greedy", "greedy success"),
    ("pass1_0", "pass1", "pass@1"),
    ("passn_0", "passn", "pass@{n}"),
)


def base_description(model) -> str:
    """What the policy started from, in words, from params.yaml's model section."""
    if model.init == "pretrained":
        return model.name_or_path
    if model.init == "local_llm":
        size = model.local_llm
        return (
            f"a Qwen3-architecture model built locally (model.init local_llm: random init, "
            f"{size.num_hidden_layers} layers x {size.hidden_size}, vocab "
            f"{size.vocab_size})"
        )
    return "a tiny model built locally (model.init tiny: random init, then a warm start)"


def key_params(params) -> list[tuple[str, Any]]:
    """The params a reader of the card needs to know what training did (all of them are in the
    run's params.yaml and the report)."""
    model, train, grpo, rewards = params.model, params.train, params.train.grpo, params.rewards
    rows = [("seed", params.seed), ("model.init", model.init)]
    if model.init == "pretrained":
        rows.append(("model.name_or_path", model.name_or_path))
    if model.lora.enabled:
        rows.append(
            (
                "model.lora",
                f"r {model.lora.r}, alpha {model.lora.alpha}, "
                f"dropout {model.lora.dropout}, {model.lora.target_modules}",
            )
        )
    rows += [
        ("model.warm_start.steps", model.warm_start.steps if model.init == "tiny" else None),
        (
            "rewards",
            ", ".join(
                f"{name} x {weight:g}" for name, weight in zip(rewards.funcs, rewards.weights)
            ),
        ),
        ("rewards.format_pattern", rewards.format_pattern),
        ("train.max_steps", train.max_steps),
        ("train.advantage", train.advantage),
        ("train.dynamic_sampling", train.dynamic_sampling),
        ("train.resample_unsolved", train.resample_unsolved),
        ("train.select", train.select),
        ("train.grpo.num_generations", grpo.num_generations),
        ("train.grpo.per_device_train_batch_size", grpo.per_device_train_batch_size),
        ("train.grpo.learning_rate", grpo.learning_rate),
        ("train.grpo.beta", grpo.beta),
        ("train.beta_schedule.kind", train.beta_schedule.kind),
        ("train.grpo.temperature", grpo.temperature),
        ("train.grpo.max_completion_length", grpo.max_completion_length),
        ("train.grpo.loss_type", grpo.loss_type),
        ("evaluate.samples", params.evaluate.samples),
    ]
    return [(key, value) for key, value in rows if value is not None]


def combined_digest(code: Mapping[str, Mapping]) -> str:
    """One sha256 over each stage's code digest (rlvr.report.provenance.code_digests), stage by stage.

    >>> a, b = {"digest": "1"}, {"digest": "2"}
    >>> combined_digest({"b": b, "a": a}) == combined_digest({"a": a, "b": b})
    True
    >>> combined_digest({"a": a}) == combined_digest({"a": b})
    False
    """
    text = "".join(f"{stage}\0{code[stage]['digest']}\n" for stage in sorted(code))
    return hashlib.sha256(text.encode()).hexdigest()


def quoted(text: str) -> str:
    """`text` as a double-quoted string that reads the same in JSON, YAML and Python, with the
    characters markup or a code fence could act on written as escapes; printable characters
    outside ASCII stay as they are, and an unprintable one beyond U+FFFF (no escape reads the
    same in all three) becomes U+FFFD.

    >>> print(quoted('a"<b>`é\\n'))
    "a\\"\\u003cb\\u003e\\u0060é\\u000a"
    """
    out = []
    for char in text:
        if char.isprintable() and char not in '"\\<>&`':
            out.append(char)
        elif char == '"' or char == "\\":
            out.append("\\" + char)
        else:
            out.append(f"\\u{ord(char) if ord(char) < 0x10000 else 0xFFFD:04x}")
    return '"' + "".join(out) + '"'


def _figure(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _yaml_header(library: str, base_hub_id: str | None) -> list[str]:
    lines = [
        "---",
        f"library_name: {library}",
        "pipeline_tag: text-generation",
        "tags: [grpo, trl, rlvr]",
    ]
    if base_hub_id:  # a quoted string: no value can break out of the header
        lines.append(f"base_model: {quoted(base_hub_id)}")
    return lines + ["---", ""]


def _made_where(git: Mapping[str, Any]) -> str:
    if git["commit"] == UNKNOWN_COMMIT:
        return "outside a git repository (no commit to name)."
    changed = git.get("changed") or []
    return f"at commit {md_code(git['commit'])}" + (
        f", with uncommitted changes to {', '.join(md_code(p) for p in changed)}."
        if changed
        else " (no uncommitted changes)."
    )


def model_card(
    *,
    folder: str,
    base: str,
    base_hub_id: str | None,
    base_md5: str,
    adapter: Mapping | None,
    data: Mapping[str, str],
    params: Sequence[tuple[str, Any]],
    metrics: Mapping[str, Any],
    verdict_line: str,
    samples: int,
    confidence: float,
    git: Mapping[str, Any],
    code_digest: str,
    weights_md5: str,
    versions: Mapping[str, str],
    seed: int | None = None,
    seed_reason: str = "",
    recipe: Mapping[str, Any] | None = None,
) -> str:
    """The card's markdown for the model in `folder`. `adapter`: the adapter_config.json of a
    LoRA folder (None for full weights); `data`: path -> md5; `metrics`: the published seed's
    headline (rlvr.report.metrics.eval_metrics), its interval at `confidence`; `git`: `commit` and
    `changed`, the files the run depends on that differed from it
    (rlvr.report.provenance.sources_state); `seed`, `seed_reason`: which RL seed these weights are and
    why; `recipe`: metrics/recipe.json, the recipe's figures over its seeds."""
    lora = adapter is not None
    changed = git.get("changed") or []
    out = _yaml_header("peft" if lora else "transformers", base_hub_id)
    title = md_escape(metrics.get("verdict", "not evaluated"))
    if recipe:
        title = (
            f"{md_escape(recipe['verdict'])} over {len(recipe['seeds'])} seeds (this seed: {title})"
        )
    out += [
        f"# GRPO policy: {title}",
        "",
        f"Post-trained with GRPO (TRL's GRPOTrainer) on verifiable rewards from "
        f"{md_escape(base)}, by `dvc repro` {_made_where(git)}",
        "",
    ]
    if seed is not None:
        out += [
            f"These weights are RL seed {seed}'s: {md_escape(seed_reason)}. The test rows "
            "played no part in the choice.",
            "",
        ]
    out += [
        "## Result",
        "",
        "On the held-out test rows, step 0 (the base) against this model, the same seeded "
        "samples; the delta's interval is a paired bootstrap over prompts.",
        "",
        f"The protocol (docs/audit.md in the pipeline's repository): {PROTOCOL}.",
        "",
    ]
    out += md_table(
        ["figure", "step 0", "this model"],
        [
            [label.format(n=samples), _figure(metrics.get(before)), _figure(metrics.get(after))]
            for before, after, label in HEADLINE
        ],
    )
    interval = f"[{_figure(metrics.get('ci_low'))}, {_figure(metrics.get('ci_high'))}]"
    out += [
        "",
        f"Mean reward delta, {confidence:.0%} interval: {interval}.",
        "",
        f"Verdict (this run): {md_escape(verdict_line)}",
        "",
    ]
    if recipe:
        out += _recipe_lines(recipe, metrics, samples, confidence)
    out += ["## Base model", ""]
    out += md_table(
        ["what", "value"],
        [
            ["base", base],
            ["models/base md5 (prepare_model)", base_md5],
            [
                "these weights",
                (
                    f"a LoRA adapter (r {adapter.get('r')}, alpha "
                    f"{adapter.get('lora_alpha')}) on "
                    f"{adapter.get('base_model_name_or_path')}"
                )
                if lora
                else "the full model",
            ],
            ["their md5 (train)", weights_md5],
        ],
    )
    out += ["", "## Data", ""]
    out += md_table(["file", "md5"], [[path, md5] for path, md5 in data.items()])
    out += ["", "## Key params", ""]
    out += md_table(["param", "value"], [[key, value] for key, value in params])
    out += ["", "## Provenance", ""]
    out += md_table(
        ["what", "value"],
        [
            ["commit (the last to change a file the pipeline depends on)", git["commit"]],
            ["uncommitted changes", ", ".join(changed) if changed else "none"],
            ["code digest (sha256 over every stage's code digest)", code_digest],
            *[[f"{name} version", version] for name, version in versions.items()],
        ],
    )
    where = quoted(folder)  # a Python string literal, whatever the path holds
    load = (
        [
            "from peft import AutoPeftModelForCausalLM",
            "from transformers import AutoTokenizer",
            f"model = AutoPeftModelForCausalLM.from_pretrained({where})",
        ]
        if lora
        else [
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            f"model = AutoModelForCausalLM.from_pretrained({where})",
        ]
    )
    out += [
        "",
        "## Load",
        "",
        "```python",
        *load,
        f"tokenizer = AutoTokenizer.from_pretrained({where})",
        "```",
        "",
    ]
    if lora:
        out += [
            "The adapter names its base as `base_model_name_or_path` in adapter_config.json: "
            "run from the project's root when that is a local folder.",
            "",
        ]
    out += ["The per-prompt audit and every curve are in reports/retrospective.html.", ""]
    return "\n".join(out)


def _recipe_lines(
    recipe: Mapping[str, Any], metrics: Mapping[str, Any], samples: int, confidence: float
) -> list[str]:
    """The recipe's figures (metrics/recipe.json) beside this seed's: what the recipe does over
    its seeds, of which this model is one draw."""
    delta = recipe.get("delta_mean_reward")
    pooled = (
        f"{delta['value']:+.3f} [{delta['ci_low']:+.3f}, {delta['ci_high']:+.3f}]"
        if delta
        else "n/a"
    )
    mine = (
        "n/a"
        if metrics.get("ci_low") is None
        else (
            f"{metrics['reward'] - metrics['reward0']:+.3f} [{metrics['ci_low']:+.3f}, "
            f"{metrics['ci_high']:+.3f}]"
        )
    )
    out = [
        "## The recipe over its seeds",
        "",
        f"The same recipe trained once per RL seed ({', '.join(map(str, recipe['seeds']))}); "
        f"its intervals ({confidence:.0%}) hold training noise and prompt noise "
        "(reports/recipe/summary.json).",
        "",
    ]
    out += md_table(
        ["held-out figure", "this seed", "the recipe, pooled"],
        [
            ["mean reward delta [interval]", mine, pooled],
            ["pass@1 final", _figure(metrics.get("pass1")), _figure(recipe.get("pass1_final"))],
            [
                f"pass@{samples} final",
                _figure(metrics.get("passn")),
                _figure(recipe.get("passn_final")),
            ],
            ["verdict", metrics.get("verdict", "n/a"), recipe["verdict"]],
        ],
    )
    return out + [""]


def card_body(card: str) -> str:
    """The card without its YAML header (what a page that is not the hub shows).

    >>> card_body("---\\nlibrary_name: peft\\n---\\n\\n# GRPO policy")
    '# GRPO policy'
    """
    if card.startswith("---\n"):
        end = card.find("\n---\n", 4)
        if end != -1:
            return card[end + 5 :].lstrip("\n")
    return card


def publish_folder(weights: str | Path, final: str | Path, card: str) -> None:
    """final = a copy of `weights` plus the card, swapped in by two renames: a failure leaves
    the old folder whole (a kill between the renames leaves it as .<name>.old beside it), never
    half of either."""
    weights, final = Path(weights), Path(final)
    staging = final.parent / f".{final.name}.staging"
    old = final.parent / f".{final.name}.old"
    for leftover in (staging, old):
        shutil.rmtree(leftover, ignore_errors=True)
    try:
        shutil.copytree(weights, staging)
        (staging / CARD_FILE).write_text(card, encoding="utf-8")
        if final.exists():
            final.rename(old)
        try:
            staging.rename(final)
        except OSError:
            if old.exists():
                old.rename(final)
            raise
        remove_tree(old)  # the old weights: a leftover is cleared next time
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def run_card(params) -> tuple[str, str]:
    """The published seed's folder and the card of the run params.yaml describes, from what its
    stages wrote: the recipe (which seed, its figures), that seed's trained folder and
    evaluation, and dvc.lock (md5s, code digests, the commit)."""
    paths, model = params.paths, params.model
    recipe = json.loads(Path(paths.recipe_summary).read_text())
    if "published_seed" not in recipe:
        raise PipelineError(
            f"{paths.recipe_summary} names no seed with results to publish: "
            f"{recipe['verdict_line']}"
        )
    run = seed_paths(paths, recipe["published_seed"])
    prov = provenance(
        data_files(params),
        [paths.base_model, run.trained_model],
        current_stage="publish",
        read_by=test_file_reader(params),
    )
    adapter_file = Path(run.trained_model) / ADAPTER_CONFIG
    summary = json.loads(Path(run.eval_summary).read_text())
    card = model_card(
        folder=paths.final_model,
        base=base_description(model),
        base_hub_id=model.name_or_path if model.init == "pretrained" else None,
        base_md5=prov["models"][paths.base_model],
        adapter=json.loads(adapter_file.read_text()) if adapter_file.exists() else None,
        data=prov["data"],
        params=key_params(params),
        metrics=eval_metrics(summary),
        verdict_line=summary["verdict_line"],
        samples=params.evaluate.samples,
        confidence=params.evaluate.confidence,
        git=sources_state(read_lock()),
        code_digest=combined_digest(prov["code"]),
        weights_md5=prov["models"][run.trained_model],
        versions=library_versions(("torch", "transformers", "trl", "peft")),
        seed=run.seed,
        seed_reason=recipe["published_reason"],
        recipe=json.loads(Path(paths.recipe_metrics).read_text()),
    )
    return run.trained_model, card
