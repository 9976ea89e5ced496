"""The model registry (rlvr.team.registry) on a git repository of its own: GTO's tags, the first
promotion, a night with no new model, champion against challenger both ways, a hand-made tag."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from rlvr.team.registry import (
    PROD,
    RegistryError,
    champion_vs_challenger,
    judged_runs,
    promote_after_run,
    published_artifact,
)
from tests.helpers import commit_all

ROOT = Path(__file__).resolve().parents[2]
ROWS = [f"h{i:02d}" for i in range(16)]


def _records(
    rewards_by_seed: dict[int, list[float]], splits: tuple[str, ...] = ("validation", "heldout")
) -> dict[int, list[dict]]:
    """Validation records with these rewards; the test rows (heldout) score the opposite, so a
    decision that read them would go the other way."""

    def rows(split: str, rewards: list[float]) -> list[dict]:
        return [
            {
                "id": f"{split[0]}{i}",
                "split": split,
                "final_reward": r if split == "validation" else 1 - r,
                "final_correct": round(8 * (r if split == "validation" else 1 - r)),
                "samples": 8,
            }
            for i, r in zip(ROWS, rewards, strict=True)
        ]

    return {
        seed: [r for split in splits for r in rows(split, rewards)]
        + [{"id": "t0", "split": "train", "final_reward": 1.0, "final_correct": 8, "samples": 8}]
        for seed, rewards in rewards_by_seed.items()
    }


def _run(repo: Path, md5: str, runs: dict[int, list[dict]], message: str) -> None:
    """What a pipeline run leaves committed: dvc.lock's model entry and the held-out records."""
    (repo / "params.yaml").write_text(yaml.safe_dump({"audit": {"seeds": sorted(runs)}}))
    lock = {
        "schema": "2.0",
        "stages": {"publish": {"cmd": "x", "outs": [{"path": "models/final", "md5": md5}]}},
    }
    (repo / "dvc.lock").write_text(yaml.safe_dump(lock))
    for seed, records in runs.items():
        folder = repo / "reports" / "eval" / f"seed-{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "per_prompt.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    commit_all(repo, message)


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    for key, value in (("user.name", "t"), ("user.email", "t@t")):
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    subprocess.run(["dvc", "init", "-q"], cwd=repo, check=True)
    (repo / "dvc.yaml").write_text(
        "artifacts:\n  policy:\n    path: models/final\n    type: model\n"
    )
    return repo


def _tags(repo: Path) -> list[str]:
    return subprocess.run(["git", "tag"], cwd=repo, capture_output=True, text=True).stdout.split()


def test_the_projects_dvc_yaml_publishes_the_final_model_as_policy():
    from rlvr.params.config import load_params

    assert published_artifact(ROOT) == (
        "policy",
        load_params(ROOT / "params.yaml").paths.final_model,
    )


