"""GRPO wiring: config from params, beta schedules, guards, checkpoints, batch diagnostics."""

import json
import math
from pathlib import Path

import pytest

from rlvr.grpo.advantages import group_checks
from rlvr.grpo.callbacks import BetaSchedule, FiniteGuardCallback, NonFiniteMetric, loggable
from rlvr.grpo.checkpoints import (
    checkpoint_problem,
    fingerprint,
    last_checkpoint,
    resumable_checkpoint,
)
from rlvr.grpo.config import PipelineGRPOConfig, grpo_config
from rlvr.params.config import ParamsError, parse_params
from rlvr.params.training_params import BetaScheduleParams, GRPOParams
from rlvr.rewards.registry import normalized_weights


def test_grpo_config_uses_trl_names_and_cpu_safe_values(tmp_path):
    params = parse_params(
        {
            "train": {
                "grpo": {
                    "learning_rate": "3e-05",
                    "num_generations": 4,
                    "per_device_train_batch_size": 16,
                    "extra": {"top_k": 5},
                }
            }
        }
    )
    config = grpo_config(
        params.train, output_dir=tmp_path, max_steps=7, seed=3, reward_weights=[1.0, 0.25]
    )
    assert config.learning_rate == 3e-05 and config.num_generations == 4
    assert config.max_steps == 7 and config.seed == 3 and config.top_k == 5
    assert config.use_cpu and not config.bf16 and config.beta == params.train.grpo.beta
    assert config.reward_weights == pytest.approx([0.8, 0.2])
    assert config.logging_steps == 1 and config.save_strategy == "no"


def test_every_train_grpo_field_reaches_the_grpo_config_of_its_name(tmp_path):
    """grpo_config maps train.grpo field by field, written out (go-to-definition links the two):
    each field is passed under its own name, and its value arrives."""
    import ast
    import inspect

    call = next(
        node
        for node in ast.walk(ast.parse(inspect.getsource(grpo_config)))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "PipelineGRPOConfig"
    )
    read = {
        k.arg: n.attr
        for k in call.keywords
        for n in ast.walk(k.value)
        if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "grpo"
    }
    declared = set(GRPOParams.__dataclass_fields__) - {"extra"}
    assert read == {name: name for name in declared}
    changed = {
        "learning_rate": 3e-5,
        "beta": 0.1,
        "num_generations": 4,
        "temperature": 0.7,
        "top_p": 0.9,
        "loss_type": "grpo",
        "scale_rewards": "batch",
        "epsilon": 0.3,
        "top_entropy_quantile": 0.5,
        "entropy_coef": 0.01,
        "max_grad_norm": 0.5,
        "lr_scheduler_type": "cosine",
        "max_completion_length": 12,
    }
    config = grpo_config(
        parse_params({"train": {"grpo": changed}}).train,
        output_dir=tmp_path,
        max_steps=1,
        seed=0,
        reward_weights=[1],
    )
    assert {name: getattr(config, name) for name in changed} == changed


def test_the_pipeline_knobs_are_declared_once_in_params():
    """PipelineGRPOConfig's knobs take default and help from params.yaml's train section, and a
    bad value gets the section's own rule."""
    from rlvr.grpo.config import PIPELINE_KNOBS, PipelineGRPOConfig
    from rlvr.params.training_params import TrainParams

    fields = PipelineGRPOConfig.__dataclass_fields__
    for knob in set(PIPELINE_KNOBS) - {"max_sampling_rounds"}:
        declared = TrainParams.__pydantic_fields__[knob]
        assert fields[knob].default == declared.default
        assert fields[knob].metadata["help"] == f"train.{knob}: {declared.description}"


def test_unknown_extra_grpo_field_is_named(tmp_path):
    params = parse_params({"train": {"grpo": {"extra": {"learning_rat": 1}}}})
    with pytest.raises(ParamsError, match=r"unknown GRPOConfig field\(s\) \['learning_rat'\]"):
        grpo_config(params.train, output_dir=tmp_path, max_steps=1, seed=0, reward_weights=[1])


