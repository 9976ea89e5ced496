"""The retrospective: what the run did, whether it helped, and whether it can be trusted.

`build_report` assembles one markdown document from the stages' outputs; `to_html` turns it into a
self-contained HTML page (PNG plots embedded as data URIs, no script, no network). The pieces are
pure functions: the KL/beta diagnosis, the per-prompt audit, the GRPO-vs-PPO cost, provenance.
"""

from __future__ import annotations

import base64
import json
import math
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

LIBRARIES = ("torch", "transformers", "trl", "accelerate", "datasets", "peft", "dvc", "dvclive",
             "great-expectations", "prefect", "matplotlib", "scipy")


# --------------------------------------------------------------------------- KL / beta diagnosis

@dataclass(frozen=True)
class KLThresholds:
    kl_tiny: float          # max smoothed KL below this: the policy barely moved
    plateau_gain: float     # reward gain over the second half below this: it plateaued early
    kl_high: float          # final smoothed KL above this: far from the reference
    kl_rising_ratio: float  # last-quarter KL over third-quarter KL above this: still climbing
    collapse_drop: float    # peak minus final smoothed reward above this: it rose then collapsed
    window: int             # steps in each moving average


def _window_mean(values: Sequence[float], start: int, end: int) -> float:
    chunk = [v for v in values[max(0, start):max(0, end)] if math.isfinite(v)]
    return sum(chunk) / len(chunk) if chunk else math.nan


def _smoothed(values: Sequence[float], window: int) -> list[float]:
    return [_window_mean(values, i - window + 1, i + 1) for i in range(len(values))]


