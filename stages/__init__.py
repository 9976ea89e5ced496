"""One thin command per DVC stage (see dvc.yaml): parse params, call rlvr, write outputs."""
