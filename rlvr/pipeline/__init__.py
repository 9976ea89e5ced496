"""Running the stages: the stage frame, the gate, code deps, orchestration, experiments, faults, the console."""
