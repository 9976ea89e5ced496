"""Provenance: which data, models, code and library versions made a run's results.

Every hash comes from the stage that made the thing: a model's md5 is the one dvc.lock records
among the outs of the stage that wrote it (never a consumer's deps entry, which is stale while the
consumer runs), a data file's md5 is computed from the file as it is read (DVC's md5 of a file is
the md5 of its bytes), and each stage's code digest is taken from the code deps dvc.lock records
for that stage. Nothing here depends on the clock or on git, so a report that shows it is
reproducible byte for byte; the git state is separate (`git_state`) for what is not committed.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path

from ruamel.yaml import YAML

from rlvr.core.files import file_md5
from rlvr.core.numerics import describe

LIBRARIES = (
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "datasets",
    "peft",
    "dvc",
    "dvclive",
    "great-expectations",
    "prefect",
    "matplotlib",
    "scipy",
)
NOT_RECORDED = "not in dvc.lock"
UNKNOWN_COMMIT = "unknown"  # no git, or not a repository


def library_versions(names: Iterable[str] = LIBRARIES) -> dict[str, str]:
    """Installed version of each library ("not installed" when missing)."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def read_lock(lock_path: str | Path = "dvc.lock") -> dict[str, dict]:
    """The stages recorded in dvc.lock ({} when there is none yet)."""
    lock = Path(lock_path)
    if not lock.exists():
        return {}
    return (YAML(typ="safe").load(lock.read_text()) or {}).get("stages", {}) or {}


def holds_outputs(path: str, produced) -> bool:
    """Is `path` a stage's out, or a folder holding some (a dep on the seeds' folders)?

    >>> holds_outputs("reports/eval", {"reports/eval/seed-0/summary.json"})
    True
    >>> holds_outputs("rlvr", {"reports/eval/seed-0/summary.json"})
    False
    """
    return path in produced or any(out.startswith(path.rstrip("/") + "/") for out in produced)


def produced_hashes(stages: dict[str, dict]) -> dict[str, str]:
    """path -> md5 for every out, as recorded by the stage that produced it."""
    return {
        out["path"]: out["md5"]
        for stage in stages.values()
        for out in stage.get("outs", [])
        if "md5" in out
    }


def code_digests(
    stages: dict[str, dict], data_paths: Sequence[str], exclude: Sequence[str] = ()
) -> dict[str, dict]:
    """Per stage: how many code files (and environment files) dvc.lock records in its deps, a
    folder counting the files in it, and one digest of their paths and md5s. Deps that are data
    or another stage's outs are not code.

    >>> lock = {"s": {"deps": [{"path": "rlvr/core", "md5": "a.dir", "nfiles": 10},
    ...                        {"path": "stages/s.py", "md5": "b"}]}}
    >>> code_digests(lock, [])["s"]["files"]
    11
    """
    produced = produced_hashes(stages)
    digests = {}
    for name, stage in stages.items():
        if name in exclude:
            continue
        code = sorted(
            (d["path"], d.get("md5", ""), d.get("nfiles", 1))
            for d in stage.get("deps", [])
            if not holds_outputs(d["path"], produced) and d["path"] not in data_paths
        )
        text = "".join(f"{path} {md5}\n" for path, md5, _ in code)
        digests[name] = {
            "files": sum(files for _, _, files in code),
            "digest": hashlib.sha256(text.encode()).hexdigest(),
        }
    return digests


def data_and_model_hashes(
    data_paths: Sequence[str],
    model_paths: Sequence[str],
    stages: dict[str, dict],
    root: str | Path = ".",
    read_by: dict[str, str] | None = None,
) -> dict[str, dict]:
    """{"data": md5 of each data file as it is now, "models": md5 of each model from its
    producing stage's entry in `stages` (dvc.lock)}. Cheap: no torch, the lock already read.

    `read_by` (data path -> stage): files that only that stage may open (the test file: validate
    and evaluate). Their md5 is the one dvc.lock records among that stage's deps, the file that
    stage read, so this never opens them.
    """
    read_by = read_by or {}
    produced = produced_hashes(stages)

    def data_md5(path: str) -> str:
        if path not in read_by:
            return file_md5(Path(root) / path)
        deps = stages.get(read_by[path], {}).get("deps", [])
        return next((d["md5"] for d in deps if d["path"] == path and "md5" in d), NOT_RECORDED)

    return {
        "data": {path: data_md5(path) for path in data_paths},
        "models": {path: produced.get(path, NOT_RECORDED) for path in model_paths},
    }


