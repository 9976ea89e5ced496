"""Params profiles: a named list of DVC `-S` overrides in profiles/<name>.yaml (profiles/gpu.yaml:
a real model with LoRA, bf16 on CUDA, vLLM), applied to params.yaml by DVC's own code, exactly as
`dvc exp run -S ...` applies them. params.yaml itself stays the CPU default.

    python -m rlvr.params.profiles gpu                          # rewrite params.yaml with the profile
    python -m rlvr.params.profiles gpu --set model.name_or_path=Qwen/Qwen3-4B --out /tmp/params.yaml

The result is checked against every params rule (rlvr.params.config) before it replaces anything. The
GRPOConfig checks (rlvr.pipeline.checks, the check_params stage) run where the pipeline runs: TRL refuses
bf16 without a CUDA device, so a CPU machine can apply the profile but not train with it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from dvc.exceptions import InvalidArgumentError
from dvc.utils.hydra import apply_overrides as dvc_apply_overrides
from ruamel.yaml import YAML

from rlvr.core.files import share_with_umask
from rlvr.params.config import PARAMS_FILE, Params, ParamsError, load_params

PROFILES_DIR = Path("profiles")


def profile_path(name: str | Path) -> Path:
    """profiles/<name>.yaml, or `name` itself when it is a path to a YAML file."""
    path = Path(name)
    return path if path.suffix in (".yaml", ".yml") else PROFILES_DIR / f"{name}.yaml"


def read_profile(name: str | Path) -> list[str]:
    """The profile's overrides, in order; ParamsError naming the file if it is not a list of
    `key=value` strings."""
    path = profile_path(name)
    try:
        overrides = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ParamsError(f"{path}: cannot be read: {error}") from None
    if not (
        isinstance(overrides, list)
        and overrides
        and all(isinstance(o, str) and "=" in o for o in overrides)
    ):
        raise ParamsError(f"{path}: must be a list of `-S` overrides such as train.grpo.beta=0")
    return overrides


def apply_overrides(path: str | Path, overrides: list[str], where: str) -> Params:
    """Apply `-S` overrides to the params file at `path` in place with DVC's own code (what `dvc
    exp run -S` runs) and return the checked params; ParamsError starting with `where` if DVC or
    a params rule rejects them."""
    try:
        dvc_apply_overrides(path, overrides)
    except InvalidArgumentError as error:
        cause = " ".join(str(error.__cause__ or error).split())
        raise ParamsError(f"{where}: DVC cannot apply it: {cause}") from None
    try:
        return load_params(path)
    except ParamsError as error:
        raise ParamsError(
            f"{where}: gives a bad params.yaml: {str(error).removeprefix('params.yaml: ')}"
        ) from None


def apply_profile(
    name: str | Path,
    params_path: str | Path = PARAMS_FILE,
    out: str | Path | None = None,
    extra: list[str] | tuple = (),
) -> Params:
    """Write params_path with the profile's overrides (then `extra`) applied to `out` (params_path
    itself by default). Nothing is written unless the result keeps every params rule."""
    overrides = read_profile(name) + list(extra)
    out = Path(out or params_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(suffix=".yaml", dir=out.parent)
    os.close(handle)
    try:
        shutil.copyfile(params_path, scratch)
        share_with_umask(scratch)  # mkstemp's file is private; params.yaml is the team's
        params = apply_overrides(scratch, overrides, f"{profile_path(name)}")
        os.replace(scratch, out)
    finally:
        Path(scratch).unlink(missing_ok=True)
    return params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="a name in profiles/ (gpu) or a YAML file")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more `-S` override, applied after the profile's",
    )
    parser.add_argument("--params", default=str(PARAMS_FILE), help="the params file to start from")
    parser.add_argument("--out", help="where to write the result (default: --params itself)")
    args = parser.parse_args(argv)
    try:
        apply_profile(args.profile, args.params, args.out, args.set)
    except ParamsError as error:
        print(f"profiles: {error}", file=sys.stderr)
        return 1
    count = len(read_profile(args.profile)) + len(args.set)
    print(
        f"profiles: {args.out or args.params}: {profile_path(args.profile)} applied ({count} "
        "overrides, by DVC's -S code); every params rule holds. The check_params stage checks "
        "the GRPOConfig where it runs (bf16 needs a CUDA device)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
