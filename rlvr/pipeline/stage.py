"""What every stage script shares: params loading, the gate check, and errors as plain lines.

A stage is `main(params) -> int`; `run_stage` loads params.yaml, checks the reward names and the
reward-test gate (unless the stage is the gate itself) and turns the pipeline's own errors into
one line on stderr and a non-zero exit, so `dvc repro` stops with a readable reason. Any other
exception is a bug: its traceback, then one line naming the stage and saying so.

The params a stage gets are a view that only lets it read what dvc.yaml declares for it (its
`params:` entries and the `${...}` values its deps and outs interpolate): DVC reruns a stage only
when a declared param changes, so reading an undeclared one would let the cache lie. Such a read
fails at once, naming the stage and the key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from rlvr.core import timing
from rlvr.core.errors import PipelineError
from rlvr.core.faults import Stopped, disk_full_line, full_disk_folder, stop_on_sigterm
from rlvr.core.files import write_json
from rlvr.grpo import distributed
from rlvr.params.config import Params, load_params
from rlvr.pipeline.gate import require_gate
from rlvr.rewards.registry import check_reward_names

DVC_YAML = Path("dvc.yaml")
WHOLE_FILE = ""  # a stage that declares all of params.yaml
FOREACH_ITEM = "item"  # a foreach stage's own value (${item}: the seed), not a param
_INTERPOLATION = re.compile(r"\$\{\s*([A-Za-z0-9_.]+)\s*\}")


# Deprecation warnings the pinned libraries raise from their own code on every run, whatever the
# params: silenced at every stage's entry (other warnings still show). Revisit on an upgrade of
# requirements.lock.
KNOWN_LIBRARY_WARNINGS = ((FutureWarning, r"`is_gradient_checkpointing` is deprecated"),)


def quiet_library_noise() -> None:
    """Silence the known library warnings, and the libraries' own progress bars (loading a few
    weights, mapping a small dataset): the console keeps one bar per long loop, the trainer's."""
    for category, message in KNOWN_LIBRARY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when the libraries load
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    # only libraries the stage has loaded already: importing them here would cost a stage that
    # never uses them ~0.8 s (transformers) and ~0.9 s (datasets)
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    if "datasets" in sys.modules:
        from datasets.utils.tqdm import disable_progress_bars

        disable_progress_bars()


class UndeclaredParam(Exception):
    """A stage read a param that dvc.yaml does not declare for it: a bug in dvc.yaml or the stage
    (not a PipelineError: it must print its traceback)."""


