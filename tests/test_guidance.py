"""Off-policy guidance (train.guidance; rlvr/grpo/guidance.py, LUFFY): what its pure functions
compute on hand-made groups, that the trainer puts the guide where they say and gives it the
mixed group's advantage, that its loss is TRL's plus the shaped term, that a batch without a
guide is TRL's own, and its params rules."""

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from trl import GRPOTrainer

from rlvr.core.metric_keys import (
    GUIDE_REWARD,
    GUIDED_ADVANTAGE,
    GUIDED_SHARE,
    ON_POLICY_REWARD,
    SAMPLED_COMPLETIONS,
)
from rlvr.data.rows import read_rows
from rlvr.grpo.guidance import (
    GAMMA,
    GUIDED,
    guide_ordinals,
    guided_rows,
    guided_token_loss,
    local_rows,
    per_group_guides,
    pick_guides,
    rescale_guided_groups,
    shaped,
)
from rlvr.params.config import ParamsError, parse_params
from rlvr.rewards.grpo_math import group_advantages
from tests.helpers import group_batch, group_params, scoring_trainer

ROOT = Path(__file__).resolve().parents[1]
G = 4
GUIDE = "7*6"  # the tiny char model never samples it at 6 tokens: only a guide is correct


def test_a_lone_correct_guide_gets_the_mixed_groups_advantage():
    """Eq. 4: over the mixed group. 7 wrong on-policy answers and the guide: with the group's
    std (TRL's scale_rewards group, Bessel's n - 1) it is +2.47, the others -0.35; without
    (scale_rewards none, LUFFY's runs) +0.875 and -0.125."""
    rewards = [0.0] * 7 + [1.0]
    advantages = group_advantages(rewards, 8)
    mean = 1 / 8
    std = math.sqrt(8 / 7 * mean * (1 - mean))
    assert group_advantages(rewards, 8, scale="none")[-2:] == [-0.125, 0.875]
    assert advantages[-1] == pytest.approx((1 - mean) / std, rel=1e-3)
    assert advantages[0] == pytest.approx(-mean / std, rel=1e-3)


def test_the_shaped_loss_and_its_gradient_are_luffys():
    logps = torch.log(torch.tensor([[0.01, 0.5, 0.99]])).requires_grad_()
    advantage = torch.tensor([2.0])
    loss = guided_token_loss(logps, advantage)
    p = logps.detach().exp()
    assert torch.allclose(loss, -2.0 * p / (p + GAMMA))
    loss.sum().backward()
    # d/dlogp of -A p/(p+g) = -A g p / (p+g)^2: a rare token pulls hardest per unit of p
    assert torch.allclose(logps.grad, -2.0 * GAMMA * p / (p + GAMMA) ** 2)
    weight_per_p = logps.grad / p
    assert weight_per_p[0, 0] < weight_per_p[0, 1] < weight_per_p[0, 2] < 0
    assert shaped(1.0) == pytest.approx(1 / 1.1)


def test_which_rows_take_a_guide():
    correct = [False] * 4 + [True, False, False, False] + [False] * 4
    assert guided_rows(correct, 4, "unsolved") == [3, 11]
    assert guided_rows(correct, 4, "fraction", 0.5) == [2, 3, 6, 7, 10, 11]
    with pytest.raises(ValueError, match="do not make groups of 4"):
        guided_rows(correct[:6], 4, "unsolved")
    with pytest.raises(ValueError, match="one of off, unsolved, fraction"):
        guided_rows(correct, 4, "always")


def test_every_rank_picks_the_same_guides_for_a_prompt_distinct_within_a_group():
    answers = [f"a{i}" for i in range(10)]
    firsts = {pick_guides(answers, "cd-7", seed=0, step=s)[0] for s in range(50)}
    assert len(firsts) > 3  # it varies with the step ...
    assert pick_guides(answers, "cd-7", 0, 3) == pick_guides(
        list(answers), "cd-7", 0, 3
    )  # not rank
    assert sorted(pick_guides(answers, "cd-7", 0, 3)) == answers  # each answer once
    # the k-th guided row of a group takes the k-th answer: distinct guides within a group
    rows = guided_rows([False] * 16, 8, "fraction", 0.375)
    assert rows == [5, 6, 7, 13, 14, 15]
    assert [guide_ordinals(rows, 8)[r] for r in rows] == [0, 1, 2, 0, 1, 2]


def test_fraction_keeps_an_on_policy_answer_in_every_group():
    assert per_group_guides(0.125, 8) == 1 and per_group_guides(0.875, 8) == 7
    assert per_group_guides(0.25, 4) == 1  # 0.25 x 4 is 1, not 2 by a float's last bit
    with pytest.raises(ValueError, match=r"guides 8 of 8 rows: .*fraction x G < G"):
        per_group_guides(0.9, 8)


