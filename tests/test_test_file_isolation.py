"""The test file (data.eval_path) is opened only by the validate stage and the audits (evaluate,
and rft's audit of the baseline once it is fine-tuned: tests/test_rft.py shows the fine-tune runs
without the file): no training, selection or early stopping ever sees it. Shown on a real forced
`dvc repro` of every stage (conftest.py's forced_rerun), with an audit hook in every Python
process that records who opens which data file."""

import json
from pathlib import Path

import pytest

from rlvr.params.config import load_params


@pytest.mark.slow
def test_only_validate_and_the_audits_open_the_test_file(forced_rerun):
    project, log, _ = forced_rerun
    opened: dict[str, set[str]] = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        name = Path(entry["file"]).relative_to(project).as_posix()
        opened.setdefault(name, set()).add(entry["by"])
    data = load_params(project / "params.yaml").data
    # DVC itself hashes every dep (the `dvc` process); of the stages, only these read it
    stages = {who for who in opened[data.eval_path] if who.startswith("stages.")}
    assert stages == {"stages.validate", "stages.evaluate", "stages.rft"}
    # the hook sees the other stages' reads: training reads the train file, the contract all three
    assert {"stages.smoke", "stages.train", "stages.validate"} <= opened[data.train_path]
    assert {"stages.validate", "stages.train", "stages.evaluate"} <= opened[data.val_path]
    # the earlier test file, which recipes were chosen on, is read by nothing (docs/data.md)
    assert "data/grpo_eval.jsonl" not in opened
