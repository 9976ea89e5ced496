"""Print, as JSON, digests of what the pipeline's code computes in this process: a short warm
start (prepare_model's), two GRPO steps from it (the trainer's), and sampled completions (the
audit's generation path). tests/test_numerics.py runs it under settings another CPU would change.

    python -m tests.numerics_probe OUT_DIR      (in a project copy: `import stages` pins the
                                                 numerics from its params.yaml `runtime`)
"""

import dataclasses
import hashlib
import json
import sys

import stages  # noqa: F401  (pins torch's numerics from ./params.yaml: before torch is imported)
from rlvr.core.numerics import numerics_in_force
from rlvr.data.rows import read_rows
from rlvr.grpo.run import run_grpo
from rlvr.params.config import load_params
from rlvr.policy.models import load_policy, prepare_base
from rlvr.policy.sampling import generate, rollout_settings


def digest(model) -> str:
    md5 = hashlib.md5()
    for name, tensor in sorted(model.state_dict().items()):
        md5.update(name.encode())
        md5.update(tensor.detach().contiguous().numpy().tobytes())
    return md5.hexdigest()


def main(out: str) -> None:
    params = load_params()
    rows = read_rows(params.data.train_path)
    model = dataclasses.replace(
        params.model, warm_start=dataclasses.replace(params.model.warm_start, steps=20)
    )
    prepare_base(model, rows, params.seed, f"{out}/base")
    base, tokenizer = load_policy(f"{out}/base")
    trainer = run_grpo(params, rows, f"{out}/base", f"{out}/grpo", 2)
    samples = generate(
        trainer.model,
        tokenizer,
        [row.prompt for row in rows[:8]],
        rollout_settings(params, n=4, seed=3),
    )
    print(
        json.dumps(
            {
                "numerics": numerics_in_force(),
                "base": digest(base),
                "trained": digest(trainer.model),
                "samples": hashlib.md5(json.dumps(samples).encode()).hexdigest(),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
