"""The remedies for forgetting a rare kind of answer (train.advantage pass_at_k,
train.positive_weight, train.unlikeliness, train.resample_unsolved): what each computes on
hand-made groups, that the trainer trains on exactly that, and their params rules."""

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlvr.data.rows import read_rows
from rlvr.grpo.advantages import pass_at_k_advantages, unlikeliness_penalties, weight_positive
from rlvr.grpo.config import grpo_config
from rlvr.params.config import ParamsError, parse_params
from rlvr.rewards.grpo_math import group_advantages
from tests.helpers import group_batch, group_params, scoring_trainer

ROOT = Path(__file__).resolve().parents[1]
G = 4


# --------------------------------------------------------------- what each one computes


def test_pass_at_1_is_grpos_advantage_with_the_population_std():
    correct = [True, False, False, False, True, True, False, True]
    got = pass_at_k_advantages(correct, 4, k=1)
    for start in (0, 4):
        group = [float(c) for c in correct[start : start + 4]]
        p = sum(group) / 4
        want = [(r - p) / math.sqrt(p * (1 - p)) for r in group]
        assert got[start : start + 4] == pytest.approx(want)


@given(
    st.integers(2, 16).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
    )
)
def test_pass_at_k_advantages_have_zero_mean_and_keep_the_correct_sample_above(case):
    n, c, k = case
    correct = [i < c for i in range(n)]
    advantages = pass_at_k_advantages(correct, n, k)
    assert sum(advantages) == pytest.approx(0.0, abs=1e-9)
    if 0 < c < n and advantages[0] != 0:
        assert advantages[0] > 0 >= advantages[-1]


def test_a_larger_k_takes_less_credit_from_the_wrong_samples_of_a_solved_group():
    """The mechanism: with one correct answer of 8, pass@1 pulls the 7 wrong ones down hard;
    pass@4 much less, so the rare correct answer is not drowned by pushing its group down."""
    correct = [True] + [False] * 7
    wrong = [pass_at_k_advantages(correct, 8, k)[1] for k in (1, 2, 4)]
    assert wrong[0] < wrong[1] < wrong[2] < 0
    assert pass_at_k_advantages([False] * 8, 8, 4) == [0.0] * 8  # no correct answer: no signal
    assert pass_at_k_advantages([True] * 8, 8, 4) == [0.0] * 8


def test_the_unlikeliness_reward_gives_the_rare_correct_answer_the_larger_advantage():
    # one group: two correct answers (the likely '5+3' and the rare '9-1'), two wrong
    correct = [True, True, False, False]
    logps = [-0.5, -6.0, -1.0, -2.0]
    totals = [1.2, 1.2, 0.2, 0.0]  # correctness 1 + format 0.2 (weights 1 and 0.2)
    plain = group_advantages(totals, 4)
    assert plain[0] == plain[1]  # GRPO: both correct answers get the same credit
    penalties = unlikeliness_penalties(correct, logps, 4, strength=0.5)
    assert penalties == [0.5, 0.375, 0.0, 0.0]  # rank 0 (likely) loses 0.5 x 4/4, rank 1 x 3/4
    shaped = group_advantages([t - p for t, p in zip(totals, penalties)], 4)
    assert shaped[1] > shaped[0] > 0  # the rare one now earns more
    assert sum(shaped) == pytest.approx(0.0, abs=1e-9)
    # a group all correct gets a signal too: the likely answers are pushed below the rare one
    allright = group_advantages(
        [1 - p for p in unlikeliness_penalties([True] * 4, [-1, -2, -3, -4], 4, 0.5)], 4
    )
    assert allright[3] > allright[2] > allright[1] > allright[0]


