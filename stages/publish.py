"""Stage publish: models/final, the trained weights with a README.md model card.

    dvc repro publish               (or: python -m stages.publish)

Runs after report. Copies models/trained (what train saved: full weights, or a LoRA adapter) to
models/final and writes its model card (rlvr.model_card): the base model, the data md5s, the key
params, the audit's headline figures and verdict (metrics/eval.json), the commit and the code
digest. The folder loads with `from_pretrained` as it is (through peft for an adapter).
"""

from rlvr.config import Params
from rlvr.model_card import publish_folder, run_card
from rlvr.stage import run_stage


def main(params: Params) -> int:
    paths = params.paths
    publish_folder(paths.trained_model, paths.final_model, run_card(params))
    print(f"publish: {paths.final_model} = {paths.trained_model} + model card "
          f"{paths.final_model}/README.md")
    return 0


if __name__ == "__main__":
    run_stage("publish", main)
