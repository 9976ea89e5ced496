"""Arms measured in chunks (rlvr/orchestration/experiments.py, scripts/arms.py): a rerun skips
what is recorded, one chunk runs in a work clone with the arm's params and writes its seed's
records whole, and the table compares each arm with the default on the validation rows with
Holm over the arms."""

import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.core.files import read_jsonl, write_jsonl
from rlvr.orchestration.experiments import arms_table, chunk_file, pending, run_chunk
from rlvr.params.config import load_params

ROOT = Path(__file__).resolve().parents[1]


def _records(gains, split="validation"):
    return [
        {"id": f"r{i}", "split": split, "step0_reward": 0.0, "final_reward": g}
        for i, g in enumerate(gains)
    ]


def test_a_rerun_skips_the_recorded_arm_seeds(tmp_path):
    write_jsonl(chunk_file(tmp_path, "unsolved", 0), _records([0.1]))
    assert pending(tmp_path, ["unsolved", "fraction"], [0, 1]) == [
        ("unsolved", 1),
        ("fraction", 0),
        ("fraction", 1),
    ]


def test_the_table_judges_on_the_validation_rows_with_holm_over_the_arms(tmp_path):
    """`better` needs the arm's interval above 0 and its Holm p <= 0.05; the test rows, here
    the opposite, are never read; an arm missing a seed says which."""
    default = {s: _records([0.1 + 0.01 * s] * 12) + _records([0.9] * 12, "heldout") for s in (0, 1)}
    for s in (0, 1):
        write_jsonl(
            chunk_file(tmp_path, "unsolved", s),
            _records([0.5 + 0.01 * s] * 12) + _records([0.0] * 12, "heldout"),
        )
    write_jsonl(chunk_file(tmp_path, "fraction", 0), _records([0.5] * 12))
    rows = arms_table(tmp_path, ["unsolved", "fraction"], [0, 1], default, n_resamples=500)
    unsolved, fraction = rows
    assert unsolved["arm"] == "unsolved" and unsolved["value"] == pytest.approx(0.4)
    assert unsolved["verdict"] == unsolved["holm_verdict"] == "better"
    assert unsolved["holm_p"] == pytest.approx(unsolved["p_value"])  # a family of one compared
    assert fraction == {"arm": "fraction", "missing_seeds": [1]}


def test_a_chunk_runs_with_the_arms_params_and_writes_its_seeds_records(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    for args in (["init", "-q"], ["add", "params.yaml"], ["commit", "-qm", "params"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=work, check=True
        )
    # a stand-in for dvc: writes what evaluate@<seed> writes, with the params it ran under
    fake = tmp_path / "dvc"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys\n"
        "seed = sys.argv[2].split('@')[1]\n"
        "params = pathlib.Path('params.yaml').read_text()\n"
        "out = pathlib.Path(f'reports/eval/seed-{seed}/per_prompt.jsonl')\n"
        "out.parent.mkdir(parents=True, exist_ok=True)\n"
        "guided = 'guidance: unsolved' in params\n"
        "out.write_text(json.dumps({'id': 'r0', 'split': 'validation', 'guided': guided}) + '\\n')\n"
    )
    fake.chmod(0o755)
    out = tmp_path / "arms" / "unsolved-seed-2.jsonl"
    overrides = ["train.guidance=unsolved", "train.guides=reports/verified"]
    assert run_chunk(work, overrides, 2, out, dvc=str(fake)) == 1
    assert read_jsonl(out) == [{"id": "r0", "split": "validation", "guided": True}]
    params = load_params(work / "params.yaml")
    assert params.audit.seeds == [2] and params.train.guidance == "unsolved"
    # the next chunk starts from the committed params, not the last chunk's
    run_chunk(work, [], 0, tmp_path / "arms" / "default-seed-0.jsonl", dvc=str(fake))
    assert load_params(work / "params.yaml").train.guidance == "off"
    # a failed stage writes nothing
    fake.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(3)\n")
    with pytest.raises(subprocess.CalledProcessError):
        run_chunk(work, overrides, 1, tmp_path / "arms" / "unsolved-seed-1.jsonl", dvc=str(fake))
    assert not (tmp_path / "arms" / "unsolved-seed-1.jsonl").exists()