def test_positive_weight_leaves_the_negative_advantages_and_scales_the_positive():
    advantages = group_advantages([1.0, 0.0, 0.0, 0.0], 4)
    weighted = weight_positive(advantages, 0.1)
    assert weighted[1:] == advantages[1:]
    assert weighted[0] == pytest.approx(0.1 * advantages[0])
    assert sum(weighted) < 0  # the push down of the wrong ones outweighs the pull up


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_advantages_are_trls(scale):
    """The one advantage formula with TRL 1.16's std and eps (the unlikeliness reward recomputes
    advantages with it) against TRL's own arithmetic, on rewards with an unscorable (NaN) one."""
    from trl.trainer.utils import nanstd

    rewards = torch.tensor([1.0, 0.2, 0.2, float("nan"), 0.5, 0.5, 0.5, 0.5, 0.0, 1.2, 0.3, 0.2])
    groups = rewards.view(-1, 4)
    mean = torch.nanmean(groups, dim=1).repeat_interleave(4)
    std = (
        nanstd(groups, dim=1).repeat_interleave(4)
        if scale != "batch"
        else nanstd(rewards).expand_as(rewards)
    )
    trl = rewards - mean
    if scale != "none":
        trl = trl / (std + 1e-4)
    trl = torch.nan_to_num(trl, nan=0.0)
    assert group_advantages(rewards.tolist(), 4, scale) == pytest.approx(trl.tolist(), abs=1e-6)


# --------------------------------------------------------------- the trainer trains on them


@pytest.fixture(scope="module")
def rows():
    return read_rows(ROOT / "data" / "grpo_train.jsonl")[:16]


def correct_if_odd():
    """A correctness reward: rows with an odd target get 1, 0, 1, 0, ... in scoring order
    (some correct answers), rows with an even target never a correct one."""
    calls = iter(range(10**9))

    def score(text, verifier, n_tokens):
        return float(next(calls) % 2) if verifier["target"] % 2 else 0.0

    return score


def _trainer(tiny_policy_dir, rows, tmp_path, train: dict, reward=None, beta=0.05):
    params = group_params(G, **train)
    return scoring_trainer(
        tiny_policy_dir,
        rows,
        tmp_path,
        params,
        reward or correct_if_odd(),
        beta=beta,
        dynamic_sampling=params.train.dynamic_sampling,
    )


def _batch(rows):
    return group_batch(rows, G)


def _split(rows):
    return (
        [r for r in rows if r.verifier["target"] % 2],
        [r for r in rows if r.verifier["target"] % 2 == 0],
    )


def test_the_trainer_trains_on_pass_at_k_advantages(tiny_policy_dir, rows, tmp_path):
    odd, even = _split(rows)
    trainer = _trainer(tiny_policy_dir, rows, tmp_path, {"advantage": "pass_at_k", "pass_at_k": 2})
    output = trainer._generate_and_score_completions(_batch([odd[0], even[0]]))
    correct = trainer._correct()
    assert sum(correct[:G]) == 2 and not any(correct[G:])  # the odd row's 0, 1, 0, 1; none
    assert output["advantages"].tolist() == pytest.approx(pass_at_k_advantages(correct, G, 2))
    assert trainer.batch_checks[-1]["max_abs_group_mean"] < 1e-6


def test_the_trainer_ranks_correct_answers_by_the_policys_likelihood(
    tiny_policy_dir, rows, tmp_path
):
    odd, _ = _split(rows)
    trainer = _trainer(
        tiny_policy_dir, rows, tmp_path, {"unlikeliness": 0.5}, reward=lambda text, verifier, n: 1.0
    )  # every answer correct
    output = trainer._generate_and_score_completions(_batch(odd[:2]))
    # GRPO would give these all-correct groups no gradient; the unlikeliness reward does
    assert output["advantages"].abs().max() > 0.1
    logps = trainer._policy_token_logps(output)
    sequence = (logps * output["completion_mask"]).sum(dim=1).tolist()
    penalties = unlikeliness_penalties([True] * 2 * G, sequence, G, 0.5)
    want = group_advantages([1.0 - p for p in penalties], G)
    assert output["advantages"].tolist() == pytest.approx(want, abs=1e-5)
    for group in range(2):  # within a group, the less likely the answer, the larger its credit
        order = sorted(range(group * G, group * G + G), key=lambda i: sequence[i])
        credit = [output["advantages"][i].item() for i in order]
        assert credit == sorted(credit, reverse=True)


def test_the_trainer_weights_positive_advantages_after_the_group_checks(
    tiny_policy_dir, rows, tmp_path
):
    odd, even = _split(rows)
    plain = _trainer(tiny_policy_dir, rows, tmp_path / "plain", {})
    weighted = _trainer(tiny_policy_dir, rows, tmp_path / "weighted", {"positive_weight": 0.1})
    torch.manual_seed(0)
    a = plain._generate_and_score_completions(_batch([odd[0], even[0]]))["advantages"].tolist()
    torch.manual_seed(0)
    b = weighted._generate_and_score_completions(_batch([odd[0], even[0]]))["advantages"].tolist()
    assert any(x > 0 for x in a)
    assert b == pytest.approx(weight_positive(a, 0.1))
    assert weighted.batch_checks[-1]["max_abs_group_mean"] < 1e-6  # checked before weighting


