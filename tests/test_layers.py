"""The library's packages are layers: each imports only the packages the README's tree lists below
it (imports inside functions count), the shared vocabulary at the bottom, and no module imports
itself back through others. The tree is the one home of the order; this test holds the code to it."""

import re
from pathlib import Path

import pytest

from rlvr.core.code_closure import project_imports

ROOT = Path(__file__).resolve().parents[1]


def readme_layers(readme: str) -> list[str]:
    """rlvr's packages in the README's tree, bottom first (the tree lists the top one first)."""
    block = re.search(r"^├── rlvr/.*?\n((?:│   .*\n)+)", readme, flags=re.M).group(1)
    return [name for name in re.findall(r"^│   [├└]── (\w+)/", block, flags=re.M)][::-1]


def import_graph(root: Path, package: str = "rlvr") -> dict[Path, set[Path]]:
    """Each module of the package -> the package's modules it imports. The __init__.py of the
    module's own packages is left out: Python has run it before the module, so importing it is
    no dependency (a package's __init__ may gather its modules' names)."""
    files = sorted(p for p in (root / package).rglob("*.py") if "__pycache__" not in p.parts)
    return {
        f: {
            d
            for d in project_imports(root, f)
            if d != f
            and d.is_relative_to(root / package)
            and not (d.name == "__init__.py" and f.is_relative_to(d.parent))
        }
        for f in files
        if f != root / package / "__init__.py"
    }


def upward_imports(root: Path, layers: list[str], package: str = "rlvr") -> list[str]:
    """`a.py -> b.py` for each import from a layer to one above it (or into a module at the
    package's root, which no layer may hold)."""

    def layer(file: Path) -> int:
        parts = file.relative_to(root / package).parts
        return layers.index(parts[0]) if len(parts) > 1 and parts[0] in layers else len(layers)

    return sorted(
        f"{a.relative_to(root)} -> {b.relative_to(root)}"
        for a, deps in import_graph(root, package).items()
        for b in deps
        if layer(b) > layer(a)
    )


def cycles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """One cycle per strongly connected group of modules that import each other (Tarjan)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    found: list[list[Path]] = []

    def visit(node: Path) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


LAYERS = readme_layers((ROOT / "README.md").read_text())


def test_the_readme_names_every_package_as_a_layer():
    packages = {p.parent.name for p in (ROOT / "rlvr").glob("*/__init__.py")}
    assert LAYERS[0] == "core" and sorted(LAYERS) == sorted(packages)


def test_the_library_root_holds_at_most_six_modules():
    assert len(list((ROOT / "rlvr").glob("*.py"))) <= 6


def test_each_package_imports_only_the_ones_below_it():
    assert upward_imports(ROOT, LAYERS) == []


def test_no_modules_import_each_other():
    assert cycles(import_graph(ROOT)) == []


@pytest.fixture
def house(tmp_path):
    """A small library: low <- high, with a module at the root."""
    files = {
        "lib/__init__.py": "",
        "lib/low/__init__.py": "",
        "lib/high/__init__.py": "",
        "lib/low/a.py": "",
        "lib/low/b.py": "from lib.low import a\n",
        "lib/high/c.py": "def f():\n    from lib.low.b import x\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_an_upward_import_is_named_even_inside_a_function(house):
    assert upward_imports(house, ["low", "high"], "lib") == []
    (house / "lib/low/a.py").write_text("def g():\n    import lib.high.c\n")
    assert upward_imports(house, ["low", "high"], "lib") == [
        "lib/low/a.py -> lib/high/__init__.py",
        "lib/low/a.py -> lib/high/c.py",
    ]


def test_a_cycle_is_named_with_its_modules(house):
    assert cycles(import_graph(house, "lib")) == []
    (house / "lib/low/a.py").write_text("from .b import y\n")
    assert cycles(import_graph(house, "lib")) == [[house / "lib/low/a.py", house / "lib/low/b.py"]]


def test_the_order_is_read_from_the_tree():
    tree = (
        "├── rlvr/   the library\n│   ├── top/   x\n│   │   └── m.py  y\n"
        "│   └── bottom/   z\n├── stages/\n"
    )
    assert readme_layers(tree) == ["bottom", "top"]


def test_the_linter_and_formatter_pass_and_dev_test_runs_them_first():
    import subprocess
    import sys

    for check in (["check"], ["format", "--check"]):
        run = subprocess.run(
            [sys.executable, "-m", "ruff", *check, "--quiet", "."],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, f"ruff {' '.join(check)}: {run.stdout}{run.stderr}"
    branch = re.search(r"^  test\)(.*?);;", (ROOT / "dev").read_text(), flags=re.M | re.S).group(1)
    assert branch.index("ruff check") < branch.index("pytest")
    assert branch.index("ruff format --check") < branch.index("pytest")
    assert branch.count("exit 1") == 2