def test_the_guided_groups_can_drop_the_std_as_luffys_released_code():
    """grpo_use_std=False: a lone correct guide among 3 wrong answers gets 1 - 1/4 = +0.75 (with
    the std +1.5); a group without a guide keeps its advantages."""
    totals = [0.0, 0.0, 0.0, 1.0] + [0.0, 1.0, 1.0, 1.0]
    trls = group_advantages(totals, G)
    flags = [False, False, False, True] + [False] * 4
    out = rescale_guided_groups(trls, totals, flags, G, "none")
    assert out[:4] == [-0.25, -0.25, -0.25, 0.75]
    assert out[4:] == trls[4:] and trls[3] == pytest.approx(1.5, abs=1e-3)


@given(
    st.integers(1, 4).flatmap(
        lambda groups: st.tuples(
            st.lists(st.booleans(), min_size=4 * groups, max_size=4 * groups),
            st.sampled_from([d for d in (1, 2, 3, 4, 6, 8, 12, 16) if (4 * groups) % d == 0]),
            st.sampled_from(["unsolved", "fraction"]),
        )
    )
)
def test_each_guided_row_is_guided_by_exactly_one_rank(case):
    """Groups may span ranks (TRL needs only the global batch to hold whole groups): the ranks'
    local rows, put back in rank order, are the guided rows of the whole batch, once each."""
    correct, ranks, mode = case
    n = len(correct) // ranks
    every = guided_rows(correct, 4, mode, 0.5)
    back = [r * n + i for r in range(ranks) for i in local_rows(every, n, r)]
    assert back == every


# --------------------------------------------------------------- the trainer


@pytest.fixture(scope="module")
def rows():
    return read_rows(ROOT / "data" / "grpo_train.jsonl")[:2]


def is_guide(text, verifier, n_tokens):
    return float(text.strip() == GUIDE)


def _trainer(tiny_policy_dir, rows, tmp_path, train: dict, guides, reward=is_guide):
    params = group_params(G, **train)
    trainer = scoring_trainer(
        tiny_policy_dir, rows, tmp_path, params, reward, guides=guides, guidance=True
    )
    trainer.current_gradient_accumulation_steps = 1  # what the training loop sets
    return trainer


def _batch(rows):
    return group_batch(rows, G)


def _texts(trainer, output):
    return trainer.processing_class.batch_decode(output["completion_ids"], skip_special_tokens=True)


def test_a_guide_replaces_the_last_answer_of_each_unsolved_group(tiny_policy_dir, rows, tmp_path):
    trainer = _trainer(
        tiny_policy_dir, rows, tmp_path, {"guidance": "unsolved"}, {r.id: [GUIDE] for r in rows}
    )
    output = trainer._generate_and_score_completions(_batch(rows))
    flags = output[GUIDED].tolist()
    assert flags == [False, False, False, True] * 2
    texts = _texts(trainer, output)
    assert [t for t, f in zip(texts, flags) if f] == [GUIDE, GUIDE]
    assert GUIDE not in [t for t, f in zip(texts, flags) if not f]
    # TRL scored the guide (the verifier's 1) and computed the advantages over the mixed group
    # (Eq. 4): G = 4 with one correct, (1 - 1/4) / std = +1.5, the others -0.5
    assert trainer._correct() == flags
    want = group_advantages([float(f) for f in flags], G)
    assert output["advantages"].tolist() == pytest.approx(want, abs=1e-3)
    assert want[3] == pytest.approx(1.5, abs=1e-3) and want[0] == pytest.approx(-0.5, abs=1e-3)
    # the guide ends with the end token, its mask covers it and nothing past it
    guide = output["completion_ids"][3]
    length = int(output["completion_mask"][3].sum())
    assert length == len(GUIDE) + 1 and guide[length - 1] == trainer._tokenizer.eos_token_id
    assert trainer._metrics["train"][GUIDED_SHARE] == [2 / (2 * G)]
    assert trainer._metrics["train"][SAMPLED_COMPLETIONS] == [2 * G]  # guides replaced two
    assert trainer._metrics["train"][GUIDED_ADVANTAGE][-1] == pytest.approx(1.5, abs=1e-3)


def test_fraction_guides_every_group_with_distinct_answers_while_it_has_them(
    tiny_policy_dir, rows, tmp_path
):
    """fraction 0.75 of 4: rows 1-3 of each group. The first prompt has two verified answers:
    two rows take them, one each, and the third keeps its sample; the second prompt's only
    answer is too long for 6 tokens: its group keeps every sample."""
    other = "6*7"
    guides = {rows[0].id: [GUIDE, other], rows[1].id: ["1234567890"]}
    trainer = _trainer(
        tiny_policy_dir,
        rows,
        tmp_path,
        {"guidance": "fraction", "guidance_fraction": 0.75},
        guides,
        reward=lambda text, verifier, n: 1.0,  # every group solved: fraction guides anyway
    )
    output = trainer._generate_and_score_completions(_batch(rows))
    assert output[GUIDED].tolist() == [False, True, True, False] + [False] * 4
    assert sorted(_texts(trainer, output)[1:3]) == sorted([GUIDE, other])
    assert trainer._metrics["train"][GUIDED_SHARE] == [2 / (2 * G)]


