"""Stage check_params: check all of params.yaml before any stage deletes or rewrites anything.

    dvc repro check_params          (or: python -m stages.check_params)

DVC removes a stage's outputs before the stage's command starts, so a bad value found by the smoke
stage would already have cost the previous smoke results. This stage runs first (the gate depends
on its verdict and every other stage on the gate's), declares all of params.yaml, and checks
(rlvr/pipeline/checks.py) every field's rule, the reward names, the GRPOConfig and LoraConfig that TRL and
peft will build, and the same for every params.yaml the experiments flow would run. It writes
paths.params_check (`persist` in dvc.yaml, so a failure keeps the previous one); its bytes are
the same for every valid params.yaml, so the stages after it rerun only when their own params
change. A bad value exits non-zero with one line naming it.
"""

from rlvr.core.files import write_json
from rlvr.params.config import PARAMS_FILE, Params
from rlvr.pipeline.checks import check_params_file
from rlvr.pipeline.stage import run_stage


def main(params: Params) -> int:
    check_params_file(PARAMS_FILE)
    write_json(params.paths.params_check, {"params": str(PARAMS_FILE), "valid": True})
    print(f"check_params: {PARAMS_FILE} is valid")
    return 0


if __name__ == "__main__":
    run_stage("check_params", main, gated=False)
