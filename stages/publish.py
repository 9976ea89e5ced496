"""Stage publish: models/final, the trained weights with a README.md model card.

    dvc repro publish               (or: python -m stages.publish)

Runs after report. Copies the published seed's models/trained/seed-<n> (picked on the validation
rows by stage recipe; what train saved: full weights, or a LoRA adapter) to models/final and
writes its model card (rlvr.report.model_card): which seed and why, the base model, the data md5s, the
key params, the seed's headline figures and verdict beside the recipe's over its seeds, the
commit and the code digest. The folder loads with `from_pretrained` as it is (through peft for an adapter).
"""

from rlvr.pipeline.stage import ParamsView, run_stage
from rlvr.report.model_card import publish_folder, run_card


def main(params: ParamsView) -> int:
    paths = params.paths
    weights, card = run_card(params)
    publish_folder(weights, paths.final_model, card)
    print(f"publish: {paths.final_model} = {weights} + model card {paths.final_model}/README.md")
    return 0


if __name__ == "__main__":
    run_stage("publish", main)
