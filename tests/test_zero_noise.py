"""One noise tolerance (rlvr.core.stats.ZERO_NOISE): a true 0 comes out of the bootstrap as about
+-1e-17 (means of rationals summed in floats), and no rule that reads an interval end against 0
turns on it. An all-zero change, and interval ends at +1e-17 or -1e-17, give "no significant
change" in every rule: the verdict, a split's verdict, a tag's regression, recipe against recipe
(which the registry's champion/challenger reads too) and the comparison's count of runs above 0."""

import re
from pathlib import Path

import pytest

from rlvr.audit.recipe import recipe_difference
from rlvr.audit.slices import SliceRule, audit_verdict, overall_verdict, regression_reasons
from rlvr.core.stats import ZERO_NOISE, above_zero, below_zero
from rlvr.orchestration.comparison import Experiment, setting_rows

ROOT = Path(__file__).resolve().parents[1]
ENDS = {"all zero": (0.0, 0.0), "+-1e-17": (-1e-17, 1e-17), "low +1e-17": (1e-17, 0.3)}
ENDS["high -1e-17"] = (-0.3, -1e-17)


def ci(low: float, high: float) -> dict:
    return {"value": (low + high) / 2, "ci_low": low, "ci_high": high}


@pytest.mark.parametrize("ends", ENDS.values(), ids=ENDS)
def test_the_verdicts_call_noise_no_significant_change(ends):
    assert not above_zero(ci(*ends)) and not below_zero(ci(*ends))
    assert overall_verdict(ci(*ends)) == "no significant change"
    split = {"delta_mean_reward": ci(*ends), "slices": [], "losses": []}
    assert audit_verdict(split) == "no significant change"


@pytest.mark.parametrize("ends", ENDS.values(), ids=ENDS)
def test_a_tag_does_not_regress_on_noise(ends):
    stats = {
        "delta_mean_reward": ci(*ends),
        "delta_pass@8": ci(*ends),
        "step0": {"pass@1": 0.3, "pass@8": 0.6},
        "final": {"pass@1": 0.3, "pass@8": 0.6},
    }
    assert regression_reasons(stats, 8, SliceRule()) == []
    fallen = {**stats, "delta_mean_reward": ci(-0.3, -0.01), "delta_pass@8": ci(-0.2, -0.01)}
    assert len(regression_reasons(fallen, 8, SliceRule())) == 2  # the rule still fires


def _runs(values: list[float], seeds: int = 3) -> dict[int, list[dict]]:
    return {
        s: [{"id": f"r{i}", "step0_reward": 0.0, "final_reward": v} for i, v in enumerate(values)]
        for s in range(seeds)
    }


def test_recipe_against_recipe_calls_noise_a_tie():
    same = _runs([0.25, 0.5, 0.75, 1.0])
    assert recipe_difference(same, same, n_resamples=500)["verdict"] == "tie"  # all zero
    # 0.1 + 0.2 and 0.3 differ by 5.6e-17 in floats: every resample lands there
    noisy, exact = _runs([0.1 + 0.2] * 4), _runs([0.3] * 4)
    for x, y in ((noisy, exact), (exact, noisy)):
        d = recipe_difference(x, y, n_resamples=500)
        assert 0 < abs(d["ci_low"]) < ZERO_NOISE and 0 < abs(d["ci_high"]) < ZERO_NOISE, d
        assert d["verdict"] == "tie", d
    assert recipe_difference(_runs([0.5] * 4), exact, n_resamples=500)["verdict"] == "better"


def test_the_comparison_counts_a_run_above_zero_only_beyond_noise():
    runs = [
        Experiment(f"run{seed}", f"rev{seed}", {"seed": seed}, evaluation={"ci_low": low})
        for seed, low in ((0, 1e-17), (1, 0.05), (2, -1e-17))
    ]
    header, rows = setting_rows(runs)
    assert rows, rows
    assert rows[0][header.index("runs with CI above 0")] == "1/3"


def test_no_rule_compares_an_interval_end_with_0_itself():
    """Every rule reads an interval's side of 0 through above_zero / below_zero."""
    spelled = re.compile(r"ci_(low|high)[\"']?\]?\)? *[<>]=? *-?0\b|\b(low|high) *[<>]=? *-?0\b")
    for path in sorted((ROOT / "rlvr").rglob("*.py")) + sorted((ROOT / "scripts").glob("*.py")):
        code = "\n".join(
            line for line in path.read_text().splitlines() if not line.lstrip().startswith(">>>")
        )
        assert not spelled.search(code), f"{path.relative_to(ROOT)}: {spelled.search(code)[0]}"
