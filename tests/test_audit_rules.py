"""What a mean can hide (rlvr/audit/slices.py), on synthetic scored rows: the pass@k estimator against
hand values and a brute-force enumeration, each regression rule firing and its near miss not, the
verdict, solutions lost and new, diversity, and rows without tags. No model, no training."""

import itertools

import pytest

from rlvr.audit.alarms import AlarmThresholds, audit_rules
from rlvr.audit.slices import (
    SliceRule,
    audit_verdict,
    crossing,
    diversity,
    regression_reasons,
    slices,
    solutions,
    split_audit,
    verdict_line,
)
from rlvr.core.stats import k_values, pass_at_k, pass_at_k_curve

# --------------------------------------------------------------------------- pass@k


@pytest.mark.parametrize(
    "n,c,k,expected",
    [
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 3, 1, 0.3),  # pass@1 is the share of correct samples
        (8, 0, 8, 0.0),  # c = 0: never
        (8, 8, 1, 1.0),  # c = n: always
        (8, 1, 8, 1.0),  # k = n: solved when any sample is
        (8, 0, 1, 0.0),
        (
            32,
            2,
            16,
            1
            - (30 * 29 * 28 * 27 * 26 * 25 * 24 * 23 * 22 * 21 * 20 * 19 * 18 * 17 * 16 * 15)
            / (32 * 31 * 30 * 29 * 28 * 27 * 26 * 25 * 24 * 23 * 22 * 21 * 20 * 19 * 18 * 17),
        ),
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_the_mean_over_every_subset_of_k_samples():
    for n in range(1, 9):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(samples, k))
                brute = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)


def test_the_k_values_and_the_curve():
    assert k_values(32) == [1, 2, 4, 8, 16, 32] and k_values(6) == [1, 2, 4, 6]
    curve = pass_at_k_curve([0, 2, 4], 4)
    assert list(curve) == ["1", "2", "4"]
    assert curve["1"] == pytest.approx((0 + 0.5 + 1) / 3)
    assert curve["4"] == pytest.approx(2 / 3)


def test_crossing_says_where_each_policy_solves_more():
    base = {"1": 0.2, "2": 0.37, "4": 0.55, "8": 0.70, "16": 0.77, "32": 0.80}
    final = {"1": 0.43, "2": 0.47, "4": 0.50, "8": 0.53, "16": 0.56, "32": 0.58}
    assert (
        crossing({"step0": base, "final": final})
        == "the final model solves more prompts at k <= 2; the base model solves more at k >= 4"
    )
    assert crossing({"step0": base, "final": {k: v + 0.01 for k, v in base.items()}}) is None
    assert crossing({"step0": base, "final": base}) is None  # equal everywhere: no crossing
    # a curve that dips below in the middle only
    middle = {**{k: v + 0.1 for k, v in base.items()}, "4": 0.5}
    assert crossing({"step0": base, "final": middle}).endswith(
        "the base model solves more at k = 4"
    )


# --------------------------------------------------------------------------- regression rules


def ci(value, low, high):
    return {"value": value, "ci_low": low, "ci_high": high}


def holm(value, low, high, p_holm=0.01):
    """A secondary figure as judge() leaves it: its nominal interval and Holm's decision at 5%."""
    call = "holds 0" if p_holm > 0.05 else "above 0" if value > 0 else "below 0"
    return {**ci(value, low, high), "p_holm": p_holm, "holm": call}


FLAT = ci(0.0, -0.1, 0.1)
HFLAT = holm(0.0, -0.1, 0.1, 1.0)


def stats(pass1=(0.5, 0.5), passn=(0.8, 0.8), reward_ci=FLAT, pass1_ci=HFLAT, passn_ci=HFLAT, n=8):
    return {
        "delta_mean_reward": reward_ci,
        "delta_pass@1": pass1_ci,
        f"delta_pass@{n}": passn_ci,
        "step0": {"pass@1": pass1[0], f"pass@{n}": passn[0]},
        "final": {"pass@1": pass1[1], f"pass@{n}": passn[1]},
    }


DOWN = holm(-0.1, -0.2, -0.05, 0.01)  # Holm: below 0
NOMINAL = holm(-0.1, -0.2, -0.05, 0.2)  # below 0 alone, not after Holm's correction


