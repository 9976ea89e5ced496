"""The policies: the tiny default, the local_llm, a pretrained model."""
