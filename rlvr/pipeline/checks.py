"""Everything the check_params stage checks before any other stage runs: each value's rule
(rlvr.params.config), the reward names (the registry), the GRPOConfig and LoraConfig that TRL and peft
will build, and the same for every params.yaml the experiments flow would run."""

from __future__ import annotations

from pathlib import Path

from rlvr.grpo.config import check_trl_config
from rlvr.grpo.distributed import check_launch_config
from rlvr.params.config import PARAMS_FILE, Params, ParamsError, load_params
from rlvr.params.experiments import experiment_params
from rlvr.rewards.registry import check_reward_names


def check_run_params(params: Params) -> None:
    """What the stages of one run would find wrong with these params, found now."""
    check_reward_names(params.rewards.funcs)
    # before TRL's: on a machine without GPUs TRL refuses any GPU config, this check still says
    check_launch_config(params.train.accelerate_config, params.train.processes)
    check_trl_config(params)
    report = params.report
    if report.slice_drop_to >= report.slice_drop_from:  # else every tag would count as forgotten
        raise ParamsError(
            f"params.yaml: report.slice_drop_to = {report.slice_drop_to!r}: must be "
            f"below report.slice_drop_from ({report.slice_drop_from!r})"
        )


def check_params_file(path: str | Path = PARAMS_FILE) -> Params:
    """The params of `path`, checked with every experiment the flow would derive from them;
    raises ParamsError (one line naming the key, or the experiment and its key)."""
    params = load_params(path)
    check_run_params(params)
    for where, overrides, experiment in experiment_params(path):
        try:
            check_run_params(experiment)
        except ParamsError as error:
            raise ParamsError(
                f"params.yaml: {where} = {overrides!r}: gives a bad params.yaml: "
                f"{str(error).removeprefix('params.yaml: ')}"
            ) from None
    return params
