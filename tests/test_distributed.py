"""Several processes, offline: the launch command, the accelerate configs, params that need them,
and how a rank hands an expected failure to its launcher."""

import pytest

from rlvr import distributed
from rlvr.config import ParamsError, parse_params
from rlvr.training_params import ACCELERATE_CONFIG_NAMES


@pytest.mark.parametrize("name", ACCELERATE_CONFIG_NAMES)
def test_every_accelerate_config_named_in_params_exists_and_parses(name):
    from accelerate.commands.config.config_args import load_config_from_file

    path = distributed.accelerate_config_file(name)
    config = load_config_from_file(str(path))
    assert config.compute_environment.value == "LOCAL_MACHINE"
    assert config.use_cpu is False  # multi-GPU configs; CPU runs use plain DDP over gloo
    assert sorted(p.stem for p in path.parent.glob("*.yaml")) == sorted(ACCELERATE_CONFIG_NAMES)


@pytest.mark.parametrize("name", ["", *ACCELERATE_CONFIG_NAMES])
def test_accelerate_launch_accepts_the_command_the_stage_builds(name):
    from accelerate.commands.launch import launch_command_parser

    args = launch_command_parser().parse_args(
        distributed.launch_args("stages.train", 4, use_cpu=not name, config_name=name, port=1234))
    assert (args.num_processes, args.main_process_port, args.module) == (4, 1234, True)
    assert args.training_script == "stages.train"
    assert args.config_file == (str(distributed.accelerate_config_file(name)) if name else None)


@pytest.mark.parametrize("raw, message", [
    ({"train": {"processes": 0}}, "train.processes = 0: must be >= 1"),
    ({"train": {"accelerate_config": "horovod"}},
     "train.accelerate_config = 'horovod': must be one of: '', ddp, fsdp, deepspeed_zero2, "
     "deepspeed_zero3"),
    ({"train": {"accelerate_config": "fsdp", "processes": 1}},
     "train.processes = 1: must be above 1 with train.accelerate_config = 'fsdp'"),
    ({"train": {"accelerate_config": "ddp", "processes": 8}},
     "train.grpo.use_cpu = True: must be false with train.accelerate_config = 'ddp'"),
])
def test_bad_multi_process_params_name_the_key(raw, message):
    with pytest.raises(ParamsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_params(raw)


def test_a_rank_hands_its_failure_to_the_launcher_and_nothing_else_does(tmp_path, monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv(distributed.FAILURES_ENV, str(tmp_path))
    assert not distributed.report_failure("train: x")  # not a rank: print it yourself
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    assert distributed.report_failure("train: step 3: loss = nan is not finite")
    assert (tmp_path / "rank1").read_text() == "train: step 3: loss = nan is not finite\n"


def test_one_process_needs_no_process_group():
    assert distributed.sum_over_ranks({"a": 2, "b": 0}) == {"a": 2, "b": 0}
    distributed.barrier()  # returns at once
    assert distributed.is_main_process() and not distributed.launched()


def test_several_gpu_processes_without_the_gpus_stop_with_one_line(monkeypatch):
    """Without them accelerate starts every process anyway, each training alone (measured with
    the fsdp config on this CPU machine: distributed type NO in both)."""
    import torch

    from rlvr.distributed import launch
    from rlvr.errors import PipelineError

    import accelerate.commands.launch

    launched = []
    monkeypatch.setattr(accelerate.commands.launch, "launch_command", launched.append)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(PipelineError, match=r"^train.processes = 2 with train.grpo.use_cpu false "
                       r"needs 2 GPUs; this machine has 1: each process would train alone"):
        launch("train", "stages.train", 2, use_cpu=False, config_name="fsdp")
    assert launched == []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # enough: it launches
    assert launch("train", "stages.train", 2, use_cpu=False, config_name="fsdp") == 0
    assert launched[0].config_file == "configs/accelerate/fsdp.yaml"
    assert launch("train", "stages.train", 2, use_cpu=True) == 0  # CPU: DDP over gloo
