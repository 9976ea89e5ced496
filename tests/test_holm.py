"""One primary claim, the rest Holm-corrected (docs/audit.md): bootstrap p-values, Holm's step-down
adjustment against its definition, a nominal hit that the correction withdraws, the resamples
that give each tail of Holm's strictest level a few hundred draws, and the GRPO - baseline
comparison naming a winner on a secondary figure only on Holm's decision."""

import itertools
import random

import pytest

from rlvr.audit.baseline import HOLM_VERDICTS, compare_baseline
from rlvr.audit.slices import SliceRule, secondary_family, secondary_labels, split_audit
from rlvr.core.stats import bootstrap_p, holm, holm_decide, paired_ci
from rlvr.params.config import load_params
from tests.helpers import ROOT
from tests.test_audit_rules import record

N = 8


def _holm_by_definition(p_values, alpha):
    """Holm 1979 as written: reject the smallest p while p_(i) <= alpha / (m - i), stop at the
    first that is not."""
    rejected, m = set(), len(p_values)
    for rank, i in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        if p_values[i] > alpha / (m - rank):
            break
        rejected.add(i)
    return rejected


def test_holm_rejects_what_its_definition_rejects():
    rng = random.Random(0)
    for _ in range(300):
        p_values = [
            rng.choice([rng.random(), rng.random() / 50]) for _ in range(rng.randint(1, 12))
        ]
        adjusted = holm(p_values)
        assert {i for i, p in enumerate(adjusted) if p <= 0.05} == _holm_by_definition(
            p_values, 0.05
        ), p_values
        assert all(a >= round(p, 12) for a, p in zip(adjusted, p_values))


def test_a_nominal_hit_among_eleven_is_withdrawn():
    family = [{"value": -0.1, "p_value": 0.03}] + [{"value": 0.01, "p_value": 0.6}] * 10
    family = [dict(d) for d in family]
    holm_decide(family, 0.05)
    assert family[0]["p_holm"] == pytest.approx(0.33) and family[0]["holm"] == "holds 0"
    alone = [{"value": -0.1, "p_value": 0.03}]
    holm_decide(alone, 0.05)
    assert alone[0]["holm"] == "below 0"  # a family of one: Holm is the plain test


def test_the_p_value_of_a_true_zero_is_1_and_of_a_clear_gain_is_small():
    assert bootstrap_p([1e-17, -1e-17] * 50) == 1.0
    assert paired_ci([0.1 + 0.2 - 0.3] * 10)["p_value"] == 1.0
    clear = paired_ci([0.3, 0.2, 0.25, 0.4] * 16, n_resamples=5000)
    assert clear["p_value"] == pytest.approx(2 / 5001)
    mixed = paired_ci([0.2, -0.2, 0.1, -0.1] * 8, n_resamples=5000)
    assert mixed["p_value"] > 0.5


def test_the_default_resamples_give_holms_strictest_tail_a_few_hundred_draws():
    resamples = load_params(ROOT / "params.yaml").evaluate.n_resamples
    # 2 split figures + 3 per tag, 3 tags in the default data; two-sided
    strictest = 0.05 / (2 + 3 * 3) / 2
    assert resamples * strictest >= 200


def test_a_split_audit_corrects_every_secondary_figure_together():
    rng = random.Random(1)
    records = [
        record(i, (("add", "sub", "mul")[i % 3],), (2, 0.3), (rng.randint(0, 8), rng.random()))
        for i in range(30)
    ]
    split = split_audit(records, N, SliceRule(), n_resamples=2000)
    family = secondary_family(split, split["slices"], N)
    labels = secondary_labels(split["slices"], N)
    assert len(family) == split["holm_family"] == len(labels) == 2 + 3 * 3
    assert labels[:3] == ["pass@1", f"pass@{N}", "add: mean reward"]
    assert all({"p_value", "p_holm", "holm"} <= set(d) for d in family)


def test_grpo_against_the_baseline_names_a_secondary_winner_only_on_holms_decision():
    rng = random.Random(2)

    def runs(final):
        return {
            s: [
                record(i, ("add",) if i < 10 else ("sub",), (1, 0.2), final(i, rng))
                for i in range(20)
            ]
            for s in (0, 1)
        }

    grpo = runs(lambda i, rng: (rng.randint(4, 8), 0.6 + rng.random() / 5))
    rft = runs(lambda i, rng: (rng.randint(0, 3), 0.2 + rng.random() / 5))
    comparison = compare_baseline("rft", grpo, rft, N, SliceRule(), n_resamples=2000)
    versus = comparison["grpo_minus_baseline"]
    assert "p_holm" not in versus["delta_mean_reward"]  # the primary figure: its interval
    assert versus["delta_mean_reward"]["verdict"] == "better"
    tags = [{"tag": t, **e} for t, e in comparison["tags"].items()]
    family = secondary_family(versus, tags, N)
    assert comparison["holm_family"] == len(family) == 2 + 3 * 2
    for figure in family:
        assert figure["verdict"] == HOLM_VERDICTS[figure["holm"]]
        assert "nominal_verdict" in figure
    assert any(f["verdict"] == "better" for f in family)


def test_every_pair_of_labels_and_figures_lines_up():
    tags = [{"tag": t} for t in ("a", "b")]
    for n in (1, 4):
        labels = secondary_labels(tags, n)
        assert len(labels) == len(set(labels))
        assert all(":" in label for label in itertools.islice(labels, len({1, n}), None))