def test_the_log_keeps_the_sampled_answers_reward_apart_from_the_guides(
    tiny_policy_dir, rows, tmp_path
):
    trainer = _trainer(
        tiny_policy_dir, rows, tmp_path, {"guidance": "unsolved"}, {r.id: [GUIDE] for r in rows}
    )
    trainer._generate_and_score_completions(_batch(rows))
    metrics = trainer._metrics["train"]
    assert metrics[ON_POLICY_REWARD] == [0.0] and metrics[GUIDE_REWARD] == [1.0]


def test_without_the_std_a_guided_groups_advantages_are_the_mean_alone(
    tiny_policy_dir, rows, tmp_path
):
    trainer = _trainer(
        tiny_policy_dir,
        rows,
        tmp_path,
        {"guidance": "unsolved", "guidance_std": False},
        {r.id: [GUIDE] for r in rows},
    )
    output = trainer._generate_and_score_completions(_batch(rows))
    assert output[GUIDED].tolist() == [False, False, False, True] * 2
    assert output["advantages"].tolist() == pytest.approx([-0.25, -0.25, -0.25, 0.75] * 2)


def _logp_gradient(monkeypatch, loss):
    """d loss / d (the policy's per-token log-probs), (B, T): TRL's forward pass returns a leaf
    in their place, so the gradient stops there (the model's weights see it through the chain
    rule alone)."""
    leaves = []
    forward = GRPOTrainer._get_per_token_logps_and_entropies

    def leaf(self, *args, **kwargs):
        logps, entropies, aux = forward(self, *args, **kwargs)
        leaves.append(logps.detach().requires_grad_())
        return leaves[-1], entropies, aux

    with monkeypatch.context() as patch:
        patch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", leaf)
        loss().backward()
    assert len(leaves) == 1  # one forward pass, the policy's
    return leaves[0].grad, leaves[0].detach()


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_on_a_guides_tokens_the_gradient_is_the_shaped_terms_alone(
    tiny_policy_dir, rows, tmp_path, monkeypatch, loss_type
):
    """LUFFY Eq. 6: on a guide's tokens d loss / d log p is the shaped term's alone,
    -A x gamma p / (p + gamma)^2 / Z: no KL pull toward the reference (TRL's k3 term with
    use_bias_correction_kl has gradient beta x log(pi / pi_ref) there) and no clip, with Z as the
    loss type normalises (the guides' tokens counted); on the sampled answers' tokens it is TRL's
    own. The policy is moved off the reference and off the sampling policy, as after some
    steps, so that the KL and the clip act."""
    gamma = 0.2
    trainer = _trainer(
        tiny_policy_dir,
        rows,
        tmp_path,
        {"guidance": "unsolved", "guidance_gamma": gamma, "grpo": {"loss_type": loss_type}},
        {r.id: [GUIDE] for r in rows},
    )
    output = trainer._generate_and_score_completions(_batch(rows))
    guided = output[GUIDED]
    assert guided.any() and trainer.beta > 0 and trainer.loss_type == loss_type
    fresh = trainer._policy_token_logps(output, fresh=True)
    shift = torch.linspace(-1.5, 1.5, fresh.size(1))  # per token: both sides of the clip
    output = {
        **output,
        "ref_per_token_logps": output["ref_per_token_logps"] - 1.0,
        "old_per_token_logps": fresh + shift,
    }
    ours, logps = _logp_gradient(monkeypatch, lambda: trainer._compute_loss(trainer.model, output))
    trls, _ = _logp_gradient(
        monkeypatch, lambda: GRPOTrainer._compute_loss(trainer, trainer.model, output)
    )
    mask = output["completion_mask"].float()
    on = ~guided
    assert torch.allclose(ours[on], trls[on], atol=1e-7)
    assert ours[on].abs().max() > 0
    p = logps.exp()
    advantage = output["advantages"][:, None]
    shaped_grad = -advantage * gamma * p / (p + gamma) ** 2 * mask
    if loss_type == "dapo":
        shaped_grad = shaped_grad / output["num_items_in_batch"]
    elif loss_type == "grpo":
        shaped_grad = shaped_grad / mask.sum(-1, keepdim=True) / mask.size(0)
    else:
        shaped_grad = shaped_grad / (mask.size(0) * trainer.max_completion_length)
    assert torch.allclose(ours[guided], shaped_grad[guided], rtol=1e-5, atol=1e-9)
    assert (ours[guided] * mask[guided] < 0).sum() == mask[guided].sum()  # pushed up, every token