def diagnose_kl(history: Sequence[dict], t: KLThresholds) -> dict:
    """Label the run "too tight", "too loose" or "healthy" by explicit rules, with the values seen.

    too tight: KL stays tiny AND reward plateaus early  -> lower beta
    too loose: KL keeps climbing OR KL ends high OR reward rises then collapses -> raise beta or
               use a schedule
    healthy:   neither, and the reward rose
    """
    rewards = [float(e["reward"]) for e in history if "reward" in e]
    kls = [float(e["kl"]) for e in history if "kl" in e]
    n = len(rewards)
    smooth_reward = _smoothed(rewards, t.window)
    smooth_kl = _smoothed(kls, t.window) if kls else []
    values = {
        "steps": n,
        "reward_start": _window_mean(rewards, 0, t.window),
        "reward_mid": _window_mean(rewards, n // 2 - t.window, n // 2),
        "reward_end": _window_mean(rewards, n - t.window, n),
        "reward_peak": max(smooth_reward, default=math.nan),
        "kl_max": max(smooth_kl, default=math.nan),
        "kl_q3": _window_mean(kls, len(kls) // 2, 3 * len(kls) // 4),
        "kl_q4": _window_mean(kls, 3 * len(kls) // 4, len(kls)),
        "kl_end": _window_mean(kls, len(kls) - t.window, len(kls)),
    }
    gain_second_half = values["reward_end"] - values["reward_mid"]
    drop = values["reward_peak"] - values["reward_end"]
    rising = values["kl_q4"] / values["kl_q3"] if kls and values["kl_q3"] > 0 else math.nan
    rules = [
        {"rule": "KL stays tiny", "value": values["kl_max"], "threshold": f"< {t.kl_tiny}",
         "fired": bool(kls) and values["kl_max"] < t.kl_tiny},
        {"rule": "reward plateaus early (gain over the second half)", "value": gain_second_half,
         "threshold": f"< {t.plateau_gain}", "fired": gain_second_half < t.plateau_gain},
        {"rule": "KL keeps climbing (last quarter / third quarter)", "value": rising,
         "threshold": f"> {t.kl_rising_ratio}", "fired": rising > t.kl_rising_ratio},
        {"rule": "KL ends high", "value": values["kl_end"], "threshold": f"> {t.kl_high}",
         "fired": bool(kls) and values["kl_end"] > t.kl_high},
        {"rule": "reward rises then collapses (peak - end)", "value": drop,
         "threshold": f"> {t.collapse_drop}", "fired": drop > t.collapse_drop},
    ]
    fired = {r["rule"] for r in rules if r["fired"]}
    if {"KL stays tiny", "reward plateaus early (gain over the second half)"} <= fired:
        label, advice = "too tight", "lower beta: the KL penalty holds the policy at the reference"
    elif fired & {"KL keeps climbing (last quarter / third quarter)", "KL ends high",
                  "reward rises then collapses (peak - end)"}:
        label, advice = "too loose", ("raise beta, or use the warmup / adaptive schedule: the "
                                      "policy drifts from the reference")
    elif values["reward_end"] > values["reward_start"]:
        label, advice = "healthy", "KL bounded and reward rising: keep beta"
    else:
        label, advice = "no learning", ("reward did not rise although KL looks fine: check the "
                                        "reward spread, the learning rate and the data")
    if not kls:
        advice += " (beta = 0: no KL was measured, only the reward rules apply)"
    return {"label": label, "advice": advice, "rules": rules, "values": values}


# --------------------------------------------------------------------------- per-prompt audit

def prompt_audit(per_prompt: Sequence[dict], top: int = 5) -> dict:
    """Biggest gains and losses of mean reward, and prompts never / always solved (sampled)."""
    by_delta = sorted(per_prompt, key=lambda r: r["delta"])
    return {
        "gains": [r for r in reversed(by_delta) if r["delta"] > 0][:top],
        "losses": [r for r in by_delta if r["delta"] < 0][:top],
        "never_solved": [r for r in per_prompt
                         if r.get("step0_success") == 0 and r.get("final_success") == 0],
        "always_solved": [r for r in per_prompt
                          if r.get("step0_success") == 1 and r.get("final_success") == 1],
    }


# --------------------------------------------------------------------------- GRPO vs PPO

def ppo_cost(policy_params: int, hidden_size: int, num_generations: int,
             bytes_per_param_trained: int = 16) -> dict:
    """What PPO's critic would cost for this policy, and what GRPO pays instead.

    The critic is the usual choice: the policy's backbone with a scalar value head (hidden + 1
    parameters) instead of the LM head. Trained in fp32 with AdamW it holds weights (4 bytes),
    gradients (4) and two Adam moments (8): 16 bytes per parameter.
    """
    critic = policy_params + hidden_size + 1
    return {
        "policy_parameters": policy_params,
        "critic_parameters": critic,
        "bytes_per_trained_parameter": bytes_per_param_trained,
        "critic_memory_mb": critic * bytes_per_param_trained / 2**20,
        "policy_memory_mb": policy_params * bytes_per_param_trained / 2**20,
        "ppo_rollouts_per_prompt": 1,
        "grpo_rollouts_per_prompt": num_generations,
    }


# --------------------------------------------------------------------------- provenance

def _git(*args: str, cwd: str | Path | None = None) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                              cwd=cwd).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def provenance(lock_path: str | Path = "dvc.lock", timing_dir: str | Path = "reports/timing",
               cwd: str | Path | None = None) -> dict:
    """Commit (and whether the tree was dirty), DVC hashes of data and models, versions, timings."""
    from ruamel.yaml import YAML

    hashes: dict[str, str] = {}
    lock = Path(lock_path)
    if lock.exists():
        stages = (YAML(typ="safe").load(lock.read_text()) or {}).get("stages", {})
        for stage in stages.values():
            for entry in stage.get("deps", []) + stage.get("outs", []):
                path = entry["path"]
                if path.startswith(("data/", "models/")) and "md5" in entry:
                    hashes[path] = entry["md5"]
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    timings = {}
    for file in sorted(Path(timing_dir).glob("*.json")):
        timings[file.stem] = json.loads(file.read_text()).get("seconds")
    return {
        "git_commit": _git("rev-parse", "HEAD", cwd=cwd) or "unknown",
        # outputs the pipeline itself rewrites do not make the tree dirty
        "git_dirty": bool([line for line in _git("status", "--porcelain", cwd=cwd).splitlines()
                           if not re.search(r"(reports/|dvc\.lock)", line)]),
        "dvc_hashes": dict(sorted(hashes.items())),
        "versions": versions,
        "stage_seconds": timings,
    }


# --------------------------------------------------------------------------- the document

def _f(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int,)) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.{digits}g}" if 0 < abs(value) < 0.01 else f"{value:.{digits}f}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(_f(c).replace("|", "\\|").replace("\n", " ")
                                         .replace("<", "&lt;") for c in row) + " |")
    return lines


def _ci(d: dict) -> str:
    return f"{d['value']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"