def test_dynamic_sampling_samples_an_unsolved_prompt_again_before_new_ones(
    tiny_policy_dir, rows, tmp_path
):
    odd, even = _split(rows)
    trainer = _trainer(
        tiny_policy_dir,
        even + odd[:1],
        tmp_path,
        {"dynamic_sampling": True, "max_sampling_rounds": 2, "resample_unsolved": True},
    )
    seen = []
    score = trainer._score_batch

    def record(batch):
        seen.append([x["prompt"] for x in batch[::G]])
        return score(batch)

    trainer._score_batch = record
    trainer._generate_and_score_completions(_batch([odd[0], even[0]]))
    assert seen[0] == [odd[0].prompt, even[0].prompt]
    # round 1 kept the odd row's group; the even row's had no correct answer: sampled again first
    assert seen[1][0] == even[0].prompt and len(seen[1]) == 2
    assert trainer._metrics["train"]["dynamic_sampling/resampled_unsolved"] == [0.5]


def test_a_group_with_no_signal_under_pass_at_k_is_dropped_by_dynamic_sampling(
    tiny_policy_dir, rows, tmp_path
):
    """Dynamic sampling keeps the groups whose advantages are not all 0: under pass@k a group
    with no correct answer has none, even where another reward would differ."""
    odd, even = _split(rows)
    trainer = _trainer(
        tiny_policy_dir,
        rows,
        tmp_path,
        {
            "advantage": "pass_at_k",
            "pass_at_k": 2,
            "dynamic_sampling": True,
            "max_sampling_rounds": 1,
        },
    )
    output = trainer._generate_and_score_completions(_batch([even[0], odd[0]]))
    assert len(output["advantages"]) == G  # the even row's group left out
    assert output["advantages"].tolist() == pytest.approx(
        pass_at_k_advantages([False, True, False, True], G, 2)
    )


# --------------------------------------------------------------- their params rules


@pytest.mark.parametrize(
    "raw,message",
    [
        (
            {"train": {"advantage": "pass_at_k", "pass_at_k": 9}},
            "train.pass_at_k = 9: must be at most train.grpo.num_generations (8)",
        ),
        (
            {"train": {"unlikeliness": 0.5, "advantage": "pass_at_k"}},
            "train.unlikeliness = 0.5: has no effect with train.advantage = 'pass_at_k'",
        ),
        ({"train": {"unlikeliness": 1.5}}, "train.unlikeliness = 1.5: must be in [0, 1]"),
        ({"train": {"positive_weight": 0}}, "train.positive_weight = 0.0: must be in (0, 1]"),
        (
            {
                "train": {"advantage": "pass_at_k"},
                "rewards": {"funcs": ["format"], "weights": [1.0]},
            },
            "train.advantage = 'pass_at_k': needs 'correctness' in rewards.funcs",
        ),
        (
            {"train": {"unlikeliness": 0.2}, "rewards": {"funcs": ["format"], "weights": [1.0]}},
            "train.unlikeliness = 0.2: needs 'correctness' in rewards.funcs",
        ),
    ],
)
def test_the_remedies_params_are_checked(raw, message):
    with pytest.raises(ParamsError) as error:
        parse_params(raw)
    assert message in str(error.value)


