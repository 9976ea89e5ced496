"""The model registry: the published policy is the DVC artifact of type `model` in dvc.yaml
(`artifacts:`), versioned with GTO as git tags (`policy@v0.0.3` registers a version, `policy#prod#N`
moves the `prod` stage), and a new model replaces `prod` only when it beats it.

Champion against challenger: both models' validation records (reports/eval/seed-<n>/per_prompt.jsonl,
read from the revision each was made at through DVC, so from the remote when the cache lacks them)
on the rows they share (choosing a model is a choice: it reads the validation rows, never the test
rows that audit it, docs/audit.md), compared by rlvr.audit.recipe.recipe_difference: the seeds of each and the
prompts, paired by prompt, with a bootstrap interval. Only an interval above zero promotes; the
policy for everything else is in PROMOTION_POLICY.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from dvc.api import DVCFileSystem
from dvc.repo import Repo
from dvc.utils.serialize import loads_yaml
from gto.api import assign, find_latest_version, find_versions_in_stage, parse_tag, register
from gto.exceptions import ArtifactNotFound, GTOException

from rlvr.audit.recipe import recipe_difference
from rlvr.core.errors import PipelineError
from rlvr.core.seeds import seed_folder
from rlvr.params.config import PathsParams
from rlvr.report.render import md_escape
from rlvr.team.clones import git
from rlvr.team.remote import strict_ssh

PROD = "prod"
JUDGED = "validation"  # the split promotion reads (per_prompt.jsonl's "split")
PROMOTION_POLICY = (
    "the first model becomes prod; after that a model replaces prod only when its mean reward on "
    "the validation rows beats prod's with a 95% interval above zero (verdict improved); on no significant "
    "change or a regression prod stays, so a change of recipe must prove itself"
)


class RegistryError(PipelineError):
    """The registry cannot be read or written; the message says what to do."""


def published_artifact(root: str | Path) -> tuple[str, str]:
    """(name, path) of the one artifact of type model in dvc.yaml's `artifacts:`, as DVC reads
    it (its ${paths.*} resolved)."""
    with Repo(str(root)) as repo:
        found = [
            (name, artifact.path)
            for artifacts in repo.artifacts.read().values()
            for name, artifact in artifacts.items()
            if artifact.type == "model"
        ]
    if len(found) != 1:
        raise RegistryError(
            f"dvc.yaml: artifacts: needs exactly one artifact of type model (the published "
            f"policy), found {len(found)}"
        )
    return found[0]


def stray_tags(root: str | Path, name: str) -> list[str]:
    """One line per git tag that looks like the artifact's registry tag but is none GTO can read
    (made by hand): GTO skips it, and so does the registry here."""
    lines = []
    for tag in git(root, "tag", "--list", f"{name}@*", f"{name}#*").split():
        try:
            parse_tag(tag)
        except GTOException:
            lines.append(
                f"registry: git tag '{tag}' is not a GTO tag ({name}@vMAJOR.MINOR.PATCH registers "
                f"a version, {name}#stage#N assigns a stage): ignored; remove it with "
                f"`git tag -d '{tag}'` (and `git push origin ':refs/tags/{tag}'`)"
            )
    return lines


def _version(find, *args) -> dict | None:
    try:
        found = find(*args)
    except ArtifactNotFound:  # no tag names the artifact yet
        return None
    if isinstance(found, list):  # find_versions_in_stage: the stage's versions, newest first
        found = found[0] if found else None
    if not found:
        return None
    return {"version": found.version, "commit": found.commit_hexsha}


def prod_version(root: str | Path, name: str) -> dict | None:
    """{"version", "commit"} of the version in `prod`, or None before the first promotion."""
    return _version(find_versions_in_stage, root, name, PROD, 1, 1)


def latest_version(root: str | Path, name: str) -> dict | None:
    """{"version", "commit"} of the newest registered version, or None before the first."""
    return _version(find_latest_version, root, name)


def model_md5(root: str | Path, rev: str | None, path: str) -> str | None:
    """The md5 dvc.lock records for the model folder at a revision (None: not in that lock)."""
    text = git(root, "show", f"{rev or 'HEAD'}:dvc.lock")
    for stage in (loads_yaml(text) or {}).get("stages", {}).values():
        for out in stage.get("outs", []):
            if out["path"] == path:
                return out["md5"]
    return None


def judged_runs(root: str | Path, rev: str | None = None) -> dict[int, list[dict]]:
    """seed -> that seed's validation records, at a git revision (None: the workspace), through
    DVC: files the cache lacks come from the remote. A run evaluated before evaluate scored the
    validation rows gives empty lists."""
    strict_ssh()  # files the cache lacks come over SSH: host key checked, no agent
    fs = DVCFileSystem(str(root), rev=rev)
    params = loads_yaml(fs.read_text("params.yaml")) or {}
    folder = (params.get("paths") or {}).get("eval_runs") or PathsParams().eval_runs
    runs = {}
    for seed in (params.get("audit") or {}).get("seeds") or []:
        path = f"{folder}/{seed_folder(seed)}/per_prompt.jsonl"
        try:
            text = fs.read_text(path)
        except OSError as error:  # FileNotFoundError: neither the cache nor the remote has it
            raise RegistryError(
                f"{rev or 'the workspace'}: cannot read {path} ({type(error).__name__}: {error}): "
                "push that run's data (`dvc push` in its clone) or pull it from the remote"
            ) from None
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        runs[int(seed)] = [r for r in records if r.get("split") == JUDGED]
    if not runs:
        raise RegistryError(f"{rev or 'the workspace'}: params.yaml audit.seeds is empty")
    return runs


def _figures(runs: dict[int, list[dict]]) -> dict:
    records = [r for rs in runs.values() for r in rs]
    return {
        "seeds": sorted(runs),
        "rows": len(next(iter(runs.values()))),
        "mean_reward": sum(r["final_reward"] for r in records) / len(records),
        "pass@1": sum(r["final_correct"] / r["samples"] for r in records) / len(records),
    }


def _shared(runs: dict[int, list[dict]], ids: set[str]) -> dict[int, list[dict]]:
    return {s: [r for r in rs if r["id"] in ids] for s, rs in runs.items()}


def champion_vs_challenger(
    champion: dict[int, list[dict]], challenger: dict[int, list[dict]]
) -> dict:
    """Both models on the validation rows they share: each one's figures, and the challenger's
    mean reward minus the champion's with its interval over both models' seeds and the prompts
    (paired by prompt). `verdict`: improved, regressed or no significant change."""
    ids = set.intersection(
        *({r["id"] for r in rs} for rs in [*champion.values(), *challenger.values()])
    )
    if not ids:
        raise RegistryError(
            "the new model and prod share no validation row: they cannot be compared"
        )
    champion, challenger = _shared(champion, ids), _shared(challenger, ids)

    def as_gain(runs):  # recipe_difference compares final - step0: step0 = 0 compares the models
        return {s: [{**r, "step0_reward": 0.0} for r in rs] for s, rs in runs.items()}

    difference = recipe_difference(as_gain(challenger), as_gain(champion))
    verdict = {"better": "improved", "worse": "regressed"}.get(
        difference["verdict"], "no significant change"
    )
    return {
        "rows": len(ids),
        "champion": _figures(champion),
        "challenger": _figures(challenger),
        "difference": {k: v for k, v in difference.items() if k != "verdict"},
        "verdict": verdict,
    }


@dataclass
class Decision:
    """What the registry did after a run, and why."""

    promoted: bool
    reason: str
    registered: str | None = None  # the version registered for this run's model
    prod_before: dict | None = None
    prod_after: dict | None = None
    comparison: dict | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        head = f"promoted {self.registered} to {PROD}" if self.promoted else "prod unchanged"
        return f"registry: {head}: {self.reason}"


def decide(comparison: dict | None) -> tuple[bool, str]:
    """Promote or not, by PROMOTION_POLICY (comparison None: nothing is in prod yet)."""
    if comparison is None:
        return True, "the first model in the registry becomes prod (no prod to compare with)"
    d, verdict = comparison["difference"], comparison["verdict"]
    figures = (
        f"validation mean reward {comparison['challenger']['mean_reward']:.3f} against prod's "
        f"{comparison['champion']['mean_reward']:.3f}, difference {d['value']:+.3f} "
        f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] over {comparison['rows']} rows, "
        f"{d['seeds_x']} and {d['seeds_y']} seeds"
    )
    if verdict == "improved":
        return True, f"improved: {figures}"
    return False, f"{verdict}: {figures}; prod stays (a new model must beat it)"


def promote_after_run(root: str | Path, push: bool = False) -> Decision:
    """After a run whose results are committed at HEAD: register HEAD's model as a new version
    (unless the latest version already is this model), compare it with `prod` and move `prod`
    when decide() says so. `push`: push the new tags to the git remote `origin`, after fetching
    its tags (another night may have registered a version meanwhile: ours is the next one)."""
    if push:
        git(root, "fetch", "--quiet", "--tags", "origin")
    name, path = published_artifact(root)
    warnings = stray_tags(root, name)
    md5 = model_md5(root, None, path)
    if md5 is None:
        raise RegistryError(f"dvc.lock at HEAD has no entry for {path}: run the pipeline first")
    latest = latest_version(root, name)
    before = prod_version(root, name)
    if latest and model_md5(root, latest["commit"], path) == md5:
        return Decision(
            False,
            f"no new model: {path} is {latest['version']}'s (md5 {md5[:12]})",
            prod_before=before,
            prod_after=before,
            warnings=warnings,
        )
    registered = register(root, name, "HEAD", push=push, stdout=False)
    version = registered.version if hasattr(registered, "version") else str(registered)
    champion = None if before is None else judged_runs(root, before["commit"])
    if champion is not None and not any(champion.values()):
        return Decision(
            False,
            f"prod {before['version']} was evaluated before evaluate scored the validation rows, "
            "so there is nothing to compare the new model with; prod stays (rerun prod's commit "
            "with this code and register it to compare again)",
            registered=version,
            prod_before=before,
            prod_after=before,
            warnings=warnings,
        )
    comparison = None if champion is None else champion_vs_challenger(champion, judged_runs(root))
    promoted, reason = decide(comparison)
    if promoted:
        assign(root, name, PROD, version=version, push=push, stdout=False)
    return Decision(
        promoted,
        reason,
        registered=version,
        prod_before=before,
        prod_after=prod_version(root, name),
        comparison=comparison,
        warnings=warnings,
    )


def promotion_markdown(decision: Decision) -> str:
    """The Prefect artifact `promotion`: the decision, both models' figures and the reason."""
    lines = [f"# {md_escape(decision.line)}", ""]
    c = decision.comparison
    if c:
        before = (decision.prod_before or {}).get("version", "?")
        d = c["difference"]
        lines += [
            f"| validation, {c['rows']} shared rows | prod {md_escape(before)} (champion) "
            f"| new {md_escape(decision.registered)} (challenger) |",
            "|---|---|---|",
            *(
                f"| {label} | {fmt(c['champion'][key])} | {fmt(c['challenger'][key])} |"
                for label, key, fmt in (
                    ("mean reward", "mean_reward", "{:.3f}".format),
                    ("pass@1", "pass@1", "{:.3f}".format),
                    ("seeds", "seeds", lambda s: ", ".join(map(str, s))),
                )
            ),
            "",
            f"Difference (new - prod): {d['value']:+.3f}, 95% interval [{d['ci_low']:+.3f}, "
            f"{d['ci_high']:+.3f}] over both models' seeds and the prompts (paired by prompt); "
            f"probability of improvement {d['probability_of_improvement']:.2f}. Verdict: "
            f"**{c['verdict']}**.",
            "",
        ]
    lines += [
        f"Registered: {md_escape(decision.registered or 'nothing (no new model)')}; prod before: "
        f"{md_escape((decision.prod_before or {}).get('version', 'none'))}, after: "
        f"{md_escape((decision.prod_after or {}).get('version', 'none'))}.",
        "",
        f"Reason: {md_escape(decision.reason)}",
        "",
        f"Policy: {PROMOTION_POLICY}.",
    ]
    lines += [f"- {md_escape(w)}" for w in decision.warnings]
    return "\n".join(lines) + "\n"