def build_report(*, evaluation: dict, per_prompt: Sequence[dict], history: Sequence[dict],
                 diagnosis: dict, hyperparameters: Sequence[tuple[str, Any, str]],
                 smoke: dict, step0: dict, validation: dict, gate: dict, cost: dict,
                 prov: dict, params: dict, images: dict[str, str], confidence: float) -> str:
    """The retrospective as markdown; `images` maps a name to a PNG path relative to the report."""
    train, held = evaluation["train"], evaluation["heldout"]
    out: list[str] = ["# GRPO run: retrospective", ""]

    # 1. Verdict
    out += ["## 1. Verdict", ""]
    out.append(
        f"**{evaluation['verdict'].capitalize()}** on held-out prompts: mean sampled reward "
        f"{held['step0']['mean_reward']:.3f} -> {held['final']['mean_reward']:.3f} (paired delta "
        f"{_ci(held['delta_mean_reward'])}, {confidence:.0%} bootstrap CI over "
        f"{held['prompts']} prompts); on the training prompts "
        f"{train['step0']['mean_reward']:.3f} -> {train['final']['mean_reward']:.3f} "
        f"({_ci(train['delta_mean_reward'])}).")
    out.append("")
    out += _table(["split", "prompts", "mean reward step 0", "mean reward final",
                   f"delta [{confidence:.0%} CI]", "greedy success step 0", "greedy success final",
                   "malformed step 0", "malformed final", "KL final vs step 0"],
                  [[name, m["prompts"], m["step0"]["mean_reward"], m["final"]["mean_reward"],
                    _ci(m["delta_mean_reward"]), m["step0"]["greedy_success"],
                    m["final"]["greedy_success"], m["step0"]["malformed_share"],
                    m["final"]["malformed_share"], m.get("kl_final_vs_step0")]
                   for name, m in (("train", train), ("held-out", held))])
    out += ["", f"![step 0 vs final reward per prompt]({images['per_prompt']})", ""]

    # 2. Curves
    out += ["## 2. Curves", "",
            f"{len(history)} GRPO steps; faint lines are per step, solid lines a moving average.",
            "", f"![training curves]({images['curves']})", ""]

    # 3. KL / beta diagnosis
    out += ["## 3. KL / beta diagnosis", "",
            f"**{diagnosis['label']}**: {diagnosis['advice']}.", ""]
    out += _table(["rule", "value seen", "threshold", "fired"],
                  [[r["rule"], r["value"], r["threshold"], "yes" if r["fired"] else "no"]
                   for r in diagnosis["rules"]])
    v = diagnosis["values"]
    out += ["", f"Moving averages over {params['report']['window']} steps: reward "
                f"{_f(v['reward_start'])} (start) -> {_f(v['reward_mid'])} (middle) -> "
                f"{_f(v['reward_end'])} (end), peak {_f(v['reward_peak'])}; KL max "
                f"{_f(v['kl_max'])}, end {_f(v['kl_end'])}. Thresholds live in params.yaml "
                "`report`.", ""]

    # 4. Hyperparameters
    out += ["## 4. Hyperparameters", ""]
    out += _table(["parameter", "value", "why"],
                  [(name, f"`{value}`", why) for name, value, why in hyperparameters])
    out.append("")

    # 5. Smoke checks and data validation
    out += ["## 5. Smoke checks and data validation", "",
            f"Reward-test gate: **{'passed' if gate.get('passed') else 'FAILED'}** "
            f"({gate.get('counts', {}).get('passed')}/{gate.get('counts', {}).get('tests')} tests).",
            "", f"Smoke run: **{'passed' if smoke.get('passed') else 'FAILED'}**; step-0 baseline "
                f"mean reward {_f(step0.get('mean_reward'))} over {step0.get('prompts')} prompts x "
                f"{step0.get('samples_per_prompt')} samples (seed {step0.get('seed')}).", ""]
    out += _table(["check", "passed", "value", "expected"],
                  [[c["name"], "yes" if c["passed"] else "NO", json.dumps(c["value"]),
                    c["expected"]] for c in smoke.get("checks", [])])
    out += ["", f"Data validation: **{'passed' if validation.get('passed') else 'FAILED'}** "
                f"({validation.get('problems', 0)} problems; Data Docs in "
                "`reports/validation/data_docs/`).", ""]
    out += _table(["file", "rows", "rules held", "problems"],
                  [[f["path"], f["rows"], f"{sum(r['success'] for r in f['rules'].values())}/"
                                          f"{len(f['rules'])}", f["problems"]]
                   for f in validation.get("files", {}).values()])
    out.append("")

    # 6. Per-prompt audit
    audit = prompt_audit([r for r in per_prompt if r["split"] == "heldout"])
    out += ["## 6. Per-prompt audit (held-out)", ""]
    for title, key in (("Biggest gains", "gains"), ("Biggest losses", "losses")):
        out += [f"**{title}**", ""]
        rows = [[r["id"], r["prompt"], r["step0_reward"], r["final_reward"], r["delta"],
                 r["step0_greedy"], r["final_greedy"]] for r in audit[key]]
        out += _table(["id", "prompt", "step 0", "final", "delta", "greedy step 0",
                       "greedy final"], rows) if rows else ["none"]
        out.append("")
    for title, key in (("Never solved (no sample correct, neither at step 0 nor at the end)",
                        "never_solved"),
                       ("Always solved (every sample correct, at step 0 and at the end)",
                        "always_solved")):
        ids = [r["id"] for r in audit[key]]
        out += [f"**{title}**: {len(ids)}" + (f": {', '.join(ids)}" if ids else ""), ""]
    train_rows = [r for r in per_prompt if r["split"] == "train"]
    train_audit = prompt_audit(train_rows)
    out += [f"On the {len(train_rows)} training prompts: {sum(r['delta'] > 0 for r in train_rows)} "
            f"gained, {sum(r['delta'] < 0 for r in train_rows)} lost, "
            f"{len(train_audit['never_solved'])} never solved, "
            f"{len(train_audit['always_solved'])} always solved "
            "(every row is in `reports/eval/per_prompt.jsonl`).", ""]

    # 7. GRPO vs PPO
    out += ["## 7. GRPO vs PPO cost", "",
            f"PPO would train a critic next to this policy: the same backbone with a value head, "
            f"{cost['critic_parameters']:,} parameters, {cost['critic_memory_mb']:.1f} MB of "
            f"weights, gradients and AdamW state at {cost['bytes_per_trained_parameter']} bytes "
            f"per parameter (the policy itself needs {cost['policy_memory_mb']:.1f} MB). GRPO has "
            f"no critic: its baseline is the mean reward of the {cost['grpo_rollouts_per_prompt']} "
            f"completions sampled per prompt, so it saves that memory and the critic's forward and "
            f"backward passes, and pays with {cost['grpo_rollouts_per_prompt']} rollouts per "
            f"prompt instead of {cost['ppo_rollouts_per_prompt']}.", ""]

    # 8. Provenance
    out += ["## 8. Provenance", ""]
    out += _table(["what", "value"], [
        ["git commit", prov["git_commit"] + (" (uncommitted changes)" if prov["git_dirty"] else "")],
        ["seed", params.get("seed")],
        *[[f"dvc md5 {path}", md5] for path, md5 in prov["dvc_hashes"].items()],
        *[[f"{name} version", version] for name, version in prov["versions"].items()],
        *[[f"wall time {stage}", f"{seconds:.1f} s"] for stage, seconds
          in prov["stage_seconds"].items() if seconds is not None],
    ])
    out += ["", "<details><summary>params.yaml as used</summary>", "", "```json",
            json.dumps(params, indent=2, default=str), "```", "", "</details>", ""]
    return "\n".join(out)


