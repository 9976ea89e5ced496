"""The repository files a stage runs, read from the code with `ast` (nothing is imported or run):
its stage module and every project module it imports, directly or not, including imports inside
functions and the `__init__.py` of every package on the way. dvc.yaml's code deps are written from
it (rlvr/pipeline/codedeps.py), and a training run's resume fingerprint hashes the same files."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from pathlib import Path

# Files every stage depends on besides code: the pinned library versions and the package and
# pytest configuration (a changed pin changes what the library code does).
ENVIRONMENT_FILES = ("requirements.lock", "pyproject.toml")


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


def conftest_cut(test_paths: Sequence[str]) -> str | None:
    """The gate's `--confcutdir`: the deepest folder holding every gate path under tests/ (e.g.
    tests/rewards), so pytest loads no conftest.py above it (tests/conftest.py and the end-to-end
    helpers it imports); None when no gate path is under tests/.

    >>> conftest_cut(["tests/rewards", "rlvr/rewards"])
    'tests/rewards'
    >>> conftest_cut(["tests/rewards/test_a.py", "tests/other"])
    'tests'
    """
    under = [Path(p) for p in test_paths if Path(p).parts[:1] == ("tests",)]
    if not under:
        return None
    parts = [p.parts if not p.suffix else p.parent.parts for p in under]
    common = [c[0] for c in zip(*parts, strict=False) if len(set(c)) == 1]
    return str(Path(*common))


def stage_code_files(root: str | Path, stage: str, gate_tests: Sequence[str] = ()) -> set[str]:
    """The code a stage runs: stages/<stage>.py and its imports. The gate also runs the tests
    and doctests it is given (params gate.tests), the conftest.py files pytest loads for them (none
    in a folder above `conftest_cut`), and pytest's configuration."""
    root = Path(root).resolve()
    entries = _with_packages(root, f"stages.{stage}")  # stages/__init__.py runs too
    if stage == "reward_tests":
        tests = _python_files(root, gate_tests)
        cut = conftest_cut(gate_tests)
        above = set(Path(cut).parents) if cut else set()
        conftests = {
            parent / "conftest.py"
            for test in tests
            for parent in test.relative_to(root).parents
            if parent not in above
        }
        entries += tests + [root / c for c in sorted(conftests) if (root / c).is_file()]
    return code_closure(root, entries) | set(ENVIRONMENT_FILES)