def test_the_pipeline_knobs_ride_on_the_grpo_config(tmp_path):
    params = parse_params({"train": {"dynamic_sampling": True, "max_sampling_rounds": 5}})

    def build(params, **kw):
        return grpo_config(
            params.train, output_dir=tmp_path, max_steps=1, seed=0, reward_weights=[1], **kw
        )

    assert build(params, dynamic_sampling=True).max_sampling_rounds == 5
    assert build(params).max_sampling_rounds == 0  # the smoke run samples each batch once
    ablation = parse_params(
        {
            "train": {
                "dynamic_sampling": False,
                "advantage": "running_mean",
                "running_mean_momentum": 0.5,
            }
        }
    )
    config = build(ablation, dynamic_sampling=True)
    assert (config.max_sampling_rounds, config.advantage, config.running_mean_momentum) == (
        0,
        "running_mean",
        0.5,
    )
    for bad, message in (
        ({"advantage": "global"}, "train.advantage = 'global': must be one of"),
        (
            {"running_mean_momentum": 1.0},
            "train.running_mean_momentum = 1.0: must be in \\[0, 1\\)",
        ),
        ({"max_sampling_rounds": -1}, "max_sampling_rounds = -1: must be >= 0"),
        ({"pass_at_k": 0}, "train.pass_at_k = 0: must be >= 1"),
        ({"advantage": "pass_at_k", "pass_at_k": 9}, "at most train.grpo.num_gen"),
        (
            {"max_sampling_rounds": 2, "advantage": "running_mean"},
            "needs train.advantage = 'group' or 'pass_at_k'",
        ),
    ):
        with pytest.raises(ValueError, match=message):
            PipelineGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **bad)


def test_batch_size_must_hold_whole_groups():
    with pytest.raises(ParamsError, match="divisible by num_generations"):
        GRPOParams(num_generations=8, per_device_train_batch_size=60)


def test_normalized_weights():
    assert normalized_weights([1.0, 0.2]) == pytest.approx([1 / 1.2, 0.2 / 1.2])
    with pytest.raises(ValueError):
        normalized_weights([0, 0])


def test_constant_schedule():
    schedule = BetaSchedule(BetaScheduleParams(kind="constant"), 0.04)
    assert [schedule.value(s) for s in (0, 10, 1000)] == [0.04, 0.04, 0.04]


def test_warmup_schedule_is_linear_then_flat():
    schedule = BetaSchedule(
        BetaScheduleParams(kind="warmup", beta_start=0.01, warmup_steps=4), 0.05
    )
    assert [schedule.value(s) for s in range(6)] == pytest.approx(
        [0.01, 0.02, 0.03, 0.04, 0.05, 0.05]
    )


def test_adaptive_schedule_steers_toward_the_target_kl():
    params = BetaScheduleParams(kind="adaptive", beta_start=0.1, target_kl=0.05, horizon=10)
    up, down, still = (BetaSchedule(params, 0.1) for _ in range(3))
    up.observe_kl(0.5)  # KL too high: more penalty
    down.observe_kl(0.01)  # KL too low: less penalty
    still.observe_kl(0.05)  # on target: unchanged
    assert up.value(1) == pytest.approx(0.1 * 1.02)
    assert down.value(1) == pytest.approx(0.1 * (1 - 0.8 / 10 * 0.25))
    assert still.value(1) == pytest.approx(0.1)
    up.observe_kl(float("nan"))  # a missing KL changes nothing
    assert up.value(2) == pytest.approx(0.1 * 1.02)


def test_under_dynamic_sampling_the_adaptive_beta_steers_the_kl_over_the_first_batch():
    from types import SimpleNamespace

    from rlvr.grpo.callbacks import BetaScheduleCallback

    params = BetaScheduleParams(kind="adaptive", beta_start=0.1, target_kl=0.05, horizon=10)
    # TRL's kl over the kept groups is far above target (beta would rise to 0.102); over the
    # first batch, half the target: beta falls to 0.098 (ignoring both would leave 0.1)
    logs = {"loss": 0.1, "kl": 5.0, "dynamic_sampling/kl_first_batch": 0.025}
    live, resumed = BetaSchedule(params, 0.1), BetaSchedule(params, 0.1)
    BetaScheduleCallback(live).on_log(None, None, None, logs=logs)
    BetaScheduleCallback(resumed).on_train_begin(
        None, SimpleNamespace(log_history=[{"step": 0, "eval_mean_reward": 0.3}, logs]), None
    )
    assert live.value(1) == resumed.value(1) == pytest.approx(0.098)


def test_finite_guard_names_step_and_metric():
    guard = FiniteGuardCallback()

    class State:
        global_step = 17

    guard.on_log(None, State(), None, logs={"loss": 0.1, "kl": 0.01, "grad_norm": 2.0})
    with pytest.raises(NonFiniteMetric, match=r"step 17: grad_norm = inf is not finite"):
        guard.on_log(None, State(), None, logs={"loss": 0.1, "grad_norm": math.inf})


