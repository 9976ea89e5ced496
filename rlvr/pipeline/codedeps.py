"""Which repository files a DVC stage runs, derived from the code; writes them as dvc.yaml's deps.

A stage reruns only when a listed dep changes, so every file whose code it runs must be listed,
and no other: its stage module and every project module it imports, directly or not, including
imports inside functions and the `__init__.py` of every package on the way. `stage_code_files`
follows the imports with `ast` (nothing is imported or run); `written_dvc_yaml` puts exactly those
files in each stage's deps (data deps, outs and comments kept); `uncovered` and `unneeded` say
which files dvc.yaml misses or lists for nothing.

    ./dev run python -m rlvr.pipeline.codedeps          # per stage: files missing, files extra;
                                                        # fails when dvc.yaml differs from --write
    ./dev run python -m rlvr.pipeline.codedeps --write  # rewrite the code deps in dvc.yaml
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Iterable, Sequence
from pathlib import Path

from dvc.dependency.param import ParamsDependency
from dvc.repo import Repo
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedSeq

from rlvr.core.code_closure import ENVIRONMENT_FILES, stage_code_files
from rlvr.core.files import write_text_atomic
from rlvr.params.config import load_params

# Stages that report on every other stage: the retrospective and the model card show the stages'
# code digests (the retrospective also params.yaml's comments), so they depend on all the code and
# on the file itself.
SUMMARY_STAGES = ("report", "publish")
# Where the project's code lives: a dep under one of these is code a stage must run.
CODE_FOLDERS = ("rlvr", "stages", "tests")
# The deps the writer owns: the code, the environment files, and params.yaml as a file (the summary
# stages read its comments). Data deps (${...}) and configs are written by hand and kept.
WRITTEN_FILES = (*ENVIRONMENT_FILES, "params.yaml")


def covered(path: str, deps: Iterable[str]) -> bool:
    """Does a dep list cover `path` (the file itself, or a folder above it)?"""
    return any(path == dep or path.startswith(dep.rstrip("/") + "/") for dep in deps)


def required_deps(
    root: str | Path, stages: Iterable[str], gate_tests: Sequence[str] = ()
) -> dict[str, set[str]]:
    """The files each stage must list: the code it runs, or, for a summary stage, the code every
    stage runs and params.yaml."""
    own = {stage: stage_code_files(root, stage, gate_tests) for stage in stages}
    everything = set().union(*own.values(), {"params.yaml"})
    return {stage: everything if stage in SUMMARY_STAGES else files for stage, files in own.items()}


def uncovered(
    root: str | Path, deps: dict[str, list[str]], gate_tests: Sequence[str] = ()
) -> dict[str, list[str]]:
    """Per stage, the files it must list (required_deps) that its deps do not cover, sorted."""
    required = required_deps(root, deps, gate_tests)
    return {
        stage: sorted(p for p in required[stage] if not covered(p, deps[stage])) for stage in deps
    }


def _code_files(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for folder in CODE_FOLDERS
        for p in (root / folder).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )


def unneeded(
    root: str | Path, deps: dict[str, list[str]], gate_tests: Sequence[str] = ()
) -> dict[str, list[str]]:
    """Per stage, the files of the project's code its deps cover (listed, or inside a listed
    folder) that it does not run: a change there would rerun the stage for nothing."""
    root = Path(root).resolve()
    required = required_deps(root, deps, gate_tests)
    code = _code_files(root)
    return {
        stage: [f for f in code if covered(f, deps[stage]) and f not in required[stage]]
        for stage in deps
    }


def written(dep: str) -> bool:
    """Is this dep one the writer owns (code, the environment files, params.yaml)?"""
    return dep.split("/")[0] in CODE_FOLDERS or dep in WRITTEN_FILES


def _ordered(files: Iterable[str]) -> list[str]:
    files = set(files)
    return sorted(f for f in files if f not in WRITTEN_FILES) + [
        f for f in WRITTEN_FILES if f in files
    ]


def _yaml() -> YAML:
    """ruamel's round trip in dvc.yaml's layout: unchanged input comes out byte for byte."""
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def written_dvc_yaml(root: str | Path = ".", gate_tests: Sequence[str] | None = None) -> str:
    """dvc.yaml with each stage's code deps replaced by exactly the files it must list
    (required_deps), in one sorted block where the first of them stood; every other dep keeps its
    place and comment, and the rest of the file is unchanged."""
    root = Path(root).resolve()
    if gate_tests is None:
        gate_tests = load_params(root / "params.yaml").gate.tests
    yaml = _yaml()
    doc = yaml.load((root / "dvc.yaml").read_text())
    stages = doc["stages"]
    required = required_deps(root, list(stages), gate_tests)
    for name, stage in stages.items():
        body = stage["do"] if "foreach" in stage else stage
        old = body.get("deps") or CommentedSeq()
        comments = {str(dep): old.ca.items.get(i) for i, dep in enumerate(old)}
        new, placed = CommentedSeq(), False
        for dep in old:
            if not written(str(dep)):
                new.append(dep)
            elif not placed:
                new.extend(_ordered(required[name]))
                placed = True
        if not placed:
            new.extend(_ordered(required[name]))
        for i, dep in enumerate(new):
            if comments.get(str(dep)):
                new.ca.items[i] = comments[str(dep)]
        body["deps"] = new
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def dvc_stage_deps(root: str | Path = ".") -> dict[str, list[str]]:
    """Each stage's deps as DVC resolves them (params.yaml interpolated); a per-seed stage
    (train@0, train@1, ...: one definition) under its name, as its first seed resolves it."""
    found: dict[str, list[str]] = {}
    with Repo(str(root)) as repo:
        for stage in repo.index.stages:
            found.setdefault(
                stage.name.split("@", 1)[0],
                [
                    str(Path(dep.def_path))
                    for dep in stage.deps
                    if not isinstance(dep, ParamsDependency)
                ],
            )
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite dvc.yaml's code deps")
    args = parser.parse_args(argv)
    gate_tests = load_params().gate.tests
    text = written_dvc_yaml(".", gate_tests)
    if args.write:
        if text != Path("dvc.yaml").read_text():
            write_text_atomic("dvc.yaml", text)
            print("dvc.yaml: code deps rewritten (`dvc status` says which stages that reruns)")
        else:
            print("dvc.yaml: code deps already exact")
        return 0
    deps = dvc_stage_deps(".")
    missing, extra = uncovered(".", deps, gate_tests), unneeded(".", deps, gate_tests)
    for stage in deps:
        print(
            f"{stage}: {len(missing[stage])} missing, {len(extra[stage])} extra"
            + (f"; missing {', '.join(missing[stage])}" if missing[stage] else "")
            + (f"; extra {', '.join(extra[stage])}" if extra[stage] else "")
        )
    if text != Path("dvc.yaml").read_text():
        print(
            "dvc.yaml differs from its code deps: ./dev run python -m rlvr.pipeline.codedeps --write"
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
