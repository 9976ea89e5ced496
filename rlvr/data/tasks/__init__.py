"""Tasks: generators of prompt+verifier rows for the pipeline's default datasets."""