def test_first_model_becomes_prod_then_only_a_better_one_replaces_it(repo):
    base = {0: [0.5] * 16, 1: [0.5] * 16}
    _run(repo, "a" * 32, _records(base), "night 1")
    first = promote_after_run(repo)
    assert first.promoted and first.registered == "v0.0.1" and first.prod_before is None
    assert "first model" in first.line and first.prod_after["version"] == "v0.0.1"
    assert set(_tags(repo)) == {"policy@v0.0.1", "policy#prod#1"}

    # nothing new: the same model md5 registers nothing
    again = promote_after_run(repo)
    assert not again.promoted and again.registered is None and "no new model" in again.reason
    assert len(_tags(repo)) == 2

    # a model no better (same rewards, other bits): registered, prod stays
    _run(repo, "b" * 32, _records({0: [0.5] * 16, 1: [0.5] * 16}), "night 3")
    tie = promote_after_run(repo)
    assert tie.registered == "v0.0.2" and not tie.promoted
    assert tie.comparison["verdict"] == "no significant change"
    assert tie.prod_after["version"] == "v0.0.1" and "prod stays" in tie.line

    # a better one on every row and seed: promoted, with its figures in the reason
    _run(repo, "c" * 32, _records({0: [0.9] * 16, 1: [0.8] * 16, 2: [0.85] * 16}), "night 4")
    better = promote_after_run(repo)
    assert better.promoted and better.registered == "v0.0.3"
    assert better.prod_before["version"] == "v0.0.1" and better.prod_after["version"] == "v0.0.3"
    c = better.comparison
    assert c["verdict"] == "improved" and c["rows"] == 16
    assert c["champion"]["seeds"] == [0, 1] and c["challenger"]["seeds"] == [0, 1, 2]
    assert c["challenger"]["mean_reward"] == pytest.approx(0.85)
    assert (
        c["difference"]["ci_low"] > 0 and "improved: validation mean reward 0.850" in better.reason
    )

    # a worse one: registered, not promoted
    _run(repo, "d" * 32, _records({0: [0.1] * 16, 1: [0.2] * 16}), "night 5")
    worse = promote_after_run(repo)
    assert worse.comparison["verdict"] == "regressed" and not worse.promoted
    assert worse.prod_after["version"] == "v0.0.3"
    gto_show = subprocess.run(["gto", "show", "policy"], cwd=repo, capture_output=True, text=True)
    assert gto_show.returncode == 0 and "v0.0.4" in gto_show.stdout and PROD in gto_show.stdout


def test_a_hand_made_tag_is_one_line_and_ignored(repo):
    _run(repo, "a" * 32, _records({0: [0.5] * 16, 1: [0.5] * 16}), "night 1")
    subprocess.run(["git", "tag", "policy@vbad"], cwd=repo, check=True)
    decision = promote_after_run(repo)
    assert decision.promoted and decision.registered == "v0.0.1"
    (line,) = decision.warnings
    assert line.startswith("registry: git tag 'policy@vbad' is not a GTO tag") and "\n" not in line
    assert "git tag -d 'policy@vbad'" in line


def test_models_with_no_common_validation_row_are_not_compared():
    a = {
        s: [r for r in rs if r["split"] == "validation"]
        for s, rs in _records({0: [0.5] * 16}).items()
    }
    b = {0: [{**r, "id": r["id"] + "x"} for r in a[0]]}
    with pytest.raises(RegistryError, match="share no validation row"):
        champion_vs_challenger(a, b)


def test_a_prod_evaluated_before_the_validation_rows_stays_with_one_line(repo):
    _run(repo, "a" * 32, _records({0: [0.2] * 16, 1: [0.2] * 16}, ("heldout",)), "night 1")
    assert promote_after_run(repo).promoted  # the first model: prod, whatever it holds
    _run(repo, "c" * 32, _records({0: [0.9] * 16, 1: [0.9] * 16}), "night 2")
    decision = promote_after_run(repo)
    assert not decision.promoted and decision.registered == "v0.0.2"
    assert decision.prod_after["version"] == "v0.0.1" and decision.comparison is None
    assert "evaluated before evaluate scored the validation rows" in decision.line
    assert "prod stays" in decision.line and "\n" not in decision.line


def test_records_that_neither_the_cache_nor_the_remote_holds_are_one_line(repo):
    """A run recorded in git whose held-out records were never pushed: one line naming the file
    and what to do, not DVC's traceback."""
    _run(repo, "a" * 32, _records({0: [0.5] * 16, 1: [0.5] * 16}), "a run")
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    subprocess.run(
        ["git", "rm", "-q", "reports/eval/seed-1/per_prompt.jsonl"], cwd=repo, check=True
    )
    commit_all(repo, "seed 1's records gone")
    with pytest.raises(RegistryError) as error:
        judged_runs(repo, "HEAD")
    line = str(error.value)
    assert "\n" not in line
    assert line.startswith("HEAD: cannot read reports/eval/seed-1/per_prompt.jsonl (")
    assert line.endswith(
        "push that run's data (`dvc push` in its clone) or pull it from the remote"
    )
    assert set(judged_runs(repo, commit)) == {0, 1}  # the commit that holds them reads
