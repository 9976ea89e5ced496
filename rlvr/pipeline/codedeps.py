"""Which repository files a DVC stage runs, derived from the code, to check dvc.yaml's deps.

A stage reruns only when a listed dep changes, so every file whose code it runs must be listed:
its stage module and every project module it imports, directly or not, including imports inside
functions and the `__init__.py` of every package on the way. `stage_code_files` follows the
imports with `ast` (nothing is imported or run); `uncovered` says which of them dvc.yaml misses.

    ./dev run python -m rlvr.pipeline.codedeps      # each stage: the code files dvc.yaml does not list,
                                                    # and the code deps it runs nothing in
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from pathlib import Path

from dvc.dependency.param import ParamsDependency
from dvc.repo import Repo

from rlvr.params.config import load_params

# Files every stage depends on besides code: the pinned library versions and the package and
# pytest configuration (a changed pin changes what the library code does).
ENVIRONMENT_FILES = ("requirements.lock", "pyproject.toml")
# Stages that report on every other stage: the retrospective and the model card show the stages'
# code digests (the retrospective also params.yaml's comments), so they depend on all the code and
# on the file itself.
SUMMARY_STAGES = ("report", "publish")
# Where the project's code lives: a dep under one of these is code a stage must run.
CODE_FOLDERS = ("rlvr", "stages", "tests")


def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _with_packages(root: Path, module: str) -> list[Path]:
    """The module's file and the __init__.py of each package above it (Python runs them all)."""
    parts = module.split(".")
    files = [_module_file(root, ".".join(parts[:i])) for i in range(1, len(parts) + 1)]
    return [f for f in files if f is not None]


def _package_of(root: Path, file: Path) -> list[str]:
    parts = list(file.relative_to(root).with_suffix("").parts)
    return parts[:-1]  # a module's package; for __init__.py, the package itself


def imported_modules(root: Path, file: Path) -> set[str]:
    """Dotted names of every module `file` imports anywhere (top level or inside functions)."""
    tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = _package_of(root, file)
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import mod`
    return {name for name in found if name}


def project_imports(root: Path, file: Path) -> set[Path]:
    """The project's files that importing `file` runs next: each module it imports anywhere and
    the __init__.py of every package on the way."""
    return {
        dep
        for module in imported_modules(root, file)
        if _module_file(root, module)
        for dep in _with_packages(root, module)
    }


def code_closure(root: str | Path, entry_files: Iterable[str | Path]) -> set[str]:
    """Repository-relative paths of the entry files and every project file they import."""
    root = Path(root).resolve()
    todo = [root / f for f in entry_files]
    seen: set[Path] = set()
    while todo:
        file = todo.pop()
        if file in seen or file.suffix != ".py":
            continue
        seen.add(file)
        todo.extend(project_imports(root, file))
    return {str(f.relative_to(root)) for f in seen}


def _python_files(root: Path, paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        target = root / path
        if target.is_dir():
            files += sorted(p for p in target.rglob("*.py") if "__pycache__" not in p.parts)
        elif target.is_file():
            files.append(target)
    return files


def stage_code_files(root: str | Path, stage: str, gate_tests: Sequence[str] = ()) -> set[str]:
    """The code a stage runs: stages/<stage>.py and its imports. The gate also runs the tests
    and doctests it is given (params gate.tests), the conftest.py files pytest loads for them, and
    pytest's configuration."""
    root = Path(root).resolve()
    entries = _with_packages(root, f"stages.{stage}")  # stages/__init__.py runs too
    if stage == "reward_tests":
        tests = _python_files(root, gate_tests)
        conftests = {
            parent / "conftest.py" for test in tests for parent in test.relative_to(root).parents
        }
        entries += tests + [root / c for c in sorted(conftests) if (root / c).is_file()]
    return code_closure(root, entries) | set(ENVIRONMENT_FILES)


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


def unneeded(
    root: str | Path, deps: dict[str, list[str]], gate_tests: Sequence[str] = ()
) -> dict[str, list[str]]:
    """Per stage, the code deps (a file or folder of the project's code) that hold none of the
    files it must list: a change there would rerun the stage for nothing."""
    required = required_deps(root, deps, gate_tests)
    return {
        stage: [
            dep
            for dep in deps[stage]
            if dep.split("/")[0] in CODE_FOLDERS
            and not any(covered(file, [dep]) for file in required[stage])
        ]
        for stage in deps
    }


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


def main() -> int:
    deps, gate_tests = dvc_stage_deps("."), load_params().gate.tests
    missing, extra = uncovered(".", deps, gate_tests), unneeded(".", deps, gate_tests)
    for stage, files in missing.items():
        print(
            f"{stage}: "
            + (", ".join(files) if files else "every file it runs is a dep")
            + (f"; runs nothing in {', '.join(extra[stage])}" if extra[stage] else "")
        )
    return 1 if any(missing.values()) or any(extra.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
