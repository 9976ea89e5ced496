"""The figures people compare across runs: what `dvc exp show` and `dvc metrics diff` list.
Each stage writes its whole result as a plain output (every rule, check, step and statistic) and
a DVC metric under `metrics/` with only its headline: pass/fail of each gate, the data check,
the smoke run, and the recipe over its seeds (rlvr.audit.recipe.recipe_metrics, metrics/recipe.json).
Keys are short and flat where they can be, because `dvc exp show` prints one column per key (the
first of each file headed by its path), then the params, then a hash column per changed
dependency file. `train_metrics` and `eval_metrics` are one seed's headline, from its summaries:
the model card and the experiments' table show them. Each function here is a projection of the
detail, so the two cannot disagree.
"""

from __future__ import annotations


def gate_metrics(verdict: dict) -> dict:
    """The reward-test gate's headline.

    >>> gate_metrics({"passed": True, "counts": {"tests": 12, "failed": 0, "errors": 0}})
    {'passed': True, 'tests': 12, 'failed': 0}
    """
    counts = verdict.get("counts", {})
    return {
        "passed": bool(verdict["passed"]),
        "tests": counts.get("tests", 0),
        "failed": counts.get("failed", 0) + counts.get("errors", 0),
    }


def validation_metrics(summary: dict) -> dict:
    """The data contract's headline: held or not, and how many problems.

    >>> validation_metrics({"passed": False, "problems": 2, "files": {}})
    {'passed': False, 'problems': 2}
    """
    return {"passed": bool(summary["passed"]), "problems": summary["problems"]}


def smoke_metrics(report: dict) -> dict:
    """The smoke run's headline: passed, failed checks, the step-0 reward baseline.

    >>> smoke_metrics({"passed": True, "step0_mean_reward": 0.42,
    ...                "checks": [{"passed": True}, {"passed": True}]})
    {'passed': True, 'failed_checks': 0, 'step0_reward': 0.42}
    """
    return {
        "passed": bool(report["passed"]),
        "failed_checks": sum(not c["passed"] for c in report["checks"]),
        "step0_reward": report.get("step0_mean_reward"),
    }


def train_metrics(summary: dict) -> dict:
    """The training run's headline: steps, and the KL and reward it ended at (means over the last
    10 steps, rlvr.pipeline.training.run_metrics; correctness and the rest stay in the summary).

    (Which step became models/final, and the validation scores, stay in the summary's
    `selection`: `dvc exp show` has a column per metric, and the table must fit.)

    >>> train_metrics({"steps": 400, "last10_mean_reward": 0.84, "last10_mean_correctness": 0.8,
    ...                "last10_mean_kl": 0.3, "first10_mean_reward": 0.4})
    {'steps': 400, 'reward': 0.84, 'kl': 0.3}
    """
    return {
        "steps": summary["steps"],
        "reward": summary["last10_mean_reward"],
        "kl": summary["last10_mean_kl"],
    }


def eval_metrics(summary: dict, split_name: str | None = None) -> dict:
    """The audit's headline, on the split the verdict follows (held-out; or `split_name`, whose verdict the caller sets): the verdict first (a
    long value: the file's path heads its column), mean sampled reward and greedy success at step
    0 and final, the CI of the paired delta of mean reward (the delta itself is reward -
    reward0: the summary keeps it), and pass@1 and pass@n (n samples per prompt) at step 0 and
    final: a pass@n that falls while pass@1 rises is a narrowing.

    The shares and the CI are rounded to 3 decimals, as every report prints them: DVC shows 5
    significant digits, and `-0.023729` where `-0.024` says as much costs the table its width
    (after a sweep, `dvc exp show --only-changed` must fit 200 columns).

    >>> split = {"step0": {"mean_reward": 0.4, "greedy_success": 0.3},
    ...          "final": {"mean_reward": 0.6, "greedy_success": 0.5},
    ...          "delta_mean_reward": {"value": 0.2, "ci_low": 0.1, "ci_high": 0.3},
    ...          "samples_per_prompt": 4, "pass_at_k": {"step0": {"1": 0.2, "4": 0.6},
    ...                                                 "final": {"1": 0.50012, "4": 0.55}}}
    >>> eval_metrics({"verdict": "mixed", "verdict_split": "heldout", "heldout": split})
    {'verdict': 'mixed', 'reward0': 0.4, 'reward': 0.6, 'ci_low': 0.1, 'ci_high': 0.3, 'greedy0': 0.3, 'greedy': 0.5, 'pass1_0': 0.2, 'pass1': 0.5, 'passn_0': 0.6, 'passn': 0.55}
    """  # noqa: E501 (one-line outputs and tables)
    split = summary[split_name or summary["verdict_split"]]
    delta = split["delta_mean_reward"]
    curves, n = split["pass_at_k"], str(split["samples_per_prompt"])
    shares = {
        "ci_low": delta["ci_low"],
        "ci_high": delta["ci_high"],
        "greedy0": split["step0"]["greedy_success"],
        "greedy": split["final"]["greedy_success"],
        "pass1_0": curves["step0"]["1"],
        "pass1": curves["final"]["1"],
        "passn_0": curves["step0"][n],
        "passn": curves["final"][n],
    }
    return {
        "verdict": summary["verdict"],
        "reward0": split["step0"]["mean_reward"],
        "reward": split["final"]["mean_reward"],
        **{key: None if value is None else round(value, 3) for key, value in shares.items()},
    }
