"""Where each RL seed's results live: one folder `seed-<n>` under each per-seed path of
params.yaml `paths`, with fixed file names. dvc.yaml spells the same paths in its `foreach`
stages (`${paths.eval_runs}/seed-${item}/summary.json`); tests/test_dvc_deps.py checks that
they agree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def seed_folder(seed: int) -> str:
    """The folder of one seed's outputs.

    >>> seed_folder(3)
    'seed-3'
    """
    return f"seed-{seed}"


@dataclass(frozen=True)
class SeedPaths:
    """One seed's outputs (verified, train, evaluate and rft write them; recipe, report and
    publish read), under params.yaml `paths` (verified, trained_models, checkpoints, train_runs,
    eval_runs, rft_models, rft_runs). Each path reads
    only its own folder param: a stage declares just the ones it uses (rlvr.pipeline.stage).

    >>> from rlvr.params.config import PathsParams
    >>> seed_paths(PathsParams(), 2).eval_per_prompt
    'reports/eval/seed-2/per_prompt.jsonl'
    """

    paths: Any
    seed: int

    def _in(self, folder: str, name: str = "") -> str:
        return f"{folder}/{seed_folder(self.seed)}" + (f"/{name}" if name else "")

    @property
    def trained_model(self) -> str:
        return self._in(self.paths.trained_models)

    @property
    def checkpoints(self) -> str:
        return self._in(self.paths.checkpoints)

    @property
    def train_summary(self) -> str:
        return self._in(self.paths.train_runs, "summary.json")

    @property
    def train_history(self) -> str:
        return self._in(self.paths.train_runs, "history.jsonl")

    @property
    def train_completions(self) -> str:
        return self._in(self.paths.train_runs, "completions.jsonl")

    @property
    def train_curves(self) -> str:
        return self._in(self.paths.train_runs, "curves.png")

    @property
    def train_live(self) -> str:
        return self._in(self.paths.train_runs, "live")

    @property
    def eval_summary(self) -> str:
        return self._in(self.paths.eval_runs, "summary.json")

    @property
    def eval_per_prompt(self) -> str:
        return self._in(self.paths.eval_runs, "per_prompt.jsonl")

    @property
    def verified_answers(self) -> str:
        return self._in(self.paths.verified, "answers.json")

    @property
    def rft_model(self) -> str:
        return self._in(self.paths.rft_models)

    @property
    def rft_summary(self) -> str:
        return self._in(self.paths.rft_runs, "summary.json")

    @property
    def rft_per_prompt(self) -> str:
        return self._in(self.paths.rft_runs, "per_prompt.jsonl")


def seed_paths(paths, seed: int) -> SeedPaths:
    """The seed's paths under params.yaml `paths`."""
    return SeedPaths(paths, seed)
