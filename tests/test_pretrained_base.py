"""A pretrained base is pinned, not named: prepare_model records the hub commit it resolved and each
weight file's sha256 (models/base/source.json), and every stage loads that very snapshot; here on
a hub cache of our own holding the tiny policy (nothing is downloaded)."""

import hashlib
import json
import shutil

import pytest

from rlvr.params.config import ParamsError, parse_params
from rlvr.policy.models import SOURCE_FILE, policy_path, prepare_base

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def hub(tiny_policy_dir, tmp_path, monkeypatch):
    """A hub cache holding team/tiny at COMMIT, `main` pointing at it."""
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    repo = cache / "models--team--tiny"
    shutil.copytree(tiny_policy_dir, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return repo / "snapshots" / COMMIT


def _prepare(tmp_path, **model):
    params = parse_params({"model": {"init": "pretrained", **model}})
    out = tmp_path / "base"
    summary = prepare_base(params.model, [], 0, out)
    return out, summary


def test_a_hub_model_is_recorded_by_commit_and_weight_hashes_and_loaded_from_that_snapshot(
    hub, tmp_path
):
    out, summary = _prepare(tmp_path, name_or_path="team/tiny")
    recorded = json.loads((out / SOURCE_FILE).read_text())
    assert recorded["revision"] == COMMIT and recorded["name_or_path"] == "team/tiny"
    assert recorded["weights_sha256"] == {"model.safetensors": _sha256(hub / "model.safetensors")}
    assert policy_path(out) == str(hub)  # the snapshot itself, whatever `main` says later
    _, same = _prepare(tmp_path, name_or_path="team/tiny", revision=COMMIT)
    assert {k: v for k, v in same.items() if k != "seconds"} == recorded


def test_a_changed_model_changes_the_bases_bytes(hub, tmp_path):
    out, _ = _prepare(tmp_path, name_or_path="team/tiny")
    before = (out / SOURCE_FILE).read_bytes()
    weights = hub / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")  # the same name, other weights
    out, _ = _prepare(tmp_path, name_or_path="team/tiny")
    assert (out / SOURCE_FILE).read_bytes() != before  # so every stage that read it reruns


def test_a_local_folder_is_recorded_by_its_weight_hashes(tiny_policy_dir, tmp_path):
    out, summary = _prepare(tmp_path, name_or_path=str(tiny_policy_dir))
    assert summary["revision"] is None
    assert summary["weights_sha256"] == {
        "model.safetensors": _sha256(tiny_policy_dir / "model.safetensors")
    }
    assert policy_path(out) == str(tiny_policy_dir)


def test_a_model_the_cache_lacks_is_one_line_naming_the_key(hub, tmp_path):
    with pytest.raises(ParamsError) as error:
        _prepare(tmp_path, name_or_path="team/tiny", revision="v9")
    line = str(error.value)
    assert "\n" not in line and line.startswith(
        "model.name_or_path = 'team/tiny' (revision 'v9'): no such local folder, and the hub "
        "cache has no snapshot of it"
    )
    assert not (tmp_path / "base").exists()  # nothing half-written