def test_loggable_drops_timings_and_non_numbers():
    assert loggable(
        {"loss": 1, "step_time": 0.3, "train_runtime": 9, "epoch": 1.0, "x": "y", "kl": 0.5}
    ) == {"loss": 1.0, "kl": 0.5}


def test_group_checks():
    prompts = ["a"] * 4 + ["b"] * 4
    checks = group_checks(prompts, [1, -1, -1, 1, 0, 0, 0, 0], num_generations=4)
    assert checks == {
        "groups": 2,
        "group_sizes": [4],
        "advantages_finite": True,
        "max_abs_group_mean": 0.0,
    }
    bad = group_checks(prompts[:7], [1, 1, 1, 1, float("nan"), 0, 0], num_generations=4)
    assert bad["group_sizes"] == [3, 4] and bad["advantages_finite"] is False


def _checkpoint(folder):
    """A checkpoint with every file the Trainer writes that resume reads, tiny but real."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    save_file({"w": torch.ones(3, 2)}, folder / "model.safetensors")
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        torch.save({"state": torch.zeros(64)}, folder / name)
    return folder


def _truncate(file):
    file.write_bytes(file.read_bytes()[:-10])


DAMAGE = {
    "trainer_state.json is missing": lambda c: (c / "trainer_state.json").unlink(),
    "trainer_state.json is unreadable": lambda c: (c / "trainer_state.json").write_text("{"),
    "model.safetensors is truncated": lambda c: _truncate(c / "model.safetensors"),
    "model.safetensors is unreadable": lambda c: (c / "model.safetensors").write_bytes(b"x"),
    "no weights": lambda c: (c / "model.safetensors").unlink(),
    "optimizer.pt is truncated": lambda c: _truncate(c / "optimizer.pt"),
    "scheduler.pt is missing": lambda c: (c / "scheduler.pt").unlink(),
    "rng_state.pth is missing": lambda c: (c / "rng_state.pth").unlink(),
    "running_mean.json is missing": lambda c: None,  # asked for below, never written
    "running_mean.json is unreadable": lambda c: (c / "running_mean.json").write_text('{"va'),
    "model.safetensors is unreadable (AttributeError)": lambda c: _header(c, b"[1, 2]"),
    # a crafted header length: read as it claims, 2**63 raised OverflowError, a few GB MemoryError
    "model.safetensors is unreadable (its header claims 9223372036854775807 bytes)": lambda c: (
        _header(c, b"{}", claimed=2**63 - 1)
    ),
    "model.safetensors is unreadable (its header claims 4000000000 bytes)": lambda c: _header(
        c, b"{}", claimed=4_000_000_000
    ),
}


def _header(checkpoint, header, claimed=None):
    import struct

    length = len(header) if claimed is None else claimed
    (checkpoint / "model.safetensors").write_bytes(struct.pack("<Q", length) + header)


@pytest.mark.parametrize("reason", sorted(DAMAGE))
def test_a_damaged_checkpoint_is_skipped_for_the_newest_whole_one(reason, tmp_path, capsys):
    older, newer = _checkpoint(tmp_path / "checkpoint-4"), _checkpoint(tmp_path / "checkpoint-8")
    extra = ["running_mean.json"] if reason.startswith("running_mean") else []
    for checkpoint in (older, newer):
        if extra:
            (checkpoint / "running_mean.json").write_text("{}")
    assert checkpoint_problem(newer, extra) is None
    DAMAGE[reason](newer)
    if reason == "running_mean.json is missing":
        (newer / "running_mean.json").unlink()
    assert checkpoint_problem(newer, extra).startswith(reason)
    assert last_checkpoint(tmp_path, extra, warn=True) == str(older)
    warning = capsys.readouterr().err.strip()
    assert (
        warning == f"train: skipping damaged checkpoint {newer}: {checkpoint_problem(newer, extra)}"
    )
    DAMAGE[reason](older)
    if reason == "running_mean.json is missing":
        (older / "running_mean.json").unlink()
    assert last_checkpoint(tmp_path, extra) is None  # none is whole: the run starts over


def test_checkpoints_of_another_run_are_never_resumed(tmp_path):
    folder = tmp_path / "ckpt"
    assert resumable_checkpoint(folder, "run-a") is None
    _checkpoint(folder / "checkpoint-4")
    assert resumable_checkpoint(folder, "run-a").endswith("checkpoint-4")
    assert resumable_checkpoint(folder, "run-b") is None  # other params: wiped
    assert not (folder / "checkpoint-4").exists()
    assert json.loads((folder / "fingerprint.json").read_text()) == {"fingerprint": "run-b"}
    _checkpoint(folder / "checkpoint-8")
    (folder / "fingerprint.json").write_text('{"finger')  # cut short by a kill
    assert resumable_checkpoint(folder, "run-b") is None  # not provably this run: start over
    assert not (folder / "checkpoint-8").exists()


def test_fingerprint_follows_file_contents(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("a\n")
    first = fingerprint({"lr": 1}, data)
    assert fingerprint({"lr": 1}, data) == first
    assert fingerprint({"lr": 2}, data) != first
    data.write_text("b\n")
    assert fingerprint({"lr": 1}, data) != first


def test_the_run_fingerprint_hashes_the_files_train_depends_on():
    """A checkpoint is resumed only by the run that made it: the fingerprint hashes each file of
    train's code deps in dvc.yaml (the same derivation), so an edit to any code train runs makes
    another run, and an edit elsewhere (the report) keeps its checkpoints."""
    from rlvr.core.files import file_md5
    from rlvr.pipeline.codedeps import dvc_stage_deps
    from rlvr.pipeline.training import train_code_md5s

    root = Path(__file__).resolve().parents[1]
    code = train_code_md5s()
    listed = [d for d in dvc_stage_deps(root)["train"] if d.split("/")[0] in ("rlvr", "stages")]
    assert set(listed) | {"requirements.lock", "pyproject.toml"} == set(code)
    assert {"rlvr/grpo/run.py", "rlvr/rewards/verifiers.py", "stages/train.py"} <= set(code)
    assert "rlvr/report/retrospective.py" not in code
    assert code["rlvr/grpo/run.py"] == file_md5(root / "rlvr/grpo/run.py")


def test_a_checkpoint_of_two_ranks_needs_both_rng_states(tmp_path):
    """Each rank saves its own RNG state, the main process trainer_state.json: a kill can leave a
    checkpoint with the one and not the other, and resuming it would not replay rank 1's sampling."""
    import torch

    checkpoint = _checkpoint(tmp_path / "checkpoint-4")
    (checkpoint / "rng_state.pth").unlink()
    torch.save({"state": torch.zeros(64)}, checkpoint / "rng_state_0.pth")
    assert checkpoint_problem(checkpoint, ranks=2) == "rng_state_1.pth is missing"
    assert checkpoint_problem(checkpoint, ranks=1) == "rng_state.pth is missing"
    torch.save({"state": torch.zeros(64)}, checkpoint / "rng_state_1.pth")
    assert checkpoint_problem(checkpoint, ranks=2) is None
    _truncate(checkpoint / "rng_state_1.pth")
    assert checkpoint_problem(checkpoint, ranks=2) == "rng_state_1.pth is truncated or unreadable"