def test_trls_own_remedies_are_named_params_that_reach_its_config(tmp_path):
    """TRL computes these itself (its loss); the pipeline names them, checks them and hands
    them over: clip-higher, the entropy-quantile mask, the (adaptive) entropy bonus."""
    params = parse_params(
        {
            "train": {
                "grpo": {
                    "epsilon_high": 0.28,
                    "num_iterations": 2,
                    "top_entropy_quantile": 0.2,
                    "entropy_coef": 0.01,
                    "use_adaptive_entropy": True,
                    "entropy_target": 0.35,
                }
            }
        }
    )
    config = grpo_config(
        params.train, output_dir=tmp_path, max_steps=2, seed=0, reward_weights=[1.0, 0.2]
    )
    assert (config.epsilon, config.epsilon_high) == (0.2, 0.28)
    assert (
        config.top_entropy_quantile,
        config.entropy_coef,
        config.use_adaptive_entropy,
        config.entropy_target,
    ) == (0.2, 0.01, True, 0.35)
    default = grpo_config(
        parse_params({}).train, output_dir=tmp_path, max_steps=2, seed=0, reward_weights=[1.0, 0.2]
    )
    assert default.epsilon_high is None  # 0 in params: TRL's default (its trainer takes epsilon)
    assert (default.top_entropy_quantile, default.entropy_coef, default.use_adaptive_entropy) == (
        1.0,
        0.0,
        False,
    )


def test_clip_higher_without_a_second_update_is_refused_as_doing_nothing():
    with pytest.raises(ParamsError) as error:
        parse_params({"train": {"grpo": {"epsilon_high": 0.28}}})
    assert str(error.value) == (
        "params.yaml: train.grpo.epsilon_high = 0.28: has no effect with num_iterations 1: the "
        "policy ratio is exactly 1 when the loss is computed, so clipping never acts; set "
        "num_iterations to 2 or more"
    )
    # with two updates per batch it acts, dynamic sampling included (its KL: test_dynamic_sampling)
    parse_params(
        {
            "train": {
                "dynamic_sampling": True,
                "save_steps": 50,
                "grpo": {"epsilon_high": 0.28, "num_iterations": 2},
            }
        }
    )


def _hand_made_batch(trainer, rows, ratio: float, advantage: float):
    """A scored batch whose every token has importance ratio `ratio` (its sampling log-probs set
    below the policy's) and every completion the advantage `advantage`."""
    output = trainer._generate_and_score_completions(_batch(rows))
    logps = trainer._policy_token_logps(output, fresh=True)
    output["old_per_token_logps"] = logps - math.log(ratio)
    output["advantages"] = torch.full_like(output["advantages"], advantage)
    trainer.current_gradient_accumulation_steps = 1  # what the training loop sets
    return output


@pytest.mark.parametrize("epsilon_high,clipped", [(0.0, 1.0), (0.28, 0.0)])
def test_clip_higher_lets_a_ratio_of_1_25_through_where_epsilon_0_2_clips_it(
    tiny_policy_dir, rows, tmp_path, epsilon_high, clipped
):
    """TRL computes it: with epsilon 0.2 a positive-advantage token at ratio 1.25 is clipped (its
    gradient is cut); with epsilon_high 0.28 it is not (DAPO's clip-higher)."""
    odd, _ = _split(rows)
    trainer = _trainer(
        tiny_policy_dir,
        rows,
        tmp_path,
        {
            "grpo": {
                "num_generations": G,
                "per_device_train_batch_size": 2 * G,
                "max_completion_length": 6,
                "num_iterations": 2,
                "epsilon_high": epsilon_high,
            },
            "save_steps": 50,
        },
    )
    inputs = _hand_made_batch(trainer, odd[:2], ratio=1.25, advantage=1.0)
    trainer._compute_loss(trainer.model, inputs)
    assert trainer._metrics["train"]["clip_ratio/high_mean"][-1] == clipped


def test_the_entropy_bonus_lowers_the_loss_by_coef_times_the_mean_entropy(
    tiny_policy_dir, rows, tmp_path
):
    odd, _ = _split(rows)
    losses, entropies = [], []
    for coef in (0.0, 0.05):
        trainer = _trainer(
            tiny_policy_dir,
            rows,
            tmp_path / str(coef),
            {
                "grpo": {
                    "num_generations": G,
                    "per_device_train_batch_size": 2 * G,
                    "max_completion_length": 6,
                    "entropy_coef": coef,
                }
            },
        )
        torch.manual_seed(0)
        inputs = _hand_made_batch(trainer, odd[:2], ratio=1.0, advantage=0.5)
        losses.append(trainer._compute_loss(trainer.model, inputs).item())
        entropies.append(trainer._metrics["train"]["entropy"][-1])
    assert entropies[0] == pytest.approx(entropies[1]) and entropies[0] > 0.1
    assert losses[1] == pytest.approx(losses[0] - 0.05 * entropies[0], rel=1e-4, abs=1e-6)
