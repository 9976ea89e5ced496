"""Several training processes: launching a stage under `accelerate launch`, and what each rank may do.

`dvc repro` runs `python -m stages.train` as always. With train.processes above 1 that process
becomes the launcher: it runs accelerate's own `launch` command in-process (torchrun underneath;
gloo on CPU, NCCL on GPUs, or the FSDP / DeepSpeed setup of configs/accelerate/<name>.yaml), which
starts the ranks, each running the same stage module. Inside a rank:

- only the main process (rank 0) writes files: metrics, history, curves, models/trained, the
  checkpoint folder's marker (the Trainer itself already saves checkpoints from the main process);
- everything that steers training (the beta in force, the running-mean baseline) is computed from
  values TRL has already gathered over every rank, so it is identical on all of them;
- an expected failure (a NaN stop, a closed gate) is written to a per-rank file instead of the
  console; the launcher prints each distinct message once, as a single-process stage would, and
  exits 1 without torchrun's traceback (that is for bugs).

A rank dies with its launcher (a `kill -9` of `dvc repro` must not leave ranks training).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path

import yaml

from rlvr.core.errors import ParamsError, PipelineError

ACCELERATE_CONFIGS = Path("configs/accelerate")
LOOPBACK = "127.0.0.1"  # where a one-machine run's ranks meet
FAILURES_ENV = "RLVR_FAILURES_DIR"  # set by the launcher: where ranks report expected failures


def rank() -> int:
    """This process's global rank (0 outside a launched run)."""
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """How many ranks this run has (1 outside a launched run)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return rank() == 0


def launched() -> bool:
    """True inside a rank started by a launcher (torchrun sets LOCAL_RANK)."""
    return "LOCAL_RANK" in os.environ


def accelerate_config_file(name: str) -> Path | None:
    """configs/accelerate/<name>.yaml, or None for plain DDP (name '')."""
    return ACCELERATE_CONFIGS / f"{name}.yaml" if name else None


def machines(config_name: str) -> int:
    """How many machines the named accelerate config spans (1 for plain DDP)."""
    config = accelerate_config_file(config_name)
    if config is None:
        return 1
    return int((yaml.safe_load(config.read_text()) or {}).get("num_machines") or 1)


def check_launch_config(config_name: str, processes: int) -> None:
    """What accelerate would find wrong with a config spanning several machines, found by
    check_params: the file is the first machine's (machine_rank 0, where `dvc repro` runs and
    rank 0 writes), its rendezvous address is set, and the ranks split evenly over the machines.
    Raises ParamsError naming the file and the field."""
    config = accelerate_config_file(config_name)
    if config is None or machines(config_name) == 1:
        return
    # accelerate here, not at the top: ~1.8 s to import (launch's reason below), and only a
    # multi-machine config needs it
    from accelerate.commands.config.config_args import load_config_from_file

    loaded = load_config_from_file(str(config))
    problems = []
    if loaded.machine_rank != 0:
        problems.append(
            f"machine_rank = {loaded.machine_rank}: must be 0 (this file is the first machine's; "
            "the others join with `accelerate launch --machine_rank <k>`)"
        )
    if not loaded.main_process_ip:
        problems.append("main_process_ip is empty: set it to the first machine's address")
    if not loaded.main_process_port:
        problems.append("main_process_port is empty: set a port the other machines can reach")
    if processes % loaded.num_machines:
        problems.append(
            f"train.processes = {processes} does not split over num_machines = "
            f"{loaded.num_machines}: give every machine the same number of ranks"
        )
    if problems:
        raise ParamsError(f"{config}: {problems[0]}")


def launch_args(
    module: str,
    processes: int,
    *,
    use_cpu: bool,
    config_name: str = "",
    port: int = 29500,
    script_args: Sequence[str] = (),
) -> list[str]:
    """The `accelerate launch` arguments that run `python -m module *script_args` in `processes`
    ranks.

    Plain DDP goes through `--multi_gpu` even on CPU: it is accelerate's torchrun launcher, and
    the Trainer picks gloo when `use_cpu` is set (`--cpu` alone would start a single process).

    >>> launch_args("stages.train", 2, use_cpu=True, port=29600)
    ['--multi_gpu', '--num_processes', '2', '--num_machines', '1', '--mixed_precision', 'no', \
'--dynamo_backend', 'no', '--main_process_ip', '127.0.0.1', '--main_process_port', '29600', '-m', \
'stages.train']
    >>> launch_args("stages.train", 8, use_cpu=False, config_name="fsdp", port=1)[:4]
    ['--config_file', 'configs/accelerate/fsdp.yaml', '--num_processes', '8']
    """
    config = accelerate_config_file(config_name)
    if config is not None:
        head = ["--config_file", str(config), "--num_processes", str(processes)]
    else:
        head = [
            "--multi_gpu",
            "--num_processes",
            str(processes),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
        ]
    # several machines meet at the config's main_process_ip:port; one machine takes a free port
    # on the loopback (its store listens there only: store_on_loopback)
    rendezvous = (
        ["--main_process_ip", LOOPBACK, "--main_process_port", str(port)]
        if machines(config_name) == 1
        else []
    )
    return [*head, *rendezvous, "-m", module, *script_args]


@contextmanager
def store_on_loopback():
    """While it is open, the store torchrun's one-machine rendezvous makes in this process (rank
    0's TCPStore, which every rank's object broadcast unpickles from) listens on 127.0.0.1 only.
    torch 2.13's TCPStore binds every interface and has no bind option, but takes a socket
    already listening (master_listen_fd): this wraps
    torch.distributed.elastic.rendezvous.static_tcp_rendezvous.TCPStore, a module attribute of
    torch's (2.13), to hand it one. Guarded by
    tests/test_distributed.py::test_the_one_machine_store_listens_on_the_loopback_only."""
    from torch.distributed.elastic.rendezvous import static_tcp_rendezvous as static

    real = static.TCPStore

    def loopback(host, port, world_size, is_master, *args, **kwargs):
        if is_master and "master_listen_fd" not in kwargs:
            listening = socket.socket()
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listening.bind((LOOPBACK, port))
            listening.listen()
            # the store owns the descriptor from here (it closes it): Python must not
            kwargs["master_listen_fd"] = listening.detach()
        return real(host, port, world_size, is_master, *args, **kwargs)

    static.TCPStore = loopback
    try:
        yield
    finally:
        static.TCPStore = real


def free_port() -> int:
    """A TCP port nobody listens on now (two runs at once must not share torchrun's 29500)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(
    stage: str,
    module: str,
    processes: int,
    *,
    use_cpu: bool,
    config_name: str = "",
    script_args: Sequence[str] = (),
) -> int:
    """Run `module` (with `script_args`) in `processes` ranks with accelerate's launcher; the exit
    code for the stage.

    An expected failure in a rank comes back as its one-line message, printed once; a bug still
    shows the rank's traceback (the rank prints it), never torchrun's own.
    """
    # torch and accelerate here, not at the top: ~1.5 s and ~1.8 s to import, and every stage
    # imports this module (through rlvr.pipeline.stage), most of them never launching ranks
    from accelerate.commands.launch import launch_command, launch_command_parser

    if config_name.startswith("deepspeed") and importlib.util.find_spec("deepspeed") is None:
        raise PipelineError(
            f"train.accelerate_config = '{config_name}' needs the deepspeed "
            "package, which is not installed here (pip install deepspeed on "
            "the GPU machine)"
        )
    import torch
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    if not use_cpu and torch.cuda.device_count() < processes:
        # accelerate would start them anyway, each training alone (distributed type NO)
        raise PipelineError(
            f"train.processes = {processes} with train.grpo.use_cpu false needs {processes} GPUs; "
            f"this machine has {torch.cuda.device_count()}: each process would train alone. On "
            "CPU set train.grpo.use_cpu true and train.accelerate_config '' (DDP over gloo)"
        )
    print(
        f"{stage}: launching {processes} processes with accelerate "
        f"({config_name or ('DDP, gloo' if use_cpu else 'DDP')})",
        file=sys.stderr,
    )
    args = launch_command_parser().parse_args(
        launch_args(
            module,
            processes,
            use_cpu=use_cpu,
            config_name=config_name,
            port=free_port(),
            script_args=script_args,
        )
    )
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="rlvr-ranks.") as failures:
        os.environ[FAILURES_ENV] = failures
        try:
            with store_on_loopback() if machines(config_name) == 1 else nullcontext():
                launch_command(args)
            return 0
        except ChildFailedError:
            reports = [p.read_text().strip() for p in Path(failures).glob("rank*")]
            for message in sorted(set(filter(None, reports))):
                print(message, file=sys.stderr)
            if not reports:  # no rank reported an expected failure: a crash, shown by the rank
                print(
                    f"{stage}: FAILED: a training process crashed (its traceback is above)",
                    file=sys.stderr,
                )
            return 1
        finally:
            os.environ.pop(FAILURES_ENV, None)