def test_a_saved_config_is_trl_s_own_grpo_config(tmp_path):
    """training_args.bin in models/final and each checkpoint: loads without rlvr, and holds what a
    plain GRPOConfig of the same values holds."""
    import pickle

    from trl import GRPOConfig

    from rlvr.grpo.config import PIPELINE_KNOBS, as_trl_config

    params = parse_params({"train": {"dynamic_sampling": True, "max_sampling_rounds": 4}})
    config = grpo_config(
        params.train,
        output_dir=tmp_path,
        max_steps=3,
        seed=1,
        reward_weights=[1.0, 0.2],
        dynamic_sampling=True,
    )
    plain = as_trl_config(config)
    assert type(plain) is GRPOConfig and type(config) is PipelineGRPOConfig
    assert b"rlvr" not in pickle.dumps(plain)
    assert not any(hasattr(plain, knob) for knob in PIPELINE_KNOBS)
    assert config.max_sampling_rounds == 4  # the trainer's own config keeps its knobs
    assert vars(plain) == {k: v for k, v in vars(config).items() if k not in PIPELINE_KNOBS}
    assert list(vars(plain)) == [k for k in vars(config) if k not in PIPELINE_KNOBS]


def test_the_curves_written_in_flushes_are_dvclive_s_own_byte_for_byte(tmp_path):
    """LiveCurvesCallback holds points and writes them in flushes (every flush_every steps, at a
    checkpoint, at the end); the files must be those DVCLive writes point by point."""
    import random
    from pathlib import Path
    from types import SimpleNamespace

    from dvclive import Live

    from rlvr.grpo.callbacks import LiveCurvesCallback, validation_entry

    rng = random.Random(0)
    keys = ["loss", "reward", "kl", "beta", "rewards/correctness/mean", "x/y/z"]
    history = [{"step": 0, "eval_mean_reward": 0.3, "eval_success/sub": 0.1}]
    for step in range(1, 61):
        history.append(
            {
                "step": step,
                **{k: rng.random() for k in keys},
                "step_time": 0.1,
                **({"kl": float("nan"), "late_key": 1.0} if step == 7 else {}),
                **({"grad_norm": float("inf")} if step == 9 else {}),
            }
        )
        if step % 25 == 0:
            history.append({"step": step, "eval_mean_reward": 0.4, "eval_success/sub": 0.2})

    expected = Live(dir=str(tmp_path / "dvclive"), dvcyaml=None, save_dvc_exp=False, resume=False)
    for entry in history:  # what the callback wrote before it held points
        values = loggable(entry)
        if validation_entry(entry):
            values = {f"val/{k}": v for k, v in validation_entry(entry).items()}
        expected.step = entry["step"]
        for key, value in sorted(values.items()):
            expected.log_metric(key, value)
        expected.make_summary()
    expected.end()

    callback = LiveCurvesCallback(tmp_path / "ours", flush_every=10)
    state = SimpleNamespace(is_world_process_zero=True, log_history=[], global_step=0)
    callback.on_train_begin(None, state, None)
    for entry in history:
        state.global_step = entry["step"]
        callback.on_log(None, state, None, logs=entry)
        if entry["step"] == 33:
            callback.on_save(None, state, None)
            assert not callback.pending  # a checkpoint's curves are on disk
    callback.on_train_end(None, state, None)

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    ours, theirs = files(tmp_path / "ours"), files(tmp_path / "dvclive")
    assert len(theirs) >= len(keys) + 4 and ours == theirs


