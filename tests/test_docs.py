"""The README a newcomer reads to the end, and the reference pages under docs/: the README's
length and order, the two commands CI runs, links that resolve, params.yaml's pointers into the
experiment log, and a file tree that names every module."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from rlvr.params.config import load_params

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
TWO_COMMANDS = """```bash
./dev repro     # set up .venv (first time), then run the pipeline: `dvc repro` on the default
./dev test      # set up .venv (first time), then run the tests
```"""
SECTIONS = ["## What you get", "## Your own data and model", "## Files", "## Read more"]


def without_code(text: str) -> str:
    """Markdown with its fenced blocks and inline code spans blanked (they hold no links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(markdown: str) -> set[str]:
    """The fragment ids GitHub gives a page's headings (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", without_code(markdown), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            slug = f"{slug}-{seen[slug]}"
        seen.setdefault(slug, 0)
    return set(seen)


def local_links(path: Path) -> list[str]:
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", without_code(path.read_text()))
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


def test_readme_is_short_and_in_order():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 250, len(lines)
    assert lines[0].startswith("# ")
    what_it_is = text.index("\n\n") + 2
    picture = text.index("![", what_it_is)
    assert "(docs/report.png)" in text[picture : text.index("\n", picture)]
    assert text[what_it_is:picture].strip().count("\n\n") == 0  # one short paragraph, no heading
    places = [picture, text.index(TWO_COMMANDS), *(text.index(f"\n{s}\n") for s in SECTIONS)]
    assert places == sorted(places), "README sections out of order"
    assert not re.search(r"^## ", text[: places[1]], flags=re.M)  # the commands come first


def test_ci_runs_the_readme_commands():
    ci = (ROOT / ".ci/run").read_text()
    for command in re.findall(r"^(\./dev \w+)", TWO_COMMANDS, flags=re.M):
        assert re.search(rf"^{re.escape(command)}$", ci, flags=re.M), command


def _ci_phases(body: str) -> subprocess.CompletedProcess:
    """.ci/run's phase timing, run on `body` instead of the real phases."""
    ci = (ROOT / ".ci/run").read_text()
    timing = ci[ci.index("# Where CI's time goes") : ci.index('echo "== tests (./dev test)"')]
    script = "set -euo pipefail\n" + timing + body
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)


def test_ci_prints_each_phases_wall_time_even_when_one_fails():
    ci = (ROOT / ".ci/run").read_text()
    for name, command in (("fast suite", "./dev test"), ("slow suite", './dev test -m "$slow"')):
        assert f"\n{command}" in ci and ci.index(f'phase_done "{name}"') > ci.index(command)
    run = _ci_phases('phase_done "fast suite"\nsleep 1\nphase_done "slow suite"\n')
    assert run.returncode == 0, run.stderr
    # bash's SECONDS counts whole seconds: a phase of no time can cross one on a busy machine
    assert re.fullmatch(
        r"== phase times: fast suite [01] s, slow suite [12] s; total [123] s\n", run.stdout
    ), run.stdout
    run = _ci_phases('phase_done "fast suite"\nfalse\nphase_done "slow suite"\n')
    assert run.returncode == 1  # the failure's status, after the times so far
    assert re.fullmatch(r"== phase times: fast suite [01] s; total [01] s\n", run.stdout), (
        run.stdout
    )


def test_ci_runs_the_slow_tests_but_the_long_ones_and_every_long_test_is_slow():
    """.ci/run's slow phase selects "slow and not long" (all of them with RLVR_CI_LONG=1), and a
    test marked long is marked slow too, so the fast suite never runs it."""
    ci = (ROOT / ".ci/run").read_text()
    assert 'slow="slow and not long"; [ "${RLVR_CI_LONG:-}" = 1 ] && slow="slow"' in ci
    assert '\n./dev test -m "$slow" ' in ci
    long_tests = 0
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        text = path.read_text()
        file_slow = re.search(r"^pytestmark = pytest\.mark\.slow$", text, flags=re.M)
        for found in re.finditer(r"^@pytest\.mark\.long\n", text, flags=re.M):
            long_tests += 1
            above = text[: found.start()].rsplit("\n\n", 1)[-1]  # the decorators above it
            assert file_slow or "@pytest.mark.slow\n" in above, (path.name, found.start())
    assert long_tests == 18  # the README's "the 18 `long`"