def provenance(
    data_paths: Sequence[str],
    model_paths: Sequence[str],
    lock_path: str | Path = "dvc.lock",
    root: str | Path = ".",
    current_stage: str | None = None,
    read_by: dict[str, str] | None = None,
    numerics: dict | None = None,
) -> dict:
    """Data md5s (of the files, or for `read_by` files from the deps of the stage that read
    them), model md5s (from their producing stage's entry in dvc.lock), each upstream stage's
    code digest, and library versions. `current_stage` is left out of the code digests: while
    it runs, its own dvc.lock entry is the previous run's. `numerics`: what the run that made the
    results computed with (rlvr.core.numerics.numerics_in_force, as its summary records it): float
    results, and so model md5s, depend on it."""
    stages = read_lock(Path(root) / lock_path)
    return {
        **data_and_model_hashes(data_paths, model_paths, stages, root, read_by),
        "code": code_digests(stages, data_paths, exclude=[current_stage] if current_stage else []),
        "versions": library_versions(),
        "platform": describe(numerics),
    }


def _git(*args: str, cwd: str | Path | None = None, strip: bool = True) -> str:
    try:
        out = subprocess.run(
            ["git", *args], capture_output=True, text=True, check=True, cwd=cwd
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out.strip() if strip else out


def changed_files(porcelain_z: str) -> list[str]:
    """The paths in `git status --porcelain -z` output (a rename's new path only).

    >>> changed_files(" M dvc.lock\\0R  new.py\\0old.py\\0 R b.py\\0a.py\\0?? data/x.jsonl\\0")
    ['dvc.lock', 'new.py', 'b.py', 'data/x.jsonl']
    """
    entries, paths = porcelain_z.split("\0"), []
    i = 0
    while i < len(entries):
        entry = entries[i]
        if len(entry) > 3:
            paths.append(entry[3:])
            i += 1 if set(entry[:2]) & set("RC") else 0  # the next entry is the original path
        i += 1
    return paths


def git_state(
    cwd: str | Path | None = None, ignore: Sequence[str] = ("reports/", "dvc.lock")
) -> dict:
    """The commit checked out, and which tracked or new files other than the pipeline's own
    outputs (`ignore` prefixes) differ from it (`changed`; `dirty` when any)."""
    changed = [
        path
        for path in changed_files(_git("status", "--porcelain", "-z", cwd=cwd, strip=False))
        if not path.startswith(tuple(ignore))
    ]
    return {
        "commit": _git("rev-parse", "HEAD", cwd=cwd) or UNKNOWN_COMMIT,
        "dirty": bool(changed),
        "changed": changed,
    }


def sources_state(stages: dict[str, dict], cwd: str | Path | None = None) -> dict:
    """What the pipeline ran, as git knows it: `commit`, the last commit that changed a file some
    stage depends on (its deps in dvc.lock that no stage writes, and params.yaml), and `changed`,
    those of them that differ from it now. A commit that only records results (reports,
    dvc.lock) or changes docs leaves both alone, as it leaves DVC's cache: a rerun of it writes
    the same bytes."""
    produced = {out["path"] for stage in stages.values() for out in stage.get("outs", [])}
    followed = sorted(
        {
            d["path"]
            for stage in stages.values()
            for d in stage.get("deps", [])
            if not holds_outputs(d["path"], produced)
        }
        | {"params.yaml"}
    )
    commit = _git("log", "-1", "--format=%H", "--", *followed, cwd=cwd) or UNKNOWN_COMMIT
    changed = changed_files(
        _git("status", "--porcelain", "-z", "--", *followed, cwd=cwd, strip=False)
    )
    return {"commit": commit, "changed": changed}