def test_a_saved_tokenizer_is_the_same_whether_or_not_it_padded_a_batch(tmp_path):
    """models/final of a run that resumed past its last step (no generation since the load) and
    of one that trained to it: the same tokenizer.json."""
    from rlvr.policy.models import build_char_tokenizer, save_tokenizer

    fresh, used = build_char_tokenizer(), build_char_tokenizer()
    used(["a", "abc"], padding=True, padding_side="left")  # as TRL pads prompts
    assert used.backend_tokenizer.padding is not None
    save_tokenizer(fresh, tmp_path / "fresh")
    save_tokenizer(used, tmp_path / "used")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "fresh" / name).read_bytes() == (tmp_path / "used" / name).read_bytes()


def test_the_warm_start_uses_other_rows_targets_and_stops_on_rows_with_no_known_answer(tmp_path):
    """exact_match and math rows: answers from other rows' targets, never the row's own; regex
    rows add nothing, and data of regex rows only stops with one line naming the knob."""
    from rlvr.data.rows import Row
    from rlvr.policy.models import warm_start, warm_start_examples

    rows = [
        Row(f"r{i}", f"{i} + {i} = ", {"type": "exact_match", "target": str(2 * i)})
        for i in range(1, 9)
    ]
    rows += [
        Row("m", "half of 1 = ", {"type": "math", "target": "1/2"}),
        Row("x", "anything: ", {"type": "regex", "pattern": "^a+$"}),
    ]
    examples = warm_start_examples(rows, seed=0, per_row=16)
    own = {row.prompt: str(row.verifier.get("target")) for row in rows}
    assert len(examples) == 9 * 16 and all(e["completion"] != own[e["prompt"]] for e in examples)
    assert {e["completion"] for e in examples} <= {str(2 * i) for i in range(1, 9)} | {"1/2"}
    assert not [e for e in examples if e["prompt"] == "anything: "]
    with pytest.raises(
        ParamsError,
        match=r"model.warm_start.steps: the warm start needs rows with "
        r"known answers .* set model.warm_start.steps: 0",
    ):
        warm_start(
            None,
            None,
            [rows[-1]],
            steps=1,
            batch_size=1,
            learning_rate=1e-3,
            seed=0,
            output_dir=tmp_path,
        )