def test_ci_installs_sshd_and_chromium_and_lets_no_server_test_skip():
    """The README's ".ci/run installs both": the pinned openssh-server, installed when sshd is
    missing, Chromium when it is missing (its version printed), and RLVR_REQUIRE_SERVERS (which
    turns the team and browser tests' skip into a failure) set before any test runs."""
    ci = (ROOT / ".ci/run").read_text()
    pinned = re.search(r"^SSHD_VERSION=(\S+)$", ci, flags=re.M)
    assert pinned and re.fullmatch(r"\d+:[\w.+~-]+", pinned.group(1)), "openssh-server unpinned"
    assert '"openssh-server=$SSHD_VERSION"' in ci and "if [ ! -x /usr/sbin/sshd ]" in ci
    assert "if ! command -v chromium" in ci and "apt_install chromium" in ci
    assert "chromium --version" in ci
    required = ci.index("export RLVR_REQUIRE_SERVERS=1\n")
    assert ci.index("apt_install chromium") < required < ci.index("\n./dev test\n")
    # the skip-or-fail itself: tests/team/test_without_sshd.py runs it both ways


def test_the_picture_of_the_report_is_small():
    assert (ROOT / "docs/report.png").stat().st_size < 300_000


def test_every_page_is_linked_from_the_readme():
    linked = {(ROOT / t.split("#")[0]).resolve() for t in local_links(README)}
    assert PAGES and not {p.resolve() for p in PAGES} - linked


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_local_links_resolve(path):
    for target in local_links(path):
        file, _, fragment = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        assert resolved.exists(), f"{path.name}: {target}"
        if fragment and resolved.suffix == ".md":
            assert fragment in anchors(resolved.read_text()), f"{path.name}: {target}"


def test_params_yaml_points_into_the_experiment_log():
    """Each knob's comment is one line; the evidence for a value lives in docs/experiments.md."""
    text = (ROOT / "params.yaml").read_text()
    body = text[re.search(r"^\w", text, flags=re.M).start() :]  # after the header comment
    assert not re.search(r"^\s*#", body, flags=re.M), "a comment block: put the evidence in the log"
    log = anchors((ROOT / "docs/experiments.md").read_text())
    pointers = re.findall(r"docs/experiments\.md#([\w-]+)", text)
    assert pointers and set(pointers) <= log, set(pointers) - log


def tree_paths() -> list[str]:
    """The paths the README's file tree names (a line `│   ├── name  what it is`)."""
    text = README.read_text()
    block = re.search(r"^## Files\n+```\n(.*?)^```", text, flags=re.M | re.S).group(1)
    paths, stack = [], []
    for line in block.splitlines()[1:]:  # the first line is the root, "."
        match = re.match(r"^((?:│   |    )*)[├└]── (\S+)", line)
        assert match, line
        depth = len(match.group(1)) // 4
        stack[depth:] = [match.group(2)]
        paths.append(
            "".join(part if part.endswith("/") else part + "/" for part in stack).rstrip("/")
        )
    return paths