def to_html(markdown_text: str, base_dir: str | Path, title: str = "GRPO retrospective") -> str:
    """Self-contained HTML: images inlined as base64 PNG, styles inline, no external requests."""
    import markdown

    def inline(match: re.Match) -> str:
        alt, src = match.group(1), match.group(2)
        data = base64.b64encode((Path(base_dir) / src).read_bytes()).decode()
        return f"![{alt}](data:image/png;base64,{data})"

    body = markdown.markdown(re.sub(r"!\[([^\]]*)\]\(([^)]+\.png)\)", inline, markdown_text),
                             extensions=["tables", "fenced_code", "md_in_html"])
    style = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;"
             "padding:0 1em;color:#222}table{border-collapse:collapse;margin:.5em 0;"
             "font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}"
             "th{background:#f3f3f3}img{max-width:100%}code,pre{background:#f6f6f6}"
             "pre{padding:.6em;overflow:auto}")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title><style>{style}</style></head><body>\n{body}\n</body></html>\n")


# --------------------------------------------------------------------------- hyperparameters

REPORTED_SECTIONS = ("seed", "rewards", "model.init", "model.tiny", "model.warm_start",
                     "train.max_steps", "train.save_steps", "train.grpo", "train.beta_schedule",
                     "evaluate.samples")


def _help_text(params_obj: Any, dotted: str) -> str:
    import dataclasses

    obj, parts = params_obj, dotted.split(".")
    for part in parts[:-1]:
        obj = getattr(obj, part, None)
    if obj is None or not dataclasses.is_dataclass(obj):
        return ""
    for f in dataclasses.fields(obj):
        if f.name == parts[-1]:
            return f.metadata.get("help", "")
    return ""


def hyperparameter_table(params_path: str | Path, params_obj: Any) -> list[tuple[str, Any, str]]:
    """(name, value, why) for every reported knob: the why is the comment next to it in
    params.yaml, or the field's help string in rlvr/config.py when there is none."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

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

    for section in REPORTED_SECTIONS:
        node, parent, key = root, None, ""
        for part in section.split("."):
            parent, key, node = node, part, node[part]
        walk(node, parent, key, section)
    return rows


def count_parameters(model_dir: str | Path) -> int | None:
    """Parameters of a saved model, read from its safetensors headers (no weights loaded)."""
    from safetensors import safe_open

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with safe_open(str(file), framework="numpy") as handle:
            for name in handle.keys():
                shape = handle.get_slice(name).get_shape()
                total += math.prod(shape)
    return total