def _strings(node: Any) -> Iterable[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def declared_params(stage: str, dvc_yaml: str | Path = DVC_YAML) -> set[str]:
    """The dotted params.yaml keys a stage may read: its `params:` list and its interpolations.

    WHOLE_FILE ("") in the set means all of params.yaml.
    """
    spec = (YAML(typ="safe").load(Path(dvc_yaml).read_text()) or {})["stages"][stage]
    if "foreach" in spec:  # one stage per seed (train@0, ...): their shared definition
        spec = spec["do"]
    keys = set()
    for entry in spec.get("params") or []:
        if isinstance(entry, str):
            keys.add(entry)
        elif isinstance(entry, dict):
            for file, names in entry.items():
                if file != "params.yaml":
                    raise ValueError(
                        f"dvc.yaml: stage {stage} reads params from {file}; the "
                        "pipeline's params all live in params.yaml"
                    )
                if names:
                    keys.update(names)
                else:
                    keys.add(WHOLE_FILE)
    for text in _strings({k: v for k, v in spec.items() if k != "params"}):
        keys.update(_INTERPOLATION.findall(text))
    return keys - {FOREACH_ITEM}


class ParamsView:
    """Read-only view of a params dataclass: reading a key outside `allowed` raises
    UndeclaredParam. A fully declared section is returned as the dataclass itself. What a stage's
    main() takes (check_params, report and publish declare the whole file: Params itself).

    Which keys a stage reads may depend on its code's own arguments, never on params' values
    (read every key a branch needs before branching on a value): an undeclared key then fails on
    the default run, not only on the values that would reach it.

    >>> view = ParamsView(Params(), {"seed", "train.grpo"}, "smoke")
    >>> view.train.grpo.beta, view.seed
    (0.05, 0)
    >>> view.train.max_steps
    Traceback (most recent call last):
    ...
    rlvr.pipeline.stage.UndeclaredParam: stage smoke reads params.yaml train.max_steps, which dvc.yaml does not declare for it: add it to the stage's params in dvc.yaml
    """  # noqa: E501 (one-line outputs and tables)

    def __init__(self, obj: Any, allowed: set[str], stage: str, prefix: str = "") -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_allowed", allowed)
        object.__setattr__(self, "_stage", stage)
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        key = f"{self._prefix}.{name}" if self._prefix else name
        value = getattr(self._obj, name)
        if any(a == WHOLE_FILE or key == a or key.startswith(a + ".") for a in self._allowed):
            return value
        if dataclasses.is_dataclass(value) and any(a.startswith(key + ".") for a in self._allowed):
            return ParamsView(value, self._allowed, self._stage, key)
        raise UndeclaredParam(
            f"stage {self._stage} reads params.yaml {key}, which dvc.yaml does "
            "not declare for it: add it to the stage's params in dvc.yaml"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("params are read-only")

    def __repr__(self) -> str:  # never the values: printing a section would read all of it
        return f"ParamsView({self._stage}: {self._prefix or 'params'})"


def stage_view(
    params: Params, stage: str, dvc_yaml: str | Path = DVC_YAML, seeded: bool = False
) -> Params | ParamsView:
    """The params as the stage may see them (the Params itself if it declares the whole file);
    a seeded stage also sees `seed`, its own (its command line, which DVC follows)."""
    allowed = declared_params(stage, dvc_yaml) | ({"seed"} if seeded else set())
    return params if WHOLE_FILE in allowed else ParamsView(params, allowed, stage)


def _parts_file(params: Params, name: str) -> Path:
    """Where a launched stage's main rank leaves its timing parts (rlvr.core.timing) for the launcher
    (not *.json: the flows list the timing files by that suffix)."""
    return Path(params.paths.timing) / f".{name}.parts"


def _record_failure(label: str, line: str, in_rank: bool) -> None:
    """Leave the line a stage stopped with where the timing goes (not an output: DVC removes
    nothing there), so stage recipe can name a seed that has no results and why. Best effort:
    the line is printed already, and params.yaml may be what failed to load."""
    if in_rank:
        return  # the launcher records it (a rank's line comes back to it)
    with contextlib.suppress(Exception):
        write_json(
            Path(load_params().paths.timing) / f"{label}.json", {"exit_code": 1, "error": line}
        )


def failure_line(timing_dir: str | Path, label: str) -> str | None:
    """The line stage `label` last stopped with (None: it did not fail, or left no record)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return json.loads((Path(timing_dir) / f"{label}.json").read_text()).get("error")
    return None


def seed_argument(name: str, argv: list[str]) -> int:
    """The RL seed a per-seed stage runs for: its one command-line argument (dvc.yaml passes
    `${item}`, one stage per `audit.seeds`).

    >>> seed_argument("train", ["3"])
    3
    >>> seed_argument("train", [])
    Traceback (most recent call last):
    ...
    rlvr.core.errors.PipelineError: stage train runs once per RL seed: python -m stages.train SEED (dvc repro runs one per audit.seeds), got []
    """  # noqa: E501 (one-line outputs and tables)
    if len(argv) == 1 and argv[0].isdigit():
        return int(argv[0])
    raise PipelineError(
        f"stage {name} runs once per RL seed: python -m stages.{name} SEED "
        f"(dvc repro runs one per audit.seeds), got {argv}"
    )


def stage_label(name: str, seed: int | None) -> str:
    """How DVC names the stage: `train@3` for a per-seed stage.

    >>> stage_label("train", 3), stage_label("smoke", None)
    ('train@3', 'smoke')
    """
    return name if seed is None else f"{name}@{seed}"


def run_stage(
    name: str,
    main: Callable[[Params | ParamsView], int],
    gated: bool = True,
    launchable: bool = False,
    seeded: bool = False,
) -> None:
    """Load params, check the gate, run `main`; a launchable stage (smoke, train) with
    train.processes above 1 runs `main` in that many ranks under accelerate (rlvr.grpo.distributed).
    A seeded stage (train, evaluate: one per `audit.seeds`) takes its RL seed as its argument and
    sees it as `params.seed`."""
    started = time.perf_counter()
    timing.PARTS.clear()
    quiet_library_noise()
    stop_on_sigterm()
    in_rank = distributed.launched()
    seed, label = None, name
    try:
        params = load_params()
        if seeded:
            seed = seed_argument(name, sys.argv[1:])
            params, label = dataclasses.replace(params, seed=seed), stage_label(name, seed)
        if gated:  # the gate runs first: it must report broken reward code, not crash on it
            require_gate(params.paths.gate_verdict)
            check_reward_names(params.rewards.funcs)
        train = params.train
        if launchable and train.processes > 1 and not in_rank:
            _parts_file(params, label).unlink(missing_ok=True)
            code = distributed.launch(
                label,
                f"stages.{name}",
                train.processes,
                use_cpu=train.grpo.use_cpu,
                config_name=train.accelerate_config,
                script_args=sys.argv[1:] if seeded else (),
            )
            with contextlib.suppress(OSError, ValueError):  # none: the ranks measured nothing
                timing.PARTS.update(json.loads(_parts_file(params, label).read_text()))
                _parts_file(params, label).unlink()
        else:
            if in_rank:
                distributed.start_rank(label, use_cpu=train.grpo.use_cpu)
            code = main(stage_view(params, name, seeded=seeded))
    except PipelineError as error:
        if not distributed.report_failure(f"{label}: {error}"):
            print(f"{label}: {error}", file=sys.stderr)
        _record_failure(label, f"{label}: {error}", in_rank)
        sys.exit(Stopped.exit_code if isinstance(error, Stopped) else 1)
    except Exception as error:  # noqa: BLE001 - a bug: its traceback, then one line that says so
        folder = full_disk_folder(error)
        # not a bug: the machine's disk (train says more: rlvr.pipeline.training)
        if folder is not None:
            line = f"{label}: " + disk_full_line(
                folder, f"`dvc repro` runs {label} again, keeping the stages before it"
            )
            if not distributed.report_failure(line):
                print(line, file=sys.stderr)
            _record_failure(label, line, in_rank)
            sys.exit(1)
        traceback.print_exc()
        line = (
            f"{label}: FAILED on an unexpected error: this is a bug in the pipeline, please "
            "report it with the traceback above"
        )
        print(line, file=sys.stderr)
        _record_failure(label, f"{label}: {type(error).__name__}: {error}", in_rank)
        sys.exit(1)
    if in_rank:  # the launcher times the whole stage and says how it ended
        if timing.PARTS and distributed.is_main_process():
            write_json(_parts_file(params, label), timing.PARTS)
        if code:  # a failure the stage has printed itself (smoke's failed checks)
            distributed.report_failure("")
        else:
            distributed.end_rank()
        sys.exit(code)
    seconds = time.perf_counter() - started
    # Wall time per stage, for the console and the flows; kept out of every output DVC records,
    # which must be identical between runs with the same seed.
    write_json(
        Path(params.paths.timing) / f"{label}.json",
        {"seconds": round(seconds, 1), "exit_code": code, **timing.PARTS},
    )
    print(f"{label}: {'done' if code == 0 else 'FAILED'} in {seconds:.1f} s", file=sys.stderr)
    sys.exit(code)
