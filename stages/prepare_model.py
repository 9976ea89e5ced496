"""Stage prepare_model: write the base policy, which is both the reference model and step 0.

    dvc repro prepare_model         (or: python -m stages.prepare_model)

model.init: tiny builds a Qwen3-architecture model and a character tokenizer locally and
warm-starts it on well-formed expressions over the training rows' numbers (never checked against
the targets, never from the held-out rows); model.init: local_llm trains a byte-level BPE tokenizer
on the training rows and builds a reduced random-init Qwen3 (rlvr/policy/local_llm.py), saved like a hub
model; model.init: pretrained records model.name_or_path.
Writes models/base/ and reports/prepare/summary.json.
"""

from rlvr.core.files import write_json
from rlvr.core.numerics import numerics_in_force
from rlvr.data.rows import read_rows
from rlvr.pipeline.stage import ParamsView, run_stage
from rlvr.policy.models import describe_base, prepare_base


def main(params: ParamsView) -> int:
    rows = read_rows(params.data.train_path)
    print(f"prepare_model: model.init = {params.model.init}")
    summary = prepare_base(params.model, rows, params.seed, params.paths.base_model)
    summary.pop("seconds")
    summary["numerics"] = numerics_in_force()  # what decided its bits (rlvr/core/numerics.py)
    write_json(params.paths.prepare_summary, summary)
    print(f"prepare_model: {describe_base(summary)} -> {params.paths.base_model}")
    return 0


if __name__ == "__main__":
    run_stage("prepare_model", main)