def report_failure(line: str) -> bool:
    """In a rank: hand an expected failure's line to the launcher (True), else False."""
    folder = os.environ.get(FAILURES_ENV)
    if not folder or not launched():
        return False
    Path(folder, f"rank{rank()}").write_text(line + "\n")
    return True


def die_with_launcher() -> None:
    """In a rank: be killed when the launcher dies. torchrun starts ranks in their own session,
    so a SIGKILL of the launcher's process group would otherwise leave them training."""
    if not launched() or not sys.platform.startswith("linux"):
        return

    launcher = os.getppid()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != launcher or launcher == 1:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def sum_over_ranks(counts: dict[str, int]) -> dict[str, int]:
    """Integer counts summed over every rank (the counts themselves outside a launched run)."""
    if world_size() == 1:
        return dict(counts)
    import torch
    import torch.distributed as dist

    names = sorted(counts)
    totals = torch.tensor([counts[name] for name in names], dtype=torch.int64)
    dist.all_reduce(totals)
    return dict(zip(names, (int(v) for v in totals.tolist())))


def from_main_process(compute):
    """compute() run once, on the main process; its (picklable) result on every rank."""
    if world_size() == 1:
        return compute()
    import torch.distributed as dist

    box = [compute() if is_main_process() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    """Wait for every rank (nothing outside a launched run)."""
    if world_size() > 1:
        import torch.distributed as dist

        dist.barrier()


def start_rank(stage: str, use_cpu: bool) -> None:
    """In a rank, before the stage's work: tie its life to the launcher's, join the process group
    (accelerate's PartialState, which the Trainer then reuses; checkpoint housekeeping needs it
    before the Trainer exists) and say once which rank this is."""
    from accelerate import PartialState

    die_with_launcher()
    PartialState(cpu=use_cpu)
    print(f"{stage}: rank {rank()} of {world_size()} running (pid {os.getpid()})", flush=True)


def end_rank() -> None:
    """In a rank whose work ended well: leave the process group (accelerate's
    destroy_process_group). Left to the interpreter's exit, Gloo's worker threads can outlive it
    and abort the rank after its work is done (SIGABRT, "terminate called without an active
    exception": seen once in CI's two-rank test under load, 2026-12-04; pytorch/pytorch#190489).
    Not after a failure: a rank still in a collective would wait for this one forever."""
    from accelerate import PartialState

    if world_size() > 1:
        PartialState().destroy_process_group()
