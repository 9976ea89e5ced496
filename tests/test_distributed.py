"""Several processes, offline: the launch command, the accelerate configs, params that need them,
and how a rank hands an expected failure to its launcher."""

import sys
from pathlib import Path

import pytest

from rlvr.grpo import distributed
from rlvr.params.config import ParamsError, parse_params
from rlvr.params.training_params import ACCELERATE_CONFIG_NAMES
from tests.helpers import project_env, trainer_hook


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
        distributed.launch_args("stages.train", 4, use_cpu=not name, config_name=name, port=1234)
    )
    # several machines meet at the config's address and port, one machine at a free port
    port = 1234 if distributed.machines(name) == 1 else None
    assert (args.num_processes, args.main_process_port, args.module) == (4, port, True)
    assert args.training_script == "stages.train"
    assert args.config_file == (str(distributed.accelerate_config_file(name)) if name else None)


def _listening(port: int) -> set[str]:
    """The local addresses sockets listen on at `port` (Linux: /proc/net/tcp and tcp6)."""
    import socket

    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                if len(raw) == 4:
                    found.add(socket.inet_ntoa(raw[::-1]))
                else:
                    found.add("::" if not any(raw) else address)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/net")
def test_the_one_machine_store_listens_on_the_loopback_only():
    """Rank 0's store (every rank unpickles the object broadcast from it) takes connections from
    this machine only: torch 2.13's TCPStore alone listens on every interface."""
    from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous

    def store(port):
        rendezvous = StaticTCPRendezvous("127.0.0.1", port, 0, 1, "t", 30)
        rendezvous.next_rendezvous().store.set("k", "v")
        return rendezvous

    port = distributed.free_port()
    alone = store(port)
    assert _listening(port) & {"0.0.0.0", "::"}, _listening(port)  # torch's own: everywhere
    del alone
    port = distributed.free_port()
    with distributed.store_on_loopback():
        kept = store(port)
        assert _listening(port) == {"127.0.0.1"}
    del kept


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"train": {"processes": 0}}, "train.processes = 0: must be >= 1"),
        (
            {"train": {"accelerate_config": "horovod"}},
            "train.accelerate_config = 'horovod': must be one of: '', ddp, ddp_2node, fsdp, deepspeed_zero2, "
            "deepspeed_zero3",
        ),
        (
            {"train": {"accelerate_config": "fsdp", "processes": 1}},
            "train.processes = 1: must be above 1 with train.accelerate_config = 'fsdp'",
        ),
        (
            {"train": {"accelerate_config": "ddp", "processes": 8}},
            "train.grpo.use_cpu = True: must be false with train.accelerate_config = 'ddp'",
        ),
    ],
)
def test_bad_multi_process_params_name_the_key(raw, message):
    with pytest.raises(ParamsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_params(raw)


TWO_NODES = {
    "train": {"accelerate_config": "ddp_2node", "processes": 16, "grpo": {"use_cpu": False}}
}


def test_the_two_machine_config_is_the_first_machines_and_check_params_passes_it():
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(distributed.accelerate_config_file("ddp_2node")))
    assert (config.num_machines, config.machine_rank, config.num_processes) == (2, 0, 16)
    assert config.main_process_ip and config.main_process_port == 29500
    distributed.check_launch_config("ddp_2node", 16)  # the documented setting passes


@pytest.mark.parametrize(
    "change, processes, message",
    [
        ({}, 15, "train.processes = 15 does not split over num_machines = 2"),
        ({"machine_rank": 1}, 16, "machine_rank = 1: must be 0 (this file is the first machine's"),
        ({"main_process_ip": ""}, 16, "main_process_ip is empty: set it to the first machine's"),
    ],
)
def test_check_params_names_the_two_machine_configs_bad_field(
    change, processes, message, tmp_path, monkeypatch
):
    import yaml

    from rlvr.pipeline.checks import check_run_params

    source = distributed.accelerate_config_file("ddp_2node")
    config = {**yaml.safe_load(source.read_text()), **change}
    (tmp_path / source.name).write_text(yaml.safe_dump(config))
    monkeypatch.setattr(distributed, "ACCELERATE_CONFIGS", tmp_path)
    raw = {"train": {**TWO_NODES["train"], "processes": processes}}
    with pytest.raises(ParamsError) as error:
        check_run_params(parse_params(raw))  # before TRL, which refuses GPUs on this machine
    assert str(error.value).startswith(f"{tmp_path / source.name}: {message}")


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
    import accelerate.commands.launch
    import torch

    from rlvr.core.errors import PipelineError
    from rlvr.grpo.distributed import launch

    launched = []
    monkeypatch.setattr(accelerate.commands.launch, "launch_command", launched.append)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(
        PipelineError,
        match=r"^train.processes = 2 with train.grpo.use_cpu false "
        r"needs 2 GPUs; this machine has 1: each process would train alone",
    ):
        launch("train", "stages.train", 2, use_cpu=False, config_name="fsdp")
    assert launched == []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # enough: it launches
    assert launch("train", "stages.train", 2, use_cpu=False, config_name="fsdp") == 0
    assert launched[0].config_file == "configs/accelerate/fsdp.yaml"
    assert launch("train", "stages.train", 2, use_cpu=True) == 0  # CPU: DDP over gloo


# A Trainer that says, in each rank, what accelerate made of the launch.
FSDP_PROBE = trainer_hook("""
def patch(Trainer):
    train = Trainer.train

    def probed(self, *args, **kwargs):
        out = train(self, *args, **kwargs)  # the model is wrapped inside train
        a = self.accelerator
        line = (f"probe: rank {a.process_index} of {a.num_processes}: {a.distributed_type.value}, "
                f"fsdp {self.is_fsdp_enabled}, {type(self.model_wrapped).__name__}\\n")
        # one write of the whole line: both ranks share the pipe, and a write under PIPE_BUF
        # is never interleaved (print's text and newline once were, 2026-12-03)
        os.write(1, line.encode())
        return out

    Trainer.train = probed
""")


@pytest.mark.slow
def test_accelerate_runs_no_fsdp_on_cpu_but_ddp_over_gloo(copy_run):
    """What the README says of FSDP on CPU: the smoke stage launched by accelerate with the
    project's fsdp config set to CPU runs DDP over gloo in both ranks, the FSDP plugin dropped
    (accelerate 1.15 applies it on accelerators only)."""
    import subprocess
    import sys

    project = copy_run("fsdp-on-cpu")
    config = distributed.accelerate_config_file("fsdp").read_text()
    config = config.replace("use_cpu: false", "use_cpu: true").replace(
        "mixed_precision: bf16", "mixed_precision: 'no'"
    )
    (project.parent / "fsdp_cpu.yaml").write_text(config)
    hook = project.parent / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FSDP_PROBE)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(project.parent / "fsdp_cpu.yaml"),
            "--num_processes",
            "2",
            "--main_process_port",
            str(distributed.free_port()),
            "-m",
            "stages.smoke",
        ],
        cwd=project,
        env={**project_env(project), "PYTHONPATH": f"{hook}:{project}"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert sorted(line for line in output.splitlines() if line.startswith("probe: ")) == [
        "probe: rank 0 of 2: MULTI_CPU, fsdp False, DistributedDataParallel",
        "probe: rank 1 of 2: MULTI_CPU, fsdp False, DistributedDataParallel",
    ], output[-3000:]
