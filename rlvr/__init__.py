"""rlvr: a reproducible GRPO post-training pipeline with verifiable rewards (the library).

Everything the project runs stays offline and quiet: no model hub, no analytics. These defaults are
set before any Hugging Face, DVC, Great Expectations or Prefect import can read them.
"""

import os

for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "DVC_NO_ANALYTICS": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_name, _value)