@pytest.mark.parametrize(
    "case,expected",
    [
        (stats(), []),
        # the primary figure (no Holm: the whole split's) wholly below 0 ... and touching 0
        (stats(reward_ci=ci(-0.05, -0.1, -0.001)), ["mean reward -0.050 [-0.100, -0.001]"]),
        (stats(reward_ci=ci(-0.05, -0.1, 0.0)), []),
        # a tag's mean reward is secondary: Holm decides
        (
            stats(reward_ci=holm(-0.05, -0.1, -0.01, 0.03)),
            ["mean reward -0.050 [-0.100, -0.010], Holm p 0.030"],
        ),
        (stats(reward_ci=holm(-0.05, -0.1, -0.01, 0.3)), []),
        # forgotten: success falls from >= 0.1 to <= 0.02 and its delta falls after Holm
        (
            stats(pass1=(0.1, 0.02), pass1_ci=DOWN),
            ["success 0.10 -> 0.02, delta -0.100 [-0.200, -0.050], Holm p 0.010"],
        ),
        (stats(pass1=(0.1, 0.02), pass1_ci=NOMINAL), []),  # no interval behind the drop
        (stats(pass1=(0.099, 0.0), pass1_ci=DOWN), []),
        (stats(pass1=(0.3, 0.021), pass1_ci=DOWN), []),
        # pass@n falls (forgotten or narrowed) only when its delta falls after Holm
        (
            stats(passn=(0.31, 0.0), passn_ci=DOWN),
            ["pass@8 0.31 -> 0.00, delta -0.100 [-0.200, -0.050], Holm p 0.010"],
        ),
        (stats(passn=(0.31, 0.0), passn_ci=NOMINAL), []),
        (
            stats(passn=(0.8, 0.6), passn_ci=holm(-0.2, -0.3, -0.1, 0.02)),
            ["pass@8 0.80 -> 0.60, delta -0.200 [-0.300, -0.100], Holm p 0.020"],
        ),
        (stats(passn=(0.8, 0.6), passn_ci=holm(-0.2, -0.3, -0.1, 0.06)), []),
    ],
)
def test_each_rule_fires_and_its_near_miss_does_not(case, expected):
    assert regression_reasons(case, 8, SliceRule()) == expected


def test_the_thresholds_come_from_the_rule():
    case = stats(pass1=(0.3, 0.05), pass1_ci=DOWN)
    assert regression_reasons(case, 8, SliceRule()) == []
    assert regression_reasons(case, 8, SliceRule(drop_from=0.2, drop_to=0.05)) == [
        "success 0.30 -> 0.05, delta -0.100 [-0.200, -0.050], Holm p 0.010"
    ]


def record(i, tags=("add",), step0=(4, 0.5), final=(4, 0.5), n=8, greedy=(0.0, 0.0)):
    """One scored prompt: (correct samples, mean reward) for each policy."""
    return {
        "id": f"r{i}",
        "prompt": f"p{i}",
        "tags": list(tags),
        "samples": n,
        "step0_correct": step0[0],
        "step0_reward": step0[1],
        "final_correct": final[0],
        "final_reward": final[1],
        "step0_greedy_correct": greedy[0],
        "final_greedy_correct": greedy[1],
        "step0_distinct": 3,
        "final_distinct": 1,
        "step0_distinct_correct": 2,
        "final_distinct_correct": 1,
        "step0_entropy": 0.4,
        "final_entropy": 0.1,
        "step0_tokens": 40,
        "final_tokens": 40,
    }


def forgetting_split(sub_rows=16, n=8):
    """The default run's shape: the add rows gain (10 of them their first correct answer), the
    sub rows lose every correct answer (5 of 16 had one at step 0: pass@8 0.31 -> 0.00) while
    their mean reward barely moves (the format reward holds it up)."""
    gains = [record(i, ("add",), (0 if i < 10 else 1, 0.3), (6, 0.8)) for i in range(40)]
    subs = [
        record(100 + i, ("sub",), (1, 0.25) if i < 5 else (0, 0.15), (0, 0.2))
        for i in range(sub_rows)
    ]
    return gains + subs


