"""What the pipeline writes for people: the retrospective, its plots and HTML, the model card,
provenance, metrics."""
