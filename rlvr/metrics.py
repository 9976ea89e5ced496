"""The figures people compare across runs: what `dvc exp show` and `dvc metrics diff` list.

Each stage writes its whole result as a plain output (every rule, check and split statistic) and
a DVC metric with only its headline: pass/fail of each gate, rewards and success before and
after, the deltas with their CI, KL and the verdict. A table of experiments then stays readable:
every column is one a person compares. Each function here is a projection of the detail, so the
two files cannot disagree.
"""

from __future__ import annotations

from typing import Any


def gate_metrics(verdict: dict) -> dict:
    """The reward-test gate's headline.

    >>> gate_metrics({"passed": True, "counts": {"tests": 12, "failed": 0, "errors": 0}})
    {'passed': True, 'tests': 12, 'failed': 0}
    """
    counts = verdict.get("counts", {})
    return {"passed": bool(verdict["passed"]), "tests": counts.get("tests", 0),
            "failed": counts.get("failed", 0) + counts.get("errors", 0)}


def validation_metrics(summary: dict) -> dict:
    """The data contract's headline: held or not, problems, rows per file.

    >>> validation_metrics({"passed": False, "problems": 2,
    ...                     "files": {"grpo_train": {"rows": 64}, "grpo_eval": {"rows": 63}}})
    {'passed': False, 'problems': 2, 'rows': {'grpo_train': 64, 'grpo_eval': 63}}
    """
    return {"passed": bool(summary["passed"]), "problems": summary["problems"],
            "rows": {name: f["rows"] for name, f in summary["files"].items()}}


def smoke_metrics(report: dict) -> dict:
    """The smoke run's headline: passed, failed checks, the step-0 reward baseline.

    >>> smoke_metrics({"passed": True, "step0_mean_reward": 0.42,
    ...                "checks": [{"passed": True}, {"passed": True}]})
    {'passed': True, 'failed_checks': 0, 'step0_mean_reward': 0.42}
    """
    return {"passed": bool(report["passed"]),
            "failed_checks": sum(not c["passed"] for c in report["checks"]),
            "step0_mean_reward": report.get("step0_mean_reward")}


def _pick(tree: dict, keys: dict[str, Any]) -> dict:
    """The parts of a nested dict that `keys` names ({key: True} or {key: {sub-keys}})."""
    return {key: _pick(tree[key], sub) if isinstance(sub, dict) else tree[key]
            for key, sub in keys.items() if key in tree}


# What the evaluation's headline keeps, under the detail's own names (rlvr.experiments reads them).
_SPLIT_HEADLINE = {"step0": {"mean_reward": True, "greedy_success": True},
                   "final": {"mean_reward": True, "greedy_success": True},
                   "delta_mean_reward": {"value": True, "ci_low": True, "ci_high": True},
                   "kl_final_vs_step0": True}
_EVAL_HEADLINE = {"verdict": True, "heldout": _SPLIT_HEADLINE,
                  "train": {"final": {"mean_reward": True},
                            "delta_mean_reward": _SPLIT_HEADLINE["delta_mean_reward"]}}


def eval_metrics(summary: dict) -> dict:
    """The audit's headline: the verdict, held-out reward and greedy success before and after
    with the paired delta and its CI, KL to step 0; on the training prompts the delta only.

    >>> split = {"prompts": 64, "step0": {"mean_reward": 0.4, "greedy_success": 0.3,
    ...          "mean_length": 5.0}, "final": {"mean_reward": 0.6, "greedy_success": 0.5},
    ...          "delta_mean_reward": {"value": 0.2, "ci_low": 0.1, "ci_high": 0.3},
    ...          "kl_final_vs_step0": 0.05}
    >>> m = eval_metrics({"verdict": "improved", "verdict_split": "heldout",
    ...                   "train": split, "heldout": split})
    >>> m["heldout"]["step0"], m["train"]
    ({'mean_reward': 0.4, 'greedy_success': 0.3}, {'final': {'mean_reward': 0.6}, 'delta_mean_reward': {'value': 0.2, 'ci_low': 0.1, 'ci_high': 0.3}})
    """
    return _pick(summary, _EVAL_HEADLINE)
