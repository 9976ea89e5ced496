"""Stage publish: models/final, the trained weights with a README.md model card.

    dvc repro publish               (or: python -m stages.publish)

Runs after report. Copies models/trained (what train saved: full weights, or a LoRA adapter) to
models/final and writes its model card (rlvr.model_card): the base model, the data md5s, the key
params, the audit's headline figures and verdict (metrics/eval.json), the commit and the code
digest. The folder loads with `from_pretrained` as it is (through peft for an adapter).
"""

import json
from pathlib import Path

from rlvr.config import Params, data_files, test_file_reader
from rlvr.model_card import (ADAPTER_CONFIG, base_description, combined_digest, key_params,
                             model_card, publish_folder)
from rlvr.provenance import library_versions, provenance, read_lock, sources_state
from rlvr.stage import run_stage


def main(params: Params) -> int:
    paths = params.paths
    trained = Path(paths.trained_model)
    prov = provenance(data_files(params), [paths.base_model, paths.trained_model],
                      current_stage="publish", read_by=test_file_reader(params))
    adapter_file = trained / ADAPTER_CONFIG
    adapter = json.loads(adapter_file.read_text()) if adapter_file.exists() else None
    pretrained = params.model.init == "pretrained"
    card = model_card(
        folder=paths.final_model, base=base_description(params.model),
        base_hub_id=params.model.name_or_path if pretrained else None,
        base_md5=prov["models"][paths.base_model], adapter=adapter, data=prov["data"],
        params=key_params(params), metrics=json.loads(Path(paths.eval_metrics).read_text()),
        verdict_line=json.loads(Path(paths.eval_summary).read_text())["verdict_line"],
        samples=params.evaluate.samples, confidence=params.evaluate.confidence,
        git=sources_state(read_lock()), code_digest=combined_digest(prov["code"]),
        weights_md5=prov["models"][paths.trained_model],
        versions=library_versions(("torch", "transformers", "trl", "peft")))
    publish_folder(trained, paths.final_model, card)
    print(f"publish: {paths.final_model} = {trained} + model card {paths.final_model}/README.md")
    return 0


if __name__ == "__main__":
    run_stage("publish", main)
