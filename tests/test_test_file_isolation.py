"""The test file (data.eval_path) is opened only by the validate and evaluate stages: no training,
selection or early stopping ever sees it. Shown on a real forced `dvc repro` of every stage, with
an audit hook in every Python process that records who opens which data file."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import project_env

# Loaded as sitecustomize by every Python process of the run (dvc and each stage it starts):
# each open() of a watched file appends the opening process's main module to the log.
OPEN_HOOK = '''
import json, os, sys

_WATCHED = {os.path.realpath(p): p for p in os.environ["WATCH_FILES"].split(os.pathsep)}
_LOG = os.environ["WATCH_LOG"]


def _hook(event, args):
    if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    try:
        path = os.path.realpath(os.fsdecode(args[0]))
    except (TypeError, ValueError):
        return
    if path in _WATCHED:
        main = getattr(sys.modules.get("__main__"), "__spec__", None)
        who = main.name if main is not None else os.path.basename(sys.argv[0] or "python")
        with open(_LOG, "a") as log:  # not watched: no recursion
            log.write(json.dumps({"file": _WATCHED[path], "by": who}) + "\\n")


sys.addaudithook(_hook)
'''


@pytest.mark.slow
def test_only_validate_and_evaluate_open_the_test_file(copy_run):
    project = copy_run("isolation")
    files = ["data/grpo_eval.jsonl", "data/grpo_val.jsonl", "data/grpo_train.jsonl"]
    hook = project.parent / "isolation-hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(OPEN_HOOK)
    log = project.parent / "opens.jsonl"
    env = project_env(project)
    env.update(PYTHONPATH=f"{hook}{os.pathsep}{project}", WATCH_LOG=str(log),
               WATCH_FILES=os.pathsep.join(str(project / f) for f in files))
    run = subprocess.run(["dvc", "repro", "--force"], cwd=project, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    opened: dict[str, set[str]] = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        name = Path(entry["file"]).relative_to(project).as_posix()
        opened.setdefault(name, set()).add(entry["by"])
    # DVC itself hashes every dep (the `dvc` process); of the stages, only these two read it
    stages = {who for who in opened["data/grpo_eval.jsonl"] if who.startswith("stages.")}
    assert stages == {"stages.validate", "stages.evaluate"}
    # the hook sees the other stages' reads: training reads the train file, the contract all three
    assert {"stages.smoke", "stages.train", "stages.validate"} <= opened["data/grpo_train.jsonl"]
    assert "stages.validate" in opened["data/grpo_val.jsonl"]