def test_every_module_is_in_the_file_tree():
    """A new module must get its line in the README's tree (a package's __init__.py is named by
    its folder's line)."""
    named = set(tree_paths())
    modules = {
        p.relative_to(ROOT).as_posix()
        for folder in ("rlvr", "stages", "flows", "scripts")
        for p in (ROOT / folder).rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    }
    missing = modules - named
    assert not missing, f"modules missing from the README's tree: {sorted(missing)}"
    packages = {
        p.parent.relative_to(ROOT).as_posix() + "/"
        for folder in ("rlvr", "stages", "flows")
        for p in (ROOT / folder).rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert {p.rstrip("/") for p in packages} <= {p.rstrip("/") for p in named}


def test_everything_the_file_tree_names_exists():
    for path in set(tree_paths()) - {"models"}:  # models/: made by ./dev repro, ignored by git
        assert (ROOT / path).exists(), path


def test_the_readme_picture_is_the_reports_and_shows_the_recipes_figures():
    """docs/report.png is drawn by the report stage (an output of it in dvc.yaml) from the
    report's top (rlvr/report/picture.py): its table's numbers are metrics/recipe.json's."""
    import yaml

    from rlvr.report.picture import report_top

    outs = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["report"]["outs"]
    assert any("${paths.report_picture}" in out for out in outs)
    markdown = (ROOT / "reports/retrospective.md").read_text()
    title, verdict, table, curves = report_top(markdown)
    recipe, _, rest = verdict.partition(": ")  # the recipe's verdict over its seeds, first
    assert title and re.fullmatch(r"The recipe over \d+ of \d+ seeds", recipe), verdict
    assert rest.split(":")[0].lower() in {"improved", "no significant change", "regressed", "mixed"}
    assert table[0][0] == "held-out, pooled" and len(table) >= 2
    assert all(len(r) == len(table[0]) for r in table)
    assert len(curves) == 2 and all((ROOT / "reports" / c).exists() for c in curves)
    assert "\\" not in verdict and "&gt;" not in verdict
    figures = json.loads((ROOT / "metrics/recipe.json").read_text())
    rows = {row[0]: row[1:] for row in table[1:]}
    d = figures["delta_mean_reward"]
    assert rows["mean reward"][2] == f"{d['value']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
    assert rows["pass@1"][:2] == [f"{figures['pass1_step0']:.3f}", f"{figures['pass1_final']:.3f}"]


def test_dev_test_runs_on_both_cores_with_one_torch_thread_each():
    """The README: `./dev test` runs the tests on up to 2 cores (pytest-xdist), one torch thread
    each."""
    dev = (ROOT / "dev").read_text()
    assert 'exec python -m pytest -n auto --maxprocesses=2 --dist loadfile "$@"' in dev
    environment = (ROOT / "tests/environment.py").read_text()
    assert environment.index('os.environ.setdefault("OMP_NUM_THREADS", "1")') < environment.index(
        "import torch"
    )
    for conftest in ("tests/conftest.py", "tests/rewards/conftest.py"):  # the gate loads the second
        imports = re.findall(r"^(?:from|import) (\S+)", (ROOT / conftest).read_text(), flags=re.M)
        firsts = [m for m in imports if m.startswith(("tests", "rlvr", "torch"))]
        assert firsts[0] == "tests.environment", (conftest, firsts)
    assert "up to 2 cores (pytest-xdist, one torch thread each)" in " ".join(
        README.read_text().split()
    )


def test_what_the_readme_says_the_default_run_shows_is_what_the_committed_run_shows():
    """'over three seeds, on the sealed test rows, the mean reward gains nothing significant
    (interval holds 0), and the final models solve fewer prompts in 32 tries than the base and
    regress on add, mul and sub: the verdict is `mixed`', read from the committed run's outputs (a
    rerun that changes them must change the README too)."""
    text = " ".join(README.read_text().split())
    assert (
        "over three seeds, on the sealed test rows, the mean reward gains nothing significant "
        "(interval holds 0), and the final models solve fewer prompts in 32 tries than the base "
        "and regress on add, mul and sub: the verdict is `mixed`"
    ) in text
    recipe = json.loads((ROOT / "metrics/recipe.json").read_text())
    assert recipe["seeds"] == [0, 1, 2] and recipe["verdict"] == "mixed"
    assert recipe["delta_mean_reward"]["ci_low"] < 0 < recipe["delta_mean_reward"]["ci_high"]
    assert recipe["passn_final"] < recipe["passn_step0"]
    assert {tag for tag, t in recipe["tags"].items() if t["regressed"]} == {"add", "mul", "sub"}
    summary = json.loads((ROOT / "reports/recipe/summary.json").read_text())
    assert summary["split"] == "heldout"
    assert load_params(ROOT / "params.yaml").data.eval_path == "data/grpo_test.jsonl"
    assert summary["pooled"]["samples_per_prompt"] == 32 and summary["evaluated"] == [0, 1, 2]
