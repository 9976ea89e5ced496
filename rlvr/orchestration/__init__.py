"""Running the pipeline from outside its stages: what the flows, the scripts and the team call.

    runs.py         the stage list, dvc repro in a workspace, failures, the lock, artifacts
    experiments.py  DVC experiments: ablations, sweep and grids queued and run
    comparison.py   experiments compared: every run, each setting against the default

No stage runs this code (dvc.yaml's code deps never list it): an edit here reruns nothing.
"""