def test_a_batch_without_a_guide_is_trls_own(tiny_policy_dir, rows, tmp_path):
    """guidance on, every group solved: no row is replaced, and the scored batch and the loss
    are what TRL's own GRPOTrainer computes for the same samples."""
    trainer = _trainer(
        tiny_policy_dir,
        rows,
        tmp_path,
        {"guidance": "unsolved"},
        {r.id: [GUIDE] for r in rows},
        # every answer correct (>= 1), the advantages still spread by length
        reward=lambda text, verifier, n: 1.0 + n / 10,
    )
    torch.manual_seed(1)
    ours = trainer._generate_and_score_completions(_batch(rows))
    torch.manual_seed(1)
    trls = GRPOTrainer._generate_and_score_completions(trainer, _batch(rows))
    assert all(trainer._correct()) and ours["advantages"].abs().max() > 0.1
    assert not ours[GUIDED].any()
    assert torch.equal(ours["completion_ids"], trls["completion_ids"])
    assert torch.equal(ours["advantages"], trls["advantages"])
    assert trainer._compute_loss(trainer.model, ours).item() == pytest.approx(
        GRPOTrainer._compute_loss(trainer, trainer.model, trls).item(), rel=1e-6
    )


def test_without_guidance_the_batch_has_no_guided_key(tiny_policy_dir, rows, tmp_path):
    trainer = _trainer(tiny_policy_dir, rows, tmp_path, {}, None)
    assert GUIDED not in trainer._generate_and_score_completions(_batch(rows))


def test_guidance_needs_guides(tiny_policy_dir, rows, tmp_path):
    with pytest.raises(ValueError, match="needs guides: no row has a verified answer"):
        _trainer(
            tiny_policy_dir, rows, tmp_path, {"guidance": "unsolved"}, {r.id: [] for r in rows}
        )


@pytest.mark.parametrize(
    "raw,message",
    [
        (
            {"train": {"guidance": "unsolved", "grpo": {"loss_type": "cispo"}}},
            "train.guidance = 'unsolved': needs train.grpo.loss_type one of grpo, dr_grpo",
        ),
        (
            {"train": {"guidance": "unsolved", "grpo": {"loss_type": "bnpo"}}},
            "needs train.grpo.loss_type one of grpo, dr_grpo, dapo .*not 'bnpo'",
        ),
        (
            {"train": {"guidance": "fraction"}, "audit": {"baseline": "none"}},
            "needs audit.baseline rft",
        ),
        (
            {
                "train": {"guidance": "unsolved"},
                "rewards": {"funcs": ["format"], "weights": [1.0]},
            },
            "train.guidance = 'unsolved': needs 'correctness' in rewards.funcs",
        ),
        ({"train": {"guidance": "fraction", "guidance_fraction": 0}}, "guidance_fraction"),
        (
            {"train": {"guidance": "fraction", "guidance_fraction": 0.95}},
            r"train.guidance_fraction = 0.95: guides 8 of train.grpo.num_generations = 8 .*< G",
        ),
        (
            {"train": {"guidance": "unsolved"}},
            r"train.guides = 'models/base': must be reports/verified with train.guidance "
            r"'unsolved' \(paths.verified when guidance is on",
        ),
        (
            {"train": {"guides": "reports/verified"}},
            "train.guides = 'reports/verified': must be models/base with train.guidance 'off'",
        ),
        (
            {"train": {"guidance": "unsolved", "guidance_std": False, "advantage": "pass_at_k"}},
            "train.guidance_std = False: .*needs train.advantage group, not 'pass_at_k'",
        ),
    ],
)
def test_the_guidance_params_are_checked(raw, message):
    with pytest.raises(ParamsError, match=message):
        parse_params(raw)


@pytest.mark.parametrize(
    "raw,message",
    [
        ({"train": {"start_model": "models/other"}}, "must be paths.base_model"),
        (
            {"train": {"start_model": "models/rft"}, "audit": {"baseline": "none"}},
            "needs audit.baseline rft and model.lora off",
        ),
        (
            {"train": {"start_model": "models/rft"}, "model": {"lora": {"enabled": True}}},
            "needs audit.baseline rft and model.lora off",
        ),
    ],
)
def test_the_start_model_is_the_base_or_the_rft_models(raw, message):
    with pytest.raises(ParamsError, match=f"train.start_model = .*: {message}"):
        parse_params(raw)
    assert parse_params({"train": {"start_model": "models/rft"}}).train.start_model == "models/rft"
