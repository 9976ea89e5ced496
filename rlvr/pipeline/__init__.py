"""Running the stages: the frame every stage shares, the gate, check_params' checks, code deps,
orchestration for the flows, DVC experiments and their comparison."""