def test_a_forgotten_tag_makes_an_improved_run_mixed():
    split = split_audit(forgetting_split(), 8, SliceRule(), n_resamples=2000)
    split["delta_mean_reward"] = ci(0.2, 0.1, 0.3)  # as evaluate sets it beside the audit
    by_tag = {s["tag"]: s for s in split["slices"]}
    assert not by_tag["add"]["regressed"]
    sub = by_tag["sub"]
    assert sub["rows"] == 16 and sub["weighed"] and sub["regressed"]
    assert sub["step0"]["pass@8"] == pytest.approx(5 / 16) and sub["final"]["pass@8"] == 0
    assert split["losses"] == []  # the whole split gained solutions: only the tag shows it
    assert audit_verdict(split) == "mixed"
    line = verdict_line("mixed", split)
    assert line.startswith(
        "mixed: improved on the primary figure, held-out mean reward (+0.200 [+0.100, +0.300]); "
        "Holm-corrected: regressed on sub (16 rows: pass@8 0.31 -> 0.00, delta -0.312 ["
    )
    assert split["holm_family"] == 2 + 3 * 2  # pass@1, pass@8; per tag: reward, pass@1, pass@8


def test_a_tag_with_fewer_rows_than_min_slice_rows_is_reported_but_not_weighed():
    split = split_audit(forgetting_split(sub_rows=7), 8, SliceRule(min_rows=8), n_resamples=2000)
    split["delta_mean_reward"] = ci(0.2, 0.1, 0.3)
    sub = next(s for s in split["slices"] if s["tag"] == "sub")
    assert sub["regressed"] and not sub["weighed"]
    assert audit_verdict(split) == "improved"
    split = split_audit(forgetting_split(sub_rows=7), 8, SliceRule(min_rows=7), n_resamples=2000)
    split["delta_mean_reward"] = ci(0.2, 0.1, 0.3)
    assert audit_verdict(split) == "mixed"


def test_the_verdict_keeps_regressed_and_calls_a_flat_run_with_a_loss_mixed():
    lost = {"tag": "sub", "rows": 16, "regressed": True, "weighed": True, "reasons": ["x"]}
    flat = {"delta_mean_reward": FLAT, "slices": [lost], "losses": []}
    assert audit_verdict(flat) == "mixed"
    assert audit_verdict({**flat, "delta_mean_reward": ci(-0.2, -0.3, -0.1)}) == "regressed"
    assert audit_verdict({**flat, "slices": []}) == "no significant change"
    narrowed = {
        "delta_mean_reward": ci(0.2, 0.1, 0.3),
        "slices": [],
        "losses": ["pass@32 0.80 -> 0.58, delta -0.219 [-0.328, -0.109]"],
    }
    assert audit_verdict(narrowed) == "mixed"
    assert verdict_line("mixed", narrowed) == (
        "mixed: improved on the primary figure, held-out mean reward (+0.200 [+0.100, +0.300]); "
        "Holm-corrected: narrowed overall (pass@32 0.80 -> 0.58, delta -0.219 [-0.328, -0.109])"
    )


def test_a_whole_split_that_narrows_is_a_loss():
    # pass@1 rises on every row, but half the rows lose their only correct answers
    records = [record(i, (), (2, 0.3), (8, 1.0)) for i in range(16)] + [
        record(16 + i, (), (2, 0.3), (0, 0.1)) for i in range(16)
    ]
    split = split_audit(records, 8, SliceRule(), n_resamples=2000)
    assert split["pass_at_k"]["final"]["1"] > split["pass_at_k"]["step0"]["1"]
    assert split["losses"] and split["losses"][0].startswith("pass@8 ")
    assert split["delta_pass@8"]["ci_high"] < 0 < split["delta_pass@1"]["ci_low"]


def test_rows_without_tags_have_no_slices_and_the_verdict_follows_the_ci():
    records = [record(i, (), (2, 0.3), (4, 0.6)) for i in range(20)]
    split = split_audit(records, 8, SliceRule(), n_resamples=2000)
    split["delta_mean_reward"] = ci(0.3, 0.2, 0.4)
    assert split["slices"] == [] and split["losses"] == []
    assert audit_verdict(split) == "improved"
    assert verdict_line("improved", split) == (
        "improved: improved on the primary figure, held-out mean reward (+0.300 [+0.200, +0.400])"
    )


def test_solutions_lost_and_new():
    records = [
        record(0, ("sub",), (2, 0.3), (0, 0.0)),
        record(1, (), (0, 0.0), (3, 0.4)),
        record(2, (), (1, 0.1), (1, 0.1)),
        record(3, (), (0, 0.0), (0, 0.0)),
    ]
    result = solutions(records)
    assert (result["lost_count"], result["new_count"], result["kept"]) == (1, 1, 1)
    assert result["lost"] == [{"id": "r0", "tags": ["sub"], "prompt": "p0"}]
    assert [r["id"] for r in result["new"]] == ["r1"]


def test_diversity_per_solved_prompt_and_token_weighted_entropy():
    records = [
        {
            **record(0, (), (2, 0.3), (2, 0.3)),
            "step0_distinct_correct": 2,
            "step0_distinct": 6,
            "step0_entropy": 0.5,
            "step0_tokens": 10,
        },
        {
            **record(1, (), (0, 0.0), (1, 0.1)),
            "step0_distinct_correct": 0,
            "step0_distinct": 2,
            "step0_entropy": 1.0,
            "step0_tokens": 30,
        },
    ]
    d = diversity(records, "step0")
    assert d["distinct_correct_per_solved"] == 2.0  # the unsolved prompt does not count
    assert d["distinct_share"] == pytest.approx(8 / 16)
    assert d["entropy"] == pytest.approx((0.5 * 10 + 1.0 * 30) / 40)
    unmeasured = [{**r, "step0_entropy": None, "step0_correct": 0} for r in records]
    assert diversity(unmeasured, "step0")["entropy"] is None
    assert diversity(unmeasured, "step0")["distinct_correct_per_solved"] is None  # none solved


# --------------------------------------------------------------------------- the two alarms

T = AlarmThresholds(
    window=10,
    format_rise=0.1,
    correctness_flat=0.02,
    length_growth=1.5,
    kl_spike_ratio=5.0,
    kl_spike_min=0.05,
    overfit_drop=0.05,
    zero_spread_share=0.5,
    diversity_drop=0.5,
)


def evaluation(entropy=(0.4, 0.1), distinct=(1.6, 1.2), rise=0.17, slices_=()):
    split = {
        "delta_mean_reward": ci(rise, rise - 0.08, rise + 0.08),
        "slices": list(slices_),
        "diversity": {
            "step0": {"distinct_correct_per_solved": distinct[0], "entropy": entropy[0]},
            "final": {"distinct_correct_per_solved": distinct[1], "entropy": entropy[1]},
        },
    }
    return {"verdict_split": "heldout", "heldout": split}


def fired(ev):
    return {r["rule"].split(":")[0]: r["fired"] for r in audit_rules(ev, T)}


def test_diversity_collapse_fires_on_a_fall_beyond_the_threshold_while_reward_rises():
    assert fired(evaluation())["diversity collapse"]  # entropy -75%
    assert fired(evaluation(entropy=(0.4, 0.25), distinct=(2.0, 0.9)))["diversity collapse"]
    assert not fired(evaluation(entropy=(0.4, 0.2)))["diversity collapse"]  # exactly -50%
    assert not fired(evaluation(rise=-0.01))["diversity collapse"]  # reward did not rise
    none = evaluation(entropy=(None, None), distinct=(None, None))
    rules = {r["rule"].split(":")[0]: r for r in audit_rules(none, T)}
    assert not rules["diversity collapse"]["fired"]
    assert rules["diversity collapse"]["value"].startswith("not measured")


def test_slice_forgotten_fires_on_a_weighed_regressed_tag_only():
    sub = {
        "tag": "sub",
        "rows": 16,
        "regressed": True,
        "weighed": True,
        "reasons": ["pass@8 0.31 -> 0.00"],
    }
    rules = {r["rule"].split(":")[0]: r for r in audit_rules(evaluation(slices_=[sub]), T)}
    assert rules["slice forgotten"]["fired"]
    assert rules["slice forgotten"]["value"] == "sub (16 rows: pass@8 0.31 -> 0.00)"
    assert not fired(evaluation(slices_=[{**sub, "weighed": False}]))["slice forgotten"]
    assert not fired(evaluation(slices_=[{**sub, "regressed": False}]))["slice forgotten"]


def test_every_tag_is_its_own_slice_even_when_a_row_has_several():
    records = [
        record(0, ("add", "mul"), (2, 0.3), (4, 0.5)),
        record(1, ("mul",), (2, 0.3), (4, 0.5)),
    ]
    result = {s["tag"]: s["rows"] for s in slices(records, 8, SliceRule(), n_resamples=500)}
    assert result == {"add": 1, "mul": 2}
